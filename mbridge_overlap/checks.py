"""The findings a resolved request earns. Each check reads the resolver's State and none changes it; the text of
every finding comes from the registry (data/findings.yaml), the typed fix is computed here.

A fix (`fix_overrides`) is proven before it is offered: the request is resolved again with it, and it must remove its
finding and raise no warning or error that was not there. A candidate that brings in findings of its own (a request
it leaves overwritten, a dormant setting it turns on) is tried again together with their fixes. A finding whose
candidates all fail gets no `fix_overrides`, only the text; so does one whose fix would set a key that a more severe
(or earlier) finding's fix sets otherwise: no two fixes of one config disagree.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import replace
from functools import partial

from . import launch_env, layout, resolver, schema
from .errors import UsageError
from . import findings
from .findings import Finding, Shell, make, shell
from .request import Request
from .resolver import DP_BUCKET_SIZE, State
from .text import fmt

MIB = 2**20
BLOCKING = ("warning", "error")
# Model fields CommOverlapConfig writes; a value set on the model is overwritten, one set on comm_overlap wins.
COMM_OVERLAP_MODEL_FIELDS = ("tp_comm_overlap", "tp_comm_bootstrap_backend", "overlap_p2p_comm", "batch_p2p_comm",
                             "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "overlap_moe_expert_parallel_comm",
                             "delay_wgrad_compute")
DP_KNOBS = ("overlap_grad_reduce", "overlap_param_gather", "overlap_param_gather_with_optimizer_step", "align_param_gather", "bucket_size")
# Inside a re-resolution that proves a fix: every check takes its first candidate unproven (no re-resolution in turn).
_probing: ContextVar[bool] = ContextVar("probing", default=False)


def collect(state: State) -> list[Finding]:
    out: list[Finding] = []
    for check in CHECKS:
        out.extend(check(state))
    return out if _probing.get() else one_value_per_key(out)


def one_value_per_key(found: list[Finding]) -> list[Finding]:
    """Where two findings' fixes set one key to different values (requests that contradict each other, each fix
    reading them its own way), the error's fix, else the first one's, stands; the other waits for it."""
    out, claimed = list(found), {}
    for i in sorted(range(len(out)), key=lambda i: findings.SEVERITIES.index(out[i].severity)):
        f = out[i]
        clash = next((claimed[k][0] for k, v in f.fix_overrides.items() if k in claimed and claimed[k][1] != v), None)
        if clash is not None:
            out[i] = replace(f, fix_overrides={}, fix=shell("after the fix of {clash}, resolve again ({fix})", clash=clash, fix=Shell(f.fix)))
        else:
            claimed.update({k: (f.id, v) for k, v in f.fix_overrides.items() if k not in claimed})
    return out


def signature(f: Finding) -> tuple:
    """What identifies a finding across re-resolutions: its id and the knobs it is about."""
    return f.id, tuple(sorted(f.knobs))


overrides_text = findings.overrides_text


def _rerun(state: State, overrides: dict, remove=()) -> State | None:
    try:
        req = state.request.derive(overrides, remove)
    except UsageError:
        return None
    return resolver.run(req, state.gpus, state.te, state.gpu, state.launcher_env)


def _probe(state: State, extra=None) -> list[Finding]:
    """The findings of a re-resolved state, every check unproven; `extra` (State -> findings) adds a caller's."""
    token = _probing.set(True)
    try:
        return collect(state) + (extra(state) if extra else [])
    finally:
        _probing.reset(token)


def _proven(state: State, finding_id: str, candidates: list[dict], knobs=None, remove=(), probe=None) -> dict:
    """The first candidate that removes the finding (id and knobs) without a warning or error that was not there,
    settled with the fixes of the findings it brings in; {} when none does. `probe` (State -> findings) adds the
    findings of a caller above the resolver (lint's), run unproven like the checks here."""
    candidates = [c for c in candidates if c]
    if _probing.get():
        return candidates[0] if candidates else {}
    look = partial(_probe, extra=probe)
    target = (finding_id, tuple(sorted(knobs if knobs is not None else findings.record(finding_id).get("knobs") or [])))
    before = {signature(f) for f in look(state) if f.severity in BLOCKING}
    return next((p for p in (_settle(state, dict(c), remove, target, before, look) for c in candidates) if p is not None), {})


def prove(state: State, finding_id: str, candidates: list[dict], knobs, probe) -> tuple[dict, Shell]:
    """_fixed for a finding raised above the resolver: `probe` re-raises it (and its kind) on a re-resolved State."""
    o = _proven(state, finding_id, candidates, knobs, probe=probe)
    return o, overrides_text(o) if o else _unproven(candidates, shell(""))


def _settle(state: State, overrides: dict, remove, target: tuple, before: set, look) -> dict | None:
    """The overrides, with the fixes of the warnings and errors they bring in and of the errors left whose fix would
    undo a value they set (an error's fix wins: no fix sets what Bridge rejects; a warning's must agree). None when
    that does not settle in three rounds."""
    for _ in range(3):
        after = _rerun(state, overrides, remove)
        if after is None:
            return None
        found = look(after)
        blocking = [f for f in found if f.severity in BLOCKING]
        undoing = [f for f in blocking if any(k in overrides and overrides[k] != v for k, v in f.fix_overrides.items())]
        if any(f.severity != "error" for f in undoing):
            return None  # a warning left or brought in wants another value of a key this sets
        brought = [f for f in blocking if signature(f) not in before or f in undoing]
        if not brought and target not in {signature(f) for f in found}:
            return overrides
        merged = dict(overrides)
        for f in sorted(brought, key=lambda f: f.severity == "error"):
            for key, value in f.fix_overrides.items():
                if f.severity != "error" and merged.get(key, value) != value:
                    return None  # two warnings it brings in want different values of one key
                merged[key] = value
        if merged == overrides:
            return None
        overrides = merged
    return None


def _fixed(state: State, finding_id: str, candidates: list[dict], otherwise: Shell | None = None, knobs=None) -> tuple[dict, Shell]:
    """The proven fix and its text; `otherwise` says what to do when no candidate holds (default: the first
    candidate, said to need more)."""
    o = _proven(state, finding_id, candidates, knobs)
    return o, overrides_text(o) if o else _unproven(candidates, shell("")) if otherwise is None else otherwise


def _unproven(candidates: list[dict], otherwise: Shell) -> Shell:
    """The text of a fix that re-resolution did not prove: the first candidate, said to need more."""
    shown = [overrides_text(c) for c in candidates if c]
    return shell("{fix} (it does not settle this alone: resolve again after it)", fix=shown[0]) if shown else otherwise


def _requested(state: State, key: str):
    """What the user asked for at a dotted key (None: nothing, or null)."""
    return state.request.explicit.get(key)


def _moved(state: State, owner: str, key: str, value, effective) -> list[dict]:
    """Fixes for a request overwritten by `owner` (comm_overlap.X, mixed_precision.X): carry `value` there (and onto
    `key` too when it is carried converted), or set `key` to what runs; the latter first when the user already asked
    for something at `owner` (that request won). value None: nothing to carry (null on comm_overlap means "Bridge
    picks")."""
    align = {key: effective}
    if value is None:
        return [align]
    move = {owner: value, **({key: value} if value != _requested(state, key) else {})}
    return [align, move] if _requested(state, owner) is not None else [move, align]


def _every_request(state: State, name: str, value) -> dict:
    """`name` set to `value` wherever it is requested (comm_overlap, optimizer, ddp), and where it takes effect."""
    out = {f"{s}.{name}": value for s in ("comm_overlap", "ddp", "optimizer") if _requested(state, f"{s}.{name}") is not None}
    owner = "comm_overlap" if state.dp_overlap_applied else "optimizer"
    out.setdefault(f"{owner}.{name}", value)
    return out


def _intended(state: State, name: str):
    """The value the user asked for a DP overlap knob: comm_overlap's when it has one (it wins once CommOverlapConfig
    applies), else ddp's or optimizer's; for overlap_param_gather asked both ways, on (as validate() does)."""
    values = [_requested(state, f"{s}.{name}") for s in ("comm_overlap", "ddp", "optimizer")]
    if values[0] is not None:
        return values[0]
    values = [v for v in values[1:] if v is not None]
    if name == "overlap_param_gather" and len(values) == 2:
        return any(values)
    return values[0] if values else None


def _owner(state: State, name: str, section: str = "model") -> str:
    """Where a comm_overlap-written field is requested: comm_overlap when the request has one, else the section."""
    return f"comm_overlap.{name}" if state.request.comm_overlap is not None else f"{section}.{name}"


def adopt_dp_knobs(state: State) -> dict:
    """The ddp/optimizer DP overlap values the user set, moved onto comm_overlap (where they win once
    CommOverlapConfig applies its DP settings); not where comm_overlap already requests that knob, nor a bucket size
    whose reading is ambiguous."""
    out = {}
    for name in DP_KNOBS:
        if (state.request.comm_overlap or {}).get(name) is not None:
            continue
        value = _intended(state, name)
        if name == "bucket_size":
            value = bucket_to_move(state, value)
        if value is not None:
            out[f"comm_overlap.{name}"] = value
    return out


# --- Bridge's rejections ---------------------------------------------------------------------------------------


def rejections(state: State):
    for r in state.rejections:
        candidates, extra = _REJECTION_FIXES[r.id](state, r)
        otherwise = extra.pop("otherwise", shell("change the layout (no config override fixes it)"))
        params = {**_rejection_params(state), **extra}
        o, fix = _fixed(state, r.id, candidates, _unproven(candidates, otherwise))
        yield make(r.id, fix_overrides=o, where=r.where, bridge=r.message, **params, fix=fix)


def _moe_off(state: State, r) -> tuple[list, dict]:
    req, out = state.request, {}
    for name in ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute"):
        if req.comm_overlap is not None and req.comm_overlap.get(name):
            out[f"comm_overlap.{name}"] = False
        elif req.comm_overlap is None and req.model.get(name):
            out[f"model.{name}"] = False
    return [out], {}


def _defer_off(state: State, r) -> tuple[list, dict]:
    return [{_owner(state, "defer_embedding_wgrad_compute"): False}], {}


def _reuse_off(state: State, r) -> tuple[list, dict]:
    key = "mixed_precision" if state.request.mixed_precision is not None else "ddp"
    return [{f"{key}.reuse_grad_buf_for_mxfp8_param_ag": False}], {}


def _with_step_off(state: State, r) -> tuple[list, dict]:
    return [_every_request(state, "overlap_param_gather_with_optimizer_step", False)], {}


def _batch(state: State, r) -> tuple[list, dict]:
    mbs = state.validation["eval_micro_batch_size"] or state.train["micro_batch_size"]
    key = "validation.eval_global_batch_size" if state.validation["eval_global_batch_size"] else "train.global_batch_size"
    gbs = state.validation["eval_global_batch_size"] or state.train["global_batch_size"]
    step = mbs * state.data_parallel_size
    return [{key: -(-gbs // step) * step}], {}


def _fsdp_connections(state: State, r) -> tuple[list, dict]:
    launcher = state.launcher_env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    if launcher or not state.request.release.env_vars:
        return [], {"origin": "the launcher's environment", "otherwise": shell("export CUDA_DEVICE_MAX_CONNECTIONS=32 in the launcher (not 1)")}
    return [{"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 32}], {"origin": "env_vars"}


def _fsdp_format(state: State, r) -> tuple[list, dict]:
    which = "save" if state.checkpoint["save"] is not None else "load"
    return [{"checkpoint.ckpt_format": "fsdp_dtensor"}], {"format": state.checkpoint["ckpt_format"], "which": which}


def _gpus(state: State, r) -> tuple[list, dict]:
    shape = layout.Layout.of(state.model, state.gpus)
    return [], {"gpus": state.gpus, "tp": shape.tp, "pp": shape.pp, "cp": shape.cp, "size": shape.model_parallel_size}


def _cp_finetune(state: State, r) -> tuple[list, dict]:
    return [{"model.calculate_per_token_loss": True, "ddp.average_in_collective": False}], {}


def _mxfp8_reuse_on(state: State, r) -> tuple[list, dict]:
    out = {"mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": True}
    if state.optimizer["overlap_param_gather_with_optimizer_step"]:
        out.update(_every_request(state, "overlap_param_gather_with_optimizer_step", False))
    return [out], {}


def _static(*candidates: dict):
    return lambda state, r: ([dict(c) for c in candidates], {})


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
    "EXPERT_PARALLEL_WITHOUT_EXPERTS": _static(),
    "CP_SEQUENCE_NOT_DIVISIBLE": _static(),
}


def _rejection_params(state: State):
    """Extra template values some rejection records name."""
    model = state.model
    return {"gpu": state.gpu, "seq": model["seq_length"], "cp": model["context_parallel_size"]}


# --- failures after the config step that the config already decides ---------------------------------------------


def vpp_without_pp(state: State):
    model = state.model
    if model["virtual_pipeline_model_parallel_size"] is not None and model["pipeline_model_parallel_size"] <= 1:
        c = {"model.virtual_pipeline_model_parallel_size": None}
        o, fix = _fixed(state, "VPP_WITHOUT_PP", [c])
        yield make("VPP_WITHOUT_PP", fix_overrides=o, fix=fix, vpp=model["virtual_pipeline_model_parallel_size"])


def p2p_overlap(state: State):
    model = state.model
    pp, vpp = model["pipeline_model_parallel_size"], model["virtual_pipeline_model_parallel_size"]
    if pp <= 1 or not model["overlap_p2p_comm"]:
        return
    params = dict(pp=pp, vpp=fmt(vpp), batch=fmt(model["batch_p2p_comm"]))
    if vpp is None:
        c = {_owner(state, "overlap_p2p_comm"): False}
        o, fix = _fixed(state, "P2P_OVERLAP_WITHOUT_INTERLEAVING", [c])
        yield make("P2P_OVERLAP_WITHOUT_INTERLEAVING", fix_overrides=o,
                   fix=shell("{fix}, or model.virtual_pipeline_model_parallel_size >= 2 for P2P overlap", fix=fix), **params)
    elif model["batch_p2p_comm"]:
        c = {_owner(state, "batch_p2p_comm"): False}
        o, fix = _fixed(state, "P2P_OVERLAP_AND_BATCHED", [c])
        yield make("P2P_OVERLAP_AND_BATCHED", fix_overrides=o, fix=fix, **params)


def param_gather_with_step(state: State):
    model, opt = state.model, state.optimizer
    if not opt["overlap_param_gather_with_optimizer_step"]:
        return
    if opt["use_distributed_optimizer"] and (model["virtual_pipeline_model_parallel_size"] or 1) <= 1:
        c = _every_request(state, "overlap_param_gather_with_optimizer_step", False)
        o, fix = _fixed(state, "PARAM_GATHER_WITH_OPTIMIZER_STEP_SINGLE_CHUNK", [c])
        yield make("PARAM_GATHER_WITH_OPTIMIZER_STEP_SINGLE_CHUNK", fix_overrides=o,
                   fix=shell("{fix} (it needs the interleaved schedule, VPP >= 2)", fix=fix), vpp=fmt(model["virtual_pipeline_model_parallel_size"]))


def unsupported_tp_overlap_precision(state: State):
    model = state.model
    why = tp_overlap_precision_problem(model)
    if model["tp_comm_overlap"] and why:
        c = {_owner(state, "tp_comm_overlap"): False}
        o, fix = _fixed(state, "TP_OVERLAP_UNSUPPORTED_PRECISION", [c])
        recipe = state.request.mixed_precision.recipe if state.request.mixed_precision else "the model's precision"
        yield make("TP_OVERLAP_UNSUPPORTED_PRECISION", fix_overrides=o, what=f"{why[0]} ({recipe})", why=why[1],
                   fix=shell("{fix}, as Bridge's recipes with this precision and TP > 1 have it", fix=fix))


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
        o, fix = _fixed(state, "TP_OVERLAP_OFF_TP_SIZE", [{"comm_overlap.tp_comm_overlap": False}])
        yield make("TP_OVERLAP_OFF_TP_SIZE", fix_overrides=o, fix=fix, tp=tp)
    elif state.tp_overlap_disabled_by == "sequence_parallel":
        candidates = [{"model.sequence_parallel": True}, {"comm_overlap.tp_comm_overlap": False}]
        o, fix = _fixed(state, "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL", candidates)
        yield make("TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL", fix_overrides=o, fix=fix, tp=tp)
    elif state.tp_overlap_disabled_by == "te":
        yield make("TP_OVERLAP_OFF_NO_TE")
    if req.comm_overlap is not None and model["tp_comm_overlap"] and model["tp_comm_overlap_cfg"] is None:
        yield make("TP_OVERLAP_DEFAULT_UB_CFG", why="", fix=shell("comm_overlap.tp_comm_overlap_cfg=PRESET if one matches (presets), else nothing"))
    if req.comm_overlap is None and model["tp_comm_overlap"]:
        candidates = [{"model.tp_comm_overlap": False}]
        if tp >= 2:  # request it where Bridge gates it; the model's own value then agrees with what comm_overlap writes
            gated = {"comm_overlap.tp_comm_overlap": True, **adopt_dp_knobs(state), **_adopt_model_knobs(state)}
            if not model["sequence_parallel"]:
                gated["model.sequence_parallel"] = True
            candidates.insert(0, gated)
        o, fix = _fixed(state, "TP_OVERLAP_UNGATED", candidates)
        yield make("TP_OVERLAP_UNGATED", fix_overrides=o, fix=fix)


def _adopt_model_knobs(state: State) -> dict:
    """Model fields CommOverlapConfig would overwrite, moved onto the new comm_overlap section."""
    return {f"comm_overlap.{n}": state.request.explicit[f"model.{n}"] for n in COMM_OVERLAP_MODEL_FIELDS
            if f"model.{n}" in state.request.explicit and n != "tp_comm_overlap"}


def sequence_parallel(state: State):
    if state.request.model["sequence_parallel"] and not state.model["sequence_parallel"]:
        c = {"model.sequence_parallel": False}
        o, fix = _fixed(state, "SEQUENCE_PARALLEL_DROPPED", [c])
        yield make("SEQUENCE_PARALLEL_DROPPED", fix_overrides=o, fix=fix)


def pp_overlap(state: State):
    model, req = state.model, state.request
    pp, vpp = model["pipeline_model_parallel_size"], model["virtual_pipeline_model_parallel_size"]
    if pp <= 1 or model["overlap_p2p_comm"]:
        return
    if req.comm_overlap is None:
        why = "no comm_overlap section"
        fix = shell("model.virtual_pipeline_model_parallel_size=2 (or more) and a comm_overlap section" if (vpp or 1) <= 1
                    else "a comm_overlap section (comm_overlap.tp_comm_overlap=false is enough) lets Bridge select it")
    elif (vpp or 1) > 1:
        why, fix = "comm_overlap.overlap_p2p_comm=false was requested", shell("comm_overlap.overlap_p2p_comm=null to let Bridge select it")
    else:
        why = f"virtual_pipeline_model_parallel_size={fmt(vpp)}: the non-interleaved schedule cannot overlap P2P"
        fix = shell("model.virtual_pipeline_model_parallel_size=2 (or more; the layers must split evenly over PP x VPP)")
    yield make("PP_OVERLAP_NOT_SELECTED", pp=pp, why=why, batch=fmt(model["batch_p2p_comm"]), fix=fix)


def comm_overlap_absent(state: State):
    if state.request.comm_overlap is None:
        origin = f"recipe {state.request.recipe['name']}" if state.request.recipe else "recipe baseline"
        yield make("COMM_OVERLAP_ABSENT", origin=origin,
                   fix=shell("comm_overlap.tp_comm_overlap=true (TP>=2 with sequence parallel) or =false to get PP/DP selection only"))


def overwritten(state: State):
    for key, requested, effective, by in state.overwritten:
        section, _, name = key.partition(".")
        finding = _OVERWRITE_FINDINGS.get((by, section)) or _OVERWRITE_FINDINGS.get((by, "*"))
        if finding is None or key in _OVERWRITE_SKIP:
            continue  # sequence_parallel and the distributed-optimizer flags have findings of their own
        fid, candidates = finding(state, key, name, requested, effective)
        o, fix = _fixed(state, fid, candidates, knobs=[key])
        yield make(fid, fix_overrides=o, fix=fix, knobs=[key], key=key, requested=fmt(requested),
                   effective=fmt(effective), asserts={key: effective})


_OVERWRITE_SKIP = ("model.sequence_parallel", "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer")


def _by_comm_overlap_model(state, key, name, requested, effective):
    return "MODEL_KNOB_OVERWRITTEN", _moved(state, f"comm_overlap.{name}", key, requested, effective)


def _by_comm_overlap_dp(state, key, name, requested, effective):
    owner = f"comm_overlap.{name}"
    if name == "bucket_size":
        value = bucket_to_move(state, requested)
    else:
        value = requested if _requested(state, owner) is not None else _intended(state, name)
    return "DP_OVERLAP_KNOB_OVERWRITTEN", _moved(state, owner, key, value, effective)


def _by_mixed_precision(state, key, name, requested, effective):
    return "PRECISION_KNOB_OVERWRITTEN", _moved(state, f"mixed_precision.{name}", key, requested, effective)


def _by_validate(state, key, name, requested, effective):
    return "PARAM_GATHER_FORCED_ON", [{f"{s}.{name}": v for s in ("ddp", "optimizer")} for v in (_intended(state, name), requested)]


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
    if req.comm_overlap is not None and not state.dp_overlap_applied:  # the DP settings it skipped apply now: adopt
        both_on.update(adopt_dp_knobs(state))
    both_off = {"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False}
    if req.ddp["use_distributed_optimizer"] != req.optimizer["use_distributed_optimizer"] and not fsdp:
        skipped = not req.ddp["use_distributed_optimizer"] and req.comm_overlap is not None
        o, fix = _fixed(state, "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE", [both_on, both_off])
        yield make("DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE", fix_overrides=o,
                   fix=shell("{fix} (or both false to run without it)" if o != both_off else "{fix}", fix=fix), ddp=fmt(req.ddp["use_distributed_optimizer"]),
                   optimizer=fmt(req.optimizer["use_distributed_optimizer"]),
                   skipped="; CommOverlapConfig had already skipped DP overlap" if skipped else "")
    # only the requests the run does not get anyway (the recipe's own ddp value may already be the requested one)
    dp_keys = [f"comm_overlap.{k}" for k in DP_KNOBS if (req.comm_overlap or {}).get(k) is not None
               and req.comm_overlap[k] != _dp_effective(state, k)]
    if dp_keys and not state.dp_overlap_applied:
        knobs = dp_keys + ["ddp.use_distributed_optimizer"]
        o, fix = _fixed(state, "DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER", [both_on], knobs=knobs)
        yield make("DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER", fix_overrides=o, fix=fix, knobs=knobs, keys=", ".join(dp_keys))
    elif fsdp and req.comm_overlap is not None and not state.dp_overlap_applied:
        o, fix = _fixed(state, "MEGATRON_FSDP_SKIPPED_DP_OVERLAP", [both_on])
        yield make("MEGATRON_FSDP_SKIPPED_DP_OVERLAP", fix_overrides=o, fix=fix,
                   grad=fmt(state.ddp["overlap_grad_reduce"]), param=fmt(state.ddp["overlap_param_gather"]),
                   asserts={"ddp.use_distributed_optimizer": True, "ddp.overlap_grad_reduce": state.ddp["overlap_grad_reduce"],
                            "ddp.overlap_param_gather": state.ddp["overlap_param_gather"]})
    if state.ddp["overlap_param_gather"] and not state.ddp["use_distributed_optimizer"]:
        c = {"ddp.overlap_param_gather": False, "optimizer.overlap_param_gather": False}
        o, fix = _fixed(state, "PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER", [c])
        yield make("PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER", fix_overrides=o, fix=fix)


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
    yield make("MEGATRON_FSDP_DP_OVERLAP", strategy=strategy, meaning=meaning, asserts={"ddp.data_parallel_sharding_strategy": strategy})


def nccl_ub(state: State):
    if not state.ddp["nccl_ub"]:
        return
    env, rel = state.request.env_vars, state.request.release
    wanted = {"NCCL_NVLS_ENABLE": 1, "NCCL_CTA_POLICY": 1}
    missing = {f"env_vars.{k}": v for k, v in wanted.items() if str(env.get(k)) != str(v)} if rel.env_vars else {}
    alloc = "expandable_segments:True" in str(state.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")).split(",")
    if not missing and not alloc:
        return
    o, fix = _fixed(state, "NCCL_UB_LAUNCH_ENV", [missing], _unproven([missing], shell("nothing to change in the config")))
    yield make("NCCL_UB_LAUNCH_ENV", fix_overrides=o, fix=fix, fsdp=" with Megatron-FSDP" if state.fsdp else "",
               alloc="; with torch < 2.11 Megatron-Core rejects nccl_ub with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which this config sets" if alloc else "")


def dp_size(state: State):
    ddp = state.ddp
    if state.data_parallel_size == 1:
        yield make("DP_SIZE_ONE", gpus=state.gpus, **_dp_one_detail(state))
    model = state.model
    requested = (state.request.comm_overlap or {}).get("align_param_gather")
    if state.dp_overlap_applied and state.data_parallel_size > 1 and layout.Layout.of(model, state.gpus).interleaved \
            and ddp["align_param_gather"] and requested is None:
        yield make("BRIDGE_SELECTS_ALIGN_PARAM_GATHER", with_step=fmt(state.optimizer["overlap_param_gather_with_optimizer_step"]),
                   asserts={"optimizer.overlap_param_gather_with_optimizer_step": state.optimizer["overlap_param_gather_with_optimizer_step"]})


def _dp_one_detail(state: State) -> dict:
    """What DP = 1 leaves of DP overlap: CommOverlapConfig turns it off, but what comm_overlap requests stays on."""
    if not state.dp_overlap_applied:
        return {"detail": ""}
    names = ("overlap_grad_reduce", "overlap_param_gather")
    on = [n for n in names if state.ddp[n]]
    asserts = {f"ddp.{n}": bool(state.ddp[n]) for n in names}
    if not on:
        return {"detail": ", and CommOverlapConfig turns DP overlap off", "asserts": asserts}
    return {"detail": f"; {' and '.join(on)} {'stays' if len(on) == 1 else 'stay'} on because comm_overlap requests it "
                      "(there is nothing to overlap)", "asserts": asserts}


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
        meant = shell("{override} if you meant {mib} MiB of gradients", override=overrides_text({target: params}), mib=mib)
        o = _proven(state, "BUCKET_SIZE_LOOKS_LIKE_BYTES", [_bucket_fix(state, key)], knobs=[key])
        yield make("BUCKET_SIZE_LOOKS_LIKE_BYTES", fix_overrides=o, knobs=[key], key=key, value=value, readings=readings,
                   fix=shell("{fix}; keep {value} if you meant parameters", fix=overrides_text(o) if o else meant, value=value),
                   asserts={"ddp.grad_reduce_in_fp32": per == 4})


def _bucket_fix(state: State, key: str) -> dict:
    """The bytes reading of a requested bucket size, where it takes effect; {} when that reading is ambiguous too.
    Beside the user's own comm_overlap.bucket_size (which wins once DP overlap applies) ddp's says the same."""
    winner = _requested(state, "comm_overlap.bucket_size")
    if key == "ddp.bucket_size" and winner is not None:
        return {key: winner}
    params = bucket_to_move(state, state.request.explicit[key])
    if params is None:
        return {}
    if key == "ddp.bucket_size" and state.dp_overlap_applied:
        return {"comm_overlap.bucket_size": params, key: params}
    return {key: params}


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


def bucket_to_move(state: State, value: int | None) -> int | None:
    """The bucket size to carry to where it wins: its parameter count; None when there is none, or when the bytes
    reading of it looks like bytes again (32 MiB read as bytes is 8 Mi parameters, itself a whole number of MiB), so
    that no fix guesses twice."""
    params = bucket_parameters(state, value)
    return None if params is None or (params != value and looks_like_bytes(params)) else params


def launch_env_fields(state: State):
    for key, value in state.request.launch_env_fields:
        name = key.partition(".")[2]
        env = schema.LAUNCH_ENV_NAMES.get(name.lower(), name.upper())
        number = launch_env.env_value(value)
        if not state.request.release.env_vars:
            o, fix = {}, shell("drop {key}; export {env} in the launcher ({where})", key=key, env=env,
                               where=Shell(state.request.release.launch_env_where))
        elif isinstance(number, int) and not isinstance(number, bool):  # every one of these variables is read as an integer
            c = {f"env_vars.{env}": number}
            o = _proven(state, "LAUNCH_ENV_NOT_COMM_OVERLAP_FIELD", [c], knobs=[key], remove=[key])
            fix = shell("drop {key}; {fix} (or export {env} in the launcher)", key=key, fix=overrides_text(c), env=env)
        else:
            o, fix = {}, shell("drop {key}; set env_vars.{env} to an integer ({value} is not one), or export {env} in the launcher",
                               key=key, env=env, value=str(value))
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
    if not error or any(r.message in error for r in state.rejections) or _modeled_error(state.request.release, entry):
        return
    yield make("RECIPE_REJECTED_OUTSIDE_OVERLAP", version=state.request.release.version, recipe=entry["name"],
               gpus=entry["bridge"]["gpus"], bridge=error)


_MODELED: dict = {}


def _modeled_error(release, entry: dict) -> bool:
    """Whether the error real Bridge raised for the recipe as shipped is one the resolver raises for it too (then a
    request that no longer earns it has fixed it, and it is not outside the overlap path)."""
    key = (release.version, entry["package"], entry["name"])
    if key not in _MODELED:
        shipped = resolver.run(Request.from_recipe(release, entry), entry["bridge"]["gpus"], True, entry.get("gpu"), {})
        _MODELED[key] = any(r.message in entry["bridge"]["error"] for r in shipped.rejections)
    return _MODELED[key]


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
