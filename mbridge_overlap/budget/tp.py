"""TP's collectives per iteration: the sequence-parallel all-gathers and reduce-scatters (all-reduces without it) of
Transformer Engine's GEMMs, what TP overlap hides of them by its userbuffers method, and what it costs (SM margin)."""

from __future__ import annotations

from dataclasses import replace

from . import mla
from .collective import ACT_BYTES, GATHER_BYTES, Item, across
from .layout import fewest_local, link_of
from .userbuffers import ASYNC_GEMMS, UB_GEMMS, ub_exposed


def collectives(lay, shape, system, kinds, m, tokens) -> list:
    """TP's collectives of a stage's layers, by kind of layer: kinds holds (layers, gemm_s, again, mlp) for each,
    mlp whether its MLP runs TP's fc1 and fc2 collectives (a dense layer's MLP, a MoE layer's shared expert: a dense
    MLP split across TP, gemm_s's fc1 and fc2 then its GEMMs; a MoE layer's routed experts run none)."""
    merged: dict = {}
    for layers, gemm_s, again, mlp in kinds:
        if not layers:
            continue
        for i in _collectives(lay, shape, system, layers, m, tokens, gemm_s, again, mlp):
            key = (i.collective, i.what, i.setting, i.bytes)
            if key in merged:
                i = replace(i, count=merged[key].count + i.count, seconds=merged[key].seconds + i.seconds,
                            hidden=merged[key].hidden + i.hidden)
            merged[key] = i
    return list(merged.values())


def tp_local(lay, link: str) -> int | None:
    """Across the network, the fewest of a TP group's ranks in one NVLink domain (their NICs carry its rings)."""
    return fewest_local(lay, 1, lay.tp) if link == "network" else None


def _collectives(lay, shape, system, layers, m, tokens, gemm_s, again, mlp) -> list:
    if lay.tp < 2:
        return []
    elements = tokens // lay.cp * shape.hidden_size
    size = {"all_gather": int(elements * GATHER_BYTES[lay.precision])}
    link = link_of(lay, 1, lay.tp)
    local = tp_local(lay, link)
    times = layers * m
    if lay.sp:
        ub = {g: c for g, (c, _) in UB_GEMMS.items()}
        gemms = {g: gemm_s.get(layer, 0.0) for g, (_, layer) in UB_GEMMS.items()}
        backward = {g: (c, gemm_s.get(layer, 0.0)) for g, (c, layer) in ASYNC_GEMMS.items()}
        what = {"all_gather": "sequence-parallel inputs (forward) and output gradients (backward)",
                "reduce_scatter": "row-parallel outputs (forward)"}
    else:  # the row-parallel outputs' all-reduce forward; the input gradients' beside wgrad, async
        ub = {"proj_fprop": "all_reduce", "fc2_fprop": "all_reduce"}
        gemms = {g: gemm_s[UB_GEMMS[g][1]] for g in ub}
        backward = {"qkv_wgrad": ("all_reduce", gemm_s.get("qkv", 0.0)), "fc1_wgrad": ("all_reduce", gemm_s["fc1"])}
        what = {"all_reduce": "row-parallel partial sums (forward)"}
    experts = frozenset() if mlp else MLP_GEMMS  # a MoE layer's routed experts: no TP collectives of a dense MLP's
    experts |= QKV_GEMMS if shape.multi_latent_attention else frozenset()  # MLA's: mla.tp_collectives
    ub = {g: c for g, c in ub.items() if g not in experts}
    backward = {g: v for g, v in backward.items() if g not in experts}
    on = userbuffers_run(lay, shape)
    frozen = lay.peft is not None
    if frozen:  # no wgrad GEMM: the input gradient's collective has nothing beside it; the re-gather for wgrad is
        # skipped (TE: ln_out_needs_gather needs weight.requires_grad) unless userbuffers' bulk dgrad runs it anyway
        backward = {g: (c, t if c == "all_gather" else 0.0) for g, (c, t) in backward.items() if c != "all_gather" or on}
    plain = _plain_gemms(lay)
    # a recomputed forward makes its collectives again: the whole layer's (full), or the MLP's (selective mlp)
    runs = dict.fromkeys((*UB_GEMMS, *ASYNC_GEMMS), 1.0)
    for g in [g for g in runs if g.endswith("_fprop")]:
        runs[g] += again["layer"] + (again["mlp"] if g in ("fc1_fprop", "fc2_fprop") else 0.0)

    def item(collective, mine, hide, what_it_is, setting):
        nbytes = size.get(collective, elements * ACT_BYTES)
        one = system.seconds(collective, nbytes, lay.tp, link, local)
        n = sum(runs[g] for g in mine)
        return Item("tp", collective, what_it_is, nbytes, round(n * times), lay.tp, link, one * n * times,
                    sum(hide(one, g) * runs[g] for g in mine) * times, setting, **across(system, collective, link, local))

    def by_userbuffers(one, g):
        return one - ub_exposed(one, gemms[g], *lay.userbuffers[g][:2]) if on and g not in plain else 0.0

    out = []
    for c in dict.fromkeys(ub.values()):
        # (with MLA no setting hides them: Megatron-Core turns tp_comm_overlap off at the model build, TP_OVERLAP_OFF_MLA;
        # recheck59 AF6: WORTH_OVERLAP_CANNOT_PAY blamed the compute)
        setting = None if shape.multi_latent_attention else "tp_comm_overlap"
        out.append(item(c, [g for g, x in ub.items() if x == c], by_userbuffers, what[c], setting))
    for c in dict.fromkeys(x for x, _ in backward.values()):
        if c == "all_gather":
            what_it_is = ("userbuffers' bulk all-gather beside dgrad (frozen weights: no wgrad reads it)" if frozen
                          else "inputs gathered again for wgrad, beside dgrad (async)")
        else:
            what_it_is = ("input gradients (frozen weights: no wgrad GEMM beside them)" if frozen
                          else "input gradients, beside wgrad (async)")
        out.append(item(c, [g for g, (x, _) in backward.items() if x == c], lambda one, g: min(one, backward[g][1]),
                        what_it_is, None))
    if shape.multi_latent_attention:
        out += mla.tp_collectives(lay, shape, system, link, times, gemm_s, runs["qkv_fprop"], again["mla_up"])
    return out + _adapter_collectives(lay, system, link, elements * ACT_BYTES, times)


def _adapter_collectives(lay, system, link, nbytes: int, times: int) -> list:
    """Bridge's LoRA adapters' own sequence-parallel collectives (peft/utils.py ParallelLinearAdapter, BF16, in the
    autograd graph: exposed): on a column-parallel linear (linear_qkv, linear_fc1) it all-gathers its input and
    reduce-scatters that gradient where TP overlap is on (with it off TE returns the gathered input and the adapter
    gathers nothing: get_adapter_attributes_from_linear); on a row-parallel one (linear_proj, linear_fc2) it
    all-gathers its output's hidden dimension (gather_output) and, in the backward, the scattered sequence. The
    rank-sized ones (the rank-dim activations) are left out."""
    if not (lay.peft and lay.sp and lay.tp > 1):
        return []
    column = lay.peft.layernorm_fused if lay.settings["tp_comm_overlap"] else ()
    row = [g for g in ("proj", "fc2") if g in lay.peft.gemms]
    out = []
    for collective, n in (("all_gather", len(column) + 2 * len(row)), ("reduce_scatter", len(column))):
        if n:
            local = tp_local(lay, link)
            one = system.seconds(collective, nbytes, lay.tp, link, local)
            out.append(Item("tp", collective, "LoRA adapters' own sequence-parallel collectives (BF16)", nbytes, n * times,
                            lay.tp, link, one * n * times, 0.0, None, **across(system, collective, link, local)))
    return out


def _plain_gemms(lay) -> frozenset:
    """The userbuffers GEMMs that run without them: LoRA on a LayerNorm-fused linear (linear_qkv, linear_fc1) sets
    return_layernorm_output, and TE's LayerNormLinear then all-gathers its input with NCCL (anchor
    te_lora_ag_overlap_dropped)."""
    return frozenset(f"{g}_fprop" for g in lay.peft.layernorm_fused) if lay.peft else frozenset()


def userbuffers_run(lay, shape=None) -> bool:
    """TP overlap on, with sequence parallel and the TP group inside one NVLink domain: what userbuffers need; not
    with MLA, whose first down projection turns the model's tp_comm_overlap off as it is built (mla.ASSUMPTION)."""
    mla_model = shape is not None and shape.multi_latent_attention
    return lay.tp > 1 and lay.settings["tp_comm_overlap"] and lay.sp and link_of(lay, 1, lay.tp) == "nvlink" and not mla_model


# The dense MLP's TP GEMMs that a MoE layer without a shared expert does not run: its experts are grouped GEMMs
# (Transformer Engine's GroupedLinear takes no userbuffers), and the alltoall dispatcher sends each TP rank's own
# sequence shard to the experts, gathering on the expert-TP group only where expert_tensor_parallel_size > 1
# (megatron/core/transformer/moe/token_dispatcher.py). A shared expert is an MLP (SharedExpertMLP, its linears named
# fc1 and fc2 as the dense MLP's: the same userbuffers) and runs them.
MLP_GEMMS = frozenset(g for g in (*UB_GEMMS, *ASYNC_GEMMS) if g.startswith(("fc1", "fc2")))
QKV_GEMMS = frozenset(g for g in (*UB_GEMMS, *ASYNC_GEMMS) if g.startswith("qkv"))  # MLA has no linear_qkv


def sm_margin_s(lay, mlp: bool, system, gemm_s) -> float:
    """What TP overlap adds to one layer's compute: a userbuffers GEMM with an SM margin runs on the SMs the
    communication kernels leave it (Transformer Engine comm_gemm_overlap.cpp: _math_sms = sm_count - num_comm_sm).
    mlp: whether the layer's MLP runs fc1 and fc2 on TP (collectives)."""
    layer_of = {g: layer for g, (_, layer) in {**UB_GEMMS, **ASYNC_GEMMS}.items()}
    # not run with userbuffers, or not run
    idle = _plain_gemms(lay) | (frozenset() if mlp else MLP_GEMMS) | ({"qkv_wgrad", "fc1_wgrad"} if lay.peft else set())
    return sum(gemm_s[layer_of[g]] * margin / max(1, system.sms - margin)
               for g, (_, _, margin) in lay.userbuffers.items() if margin and g not in idle)

