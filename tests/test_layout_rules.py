"""Layout rules the config step does not check, and the fixes of an MoE run: what each verb says agrees."""

import pytest

from mbridge_overlap import api


def test_lint_s_fixes_leave_tp_overlap_off_for_an_moe_run_as_plan_does():
    """evalM M3: COMM_OVERLAP_ABSENT's and PP_OVERLAP_NOT_SELECTED's fixes turned TP overlap on for MoE recipes with
    expert parallelism, where plan leaves it off (TP_OVERLAP_NOT_RECOMMENDED) and MODE_LEFT_OFF says nothing."""
    moe = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "model.expert_model_parallel_size": 4,
           "model.num_moe_experts": 8, "model.pipeline_model_parallel_size": 2}
    found = {f["id"]: f for f in api.resolve(moe, gpus=16).to_dict()["findings"]}
    assert "COMM_OVERLAP_ABSENT" in found
    assert found["COMM_OVERLAP_ABSENT"]["fix_overrides"].get("comm_overlap.tp_comm_overlap") is False
    dense = {k: v for k, v in moe.items() if "expert" not in k}
    found = {f["id"]: f for f in api.resolve(dense, gpus=16).to_dict()["findings"]}
    assert found["COMM_OVERLAP_ABSENT"]["fix_overrides"].get("comm_overlap.tp_comm_overlap") is True


@pytest.mark.parametrize("seq, cp, finds", [(4100, 2, True), (4096, 2, False), (4098, 1, True), (4100, 1, False)])
def test_a_sequence_each_cp_rank_cannot_split_over_tp_is_found_before_the_run(seq, cp, finds):
    """evalM M4: Bridge's config step checks CP's split only; sequence parallel's scatter asserts at the first forward."""
    req = {"model.tensor_model_parallel_size": 4, "model.sequence_parallel": True, "model.context_parallel_size": cp,
           "model.seq_length": seq, "dataset.seq_length": seq}
    ids = {f["id"] for f in api.resolve(req, gpus=8 * cp).to_dict()["findings"]}
    assert ("SP_SEQ_LENGTH_NOT_DIVISIBLE_BY_TP" in ids) is finds
    assert "SP_SEQ_LENGTH_NOT_DIVISIBLE_BY_TP" not in {f["id"] for f in api.resolve(
        {**req, "model.sequence_parallel": False}, gpus=8 * cp).to_dict()["findings"]}
