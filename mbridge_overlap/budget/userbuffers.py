"""Transformer Engine's userbuffers GEMMs (TP overlap): which collective each runs, the method, splits and SM margin a
preset gives it, and what a method leaves exposed beside its GEMM."""

from __future__ import annotations

from .. import safeio
from ..errors import UsageError


# Transformer Engine's userbuffers GEMMs of a layer whose collective runs in the GEMM's stream of work
# (transformer_engine/pytorch/module/base.py initialize_ub): GEMM -> (collective, the layer it computes). Backward
# GEMMs take the forward's FLOPs.
UB_GEMMS = {
    "qkv_fprop": ("all_gather", "qkv"), "proj_fprop": ("reduce_scatter", "proj"),
    "fc1_fprop": ("all_gather", "fc1"), "fc2_fprop": ("reduce_scatter", "fc2"),
    "proj_dgrad": ("all_gather", "proj"), "fc2_dgrad": ("all_gather", "fc2"),
}


# The column-parallel layers' backward collectives: the input all-gathered again for wgrad, beside the dgrad GEMM,
# and the input gradient's reduce-scatter (all-reduce without sequence parallel), beside the wgrad GEMM. TE issues
# them async (module/linear.py and layernorm_linear.py, async_op=True) with TP overlap off, and userbuffers' bulk
# overlap (qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad) runs them beside the same GEMMs: no setting decides them.
ASYNC_GEMMS = {"qkv_dgrad": ("all_gather", "qkv"), "qkv_wgrad": ("reduce_scatter", "qkv"),
               "fc1_dgrad": ("all_gather", "fc1"), "fc1_wgrad": ("reduce_scatter", "fc1")}


PIPELINE_SPLITS = 4  # TE's default num_splits for the pipeline method (ring_exchange: the TP size)


COMM_SMS = 16  # TE's default num_sm for the pipeline and bulk methods (ring_exchange: 1), with set_sm_margin on for them


def userbuffers(preset: str | None, tp: int) -> dict:
    """Each userbuffers GEMM's (method, splits, SM margin): the preset's where it names them (Bridge's presets, which TE
    lays over its defaults: base.py get_default_config), else TE's default. The margin is the SMs the GEMM gives up to
    the communication kernels (num_sm where set_sm_margin, else 0)."""
    from ..upstream.presets import ub_config

    out = {}
    for gemm in (*UB_GEMMS, *ASYNC_GEMMS):
        mine = ub_config(preset, gemm)
        method = mine["method"]
        ring = method == "ring_exchange"
        margin = mine.get("set_sm_margin", not ring) and mine.get("num_sm", 1 if ring else COMM_SMS)
        for name, value in (("num_sm", margin), ("num_splits", mine.get("num_splits"))):  # (fuzzS S2-5: a traceback)
            if value not in (None, False) and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise UsageError(f"tp_comm_overlap_cfg.{gemm}.{name}: expected a whole number, got {safeio.shown(value)}")
        out[gemm] = (method, mine.get("num_splits") or (tp if ring else PIPELINE_SPLITS), int(margin or 0))
    return out


def ub_exposed(comm: float, gemm: float, method: str, splits: int) -> float:
    """What one collective leaves exposed beside its GEMM under a userbuffers method (TE's comm_gemm_overlap): bulk
    runs it beside the whole GEMM; pipeline cuts the GEMM in `splits` chunks, each chunk's reduce-scatter beside the
    next chunk's GEMM, the last one's alone; ring_exchange cuts it in `splits` (TP) chunks, the first computed on
    the local shard, each of the other exchange steps beside a chunk."""
    if method == "bulk" or splits < 2:
        return max(0.0, comm - gemm)
    if method == "pipeline":
        return comm / splits + (splits - 1) * max(0.0, (comm - gemm) / splits)
    steps = splits - 1
    return steps * max(0.0, comm / steps - gemm / splits)

