"""A torch watchdog timeout line that names its process group by Megatron-Core's description but prints no
WorkNCCL(..., OpType=...) tail (torch's 'Timeout at NCCL work' line, or a watchdog-terminated line cut before the
tail): the description decides the dimension (fresh20 F20-2). torch's prefixes: 2.5+ '[PG ID n PG GUID g(DESC) Rank r]',
2.4 '[PG n (DESC) Rank r]' (ProcessGroupNCCL::createLogPrefix)."""

from __future__ import annotations

import io

import pytest

from mbridge_overlap import api
from tests.conftest import diagnose_causes

TIMEOUTS = {"TP_COLLECTIVE_TIMEOUT", "EP_COLLECTIVE_TIMEOUT", "CP_COLLECTIVE_TIMEOUT", "DP_COLLECTIVE_TIMEOUT",
            "GROUP_COLLECTIVE_TIMEOUT", "PIPELINE_P2P_TIMEOUT"}

# Megatron-Core 0.19.2 parallel_state.py group_desc -> the finding a timeout on it is (upstream/groups.py's dimension)
GROUPS = [
    ("TENSOR_MODEL_PARALLEL_GROUP", "TP_COLLECTIVE_TIMEOUT"),
    ("EXPERT_MODEL_PARALLEL_GROUP", "EP_COLLECTIVE_TIMEOUT"),
    ("EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP", "EP_COLLECTIVE_TIMEOUT"),
    ("CONTEXT_PARALLEL_GROUP", "CP_COLLECTIVE_TIMEOUT"),
    ("DATA_PARALLEL_GROUP", "DP_COLLECTIVE_TIMEOUT"),
    ("DATA_PARALLEL_GROUP_WITH_CP", "DP_COLLECTIVE_TIMEOUT"),
    ("PIPELINE_MODEL_PARALLEL_GROUP", "GROUP_COLLECTIVE_TIMEOUT"),
    ("default_pg", "GROUP_COLLECTIVE_TIMEOUT"),
]

PREFIXES = {
    "2.5+": "[PG ID 5 PG GUID 37({desc}) Rank 1]",
    "2.4": "[PG 5 ({desc}) Rank 1]",
}

WORDINGS = {
    "timeout_at": "Timeout at NCCL work: 49387, last enqueued NCCL work: 49406, last completed NCCL work: 49386.",
    "terminated_cut": "Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught collective "
                      "operation timeout",
    "terminated_cut_in_work": "Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught "
                              "collective operation timeout: WorkNCCL(SeqNum=49387, ",
}


def _line(prefix: str, desc: str, wording: str) -> str:
    return (f"[rank9]:[E129 16:38:47.714849575 ProcessGroupNCCL.cpp:1537] {PREFIXES[prefix].format(desc=desc)} "
            f"{WORDINGS[wording]}\n")


def _timeouts(text: str) -> list[str]:
    return [c["id"] for c in diagnose_causes(text) if c["id"] in TIMEOUTS]


@pytest.mark.parametrize("wording", sorted(WORDINGS))
@pytest.mark.parametrize("prefix", sorted(PREFIXES))
@pytest.mark.parametrize("desc, finding", GROUPS)
def test_the_description_decides_a_timeout_without_its_work(desc, finding, prefix, wording):
    assert _timeouts(_line(prefix, desc, wording)) == [finding]


@pytest.mark.parametrize("wording", sorted(WORDINGS))
def test_a_group_without_a_description_is_no_dimension(wording):
    for prefix in ("[PG ID 2 PG GUID 3 Rank 1]", "[PG 2 Rank 1]", "[PG ID 2 PG GUID 3(undefined) Rank 1]"):
        assert _timeouts(f"[rank1]:[E ProcessGroupNCCL.cpp:1537] {prefix} {WORDINGS[wording]}\n") == []


@pytest.mark.parametrize("tail", [
    # torch prints these for an error as well as a timeout (watchdogHandler: work.exception() of either)
    "Exception (either an error or timeout) detected by watchdog at work: 49387, last enqueued NCCL work: 49406, "
    "last completed NCCL work: 49386.",
    " failure detected by watchdog at work sequence id: 49387 PG status: last enqueued work: 49406, last completed "
    "work: 49386",
    "First PG on this rank to signal dumping.",
    "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
])
@pytest.mark.parametrize("desc", ["TENSOR_MODEL_PARALLEL_GROUP", "EXPERT_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP"])
def test_a_line_naming_a_group_that_is_no_timeout_gives_no_timeout(desc, tail):
    assert _timeouts(f"[rank1]:[E ProcessGroupNCCL.cpp:2168] [PG ID 5 PG GUID 37({desc}) Rank 1] {tail}\n") == []


def test_the_heartbeat_monitors_dump_line_names_the_default_group_not_the_one_that_timed_out():
    """HeartbeatMonitor runs on PG 0 only (uid 0): its 'Received a dump signal due to a collective timeout' line
    names default_pg whichever group timed out."""
    line = ("[rank0]:[E709 17:05:38.482119928 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
            "Received a dump signal due to a collective timeout from this local rank and we will try our best to dump "
            "the debug info. Last enqueued NCCL work: 20589, last completed NCCL work: 20584.\n")
    assert _timeouts(line) == []


WORK = ("[rank1]:[E ProcessGroupNCCL.cpp:574] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL("
        "SeqNum=7, OpType=_ALLGATHER_BASE, NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)=600000) ran for "
        "600029 milliseconds before timing out.\n")
AT = "[rank1]:[E ProcessGroupNCCL.cpp:1540] [PG 1 ({desc}) Rank 1] Timeout at NCCL work: {seq}, last enqueued NCCL " \
     "work: 8, last completed NCCL work: 6.\n"


def test_the_works_own_line_decides_where_the_log_prints_it():
    """A one-element all-gather is no DP bucket (DP_COLLECTIVE_TIMEOUT's rule on the work's line): its 'Timeout at
    NCCL work' line on a DP group does not make it one."""
    text = WORK.format(numel_in=1, numel_out=16) + AT.format(desc="DATA_PARALLEL_GROUP", seq=7)
    assert _timeouts(text) == []


def test_another_works_timeout_leaves_the_described_line_its_own():
    text = WORK.format(numel_in=1, numel_out=16) + AT.format(desc="EXPERT_MODEL_PARALLEL_GROUP", seq=9)
    assert _timeouts(text) == ["EP_COLLECTIVE_TIMEOUT"]


def test_the_described_line_goes_with_its_works_cause():
    text = WORK.format(numel_in=1 << 20, numel_out=1 << 24) + AT.format(desc="DATA_PARALLEL_GROUP", seq=7)
    causes = [c for c in diagnose_causes(text) if c["id"] in TIMEOUTS]
    assert [c["id"] for c in causes] == ["DP_COLLECTIVE_TIMEOUT"]
    assert {e["message_id"] for e in causes[0]["evidence"]} == {"native.pg_watchdog_timeout_dp",
                                                                "native.pg_watchdog_exception"}


# torch prints the timed-out work with the rank alone (WorkNCCL::logPrefix) and its group's description on the
# watchdog's next line about that work (ProcessGroupNCCL::logPrefix): torch 2.2-2.5 'Timeout at NCCL work: N',
# 2.3-2.5 'Exception (either an error or timeout) detected by watchdog at work: N', 2.6+ 'failure detected by watchdog
# at work sequence id: N'
COMPANIONS = {
    "timeout_at": "Timeout at NCCL work: {seq}, last enqueued NCCL work: 9, last completed NCCL work: 6.",
    "exception_at": "Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL "
                    "work: 9, last completed NCCL work: 6.",
    "failure_at": " failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: 9, last "
                  "completed work: 6",
}


def _companion(wording: str, desc: str, seq: int = 7, rank: int = 1) -> str:
    return (f"[rank{rank}]:[E ProcessGroupNCCL.cpp:2241] [PG ID 5 PG GUID 37({desc}) Rank 1] "
            f"{COMPANIONS[wording].format(seq=seq)}\n")


@pytest.mark.parametrize("wording", sorted(COMPANIONS))
@pytest.mark.parametrize("desc, finding", GROUPS)
def test_the_next_line_of_the_work_describes_its_group(desc, finding, wording):
    """An all-gather of 4 ranks' shares (no group printed: DP_COLLECTIVE_TIMEOUT by itself) on the group the
    watchdog's next line of the same rank and work names."""
    causes = [c for c in diagnose_causes(WORK.format(numel_in=1024, numel_out=4096) + _companion(wording, desc))
              if c["id"] in TIMEOUTS]
    assert [c["id"] for c in causes] == [finding]
    assert [e["message_id"].split(".")[-1] for e in causes[0]["evidence"]][0] == "pg_watchdog_timeout_dp"


@pytest.mark.parametrize("wording", sorted(COMPANIONS))
@pytest.mark.parametrize("desc, finding", [("DATA_PARALLEL_GROUP", None), ("TENSOR_MODEL_PARALLEL_GROUP", "TP_COLLECTIVE_TIMEOUT"),
                                           ("EXPERT_MODEL_PARALLEL_GROUP", "EP_COLLECTIVE_TIMEOUT")])
def test_a_one_element_gather_keeps_its_rule_on_the_described_group(desc, finding, wording):
    """DP bucket padding leaves no one-element share (DP_COLLECTIVE_TIMEOUT's pattern drops it); TP and EP keep it."""
    text = WORK.format(numel_in=1, numel_out=16) + _companion(wording, desc)
    assert _timeouts(text) == ([finding] if finding else [])


@pytest.mark.parametrize("wording", sorted(COMPANIONS))
def test_another_ranks_or_works_line_does_not_describe_the_work(wording):
    work = WORK.format(numel_in=1024, numel_out=4096)
    assert _timeouts(work + _companion(wording, "TENSOR_MODEL_PARALLEL_GROUP", rank=2)) == ["DP_COLLECTIVE_TIMEOUT"]
    other_work = _timeouts(work + _companion(wording, "TENSOR_MODEL_PARALLEL_GROUP", seq=8))
    assert "TP_COLLECTIVE_TIMEOUT" not in other_work or wording == "timeout_at"  # (a timeout of its own, work 8)
    assert "DP_COLLECTIVE_TIMEOUT" in other_work


def test_with_the_config_the_described_group_is_not_told_by_its_size():
    """16 GPUs at TP 2, CP 4 (llama3 8B): DP 2 and TP 2 alike, so the size of the work's line alone cannot tell
    them apart (DP_COLLECTIVE_TIMEOUT, 'TP's too'); the watchdog's next line names the group."""
    layout = {"model.tensor_model_parallel_size": 2, "model.context_parallel_size": 4, "model.sequence_parallel": True,
              "comm_overlap.tp_comm_overlap": False}
    work = WORK.format(numel_in=1 << 20, numel_out=1 << 21)
    for desc, finding in (("DATA_PARALLEL_GROUP", "DP_COLLECTIVE_TIMEOUT"), ("TENSOR_MODEL_PARALLEL_GROUP", "TP_COLLECTIVE_TIMEOUT")):
        text = work + _companion("failure_at", desc)
        d = api.diagnose(["-"], stdin=io.BytesIO(text.encode()), recipe="llama3_8b_pretrain_config", overrides=layout,
                         gpus=16).to_dict()
        (cause,) = [c for c in d["causes"] if c["id"] in TIMEOUTS]
        assert cause["id"] == finding and "too" not in cause["analysis"], desc
