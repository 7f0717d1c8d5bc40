"""The findings a resolved request earns. Each check reads the resolver's State and none changes it; the text of
every finding comes from the registry (data/findings.yaml), the typed fix is computed here."""

from __future__ import annotations

from . import layout, resolver, schema
from .errors import UsageError
from . import findings
from .findings import Finding, make
from .resolver import DP_BUCKET_SIZE, State
from .text import fmt

MIB = 2**20
# Model fields CommOverlapConfig writes; a value set on the model is overwritten, one set on comm_overlap wins.
COMM_OVERLAP_MODEL_FIELDS = ("tp_comm_overlap", "tp_comm_bootstrap_backend", "overlap_p2p_comm", "batch_p2p_comm",
                             "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "overlap_moe_expert_parallel_comm",
                             "delay_wgrad_compute")
DP_KNOBS = ("overlap_grad_reduce", "overlap_param_gather", "overlap_param_gather_with_optimizer_step", "align_param_gather", "bucket_size")


def collect(state: State) -> list[Finding]:
    out: list[Finding] = []
    for check in CHECKS:
        out.extend(check(state))
    return out


def errors(state: State) -> set:
    """The ids of the errors a state earns (Bridge's rejections and the failures after the config step): what a
    candidate fix must not add."""
    return {r.id for r in state.rejections} | {f.id for check in LATER_FAILURES for f in check(state)}


overrides_text = findings.overrides_text


def _rerun(state: State, overrides: dict, remove=()) -> State | None:
    try:
        req = state.request.derive(overrides, remove)
    except UsageError:
        return None
    return resolver.run(req, state.gpus, state.te, state.gpu, state.launcher_env)


def _first_safe(state: State, candidates: list[dict]) -> dict:
    """The first candidate fix that adds no error to the request (by re-resolving it); the last one otherwise."""
    before = errors(state)
    for overrides in candidates:
        after = _rerun(state, overrides)
        if after is not None and errors(after) <= before:
            return overrides
    return candidates[-1]


def _owner(state: State, name: str, section: str = "model") -> str:
    """Where a comm_overlap-written field is requested: comm_overlap when the request has one, else the section."""
    return f"comm_overlap.{name}" if state.request.comm_overlap is not None else f"{section}.{name}"


def adopt_dp_knobs(state: State) -> dict:
    """The ddp/optimizer DP overlap values the user set, moved onto comm_overlap (where they win once
    CommOverlapConfig applies its DP settings)."""
    out = {}
    for name in DP_KNOBS:
        for section in ("ddp", "optimizer"):
            key = f"{section}.{name}"
            if key in state.request.explicit and state.request.explicit[key] is not None:
                out[f"comm_overlap.{name}"] = bucket_parameters(state, state.request.explicit[key]) if name == "bucket_size" else state.request.explicit[key]
    return out


# --- Bridge's rejections ---------------------------------------------------------------------------------------


def rejections(state: State):
    for r in state.rejections:
        overrides, extra = _REJECTION_FIXES[r.id](state, r)
        params = {**_rejection_params(state), **extra}
        yield make(r.id, fix_overrides=overrides, where=r.where, bridge=r.message, **params,
                   fix=overrides_text(overrides) or "change the layout (no config override fixes it)")


def _moe_off(state: State, r) -> tuple[dict, dict]:
    req, out = state.request, {}
    for name in ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute"):
        if req.comm_overlap is not None and req.comm_overlap.get(name):
            out[f"comm_overlap.{name}"] = False
        elif req.comm_overlap is None and req.model.get(name):
            out[f"model.{name}"] = False
    return out, {}


def _defer_off(state: State, r) -> tuple[dict, dict]:
    return {_owner(state, "defer_embedding_wgrad_compute"): False}, {}


def _reuse_off(state: State, r) -> tuple[dict, dict]:
    key = "mixed_precision" if state.request.mixed_precision is not None else "ddp"
    return {f"{key}.reuse_grad_buf_for_mxfp8_param_ag": False}, {}


def _with_step_off(state: State, r) -> tuple[dict, dict]:
    return {_owner_dp(state, "overlap_param_gather_with_optimizer_step"): False}, {}


def _owner_dp(state: State, name: str) -> str:
    co = state.request.comm_overlap
    return f"comm_overlap.{name}" if co is not None and co.get(name) is not None else f"optimizer.{name}"


def _batch(state: State, r) -> tuple[dict, dict]:
    mbs = state.validation["eval_micro_batch_size"] or state.train["micro_batch_size"]
    key = "validation.eval_global_batch_size" if state.validation["eval_global_batch_size"] else "train.global_batch_size"
    gbs = state.validation["eval_global_batch_size"] or state.train["global_batch_size"]
    step = mbs * state.data_parallel_size
    return {key: -(-gbs // step) * step}, {}


def _fsdp_connections(state: State, r) -> tuple[dict, dict]:
    launcher = state.launcher_env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    if launcher or not state.request.release.env_vars:
        return {}, {"origin": "the launcher's environment"}
    return {"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 32}, {"origin": "env_vars"}


def _fsdp_format(state: State, r) -> tuple[dict, dict]:
    which = "save" if state.checkpoint["save"] is not None else "load"
    return {"checkpoint.ckpt_format": "fsdp_dtensor"}, {"format": state.checkpoint["ckpt_format"], "which": which}


def _gpus(state: State, r) -> tuple[dict, dict]:
    shape = layout.Layout.of(state.model, state.gpus)
    return {}, {"gpus": state.gpus, "tp": shape.tp, "pp": shape.pp, "cp": shape.cp, "size": shape.model_parallel_size}


def _cp_finetune(state: State, r) -> tuple[dict, dict]:
    return {"model.calculate_per_token_loss": True, "ddp.average_in_collective": False}, {}


def _mxfp8_reuse_on(state: State, r) -> tuple[dict, dict]:
    out = {"mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": True}
    if state.optimizer["overlap_param_gather_with_optimizer_step"]:
        out[_owner_dp(state, "overlap_param_gather_with_optimizer_step")] = False
    return out, {}


def _static(overrides: dict):
    return lambda state, r: (dict(overrides), {})


_REJECTION_FIXES = {
    "GPUS_NOT_DIVISIBLE": _gpus,
    "FP4_WITH_FP8": _static({"mixed_precision.fp4": None}),
    "MOE_OVERLAP_REJECTED": _moe_off,
    "DEFER_EMBEDDING_WGRAD_REJECTED": _defer_off,
    "FP8_PARAM_GATHER_WITHOUT_FP8": _static({"mixed_precision.fp8_param_gather": False}),
    "FP4_PARAM_GATHER_WITHOUT_FP4": _static({"mixed_precision.fp4_param_gather": False}),
    "MXFP8_REUSE_WITHOUT_FP8_PARAM_GATHER": _reuse_off,
    "NUM_BUCKETS_WITH_BUCKET_SIZE": _static({"ddp.num_buckets": None}),
    "MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP": _with_step_off,
    "MXFP8_PARAM_GATHER_WITHOUT_REUSE": _mxfp8_reuse_on,
    "BATCH_NOT_DIVISIBLE_BY_DP": _batch,
    "FSDP_BOTH_KINDS": _static({"dist.use_torch_fsdp2": False}),
    "FSDP_NEEDS_FSDP_DTENSOR": _fsdp_format,
    "FSDP_WITH_ONE_CONNECTION": _fsdp_connections,
    "FSDP_MANUAL_REGISTRATION_WITHOUT_NCCL_UB": _static({"ddp.fsdp_manual_registration": False}),
    "FSDP_WITH_TP_PP_DP_MAPPING": _static({"dist.use_tp_pp_dp_mapping": False}),
    "FULL_ITERATION_GRAPH_NAN_CHECK": _static({"rerun_state_machine.check_for_nan_in_loss": False}),
    "FSDP_DTENSOR_WITHOUT_FSDP": _static({"checkpoint.ckpt_format": "torch_dist"}),
    "CP_FINETUNE_AVERAGE_IN_COLLECTIVE": _cp_finetune,
    "FLEX_DISPATCHER_NOT_ON_THIS_GPU": _static({"model.moe_token_dispatcher_type": "alltoall"}),
    "CUDA_GRAPH_LOCAL_SCOPED": _static({"model.cuda_graph_impl": "transformer_engine"}),
    "EXPERT_PARALLEL_WITHOUT_EXPERTS": _static({}),
    "CP_SEQUENCE_NOT_DIVISIBLE": _static({}),
}


def _rejection_params(state: State):
    """Extra template values some rejection records name."""
    model = state.model
    return {"gpu": state.gpu, "seq": model["seq_length"], "cp": model["context_parallel_size"]}


# --- failures after the config step that the config already decides ---------------------------------------------


def vpp_without_pp(state: State):
    model = state.model
    if model["virtual_pipeline_model_parallel_size"] is not None and model["pipeline_model_parallel_size"] <= 1:
        yield make("VPP_WITHOUT_PP", fix_overrides={"model.virtual_pipeline_model_parallel_size": None}, vpp=model["virtual_pipeline_model_parallel_size"])


def p2p_overlap(state: State):
    model = state.model
    pp, vpp = model["pipeline_model_parallel_size"], model["virtual_pipeline_model_parallel_size"]
    if pp <= 1 or not model["overlap_p2p_comm"]:
        return
    params = dict(pp=pp, vpp=fmt(vpp), batch=fmt(model["batch_p2p_comm"]))
    if vpp is None:
        key = _owner(state, "overlap_p2p_comm")
        o = {key: False}
        yield make("P2P_OVERLAP_WITHOUT_INTERLEAVING", fix_overrides=o, fix=f"{overrides_text(o)}, or model.virtual_pipeline_model_parallel_size >= 2 for P2P overlap", **params)
    elif model["batch_p2p_comm"]:
        o = {_owner(state, "batch_p2p_comm"): False}
        yield make("P2P_OVERLAP_AND_BATCHED", fix_overrides=o, fix=overrides_text(o), **params)


def param_gather_with_step(state: State):
    model, opt = state.model, state.optimizer
    if not opt["overlap_param_gather_with_optimizer_step"]:
        return
    if opt["use_distributed_optimizer"] and (model["virtual_pipeline_model_parallel_size"] or 1) <= 1:
        o = {_owner_dp(state, "overlap_param_gather_with_optimizer_step"): False}
        yield make("PARAM_GATHER_WITH_OPTIMIZER_STEP_SINGLE_CHUNK", fix_overrides=o,
                   fix=f"{overrides_text(o)} (it needs the interleaved schedule, VPP >= 2)", vpp=fmt(model["virtual_pipeline_model_parallel_size"]))


def unsupported_tp_overlap_precision(state: State):
    model = state.model
    why = tp_overlap_precision_problem(model)
    if model["tp_comm_overlap"] and why:
        key = "comm_overlap.tp_comm_overlap" if state.request.comm_overlap is not None else "model.tp_comm_overlap"
        o = {key: False}
        recipe = state.request.mixed_precision.recipe if state.request.mixed_precision else "the model's precision"
        yield make("TP_OVERLAP_UNSUPPORTED_PRECISION", fix_overrides=o, what=f"{why[0]} ({recipe})", why=why[1],
                   fix=f"{overrides_text(o)}, as Bridge's recipes with this precision and TP > 1 have it")


def tp_overlap_precision_problem(model: dict) -> tuple[str, str] | None:
    """(precision, what fails) when Transformer Engine's userbuffers cannot carry this precision's tensors."""
    if model.get("fp4") and not model.get("fp8"):
        return "NVFP4", ("Bridge registers userbuffers for BF16 only (model.fp8 is unset) and the first TP-overlapped forward fails in "
                         "Transformer Engine (get_ub: 'UB for ... with use_fp8=True is not registered.'; TE 2.20 has no NVFP4 userbuffers path)")
    if model.get("fp8") and model.get("fp8_recipe") == "blockwise":
        return "blockwise FP8", ("Transformer Engine 2.20's userbuffers all-gather has no path for the blockwise FP8 quantizer "
                                 "('Unsupported quantizer for Userbuffers') at the first TP-overlapped forward")
    return None


LATER_FAILURES = [vpp_without_pp, p2p_overlap, param_gather_with_step, unsupported_tp_overlap_precision]


# --- what Bridge turned off, selected or overwrote ---------------------------------------------------------------


def tp_overlap(state: State):
    model, req = state.model, state.request
    tp = model["tensor_model_parallel_size"]
    if state.tp_overlap_disabled_by == "tp_size":
        yield make("TP_OVERLAP_OFF_TP_SIZE", fix_overrides={"comm_overlap.tp_comm_overlap": False}, tp=tp)
    elif state.tp_overlap_disabled_by == "sequence_parallel":
        o = _first_safe(state, [{"model.sequence_parallel": True}, {"comm_overlap.tp_comm_overlap": False}])
        yield make("TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL", fix_overrides=o, tp=tp)
    elif state.tp_overlap_disabled_by == "te":
        yield make("TP_OVERLAP_OFF_NO_TE")
    if req.comm_overlap is not None and model["tp_comm_overlap"] and model["tp_comm_overlap_cfg"] is None:
        yield make("TP_OVERLAP_DEFAULT_UB_CFG", why="", fix="comm_overlap.tp_comm_overlap_cfg=PRESET if one matches (presets), else nothing")
    if req.comm_overlap is None and model["tp_comm_overlap"]:
        if tp >= 2:
            o = {"model.tp_comm_overlap": False, "comm_overlap.tp_comm_overlap": True, **adopt_dp_knobs(state), **_adopt_model_knobs(state)}
            if not model["sequence_parallel"]:
                o["model.sequence_parallel"] = True
        else:
            o = {"model.tp_comm_overlap": False}
        yield make("TP_OVERLAP_UNGATED", fix_overrides=o, fix=overrides_text(o))


def _adopt_model_knobs(state: State) -> dict:
    """Model fields CommOverlapConfig would overwrite, moved onto the new comm_overlap section."""
    return {f"comm_overlap.{n}": state.request.explicit[f"model.{n}"] for n in COMM_OVERLAP_MODEL_FIELDS
            if f"model.{n}" in state.request.explicit and n != "tp_comm_overlap"}


def sequence_parallel(state: State):
    if state.request.model["sequence_parallel"] and not state.model["sequence_parallel"]:
        yield make("SEQUENCE_PARALLEL_DROPPED", fix_overrides={"model.sequence_parallel": False})


def pp_overlap(state: State):
    model, req = state.model, state.request
    pp, vpp = model["pipeline_model_parallel_size"], model["virtual_pipeline_model_parallel_size"]
    if pp <= 1 or model["overlap_p2p_comm"]:
        return
    if req.comm_overlap is None:
        why = "no comm_overlap section"
        fix = "model.virtual_pipeline_model_parallel_size=2 (or more) and a comm_overlap section" if (vpp or 1) <= 1 \
            else "a comm_overlap section (comm_overlap.tp_comm_overlap=false is enough) lets Bridge select it"
    elif (vpp or 1) > 1:
        why, fix = "comm_overlap.overlap_p2p_comm=false was requested", "comm_overlap.overlap_p2p_comm=null to let Bridge select it"
    else:
        why = f"virtual_pipeline_model_parallel_size={fmt(vpp)}: the non-interleaved schedule cannot overlap P2P"
        fix = "model.virtual_pipeline_model_parallel_size=2 (or more; the layers must split evenly over PP x VPP)"
    yield make("PP_OVERLAP_NOT_SELECTED", pp=pp, why=why, batch=fmt(model["batch_p2p_comm"]), fix=fix)


def comm_overlap_absent(state: State):
    if state.request.comm_overlap is None:
        origin = f"recipe {state.request.recipe['name']}" if state.request.recipe else "recipe baseline"
        yield make("COMM_OVERLAP_ABSENT", origin=origin,
                   fix="comm_overlap.tp_comm_overlap=true (TP>=2 with sequence parallel) or =false to get PP/DP selection only")


def overwritten(state: State):
    for key, requested, effective, by in state.overwritten:
        section, _, name = key.partition(".")
        finding = _OVERWRITE_FINDINGS.get((by, section)) or _OVERWRITE_FINDINGS.get((by, "*"))
        if finding is None or key in _OVERWRITE_SKIP:
            continue  # sequence_parallel and the distributed-optimizer flags have findings of their own
        fid, candidates = finding(state, key, name, requested, effective)
        o = _first_safe(state, candidates)
        yield make(fid, fix_overrides=o, fix=overrides_text(o), knobs=[key], key=key, requested=fmt(requested),
                   effective=fmt(effective), asserts={key: effective})


_OVERWRITE_SKIP = ("model.sequence_parallel", "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer")


def _by_comm_overlap_model(state, key, name, requested, effective):
    return "MODEL_KNOB_OVERWRITTEN", [{f"comm_overlap.{name}": requested}, {key: effective}]


def _by_comm_overlap_dp(state, key, name, requested, effective):
    value = bucket_parameters(state, requested) if name == "bucket_size" else requested
    return "DP_OVERLAP_KNOB_OVERWRITTEN", [{f"comm_overlap.{name}": value}, {key: effective}]


def _by_mixed_precision(state, key, name, requested, effective):
    return "PRECISION_KNOB_OVERWRITTEN", [{f"mixed_precision.{name}": requested}, {key: effective}]


def _by_validate(state, key, name, requested, effective):
    both = {"ddp.overlap_param_gather": requested, "optimizer.overlap_param_gather": requested}
    return "PARAM_GATHER_FORCED_ON", [both, {"ddp.overlap_param_gather": effective, "optimizer.overlap_param_gather": effective}]


def _by_fsdp(state, key, name, requested, effective):
    return "MEGATRON_FSDP_OVERWRITES", [{key: effective}]


_OVERWRITE_FINDINGS = {
    ("comm_overlap", "model"): _by_comm_overlap_model,
    ("comm_overlap", "ddp"): _by_comm_overlap_dp,
    ("comm_overlap", "optimizer"): _by_comm_overlap_dp,
    ("mixed_precision", "*"): _by_mixed_precision,
    ("validate", "ddp"): _by_validate,
    ("validate", "optimizer"): _by_validate,
    ("megatron_fsdp", "*"): _by_fsdp,
}


def distributed_optimizer(state: State):
    req = state.request
    fsdp = state.fsdp
    both_on = {"ddp.use_distributed_optimizer": True, "optimizer.use_distributed_optimizer": True}
    adopt = adopt_dp_knobs(state) if req.comm_overlap is not None else {}
    if req.ddp["use_distributed_optimizer"] != req.optimizer["use_distributed_optimizer"] and not fsdp:
        skipped = not req.ddp["use_distributed_optimizer"] and req.comm_overlap is not None
        o = {**both_on, **adopt}
        yield make("DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE", fix_overrides=o,
                   fix=overrides_text(o) + " (or both false to run without it)", ddp=fmt(req.ddp["use_distributed_optimizer"]),
                   optimizer=fmt(req.optimizer["use_distributed_optimizer"]),
                   skipped="; CommOverlapConfig had already skipped DP overlap" if skipped else "")
    # only the requests the run does not get anyway (the recipe's own ddp value may already be the requested one)
    dp_keys = [f"comm_overlap.{k}" for k in DP_KNOBS if (req.comm_overlap or {}).get(k) is not None
               and req.comm_overlap[k] != _dp_effective(state, k)]
    if dp_keys and not state.dp_overlap_applied:
        o = {**both_on, **adopt}
        yield make("DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER", fix_overrides=o, fix=overrides_text(o),
                   knobs=dp_keys + ["ddp.use_distributed_optimizer"], keys=", ".join(dp_keys))
    elif fsdp and req.comm_overlap is not None and not state.dp_overlap_applied:
        o = {**both_on, **adopt}
        yield make("MEGATRON_FSDP_SKIPPED_DP_OVERLAP", fix_overrides=o, fix=overrides_text(o),
                   grad=fmt(state.ddp["overlap_grad_reduce"]), param=fmt(state.ddp["overlap_param_gather"]))
    if state.ddp["overlap_param_gather"] and not state.ddp["use_distributed_optimizer"]:
        yield make("PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER",
                   fix_overrides={"ddp.overlap_param_gather": False, "optimizer.overlap_param_gather": False})


def _dp_effective(state: State, name: str):
    return state.ddp[name] if name in state.ddp else state.optimizer.get(name)


def megatron_fsdp(state: State):
    if not state.fsdp:
        return
    strategy = state.ddp["data_parallel_sharding_strategy"]
    meaning = {
        "optim_grads_params": "at model wrap Megatron-FSDP forces overlap_grad_reduce and overlap_param_gather on (reduce-scatter in every backward, parameter all-gather prefetched)",
        "optim_grads": "at model wrap Megatron-FSDP forces overlap_grad_reduce on (reduce-scatter in every backward); parameters are not sharded",
        "optim": "gradients are reduced on the last micro-batch only; overlap_grad_reduce decides whether that reduction is asynchronous",
        "no_shard": "gradients are reduced on the last micro-batch only and there is no parameter all-gather (start_param_sync is a no-op)",
    }[strategy]
    yield make("MEGATRON_FSDP_DP_OVERLAP", strategy=strategy, meaning=meaning)


def nccl_ub(state: State):
    if not state.ddp["nccl_ub"]:
        return
    env, rel = state.request.env_vars, state.request.release
    wanted = {"NCCL_NVLS_ENABLE": 1, "NCCL_CTA_POLICY": 1}
    missing = {f"env_vars.{k}": v for k, v in wanted.items() if str(env.get(k)) != str(v)} if rel.env_vars else {}
    alloc = "expandable_segments:True" in str(state.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")).split(",")
    if not missing and not alloc:
        return
    yield make("NCCL_UB_LAUNCH_ENV", fix_overrides=missing, fix=overrides_text(missing) or "nothing to change in the config",
               fsdp=" with Megatron-FSDP" if state.fsdp else "",
               alloc="; with torch < 2.11 Megatron-Core rejects nccl_ub with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which this config sets" if alloc else "")


def dp_size(state: State):
    ddp = state.ddp
    if state.data_parallel_size == 1:
        if state.dp_overlap_applied and ddp["overlap_grad_reduce"]:
            detail = "; overlap_grad_reduce stays on because comm_overlap requests it (there is nothing to overlap)"
        elif state.dp_overlap_applied:
            detail = ", and CommOverlapConfig turns DP overlap off"
        else:
            detail = ""
        yield make("DP_SIZE_ONE", gpus=state.gpus, detail=detail)
    model = state.model
    requested = (state.request.comm_overlap or {}).get("align_param_gather")
    if state.dp_overlap_applied and state.data_parallel_size > 1 and layout.Layout.of(model, state.gpus).interleaved \
            and ddp["align_param_gather"] and requested is None:
        yield make("BRIDGE_SELECTS_ALIGN_PARAM_GATHER", with_step=fmt(state.optimizer["overlap_param_gather_with_optimizer_step"]),
                   asserts={"optimizer.overlap_param_gather_with_optimizer_step": state.optimizer["overlap_param_gather_with_optimizer_step"]})


def param_gather_with_step_unchecked(state: State):
    model = state.model
    if not state.optimizer["overlap_param_gather_with_optimizer_step"]:
        return
    what = [w for w, on in (("CUDA graphs", model["cuda_graph_impl"] != "none"), ("NVFP4", bool(model["fp4"]))) if on]
    if what:
        yield make("PARAM_GATHER_WITH_OPTIMIZER_STEP_UNCHECKED", what=" and ".join(what),
                   note="; Bridge's perf launcher does not turn it on with nvfp4" if model["fp4"] else "")


def bucket_size(state: State):
    for key in ("ddp.bucket_size", "comm_overlap.bucket_size"):
        value = state.request.explicit.get(key)
        if value is None or not looks_like_bytes(value):
            continue
        per = gradient_bytes(state)
        params = bucket_parameters(state, value)
        mib = value // MIB if value >= MIB else value
        readings = (f"{value} parameters = {value * per / MIB:.0f} MiB of gradients at {per} bytes each "
                    f"({'fp32' if per == 4 else 'bf16/fp16'} gradient reduction); read as {mib} MiB of gradients, it is {params} parameters")
        target = "comm_overlap.bucket_size" if key == "ddp.bucket_size" and state.dp_overlap_applied else key
        o = {target: params}
        yield make("BUCKET_SIZE_LOOKS_LIKE_BYTES", fix_overrides=o, knobs=[key], key=key, value=value, readings=readings,
                   fix=f"{overrides_text(o)} if you meant {mib} MiB of gradients; keep {value} if you meant parameters")


def gradient_bytes(state: State) -> int:
    return 4 if state.ddp["grad_reduce_in_fp32"] else 2


def looks_like_bytes(value: int) -> bool:
    """A megabyte count (below 1 Mi), or a whole number of MiB up to 1 GiB other than Bridge's own 128 Mi default:
    figures people write when they think in bytes (26214400 = 25 MiB, PyTorch DDP's bucket_cap_mb)."""
    return value < MIB or (value % MIB == 0 and value <= 2**30 and value != DP_BUCKET_SIZE)


def bucket_parameters(state: State, value: int) -> int:
    """The parameter count of a bucket size that looks like bytes (or megabytes); the value itself otherwise."""
    if value is None or not looks_like_bytes(value):
        return value
    return (value * MIB if value < MIB else value) // gradient_bytes(state)


def launch_env_fields(state: State):
    for key, value in state.request.launch_env_fields:
        name = key.partition(".")[2]
        env = schema.LAUNCH_ENV_NAMES.get(name.lower(), name.upper())
        if state.request.release.env_vars:
            o = {f"env_vars.{env}": value}
            fix = f"drop {key}; {overrides_text(o)} (or export {env} in the launcher)"
        else:
            o, fix = {}, f"drop {key}; export {env} in the launcher ({state.request.release.launch_env_where})"
        yield make("LAUNCH_ENV_NOT_COMM_OVERLAP_FIELD", fix_overrides=o, remove_keys=[key], knobs=[key], key=key, env=env, fix=fix)


def unmodeled(state: State):
    keys = state.request.unmodeled
    on_path = [k for k in keys if on_overlap_path(k)]
    off_path = [k for k in keys if k not in on_path]
    for fid, items in (("UNMODELED_OVERLAP_KEY", on_path), ("UNMODELED_KEY", off_path)):
        if items:
            shown = ", ".join(items[:8]) + (f" and {len(items) - 8} more" if len(items) > 8 else "")
            yield make(fid, knobs=items[:8], keys=shown)


_OVERLAP_WORDS = ("overlap", "p2p", "tp_comm", "cuda_graph", "dispatcher", "expert", "bucket", "fsdp", "sharding",
                  "distributed_optimizer", "param_gather", "grad_reduce", "nccl", "sharp", "ub_", "userbuffer",
                  "pipeline", "context_parallel", "cp_comm", "microbatch_group", "a2a", "deferral", "wgrad",
                  "communication", "high_priority", "decentralized")


_OFF_PATH_DDP = ("check_for_nan_in_grad", "check_for_large_grads")


def on_overlap_path(key: str) -> bool:
    """A field that takes part in communication or its overlap: everything on ddp (but its NaN checks) and
    comm_overlap, and fields elsewhere whose name says so."""
    section, _, name = key.partition(".")
    if section == "ddp":
        return name not in _OFF_PATH_DDP
    return section == "comm_overlap" or any(w in name for w in _OVERLAP_WORDS)


def recipe_outside_overlap(state: State):
    entry = state.request.recipe
    error = (entry or {}).get("bridge", {}).get("error")
    if not error or any(r.message in error for r in state.rejections):
        return
    yield make("RECIPE_REJECTED_OUTSIDE_OVERLAP", version=state.request.release.version, recipe=entry["name"],
               gpus=entry["bridge"]["gpus"], bridge=error)


CHECKS = [
    rejections,
    *LATER_FAILURES,
    recipe_outside_overlap,
    launch_env_fields,
    tp_overlap,
    sequence_parallel,
    pp_overlap,
    comm_overlap_absent,
    overwritten,
    distributed_optimizer,
    megatron_fsdp,
    nccl_ub,
    dp_size,
    param_gather_with_step_unchecked,
    bucket_size,
    unmodeled,
]
