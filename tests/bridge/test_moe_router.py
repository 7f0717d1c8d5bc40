"""The MoE router's first forward against Megatron-Core's own TopKRouter on the CPU (gloo ranks, the installed release):
MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE where group_limited_topk raises (fuzzZ Z-3), QUANTILE_BALANCING_REFUSED_BY_ROUTER
where quantile_balancing asserts (evalAF AF-7), the budget's quantile-balancing logits all-gather against the one the
router makes over TP x CP (AF-8), and QUANTILE_BALANCING_NOT_IN_RELEASE where the installed Megatron-Core has no
quantile balancing (AF-9: Bridge 0.5.x). Each raise's file:line is the one the finding names."""

import json

import pytest

from mbridge_overlap import api

import gloo_ranks  # (rootdir-relative: tests/bridge has no __init__)

_ROUTE = r'''
import json, os, sys, traceback
import torch
port, cases, rank, world = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
torch.distributed.init_process_group("gloo")
torch.cuda.current_device = lambda: "cpu"
from megatron.core import parallel_state, __version__
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.moe.router import TopKRouter
from megatron.core.transformer.transformer_config import TransformerConfig
tp = cases.pop("tp", 1)
parallel_state.initialize_model_parallel(tp)
gathers = []
real_gather = torch.distributed.all_gather_into_tensor
def record(out, inp, group=None, **kw):
    gathers.append([out.numel(), inp.numel(), str(inp.dtype).replace("torch.", ""), torch.distributed.get_world_size(group)])
    return real_gather(out, inp, group=group, **kw)
torch.distributed.all_gather_into_tensor = record
answers = {}
for name, case in cases.items():
    tokens = case.pop("tokens", 64)
    cfg = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, add_bias_linear=False,
                            tensor_model_parallel_size=tp, sequence_parallel=tp > 1, **case)
    router = TopKRouter(config=cfg, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    router.train()
    gathers.clear()
    try:
        router.routing(torch.randn(tokens, case["num_moe_experts"]))
        answers[name] = {"ok": True, "aux": router.is_aux_loss_enabled(), "qb_beta": hasattr(router, "qb_beta")}
    except Exception as e:
        at = traceback.extract_tb(e.__traceback__)[-1]
        answers[name] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                         "at": f"{at.filename.split('site-packages/')[-1]}:{at.lineno}"}
    answers[name]["gathers"] = list(gathers)
print(json.dumps({"mcore": __version__, "has_qb": hasattr(TopKRouter, "quantile_balancing"), "answers": answers}))
'''

DSV3 = {"num_moe_experts": 256, "moe_router_topk": 8, "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True}
GROUPS = [(64, 1), (256, 4), (8, 4), (64, 2), (128, 3), (256, 8), (32, 1)]
QB = {**DSV3, "moe_router_load_balancing_type": "quantile_balancing", "moe_aux_loss_coeff": 1e-4}
QB_CASES = {"qb_fusion": {**QB, "moe_router_fusion": True}, "qb_groups": {**QB, "moe_router_num_groups": 8, "moe_router_group_topk": 4},
            "qb_plain": QB, "seq_aux": {**DSV3, "moe_router_load_balancing_type": "seq_aux_loss", "moe_aux_loss_coeff": 1e-4}}
RECIPE = "deepseek_v3_pretrain_config"  # (in every release)
QB_RECIPE = "perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config"


@pytest.fixture(scope="module")
def routed():
    cases = {f"g{g}_{p}": {**DSV3, "moe_router_num_groups": g, "moe_router_group_topk": p} for g, p in GROUPS}
    (out,) = gloo_ranks.run(_ROUTE, json.dumps({**cases, **QB_CASES}), 1)
    return out


def _installed_bridge() -> str:
    from megatron.bridge.package_info import __version__

    return __version__


@pytest.mark.parametrize("groups,pick", GROUPS)
def test_the_finding_where_group_limited_topk_raises(routed, groups, pick):
    real = routed["answers"][f"g{groups}_{pick}"]
    out = api.resolve({"model.moe_router_num_groups": str(groups), "model.moe_router_group_topk": str(pick)},
                      recipe=RECIPE, bridge_version=_installed_bridge()).to_dict()
    found = [f for f in out["findings"] if f["id"] == "MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE"]
    assert bool(found) == (not real["ok"]), real
    if found:
        assert real["error"] == "RuntimeError: selected index k out of range"
        assert f"megatron/core/{real['at'].split('megatron/core/')[-1]}" in found[0]["message"]


def test_quantile_balancing_where_the_router_asserts(routed):
    answers, version = routed["answers"], _installed_bridge()
    if not routed["has_qb"]:  # Megatron-Core 0.18 (Bridge 0.5.x): taken, no aux loss, no qb_beta (AF-9)
        for name in ("qb_groups", "qb_plain"):  # (with fusion 0.18 calls Transformer Engine's CUDA kernel: no CPU run)
            assert answers[name]["ok"] and not answers[name]["aux"] and not answers[name]["qb_beta"]
        assert answers["seq_aux"]["aux"]  # (the coefficient applies to the type that names it)
        out = api.resolve({"model.moe_router_load_balancing_type": "quantile_balancing"}, recipe="deepseek_v3_pretrain_config",
                          bridge_version=version).to_dict()
        assert "QUANTILE_BALANCING_NOT_IN_RELEASE" in {f["id"] for f in out["findings"]}
        return
    assert answers["qb_plain"]["ok"] and answers["qb_plain"]["qb_beta"]
    for name, over, words in (("qb_groups", {}, "group-limited routing."),
                              ("qb_fusion", {"model.moe_router_fusion": "true", "model.moe_router_num_groups": "null",
                                             "model.moe_router_group_topk": "null"}, "moe_router_fusion.")):
        real = answers[name]
        assert not real["ok"] and real["error"].startswith("AssertionError: Quantile balancing routing does not support")
        assert real["error"].endswith(words)
        out = api.resolve({"model.moe_router_load_balancing_type": "quantile_balancing", **over}, recipe=QB_RECIPE,
                          bridge_version=version).to_dict()
        (f,) = [f for f in out["findings"] if f["id"] == "QUANTILE_BALANCING_REFUSED_BY_ROUTER"]
        assert real["error"].partition(": ")[2] in f["message"] and real["at"].rpartition("/")[2] in f["message"]


def test_the_logits_all_gather_is_the_routers(routed):
    """TP 2 with sequence parallel, DeepSeek-V3's 256 experts and the budget's 2,048 local tokens: one all-gather per
    forward over the TP x CP group, FP32, tokens x experts in, TP x that out; the budget's row is that message."""
    if not routed["has_qb"]:
        pytest.skip("the installed Megatron-Core has no quantile balancing")
    over = {"model.moe_router_load_balancing_type": "quantile_balancing", "model.moe_router_fusion": "false",
            "model.moe_router_num_groups": "null", "model.moe_router_group_topk": "null"}
    b = api.budget(over, recipe=QB_RECIPE, bridge_version=_installed_bridge()).to_dict()["budget"]
    (row,) = [c for c in b["collectives"] if c["dimension"] == "tp" and "quantile" in c["what"]]
    local = row["bytes"] // 4 // 256 // row["group"]
    cases = {"tp": row["group"], "qb": {**QB, "moe_aux_loss_coeff": 0.0, "tokens": local}}
    outs = gloo_ranks.run(_ROUTE, json.dumps(cases), row["group"])
    for out in outs:
        real = out["answers"]["qb"]
        assert real["ok"] and real["gathers"] == [[row["bytes"] // 4, local * 256, "float32", row["group"]]]
