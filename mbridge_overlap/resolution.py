"""A resolved request: what Bridge leaves after runtime_config_update(), the findings, and the launch environment.

resolve, plan, lint, diff and recipes all build theirs here; api.py is the public front door.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from . import checks, findings, launch_env, layout, releases, resolver, safeio
from .contract import SCHEMA_VERSION
from .errors import UsageError
from .request import Request



@dataclass
class Resolution:
    """What Bridge will do with a request: the JSON of `resolve`."""

    bridge_version: str
    recipe: str | None
    gpus: int
    gpu: str
    data_parallel_size: int
    effective: dict
    modes: dict
    findings: list
    env_vars: dict  # what the config's env_vars set (installed with setdefault)
    launch_env: dict  # what Bridge's own launchers set for this layout: {name: {value, why}}
    state: resolver.State | None = field(default=None, repr=False, compare=False)
    launch_layout: launch_env.Layout | None = field(default=None, repr=False, compare=False)  # what launch_env came from

    def to_dict(self) -> dict:
        release = releases.get(self.bridge_version)
        return {
            "schema_version": SCHEMA_VERSION,
            "bridge_version": self.bridge_version,
            "verified": release.verified,
            "recipe": self.recipe,
            "gpus": self.gpus,
            "gpu": self.gpu,
            "data_parallel_size": self.data_parallel_size or None,  # None: GPUs not a multiple of TP x PP x CP
            "effective": self.effective,
            "modes": self.modes,
            "env_vars": self.env_vars,
            "launch_env": self.launch_env,
            "findings": [f.to_dict() for f in self.findings],
        }

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]


def resolve_request(req: Request, *, gpus: int, te: bool = True, gpu: str | None = None,
                    launcher_env: Mapping[str, str] | None = None, family: str | None = None, task: str | None = None,
                    launch_hints: dict | None = None) -> Resolution:
    """Run the resolver and the checks on a built request. family and task (a model family such as llama3_70b, and
    pretrain/sft/peft; from the recipe when the request starts from one) choose the launch environment rules."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise UsageError(f"--gpus: must be a positive integer, got {safeio.shown(gpus)}")
    gpu = releases.gpu(gpu or (req.recipe or {}).get("gpu") or "h100")["name"]
    state = resolver.run(req, gpus, te, gpu, dict(launcher_env or {}))
    found = checks.collect(state) + list(_launcher_env_findings(state)) + list(_release_findings(req.release))
    effective = state.effective()
    shape = layout.Layout.of(state.model, gpus)
    recipe = req.recipe or {}
    env_layout = launch_env.Layout.of(effective, max(state.data_parallel_size, 1), gpu, family or recipe.get("model"),
                                      task or recipe.get("task") or "pretrain", **(launch_hints or {}))
    return Resolution(
        bridge_version=req.release.version,
        recipe=recipe.get("name"),
        gpus=gpus,
        gpu=gpu,
        data_parallel_size=state.data_parallel_size,
        effective=effective,
        modes=layout.modes(effective, shape, te),
        findings=findings.sort(found),
        env_vars={k: str(v) for k, v in req.env_vars.items()},
        launch_env={name: {"value": value, "why": why} for name, value, why in launch_env.rules(req.release, env_layout)},
        state=state,
        launch_layout=env_layout,
    )


def _release_findings(release: releases.Release):
    if release.rules_of != release.version:
        changed = release.changed_rules
        if changed is None:
            what = "Nobody has compared its code with ours yet."
        elif changed:
            what = "Rules whose code changed: " + "; ".join(f"{k}: {v}" for k, v in changed.items())
        else:
            what = "Its code was compared with ours: no anchored rule changed."
        yield findings.make("RELEASE_NOT_VERIFIED", version=release.version, rules_of=release.rules_of, changed=what)
    elif not release.verified:
        yield findings.make("RELEASE_READ_FROM_SOURCE", version=release.version, data_of=release.data_version)


def _launcher_env_findings(state: resolver.State):
    for name, value in state.request.env_vars.items():
        launcher = state.launcher_env.get(name)
        if launcher is not None and launcher != str(value):
            yield findings.make("LAUNCHER_ENV_WINS", knobs=[f"env_vars.{name}"], name=name, value=str(value), launcher=launcher)
