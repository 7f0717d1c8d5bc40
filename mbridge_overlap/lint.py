"""lint: every finding that applies to a run config or a shipped recipe, and what it left on the table.

On top of the resolver's findings (which, for a saved run, include requested-versus-effective contradictions such as
comm_overlap.tp_comm_overlap=true on a run whose model ran with TP overlap off, and why), lint compares the run with
what `plan` would choose for its own layout: overlap modes that apply but were off, a tuned preset that matches but
was not used, launch environment that differs from Bridge's rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import catalog, checks, findings, launch_env, layout, releases, runconfig
from .errors import UsageError
from .findings import Finding
from .planner import match_preset
from .resolution import resolve_request
from .text import fmt


@dataclass
class LintResult:
    config: str | None
    saved: bool
    resolution: object
    layout: dict
    findings: list
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        out = self.resolution.to_dict()
        out["findings"] = [f.to_dict() for f in self.findings]
        out.update(config=self.config, saved_run_config=self.saved, layout=self.layout, notes=self.notes)
        return out

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]


def lint(path=None, *, recipe: str | None = None, gpus: int | None = None, gpu: str | None = None, te: bool = True,
         bridge_version: str | None = None) -> LintResult:
    release = releases.get(bridge_version)
    entry = catalog.lookup(recipe, release.version) if recipe else None
    if path is None and entry is None:
        raise UsageError("lint: give a run config (file, checkpoint or iteration directory) or --recipe NAME")
    gpu = gpu or (entry or {}).get("gpu")
    if path is None:
        rc, res = None, _recipe_resolution(entry, release, gpus, gpu, te)
    else:
        rc = runconfig.load(path)
        res = runconfig.resolve(rc, gpus or (entry or {}).get("gpus"), te, release.version, gpu=gpu or "h100", base=entry)
    eff = res.effective
    model = eff["model"]
    shape = layout.Layout.of(model, res.gpus)
    lint_layout = {"tp": shape.tp, "pp": shape.pp, "vpp": shape.vpp, "cp": shape.cp, "gpus": res.gpus, "dp": res.data_parallel_size,
                   "gpu": gpu, "recipe": entry["name"] if entry else None}
    found = list(res.findings)
    if rc is not None:
        found += _saved_differs(rc, res)
    found += _modes_left_off(res.state)
    notes = list(rc.warnings) if rc else []
    if gpu:
        gpu_info = releases.gpu(gpu)
        found += _preset(rc, entry, res, gpu_info)
        found += _launch_env(res)
    else:
        notes.append("pass --gpu (h100, b200, ...) to check the tuned TP preset and the launch environment too")
    where = str(rc.path) if rc else None
    found = checks.one_value_per_key(_dedupe(found))
    return LintResult(where, bool(rc and rc.saved), res, lint_layout, findings.sort(found), notes)


def _recipe_resolution(entry: dict, release, gpus, gpu, te):
    from . import request

    req = request.build(release, None, None, base=entry)
    n = gpus or entry.get("gpus") or catalog.model_parallel_size(entry["request"]["model"])
    return resolve_request(req, gpus=n, te=te, gpu=gpu or "h100")


def _dedupe(items: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in items:
        key = (f.id, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _saved_differs(rc, res) -> list[Finding]:
    saved = rc.saved_effective()
    if not saved:
        return []
    diffs = [
        f"{section}.{name}: saved {fmt(value)}, computed {fmt(res.effective[section][name])}"
        for section, values in saved.items()
        for name, value in values.items()
        if name in res.effective.get(section, {}) and res.effective[section][name] != value
    ]
    if not diffs:
        return []
    return [findings.make("SAVED_EFFECTIVE_DIFFERS", knobs=[d.split(":")[0] for d in diffs], count=len(diffs),
                          version=res.bridge_version, diffs="; ".join(diffs[:4]))]


def _modes_left_off(state) -> list[Finding]:
    """Overlap modes that apply to the run's layout but were off, each with a fix proven by re-resolution (the
    re-resolved run is linted for this too, so a fix that leaves the mode off or brings a warning is not offered)."""
    eff = state.effective()
    model, ddp = eff["model"], eff["ddp"]
    out = []
    requested_tp = (state.request.comm_overlap or {}).get("tp_comm_overlap")
    moe = model.get("expert_model_parallel_size", 1) > 1 or (state.request.model.get("expert_model_parallel_size") or 1) > 1
    blocked = checks.tp_overlap_precision_problem(state.model)
    if layout.tp_overlap_applies(model["tensor_model_parallel_size"], state.te) and not model["tp_comm_overlap"] and not requested_tp \
            and not blocked and not moe:
        o = {"comm_overlap.tp_comm_overlap": True}
        if not model["sequence_parallel"]:
            o["model.sequence_parallel"] = True
        if state.request.comm_overlap is None:
            o.update(checks.adopt_dp_knobs(state))
        out.append(_left_off(state, "TP", f"TP={model['tensor_model_parallel_size']}", "it was not requested", [o], list(o)))
    # PP left off is the resolver's PP_OVERLAP_NOT_SELECTED, with the fix for its cause
    dp = state.data_parallel_size
    if dp > 1 and not (ddp["overlap_grad_reduce"] and ddp["overlap_param_gather"]) and not ddp["use_megatron_fsdp"]:
        off = [n for n in ("overlap_grad_reduce", "overlap_param_gather") if not ddp[n]]
        knobs = [f"ddp.{n}" for n in off]
        both_on = {"ddp.use_distributed_optimizer": True, "optimizer.use_distributed_optimizer": True}
        on = {f"comm_overlap.{n}": True for n in off}
        if not state.dp_overlap_applied:  # CommOverlapConfig skipped DP overlap: the distributed optimizer was off
            candidates = [both_on, {**both_on, **on}, {**both_on, **on, **checks.adopt_dp_knobs(state)}]
        elif state.request.comm_overlap is not None:
            candidates = [on]
        else:
            plain = {f"ddp.{n}": True for n in off}
            candidates = [{**plain, **({"optimizer.overlap_param_gather": True} if "overlap_param_gather" in off else {})}]
        what = f"{' and '.join(off)} {'was' if len(off) == 1 else 'were'} off"
        out.append(_left_off(state, "DP", f"DP={dp}", what, candidates, knobs))
    return out


def _left_off(state, mode: str, why: str, what: str, candidates: list[dict], knobs: list) -> Finding:
    o, fix = checks.prove(state, "MODE_LEFT_OFF", candidates, knobs, _modes_left_off)
    return findings.make("MODE_LEFT_OFF", fix_overrides=o, fix=fix, knobs=knobs, mode=mode, why=why, what=what)


def _precision_class(precision: dict) -> str | None:
    """The precision a preset name carries (bf16 or fp8), from the resolved mixed-precision fields."""
    if precision.get("fp4"):
        return None
    return "fp8" if precision.get("fp8") else "bf16"


def _preset(rc, entry, res, gpu_info: dict) -> list[Finding]:
    eff = res.effective["model"]
    if not eff["tp_comm_overlap"]:
        return []
    raw = rc.raw if rc else {}
    recorded = (entry or {}).get("request") or {}
    req = res.state.request
    sizes = {
        "tp": eff["tensor_model_parallel_size"], "cp": eff["context_parallel_size"],
        # a recipe's model dimensions are the catalog's stand-in's, not the real model's: not compared
        "hidden_size": req.model["hidden_size"],
        "seq_length": req.model["seq_length"],
        "micro_batch_size": req.train["micro_batch_size"],
    }
    lora = bool(raw.get("peft") is not None or recorded.get("peft"))
    release = releases.get(res.bridge_version)
    name, _ = match_preset(release, gpu_info, _precision_class(res.state.precision or {"bf16": True}), sizes, lora, True)
    used = eff["tp_comm_overlap_cfg"]
    used_name = used[0] if isinstance(used, list) else used
    if name and used_name != name:
        return [findings.make("PRESET_NOT_USED", fix_overrides={"comm_overlap.tp_comm_overlap_cfg": name}, preset=name,
                              used=used_name or "the TE default")]
    if used_name and not name and not _preset_fits(release, used_name, gpu_info, sizes, lora):
        return [findings.make("PRESET_NOT_FOR_LAYOUT", fix_overrides={"comm_overlap.tp_comm_overlap_cfg": None}, used=used_name)]
    return []


def _preset_fits(release, name: str, gpu_info: dict, sizes: dict, lora: bool) -> bool:
    """The preset's name agrees with every part of the layout that is known (an unknown size is not a mismatch)."""
    p = release.preset(name)
    known = {"gpu": gpu_info["preset_gpu"], "tp": sizes["tp"], "cp": sizes["cp"], "lora": lora,
             "hidden_size": sizes["hidden_size"], "seq_length": sizes["seq_length"], "micro_batch_size": sizes["micro_batch_size"]}
    return all(value is None or getattr(p, key) == value for key, value in known.items())


# Launch variables whose value decides whether overlap happens; the others are tuning (a differing value is info).
_DECISIVE_ENV = ("CUDA_DEVICE_MAX_CONNECTIONS",)


def _launch_env(res) -> list[Finding]:
    release = releases.get(res.bridge_version)
    have = res.env_vars
    out = []
    for name, rule in res.launch_env.items():
        value, why = rule["value"], rule["why"]
        if name in have and have[name] != value:
            fid = "LAUNCH_ENV_DIFFERS_FROM_BRIDGE" if name in _DECISIVE_ENV else "LAUNCH_ENV_TUNED_DIFFERENTLY"
            out.append(findings.make(fid, fix_overrides={f"env_vars.{name}": launch_env.env_value(value)},
                                     knobs=[f"env_vars.{name}"], name=name, have=have[name], value=value, why=why))
        elif name not in have and release.env_vars:
            out.append(findings.make("LAUNCH_ENV_NOT_SET", fix_overrides={f"env_vars.{name}": launch_env.env_value(value)},
                                     knobs=[f"env_vars.{name}"], name=name, value=value, why=why))
    return out
