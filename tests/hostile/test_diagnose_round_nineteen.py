"""Hostile input, round nineteen (fuzzY's Y2 report on the diagnose surfaces of fresh16): each case failed before its
fix. Speed is not timed here: the cases count what is read in full or copied, which is what made the logs slow."""

from __future__ import annotations

import io

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import reader, scan as scan_
from mbridge_overlap.errors import UsageError

MESSAGE = ('    assert not cfg.fp8_param_gather or cfg.fp8_recipe == "delayed", (\n'
           '        "When `--fp8-param-gather` is enabled, the optimizer cpu offload "\n'
           "        'must be used in conjunction with `--fp8-recipe delayed`.'\n"
           "    )\n")


def _diagnose(path=None, text=None) -> dict:
    if path is not None:
        return api.diagnose([str(path)]).to_dict()
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode("utf-8"))).to_dict()


def _reads(monkeypatch) -> list:
    """The lines Scan._read reads in full, from now on."""
    seen: list = []
    real = scan_.Scan._read

    def counted(self, line):
        seen.append(line.text)
        return real(self, line)

    monkeypatch.setattr(scan_.Scan, "_read", counted)
    return seen


def test_lines_of_quoted_strings_stay_on_the_fast_path(tmp_path, monkeypatch):
    # Y2-1: every line that was a Python string literal left the block fast path (a million '"step N"' lines: 1 s -> 31 s)
    logs = {"var.log": "".join(f'    "step {i}"\n' for i in range(3000)),
            "json.log": "[\n" + "".join(f'  "sample text number {i}",\n' for i in range(3000)) + '  "end"\n]\n',
            "pprint.log": "".join(f"['a {i}',\n 'b {i}']\n" for i in range(1000))}
    for name, text in logs.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        seen = _reads(monkeypatch)
        assert _diagnose(path)["causes"] == []
        assert len(seen) <= 2, (name, len(seen), seen[:3])


def test_a_message_joined_after_an_opening_parenthesis_is_still_read(tmp_path, monkeypatch):
    # Y2-1's fix keeps 038808e's join (fresh16 F16-1): after `assert cond, (` / `raise X(` / `logger.warning(`, on
    # either side of a block's end, through the block reader and line by line alike
    pad = "".join(f'    "step {i}"\n' for i in range(50))
    raise_form = MESSAGE.replace('    assert not cfg.fp8_param_gather or cfg.fp8_recipe == "delayed", (\n',
                                 "    raise ValueError(\n")
    for text in (MESSAGE, pad + MESSAGE + pad, pad + raise_form, "x = 1\n" + MESSAGE):
        path = tmp_path / "pasted.log"
        path.write_text(text, encoding="utf-8")
        want = [c["id"] for c in _diagnose(path)["causes"]]
        assert want and want == [c["id"] for c in _diagnose(text=text)["causes"]], text[:80]
        for block in (16, 64, 100, 200):  # the opener the last line of one block, its literals in the next
            monkeypatch.setattr(reader, "BLOCK", block)
            assert [c["id"] for c in _diagnose(path)["causes"]] == want, block
        monkeypatch.undo()
    # the same two literals with no line opening them (a list's items, samples) are two lines, not one message
    bare = "".join(MESSAGE.splitlines(keepends=True)[1:3])
    assert _diagnose(text=bare)["causes"] == []


def _reference(pieces: list) -> str:
    """What the run's line was before Y2-6's change: _grow over every piece (its first and last MAX_LINE bytes)."""
    head, tail, dropped = b"", b"", 0
    for p in pieces:
        head, tail, dropped = reader._grow(head, tail, dropped, p)
    return reader._text(head, tail, dropped)


def test_a_never_closed_chain_of_tiny_partial_records_adds_in_place():
    # Y2-6: each piece of a run past MAX_LINE copied the whole kept tail (2e6 one-byte CRI P records: 14 s, 13x a plain
    # log); the tail is now added to in place, the same first and last MAX_LINE bytes and the same cut note kept
    runs = reader._Runs("x.log", None)
    pieces = [bytes([97 + i % 26]) * (1 + i % 7) for i in range(3 * reader.MAX_LINE // 4)]
    tails, longest = set(), 0
    for p in pieces:
        runs.add(runs.cri, "stderr", 1, p)
        tail = runs.cri["stderr"][2]
        longest = max(longest, len(tail))
        if len(tail) > reader.MAX_LINE:
            tails.add(id(tail))
    assert len(tails) == 1  # one buffer for the whole run, not one copy a piece
    assert longest <= 2 * reader.MAX_LINE
    (line,) = list(runs.rest())
    assert line.text == _reference(pieces) and line.number == 1
    assert line.cut == sum(map(len, pieces)) - 2 * reader.MAX_LINE


def test_partial_records_over_the_caps_read_as_before(tmp_path):
    # the block reader's CRI runs and docker runs, ended and never ended, equal _grow's line (the same cut note)
    stamp = "2025-03-04T05:06:07.123456789Z"
    big = ["AssertionError: " + "y" * 70_000] + ["z" * 90_000] * 4 + ["end of it"]
    cri = "".join(f"{stamp} stderr P {p}\n" for p in big[:-1]) + f"{stamp} stderr F {big[-1]}\n"
    path = tmp_path / "cri.log"
    path.write_text(cri + f"{stamp} stdout F tail\n" + "".join(f"{stamp} stderr P {p}\n" for p in big), encoding="utf-8")
    got = [x for part in reader.blocks(str(path)) for x in ([part] if isinstance(part, reader.Line) else [])]
    want = _reference([p.encode() for p in big])
    assert [x.text for x in got if x.text.startswith("AssertionError")] == [want, want]


def _frame(code: str, exc: str = "KeyError: foo") -> str:
    return f'Traceback (most recent call last):\n  File "/work/mine/train.py", line 12, in main\n    {code}\n{exc}\n'


def test_an_overlap_function_named_in_a_comment_or_a_string_is_no_call():
    # Y2-2: `_CALL.finditer` over the raw code line counted names inside `# ...` and inside string literals
    for code in ("x = my_fn(x)  # was tensor_parallel.scatter_to_sequence_parallel_region(x)",
                 'logger.info("not using gather_from_sequence_parallel_region() here, %s", cfg[k])',
                 'print("see parallel_state.initialize_model_parallel(...) docs", cfg["x"])',
                 "msg = 'tensor_parallel.scatter_to_sequence_parallel_region(x)' if a else b",
                 # lines Python does not parse alone: their comments and strings are taken out first
                 'logger.info("see tensor_parallel.scatter_to_sequence_parallel_region(x)",',
                 "if ok:  # parallel_state.initialize_model_parallel(2)",
                 'x = f("""tensor_parallel.gather_from_sequence_parallel_region(x)'):
        assert _diagnose(text=_frame(code))["causes"] == [], code
    # a real call still is one, whether the line parses (a statement) or not (a call's first line, an if)
    for code in ("hidden = tensor_parallel.scatter_to_sequence_parallel_region(hidden)  # 'sp'",
                 "hidden = tensor_parallel.scatter_to_sequence_parallel_region(",
                 'if parallel_state.initialize_model_parallel(2) and name == "x":',
                 'y = g("a", tensor_parallel.scatter_to_sequence_parallel_region(x))'):
        assert [c["id"] for c in _diagnose(text=_frame(code))["causes"]] == ["OVERLAP_PATH_TRACEBACK"], code


def test_a_dump_line_s_pairs_start_at_a_word():
    # found beside Y2-6: settings._PAIR tried a match at every character of a long word, each scanning the rest of
    # it (a docker chain of 40,000 one-byte pieces joined into one line: 44 s, a 128 KiB word: minutes)
    from mbridge_overlap.diagnose import settings

    assert settings._PAIR.search("x" * 5000 + "=1") is not None
    assert settings._PAIR.search("x" * 5000 + "=1", 1) is None  # (inside the word: no start)
    for line, n in (("lr=0.1, wd=0.01, tp=2, pp=4", 4), ("a.b.c = 4, d:e", 2), ("--tp=2 --cp=1", 2)):
        assert len(settings._PAIR.findall(line)) == n, line


def test_a_sentence_led_by_a_one_letter_word_or_a_pronoun_is_not_the_message():
    # Y2-3: WORD reads no one-letter word, so "I" (and "a") before the message's words passed fresh16 F16-2's lead
    # check that "we" fails; "i" was also LEAD's level letter, and any stop word ("it", "this") passed
    tail = "use --overlap-param-gather with --overlap-grad-reduce and it works, but expected more speedup.\n"
    for lead in ("I ", "a ", "We ", "it must ", "this must ", "Q: must I ", "I: "):
        assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" not in [c["id"] for c in _diagnose(text=lead + tail)["causes"]], lead
    # a prefix's level letter before a time, an exception's name, and the message's own words still read as it
    for line in ("[NeMo E 2025-03-04 05:06:07 arguments:12] must use overlap param gather with overlap grad reduce\n",
                 "E0304 05:06:07.123 must use overlap param gather only with overlap grad reduce\n",
                 "must use overlap param gather only with overlap grad reduce\n"):
        assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" in [c["id"] for c in _diagnose(text=line)["causes"]], line


def test_first_and_last_stage_counts_past_num_layers_are_said_and_costed_so():
    # Y2-5: PP 3 with first 32 and last 2 on a 32-layer model (Megatron-Core's middle rank gets -2 layers) was costed
    # as an even split of about 11 layers a rank, and nothing said it
    words = {"model.tensor_model_parallel_size": 1, "model.context_parallel_size": 1,
             "model.pipeline_model_parallel_size": 3, "model.virtual_pipeline_model_parallel_size": None}
    over = api.budget({**words, "model.num_layers_in_first_pipeline_stage": 32, "model.num_layers_in_last_pipeline_stage": 2},
                      recipe="llama3_8b_pretrain_config", model="llama3_8b", gpus=24).to_dict()["budget"]
    said = [a for a in over["assumptions"] if "get_num_layers_to_build" in a]
    assert len(said) == 1 and "the middle pipeline rank -2 layers" in said[0] and "not an even split" in said[0]
    # (costrank: the longest iteration under the schedule is costed: every rank ends with the pipeline, then its own
    # once-an-iteration tail; the last rank's, with the output layer's gradients in its DP buffers, is the longer)
    assert any("(32, 0, 2 on the 3 pipeline ranks): the budget costs pipeline rank 2" in a for a in over["assumptions"])
    assert over["pipeline"]["costed_rank"] == 2 and over["pipeline"]["busiest_rank"] == 0
    # recheck67 AN-2: Megatron-Core builds the first rank's whole count (one layer's spec: [spec] x the count), not
    # num_layers at most: 10**30 + 1 layers are past what a budget costs, refused in bounded time and memory
    with pytest.raises(UsageError, match="builds 1,000,000,000,000,000,000,000,000,000,001 decoder layers"):
        api.budget({**words, "model.pipeline_model_parallel_size": 4, "model.num_layers_in_first_pipeline_stage": 10**30 + 1},
                   recipe="llama3_8b_pretrain_config", model="llama3_8b", gpus=32)


def test_a_first_stage_count_past_num_layers_is_costed_as_built():
    # recheck67 AN-2: llama3_8b PP 2, num_layers_in_first_pipeline_stage=40: Megatron-Core 0.19.2 and 0.18.2 build 40
    # layers on rank 0 with Bridge's one-layer spec (tests/bridge/test_budget_layout_stages.py builds it), the decoder
    # block spec 32 (its slice of the model's 32 layer specs); the budget capped rank 0 at 32 and said "at most 32"
    words = {"model.pipeline_model_parallel_size": 2, "model.num_layers_in_first_pipeline_stage": 40,
             "model.seq_length": 4096, "dataset.seq_length": 4096, "train.global_batch_size": 64, "train.micro_batch_size": 1}
    b = api.budget(words, model="llama3_8b", gpus=16, gpu="h100").to_dict()["budget"]
    (said,) = [a for a in b["assumptions"] if "get_num_layers_to_build" in a]
    assert "the ranks build 40, 0 decoder layers, 40 in all where the model has 32" in said and "at most" not in said
    assert "get_gpt_decoder_block_spec slices the model's 32 layer specs at each rank's offset instead: 32, 0" in said
    assert any("(40, 0 on the 2 pipeline ranks)" in a for a in b["assumptions"])
