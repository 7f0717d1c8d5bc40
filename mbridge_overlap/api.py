"""The Python API: the command line's verbs, each returning an object whose to_dict() is the command's JSON (or a
dict that is). The command line calls only these."""

from __future__ import annotations

import os
from typing import Any, Mapping

from . import catalog, findings, releases, request
from .errors import UsageError
from .contract import SCHEMA_VERSION
from .resolution import Resolution, resolve_request


def resolve(
    overrides: Mapping[str, Any] | None = None,
    *,
    gpus: int | None = None,
    recipe: str | None = None,
    te: bool = True,
    gpu: str | None = None,
    bridge_version: str | None = None,
    config: Mapping | str | os.PathLike | None = None,
    launcher_env: Mapping[str, str] | None = None,
) -> Resolution:
    """Effective values after Bridge's runtime_config_update() for overrides on a starting config.

    The start is Bridge's recipe baseline (_pretrain_common), or the shipped recipe `recipe` (a function name of
    megatron.bridge.recipes or perf_recipes; GPUs and GPU type default to the ones in its name). overrides: dotted
    keys as Bridge's scripts take them ({"model.tensor_model_parallel_size": 4}), typed or as command-line strings.
    config: a ConfigContainer-shaped mapping or YAML path, applied before the overrides. launcher_env: the
    environment the job is launched with (its values win over cfg.env_vars)."""
    release = releases.get(bridge_version)
    entry = catalog.lookup(recipe, release.version) if recipe else None
    if isinstance(config, (str, os.PathLike)):
        config = request.read_config_file(config)
    req = request.build(release, overrides, config, base=entry)
    return resolve_request(req, gpus=_gpus(gpus, entry), te=te, gpu=gpu, launcher_env=launcher_env)


def _gpus(gpus: int | None, entry: dict | None) -> int:
    if gpus is not None:
        return gpus
    if entry is None:
        raise UsageError("--gpus: required (the world size) unless --recipe names a recipe whose name carries a GPU count")
    if entry.get("gpus") is None:
        raise UsageError(f"--gpus: recipe {entry['name']} has no GPU count in its name; pass --gpus N")
    return entry["gpus"]


def plan(**layout):
    """The overrides that turn on every overlap mode a layout can use, checked by the resolver.

    Keywords as the command line's flags: gpus, tp, pp, vpp, cp, gpu, precision, hidden_size, seq_length,
    micro_batch_size, lora, te, bridge_version, moe_a2a_overlap, moe_flex_dispatcher_backend, megatron_fsdp, recipe,
    task. With recipe (a full recipe function name) the plan starts from that recipe."""
    from .planner import make_plan

    return make_plan(**layout)


def lint(config=None, *, recipe: str | None = None, gpus: int | None = None, gpu: str | None = None, te: bool = True,
         bridge_version: str | None = None):
    """Every finding for a saved run config (or a shipped recipe), and the overlap it left on the table."""
    from .lint import lint as run_lint

    return run_lint(config, recipe=recipe, gpus=gpus, gpu=gpu, te=te, bridge_version=bridge_version)


def diff(before, after, *, gpus_before: int | None = None, gpus_after: int | None = None, te: bool = True,
         bridge_version: str | None = None):
    """The overlap-relevant changes between two run configs, each with its cause, ranked by expected impact."""
    from .diff import diff as run_diff

    return run_diff(before, after, gpus_before=gpus_before, gpus_after=gpus_after, te=te, bridge_version=bridge_version)


def recipes(**filters):
    """Bridge's shipped recipes with their effective overlap state; filters: model, gpu, gpus, task, precision, name,
    bridge_version."""
    from .catalog_view import list_recipes

    return list_recipes(**filters)


def trace(paths, **options):
    """Hidden and exposed communication per rank, dimension and step from profiler traces (see trace.analyze)."""
    from .trace import analyze

    return analyze(paths, **options)


def compare_traces(before, after, **options):
    from .trace import compare

    return compare(before, after, **options)


def trace_snippet(form: str, steps: str | None = None, ranks: str | None = None) -> dict:
    """The cfg.profiling snippet that makes Bridge write the traces `trace` reads (form: python, yaml or hydra;
    steps START-END, default 10-13; ranks "0,8" or "all", default 0)."""
    from .trace import snippet

    start, end = snippet.parse_steps(steps or snippet.DEFAULT_STEPS)
    chosen = snippet.parse_ranks(ranks, allow_all=True)
    return snippet.to_dict(form, start, end, (0,) if chosen is None else chosen)


def anchors(mbridge_src: str | None = None) -> dict:
    """Where the Bridge code each rule mirrors is now, and whether it is still a verified release's code."""
    from .anchors import report

    return {"schema_version": SCHEMA_VERSION, **report(mbridge_src)}


def explain(finding_id: str) -> dict:
    """A finding's record: severity, title, the Bridge code that decides it (and where it is now), explanation."""
    return {"schema_version": SCHEMA_VERSION, **findings.explain(finding_id)}


def presets(bridge_version: str | None = None) -> dict:
    """The tuned TP userbuffers presets of a release, with what each name says it was tuned for."""
    release = releases.get(bridge_version)
    return {"schema_version": SCHEMA_VERSION, "bridge_version": release.version, "presets": [p.to_dict() for p in release.presets()]}


def check_manifest(path=None, check_directory: bool = False) -> dict:
    """SKILL.md against the Agent Skills rules: {"ok", "problems"}."""
    from .manifest import check_file

    problems = check_file(path, check_directory=check_directory)
    return {"schema_version": SCHEMA_VERSION, "ok": not problems, "problems": problems}


def release_table() -> dict:
    """Per-release facts side by side."""
    listed = releases.versions() + sorted(releases.data()["newer_releases"], key=releases.version_key)
    return {"schema_version": SCHEMA_VERSION, "releases": {v: releases.get(v).facts() for v in listed}}


def suites() -> dict:
    """The upstream overlap suites verify runs, with the pass count expected per test-file hash and release."""
    from .bridge.suites import expected_counts

    return {"schema_version": SCHEMA_VERSION, **expected_counts()}
