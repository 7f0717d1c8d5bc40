"""Notes agree with the totals beside them, say what was left out and why, and flag what does not add up."""

from __future__ import annotations

import re

import pytest

from mbridge_overlap.trace import analyze, window
from trace_fixtures import TraceBuilder, nccl


def report(tmp_path, builder: TraceBuilder, name: str = "rank-0.json") -> dict:
    return analyze(builder.write(tmp_path / name)).ranks[0].to_dict()


def notes_with(r: dict, text: str) -> list[str]:
    return [n for n in r["notes"] if text in n]


def three_steps_of_p2p() -> TraceBuilder:
    """Steps 1, 2, 3 of 1000 us; SendRecv (no process group) x3 and AllReduce x1 in each step, one more SendRecv
    and one gemm without a launch record, and one memcpy without one."""
    b = TraceBuilder(rank=0, world_size=2)
    for step in range(3):
        t0 = step * 1000
        b.step(step + 1, t0, t0 + 1000)
        b.kernel("gemm", t0 + 10, t0 + 500, launch=t0 + 1)
        for i in range(3):
            b.kernel(nccl("SendRecv"), t0 + 100 + 50 * i, t0 + 120 + 50 * i, stream=20, launch=t0 + 2)
        b.kernel(nccl("AllReduce"), t0 + 600, t0 + 700, stream=21, launch=t0 + 3)
    b.kernel(nccl("SendRecv"), 900, 950, stream=20, orphan=True)
    b.kernel("gemm", 950, 990, orphan=True)
    b.kernel("Memcpy DtoD (Device -> Device)", 960, 980, cat="gpu_memcpy", orphan=True)
    return b


def test_note_counts_agree_with_the_totals(tmp_path):
    r = report(tmp_path, three_steps_of_p2p())
    dim = r["dimensions"][0]
    # steps 1 and 2 are in the totals: 2 x (3 SendRecv + 1 AllReduce); step 3 and the orphans are left out
    assert (dim["dimension"], dim["kernels"], dim["collectives"]) == ("unattributed", 8, {"AllReduce": 2, "SendRecv": 6})
    assert r["kernel_counts"]["communication"] == 8
    [no_group] = notes_with(r, "no process group")
    assert "its 8 communication kernels in the totals (and 5 more left out of them: 4 launched in the last step, " \
           "1 without a launch record)" in no_group
    [p2p] = notes_with(r, "point-to-point")
    assert p2p.startswith("6 point-to-point kernels in the totals (and 4 more left out of them: 3 launched in the "
                          "last step, 1 without a launch record) stay unattributed (SendRecv x6)")
    # every count a note gives for the totals is one the dimension table gives
    assert re.search(r"its (\d+) communication", no_group).group(1) == str(dim["kernels"])
    assert re.search(r"SendRecv x(\d+)", p2p).group(1) == str(dim["collectives"]["SendRecv"])


def test_kernels_without_a_launch_record_are_counted_and_their_fate_told(tmp_path):
    r = report(tmp_path, three_steps_of_p2p())
    [note] = notes_with(r, "no launch record")
    assert note.startswith("3 GPU kernels, memcpys and memsets (1 communication, 1 memory, 1 computation) have no "
                           "launch record")
    assert "the totals and the steps leave them out" in note
    # with one step HTA keeps every kernel: the orphans count in the totals, in no step
    b = TraceBuilder().step(1, 0, 100).kernel("gemm", 0, 50).kernel(nccl(), 200, 260, stream=20, orphan=True)
    r1 = report(tmp_path, b, "one.json")
    [note1] = notes_with(r1, "no launch record")
    assert note1.startswith("1 GPU kernels, memcpys and memsets (1 communication)") and "count in the totals" in note1
    assert r1["communication_us"] == 60 and r1["steps"][0]["communication_us"] == 0
    clean = TraceBuilder().kernel("gemm", 0, 50)
    assert not notes_with(report(tmp_path, clean, "clean.json"), "launch record")


def test_file_name_rank_that_differs_from_the_recorded_rank(tmp_path):
    b = TraceBuilder(rank=1, world_size=8).kernel("gemm", 0, 10)
    r = report(tmp_path, b, "rank-3.json.gz")
    assert r["rank"] == 1
    [note] = notes_with(r, "file name")
    assert "file name says rank 3" in note and "records rank 1" in note
    assert not notes_with(report(tmp_path, b, "rank-1.json.gz"), "file name")
    assert not notes_with(report(tmp_path, b, "trace.json"), "file name")


def test_a_recorded_rank_that_is_no_rank(tmp_path):
    b = TraceBuilder(rank=0, world_size=8).kernel("gemm", 0, 10)
    b.meta["distributedInfo"]["rank"] = "first"
    r = report(tmp_path, b, "rank-5.json")
    assert r["rank"] == 5
    assert notes_with(r, "distributedInfo.rank is 'first', not a rank: the file name's rank is used")


@pytest.mark.parametrize("chunk", [16, 1 << 20])
def test_nan_and_infinity_where_unused_are_counted_once(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(window, "CHUNK_CHARS", chunk)  # a window end inside an event must not count them twice
    b = TraceBuilder().kernel("gemm", 0, 10)
    for i in range(3):
        b.cpu_op("aten::mm", i, 1, occupancy=float("nan"), ratio=[float("inf"), float("-inf")])
    r = report(tmp_path, b)
    [note] = notes_with(r, "NaN or Infinity")
    assert note.startswith("the file holds 9 NaN or Infinity values")


def test_userbuffers_note_counts_the_totals(tmp_path):
    b = TraceBuilder().step(1, 0, 100).step(2, 100, 200)
    b.kernel("userbuffers_fp16_sum_inplace_gpu_rr_rs", 10, 20, stream=20).kernel("gemm", 0, 50)
    b.kernel("userbuffers_fp16_sum_inplace_gpu_rr_rs", 110, 120, stream=20)
    r = report(tmp_path, b)
    [note] = notes_with(r, "userbuffers")
    assert note.startswith("1 Transformer Engine userbuffers kernel in the totals (and 1 more left out of them: "
                           "1 launched in the last step)")
    assert r["dimensions"][0]["kernels"] == 1
