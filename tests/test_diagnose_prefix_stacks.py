"""diagnose: a native message (TE userbuffers' C++ lines, NCCL's, CUDA's, the fatal-crash lines) is found behind any
stack of launcher prefixes, torchrun's `[default0]:` glued to it included (recheck64 AK1).

reader.split_prefix takes one rank prefix off a line; a native entry is found by its anchors, whitespace-separated
pieces of the line. torchrun's `[default0]:` has no space after it, so behind srun's `0: `, CRI's `<time> stdout F `,
Ray's `(Worker pid=..) ` or torch's `[rank0]:` the message's first word was the piece `[default0]:Fatal` and the
message was lost. messages.pieces now adds, at each line's start, the piece after the whole launcher prefix
(messages.LAUNCH_PREFIX, any stack of it) where that prefix is glued to it. The texts here are written for the test.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import messages
from mbridge_overlap.diagnose.reader import split_prefix

CAT = messages.load()

# Prefix stacks in front of torchrun's `[default0]:` (and two without it), as launchers and collectors write them.
STACKS = {
    "torchrun": "[default0]:",
    "srun+torchrun": "0: [default0]:",
    "torch+torchrun": "[rank0]:[default0]:",
    "cri+torchrun": "2025-01-01T00:00:00.123456789Z stdout F [default0]:",
    "cri-stderr+torchrun": "2025-01-01T00:00:00.123+02:00 stderr F [default3]:",  # (P: a partial record, joined)
    "ray+torchrun": "(MegatronWorker pid=1234) [default0]:",
    "ray-ip+torchrun": "(WorkerDict pid=1234, ip=10.0.0.1) [default0]:",
    "skypilot+torchrun": "(head, rank=0, pid=1234) [default0]:",
    "ray-noname+torchrun": "(pid=1234, ip=10.0.0.1) [default0]:",  # (no actor or task name: fuzzX X2-1)
    "mpirun+torchrun": "[1,0]<stdout>:[default0]:",
    "time+srun+torch+torchrun": "[2025-01-01 12:00:00,123] 7: [rank7]:[default7]:",
    "repeated": "0: [rank0]:[default0]:[default0]:[rank0]:[default0]:",
    "cri+srun+torch": "2025-01-01T00:00:00Z stdout F 3: [rank3]:",
}
UB_START = "!!! [UB] Create Userbuffers Communicator"
FATAL = "Fatal Python error: Aborted"
GIL = "pybind11::handle::inc_ref() is being called while the GIL is either not held or invalid."
IPC = "Failed, NCCL error TransformerEngine_official/transformer_engine/pytorch/csrc/userbuffers/userbuffers-host.cpp:223 ''"


def _examples() -> list[tuple[str, str]]:
    """(entry id, line) for every native message whose example the catalog finds bare."""
    out = []
    for e in CAT.entries:
        if e.origin != "native" or not e.matchable:
            continue
        for i, text in enumerate([e.example, *(e.more_examples or ())]):
            if text and e.id in {h.entry.id for h in CAT.match(split_prefix(text)[1])}:
                out.append((f"{e.id}#{i}", text))
    return out


EXAMPLES = _examples()


def _diagnose(tmp_path, *lines: str) -> dict:
    path = tmp_path / "rank.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return api.diagnose([path]).to_dict()


def _causes(d: dict) -> set:
    return {c["id"] for c in d["causes"]}


def test_examples_cover_the_native_findings():
    ids = {x.split("#")[0] for x, _ in EXAMPLES}
    assert {"native.python_fatal_error", "native.pybind11_gil_not_held", "native.ub_nccl_error_legacy",
            "native.ub_create_communicator", "native.nccl_nvls_cuda_failure", "native.ub_host_cuda_error",
            "native.cuda_error", "native.pg_watchdog_timeout"} <= ids
    assert len(EXAMPLES) >= 70


@pytest.mark.parametrize("stack", STACKS.values(), ids=STACKS.keys())
def test_catalog_finds_every_native_example_behind_the_stack(stack):
    lost = [i for i, text in EXAMPLES
            if i.split("#")[0] not in {h.entry.id for h in CAT.match(split_prefix(stack + text)[1])}]
    assert not lost


@pytest.mark.parametrize("stack", STACKS.values(), ids=STACKS.keys())
def test_diagnose_names_the_same_causes_behind_the_stack(tmp_path, stack):
    """Every native example's causes (diagnose on the bare line) are the causes behind the stack, and the UB
    start-up fact with them: the whole pipeline (the shape prefilter, the scan) as well as the catalog."""
    differ = {}
    for i, text in EXAMPLES:
        bare = _diagnose(tmp_path, text)
        stacked = _diagnose(tmp_path, stack + text)
        if (_causes(bare), bare["facts"]) != (_causes(stacked), stacked["facts"]):
            differ[i] = (_causes(bare), _causes(stacked))
    assert not differ


@pytest.mark.parametrize("stack", STACKS.values(), ids=STACKS.keys())
@pytest.mark.parametrize("fatal", [FATAL, GIL], ids=["python_fatal", "pybind11_gil"])
def test_ub_setup_crash_across_lines_behind_the_stack(tmp_path, stack, fatal):
    d = _diagnose(tmp_path, stack + UB_START, stack + "some other output", stack + fatal)
    assert "UB_SETUP_CRASHED" in _causes(d), _causes(d)
    assert d["facts"].get("ub_started") is True


def test_ub_setup_crash_with_different_stacks_on_its_two_lines(tmp_path):
    d = _diagnose(tmp_path, STACKS["srun+torchrun"] + UB_START, STACKS["cri+torchrun"] + FATAL)
    assert "UB_SETUP_CRASHED" in _causes(d)


@pytest.mark.parametrize("stack", STACKS.values(), ids=STACKS.keys())
def test_ub_ipc_socket_failure_behind_the_stack(tmp_path, stack):
    assert "UB_IPC_SOCKET_FAILED" in _causes(_diagnose(tmp_path, stack + IPC))


def test_recheck64_ak1_reproduction(tmp_path):
    """The report's four files: each pair now gives the same cause."""
    assert _causes(_diagnose(tmp_path, "[default0]:" + UB_START, "[default0]:" + FATAL)) == {"UB_SETUP_CRASHED"}
    assert _causes(_diagnose(tmp_path, "0: [default0]:" + UB_START, "0: [default0]:" + FATAL)) == {"UB_SETUP_CRASHED"}
    assert _causes(_diagnose(tmp_path, "[default0]:" + IPC)) == {"UB_IPC_SOCKET_FAILED"}
    assert _causes(_diagnose(tmp_path, "2025-01-01T00:00:00.123Z stdout F [default0]:" + IPC)) == {"UB_IPC_SOCKET_FAILED"}


@pytest.mark.parametrize("stack", STACKS.values(), ids=STACKS.keys())
def test_a_line_break_inside_a_record_starts_a_line_with_its_own_stack(stack):
    """A carriage return (a progress bar) or a line break inside one record starts a line: its prefix stack is taken
    off there too, as clean() and after_prefix read lines."""
    for sep in ("\r", "\n", "\r\n"):
        text = "progress 10%" + sep + stack + FATAL
        assert "native.python_fatal_error" in {h.entry.id for h in CAT.match(text)}, repr(sep)


@pytest.mark.parametrize("text", [
    "note[default0]:" + FATAL,  # a word glued before the prefix: no launcher wrote that
    "log.txt:12:[default0]x" + FATAL,  # a grep result, no prefix at the line's start
    "[default0]:" + "1" + FATAL,  # a digit glued to the message: not its first word
])
def test_only_a_known_prefix_stack_is_taken_off(text):
    assert "native.python_fatal_error" not in {h.entry.id for h in CAT.match(split_prefix(text)[1])}


def test_pieces_give_the_first_word_after_the_whole_stack():
    assert "Fatal" in messages.pieces("0: [rank0]:[default0]:[default0]:Fatal Python error")
    assert "Fatal" in messages.pieces("(W pid=1) 2025-01-01T00:00:00Z stdout F [default0]:Fatal")
    # no shorter stack is tried after the longest: a spaced last prefix gives no glued piece of a prefix
    assert messages._unglued("[default0]:[rank0]: Fatal Python error") == []
    assert messages._unglued("plain text\rmore text\n  indented") == []


@pytest.mark.parametrize("prefix", ["[default0]:", "0: [rank0]:[default0]:(W pid=1) 2025-01-01T00:00:00.123Z stdout F "])
def test_hostile_stacks_are_linear_and_bounded(prefix):
    """A line of 10^5 stacked prefixes, and a record of 10^5 lines each with its stack: pieces' work is one regex
    pass (no retry of shorter stacks), and its memory within a few MiB on the longest line match() reads
    (MAX_LINE_CHARS)."""
    text = (prefix * 10**5)[:messages.MAX_LINE_CHARS - len(FATAL)] + FATAL
    tracemalloc.start()
    try:
        t0 = time.process_time()
        messages.pieces(text)
        seconds = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seconds < 2.0 and peak < 16 << 20, (seconds, peak)
    many = ("[default0]:" * 3 + "x\r") * 10**5
    t0 = time.process_time()
    assert len(messages._unglued(many)) == 10**5
    assert time.process_time() - t0 < 5.0
    for hostile in (prefix * 10**5 + FATAL, "\r" * 10**6, "\r1" * 10**5, "[default0]:" * 10**5):
        t0 = time.process_time()
        CAT.match(hostile)
        assert time.process_time() - t0 < 5.0


def test_a_line_of_ten_thousand_stacked_prefixes_is_diagnosed(tmp_path):
    """Within the line length the matcher reads whole, the stack's depth does not matter; past it (10^5 prefixes,
    1.1 MB) the line is matched in its head and tail only, and the scan still ends (bounded)."""
    d = _diagnose(tmp_path, "[default0]:" + UB_START, "0: " + "[rank0]:[default0]:" * 3000 + FATAL)
    assert "UB_SETUP_CRASHED" in _causes(d)
    t0 = time.process_time()
    _diagnose(tmp_path, "[default0]:" + UB_START, "0: " + "[default0]:" * 10**5 + FATAL)
    assert time.process_time() - t0 < 10.0
