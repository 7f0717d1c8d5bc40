"""The findings a resolved request earns. Each check reads the resolver's State; none changes it."""

from __future__ import annotations

from .findings import Finding, make
from .resolver import DP_BUCKET_SIZE, State
from .text import fmt

_TP_OFF = {
    "tp_size": (
        "TP_OVERLAP_OFF_TP_SIZE",
        "comm_overlap.tp_comm_overlap=true is turned off: tensor_model_parallel_size={tp} < 2",
        "model.tensor_model_parallel_size=2 (or more) with model.sequence_parallel=true, or drop comm_overlap.tp_comm_overlap",
        ["comm_overlap.tp_comm_overlap", "model.tensor_model_parallel_size"],
    ),
    "sequence_parallel": (
        "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL",
        "comm_overlap.tp_comm_overlap=true is turned off: model.sequence_parallel=false",
        "model.sequence_parallel=true",
        ["comm_overlap.tp_comm_overlap", "model.sequence_parallel"],
    ),
    "te": (
        "TP_OVERLAP_OFF_NO_TE",
        "comm_overlap.tp_comm_overlap=true is turned off: Transformer Engine is not importable",
        "install Transformer Engine (transformer-engine[pytorch]) in the training environment",
        ["comm_overlap.tp_comm_overlap"],
    ),
}


def collect(state: State) -> list[Finding]:
    out: list[Finding] = []
    for check in CHECKS:
        out.extend(check(state))
    return out


def rejections(state: State):
    for r in state.rejections:
        yield make(r.id, f"Bridge raises in runtime_config_update(): {r.message}", _REJECTION_FIX[r.id])


_REJECTION_FIX = {
    "MXFP8_REUSE_WITHOUT_FP8_PARAM_GATHER": "ddp.reuse_grad_buf_for_mxfp8_param_ag=false, or an MXFP8 recipe with fp8_param_gather",
    "NUM_BUCKETS_WITH_BUCKET_SIZE": "drop ddp.num_buckets; set comm_overlap.bucket_size=N (parameters) instead",
    "MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP": "comm_overlap.overlap_param_gather_with_optimizer_step=false",
    "MXFP8_PARAM_GATHER_WITHOUT_REUSE": "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=true",
    "FP8_PARAM_GATHER_WITHOUT_FP8": "mixed_precision.fp8_param_gather=false, or an FP8 recipe (mixed_precision=bf16_with_fp8_current_scaling_mixed)",
}


def tp_overlap(state: State):
    if state.tp_overlap_disabled_by:
        fid, message, fix, knobs = _TP_OFF[state.tp_overlap_disabled_by]
        yield make(fid, message.format(tp=state.model["tensor_model_parallel_size"]), fix, knobs)
    model = state.model
    if state.request.comm_overlap is not None and model["tp_comm_overlap"] and model["tp_comm_overlap_cfg"] is None:
        yield make(
            "TP_OVERLAP_DEFAULT_UB_CFG",
            "TP overlap is on with no tuned userbuffers preset: Transformer Engine's default config is used",
            "comm_overlap.tp_comm_overlap_cfg=PRESET if one matches (python -m mbridge_overlap presets), else nothing",
            ["comm_overlap.tp_comm_overlap_cfg"],
        )
    if state.request.comm_overlap is None and model["tp_comm_overlap"]:
        yield make(
            "TP_OVERLAP_UNGATED",
            "model.tp_comm_overlap=true without comm_overlap: no TP-size, sequence-parallel or TE check runs",
            "comm_overlap.tp_comm_overlap=true (and drop model.tp_comm_overlap)",
            ["model.tp_comm_overlap"],
        )


def sequence_parallel(state: State):
    if state.request.model["sequence_parallel"] and not state.model["sequence_parallel"]:
        yield make(
            "SEQUENCE_PARALLEL_DROPPED",
            "model.sequence_parallel=true is turned off at finalize: tensor_model_parallel_size=1",
            "model.tensor_model_parallel_size=2 (or more), or model.sequence_parallel=false",
            ["model.sequence_parallel", "model.tensor_model_parallel_size"],
        )


def pp_overlap(state: State):
    model = state.model
    if model["pipeline_model_parallel_size"] > 1 and not model["overlap_p2p_comm"]:
        vpp = model["virtual_pipeline_model_parallel_size"]
        user = state.request.comm_overlap
        if user is None:
            why, fix = "no comm_overlap section", "comm_overlap.tp_comm_overlap=false (any comm_overlap section lets Bridge select it; true with TP >= 2 and sequence parallel)"
        elif (vpp or 1) > 1:
            why, fix = "comm_overlap.overlap_p2p_comm=false was requested", "comm_overlap.overlap_p2p_comm=true comm_overlap.batch_p2p_comm=false"
        else:
            why, fix = f"virtual_pipeline_model_parallel_size={vpp}", "model.virtual_pipeline_model_parallel_size=2 (or more; the layers must split evenly over PP x VPP)"
        if user is None and (vpp or 1) <= 1:
            fix = "model.virtual_pipeline_model_parallel_size=2 (or more) and a comm_overlap section"
        yield make(
            "PP_OVERLAP_NOT_SELECTED",
            f"PP={model['pipeline_model_parallel_size']} runs without P2P overlap ({why}); "
            f"batch_p2p_comm={str(model['batch_p2p_comm']).lower()}",
            fix,
            ["model.pipeline_model_parallel_size", "model.virtual_pipeline_model_parallel_size"],
        )


def comm_overlap_absent(state: State):
    if state.request.comm_overlap is None:
        yield make(
            "COMM_OVERLAP_ABSENT",
            "no comm_overlap section: Bridge selects no TP/PP/DP overlap; model and ddp keep the recipe's values",
            "comm_overlap.tp_comm_overlap=true (TP>=2 with sequence parallel) or =false to get PP/DP selection only",
            ["comm_overlap"],
        )


def overwritten(state: State):
    for key, requested, effective, by in state.overwritten:
        section = key.partition(".")[0]
        name = key.partition(".")[2]
        if by == "comm_overlap":
            fid = "MODEL_KNOB_OVERWRITTEN" if section == "model" else "DP_OVERLAP_KNOB_OVERWRITTEN"
            fix = f"comm_overlap.{name}={fmt(requested)}"
            if name == "use_distributed_optimizer":
                continue
        elif by == "mixed_precision":
            fid, fix = "PRECISION_KNOB_OVERWRITTEN", f"mixed_precision.{name}={fmt(requested)}"
        elif name == "overlap_param_gather":
            fid = "PARAM_GATHER_FORCED_ON"
            fix = "ddp.overlap_param_gather=false and optimizer.overlap_param_gather=false"
        else:
            continue  # sequence_parallel and use_distributed_optimizer have findings of their own
        yield make(fid, f"{key}={fmt(requested)} is overwritten by {by}: effective {fmt(effective)}", fix, [key])


def distributed_optimizer(state: State):
    req = state.request
    if req.ddp["use_distributed_optimizer"] != req.optimizer["use_distributed_optimizer"]:
        skipped = not req.ddp["use_distributed_optimizer"] and req.comm_overlap is not None
        yield make(
            "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE",
            f"ddp.use_distributed_optimizer={fmt(req.ddp['use_distributed_optimizer'])}, "
            f"optimizer.use_distributed_optimizer={fmt(req.optimizer['use_distributed_optimizer'])}: "
            "validate() turns both on"
            + ("; CommOverlapConfig had already skipped DP overlap" if skipped else ""),
            "set both to the same value: ddp.use_distributed_optimizer=true (and optimizer's) for DP overlap",
            ["ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"],
        )
    user = req.comm_overlap or {}
    dp_keys = [f"comm_overlap.{k}" for k in _DP_KNOBS if user.get(k) is not None]
    if dp_keys and not state.dp_overlap_applied:
        yield make(
            "DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER",
            f"{', '.join(dp_keys)} ignored: ddp.use_distributed_optimizer was False when CommOverlapConfig ran",
            "ddp.use_distributed_optimizer=true",
            dp_keys + ["ddp.use_distributed_optimizer"],
        )
    if state.ddp["overlap_param_gather"] and not state.ddp["use_distributed_optimizer"]:
        yield make(
            "PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER",
            "overlap_param_gather is on but the distributed optimizer is off: there is no param all-gather to overlap",
            "ddp.overlap_param_gather=false optimizer.overlap_param_gather=false",
            ["ddp.overlap_param_gather", "optimizer.overlap_param_gather"],
        )


_DP_KNOBS = ("overlap_grad_reduce", "overlap_param_gather", "overlap_param_gather_with_optimizer_step", "align_param_gather", "bucket_size")


def dp_size(state: State):
    if state.data_parallel_size == 1:
        off = " and CommOverlapConfig turns DP overlap off" if state.dp_overlap_applied else ""
        yield make(
            "DP_SIZE_ONE",
            f"data_parallel_size=1 ({state.gpus} GPUs = TP x PP x CP): no DP communication{off}",
            "more GPUs, or smaller TP/PP/CP, if you want data parallelism",
            ["model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size"],
        )
    model = state.model
    if (
        state.dp_overlap_applied
        and state.data_parallel_size > 1
        and model["pipeline_model_parallel_size"] > 1
        and (model["virtual_pipeline_model_parallel_size"] or 1) > 1
    ):
        yield make(
            "BRIDGE_SELECTS_ALIGN_PARAM_GATHER",
            "PP>1, VPP>1, DP>1: Bridge sets align_param_gather=true; overlap_param_gather_with_optimizer_step stays off",
            "nothing to do; comm_overlap.overlap_param_gather_with_optimizer_step=true only after checking checkpointing",
            ["ddp.align_param_gather", "optimizer.overlap_param_gather_with_optimizer_step"],
        )


def bucket_size(state: State):
    for key in ("ddp.bucket_size", "comm_overlap.bucket_size"):
        value = state.request.explicit.get(key)
        if value is None or not looks_like_bytes(value):
            continue
        per_param = 4 if state.ddp["grad_reduce_in_fp32"] else 2
        yield make(
            "BUCKET_SIZE_LOOKS_LIKE_BYTES",
            f"{key}={value} counts parameters ({value * per_param / 2**20:.0f} MiB of gradients at {per_param} bytes each); "
            "it looks like a byte or megabyte figure",
            f"{key}={value // per_param if value >= 2**20 else value * 2**20 // per_param} if you meant "
            f"{value if value < 2**20 else value // 2**20} MiB of gradients",
            [key],
        )


def looks_like_bytes(value: int) -> bool:
    """Small enough to be a megabyte count (25), or a whole number of MiB below Bridge's 128 Mi-parameter default
    (26214400 = 25 MiB, as in PyTorch DDP's bucket_cap_mb): figures people write when they think in bytes."""
    return value < 2**20 or (value % 2**20 == 0 and value < DP_BUCKET_SIZE)


def launch_env_fields(state: State):
    from .schema import LAUNCH_ENV_NAMES

    for key in state.request.launch_env_fields:
        name = key.partition(".")[2]
        env = LAUNCH_ENV_NAMES.get(name.lower(), name.upper())
        where = "env_vars." + env if state.request.release.env_vars else f"export {env}=... in the launcher"
        yield make(
            "LAUNCH_ENV_NOT_COMM_OVERLAP_FIELD",
            f"{key} is not a CommOverlapConfig field: {env} is process environment",
            f"{where}=VALUE (python -m mbridge_overlap plan prints Bridge's value for your layout)",
            [key],
        )


def unmodeled(state: State):
    keys = state.request.unmodeled
    if keys:
        shown = ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
        yield make("UNMODELED_KEY", f"not part of overlap selection, read past: {shown}", "nothing to do", keys[:8])


CHECKS = [
    rejections,
    launch_env_fields,
    tp_overlap,
    sequence_parallel,
    pp_overlap,
    comm_overlap_absent,
    overwritten,
    distributed_optimizer,
    dp_size,
    bucket_size,
    unmodeled,
]
