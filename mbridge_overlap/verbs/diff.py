"""diff: the overlap-relevant changes between two runs, each with its cause and the rule that links them.

(a) effective overlap settings that changed, (b) for each, the input knobs that changed it: found by
counterfactual, re-resolving BEFORE with one changed knob set to its AFTER value at a time (the resolver's rules
decide, not a lookup table), and the rule (a finding id `explain` knows), (c) other communication-relevant
changes that are not overlap settings. Ranked by expected impact on step time (IMPACT below).
"""

from __future__ import annotations


from .. import budget as budgets, findings, safeio
from ..run import request, runconfig, schema
from ..findings.rules.common import on_overlap_path
from ..findings.analysis import Analysis, analyze, state_of
from ..contract import SCHEMA_VERSION
from ..findings.rules import declare
from dataclasses import dataclass, field, replace
from ..run.scenario import Scenario
from ..errors import UsageError
from ..values import fmt

# diff's own rules (each change also names the checks' findings that explain it: TP_OVERLAP_OFF_*, DP_SIZE_ONE, ...).
declare("diff", ["REQUESTED_CHANGE", "PP_OVERLAP_SELECTION", "DP_OVERLAP_DEFAULTS", "PRECISION_FROM_MIXED_PRECISION", "LAUNCH_ENV_CHANGED"])

# Expected impact on step time of each effective setting, highest first: a heuristic for ranking, not a
# measurement. TP communication sits on the critical path of every layer; DP reduce/gather and PP p2p once per
# step or micro-batch; precision changes the bytes moved; the rest tune the above.
IMPACT = {
    "model.tp_comm_overlap": 10,
    "ddp.overlap_grad_reduce": 9,
    "ddp.overlap_param_gather": 8,
    "model.overlap_p2p_comm": 7,
    "model.batch_p2p_comm": 6,
    "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 6,
    "ddp.grad_reduce_in_fp32": 5,
    "ddp.fp8_param_gather": 5,
    "ddp.use_distributed_optimizer": 5,
    "model.tp_comm_overlap_cfg": 4,
    "ddp.bucket_size": 3,
    "ddp.align_param_gather": 3,
    "optimizer.overlap_param_gather_with_optimizer_step": 3,
    "env_vars.NVTE_FWD_LAYERNORM_SM_MARGIN": 2,
    "env_vars.NVTE_BWD_LAYERNORM_SM_MARGIN": 2,
    "env_vars.NCCL_P2P_NET_CHUNKSIZE": 2,
    "model.tp_comm_bootstrap_backend": 1,
}
# Effective fields compared; optimizer.* mirrors of ddp.* are folded into the ddp entry.
SETTINGS = [k for k in IMPACT if not k.startswith("env_vars.")]
# expert parallelism's own overlap and dispatcher: not this skill's to tune, but the budget prices them
EP_COMM = [
    ("model.overlap_moe_expert_parallel_comm", "EP overlap (the all-to-all hidden behind another micro-batch's compute)"),
    ("model.delay_wgrad_compute", "EP overlap's delayed weight-gradient GEMMs"),
    ("model.moe_token_dispatcher_type", "MoE token dispatcher"),
    ("model.moe_flex_dispatcher_backend", "the flex dispatcher's backend"),
]
OTHER_COMM = [
    ("gpus", "GPU count"),
    ("data_parallel_size", "data-parallel size"),
    ("model.tensor_model_parallel_size", "TP"),
    ("model.pipeline_model_parallel_size", "PP"),
    ("model.virtual_pipeline_model_parallel_size", "VPP"),
    ("model.context_parallel_size", "CP"),
    ("model.expert_model_parallel_size", "EP"),
    ("model.sequence_parallel", "sequence parallel"),
    ("train.micro_batch_size", "micro batch size"),
    ("train.global_batch_size", "global batch size"),
    ("micro_batches_per_iteration", "micro-batches per iteration (GBS / (MBS x DP): each DP rank's pipeline depth and grad-sync count)"),
    ("model.seq_length", "sequence length"),
    # activation recompute: the budget runs a recomputed forward, and its TP, CP and EP collectives, again
    ("model.recompute_granularity", "activation recompute (the recomputed forward and its collectives run again)"),
    ("model.recompute_method", "which layers full recompute reruns"),
    ("model.recompute_num_layers", "how many layers full recompute reruns"),
    ("model.recompute_modules", "what selective recompute reruns"),
    *EP_COMM,
]
# Keys of OTHER_COMM read as Bridge leaves them (comm_overlap's value copied onto the model), not as requested
EFFECTIVE_OTHER = frozenset(key for key, _ in EP_COMM)
EFFECTS = {
    ("model.tp_comm_overlap", True, False): "TP overlap turned off",
    ("model.tp_comm_overlap", False, True): "TP overlap turned on",
    ("model.overlap_p2p_comm", True, False): "PP overlap turned off",
    ("model.overlap_p2p_comm", False, True): "PP overlap turned on",
    ("model.batch_p2p_comm", False, True): "PP point-to-point became batched",
    ("ddp.overlap_grad_reduce", True, False): "DP gradient-reduce overlap turned off",
    ("ddp.overlap_grad_reduce", False, True): "DP gradient-reduce overlap turned on",
    ("ddp.overlap_param_gather", True, False): "DP param-gather overlap turned off",
    ("ddp.overlap_param_gather", False, True): "DP param-gather overlap turned on",
    ("ddp.grad_reduce_in_fp32", True, False): "gradients are reduced in BF16 (half the bytes)",
    ("ddp.grad_reduce_in_fp32", False, True): "gradients are reduced in FP32 (twice the bytes)",
    ("ddp.fp8_param_gather", False, True): "parameters are all-gathered in FP8",
    ("ddp.fp8_param_gather", True, False): "parameters are all-gathered in BF16 (twice the bytes of FP8)",
    ("ddp.use_distributed_optimizer", True, False): "the distributed optimizer turned off (all-reduce instead of reduce-scatter + all-gather)",
}


@dataclass
class Change:
    key: str
    before: object
    after: object
    rule: str
    message: str
    fix: str | None
    causes: list = field(default_factory=list)  # {"key", "before", "after"}
    impact: int = 0
    fix_overrides: dict = field(default_factory=dict)  # the restore as overrides (what `fix` says)
    remove_keys: list = field(default_factory=list)  # the restore's launch variables BEFORE did not set: to delete

    def to_dict(self) -> dict:
        return {
            "key": self.key, "before": self.before, "after": self.after, "cause_keys": [c["key"] for c in self.causes],
            "causes": self.causes, "finding_id": self.rule, "message": self.message, "fix": self.fix, "impact": self.impact,
            "fix_overrides": self.fix_overrides, **({"remove_keys": self.remove_keys} if self.remove_keys else {}),
        }


@dataclass
class DiffResult:
    before: str
    after: str
    bridge_version: str
    changes: list
    other: list
    warnings: list
    accounting: dict  # every changed key of the two files, in exactly one bucket
    budget: dict | None = None  # budget_change(): what the change does to the communication budget
    new_errors: list = field(default_factory=list)  # AFTER's error findings that BEFORE does not have
    restores: dict | None = None  # every change's restore applied to AFTER at once, re-resolved (restore_all())

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION, "bridge_version": self.bridge_version, "before": self.before, "after": self.after,
            "new_errors": self.new_errors, "restore_all": self.restores,
            "overlap_changes": [c.to_dict() for c in self.changes], "other_changes": self.other,
            "unmodeled_changes": self.accounting["unmodeled"], "warnings": self.warnings,
            "explained_changes": self.accounting["explained"], "same_effect_changes": self.accounting["same_effect"],
            "ignored_changes": len(self.accounting["ignored"]), "ignored_by_section": _by_section(self.accounting["ignored"]),
            "changed_keys": self.accounting["total"],
            **({"budget": self.budget} if self.budget is not None else {}),
        }


@dataclass
class Side:
    """One scenario of the two, analysed, with the inputs it was asked with."""

    label: str
    scenario: Scenario
    analysis: Analysis
    items: dict  # the request's inputs: dotted keys -> value, "comm_overlap" (present or None) and "gpus"
    written: frozenset = frozenset()  # keys a saved config holds as Bridge wrote them, not as requested
    sectionless: bool = False  # known to have no comm_overlap section (a fix creates it as a whole)
    printed: bool = False  # read from what Bridge printed (its configuration summary), not from the request

    @property
    def saved(self) -> bool:
        return bool(self.scenario.config and self.scenario.config.saved)

    def effective(self, key: str):
        return _effective(self.analysis.state, key)


def _effective(state, key: str):
    if key.startswith("env_vars."):
        value = state.request.env_vars.get(key.partition(".")[2])
        return None if value is None else str(value)
    section, _, name = key.partition(".")
    return state.effective()[section][name]


MIRRORS = runconfig.MIRRORS


def side(label: str, sc: Scenario) -> Side:
    written = runconfig.written_by_bridge(sc.config) if sc.config else frozenset()
    items = {k: v for k, v in inputs_of(sc).items() if k not in written}
    return Side(label, sc, analyze(sc), items, written)


def inputs_of(sc: Scenario) -> dict:
    """A scenario's inputs as dotted keys: every modelled field of the request (a path as set or not), the
    comm_overlap section's presence and its requested fields, the mixed-precision recipe and fields, env_vars, gpus."""
    req = sc.request
    out = {}
    for section, fields in schema.SECTIONS.items():
        for name, value in getattr(req, section).items():
            out[f"{section}.{name}"] = ("set" if value is not None else None) if fields[name].kind == schema.OPT_PATH else value
    out["comm_overlap"] = "present" if req.comm_overlap is not None else None
    out.update({f"comm_overlap.{k}": v for k, v in (req.comm_overlap or {}).items() if v is not None})
    mp = req.mixed_precision
    out["mixed_precision"] = mp.recipe if mp else None
    out.update({f"mixed_precision.{k}": v for k, v in (mp.fields if mp else {}).items()})
    out.update({f"env_vars.{k}": v for k, v in req.env_vars.items()})
    out["gpus"] = sc.gpus
    return out


def diff(before: Scenario, after: Scenario, labels: tuple[str, str] | None = None, model: str | None = None,
         shape: dict | None = None, sections_known: bool = True, preset: str | None = None) -> DiffResult:
    """The overlap-relevant changes from one scenario to another (two run configs, two recipes, one recipe at two GPU
    counts, before and after overrides), each with its cause, ranked by expected impact; and what the change does to
    the communication budget (model, shape: as for api.budget; each side's own where not given)."""
    if before.release.version != after.release.version:
        raise UsageError("diff: both sides are answered for one release (--bridge-version)")
    labels = labels or (label_of(before), label_of(after))
    a, b = side(labels[0], before), side(labels[1], after)
    # a summary Bridge logged does not print comm_overlap: whether AFTER has the section is not known, and the word
    # that creates one would replace a tuned preset it has (evalX X2-3: Bridge's asdict() TypeError)
    b.sectionless = sections_known and b.analysis.state.request.comm_overlap is None
    a.printed = b.printed = not sections_known
    warnings = ([f"BEFORE fails at {f.when or 'config'} as it is given: {f.id}: {f.message}" + (
                     "; the changes below are read from the file as it is, and `--before "
                     "model.pipeline_model_parallel_layout=...` with the layout the run used gives BEFORE its layout, and "
                     "the budget with it" if f.id == "RUN_CONFIG_LAYOUT_LOST" else "") for f in a.analysis.errors]
                + list(before.notes) + list(after.notes) + _model_warning(a, b) + _launchers_of_another_release(a, b))
    changed_inputs = _changed_inputs(a, b)
    changes = []
    keys = SETTINGS + sorted({f"env_vars.{k}" for k in set(a.scenario.request.env_vars) | set(b.scenario.request.env_vars)})
    moved = [k for k in keys if a.effective(k) != b.effective(k)]
    env = [k for k in moved if k.startswith("env_vars.")]
    for key in moved:
        old, new = a.effective(key), b.effective(key)
        if key in env[MAX_ENV_EXPLAINED:]:
            changes.append(_listed(key, old, new, changed_inputs))
        else:
            changes.append(_explain(key, old, new, a, b, changed_inputs))
    if len(env) > MAX_ENV_EXPLAINED:
        warnings.append(f"{len(env) - MAX_ENV_EXPLAINED} more launch variables changed: listed, each without a proven "
                        f"restore (the first {MAX_ENV_EXPLAINED} by name are explained one by one)")
    changes.sort(key=lambda c: (-c.impact, c.key))
    other = _other(a, b)
    accounting = account(a, b, changes, other)
    had = {f.id for f in a.analysis.errors}
    new_errors = [{"id": f.id, "when": f.when or "config", "message": f.message, "fix": f.fix}
                  for f in b.analysis.errors if f.id not in had]
    restores = restore_all(changes, new_errors, a, b)
    return DiffResult(a.label, b.label, before.release.version, changes, other, warnings, accounting,
                      budget_change(a.analysis, b.analysis, model, shape, preset), new_errors, restores)


MAX_ENV_EXPLAINED = 32  # launch variables whose change is proven one by one (each restore a resolve of its own)


def restore_all(changes: list, new_errors: list, a: Side, b: Side) -> dict | None:
    """Every restore of the answer applied to AFTER at once and re-resolved: which settings it brings back to BEFORE's,
    which of AFTER's new errors it clears (then the error's own fix is the other way), and any warning or error it
    brings that neither side has. None where no change has a restore."""
    union: dict = {}
    for c in changes:
        union.update(c.fix_overrides)
    removes = list(dict.fromkeys(k for c in changes for k in c.remove_keys))
    if not union and not removes:
        return None
    said = {"overrides": union, **({"remove_keys": removes} if removes else {})}
    try:
        an = analyze(b.scenario.derive({**request.as_overrides(union), **dict.fromkeys(removes)}))
    except UsageError:
        return {**said, "holds": False, "not_restored": [c.key for c in changes], "clears": [], "brings": []}
    state, found = an.state, {f.id: f for f in an.findings}
    not_restored = [c.key for c in changes if (c.fix_overrides or c.remove_keys) and _effective(state, c.key) != c.before]
    before = {f.id for side in (a, b) for f in side.analysis.findings if _new_kind(f)}  # neither side has it
    brings = sorted(i for i, f in found.items() if _new_kind(f) and i not in before)
    clears = [e["id"] for e in new_errors if e["id"] not in found]
    for e in new_errors:
        e["cleared_by_restores"] = e["id"] in clears
    return {**said, "holds": not not_restored and not brings, "not_restored": not_restored, "clears": clears,
            "brings": brings}


DIMENSIONS = ("tp", "cp", "pp", "dp", "ep")


def budget_change(before: Analysis, after: Analysis, model=None, shape=None, preset: str | None = None) -> dict:
    """Both sides' budgets, the iteration's change, each dimension's exposed time before and after, and for each
    overlap setting the change flipped: what flipping it alone on BEFORE exposes or hides (the budget's own
    flipped estimate, so that diff, resolve and budget say one number). preset: the userbuffers preset to cost a side
    whose config does not name one with (diagnose --compare: Bridge's summary never prints it)."""
    plain = (before, after)
    if preset is not None:
        before, after = _with_preset(before, preset), _with_preset(after, preset)
    sides = {"before": budgets.shown(before, model, shape), "after": budgets.shown(after, model, shape)}
    missing = [f"{label}: {b['unavailable']}" for label, b in sides.items() if "unavailable" in b]
    if missing:
        return {"unavailable": "; ".join(missing)}
    b0, b1 = sides["before"], sides["after"]
    change = b1["iteration_ms"] - b0["iteration_ms"]
    dims = {d: {"exposed_ms_before": b0["dimensions"].get(d, {}).get("exposed_ms", 0.0),
                "exposed_ms_after": b1["dimensions"].get(d, {}).get("exposed_ms", 0.0)} for d in {**b0["dimensions"], **b1["dimensions"]}}
    flipped = [_flipped(k, v, b1["settings"].get(k, {}).get("effective", not v["effective"]), "before", b0)
               for k, v in b0["settings"].items() if b1["settings"].get(k, {}).get("effective") != v["effective"]]
    # a setting only AFTER's budget lists (it does not apply in BEFORE, e.g. TP overlap without sequence parallel):
    # what turning it off on AFTER would change, the other way round (evalH H1)
    flipped += [_flipped(k, v, v["effective"], "after", b0) for k, v in b1["settings"].items()
                if k not in b0["settings"] and v["effective"]]
    parts = {name: {"before": b0[key], "after": b1[key], "change_ms": round(b1[key] - b0[key], 3)} for name, key in (
        ("compute", "compute_ms"), ("pipeline_bubble", "bubble_ms"), ("exposed_communication", "exposed_ms"),
        ("overlap_cost", "overlap_cost_ms"))}
    return {"iteration_ms_before": b0["iteration_ms"], "iteration_ms_after": b1["iteration_ms"],
            "iteration_change_ms": round(change, 3),
            "iteration_change_pct": round(change / b0["iteration_ms"] * 100, 2) if b0["iteration_ms"] else None,
            "exposed_ms_before": b0["exposed_ms"], "exposed_ms_after": b1["exposed_ms"],
            "dimensions": {d: {**dims[d], "change_ms": round(dims[d]["exposed_ms_after"] - dims[d]["exposed_ms_before"], 3)}
                           for d in DIMENSIONS if d in dims},
            "parts": parts, "settings_flipped": flipped, "shape_from": [b0["shape_from"], b1["shape_from"]],
            **({"preset": preset, "overlap_cost_at_te_default": {  # what each side's TP overlap costs without the preset
                label: budgets.shown(an, model, shape).get("overlap_cost_ms", 0.0)
                for label, an in zip(("before", "after"), plain)}} if preset is not None else {}),
            "system": [b0["system"], b1["system"]],
            "note": "estimates (`budget` lists the collectives, sources and assumptions); the truth needs a GPU: compare "
                    "with `trace` of profiled runs of both"}


def _with_preset(an: Analysis, preset: str) -> Analysis:
    """The analysis with its effective model.tp_comm_overlap_cfg set to `preset` where it names none (a copy: what
    the budget reads of it; the resolved settings stay as they are)."""
    if an.state.model.get("tp_comm_overlap_cfg") is not None:
        return an
    import copy

    state = copy.copy(an.state)  # (attributes the resolver sets beside its fields, scenario among them, kept)
    state.model = {**an.state.model, "tp_comm_overlap_cfg": preset}
    return replace(an, state=state)


def _flipped(setting: str, v: dict, after: bool, on: str, b0: dict) -> dict:
    """One setting the change flipped: what flipping it alone does, from BEFORE's budget (on "before"), or where only
    AFTER applies it, from AFTER's, the other way round (on "after")."""
    sign = 1 if on == "before" else -1
    exposed, iteration = sign * v["exposed_change_ms_if_flipped"], sign * v["iteration_change_ms_if_flipped"]
    return {"setting": setting, "before": not after if on == "after" else v["effective"], "after": after,
            "exposed_change_ms": exposed, "overlap_cost_change_ms": sign * v["overlap_cost_change_ms_if_flipped"],
            "bubble_change_ms": sign * v["bubble_change_ms_if_flipped"], "iteration_change_ms": iteration, "estimated_on": on,
            "iteration_pct": _pct(iteration, b0["iteration_ms"]), "exposed_pct": _pct(exposed, b0["iteration_ms"])}


def _pct(ms: float, of_ms: float) -> float | None:
    return round(ms / of_ms * 100, 2) if of_ms else None


def label_of(sc: Scenario) -> str:
    if sc.config is not None:
        return str(sc.config.path)
    start = f"recipe {sc.recipe['name']}" if sc.recipe else "the recipe baseline"
    return start + f" at {sc.gpus} GPUs" + (f" with {len(sc.overrides)} override(s)" if sc.overrides else "")


def _changed_inputs(a: Side, b: Side) -> dict:
    """Inputs whose values differ. A key either side holds only as Bridge wrote it says nothing about the request,
    and is left out."""
    out = {}
    section_moved = (a.items["comm_overlap"] is None) != (b.items["comm_overlap"] is None)
    for key in sorted(set(a.items) | set(b.items)):
        if key.startswith("comm_overlap.") and section_moved:
            continue  # the section as a whole came or went: one input, "comm_overlap"
        if key in a.written or key in b.written:
            continue
        old, new = a.items.get(key), b.items.get(key)
        if old != new:
            out[key] = (old, new)
    return out


def _flips(key: str, input_key: str, value, a: Side, b: Side) -> bool:
    """Does setting this one input to its AFTER value change `key` in BEFORE? (through the one analysis path)"""
    state = _with(input_key, value, a, b)
    return state is not None and _effective(state, key) != a.effective(key)


def _reverts(key: str, input_key: str, value, a: Side, b: Side) -> bool:
    """Does setting this one input back to its BEFORE value on AFTER bring `key` back to BEFORE's value? (what a
    restore is for: a cause in BEFORE may not be enough alone in AFTER, where other changes hold the setting too)"""
    state = _with(input_key, value, b, a)
    return state is not None and _effective(state, key) == a.effective(key)


def _with(input_key: str, value, side: Side, other: Side):
    """The state of `side` with one input set to `value` (the other side's), None where that is no valid request."""
    return _with_all({input_key: value}, side, other)


def _with_all(values: dict, side: Side, other: Side):
    """The state of `side` with these inputs set to the other side's values, None where that is no valid request."""
    sc, over = side.scenario, {}
    for input_key, value in values.items():
        if input_key == "gpus":
            sc = replace(sc, gpus=value)
        elif input_key == "comm_overlap":
            section = {k: v for k, v in other.items.items() if k.startswith("comm_overlap.")}
            over.update({"comm_overlap": None} if value is None else section or {"comm_overlap.tp_comm_overlap": False})
        else:
            over.update(request.as_overrides({input_key: value}))
            if input_key in MIRRORS and side.saved:
                over[MIRRORS[input_key]] = value  # in a saved config the pair moved together
    try:
        return state_of(sc.derive(over) if over else sc)
    except UsageError:
        return None  # not a valid request on its own (e.g. GPUs not divisible by the old TP x PP x CP)


def _new_kind(f) -> bool:
    """A finding a restore must not bring: a warning or error, but for a request the restored section overwrites
    (AFTER's own value of a field BEFORE's comm_overlap writes: what restoring BEFORE's setting means)."""
    return f.severity in ("warning", "error") and not f.id.endswith("_KNOB_OVERWRITTEN")


def _restore_set(key: str, singles: list, keys: list, changed: dict, a: Side, b: Side) -> list | None:
    """The restore of `key`: one of `singles` (inputs whose BEFORE value alone brings it back in AFTER), else the fewest
    of `keys` that together do (each left out where the rest still do); either only where it brings no warning or
    error neither side has (unproven findings: proof.probe). None where no restore of the changes holds."""
    from ..findings.proof import probe, signature

    had = {signature(f) for side in (a, b) for f in probe(side.analysis.state) if _new_kind(f)}

    def restored(subset):
        state = _with_all({k: changed[k][0] for k in subset}, b, a)
        return state is not None and _effective(state, key) == a.effective(key) and not any(
            _new_kind(f) and signature(f) not in had for f in probe(state))

    for k in singles:
        if restored([k]):
            return [k]
    if not keys or not restored(keys):
        return None
    kept = list(keys)
    for k in list(keys):
        if len(kept) > 1 and restored([x for x in kept if x != k]):
            kept.remove(k)
    return kept


def _explain(key, old, new, a: Side, b: Side, changed: dict) -> Change:
    if key.startswith("env_vars."):  # the request's own value (_effective): no other input sets it
        flips = restores = [key] if key in changed else []
    else:
        tried = _inputs_that_may_matter(key, changed, a, b)
        flips = [k for k in tried if _flips(key, k, changed[k][1], a, b)]
        restores = [k for k in tried if _reverts(key, k, changed[k][0], a, b)]
    causes = list(dict.fromkeys(flips + restores))
    if not causes:  # only a combination changes it: report every changed input that takes part
        causes = [k for k in changed if k in ("gpus", "comm_overlap")
                  or k.startswith(("model.", "ddp.", "optimizer.", "comm_overlap.", "mixed_precision", "env_vars."))]
    # the restore: one input whose BEFORE value alone brings the setting back in AFTER, else the fewest changed inputs
    # that together do (proven on AFTER); none where no restore of the changes does
    if "gpus" in causes:
        restore = None  # no override brings the GPU count back: run on the old count or change TP/PP/CP
    else:
        restore = _restore_set(key, restores, list(dict.fromkeys(causes + [k for k in changed if k != "gpus"])), changed, a, b)
        causes = list(dict.fromkeys(causes + [k for k in restore or () if k not in causes]))
    fix = _explicit(key, restore, changed, a, b) if restore else None
    if fix:
        fix, added = _proven(key, fix, changed, a, b)
        causes = list(dict.fromkeys(causes + added))
    rule = _rule(key, old, new, a, b, causes)
    unset = key.startswith("env_vars.")  # a launch variable's null is "unset", as its cause says it (fuzzO F8)
    effect = EFFECTS.get((key, old, new), f"{key} went {fmt(old, unset=unset)} -> {fmt(new, unset=unset)}")
    built_off = _tp_off_at_build(b if new else a) if key == "model.tp_comm_overlap" and old != new else None
    if built_off:  # (TP overlap on where the model's build turns it off: not 'turned on' where it does nothing)
        effect = built_off[0] if new else f"{effect} ({built_off[0].replace('configured on', 'configured on before')})"
        causes += [k for k in built_off[1] if k in changed and k not in causes]
    because = "; ".join(_cause_phrase(c, changed[c], a, b) for c in causes) or "no input change found"
    # a setting changed as asked, or a launch variable by its own input (recheck52 W7): said once
    message = effect if because == effect or key.startswith("env_vars.") and causes == [key] else f"{because}: {effect}"
    # a launch variable BEFORE did not set is deleted, not set to null, which Bridge refuses (evalR S2: TypeError)
    removes = [k for k, v in (fix or {}).items() if k.startswith("env_vars.") and v is None]
    fix = {k: v for k, v in (fix or {}).items() if k not in removes} or None
    if fix:  # the words AFTER's command line takes (++ for a key a file-built model lacks: Request.needs_append)
        with findings.written_for(b.scenario.request):
            text = findings.overrides_text(fix, b.sectionless)
    else:
        text = None
    fields = [k for k in fix or {} if k.startswith("mixed_precision.")]
    if fields:  # (recheck56 AC4: Hydra refuses a field of a mixed precision given by name)
        text += ("; where AFTER's mixed_precision is a recipe name (a string), Bridge's Hydra overrides refuse "
                 + ", ".join(fields) + ": in Python, cfg.mixed_precision = get_mixed_precision_config(NAME), then set "
                 "the field on it")
    if removes:
        names = [safeio.shown(k.partition(".")[2], 1 << 10) for k in removes]
        code = ("; ".join(f"del cfg.env_vars[{n}]" for n in names) + " in Python, ~env_vars.NAME in Hydra"
                if not any(n.endswith("...") for n in names) else "remove_keys names them")  # cut, no Python (fuzzN N5)
        text = ((text + "; " if text else "") + "delete " + ", ".join(f"env_vars[{n}]" for n in names) + " (BEFORE did "
                f"not set it, and Bridge refuses a null value: {code}; a YAML merged over the recipe cannot delete it)")
    return Change(
        key=key, before=old, after=new, rule=rule, message=message,
        fix=text, fix_overrides=fix or {}, remove_keys=removes,  # each override one shell word
        causes=[{"key": c, "before": changed[c][0], "after": changed[c][1]} for c in causes],
        impact=IMPACT.get(key, 1),
    )


# The findings whose model build turns the shared tp_comm_overlap off (TELinear, a userbuffers name it does not know),
# with what each leaves of TP overlap: TP_OVERLAP_OFF_MTP_DECODER's scope depends on the pipeline (PP 1: nothing)
TP_OFF_AT_BUILD = ("TP_OVERLAP_OFF_MTP_DECODER", "TP_OVERLAP_OFF_MLA")


def _tp_off_at_build(side: Side) -> tuple[str, list] | None:
    """(what TP overlap does on this side, the finding's other inputs) where the side has TP overlap on and a finding
    says Megatron-Core turns it off as the model is built (TP_OFF_AT_BUILD), else None."""
    found = {f.id: f for f in side.analysis.findings}
    fid = next((i for i in TP_OFF_AT_BUILD if i in found), None)
    if fid is None:
        return None
    knobs = [k for k in findings.record(fid).get("knobs") or [] if not k.endswith("tp_comm_overlap")]
    if fid == "TP_OVERLAP_OFF_MLA":
        return (f"TP overlap configured on, but it does almost nothing ({fid}): Megatron-Core turns it off as it builds "
                "the first MLA layer's down projection, so every module built after it runs without userbuffers"), knobs
    model = side.analysis.state.model
    if model["pipeline_model_parallel_size"] == 1 and (model["virtual_pipeline_model_parallel_size"] or 1) == 1:
        return (f"TP overlap configured on, but it does nothing ({fid}): the MTP block's eh_proj turns it off before "
                "the model builds its decoder again, so no layer runs with userbuffers"), knobs
    return (f"TP overlap turned on, except on the MTP block's pipeline rank ({fid}): the decoder of the model chunk "
            "holding the MTP block, built again after eh_proj turned it off, runs without userbuffers"), knobs


def _explicit(key: str, restore: list, changed: dict, a: Side, b: Side) -> dict | None:
    """_fix with the setting's own unset input written as BEFORE's effective value, where that brings no warning or
    error the null restore (proven by _restore_set) does not; else the null restore."""
    from ..findings.proof import probe, signature

    plain, explicit = _fix(restore, changed, a), _fix(restore, changed, a, key)
    if explicit == plain:
        return plain
    had = {signature(f) for side in (a, b) for f in probe(side.analysis.state) if _new_kind(f)}
    try:
        state = state_of(b.scenario.derive(request.as_overrides(explicit)))
    except UsageError:
        return plain
    if _effective(state, key) != a.effective(key) or any(_new_kind(f) and signature(f) not in had for f in probe(state)):
        return plain
    return explicit


def _proven(key: str, fix: dict, changed: dict, a: Side, b: Side) -> tuple[dict | None, list]:
    """The fix as printed, proven on AFTER. The restore was proven on the inputs, and _owner may move a key into
    comm_overlap, whose setup applies Bridge's rules again (evalM M2: a log's model.tp_comm_overlap restored as
    comm_overlap.tp_comm_overlap=true, which Bridge turns off again where sequence parallel went off too). Where it does
    not hold, the other changed inputs' BEFORE values join it in turn until it does, and those left needed are causes
    too: (fix, the inputs added); (None, []) where no such fix holds."""
    def holds(overrides: dict) -> bool:
        state = _with_all(overrides, b, a)
        return state is not None and _effective(state, key) == a.effective(key)

    if holds(fix):
        return fix, []
    restores = {k: _fix([k], changed, a) or {} for k in changed
                if k not in ("gpus", "comm_overlap") and not k.startswith("env_vars.")}
    grown, added = dict(fix), []
    for k, restore in restores.items():
        if set(restore) <= set(grown):
            continue
        grown.update(restore)
        added.append(k)
        if holds(grown):
            for extra in list(added):  # the fewest: each left out where the rest still hold
                fewer = {o: v for o, v in grown.items() if o not in restores[extra]}
                if len(added) > 1 and holds(fewer):
                    grown, added = fewer, [x for x in added if x != extra]
            return grown, added
    return None, []


def _inputs_that_may_matter(key: str, changed: dict, a: Side, b: Side) -> list:
    """The changed inputs to try one by one for `key`: the launch variables only where all of them set at once move it
    (each is a full resolve; a thousand changed variables made diff run for minutes: fuzzI I3)."""
    env = [k for k in changed if k.startswith("env_vars.")]
    rest = [k for k in changed if k not in env]
    if len(env) < 2:
        return rest + env
    forward = _with_all({k: changed[k][1] for k in env}, a, b)
    backward = _with_all({k: changed[k][0] for k in env}, b, a)
    moves = (forward is None or _effective(forward, key) != a.effective(key)
             or backward is None or _effective(backward, key) == a.effective(key))
    return rest + env if moves else rest


def _listed(key, old, new, changed: dict) -> Change:
    """A launch variable's change past MAX_ENV_EXPLAINED: said, its cause the input itself, no restore proven."""
    return Change(key=key, before=old, after=new, rule="LAUNCH_ENV_CHANGED", message=f"{key} went {fmt(old, unset=True)} -> {fmt(new, unset=True)}",
                  fix=None, fix_overrides={},
                  causes=[{"key": key, "before": changed[key][0], "after": changed[key][1]}] if key in changed else [],
                  impact=IMPACT.get(key, 1))


def _rule(key, old, new, a: Side, b: Side, causes) -> str:
    if key.startswith("env_vars."):
        return "LAUNCH_ENV_CHANGED"
    if "comm_overlap" in causes:
        return "COMM_OVERLAP_ABSENT"
    if key == "model.tp_comm_overlap":
        state = b.analysis.state if not new else a.analysis.state
        return state.tp_overlap_disabled_by.value if state.tp_overlap_disabled_by else "REQUESTED_CHANGE"
    if key in ("model.overlap_p2p_comm", "model.batch_p2p_comm"):
        return "REQUESTED_CHANGE" if all(c.startswith("comm_overlap.") for c in causes) else "PP_OVERLAP_SELECTION"
    if key in ("ddp.grad_reduce_in_fp32", "ddp.fp8_param_gather"):
        return "PRECISION_FROM_MIXED_PRECISION"
    if key == "ddp.use_distributed_optimizer":
        req = b.analysis.state.request
        disagree = req.ddp["use_distributed_optimizer"] != req.optimizer["use_distributed_optimizer"]
        return "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE" if disagree else "REQUESTED_CHANGE"
    if a.analysis.state.dp_overlap_applied != b.analysis.state.dp_overlap_applied:
        return "DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER"
    dp_a, dp_b = a.analysis.state.data_parallel_size, b.analysis.state.data_parallel_size
    if 1 in (dp_a, dp_b) and dp_a != dp_b:
        one = a if dp_a == 1 else b
        # DP 1 with CP > 1 still reduces gradients over the CP ranks, without Bridge's overlap defaults (evalL L6)
        return "DP_OVERLAP_OFF_WITH_CP" if one.analysis.state.model["context_parallel_size"] > 1 else "DP_SIZE_ONE"
    # in two summaries Bridge printed (every recipe has a comm_overlap section, which writes ddp.X and model.X), the
    # setting's own printed field moving between two set values is what comm_overlap.X asked for, as diff of the
    # requests says it (evalAB AB2-3); a value that appears from unset may be Bridge's default, written where a
    # comm_overlap section came (ddp.bucket_size). A request's own ddp.X is left to the rules below, as before.
    if causes and all(c.startswith("comm_overlap.") or a.printed and own_input(key, c)
                      and None not in (a.items.get(c), b.items.get(c)) for c in causes):
        return "REQUESTED_CHANGE"
    return "BRIDGE_SELECTS_ALIGN_PARAM_GATHER" if key == "ddp.align_param_gather" else "DP_OVERLAP_DEFAULTS"


def own_input(setting: str, cause: str) -> bool:
    """Is `cause` the setting's own input: the field itself, its optimizer mirror, or the comm_overlap field that
    writes it (evalAB AB2-3: diff of a recipe sees comm_overlap.overlap_param_gather asked for, diagnose --compare of
    the two runs' summaries sees ddp.overlap_param_gather printed; one change, one rule)."""
    section, _, name = setting.partition(".")
    return cause in (setting, MIRRORS.get(setting)) or (
        section in ("model", "ddp", "optimizer") and name in schema.COMM_OVERLAP and cause == f"comm_overlap.{name}")


def _cause_phrase(key, values, a: Side, b: Side) -> str:
    old, new = values
    if key == "gpus":
        return f"the GPU count went {old} -> {new} (DP {a.analysis.state.data_parallel_size} -> {b.analysis.state.data_parallel_size})"
    if key == "comm_overlap":
        return "the comm_overlap section was " + ("removed" if new is None else "added")
    return f"{key} went {fmt(old, unset=True)} -> {fmt(new, unset=True)}"


def _fix(causes, changed, a: Side, setting: str | None = None) -> dict | None:
    """The restore as overrides (the GPU count never is one: _explain gives no restore for it). The setting's own
    input is restored with BEFORE's effective value where BEFORE left it unset (Bridge's default decided it): one
    restore whether the change is read from requests (diff: comm_overlap.X unset -> false) or from what Bridge printed
    (diagnose --compare: ddp.X true -> false); _proven holds it on AFTER (evalAB AB2-3)."""
    out: dict = {}
    for key in causes:
        old = changed[key][0]
        if old is None and setting is not None and own_input(setting, key) and not setting.startswith("env_vars."):
            old = a.effective(setting)
        if key == "comm_overlap":
            out.update({k: v for k, v in a.items.items()
                        if k.startswith("comm_overlap.") and v is not None and k != "comm_overlap.data_parallel_size"
                        and not (k == "comm_overlap.tp_comm_bootstrap_backend" and v == "nccl")})
            continue
        owner = _owner(key, a)
        out[owner] = old
        if owner == key and key in MIRRORS and a.saved:
            out[MIRRORS[key]] = old
    return out or None


def _owner(key: str, a: Side) -> str:
    """Where a restored value is asked for: a field CommOverlapConfig writes (model.tp_comm_overlap, ddp.bucket_size, ...)
    through comm_overlap where BEFORE had that section or is a saved config (its summary does not say; every Bridge
    recipe has one): set on the model or ddp, comm_overlap's setup would overwrite it."""
    section, _, name = key.partition(".")
    if section in ("model", "ddp", "optimizer") and name in schema.COMM_OVERLAP and (
            a.scenario.request.comm_overlap is not None or a.saved):
        return f"comm_overlap.{name}"
    return key


def _other(a: Side, b: Side) -> list:
    def value(side: Side, key: str):
        if key == "gpus":
            return side.scenario.gpus
        if key == "data_parallel_size":
            return side.analysis.data_parallel_size
        if key == "micro_batches_per_iteration":
            return side.analysis.batch()["micro_batches_per_iteration"]
        if key in EFFECTIVE_OTHER:
            return side.effective(key)
        section, _, name = key.partition(".")
        return side.scenario.request.section(section).get(name)

    out = []
    for key, label in OTHER_COMM:
        old, new = value(a, key), value(b, key)
        if old != new:
            out.append({"key": key, "label": label, "before": old, "after": new})
    return out


def _launchers_of_another_release(a: Side, b: Side) -> list:
    """BEFORE written by another release (an upgrade, answered with this release's rules): the launch variables that
    release's own launchers set for BEFORE's layout that this release's set otherwise for AFTER's, which neither
    config shows (evalR S3: 0.5's PerfEnvPlugin set the LayerNorm SM margins to 16, 0.6's launchers 20)."""
    from ..run import launch_env
    from ..run.scenario import written_by
    from ..upstream import releases

    wrote = written_by(a.scenario.config)
    if not wrote or a.scenario.release.version in wrote:
        return []
    old = {name: value for name, value, _ in launch_env.rules(releases.get(wrote[-1]), a.analysis.launch_layout)}
    new = {name: rule["value"] for name, rule in b.analysis.launch_env.items()}
    moved = [f"{name} {old.get(name, 'unset')} -> {new.get(name, 'unset')}" for name in sorted(set(old) | set(new))
             if str(old.get(name)) != str(new.get(name))]
    if not moved:
        return []
    return [f"BEFORE was written by Megatron-Bridge {' or '.join(wrote)}: the launch environment Bridge's own launchers use "
            f"moves from {wrote[-1]}'s to {b.scenario.release.version}'s ({'; '.join(moved)}); neither config shows it, and the "
            "launcher you ran decides it (resolve's launch_env for each release, lint AFTER's LAUNCH_ENV_NOT_SET)"]


def _model_warning(a: Side, b: Side) -> list:
    ia, ib = _identity(a), _identity(b)
    different = {k for k in set(ia) & set(ib) if ia[k] != ib[k]}
    if not different:
        return []
    shown = ", ".join(f"{k} {safeio.shown(ia[k])} vs {safeio.shown(ib[k])}" for k in sorted(different))
    return [f"the two configs are of different models ({shown}): step times are not comparable"]


def _identity(side: Side) -> dict:
    """The model a side trains: the saved config's dimensions, else the recipe's family."""
    if side.scenario.config is not None:
        return side.scenario.config.identity()
    return {"model family": side.scenario.family} if side.scenario.family else {}


def raw_of(side: Side) -> dict:
    """What a side's changed keys are counted over: its file, else its inputs as sections, shaped as a file holds
    them: a section with fields is a mapping of them (comm_overlap's presence and a mixed-precision recipe's name
    then go with them, as in a saved run config), one without is its value (None: absent)."""
    if side.scenario.config is not None:
        return side.scenario.config.raw
    out: dict = {}
    for key, value in side.items.items():
        section, _, name = key.partition(".")
        if name:
            fields = out.get(section)
            out[section] = fields = fields if isinstance(fields, dict) else {}
            fields[name] = value
        elif not isinstance(out.get(section), dict):
            out[section] = {} if value == "present" and section == "comm_overlap" else value
    return out


def _changed(a: Side, b: Side) -> dict:
    """Every changed key of the two sides: over their inputs where neither is a file (one key each, as
    _changed_inputs compares them), else over the files' shape."""
    if a.scenario.config is None and b.scenario.config is None:
        moved = (a.items["comm_overlap"] is None) != (b.items["comm_overlap"] is None)  # one key: the section came or went
        return {k: (a.items.get(k), b.items.get(k)) for k in sorted(set(a.items) | set(b.items))
                if a.items.get(k) != b.items.get(k) and not (moved and k.startswith("comm_overlap."))}
    return changed_keys(raw_of(a), raw_of(b))


def changed_keys(raw_a: dict, raw_b: dict) -> dict:
    """Every dotted key whose value differs between two configs (a section-level value counts as one key)."""
    out = {}
    for section in sorted(set(raw_a) | set(raw_b), key=str):
        sa, sb = raw_a.get(section), raw_b.get(section)
        if isinstance(sa, dict) and isinstance(sb, dict):
            out.update({f"{section}.{k}": (sa.get(k), sb.get(k)) for k in sorted(set(sa) | set(sb), key=str) if sa.get(k) != sb.get(k)})
        elif sa != sb:
            out[str(section)] = (sa, sb)
    return out


def account(a: Side, b: Side, changes: list, other: list) -> dict:
    """Each changed key in one bucket: explained (an overlap change lists it as a cause, or it is that setting or its
    optimizer mirror), other (communication-relevant, listed), same effect (written differently, resolved the same:
    a preset saved as its fields, another checkpoint path), unmodeled (on the overlap path, not modelled: listed with
    its values), ignored (logging, seeds and the rest: counted by section)."""
    explained = {c.key for c in changes} | {x["key"] for c in changes for x in c.causes} | set(MIRRORS.values())
    listed = {o["key"] for o in other}
    if "data_parallel_size" in listed:
        listed.add("comm_overlap.data_parallel_size")  # what Bridge saved of the DP size
    listed |= {f"comm_overlap.{k.partition('.')[2]}" for k in listed & EFFECTIVE_OTHER}  # asked for through comm_overlap
    out = {"total": 0, "explained": [], "unmodeled": [], "same_effect": [], "ignored": []}
    for key, (old, new) in _changed(a, b).items():
        out["total"] += 1
        section, _, name = key.partition(".")
        # a mixed-precision field goes with the mixed_precision recipe a change names: the ddp or model field it
        # sets is the change listed (mixed_precision.grad_reduce_in_fp32 -> ddp.grad_reduce_in_fp32)
        precision_field = section == "mixed_precision" and "mixed_precision" in explained and (
            f"ddp.{name}" in explained or f"model.{name}" in explained)
        if key in explained or key in listed or section == "comm_overlap" and "comm_overlap" in explained or precision_field:
            out["explained"].append(key)
            continue
        if name in schema.SECTIONS.get(section, {}) or name in schema.EFFECTIVE_FIELDS.get(section, ()):
            same = _resolved(a, section, name) == _resolved(b, section, name)
            out["same_effect" if same else "unmodeled"].append(key if same else {"key": key, "before": _plain(old), "after": _plain(new)})
        elif on_overlap_path(key):
            out["unmodeled"].append({"key": key, "before": _plain(old), "after": _plain(new)})
        else:
            out["ignored"].append(key)
    return out


def _resolved(side: Side, section: str, name: str):
    """How the resolver reads a modelled key of one side: its effective value, else the request's."""
    state = side.analysis.state
    if name in schema.EFFECTIVE_FIELDS.get(section, ()):
        return side.analysis.effective[section][name]
    value = state.request.section(section).get(name) if section in schema.SECTIONS else None
    spec = schema.SECTIONS.get(section, {}).get(name)
    return (value is not None) if spec is not None and spec.kind == schema.OPT_PATH else value  # a path: set or not


def _plain(value):
    return value if isinstance(value, (bool, int, float, str)) or value is None else safeio.shown(value)


def _by_section(keys: list) -> dict:
    out: dict = {}
    for key in keys:
        section = key.partition(".")[0]
        out[section] = out.get(section, 0) + 1
    return out
