"""The parallel layout: sizes, the data-parallel size Bridge derives from them, and which overlap modes can apply.

The one place the DP arithmetic (ConfigContainer.get_data_parallel_size) and the "does this mode apply" rules live;
plan, lint, recipes and the findings all ask here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    gpus: int = 1

    @classmethod
    def of(cls, model: dict, gpus: int) -> "Layout":
        """From a model section (Bridge's field names)."""
        return cls(
            tp=model["tensor_model_parallel_size"], pp=model["pipeline_model_parallel_size"],
            vpp=model["virtual_pipeline_model_parallel_size"], cp=model["context_parallel_size"],
            ep=model.get("expert_model_parallel_size", 1) or 1, gpus=gpus,
        )

    @property
    def model_parallel_size(self) -> int:
        """TP x PP x CP: the GPUs one model replica spans (get_data_parallel_size's total_model_size)."""
        return self.tp * self.pp * self.cp

    @property
    def divisible(self) -> bool:
        return self.gpus % self.model_parallel_size == 0

    @property
    def dp(self) -> int:
        return self.gpus // self.model_parallel_size

    @property
    def interleaved(self) -> bool:
        """The interleaved (virtual pipeline) schedule: PP > 1 and VPP > 1."""
        return self.pp > 1 and (self.vpp or 1) > 1

    def describe(self) -> str:
        return f"TP={self.tp} PP={self.pp} VPP={self.vpp} CP={self.cp} on {self.gpus} GPUs"


def tp_overlap_applies(tp: int, te: bool = True) -> bool:
    """TP overlap can be on: TP >= 2 (sequence parallel is then set with it) and Transformer Engine present."""
    return tp >= 2 and te


def pp_overlap_applies(shape: Layout) -> bool:
    """Bridge selects overlap_p2p_comm only for the interleaved schedule."""
    return shape.interleaved


def dp_overlap_applies(shape: Layout) -> bool:
    """There is gradient communication to overlap: Megatron-Core's DDP reduces over the DP x CP group, so at DP 1 with
    CP > 1 too (evalS V3, evalL L6)."""
    return shape.divisible and shape.dp * shape.cp > 1


def fsdp_forced(ddp: dict) -> frozenset:
    """The DP overlap flags Megatron-FSDP turns on when it wraps the model, whatever the config says (megatron_fsdp.py
    MegatronFSDP.__init__: overlap_grad_reduce for optim_grads and optim_grads_params, overlap_param_gather for
    optim_grads_params; evalS V2); after runtime_config_update, so the config's effective values do not show it."""
    if not ddp.get("use_megatron_fsdp"):
        return frozenset()
    strategy = ddp.get("data_parallel_sharding_strategy")
    return frozenset({"optim_grads": ("overlap_grad_reduce",),
                      "optim_grads_params": ("overlap_grad_reduce", "overlap_param_gather")}.get(strategy, ()))


def _dp_group(shape: Layout) -> str:
    return f"DP = {shape.dp}" if shape.cp == 1 else f"DP x CP = {shape.dp} x {shape.cp} (the gradients' group)"


def modes(effective: dict, shape: Layout, te: bool = True, sharding: str | None = None) -> dict:
    """On/off and why for TP, PP and DP overlap as runtime_config_update() leaves them: `configured`, and `enabled`
    (the same here; findings.analysis.modes takes away what an error or a blocking warning stops). DP reports
    grad-reduce and param-gather overlap separately. sharding: Megatron-FSDP's data_parallel_sharding_strategy."""
    model, ddp = effective["model"], effective["ddp"]
    out = {"tp": _tp(model, shape, te), "pp": _pp(model, shape), "dp": _dp(ddp, shape, sharding)}
    for name, mode in out.items():
        for part in ("grad_reduce", "param_gather") if name == "dp" else ():
            mode[part]["enabled"] = mode[part]["configured"]
        mode["enabled"] = mode["configured"]
    return out


def _tp(model: dict, shape: Layout, te: bool) -> dict:
    if model["tp_comm_overlap"]:
        why = "TP >= 2 with sequence parallel and Transformer Engine: userbuffers overlap of the SP all-gather/reduce-scatter"
    elif shape.tp < 2:
        why = "TP = 1: no tensor-parallel communication to overlap"
    elif not te:
        why = "Transformer Engine is not available: Bridge turns TP overlap off"
    elif not model["sequence_parallel"]:
        why = "sequence parallel is off: Bridge turns TP overlap off (or it was not requested)"
    elif model.get("fp4") and not model.get("fp8") or model.get("fp8") and model.get("fp8_recipe") == "blockwise":
        why = "off, as it must be: Transformer Engine's userbuffers cannot carry NVFP4 or blockwise FP8 (explain TP_OVERLAP_UNSUPPORTED_PRECISION)"
    else:
        why = "not requested (comm_overlap.tp_comm_overlap is false or there is no comm_overlap section)"
    return {"enabled": bool(model["tp_comm_overlap"]), "configured": bool(model["tp_comm_overlap"]), "why": why}


def _pp(model: dict, shape: Layout) -> dict:
    if model["overlap_p2p_comm"] and shape.interleaved:
        why = f"PP = {shape.pp} with VPP = {shape.vpp}: overlap_p2p_comm=true, batch_p2p_comm=false"
    elif model["overlap_p2p_comm"]:
        why = f"overlap_p2p_comm=true was requested, but PP = {shape.pp} without VPP > 1 runs the non-interleaved schedule"
    elif shape.pp > 1 and shape.interleaved:  # (evalT U8: said "without VPP > 1: batch_p2p_comm=true" at VPP 2)
        why = (f"PP = {shape.pp} with VPP = {shape.vpp}: overlap_p2p_comm=false, batch_p2p_comm="
               f"{str(bool(model['batch_p2p_comm'])).lower()} (PP_OVERLAP_NOT_SELECTED says why)")
    elif shape.pp > 1:
        why = (f"PP = {shape.pp} without VPP > 1: batch_p2p_comm={str(bool(model['batch_p2p_comm'])).lower()}; "
               "interleaving (VPP >= 2) is needed for P2P overlap")
    else:
        why = "PP = 1: no pipeline communication"
    on = bool(model["overlap_p2p_comm"]) and shape.interleaved
    return {"enabled": on, "configured": on, "why": why}


def _dp(ddp: dict, shape: Layout, sharding: str | None = None) -> dict:
    applies, forced = dp_overlap_applies(shape), fsdp_forced({**ddp, "data_parallel_sharding_strategy": sharding})
    grad = (bool(ddp["overlap_grad_reduce"]) or "overlap_grad_reduce" in forced) and applies
    param = (bool(ddp["overlap_param_gather"]) or "overlap_param_gather" in forced) and applies
    gathers = not (ddp.get("use_megatron_fsdp") and sharding == "no_shard")  # (evalL L2)
    if grad:
        why = f"{_dp_group(shape)}: overlap_grad_reduce" + (", overlap_param_gather" if param and gathers else "") \
            + (f", bucket_size={ddp['bucket_size']} parameters" if ddp["bucket_size"] else "") \
            + (", align_param_gather" if ddp["align_param_gather"] else "") \
            + (" (Megatron-FSDP" + (f", which turns {' and '.join(sorted(forced))} on at model wrap" if forced else "") + ")"
               if ddp.get("use_megatron_fsdp") else "")
    elif not shape.divisible:
        why = "no data-parallel size: the GPU count is not a multiple of TP x PP x CP (GPUS_NOT_DIVISIBLE)"
    elif not applies:
        why = "DP = 1: no data-parallel communication"
    else:
        why = f"{_dp_group(shape)} but overlap_grad_reduce is off"
    return {"enabled": grad, "configured": grad, "why": why,
            "grad_reduce": {"configured": grad, "enabled": grad, "why": "gradient reduce-scatter/all-reduce in the backward pass"},
            "param_gather": {"configured": param and gathers, "enabled": param and gathers,
                             "why": "parameter all-gather before the forward pass (distributed optimizer)" if gathers else
                             "Megatron-FSDP with no_shard: no parameter all-gather (start_param_sync returns at once)"}}
