"""lint: every finding that applies to a run config, and what the run left on the table.

On top of the resolver's findings (which, for a saved run, include requested-versus-effective contradictions
such as comm_overlap.tp_comm_overlap=true on a run whose model ran with TP overlap off, and why), lint compares
the run with what `plan` recommends for its own layout: overlap modes that apply but were off, a tuned preset
that matches but was not used, launch environment that differs from Bridge's rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import findings, launch_env, releases, runconfig
from .findings import Finding
from .planner import match_preset
from .text import fmt


@dataclass
class LintResult:
    config: str
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


def lint(path, *, gpus: int | None = None, gpu: str | None = None, te: bool = True, bridge_version: str | None = None) -> LintResult:
    rc = runconfig.load(path)
    res = runconfig.resolve(rc, gpus, te, bridge_version)
    state, eff = res.state, res.effective
    model = eff["model"]
    layout = {
        "tp": model["tensor_model_parallel_size"], "pp": model["pipeline_model_parallel_size"],
        "vpp": model["virtual_pipeline_model_parallel_size"], "cp": model["context_parallel_size"],
        "gpus": state.gpus, "dp": res.data_parallel_size, "gpu": gpu,
    }
    found = list(res.findings)
    found += _saved_differs(rc, res)
    found += _modes_left_off(res, te)
    notes = list(rc.warnings)
    if gpu:
        gpu_info = releases.gpu(gpu)
        found += _preset(rc, res, gpu_info, te)
        found += _launch_env(rc, res, gpu_info)
    else:
        notes.append("pass --gpu (h100, b200, ...) to check the tuned TP preset and the launch environment too")
    return LintResult(str(rc.path), rc.saved, res, layout, findings.sort(_dedupe(found)), notes)


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
        if res.effective[section][name] != value
    ]
    if not diffs:
        return []
    return [findings.make(
        "SAVED_EFFECTIVE_DIFFERS",
        f"{len(diffs)} saved effective value(s) differ from Megatron-Bridge {res.bridge_version}'s: {'; '.join(diffs[:4])}",
        "pass the run's --bridge-version and --gpus; or the file was edited after the run started",
        [d.split(":")[0] for d in diffs],
    )]


def _modes_left_off(res, te: bool) -> list[Finding]:
    eff, state = res.effective, res.state
    model, ddp = eff["model"], eff["ddp"]
    out = []
    requested_tp = (state.request.comm_overlap or {}).get("tp_comm_overlap")
    if model["tensor_model_parallel_size"] >= 2 and te and not model["tp_comm_overlap"] and not requested_tp:
        fix = "comm_overlap.tp_comm_overlap=true" + ("" if model["sequence_parallel"] else " model.sequence_parallel=true")
        out.append(findings.make(
            "MODE_LEFT_OFF", f"TP overlap applies (TP={model['tensor_model_parallel_size']}) but was not requested", fix,
            ["comm_overlap.tp_comm_overlap", "model.sequence_parallel"],
        ))
    # PP left off is the resolver's PP_OVERLAP_NOT_SELECTED, with the fix for its cause
    if res.data_parallel_size > 1 and not (ddp["overlap_grad_reduce"] and ddp["overlap_param_gather"]):
        if not ddp["use_distributed_optimizer"]:
            fix = "ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true"
        elif state.request.comm_overlap is not None:
            fix = "comm_overlap.overlap_grad_reduce=true comm_overlap.overlap_param_gather=true"
        else:
            fix = "ddp.overlap_grad_reduce=true ddp.overlap_param_gather=true"
        off = [n for n in ("overlap_grad_reduce", "overlap_param_gather") if not ddp[n]]
        out.append(findings.make(
            "MODE_LEFT_OFF", f"DP overlap applies (DP={res.data_parallel_size}) but {' and '.join(off)} was off", fix,
            [f"ddp.{n}" for n in off],
        ))
    return out


def _precision_class(rc) -> str | None:
    mp = rc.raw.get("mixed_precision")
    if isinstance(mp, dict):
        if mp.get("fp4"):
            return None
        return "fp8" if mp.get("fp8") else "bf16"
    if isinstance(mp, str):
        return "fp8" if "fp8" in mp else None if "fp4" in mp else "bf16"
    return "bf16"


def _preset(rc, res, gpu_info: dict, te: bool) -> list[Finding]:
    model_raw = rc.raw.get("model") or {}
    train = rc.raw.get("train") or {}
    eff = res.effective["model"]
    sizes = {
        "tp": eff["tensor_model_parallel_size"], "cp": eff["context_parallel_size"],
        "hidden_size": model_raw.get("hidden_size"), "seq_length": model_raw.get("seq_length"),
        "micro_batch_size": train.get("micro_batch_size"),
    }
    lora = rc.raw.get("peft") is not None
    if not eff["tp_comm_overlap"]:
        return []
    release = releases.get(res.bridge_version)
    name, _ = match_preset(release, gpu_info, _precision_class(rc), sizes, lora, True)
    used = eff["tp_comm_overlap_cfg"]
    if name and used != name:
        return [findings.make(
            "PRESET_NOT_USED", f"tuned preset {name} matches this run; it ran with {used or 'the TE default'}",
            f"comm_overlap.tp_comm_overlap_cfg={name}", ["comm_overlap.tp_comm_overlap_cfg"],
        )]
    if used and not name:
        return [findings.make(
            "PRESET_NOT_FOR_LAYOUT", f"{used} was tuned for another GPU, precision or shape than this run's",
            "comm_overlap.tp_comm_overlap_cfg=null (TE default) or a preset of this shape", ["comm_overlap.tp_comm_overlap_cfg"],
        )]
    return []


def _launch_env(rc, res, gpu_info: dict) -> list[Finding]:
    release = releases.get(res.bridge_version)
    model = res.effective["model"]
    layout = launch_env.Layout(
        tp=model["tensor_model_parallel_size"], pp=model["pipeline_model_parallel_size"], cp=model["context_parallel_size"],
        gpus=res.state.gpus, gpu=gpu_info["name"],
    )
    have = res.env
    out = []
    for name, value, why in launch_env.rules(release, layout):
        if name in have and have[name] != value:
            out.append(findings.make(
                "LAUNCH_ENV_DIFFERS_FROM_BRIDGE", f"env_vars.{name}={have[name]}; Bridge's launcher uses {value} here ({why})",
                f"env_vars.{name}={value}", [f"env_vars.{name}"],
            ))
        elif name not in have and release.env_vars:
            out.append(findings.make(
                "LAUNCH_ENV_NOT_SET", f"{name} is not in cfg.env_vars; Bridge's launcher uses {value} here ({why})",
                f"env_vars.{name}={value} (or export it in the launcher)", [f"env_vars.{name}"],
            ))
    return out
