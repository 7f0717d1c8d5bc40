"""tools/check_regressions.py costs a published before/after measurement with `diff`: a case's settings reach the
config keys Bridge reads, its predicted change is diff's own, and a case it cannot cost says why. The held-back cases
live outside the repository; these cases are made up for the tests."""

from __future__ import annotations

import pytest

from mbridge_overlap import api
from tools import check_regressions as cr

MOE = {"hidden_size": 2048, "ffn_hidden_size": 6144, "num_layers": 8, "num_attention_heads": 32, "num_query_groups": 4,
       "kv_channels": 128, "vocab_size": 151936, "seq_length": 4096, "num_experts": 128, "moe_router_topk": 8,
       "moe_ffn_hidden_size": 768}
LAYOUT = {"tp": 1, "pp": 1, "vpp": None, "cp": 1, "ep": 16, "etp": 1, "mbs": 1, "gbs": 64}


def _case(**over):
    case = {"id": "made_up", "url": "https://example.invalid/1", "gpu": "h100", "gpus": 16, "model": dict(MOE),
            "layout": dict(LAYOUT), "precision": "bf16",
            "before": {"settings": {"overlap_moe_expert_parallel_comm": False, "moe_token_dispatcher_type": "alltoall"},
                       "measured": {"iter_time_s": 10.0}},
            "after": {"settings": {"overlap_moe_expert_parallel_comm": True, "moe_token_dispatcher_type": "alltoall",
                                   "cuda_graph_impl": "none"}, "measured": {"iter_time_s": 8.0}}}
    case.update(over)
    return case


def test_a_case_is_costed_by_diff_with_its_settings():
    row = cr.cost(_case())
    assert row["measured_pct"] == pytest.approx(-20.0)
    before, after, shape, unmodelled = cr.setup(_case())
    assert after == {"comm_overlap.overlap_moe_expert_parallel_comm": True, "model.moe_token_dispatcher_type": "alltoall"}
    assert unmodelled == ["cuda_graph_impl: none"]
    # the same change asked of the budget directly: diff's number is the budget's
    on = api.budget({**before, **after}, shape=shape, gpus=16).to_dict()["budget"]["iteration_ms"]
    off = api.budget(before, shape=shape, gpus=16).to_dict()["budget"]["iteration_ms"]
    assert row["predicted_pct"] == pytest.approx((on / off - 1) * 100, abs=0.01)
    assert row["predicted_pct"] < 0  # the overlap hides some of the all-to-all


def test_throughput_stands_for_the_inverse_time():
    case = _case(before={"settings": {}, "measured": {"tflops_per_gpu": 200.0}},
                 after={"settings": {}, "measured": {"tflops_per_gpu": 250.0}})
    assert cr.cost(case)["measured_pct"] == pytest.approx((200 / 250 - 1) * 100)


@pytest.mark.parametrize("over, why", [
    ({"gpu": "h20"}, "no bandwidth and GEMM data for h20"),
    ({"gpu": None}, "GPU type or count not stated"),
    ({"layout": {**LAYOUT, "mbs": None}}, "not stated: mbs"),
    ({"after": {"settings": {}, "measured": {"tflops_per_gpu": 1.0}}}, "both sides' time or throughput not stated alike"),
])
def test_a_case_that_cannot_be_costed_says_why(over, why):
    assert cr.cost(_case(**over))["not_costed"] == why


def test_a_case_released_bridge_refuses_is_not_costed():
    """EP overlap with full recompute: Bridge's CommOverlapConfig refuses it, so there is nothing to cost."""
    case = _case()
    case["after"]["settings"].update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    assert "MOE_OVERLAP_REJECTED" in cr.cost(case)["not_costed"]


def test_a_case_s_layer_split_reaches_the_config():
    """Qwen3 235B's 94 layers over PP 8 x VPP 4 split only with the embedding and the loss counted as layers, as
    Bridge's recipe sets: without them Megatron-Core refuses the layout, and the case was not costed."""
    model = {**MOE, "num_layers": 94}
    lay = {**LAYOUT, "pp": 8, "vpp": 4, "ep": 8}
    assert "PIPELINE_LAYERS_UNEVEN" in cr.cost(_case(model=model, layout=lay, gpus=64))["not_costed"]
    split = {**lay, "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    before, *_ = cr.setup(_case(model=model, layout=split, gpus=64))
    assert before["model.account_for_embedding_in_pipeline_split"] is before["model.account_for_loss_in_pipeline_split"] is True
    assert "predicted_pct" in cr.cost(_case(model=model, layout=split, gpus=64))
