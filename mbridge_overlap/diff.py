"""diff: the overlap-relevant changes between two runs, each with its cause and the rule that links them.

(a) effective overlap settings that changed, (b) for each, the input knobs that changed it: found by
counterfactual, re-resolving BEFORE with one changed knob set to its AFTER value at a time (the resolver's rules
decide, not a lookup table), and the rule (a finding id `explain` knows), (c) other communication-relevant
changes that are not overlap settings. Ranked by expected impact on step time (IMPACT below).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import checks, findings, releases, request, runconfig, safeio, schema
from .contract import SCHEMA_VERSION
from .resolution import Resolution, resolve_request
from .errors import UsageError
from .text import fmt

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
    ("model.seq_length", "sequence length"),
]
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

    def to_dict(self) -> dict:
        return {
            "key": self.key, "before": self.before, "after": self.after, "cause_keys": [c["key"] for c in self.causes],
            "causes": self.causes, "finding_id": self.rule, "message": self.message, "fix": self.fix, "impact": self.impact,
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

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION, "bridge_version": self.bridge_version, "before": self.before, "after": self.after,
            "overlap_changes": [c.to_dict() for c in self.changes], "other_changes": self.other,
            "unmodeled_changes": self.accounting["unmodeled"], "warnings": self.warnings,
            "explained_changes": self.accounting["explained"], "same_effect_changes": self.accounting["same_effect"],
            "ignored_changes": len(self.accounting["ignored"]), "ignored_by_section": _by_section(self.accounting["ignored"]),
            "changed_keys": self.accounting["total"],
        }


@dataclass
class Side:
    rc: runconfig.RunConfig
    items: dict  # the request's inputs: dotted keys -> value, "comm_overlap" (present or None) and "gpus"
    res: Resolution
    derived: frozenset = frozenset()  # keys a saved config holds as Bridge wrote them, not as requested

    def effective(self, key: str):
        if key.startswith("env_vars."):
            return self.res.env_vars.get(key.partition(".")[2])
        section, _, name = key.partition(".")
        return self.res.effective[section][name]


MIRRORS = runconfig.MIRRORS


def _side(path, gpus, te, version, flag) -> Side:
    rc = runconfig.load(path)
    res = runconfig.resolve(rc, gpus, te, version, flag)
    items, _ = request.flatten_config(rc.raw, releases.get(version), strict=False)
    present = isinstance(rc.raw.get("comm_overlap"), dict)
    flat = {k: v for k, v in items if present or not k.startswith("comm_overlap.")}
    flat = {k: v for k, v in flat.items() if not (k.startswith("comm_overlap.") and v is None)}
    flat["comm_overlap"] = "present" if present else None
    flat["gpus"] = res.state.gpus
    derived = runconfig.written_by_bridge(rc.saved, flat)
    return Side(rc, {k: v for k, v in flat.items() if k not in derived}, res, derived)


def _baseline(version) -> dict:
    base = request.Request.baseline(releases.get(version))
    out = {f"{s}.{k}": v for s in ("model", "ddp", "optimizer") for k, v in getattr(base, s).items()}
    out["mixed_precision"] = base.mixed_precision.recipe
    return out


def diff(before, after, *, gpus_before=None, gpus_after=None, te: bool = True, bridge_version: str | None = None) -> DiffResult:
    a = _side(before, gpus_before, te, bridge_version, "--gpus-before")
    b = _side(after, gpus_after, te, bridge_version, "--gpus-after")
    warnings = a.rc.warnings + b.rc.warnings + _model_warning(a, b)
    changed_inputs = _changed_inputs(a, b, _baseline(bridge_version))
    changes = []
    keys = SETTINGS + sorted({f"env_vars.{k}" for k in set(a.res.env_vars) | set(b.res.env_vars)})
    for key in keys:
        old, new = a.effective(key), b.effective(key)
        if old != new:
            changes.append(_explain(key, old, new, a, b, changed_inputs, te, bridge_version))
    changes.sort(key=lambda c: (-c.impact, c.key))
    other = _other(a, b)
    accounting = account(a, b, changes, other)
    return DiffResult(str(a.rc.path), str(b.rc.path), a.res.bridge_version, changes, other, warnings, accounting)


def _changed_inputs(a: Side, b: Side, baseline: dict) -> dict:
    """Inputs whose values differ; a key one side does not set counts as Bridge's baseline value. A key either
    side holds only as Bridge wrote it says nothing about the request, and is left out."""
    out = {}
    section_moved = (a.items["comm_overlap"] is None) != (b.items["comm_overlap"] is None)
    for key in sorted(set(a.items) | set(b.items)):
        if key.startswith("comm_overlap.") and section_moved:
            continue  # the section as a whole came or went: one input, "comm_overlap"
        if key in a.derived or key in b.derived:
            continue
        old, new = a.items.get(key, baseline.get(key)), b.items.get(key, baseline.get(key))
        if old != new:
            out[key] = (old, new)
    return out


def _resolve_items(items: dict, te: bool, version) -> Resolution:
    items = dict(items)
    gpus = items.pop("gpus")
    present = items.pop("comm_overlap")
    if present is None:
        items = {k: v for k, v in items.items() if not k.startswith("comm_overlap.")}
        items["comm_overlap"] = None
    elif not any(k.startswith("comm_overlap.") for k in items):
        items["comm_overlap.tp_comm_overlap"] = False
    req = request.build(releases.get(version), None, None)
    for key, value in items.items():
        req.set(key, value)
    return resolve_request(req, gpus=gpus, te=te)


def _flips(key: str, input_key: str, value, a: Side, b: Side, te: bool, version) -> bool:
    """Does setting this one input to its AFTER value change `key` in BEFORE?"""
    items = dict(a.items)
    if input_key == "comm_overlap" and value is not None:
        items.update({k: v for k, v in b.items.items() if k.startswith("comm_overlap.")})
    items[input_key] = value
    if input_key in MIRRORS and a.rc.saved:
        items[MIRRORS[input_key]] = value  # in a saved config the pair moved together
    try:
        res = _resolve_items(items, te, version)
    except UsageError:
        return False  # not a valid request on its own (e.g. GPUs not divisible by the old TP x PP x CP)
    probe = Side(a.rc, items, res, a.derived)
    return probe.effective(key) != a.effective(key)


def _explain(key, old, new, a: Side, b: Side, changed: dict, te, version) -> Change:
    causes = [k for k, (_, after_value) in changed.items() if _flips(key, k, after_value, a, b, te, version)]
    if not causes:  # only a combination changes it: report every changed input that takes part
        causes = [k for k in changed if k in ("gpus", "comm_overlap") or k.startswith(("model.", "ddp.", "optimizer.", "comm_overlap.", "mixed_precision", "env_vars."))]
    rule = _rule(key, old, new, a, b, causes)
    effect = EFFECTS.get((key, old, new), f"{key} went {fmt(old)} -> {fmt(new)}")
    because = "; ".join(_cause_phrase(c, changed[c], a, b) for c in causes) or "no input change found"
    return Change(
        key=key, before=old, after=new, rule=rule, message=f"{because}: {effect}",
        fix=_fix(causes, changed, a), causes=[{"key": c, "before": changed[c][0], "after": changed[c][1]} for c in causes],
        impact=IMPACT.get(key, 1),
    )


def _rule(key, old, new, a: Side, b: Side, causes) -> str:
    if key.startswith("env_vars."):
        return "LAUNCH_ENV_CHANGED"
    if "comm_overlap" in causes:
        return "COMM_OVERLAP_ABSENT"
    if key == "model.tp_comm_overlap":
        state = b.res.state if not new else a.res.state
        return {"tp_size": "TP_OVERLAP_OFF_TP_SIZE", "sequence_parallel": "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL", "te": "TP_OVERLAP_OFF_NO_TE"}.get(
            state.tp_overlap_disabled_by, "REQUESTED_CHANGE"
        )
    if key in ("model.overlap_p2p_comm", "model.batch_p2p_comm"):
        return "REQUESTED_CHANGE" if all(c.startswith("comm_overlap.") for c in causes) else "PP_OVERLAP_SELECTION"
    if key in ("ddp.grad_reduce_in_fp32", "ddp.fp8_param_gather"):
        return "PRECISION_FROM_MIXED_PRECISION"
    if key == "ddp.use_distributed_optimizer":
        req = b.res.state.request
        disagree = req.ddp["use_distributed_optimizer"] != req.optimizer["use_distributed_optimizer"]
        return "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE" if disagree else "REQUESTED_CHANGE"
    if a.res.state.dp_overlap_applied != b.res.state.dp_overlap_applied:
        return "DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER"
    if 1 in (a.res.data_parallel_size, b.res.data_parallel_size) and a.res.data_parallel_size != b.res.data_parallel_size:
        return "DP_SIZE_ONE"
    if all(c.startswith("comm_overlap.") for c in causes) and causes:
        return "REQUESTED_CHANGE"
    return "BRIDGE_SELECTS_ALIGN_PARAM_GATHER" if key == "ddp.align_param_gather" else "DP_OVERLAP_DEFAULTS"


def _cause_phrase(key, values, a: Side, b: Side) -> str:
    old, new = values
    if key == "gpus":
        return f"the GPU count went {old} -> {new} (DP {a.res.data_parallel_size} -> {b.res.data_parallel_size})"
    if key == "comm_overlap":
        return "the comm_overlap section was " + ("removed" if new is None else "added")
    return f"{key} went {fmt(old, unset=True)} -> {fmt(new, unset=True)}"


def _fix(causes, changed, a: Side) -> str | None:
    parts = []
    for key in causes:
        old = changed[key][0]
        if key == "gpus":
            return None  # no override brings the GPUs back: run on the old count or change TP/PP/CP
        if key == "comm_overlap":
            parts += [
                _restore(k, v) for k, v in a.items.items()
                if k.startswith("comm_overlap.") and v is not None and k != "comm_overlap.data_parallel_size"
                and not (k == "comm_overlap.tp_comm_bootstrap_backend" and v == "nccl")
            ]
            continue
        parts.append(_restore(key, old))
        if key in MIRRORS and a.rc.saved:
            parts.append(_restore(MIRRORS[key], old))
    return " ".join(parts) or None


def _restore(key: str, value) -> str:
    """One override of a fix, one shell word: a saved value is never pasted into a command line raw."""
    return findings.overrides_text({key: value})


def _other(a: Side, b: Side) -> list:
    def value(side: Side, key: str):
        if key == "gpus":
            return side.res.state.gpus
        if key == "data_parallel_size":
            return side.res.data_parallel_size
        section, _, name = key.partition(".")
        return (side.rc.raw.get(section) or {}).get(name)

    out = []
    for key, label in OTHER_COMM:
        old, new = value(a, key), value(b, key)
        if old != new:
            out.append({"key": key, "label": label, "before": old, "after": new})
    return out


def _model_warning(a: Side, b: Side) -> list:
    ia, ib = a.rc.identity(), b.rc.identity()
    different = {k for k in set(ia) & set(ib) if ia[k] != ib[k]}
    if not different:
        return []
    shown = ", ".join(f"{k} {safeio.shown(ia[k])} vs {safeio.shown(ib[k])}" for k in sorted(different))
    return [f"the two configs are of different models ({shown}): step times are not comparable"]


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
    out = {"total": 0, "explained": [], "unmodeled": [], "same_effect": [], "ignored": []}
    for key, (old, new) in changed_keys(a.rc.raw, b.rc.raw).items():
        out["total"] += 1
        section, _, name = key.partition(".")
        if key in explained or key in listed or section == "comm_overlap" and "comm_overlap" in explained:
            out["explained"].append(key)
            continue
        if name in schema.SECTIONS.get(section, {}) or name in schema.EFFECTIVE_FIELDS.get(section, ()):
            same = _resolved(a, section, name) == _resolved(b, section, name)
            out["same_effect" if same else "unmodeled"].append(key if same else {"key": key, "before": _plain(old), "after": _plain(new)})
        elif checks.on_overlap_path(key):
            out["unmodeled"].append({"key": key, "before": _plain(old), "after": _plain(new)})
        else:
            out["ignored"].append(key)
    return out


def _resolved(side: Side, section: str, name: str):
    """How the resolver reads a modelled key of one side: its effective value, else the request's."""
    state = side.res.state
    if name in schema.EFFECTIVE_FIELDS.get(section, ()):
        return side.res.effective[section][name]
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
