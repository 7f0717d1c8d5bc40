"""Hostile input, round twenty (fuzzA2, on the surfaces of the Hydra prefixes, the IBGDA line and the later
sentences): each case failed before its fix. Speed is not timed here: what made a line slow is a regex shape, which
is checked as such."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from hostile_kit import assert_one_line, run_cli

from mbridge_overlap import api
from mbridge_overlap.cli import options
from mbridge_overlap.errors import UsageError


try:  # (Python 3.11 moved them; the old names warn)
    from re import _constants as C, _parser as sre_parse
except ImportError:
    import sre_constants as C
    import sre_parse

ROOT = Path(__file__).resolve().parents[2]
NATIVE = yaml.safe_load((ROOT / "mbridge_overlap" / "data" / "native_messages.yaml").read_text())["messages"]
_ONE_CHARACTER = (C.IN, C.LITERAL, C.NOT_LITERAL, C.ANY, C.CATEGORY)


def _unguarded_lead(items) -> bool:
    """Whether a match of these parsed items can begin with an unbounded run of one character class that no
    lookbehind before it holds to the run's start: re.search then tries the run from each of its characters, and a
    run of n characters before a line that then fails costs n * n / 2 steps (a 64 Ki line: minutes)."""
    for op, av in items:
        if op == C.ASSERT_NOT and av[0] == -1:  # (?<!...): the run starts where its class starts
            return False
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            low, high, sub = av
            if high == C.MAXREPEAT and len(sub) == 1 and sub[0][0] in _ONE_CHARACTER:
                return True
            if _unguarded_lead(sub):
                return True
            if low:
                return False
            continue  # optional: what follows can begin the match too
        if op == C.SUBPATTERN:
            if _unguarded_lead(av[-1]):
                return True
            return False
        if op == C.BRANCH:
            return any(_unguarded_lead(b) for b in av[1])
        if op == C.AT:
            continue
        return False
    return False


def test_the_helper_tells_a_guarded_lead_from_an_unguarded_one():
    assert _unguarded_lead(sre_parse.parse(r"(\d+): device used"))
    assert _unguarded_lead(sre_parse.parse(r"(?:(\S*x\.cpp):)?(?:f:(\d+): )?init failed"))
    assert not _unguarded_lead(sre_parse.parse(r"(?<!\d)(\d+): device used"))
    assert not _unguarded_lead(sre_parse.parse(r"(?:(?<!\S)(\S*x\.cpp):)?(?:f:(\d+): )?init failed"))
    assert not _unguarded_lead(sre_parse.parse(r"NVSHMEM (\w+) failed"))


@pytest.mark.parametrize("entry", NATIVE, ids=lambda e: e["id"])
def test_no_native_pattern_starts_with_an_unguarded_run(entry):
    # fuzzA2: a native pattern is searched with re.search whole (messages._Matcher.search: no _place, tokens None);
    # native.nvshmem_ibgda_init_failed's leading (\S*transport\.cpp) took 0.5 s a line behind a 40 KB token (10 such
    # lines 5.4 s), native.ub_device_reset's (\d+) 4.4 s a line behind 20,000 digits; the matcher reads 64 Ki
    # characters of a line
    assert not _unguarded_lead(sre_parse.parse(entry["pattern"])), entry["pattern"]


@pytest.mark.parametrize("entry_id,text,groups", [
    ("nvshmem_ibgda_init_failed", "[rank3]:/tmp/src/host/transport/transport.cpp:nvshmemi_transport_init:282: init "
     "failed for transport: IBGDA", ("[rank3]:/tmp/src/host/transport/transport.cpp", "282")),
    ("nvshmem_ibgda_init_failed", "x transport.cpp:f:281: init failed for transport: IBGDA", (None, None)),
    ("ub_device_reset", "[rank1]:12: device used 0[8] ,resetting device to 1", None),
    ("ub_device_reset", "x 12: device used 0[8] ,resetting device to 1", ("12", "0", "8", "1")),
])
def test_a_guarded_native_pattern_reads_what_it_read(entry_id, text, groups):
    # the guard leaves the leftmost match where it was: a run's start is where any match inside it could begin
    (entry,) = [e for e in NATIVE if e["id"] == entry_id]
    got = re.search(entry["pattern"], text)
    assert got is not None
    if groups is not None:
        assert got.groups() == groups
    else:
        assert got.group(1) == "12" or got.group(1).endswith("12")


MODEL = ("model:\n  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  num_layers: 4\n  hidden_size: 256\n"
         "  num_attention_heads: 4\n  seq_length: 2048\n  tensor_model_parallel_size: 2\n")


def _refusal(word: str, words=(), **inputs) -> str | None:
    try:
        api.resolve(options.overrides_of(list(words) or [word]), gpus=16, gpu="h100", **inputs)
    except UsageError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("made_by", ["file", "recipe", "none"])
def test_the_comm_overlap_key_itself_is_judged_as_hydra_judges_it(tmp_path, made_by):
    # fuzzA2: the section's own key is a ConfigContainer field, always in Bridge's config: the bare comm_overlap=null
    # was refused where the config file made the section ("Could not override 'comm_overlap'"), and
    # +comm_overlap=null was taken where a section is there (the file's, or llama3_70b's CommOverlapConfig). Real
    # 0.6.2 (process_config_with_overrides, hydra config_loader_impl.py:370-385): bare and ++ taken, + refused
    # ("Could not append to config. An item is already at 'comm_overlap'") where the section is not null, + with a
    # mapping merged
    path = tmp_path / "run.yaml"
    path.write_text(MODEL + "dataset:\n  seq_length: 2048\n"
                    + ("comm_overlap:\n  tp_comm_overlap: true\n" if made_by == "file" else ""))
    inputs = {"recipe": "llama3_70b_pretrain_config"} if made_by == "recipe" else {"config": str(path)}
    assert _refusal("comm_overlap=null", **inputs) is None
    assert _refusal("++comm_overlap=null", **inputs) is None
    assert _refusal("+comm_overlap={tp_comm_overlap:false}", **inputs) is None
    said = _refusal("+comm_overlap=null", **inputs)
    if made_by == "none":
        assert said is None
    else:
        assert said is not None and "Could not append to config. An item is already at 'comm_overlap'" in said, said


@pytest.mark.parametrize("verb", [("resolve", "--gpus", "8"), ("lint", "--recipe", "llama3_8b_pretrain_config"),
                                  ("diff", "--recipe", "llama3_8b_pretrain_config"), ("plan", "--gpus", "8"),
                                  ("diagnose", "-")])
@pytest.mark.parametrize("word", ["~comm_overlap.cuda_device_max_connections", "~model.sequence_parallel=true",
                                  "~model.x\x1b[31m"])
def test_a_hydra_deletion_is_said_to_be_one(verb, word):
    # fuzzA2: resolve's every-fix line writes ~KEY (LAUNCH_ENV_NOT_COMM_OVERLAP_FIELD's removal), a word Bridge's
    # Hydra takes (a delete); pasted back it was 'expected KEY=VALUE', and lint, diff and diagnose took it for a file
    # ('~model.sequence_parallel: Could not determine home directory.', 'no such file or directory')
    proc = run_cli(*verb, word, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc)
    assert "a Hydra deletion (~KEY)" in proc.stderr.decode(), proc.stderr


@pytest.mark.parametrize("words,refused", [
    (["++ddp.overlap_grad_reduce=true", "+ddp.overlap_grad_reduce=false"], True),
    (["+ddp.bucket_size=4", "+ddp.bucket_size=8"], True),
    (["ddp.bucket_size=4", "+ddp.bucket_size=8"], True),
    (["ddp.bucket_size=null", "+ddp.bucket_size=4"], False),
    (["ddp.bucket_size=4", "ddp.bucket_size=null", "+ddp.bucket_size=8"], False),
    (["train.global_batch_size=2", "train.global_batch_size=4"], False),
])
def test_a_word_on_a_key_an_earlier_word_set_meets_its_value(words, refused):
    # fuzzA2: the overrides were a dict, so a later word on the same key kept the first word's prefix with its own
    # value: ++KEY=a +KEY=b and +KEY=a +KEY=b were taken. Hydra applies the words in turn (real 0.6.2
    # process_config_with_overrides over _pretrain_common: the first two refused with 'Could not append to config.
    # An item is already at', +KEY after KEY=null taken)
    said = None
    try:
        options.overrides_of(words)
    except UsageError as exc:
        said = str(exc)
    assert (said is not None) == refused, said
    if refused:
        assert "Could not append to config. An item is already at 'ddp." in said, said


def test_the_first_word_on_a_key_is_judged_as_written():
    # fuzzA2: +KEY=2 ++KEY=4 over a held key is refused for its first word, which the line quoted with the last value
    # ('+model.tensor_model_parallel_size=4'); Hydra refuses '+model.tensor_model_parallel_size=2'
    said = _refusal("", recipe="llama3_8b_pretrain_config", words=["+model.tensor_model_parallel_size=2",
                                                                    "++model.tensor_model_parallel_size=4"])
    assert said is not None and "'+model.tensor_model_parallel_size=2'" in said and "=4" not in said, said
