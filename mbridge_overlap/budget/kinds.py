"""A stage's kinds of layer, dense and MoE (moe_layer_freq): what one layer of each kind costs (its GEMMs, attention,
recompute and what TP sees of it), and how many of each the pipeline stage the budget costs holds."""

from __future__ import annotations

from . import shape as shapes
from .layout import recomputed, stage_numbers


def kind(lay, shape, tokens, rate, attn_rate, adapter_s, layers, moe: bool) -> dict:
    """One kind of layer (dense, or MoE): its GEMMs' and attention's forward time, its forward, what recompute runs of
    it again, and what TP sees of it: (GEMM times with fc1 and fc2 the MLP's that runs on TP, recompute, whether its
    MLP runs on TP)."""
    per_layer = shapes.layer_flops(shape, tokens, lay.seq, lay.tp, lay.cp, moe, lay.sp)
    gemm_s = {k: v / rate for k, v in per_layer.items() if k != "attention"}
    attn_s = per_layer["attention"] / attn_rate
    fwd = sum(gemm_s.values()) + attn_s + adapter_s
    again = recomputed(lay, layers, moe)
    shared = moe and "shared_fc1" in gemm_s
    again_s = (again["layer"] * fwd + again["core_attn"] * attn_s
               + again["mlp"] * (gemm_s["fc1"] + gemm_s["fc2"] + gemm_s.get("router", 0.0))
               + again["shared"] * (gemm_s.get("shared_fc1", 0.0) + gemm_s.get("shared_fc2", 0.0))
               + again["mla_up"] * sum(gemm_s.get(g, 0.0) for g in ("q_up", "q_proj", "kv_up")))
    tp_gemms = {**gemm_s, "fc1": gemm_s["shared_fc1"], "fc2": gemm_s["shared_fc2"]} if shared else gemm_s
    tp_again = {**again, "mlp": again["shared"]} if moe else again  # a MoE layer's TP fc1 and fc2: its shared expert's
    return {"gemm_s": gemm_s, "attn_s": attn_s, "fwd": fwd, "again": again, "again_s": again_s,
            "tp": (tp_gemms, tp_again, not moe or shared)}


def stage_counts(lay, shape, layers: int, kinds: dict) -> dict:
    """How many of the costed stage's layers are dense (False) and MoE (True): moe_layer_freq's pattern on the
    pipeline stage with the most forward compute (the one the others wait for), over `layers` layers."""
    if not shape.mixed:
        return {shape.moe: layers}
    best = None
    for rank in range(lay.pp):
        numbers = stage_numbers(lay, shape.num_layers, rank)
        moe = sum(map(shape.is_moe_layer, numbers))
        dense = max(0, layers - moe)
        work = moe * kinds[True]["fwd"] + dense * kinds[False]["fwd"]
        if best is None or work > best[0]:
            best = (work, {False: dense, True: moe})
    return best[1]


def said(shape, counts: dict) -> tuple:
    """The assumption of a model with dense layers among the MoE ones: how many of each the costed stage holds."""
    if not shape.mixed:
        return ()
    return (f"dense and MoE layers as moe_layer_freq places them: the pipeline stage costed (the one with the most "
            f"compute) holds {counts.get(True, 0)} MoE and {counts.get(False, 0)} dense layers; EP's all-to-alls run on "
            "the MoE layers only, a dense layer's MLP runs TP's collectives",)
