"""Texts that name a message's words without being the message (fresh16 F16-2), and messages quoted in the forms a
thread or a log carries them (F16-1, F16-5): the texts here are written for these tests."""

import io

from conftest import diagnose_causes as causes
from mbridge_overlap import api
from mbridge_overlap.diagnose import fuzzy, messages


def ids(text: str) -> list[str]:
    return [c["id"] for c in causes(text)]


def test_prose_naming_the_flags_of_a_check_is_not_the_check():
    """A sentence that names both flags of "Must use --overlap-param-gather with --overlap-grad-reduce" (and reads as
    an error by its "expected") carries no exception's or level's mark and is not worded as the message."""
    text = ("We use --overlap-grad-reduce and --overlap-param-gather with the distributed optimizer, but the expected "
            "overlap does not show up in the profile.\n")
    assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" not in ids(text)


def test_the_same_words_with_an_exception_s_mark_or_in_the_message_s_order_still_match():
    cat = messages.load()
    fz = fuzzy.for_catalog(cat)
    marked = fz.match("AssertionError: You must use --overlap-param-gather together with --overlap-grad-reduce")
    assert marked and cat.by_id(marked[0].id).template.startswith("Must use --overlap-param-gather")
    ordered = fz.match("must use overlap param gather only with overlap grad reduce")
    assert ordered and ordered[0].id == marked[0].id
    assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" in ids("AssertionError: You must use --overlap-param-gather together with "
                                                   "--overlap-grad-reduce\n")


def test_a_message_raised_without_a_setting_is_not_a_text_that_shows_it_on():
    """The check's condition is overlap_grad_reduce (under overlap_param_gather): a line that shows the setting on
    (a command line's flags, name=true, Megatron-LM's arguments dump) is not that failure."""
    cat = messages.load()
    entry = next(e for e in cat.entries if e.template == "Must use --overlap-param-gather with --overlap-grad-reduce")
    assert fuzzy.required(entry) == ("overlap_grad_reduce",)
    assert fuzzy.contradicted(entry, entry.template) is None  # its own "with --overlap-grad-reduce" says nothing
    for shown in ("launched: torchrun train.py --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather",
                  "config has overlap_grad_reduce=True", "overlap_grad_reduce: true",
                  "  overlap_grad_reduce ........................ True"):
        assert fuzzy.contradicted(entry, shown) == "overlap_grad_reduce", shown
        line = f"AssertionError: must use overlap-param-gather with overlap-grad-reduce ({shown.strip()})"
        assert fz_match(line) is None, line
    for off in ("overlap_grad_reduce=False", "--overlap-grad-reduce"):
        assert fuzzy.contradicted(entry, off) is None, off
    # exact text: what lies beside the message on its line decides
    assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" not in ids(
        "args: --overlap-grad-reduce --overlap-param-gather AssertionError: Must use --overlap-param-gather with "
        "--overlap-grad-reduce\n")
    assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" in ids("AssertionError: Must use --overlap-param-gather with --overlap-grad-reduce\n")


def fz_match(line: str):
    return fuzzy.for_catalog(messages.load()).match(line)


def test_a_raise_under_a_negated_test_requires_that_setting_off():
    entry = messages.Entry(id="x", origin="python", kind="raise", severity="error", topic="dp_overlap",
                           template="a message", branch=("args.overlap_param_gather and not args.overlap_grad_reduce",))
    assert fuzzy.required(entry) == ("overlap_grad_reduce",)
    local = messages.Entry(id="y", origin="python", kind="assert", severity="error", topic="dp_overlap",
                           template="a message", condition="ok or HAVE_TE")
    assert fuzzy.required(local) == ()


def test_an_assert_s_message_quoted_from_source_is_read_as_python_joins_it(tmp_path):
    """Adjacent string literals over several lines (an assert's message in parentheses, a raise's argument) are the
    one message Python concatenates, recorded at the first literal's line; neither half matches alone."""
    log = tmp_path / "pasted.txt"
    log.write_text('    assert not cfg.fp8_param_gather or cfg.fp8_recipe == "delayed", (\n'
                   '        "When `--fp8-param-gather` is enabled, the optimizer cpu offload "\n'
                   "        'must be used in conjunction with `--fp8-recipe delayed`.'\n"
                   "    )\n", encoding="utf-8")
    d = api.diagnose([str(log)]).to_dict()
    ev = [e for c in d["causes"] for e in c["evidence"]]
    assert ev and ev[0]["logged"].startswith("When `--fp8-param-gather` is enabled, the optimizer cpu offload must be")
    assert ev[0]["first_seen"]["line"] == 2 and ev[0]["file"] == "megatron/training/arguments.py"
    # through the block reader and line by line alike (stdin), and a comma ends the join: a tuple, not one message
    assert [c["id"] for c in causes(log.read_text())] == [c["id"] for c in d["causes"]]
    assert ids('x = (\n    "When `--fp8-param-gather` is enabled, the optimizer cpu offload ",\n'
               '    "must be used in conjunction with `--fp8-recipe delayed`."\n)\n') == []


def test_a_traceback_s_code_line_that_is_a_literal_stays_its_frame_s():
    text = ('Traceback (most recent call last):\n  File "/opt/x/megatron/core/distributed/param_and_grad_buffer.py", '
            'line 10, in start_grad_sync\n    "some literal"\nTypeError: unsupported operand\n')
    assert ids(text) == ["OVERLAP_PATH_TRACEBACK"]


def test_a_message_several_packages_raise_names_every_place():
    """Bridge's setup.py and Megatron-LM's training.py write the same no_sync_func assert: both are named."""
    d = api.diagnose(["-"], stdin=io.BytesIO(
        b"AssertionError: When overlap_grad_reduce is True, config.no_sync_func must be None; a custom no_sync_func "
        b"is not supported when overlapping grad-reduce\n")).to_dict()
    ev = d["causes"][0]["evidence"][0]
    places = {ev["file"]} | {x["file"] for x in ev.get("also_raised", ())}
    assert {"megatron/bridge/training/setup.py", "megatron/training/training.py"} <= places, ev
    from mbridge_overlap.output.text import diagnosis

    shown = diagnosis(d)
    assert "also    megatron/training/training.py train" in shown or "also    megatron/bridge/training/setup.py" in shown


def test_a_code_line_calling_an_overlap_function_is_a_frame_inside_it():
    """A model's frame (off the path) whose printed code calls Megatron-Core's sequence-parallel scatter: the
    traceback is on the TP path as a frame inside scatter_to_sequence_parallel_region would be, cut or ended by a
    generic exception; a bare call of a catalog function's name through another module is not."""
    head = ('Traceback (most recent call last):\n  File "/work/mine/model/embed.py", line 12, in forward\n'
            "    hidden = tensor_parallel.scatter_to_sequence_parallel_region(hidden)\n")
    cut = causes(head)
    assert [c["id"] for c in cut] == ["OVERLAP_PATH_TRACEBACK_CUT"] and "model.sequence_parallel" in cut[0]["knobs"]
    ended = causes(head + "RuntimeError: shape mismatch\n")
    assert [c["id"] for c in ended] == ["OVERLAP_PATH_TRACEBACK"] and "model.sequence_parallel" in ended[0]["knobs"]
    assert ids(head.replace("tensor_parallel.scatter_to_sequence_parallel_region", "my_scatter") + "RuntimeError: x\n") == []
    assert ids('Traceback (most recent call last):\n  File "/work/mine/model/grid.py", line 3, in setup\n'
               "    mymodule.initialize_model_parallel(2)\nRuntimeError: x\n") == []
    assert ids('Traceback (most recent call last):\n  File "/work/mine/model/grid.py", line 3, in setup\n'
               "    parallel_state.initialize_model_parallel(2)\nRuntimeError: x\n") == ["OVERLAP_PATH_TRACEBACK"]
