"""What Megatron-Bridge will do with a requested config: `runtime_config_update()` step by step.

Each step mirrors one Bridge function (named in its docstring) on plain dicts, so the answer costs no torch
import. The rules are the same in every release of releases.yaml; what differs per release is data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import schema
from .request import Request

DP_BUCKET_SIZE = 128 * 1024 * 1024  # comm_overlap.py _get_optimizer_overlap_cfgs: a number of parameters


@dataclass
class Rejection:
    """Bridge raises inside runtime_config_update(): finding id and Bridge's own message."""

    id: str
    message: str


@dataclass
class State:
    """The config as runtime_config_update() leaves it, plus what happened on the way."""

    request: Request
    gpus: int
    te: bool
    model: dict
    ddp: dict
    optimizer: dict
    dist: dict
    data_parallel_size: int = 0
    tp_overlap_disabled_by: str | None = None  # "tp_size" | "sequence_parallel" | "te"
    dp_overlap_applied: bool = False
    overwritten: list = field(default_factory=list)  # (key, requested, effective, by)
    rejections: list = field(default_factory=list)

    def effective(self) -> dict:
        return {s: {k: getattr(self, s)[k] for k in keys} for s, keys in schema.EFFECTIVE_FIELDS.items()}


def run(request: Request, gpus: int, te: bool = True) -> State:
    """runtime_config_update(): mixed precision, DP size, comm overlap, then validate()."""
    state = State(
        request=request,
        gpus=gpus,
        te=te,
        model={**request.model, "tp_comm_overlap_cfg": None, "fp4_param": False},
        ddp=dict(request.ddp),
        optimizer=dict(request.optimizer),
        dist=dict(request.dist),
    )
    apply_mixed_precision(state)
    state.data_parallel_size = data_parallel_size(request.model, gpus)
    if request.comm_overlap is not None:
        comm_overlap_setup(state, request.comm_overlap)
    validate(state)
    return state


def data_parallel_size(model: dict, gpus: int) -> int:
    """ConfigContainer.get_data_parallel_size(): world size over TP x PP x CP (divisibility checked earlier)."""
    size = model["tensor_model_parallel_size"] * model["pipeline_model_parallel_size"] * model["context_parallel_size"]
    return gpus // size


def apply_mixed_precision(state: State) -> None:
    """MixedPrecisionConfig.setup(): every recipe field overwrites the same-named ddp/optimizer field."""
    mp = state.request.mixed_precision
    if mp is None:
        return
    values = mp.values(state.request.release)
    for name in ("grad_reduce_in_fp32", "fp8_param_gather", "reuse_grad_buf_for_mxfp8_param_ag"):
        _overwrite(state, "ddp", name, bool(values.get(name, False)), "mixed_precision")
    state.optimizer["reuse_grad_buf_for_mxfp8_param_ag"] = bool(values.get("reuse_grad_buf_for_mxfp8_param_ag", False))
    state.optimizer["fp8_recipe"] = values.get("fp8_recipe")


def comm_overlap_setup(state: State, user: dict) -> None:
    """CommOverlapConfig.finalize() and setup(): model overlap always, DP overlap only with ddp distopt."""
    chosen = model_overlap_cfgs(state, user)
    for name in ("tp_comm_overlap", "tp_comm_overlap_cfg", "tp_comm_bootstrap_backend", "overlap_p2p_comm", "batch_p2p_comm"):
        _overwrite(state, "model", name, chosen[name], "comm_overlap")
    # setup(): the DP settings reach ddp and optimizer only when ddp.use_distributed_optimizer is already True;
    # validate() syncs the two use_distributed_optimizer flags later.
    if state.ddp["use_distributed_optimizer"]:
        state.dp_overlap_applied = True
        for name, value in optimizer_overlap_cfgs(state, user).items():
            if name in state.ddp:
                _overwrite(state, "ddp", name, value, "comm_overlap")
            if name in state.optimizer:
                _overwrite(state, "optimizer", name, value, "comm_overlap")


def model_overlap_cfgs(state: State, user: dict) -> dict:
    """_get_model_comm_overlap_cfgs(): TP overlap gating, PP overlap selection, then the user's values."""
    model = state.model
    tp_requested = user["tp_comm_overlap"]
    if tp_requested is True:
        if model["tensor_model_parallel_size"] < 2:
            state.tp_overlap_disabled_by = "tp_size"
        elif not model["sequence_parallel"]:
            state.tp_overlap_disabled_by = "sequence_parallel"
        elif not state.te:
            state.tp_overlap_disabled_by = "te"
    tp_overlap = False if state.tp_overlap_disabled_by else tp_requested
    vp_size = model["virtual_pipeline_model_parallel_size"] or 1
    if model["pipeline_model_parallel_size"] > 1:
        overlap_p2p, batch_p2p = (True, False) if vp_size > 1 else (False, True)
    else:
        overlap_p2p, batch_p2p = False, False
    chosen = {
        "tp_comm_overlap": tp_overlap,
        "tp_comm_overlap_cfg": user["tp_comm_overlap_cfg"],
        "tp_comm_bootstrap_backend": user["tp_comm_bootstrap_backend"],
        "overlap_p2p_comm": overlap_p2p,
        "batch_p2p_comm": batch_p2p,
    }
    # _override_user_cfgs(): any requested (non-None) value wins over Bridge's choice.
    for name in ("overlap_p2p_comm", "batch_p2p_comm", "tp_comm_bootstrap_backend"):
        if user[name] is not None:
            chosen[name] = user[name]
    return chosen


def optimizer_overlap_cfgs(state: State, user: dict) -> dict:
    """_get_optimizer_overlap_cfgs(): DP overlap on when DP > 1, align_param_gather with VPP, then the user's."""
    model = state.model
    vp_size = model["virtual_pipeline_model_parallel_size"] or 1
    chosen = {
        "bucket_size": None,
        "overlap_grad_reduce": False,
        "overlap_param_gather": False,
        "overlap_param_gather_with_optimizer_step": False,
        "align_param_gather": False,
    }
    if state.data_parallel_size > 1:
        chosen.update(bucket_size=DP_BUCKET_SIZE, overlap_grad_reduce=True, overlap_param_gather=True)
        if model["pipeline_model_parallel_size"] > 1 and vp_size > 1:
            chosen["align_param_gather"] = True
    for name in chosen:
        if user[name] is not None:
            chosen[name] = user[name]
    return chosen


def validate(state: State) -> None:
    """ConfigContainer.validate(), the parts that touch the resolved fields, in Bridge's order."""
    ddp, opt, model = state.ddp, state.optimizer, state.model
    # optimizer.finalize(): MCore OptimizerConfig.__post_init__
    if opt.get("reuse_grad_buf_for_mxfp8_param_ag") and opt["overlap_param_gather_with_optimizer_step"]:
        _reject(
            state,
            "MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP",
            "overlap_param_gather_with_optimizer_step is not supported with reuse_grad_buf_for_mxfp8_param_ag.",
        )
    # model.finalize(): Bridge's TransformerConfig.finalize resets sequence_parallel before MCore's checks.
    if model["sequence_parallel"] and model["tensor_model_parallel_size"] <= 1:
        _overwrite(state, "model", "sequence_parallel", False, "validate")
    mp = state.request.mixed_precision
    values = mp.values(state.request.release) if mp is not None else {}
    # MixedPrecisionConfig keeps fp8_param equal to fp8_param_gather and copies fp8 and fp8_param onto the model.
    if values.get("fp8_param_gather") and not values.get("fp8"):
        _reject(state, "FP8_PARAM_GATHER_WITHOUT_FP8", "fp8_param must be used together with fp8 mode.")
    # The recipe's ddp is MCore's DistributedDataParallelConfig: validate() re-runs its __post_init__ after the
    # model's finalize, in the loop over sub-configs without a finalize().
    if ddp["reuse_grad_buf_for_mxfp8_param_ag"] and not ddp["fp8_param_gather"]:
        _reject(state, "MXFP8_REUSE_WITHOUT_FP8_PARAM_GATHER", "Reuse grad buffer only when keeping params in MXFP8.")
    if ddp["num_buckets"] is not None and ddp["bucket_size"] is not None:
        _reject(state, "NUM_BUCKETS_WITH_BUCKET_SIZE", "Cannot specify both num_buckets and bucket_size")
    if values.get("fp8_param_gather") and values.get("fp8_recipe") == "mxfp8" and not values.get("reuse_grad_buf_for_mxfp8_param_ag"):
        _reject(
            state,
            "MXFP8_PARAM_GATHER_WITHOUT_REUSE",
            "When fp8_param_gather=True and fp8_recipe='mxfp8', reuse_grad_buf_for_mxfp8_param_ag must be set to True",
        )
    sync_distributed_optimizer(state)


def sync_distributed_optimizer(state: State) -> None:
    """_validate_and_sync_distributed_optimizer_settings(): either flag True turns both True."""
    ddp, opt = state.ddp, state.optimizer
    for name in ("use_distributed_optimizer", "overlap_param_gather"):
        if ddp[name] or opt[name]:
            for section in ("ddp", "optimizer"):
                _overwrite(state, section, name, True, "validate")


def _overwrite(state: State, section: str, name: str, value, by: str) -> None:
    target = getattr(state, section)
    key = f"{section}.{name}"
    if target.get(name) != value and key in state.request.explicit:
        state.overwritten.append((key, state.request.explicit[key], value, by))
    target[name] = value


def _reject(state: State, finding_id: str, message: str) -> None:
    if not any(r.id == finding_id for r in state.rejections):
        state.rejections.append(Rejection(finding_id, message))
