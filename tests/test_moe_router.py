"""The MoE router's first forward (findings/rules/run.py moe_router) and quantile balancing's logits all-gather in the
budget (estimate._router_qb_gather), each held to Megatron-Core's own router on the CPU in tests/bridge/test_moe_router.py.

fuzzZ Z-3: group_limited_topk asks torch.topk for moe_router_topk // moe_router_group_topk experts of each group
(0.19.2 moe_utils.py:655-657); more than a group holds raises 'selected index k out of range' at the first step, which
TransformerConfig does not catch: the run was priced. evalAF AF-7: quantile balancing asserts router fusion off and no
group-limited routing (router.py:323-328); AF-8: its per-micro-batch FP32 logits all-gather over TP x CP
(router.py:332-351) was not priced; AF-9: on Megatron-Core 0.18 (Bridge 0.5.x) the value is taken and nothing
balances the experts, silently."""

from __future__ import annotations

import pytest

from mbridge_overlap import UsageError, api

DSV3_FP8 = "deepseek_v3_pretrain_1024gpu_h100_fp8sc_config"
DSV3_BF16 = "perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config"
QB = {"model.moe_router_load_balancing_type": "quantile_balancing"}
QB_FIXED = {**QB, "model.moe_router_fusion": "false", "model.moe_router_num_groups": "null",
            "model.moe_router_group_topk": "null"}


def _found(out, finding_id):
    return [f for f in out["findings"] if f["id"] == finding_id]


@pytest.mark.parametrize("groups,pick,fix", [(64, 1, 2), (256, 4, 8)])
def test_groups_smaller_than_topk_over_group_topk_are_an_error_with_a_proven_fix(groups, pick, fix):
    over = {"model.moe_router_num_groups": str(groups), "model.moe_router_group_topk": str(pick)}
    out = api.resolve(over, recipe=DSV3_FP8).to_dict()
    (f,) = _found(out, "MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE")
    assert f["severity"] == "error" and f["when"] == "step"
    assert "selected index k out of range" in f["message"] and "moe_utils.py:656" in f["message"]
    assert f"= {8 // pick} experts" in f["message"] and f"({256 // groups} of the 256 experts a group)" in f["message"]
    assert f["fix_overrides"] == {"model.moe_router_group_topk": fix}
    assert "unavailable" in out["budget"] and "MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE" in out["budget"]["unavailable"]
    fixed = api.resolve({**over, "model.moe_router_group_topk": str(fix)}, recipe=DSV3_FP8).to_dict()
    assert not _found(fixed, "MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE") and "iteration_ms" in fixed["budget"]
    with pytest.raises(UsageError, match="MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE"):
        api.budget(over, recipe=DSV3_FP8, model="deepseek_v3")


def test_masked_experts_are_not_the_error():
    """128 groups of 2 with group_topk 3: topk // 3 = 2 fits a group; the 6 chosen experts are fewer than top-8, so
    group_limited_topk takes masked ones (no raise): priced, and said not modelled."""
    out = api.resolve({"model.moe_router_num_groups": "128", "model.moe_router_group_topk": "3"}, recipe=DSV3_FP8).to_dict()
    assert not _found(out, "MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE")
    assert any("picks masked experts" in a for a in out["budget"]["assumptions"])


def test_limited_devices_over_the_ep_ranks():
    """moe_router_topk_limited_devices=1 at EP 64: group_topk 1 of 64 groups (TransformerConfig's conversion), 4
    experts a group: the same raise, fixed on the key the config sets."""
    out = api.resolve({"model.moe_router_num_groups": "null", "model.moe_router_group_topk": "null",
                       "model.moe_router_topk_limited_devices": "1"}, recipe=DSV3_FP8).to_dict()
    (f,) = _found(out, "MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE")
    assert "moe_router_topk_limited_devices=1 over the 64 EP ranks" in f["message"]
    assert f["fix_overrides"] == {"model.moe_router_topk_limited_devices": 2}


def test_quantile_balancing_with_groups_or_fusion_is_an_error_with_a_proven_fix():
    out = api.resolve(QB, recipe=DSV3_BF16).to_dict()
    (f,) = _found(out, "QUANTILE_BALANCING_REFUSED_BY_ROUTER")
    assert f["severity"] == "error" and "router.py:327" in f["message"]
    assert "does not support group-limited routing." in f["message"]
    assert f["fix_overrides"] == {"model.moe_router_fusion": False, "model.moe_router_num_groups": None,
                                  "model.moe_router_group_topk": None}
    assert "unavailable" in out["budget"]
    fused = api.resolve({**QB_FIXED, "model.moe_router_fusion": "true"}, recipe=DSV3_BF16).to_dict()
    (f,) = _found(fused, "QUANTILE_BALANCING_REFUSED_BY_ROUTER")
    assert "does not support moe_router_fusion." in f["message"] and "router.py:324" in f["message"]
    fixed = api.resolve(QB_FIXED, recipe=DSV3_BF16).to_dict()
    assert not _found(fixed, "QUANTILE_BALANCING_REFUSED_BY_ROUTER") and "iteration_ms" in fixed["budget"]


def test_quantile_balancings_logits_all_gather_is_priced():
    """TP 2 with sequence parallel: 2,048 local tokens x 256 experts x 4 B, gathered over TP x CP = 2 (4 MiB), in each
    of the costed rank's 7 MoE layers' forward per micro-batch (256): 1,792, exposed."""
    b = api.budget(QB_FIXED, recipe=DSV3_BF16).to_dict()["budget"]
    (row,) = [c for c in b["collectives"] if c["dimension"] == "tp" and "quantile" in c["what"]]
    assert (row["collective"], row["bytes"], row["count"], row["group"]) == ("all_gather", 2048 * 2 * 256 * 4, 7 * 256, 2)
    assert row["exposed_ms"] == row["ms"] > 0 and row["setting"] is None
    assert any("router.py:332-351" in a for a in b["assumptions"])
    plain = api.budget({"model.moe_router_num_groups": "null", "model.moe_router_group_topk": "null"},
                       recipe=DSV3_BF16).to_dict()["budget"]
    assert not [c for c in plain["collectives"] if c["dimension"] == "tp" and "quantile" in c["what"]]


def test_quantile_balancing_on_a_release_without_it_is_a_warning():
    out = api.resolve(QB, recipe="deepseek_v3_pretrain_config", bridge_version="0.5.1").to_dict()
    (f,) = _found(out, "QUANTILE_BALANCING_NOT_IN_RELEASE")
    assert f["severity"] == "warning" and "Megatron-Core 0.18.2 has no quantile balancing" in f["message"]
    assert not _found(out, "QUANTILE_BALANCING_REFUSED_BY_ROUTER")
    other = api.resolve({"model.moe_router_load_balancing_type": "seq_aux_loss"}, recipe="deepseek_v3_pretrain_config",
                        bridge_version="0.5.1").to_dict()
    assert not _found(other, "QUANTILE_BALANCING_NOT_IN_RELEASE")
