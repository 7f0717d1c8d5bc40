"""The collectives of Megatron-Core's finalize_model_grads (distributed/finalize_model_grads.py) besides the DP buckets
and the word embedding's (embgrad.py): the TP all-reduce of the gradients every TP rank holds whole
(_allreduce_non_tensor_model_parallel_grads), the MoE routers' token counts for the expert bias
(_update_router_expert_bias), their quantile-balancing bias (_update_router_qb_beta, Megatron-Core 0.19) and the
per-token loss's token count (num_tokens). Each runs once an iteration, after
finish_grad_sync has waited for every DP bucket, blocking on the current stream before the optimizer step: exposed,
and no overlap setting moves it."""

from __future__ import annotations

from . import dp
from .collective import Item, across
from .layout import fewest_local, link_of

# The parameters whose modules set `sequence_parallel` on them, by name as Transformer Engine's spec builds them: the
# norms (TENorm and the norms TELayerNormColumnParallelLinear fuses: layernorm_linear.py reset_parameters), MTP's
# enorm/hnorm, the MoE router (router.py), the shared expert's gate (shared_experts.py), MLA's duplicated down
# projections (TELinear parallel_mode "duplicated": extensions/transformer_engine.py)
_SEQUENCE_PARALLEL = ("layer_norm_weight", "layernorm.weight", "enorm.weight", "hnorm.weight", "router.weight",
                      "shared_experts.gate_weight", "down_proj.weight")

_KINDS = (("norms", ("norm_weight", "norm.weight")), ("MoE routers", ("router.weight",)),
          ("shared-expert gates", ("gate_weight",)), ("MLA's down projections", ("down_proj.weight",)))


def tp_summed(name: str, shape, sp: bool) -> bool:
    """Whether _allreduce_non_tensor_model_parallel_grads sums this parameter's gradient over TP: marked
    sequence_parallel with sequence parallel on, or a q_layernorm/k_layernorm by name with qk_layernorm (with or
    without sequence parallel)."""
    return (sp and name.endswith(_SEQUENCE_PARALLEL)) or (
        bool(shape.qk_layernorm) and ("q_layernorm" in name or "k_layernorm" in name))


def _grad_bytes(lay) -> int:
    """main_grad's element size: DDP's gradient dtype (group_params_for_buffers: FP32 with grad_reduce_in_fp32, else
    the BF16 parameter's)."""
    return 4 if lay.ddp.get("grad_reduce_in_fp32") else 2


def _item(lay, system, dimension, collective, what, nbytes, group, stride) -> Item:
    link = link_of(lay, stride, group)
    local = fewest_local(lay, stride, group) if link == "network" else None
    t = system.seconds(collective, nbytes, group, link, local)
    return Item(dimension, collective, what + " (finalize_model_grads: not overlapped)", nbytes, 1, group, link, t, 0.0,
                None, last=t, last_bytes=nbytes, **across(system, collective, link, local))


def collectives(lay, shape, system, layers: int, rank: int = 0, mtp: int = 0) -> list:
    """The costed pipeline rank's finalize_model_grads collectives (its parameters: dp.rank_params, every model
    chunk's, the model list finalize_model_grads walks), each an exposed Item."""
    out = []
    _, params, _, _, _ = dp.rank_params(lay, shape, layers, rank, mtp)
    if lay.tp > 1 and not lay.peft and not lay.fsdp:  # (PEFT: the norms are frozen, their grads None)
        summed = [name for name, _, expert in params if not expert and tp_summed(name, shape, lay.sp)]
        elements = sum(n for name, n, _ in params if name in set(summed))
        if elements:
            kinds = [w for w, ends in _KINDS if any(name.endswith(ends) for name in summed)]
            out.append(_item(lay, system, "tp", "all_reduce", "gradients of the weights every TP rank holds whole ("
                             + ", ".join(kinds) + "), coalesced", elements * _grad_bytes(lay), lay.tp, 1))
    routers = sum(name.endswith("mlp.router.weight") for name, _, _ in params)
    group = lay.tp * lay.cp * lay.dp
    if getattr(shape, "moe_router_enable_expert_bias", False) and routers and group > 1:
        out.append(_item(lay, system, "dp", "all_reduce", f"MoE routers' token counts for the expert bias ({routers} "
                         "routers x experts, FP32, over TP x CP x DP)", routers * shape.num_moe_experts * 4, group, 1))
    if lay.router_qb and routers and lay.dp * lay.cp > 1:  # (the stacked qb_beta_accum / qb_beta_count, FP32 buffers)
        out.append(_item(lay, system, "dp", "all_reduce", f"MoE routers' quantile-balancing averages ({routers} routers "
                         "x experts, FP32, over DP x CP)", routers * shape.num_moe_experts * 4, lay.dp * lay.cp, lay.tp))
    if lay.per_token_loss:  # (an int32 scalar: Megatron-Core's schedules' total_num_tokens)
        if lay.pp > 1:
            out.append(_item(lay, system, "pp", "broadcast", "per-token loss's token count from the last stage", 4,
                             lay.pp, lay.tp * lay.cp * lay.dp))
        if lay.dp * lay.cp > 1:
            out.append(_item(lay, system, "dp", "all_reduce", "per-token loss's token count over DP x CP", 4,
                             lay.dp * lay.cp, lay.tp))
    return out


def said(lay, shape) -> tuple:
    """The assumption line."""
    parts = []
    if lay.tp > 1 and (lay.sp or shape.qk_layernorm):
        why = ("" if not (lay.peft or lay.fsdp) else " (not run here: " + (
            "PEFT freezes them, their gradients None)" if lay.peft else "Megatron-FSDP reduces its local shard, not priced)"))
        parts.append("TP: with sequence parallel the gradients of the weights each TP rank holds whole and marks "
                     "sequence_parallel (every norm, fused or not, MTP's enorm/hnorm, the MoE routers, the shared "
                     "expert's gate, MLA's down projections), and with qk_layernorm the q/k norms' with or without it, "
                     "summed over TP in one coalesced all-reduce of main_grad (FP32 with grad_reduce_in_fp32, else BF16) "
                     "of every model chunk of the costed rank (_allreduce_non_tensor_model_parallel_grads)" + why)
    if getattr(shape, "moe_router_enable_expert_bias", False):
        parts.append("MoE: moe_router_enable_expert_bias all-reduces every router's local_tokens_per_expert (FP32, "
                     "stacked: routers x experts) over the TP x CP x DP group (_update_router_expert_bias)")
    if lay.router_qb and shape.moe:
        parts.append("MoE: moe_router_load_balancing_type=quantile_balancing all-reduces (AVG) every router's averaged "
                     "quantile (qb_beta_accum / qb_beta_count, FP32, stacked: routers x experts) over the DP x CP group "
                     "(_update_router_qb_beta)")
    if lay.per_token_loss:
        parts.append("calculate_per_token_loss: the int32 token count broadcast from the last pipeline stage and "
                     "all-reduced over DP x CP (num_tokens)")
    if not parts and not shape.moe:
        return ()
    return ("finalize_model_grads, once an iteration after every DP bucket is reduced, blocking before the optimizer "
            "step (exposed, no overlap setting hides them): " + "; ".join(parts + [_NOT_RUN.format(gtp=_GTP_REMAT if lay.gtp_remat else "")]),)


# finalize_model_grads' other reductions (Megatron-Core 0.19.2, distributed/finalize_model_grads.py) and why none is
# priced: none runs in a Bridge run (held in tests/bridge/test_budget_finalize.py); the gtp_remat one only where the
# release's Megatron-Core has it (0.19: Bridge 0.6.x; 0.18.x, Bridge 0.5.x, has no gtp_remat code)
_GTP_REMAT = ("_allreduce_replicated_grads_over_gtp_remat_group (gtp_weight_remat_size, 0.19): it reduces over the "
              "gtp_remat groups, which Bridge 0.6.x's initialize_distributed never builds (it calls "
              "initialize_model_parallel without gtp_remat_size), so each is one rank and it returns; ")
_NOT_RUN = ("not run under Bridge: {gtp}"
            "_allreduce_router_grads (config.flextron) and _allreduce_conditional_embedding_grads (config."
            "has_cond_embedder): read with getattr, neither is a field of Megatron-Core's TransformerConfig nor of a "
            "Bridge provider, so no Bridge config turns them on; quantile_balancing's reduction is Megatron-Core 0.19's "
            "(Bridge 0.6.x), absent from 0.18 (0.5.x)")
