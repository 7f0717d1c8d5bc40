"""Overlap figures on generated traces whose answers are worked out by hand in each test."""

from __future__ import annotations

import pytest

from mbridge_overlap.trace import analyze, kernels
from trace_fixtures import TraceBuilder, nccl, overlap_case


def rank0(tmp_path, builder: TraceBuilder, name="rank-0.json.gz", layout="kineto"):
    report = analyze(builder.write(tmp_path / name, layout))
    assert len(report.ranks) == 1
    return report.ranks[0].to_dict()


def test_nested_and_overlapping_kernels_on_several_streams(tmp_path):
    r = rank0(tmp_path, overlap_case())
    assert r["compute_us"] == 150 + 10
    assert r["communication_us"] == 150
    assert r["hidden_us"] == 100
    assert r["exposed_us"] == 50
    assert r["hidden_pct"] == 66.67
    # 4 compute kernels (one with an unknown name), 2 NCCL, memcpy + memset, one "...Sync..." kernel
    assert r["kernel_counts"] == {"communication": 2, "memory": 2, "computation": 4, "other": 1}


@pytest.mark.parametrize("layout", ["kineto", "compact", "array"])
def test_layouts_give_the_same_figures(tmp_path, layout):
    r = rank0(tmp_path, overlap_case(), name=f"t-{layout}.json", layout=layout)
    assert (r["compute_us"], r["communication_us"], r["hidden_us"]) == (160, 150, 100)


def test_kernel_kinds_follow_hta_rules():
    assert kernels.kind_of("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == kernels.COMMUNICATION
    assert kernels.kind_of("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == kernels.COMMUNICATION
    assert kernels.kind_of("nccl_helper_copy") == kernels.COMPUTATION  # "nccl" without "Kernel" is not NCCL to HTA
    assert kernels.kind_of("Memcpy HtoD (Pinned -> Device)") == kernels.MEMORY
    assert kernels.kind_of("Memset (Device)") == kernels.MEMORY
    assert kernels.kind_of("void copy_Memcpy_like<float>") == kernels.OTHER  # "Memcpy" inside the name
    assert kernels.kind_of("Event Sync") == kernels.OTHER
    assert kernels.kind_of("sm90_xmma_gemm_bf16bf16") == kernels.COMPUTATION
    assert kernels.kind_of("userbuffers_fp16_sum_inplace_gpu_rr_rs") == kernels.COMMUNICATION
    assert kernels.collective_of("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "AllReduce"
    assert kernels.collective_of("ncclDevKernel_SendRecv(x)") == "SendRecv"


def test_merge_and_overlap_by_hand():
    merged = kernels.merge([(5, 10), (0, 3), (3, 4), (9, 12), (20, 20)])
    assert list(merged) == [(0, 4), (5, 12)] and merged.total() == 4 + 7
    assert kernels.overlap(merged, kernels.merge([(2, 6), (11, 30)])) == 2 + 1 + 1


def test_last_step_left_out_and_per_step_figures(tmp_path):
    b = TraceBuilder()
    b.step(10, 0, 1000).step(11, 1000, 2000).step(12, 2000, 3000)
    # step 10: compute [100,300), comm [200,400) -> hidden 100, exposed 100
    b.kernel("gemm", 100, 300, launch=50).kernel(nccl(), 200, 400, stream=20, launch=60)
    # step 11: comm [1100,1200) alone, launched in step 11 but run later is still step 11
    b.kernel(nccl(), 1100, 1200, stream=20, launch=1010)
    # step 12 (the last): counted in its own row only
    b.kernel("gemm", 2100, 2900, launch=2010).kernel(nccl(), 2100, 2200, stream=20, launch=2020)
    # launched before the first step: in the totals, in no step
    b.kernel("gemm", 10, 20, launch=5)
    r = rank0(tmp_path, b)
    assert (r["compute_us"], r["communication_us"], r["hidden_us"]) == (200 + 10, 200 + 100, 100)
    assert r["hidden_pct"] == 33.33
    steps = {s["step"]: s for s in r["steps"]}
    assert [s["in_totals"] for s in r["steps"]] == [True, True, False]
    assert (steps[10]["hidden_us"], steps[10]["exposed_us"]) == (100, 100)
    assert (steps[11]["compute_us"], steps[11]["exposed_us"], steps[11]["hidden_pct"]) == (0, 100, 0.0)
    assert (steps[12]["compute_us"], steps[12]["hidden_us"]) == (800, 100)
    assert any("ProfilerStep#12" in n for n in r["notes"])


def test_empty_step_shows_with_zeros(tmp_path):
    b = TraceBuilder().step(1, 0, 100).step(2, 100, 200).step(3, 200, 300)
    b.kernel("gemm", 10, 50).kernel(nccl(), 20, 60, stream=20)
    r = rank0(tmp_path, b)
    empty = [s for s in r["steps"] if s["step"] == 2][0]
    assert empty["compute_us"] == empty["communication_us"] == 0
    assert empty["hidden_pct"] is None and empty["dimensions"] == []


def test_one_step_or_none_counts_the_whole_trace(tmp_path):
    b = TraceBuilder().step(7, 0, 100)
    b.kernel("gemm", 0, 50).kernel(nccl(), 25, 75, stream=20).kernel(nccl(), 500, 600, stream=20, launch=400)
    r = rank0(tmp_path, b)
    assert (r["communication_us"], r["hidden_us"]) == (150, 25)
    assert any("only one ProfilerStep" in n for n in r["notes"])
    b2 = TraceBuilder().kernel("gemm", 0, 50).kernel(nccl(), 25, 75, stream=20)
    r2 = rank0(tmp_path, b2, name="none.json")
    assert r2["steps"] == [] and r2["hidden_pct"] == 50.0


def test_nanosecond_timestamps_round_as_hta_does(tmp_path):
    # HTA rounds ts up and ts+dur down: [10.4, 30.6) -> [11, 30), [20.2, 40.9) -> [21, 40)
    b = TraceBuilder().kernel("gemm", 10.4, 30.6).kernel(nccl(), 20.2, 40.9, stream=20)
    r = rank0(tmp_path, b)
    assert (r["compute_us"], r["communication_us"], r["hidden_us"]) == (19, 19, 9)


def test_no_communication_is_not_an_error(tmp_path):
    r = rank0(tmp_path, TraceBuilder().kernel("gemm", 0, 10))
    assert r["communication_us"] == 0 and r["hidden_pct"] is None
    assert any("no communication kernels" in n for n in r["notes"])
