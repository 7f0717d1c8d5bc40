"""A watchdog all-gather or reduce-scatter told apart by its process group: the group's description where torch
prints it, else (with the run's config) the group size its element counts give."""

from __future__ import annotations

import io

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import groups

RECIPE = "llama3_8b_pretrain_config"


def _line(op: str, numel_in: int, numel_out: int, desc: str | None = None) -> str:
    pg = f"[PG ID 5 PG GUID 9({desc}) Rank 1]" if desc else "[Rank 1]"
    return (f"[rank1]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] {pg} Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum=8, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)=600000) "
            "ran for 600013 milliseconds before timing out.\n")


def _diagnose(text: str, **kw) -> dict:
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode()), **kw).to_dict()


def _layout(tp: int, cp: int, pp: int = 1) -> dict:
    return {"model.tensor_model_parallel_size": tp, "model.context_parallel_size": cp,
            "model.pipeline_model_parallel_size": pp, "model.sequence_parallel": tp > 1,
            "comm_overlap.tp_comm_overlap": False}


@pytest.mark.parametrize("op, numel_in, numel_out, n", [
    ("_ALLGATHER_BASE", 1 << 20, 1 << 21, 2), ("_REDUCE_SCATTER_BASE", 7130316800, 445644800, 16),
    ("ALLGATHER", 3, 24, 8), ("REDUCESCATTER", 24, 3, 8),
    ("_ALLGATHER_BASE", 1 << 21, 1 << 20, None),  # an all-gather does not shrink
    ("_REDUCE_SCATTER_BASE", 10, 15, None), ("_ALLGATHER_BASE", 0, 0, None), ("_ALLGATHER_BASE", 7, 7, None),
])
def test_the_group_size_is_the_element_counts_ratio(op, numel_in, numel_out, n):
    assert groups.size(_line(op, numel_in, numel_out)) == n


def test_without_the_config_the_size_is_evidence_and_the_cause_stays_dp():
    d = _diagnose(_line("_ALLGATHER_BASE", 1 << 20, 1 << 21))
    (cause,) = d["causes"]
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT" and cause["evidence"][0]["group_ranks"] == 2


def test_a_size_only_tp_has_is_the_tp_collective():
    # 16 GPUs at TP 2, CP 1: DP 8, so a group of 2 is TP's
    d = _diagnose(_line("_ALLGATHER_BASE", 1 << 20, 1 << 21), recipe=RECIPE, overrides=_layout(2, 1), gpus=16)
    (cause,) = d["causes"]
    assert cause["id"] == "TP_COLLECTIVE_TIMEOUT" and "TP's, no DP group's" in cause["analysis"]


def test_a_size_only_cp_has_is_the_cp_collective():
    # 8 GPUs at TP 1, CP 2: DP 4 (DP x CP 8)
    d = _diagnose(_line("_ALLGATHER_BASE", 1 << 20, 1 << 21), recipe=RECIPE, overrides=_layout(1, 2), gpus=8)
    assert [c["id"] for c in d["causes"]] == ["CP_COLLECTIVE_TIMEOUT"]


def test_a_size_dp_has_stays_dp_and_says_what_else_has_it():
    d = _diagnose(_line("_REDUCE_SCATTER_BASE", 1 << 23, 1 << 20), recipe=RECIPE, overrides=_layout(2, 1), gpus=16)
    (cause,) = d["causes"]
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT" and "DP's" in cause["analysis"] and "too" not in cause["analysis"]
    # 16 GPUs at TP 2, CP 4: DP 2 and TP 2 alike
    d = _diagnose(_line("_ALLGATHER_BASE", 1 << 20, 1 << 21), recipe=RECIPE, overrides=_layout(2, 4), gpus=16)
    (cause,) = d["causes"]
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT" and "TP's too" in cause["analysis"]


def test_the_config_groups_said_are_named_as_resolve_names_them():
    """evalAH Q3: TP 2, CP 8 on 16 GPUs is DP 1 (resolve: data_parallel_size=1), yet the analysis listed the gradients'
    DP x CP group of 8 as 'DP 8'; with EP the expert-DP group's size was a 'DP' too."""
    d = _diagnose(_line("_ALLGATHER_BASE", 1 << 20, 1 << 21), recipe=RECIPE, overrides=_layout(2, 8), gpus=16)
    (cause,) = d["causes"]
    assert "groups are DP x CP 8, CP 8, TP 2, the whole job 16:" in cause["analysis"]
    moe = {**_layout(1, 1), "model.expert_model_parallel_size": 8, "model.num_moe_experts": 8}
    d = _diagnose(_line("_ALLGATHER_BASE", 32, 64), recipe=RECIPE, overrides=moe, gpus=16)
    (cause,) = d["causes"]
    assert "groups are expert DP 2, DP 16, EP (MoE) 8, the whole job 16:" in cause["analysis"]


def test_a_size_no_group_has_is_said():
    d = _diagnose(_line("_ALLGATHER_BASE", 1 << 20, 3 << 20), recipe=RECIPE, overrides=_layout(2, 1), gpus=16)
    (cause,) = d["causes"]
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT" and "none has 3 ranks" in cause["analysis"]


@pytest.mark.parametrize("desc, fid", [
    ("TENSOR_MODEL_PARALLEL_GROUP", "TP_COLLECTIVE_TIMEOUT"), ("CONTEXT_PARALLEL_GROUP", "CP_COLLECTIVE_TIMEOUT"),
    ("EXPERT_MODEL_PARALLEL_GROUP", "EP_COLLECTIVE_TIMEOUT"), ("EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP", "EP_COLLECTIVE_TIMEOUT"),
    ("DATA_PARALLEL_GROUP_WITH_CP", "DP_COLLECTIVE_TIMEOUT"), ("EXPERT_DATA_PARALLEL_GROUP", "DP_COLLECTIVE_TIMEOUT"),
])
def test_a_described_group_names_its_dimension_without_the_config(desc, fid):
    d = _diagnose(_line("_ALLGATHER_BASE", 1 << 20, 1 << 21, desc))
    assert [c["id"] for c in d["causes"]] == [fid]


def test_a_described_group_is_not_moved_by_its_size():
    # the line says DP; a size of 2 that TP has at this layout does not move it
    d = _diagnose(_line("_ALLGATHER_BASE", 1 << 20, 1 << 21, "DATA_PARALLEL_GROUP_WITH_CP"), recipe=RECIPE,
                  overrides=_layout(2, 1), gpus=16)
    assert [c["id"] for c in d["causes"]] == ["DP_COLLECTIVE_TIMEOUT"]


def test_sized_and_described_lines_of_one_group_are_one_cause():
    text = (_line("_ALLGATHER_BASE", 1 << 20, 1 << 21, "CONTEXT_PARALLEL_GROUP")
            + _line("_ALLGATHER_BASE", 1 << 20, 1 << 21).replace("[rank1]", "[rank3]").replace("Rank 1", "Rank 3"))
    d = _diagnose(text, recipe=RECIPE, overrides=_layout(1, 2), gpus=8)
    (cause,) = d["causes"]
    assert cause["id"] == "CP_COLLECTIVE_TIMEOUT" and len(cause["evidence"]) == 2


@pytest.mark.parametrize("rank, in_group, cause", [
    # 16 GPUs at TP 4, CP 2 (DP 2, DP x CP 4): Megatron-Core numbers ranks TP fastest, then CP, then DP. Rank 9 is TP
    # rank 1 (9 % 4) and DP x CP rank 2 (CP 0 + 2 x DP 1); rank 13 is TP rank 1 and DP x CP rank 3 (CP 1 + 2 x DP 1)
    (9, 1, "TP_COLLECTIVE_TIMEOUT"), (13, 3, "DP_COLLECTIVE_TIMEOUT"),
    (10, 2, "DP_COLLECTIVE_TIMEOUT"),  # TP rank 2 and DP x CP rank 2: the line cannot tell them apart
])
def test_a_rank_s_place_in_its_group_tells_groups_of_one_size_apart(rank, in_group, cause):
    line = _line("_REDUCE_SCATTER_BASE", 1 << 22, 1 << 20).replace("[rank1]", f"[rank{rank}]").replace(
        "[Rank 1]", f"[PG ID 5 PG GUID 29 Rank {in_group}]")
    d = _diagnose(line, recipe=RECIPE, overrides=_layout(4, 2), gpus=16)
    assert [c["id"] for c in d["causes"]] == [cause]
    told = f"rank {rank} is rank {in_group} of its group" in d["causes"][0]["analysis"]
    assert told == (rank != 10)


@pytest.mark.parametrize("rank, in_group, cause, told", [
    # 32 GPUs at TP 2, CP 2, PP 2 (DP 4): TP fastest, then CP, DP, PP. Rank 20 is CP rank 0 (20 // 2 % 2) and PP rank 1
    # (20 // 16): a 2-rank group where it is rank 1 is its pipeline group; rank 5 is CP rank 0 and PP rank 0: either
    # (the cause names both)
    (20, 1, "GROUP_COLLECTIVE_TIMEOUT", True), (5, 0, "CP_COLLECTIVE_TIMEOUT", True),  # rank 5 is TP rank 1: not TP
])
def test_the_pipeline_group_is_one_of_the_groups_a_size_can_be(rank, in_group, cause, told):
    # evalG G3: the tie-break left the pipeline group out, so a pipeline group's all-gather was CP's
    line = _line("_ALLGATHER_BASE", 1 << 20, 1 << 21).replace("[rank1]", f"[rank{rank}]").replace(
        "[Rank 1]", f"[PG ID 5 PG GUID 29 Rank {in_group}]")
    over = {**_layout(2, 2, pp=2), "model.virtual_pipeline_model_parallel_size": None}
    d = _diagnose(line, recipe=RECIPE, overrides=over, gpus=32)
    assert [c["id"] for c in d["causes"]] == [cause]
    assert ("a place it has in Megatron-Core's rank order" in d["causes"][0]["analysis"]) == told


# The rank in its group as each torch release's watchdog prints it with ProcessGroupNCCL's own rank_ (the libtorch_cuda.so
# strings of torch 2.2.0, 2.3.0, 2.4.0 and 2.11.0): 2.5+ createLogPrefix "[PG ID n PG GUID g(DESC) Rank r]", 2.4
# "[PG name (DESC) Rank r]" / "[PG name Rank r]", 2.3 "[PG uid Rank r]", 2.2 ncclCommWatchdog's "[Rank r] NCCL watchdog
# thread terminated with exception: ..."
@pytest.mark.parametrize("prefix, rank", [
    ("[PG ID 5 PG GUID 29 Rank 3] Process group watchdog thread terminated with exception: ", 3),
    ("[PG ID 5 PG GUID 29(undefined) Rank 3] Process group watchdog thread terminated with exception: ", 3),
    ("[PG 29 (TENSOR_MODEL_PARALLEL_GROUP) Rank 3] Process group watchdog thread terminated with exception: ", 3),
    ("[PG 29 Rank 3] Process group watchdog thread terminated with exception: ", 3),
    ("[PG 5 Rank 3] NCCL watchdog thread terminated with exception: ", 3),
    ("[Rank 3] NCCL watchdog thread terminated with exception: ", 3),
    ("", None),  # WorkNCCL's own "[Rank r]" (a static: the first work's rank in the process), not the group's
])
def test_the_rank_in_its_group_is_read_from_every_torch_release_s_prefix(prefix, rank):
    line = _line("_REDUCE_SCATTER_BASE", 1 << 22, 1 << 20).replace("] [Rank 1] Watchdog", f"] {prefix}[Rank 7] Watchdog")
    assert groups.in_group_rank(line) == rank


@pytest.mark.parametrize("prefix", ["[PG 5 Rank {k}] NCCL watchdog thread terminated with exception: ",
                                    "[Rank {k}] NCCL watchdog thread terminated with exception: "])
def test_an_older_torch_s_rank_in_its_group_tells_groups_of_one_size_apart(prefix):
    """As test_a_rank_s_place_in_its_group_tells_groups_of_one_size_apart, with torch 2.3's and 2.2's prefixes: global
    rank 9 at TP 4, CP 2 is TP rank 1 and DP x CP rank 2."""
    line = _line("_REDUCE_SCATTER_BASE", 1 << 22, 1 << 20).replace("[rank1]", "[rank9]").replace(
        "] [Rank 1] Watchdog", "] " + prefix.format(k=1) + "[Rank 1] Watchdog")
    d = _diagnose(line, recipe=RECIPE, overrides=_layout(4, 2), gpus=16)
    assert [c["id"] for c in d["causes"]] == ["TP_COLLECTIVE_TIMEOUT"]
    assert "rank 9 is rank 1 of its group" in d["causes"][0]["analysis"]


def test_an_undescribed_coalesced_line_from_a_place_no_pipeline_group_gives_is_not_the_pipeline_s():
    # evalG G4: PP 2 makes pipeline groups of 2, where no rank is rank 2; a coalesced collective there is the DP buckets'
    line = _line("COALESCED", 4000, 1000).replace("[Rank 1]", "[PG ID 5 PG GUID 29 Rank 2]")
    over = {**_layout(2, 2, pp=2), "model.virtual_pipeline_model_parallel_size": None}
    d = _diagnose(line, recipe=RECIPE, overrides=over, gpus=32)
    assert [c["id"] for c in d["causes"]] == ["DP_COLLECTIVE_TIMEOUT"]
    pipeline = _diagnose(line.replace("Rank 2]", "Rank 0]"), recipe=RECIPE, overrides=over, gpus=32)  # rank 1: PP rank 0
    assert [c["id"] for c in pipeline["causes"]] == ["PIPELINE_P2P_TIMEOUT"]


@pytest.mark.parametrize("pg, cause", [("[PG 0 Rank 1]", "GROUP_COLLECTIVE_TIMEOUT"), ("[PG 1 Rank 1]", "DP_COLLECTIVE_TIMEOUT"),
                                       ("[PG ID 3 PG GUID 3 Rank 1]", "DP_COLLECTIVE_TIMEOUT"), ("[Rank 1]", "GROUP_COLLECTIVE_TIMEOUT")])
def test_a_numbered_group_other_than_torch_s_default_is_not_the_whole_job_s(pg, cause):
    """evalN N4: a 16-rank reduce-scatter on "PG 1" was put on the whole job's group (16 GPUs at TP 4, PP 4: DP 1),
    not overlap, exit 0; torch's default group is PG 0, so PG 1 is a group of its own: the DP cause stays, asking
    whether the log is of this config."""
    line = _line("_REDUCE_SCATTER_BASE", 16 << 20, 1 << 20).replace("[Rank 1]", pg)
    over = {**_layout(4, 1, pp=4), "model.virtual_pipeline_model_parallel_size": None}
    d = _diagnose(line, recipe=RECIPE, overrides=over, gpus=16)
    assert [c["id"] for c in d["causes"]] == [cause]
    assert ("is the log of this config?" in d["causes"][0]["analysis"]) == (cause == "DP_COLLECTIVE_TIMEOUT")


def test_a_tp_all_reduce_timeout_is_tp_s():
    """Without sequence parallel the TP group all-reduces (mappings.py _reduce): on TENSOR_MODEL_PARALLEL_GROUP it is
    TP's timeout, on the DP group still DP's."""
    (cause,) = _diagnose(_line("ALLREDUCE", 33554432, 33554432, "TENSOR_MODEL_PARALLEL_GROUP"))["causes"]
    assert cause["id"] == "TP_COLLECTIVE_TIMEOUT"
    (cause,) = _diagnose(_line("ALLREDUCE", 33554432, 33554432, "DATA_PARALLEL_GROUP"))["causes"]
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT"


@pytest.mark.parametrize("desc, knob", [("PIPELINE_MODEL_PARALLEL_GROUP", "model.pipeline_model_parallel_size"),
                                        ("EXPERT_MODEL_PARALLEL_GROUP", "model.expert_model_parallel_size"),
                                        ("DATA_PARALLEL_GROUP_WITH_CP", "ddp.overlap_grad_reduce"),
                                        ("CONTEXT_PARALLEL_GROUP", "model.context_parallel_size")])
def test_an_nccl_failure_on_a_described_group_is_its_dimension_s(desc, knob):
    """The watchdog ending on an NCCL error (not a timeout) on a group torch's tag names: NCCL_FAILURE_ON_OVERLAP_PATH
    with that dimension's fields, no traceback needed."""
    text = (f"[rank1]:[E804 ProcessGroupNCCL.cpp:1849] [PG ID 3 PG GUID 7({desc}) Rank 1] Process group watchdog thread "
            "terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5\n")
    (cause,) = _diagnose(text)["causes"]
    assert cause["id"] == "NCCL_FAILURE_ON_OVERLAP_PATH" and knob in cause["knobs"]


@pytest.mark.parametrize("desc", ["default_pg", "undefined", "MODEL_PARALLEL_GROUP"])
def test_an_nccl_failure_on_another_group_is_no_overlap_cause(desc):
    text = (f"[rank1]:[E804 ProcessGroupNCCL.cpp:1849] [PG ID 0 PG GUID 0({desc}) Rank 1] Process group watchdog thread "
            "terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5\n")
    assert not [c for c in _diagnose(text)["causes"] if c["overlap_related"]]


def test_a_cuda_error_the_watchdog_caught_on_a_described_group_is_not_nccl_s():
    """recheck56 AC3: a sticky CUDA error (an illegal memory access, any kernel's) that the watchdog's event query
    surfaced on the expert group was called an NCCL failure on the EP path."""
    text = ("[rank0]:[E512 ProcessGroupNCCL.cpp:1595] [PG ID 12 PG GUID 35(EXPERT_MODEL_PARALLEL_GROUP) Rank 0] Process group "
            "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\n")
    assert not [c for c in _diagnose(text)["causes"] if c["id"] == "NCCL_FAILURE_ON_OVERLAP_PATH"]


@pytest.mark.parametrize("overlap", [False, True])
def test_a_dp_timeout_s_test_is_offered_only_where_the_config_runs_the_overlap(overlap):
    """evalW W2-3: the DP timeout's fix said to turn the DP overlaps off as a test on a config that runs them off."""
    over = {"ddp.overlap_grad_reduce": overlap, "ddp.overlap_param_gather": overlap}
    (cause,) = [c for c in _diagnose(_line("_REDUCE_SCATTER_BASE", 1 << 26, 1 << 22, "DATA_PARALLEL_GROUP"),
                                     recipe="qwen25_72b_pretrain_32gpu_h100_bf16_config", gpus=512, overrides=over)["causes"]
                if c["id"] == "DP_COLLECTIVE_TIMEOUT"]
    assert ("overlap_grad_reduce=false for a reduce-scatter" in cause["fix"]) == overlap
    assert ("runs neither DP overlap" in cause["fix"]) != overlap


@pytest.mark.parametrize("op, numel_in, numel_out", [("ALLGATHER", 1, 4), ("_ALLGATHER_BASE", 1, 8),
                                                     ("REDUCE_SCATTER", 4, 1), ("_REDUCE_SCATTER_BASE", 8, 1)])
def test_a_one_element_share_is_no_dp_bucket(op, numel_in, numel_out):
    """fresh18 F18-1: a watchdog gather or scatter of one element per rank is a scalar exchange (a checkpoint
    consolidation's flag), not a DP bucket (padded to a multiple of lcm(DP, 128) with the distributed optimizer): no
    overlap cause, as the same line's ALLREDUCE has none; two elements per rank stay DP's."""
    d = _diagnose(_line(op, numel_in, numel_out))
    assert not d["causes"], d["causes"]
    assert not _diagnose(_line("ALLREDUCE", 1, 1))["causes"]
    two = _line(op, numel_in * 2, numel_out * 2)
    assert [c["id"] for c in _diagnose(two)["causes"]] == ["DP_COLLECTIVE_TIMEOUT"]


@pytest.mark.parametrize("desc, want", [("TENSOR_MODEL_PARALLEL_GROUP", "TP_COLLECTIVE_TIMEOUT"),
                                        ("EXPERT_MODEL_PARALLEL_GROUP", "EP_COLLECTIVE_TIMEOUT"),
                                        ("EXPERT_TENSOR_PARALLEL_GROUP", "EP_COLLECTIVE_TIMEOUT"),
                                        ("CONTEXT_PARALLEL_GROUP", "CP_COLLECTIVE_TIMEOUT"),
                                        ("PIPELINE_MODEL_PARALLEL_GROUP", "GROUP_COLLECTIVE_TIMEOUT"),
                                        ("default_pg", "GROUP_COLLECTIVE_TIMEOUT"),
                                        ("DATA_PARALLEL_GROUP", None), ("DATA_PARALLEL_GROUP_WITH_CP", None)])
@pytest.mark.parametrize("op, numel_in, numel_out", [("_ALLGATHER_BASE", 1, 8), ("_REDUCE_SCATTER_BASE", 8, 1)])
def test_a_one_element_share_on_a_named_group_keeps_that_group_s_cause(desc, want, op, numel_in, numel_out):
    """recheck67 AN-3: F18-1's reason (a DP bucket's end is padded to a multiple of lcm(DP, 128) elements, Megatron-Core
    0.19.2 optimizer/param_layout.py bucket_end_divisor) is about DP's buckets only: a one-element gather or scatter on
    a group the line names as TP's or EP's (parallel_state.py group_desc TENSOR_MODEL_PARALLEL_GROUP,
    EXPERT_MODEL_PARALLEL_GROUP) is still that group's timeout, as CP's and the TP group's one-element ALLREDUCE are;
    on the DP groups it stays without a cause."""
    d = _diagnose(_line(op, numel_in, numel_out, desc))
    assert [c["id"] for c in d["causes"]] == ([want] if want else []), d["causes"]
