"""The Python API: the same verbs as the command line, each returning an object whose to_dict() is the JSON."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import checks, findings, releases, request, resolver, safeio
from .errors import UsageError


@dataclass
class Resolution:
    """What Bridge will do with a request: the JSON of `resolve`."""

    bridge_version: str
    data_parallel_size: int
    effective: dict
    findings: list
    env: dict
    state: resolver.State | None = field(default=None, repr=False, compare=False)  # how Bridge got there

    def to_dict(self) -> dict:
        return {
            "bridge_version": self.bridge_version,
            "data_parallel_size": self.data_parallel_size,
            "effective": self.effective,
            "findings": [f.to_dict() for f in self.findings],
            "env": self.env,
        }

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]


def check_layout(model: Mapping[str, Any], gpus: Any) -> None:
    """The layout errors the CLI reports as bad input: sizes, VPP without PP, GPUs not divisible."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise UsageError(f"--gpus: must be a positive integer, got {gpus!r}")
    tp, pp = model["tensor_model_parallel_size"], model["pipeline_model_parallel_size"]
    cp = model["context_parallel_size"]
    vpp = model["virtual_pipeline_model_parallel_size"]
    if vpp is not None and pp <= 1:
        raise UsageError(
            f"model.virtual_pipeline_model_parallel_size={vpp} needs model.pipeline_model_parallel_size > 1 (it is {pp})"
        )
    if gpus % (tp * pp * cp):
        raise UsageError(f"--gpus {gpus} is not divisible by TP x PP x CP = {tp} x {pp} x {cp} = {tp * pp * cp}")


def resolve(
    overrides: Mapping[str, Any] | None = None,
    *,
    gpus: int,
    te: bool = True,
    bridge_version: str | None = None,
    config: Mapping | str | os.PathLike | None = None,
    launcher_env: Mapping[str, str] | None = None,
) -> Resolution:
    """Effective values after Bridge's runtime_config_update() for overrides on Bridge's recipe baseline.

    overrides: dotted keys as Bridge's scripts take them ({"model.tensor_model_parallel_size": 4}); values typed
    or in their command-line string form. config: a ConfigContainer-shaped mapping or YAML path, applied first.
    launcher_env: the environment the job will be launched with, to catch values that win over cfg.env_vars.
    """
    release = releases.get(bridge_version)
    if isinstance(config, (str, os.PathLike)):
        config = request.read_config_file(config)
    return resolve_request(request.build(release, overrides, config), gpus=gpus, te=te, launcher_env=launcher_env)


def resolve_request(req: request.Request, *, gpus: int, te: bool = True, launcher_env: Mapping[str, str] | None = None) -> Resolution:
    """resolve() for a request already built (lint and diff build theirs from saved run configs)."""
    check_layout(req.model, gpus)
    state = resolver.run(req, gpus, te)
    found = checks.collect(state) + list(_launcher_env_findings(req, launcher_env))
    return Resolution(
        bridge_version=req.release.version,
        data_parallel_size=state.data_parallel_size,
        effective=state.effective(),
        findings=findings.sort(found),
        env={k: str(v) for k, v in req.env_vars.items()},
        state=state,
    )


def _launcher_env_findings(req: request.Request, launcher_env: Mapping[str, str] | None):
    for name, value in req.env_vars.items():
        if launcher_env and name in launcher_env and launcher_env[name] != str(value):
            yield findings.make(
                "LAUNCHER_ENV_WINS",
                f"env_vars.{name}={value} is ignored: the launcher already has {name}={launcher_env[name]}",
                f"unset {name} in the launcher, or export {name}={safeio.sh_quote(str(value))} there",
                [f"env_vars.{name}"],
            )


def explain(finding_id: str) -> dict:
    """The long form of a finding: severity, title, the Bridge code that decides it, explanation."""
    return findings.explain(finding_id)


def presets(bridge_version: str | None = None) -> list[dict]:
    """The tuned TP userbuffers presets of a release, with what each name says it was tuned for."""
    return [p.to_dict() for p in releases.get(bridge_version).presets()]


def release_table() -> dict:
    """Per-release facts side by side."""
    return {v: releases.get(v).__dict__ | {"verified": releases.get(v).verified} for v in releases.versions()}


@dataclass
class PlanResult:
    """The JSON of `plan`: a Resolution of the recommended overrides, plus the layout and why."""

    resolution: Resolution
    layout: dict
    overrides: dict
    preset: str | None
    modes: dict
    env: dict
    notes: list = field(default_factory=list)
    env_why: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = self.resolution.to_dict()
        out["findings"] = [f.to_dict() for f in findings.sort(self.notes + self.resolution.findings)]
        out["env"] = self.env
        out["env_why"] = self.env_why
        out.update(layout=self.layout, overrides=self.overrides, preset=self.preset, modes=self.modes)
        return out


def plan(**layout) -> PlanResult:
    """The minimal override enabling every overlap mode that applies to a layout.

    Keywords as the command line's flags: gpus, tp, pp, vpp, cp, gpu, precision, hidden_size, seq_length,
    micro_batch_size, lora, te, bridge_version, moe_a2a_overlap, moe_flex_dispatcher_backend, recipe, task."""
    from .planner import make_plan

    return make_plan(**layout)
