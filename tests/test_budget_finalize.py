"""finalize_model_grads' other collectives in the budget (budget/finalize.py), tier 1: when each runs and its size.
Tier 2 (tests/bridge/test_budget_finalize.py) holds them to Megatron-Core's own finalize_model_grads."""

from dataclasses import replace

import pytest

from mbridge_overlap import api
from mbridge_overlap.budget import finalize, shape as shapes, system as systems
from mbridge_overlap.budget.layout import Layout

DENSE = {"num_layers": 8, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "vocab_size": 1000}
MOE = {**DENSE, "num_moe_experts": 16, "moe_router_topk": 2, "moe_ffn_hidden_size": 128}
OFF = dict.fromkeys(("tp_comm_overlap", "overlap_p2p_comm", "overlap_grad_reduce", "overlap_param_gather",
                     "overlap_moe_expert_parallel_comm"), False)
H100 = systems.get("h100")


def _lay(tp=2, pp=1, dp=2, cp=1, sp=True, **kw):
    return Layout(tp=tp, pp=pp, vp=1, cp=cp, ep=1, dp=dp, sp=sp, seq=4096, mbs=1, gbs=64, precision="bf16", domain=8,
                  settings=dict(OFF), ddp={"grad_reduce_in_fp32": True}, **kw)


def _shape(base=DENSE, **kw):
    return shapes.of(None, {**base, **kw})[0]


def _items(lay, shape, rank=0, mtp=0):
    return finalize.collectives(lay, shape, H100, shape.num_layers // lay.pp, rank=rank, mtp=mtp)


def test_the_tp_all_reduce_sums_the_norms_with_sequence_parallel():
    (item,) = _items(_lay(), _shape())
    assert item.dimension == "tp" and item.bytes == (8 * 2 + 1) * 256 * 4  # two norms a layer and the final norm, FP32
    assert (item.count, item.group, item.hidden, item.setting, item.link) == (1, 2, 0.0, None, "nvlink")
    assert item.last == item.seconds > 0 and "norms" in item.what
    bf16 = replace(_lay(), ddp={})
    assert _items(bf16, _shape())[0].bytes == item.bytes // 2


@pytest.mark.parametrize("lay, shape, runs", [
    (_lay(sp=False), _shape(), False),  # no sequence parallel: every TP rank's gradients are whole already
    (_lay(tp=1, sp=False), _shape(qk_layernorm=True), False),
    (_lay(sp=False), _shape(qk_layernorm=True), True),  # q/k norms by name, with or without it
    (_lay(fsdp=True), _shape(), False), (_lay(peft=object()), _shape(), False)])
def test_when_the_tp_all_reduce_runs(lay, shape, runs):
    assert any(i.dimension == "tp" for i in _items(lay, shape)) is runs


def test_qk_norms_without_sequence_parallel_are_head_dim_wide():
    (item,) = _items(_lay(sp=False), _shape(qk_layernorm=True))
    assert item.bytes == 8 * 2 * (256 // 8) * 4


def test_routers_gates_and_the_pipeline_rank_s_own_parameters():
    shape = _shape(MOE, moe_shared_expert_intermediate_size=128, moe_shared_expert_gate=True)
    (item,) = _items(_lay(), shape)
    per_layer = 256 + 256 + 16 * 256 + 256  # input norm, pre-MLP norm, router, shared expert's gate
    assert item.bytes == (8 * per_layer + 256) * 4 and "MoE routers" in item.what and "shared-expert gates" in item.what
    pp = _lay(pp=2, dp=1)
    first, last = _items(pp, shape)[0], _items(pp, shape, rank=1)[0]
    assert first.bytes == 4 * per_layer * 4 and last.bytes == (4 * per_layer + 256) * 4  # the final norm on the last


def test_mtp_layers_norms_join_on_their_rank():
    shape = _shape(mtp_num_layers=1)
    (item,) = _items(_lay(pp=2, dp=1), shape, rank=1, mtp=1)
    assert item.bytes == (4 * 2 + 1 + 3 + 2) * 256 * 4  # 4 layers, final norm, enorm/hnorm/final, the MTP layer's two


def test_the_expert_bias_all_reduce_runs_where_the_routers_have_one():
    shape = _shape(MOE, moe_router_enable_expert_bias=True)
    lay = _lay(tp=2, dp=4, cp=2, sp=False)
    (item,) = [i for i in _items(lay, shape) if "expert bias" in i.what]
    assert (item.dimension, item.collective, item.bytes, item.group) == ("dp", "all_reduce", 8 * 16 * 4, 16)
    assert item.link == "network"  # 16 ranks (TP x CP x DP) over two 8-GPU domains
    assert not [i for i in _items(lay, _shape(MOE)) if "expert bias" in i.what]
    assert not [i for i in _items(_lay(tp=1, dp=1, sp=False), shape) if "expert bias" in i.what]  # a group of one
    mixed = _shape(MOE, moe_router_enable_expert_bias=True, moe_layer_freq=2)
    (half,) = [i for i in _items(lay, mixed) if "expert bias" in i.what]
    assert half.bytes == 4 * 16 * 4  # the MoE layers' routers only


def test_the_per_token_loss_s_token_count():
    lay = _lay(tp=2, pp=2, dp=2, sp=False, per_token_loss=True)
    items = _items(lay, _shape())
    (bcast,) = [i for i in items if i.collective == "broadcast"]
    (reduce,) = [i for i in items if i.dimension == "dp"]
    assert (bcast.dimension, bcast.bytes, bcast.group) == ("pp", 4, 2) and (reduce.bytes, reduce.group) == (4, 2)
    assert bcast.seconds > 0 and reduce.seconds > 0
    assert not _items(replace(lay, per_token_loss=False), _shape())
    assert not _items(_lay(tp=2, pp=1, dp=1, sp=False, per_token_loss=True), _shape())  # groups of one


def _budget(extra=None, **kw):
    over = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "train.global_batch_size": 64,
            **(extra or {})}
    return api.budget(over, recipe="llama3_8b_pretrain_config", gpus=16, **kw).to_dict()["budget"]


def test_the_budget_shows_them_exposed_with_their_source():
    b = _budget({"model.calculate_per_token_loss": True, "ddp.average_in_collective": False})
    rows = [c for c in b["collectives"] if "finalize_model_grads" in c["what"]]
    assert {(c["dimension"], c["collective"]) for c in rows} == {("tp", "all_reduce"), ("dp", "all_reduce")}
    assert all(c["exposed_ms"] == c["ms"] for c in rows)
    (said,) = [a for a in b["assumptions"] if a.startswith("finalize_model_grads")]
    assert "_allreduce_non_tensor_model_parallel_grads" in said and "num_tokens" in said
    for setting in ("ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "comm_overlap.tp_comm_overlap"):
        flipped = _budget({setting: True, "model.calculate_per_token_loss": True, "ddp.average_in_collective": False})
        assert [c for c in flipped["collectives"] if "finalize_model_grads" in c["what"]] == rows


def test_deepseek_v3_s_routers_carry_an_expert_bias():
    assert shapes.models()["deepseek_v3"]["shape"]["moe_router_enable_expert_bias"] is True
    assert shapes.of("deepseek_v3", {})[0].moe_router_enable_expert_bias


def test_the_quantile_balancing_average_runs_over_dp_x_cp():
    """_update_router_qb_beta (Megatron-Core 0.19): every router's qb_beta_accum / qb_beta_count, stacked (routers x
    experts, FP32), all-reduced (AVG) over the DP x CP group, TP ranks apart."""
    lay = _lay(tp=2, dp=4, cp=2, sp=False, router_qb=True)
    (item,) = [i for i in _items(lay, _shape(MOE)) if "quantile" in i.what]
    assert (item.dimension, item.collective, item.bytes, item.group) == ("dp", "all_reduce", 8 * 16 * 4, 8)
    assert item.link == "network" and item.hidden == 0.0  # 8 ranks of stride 2: over two 8-GPU domains
    assert not [i for i in _items(replace(lay, router_qb=False), _shape(MOE)) if "quantile" in i.what]
    assert not [i for i in _items(_lay(tp=2, dp=1, sp=False, router_qb=True), _shape(MOE)) if "quantile" in i.what]
    assert not [i for i in _items(lay, _shape()) if "quantile" in i.what]  # no routers
    (half,) = [i for i in _items(lay, _shape(MOE, moe_layer_freq=2)) if "quantile" in i.what]
    assert half.bytes == 4 * 16 * 4


def _moe_budget(extra, version=None):
    over = {"model.expert_model_parallel_size": 8, "model.moe_token_dispatcher_type": "alltoall",
            "train.global_batch_size": 64, **extra}
    kw = {"bridge_version": version} if version else {}
    return api.budget(over, recipe="qwen3_30b_a3b_pretrain_config", gpus=16, **kw)


def test_quantile_balancing_is_read_from_the_run_where_its_megatron_core_has_it():
    qb = {"model.moe_router_load_balancing_type": "quantile_balancing", "model.moe_aux_loss_coeff": 0.0}
    rows = [c for c in _moe_budget(qb).to_dict()["budget"]["collectives"] if "quantile" in c["what"]]
    assert [(c["dimension"], c["bytes"], c["group"]) for c in rows] == [("dp", 48 * 128 * 4, 16)]
    (said,) = [a for a in _moe_budget(qb).to_dict()["budget"]["assumptions"] if a.startswith("finalize_model_grads")]
    assert "_update_router_qb_beta" in said and "gtp_remat" in said and "flextron" in said
    old = _moe_budget(qb, "0.5.1").to_dict()["budget"]  # Megatron-Core 0.18: no quantile balancing
    assert not [c for c in old["collectives"] if "quantile" in c["what"]]
    plain = _moe_budget({}).to_dict()["budget"]
    assert not [c for c in plain["collectives"] if "quantile" in c["what"]]
    (said,) = [a for a in plain["assumptions"] if a.startswith("finalize_model_grads")]  # said why the rest is not run
    assert "gtp_remat" in said and "_update_router_qb_beta" not in said


def test_gtp_remat_is_named_only_where_the_release_s_megatron_core_has_it():
    """recheck66 AM-9: _allreduce_replicated_grads_over_gtp_remat_group is Megatron-Core 0.19's (Bridge 0.6.x);
    0.18.2's finalize_model_grads (Bridge 0.5.x) has no gtp_remat code, so a 0.5.x budget does not name it."""
    for version, named in (("0.5.1", False), ("0.5.0", False), ("0.6.0", True), ("0.6.2", True)):
        (said,) = [a for a in _moe_budget({}, version).to_dict()["budget"]["assumptions"]
                   if a.startswith("finalize_model_grads")]
        assert ("gtp_remat" in said) is named, version
        assert "flextron" in said and "has_cond_embedder" in said


def test_the_expert_bias_the_run_sets_is_accounted_for():
    """model.moe_router_enable_expert_bias from an override is priced (finalize.py), so no UNMODELED_OVERLAP_KEY says
    the answer does not model it."""
    res = _moe_budget({"model.moe_router_enable_expert_bias": True, "model.moe_router_score_function": "sigmoid"})
    assert [c for c in res.to_dict()["budget"]["collectives"] if "expert bias" in c["what"]]
    assert not [f for f in res.analysis.findings if f.id == "UNMODELED_OVERLAP_KEY"
                and "model.moe_router_enable_expert_bias" in f.knobs]
