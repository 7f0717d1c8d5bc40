"""lint: the analysis of a run config or a shipped recipe, and what only a saved run config can add.

Every finding the same config earns from resolve, lint earns too: both are views of one analysis. What lint adds
needs a saved run_config.yaml: the effective values it saved against the ones this release computes for its request.
"""

from __future__ import annotations


from .. import budget as budgets, findings
from ..run import layout, scenario
from ..findings.analysis import Analysis, analyze
from ..findings.rules import declare
from ..errors import UsageError
from dataclasses import dataclass
from ..values import fmt

declare("lint.saved_differs", ["SAVED_EFFECTIVE_DIFFERS"])


@dataclass
class LintResult:
    analysis: Analysis
    findings: list

    def to_dict(self) -> dict:
        sc = self.analysis.scenario
        out = self.analysis.to_dict()
        out["findings"] = [f.to_dict() for f in self.findings]
        shape = layout.Layout.of(self.analysis.effective["model"], sc.gpus)
        out.update(config=str(sc.config.path) if sc.config else None, saved_run_config=bool(sc.config and sc.config.saved),
                   layout={"tp": shape.tp, "pp": shape.pp, "vpp": shape.vpp, "cp": shape.cp, "gpus": sc.gpus,
                           "dp": self.analysis.data_parallel_size, "gpu": sc.gpu, "recipe": sc.recipe["name"] if sc.recipe else None})
        return out

    @property
    def errors(self) -> list:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def resolution(self) -> Analysis:
        return self.analysis


def lint(config=None, overrides=None, *, model=None, shape=None, **inputs) -> LintResult:
    """Every finding for a saved run config (a file, checkpoint or iteration directory), an override file or a shipped
    recipe (recipe=), with overrides on top (or overrides alone, on Bridge's recipe baseline); and its communication
    budget (model, shape: as for api.budget; a saved run config holds the shape). inputs: scenario.build's keywords."""
    if config is None and inputs.get("recipe") is None and not overrides:
        raise UsageError("lint: give a run config (file, checkpoint or iteration directory), --recipe NAME or KEY=VALUE overrides")
    an = analyze(scenario.with_model(scenario.build(config=config, overrides=overrides, **inputs), model, shape))
    an.budget = budgets.shown(an, model, shape)
    return LintResult(an, findings.sort(an.findings + _saved_differs(an)))


def _config_alone(sc):
    """The scenario of the saved config without the overrides on top: what its saved effective values are the output
    of (the request built again from the config; GPUs, machine and launcher as given)."""
    from dataclasses import replace

    from ..run import request, runconfig

    rc = sc.config
    req = request.build(sc.release, {}, rc.raw, strict=not rc.saved, base=sc.recipe, written=runconfig.written_by_bridge(rc))
    return replace(sc, request=req, overrides={})


def _saved_differs(an: Analysis) -> list:
    rc = an.scenario.config
    saved = rc.saved_effective() if rc else None
    if not saved:
        return []
    eff = an.effective
    if an.scenario.overrides:  # the saved values are of the config alone: compared with it, not with the overrides' effect
        eff = analyze(_config_alone(an.scenario)).effective
    diffs = [
        f"{section}.{name}: saved {fmt(value)}, computed {fmt(eff[section][name])}"
        for section, values in saved.items()
        for name, value in values.items()
        if name in eff.get(section, {}) and eff[section][name] != value
    ]
    if not diffs:
        return []
    keys = [d.split(":")[0] for d in diffs]
    return [findings.make("SAVED_EFFECTIVE_DIFFERS", knobs=keys, count=len(diffs), version=an.scenario.release.version,
                          diffs="; ".join(diffs[:4]), fix=_saved_fix(an, keys))]


def _saved_fix(an: Analysis, keys: list) -> findings.Shell:
    """Where a differing key is one Bridge's CommOverlapConfig writes at every start from the comm_overlap section,
    an edit of the saved value does not survive: its comm_overlap field is the way (evalU V3: the release and the GPU
    count were blamed for an edited ddp.bucket_size)."""
    from ..run.runconfig import WRITTEN_BY_COMM_OVERLAP, WRITTEN_BY_DP_OVERLAP

    written = [k for k in keys if k in WRITTEN_BY_COMM_OVERLAP + WRITTEN_BY_DP_OVERLAP]
    plain = findings.Shell("pass the run's --bridge-version and --gpus; or the file was edited after the run started")
    if not written or an.state.request.comm_overlap is None:
        return plain
    fields = ", ".join(f"comm_overlap.{k.partition('.')[2]}" for k in written)
    return findings.shell("{written}: Bridge's CommOverlapConfig writes them from the comm_overlap section at every "
                          "start, so an edit of the saved value does not survive (set {fields} instead); else {plain}",
                          written=findings.Shell(", ".join(written)), fields=findings.Shell(fields), plain=plain)
