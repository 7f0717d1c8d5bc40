"""The Python API: the command line's verbs, each returning an object whose to_dict() is the command's JSON (or a
dict that is). The command line calls only these.

Every verb about a config takes the same inputs, the keywords of `scenario.build` (recipe, config, overrides, gpus,
gpu, te, bridge_version, launcher_env, task, machine_facts), and answers from one analysis of that scenario.
"""

from __future__ import annotations

import os

from collections.abc import Mapping

from .contract import SCHEMA_VERSION
from .errors import UsageError
from .keywords import checked

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs a cold start about 2 ms
    from typing import Any, Sequence

# Where each verb's **inputs go, for the check of every call's arguments (keywords.checked): scenario.build's keywords,
# less those only the verbs pass (the model family, diff's side, plan's preset shape, a recipe's catalog entry)
SCENARIO = ("run.scenario:build", "family", "side", "shape", "catalog_entry")


@checked(SCENARIO)
def resolve(overrides: Mapping[str, Any] | None = None, *, model: str | None = None, shape: Mapping[str, Any] | None = None,
            **inputs):
    """Effective values after Bridge's runtime_config_update() for overrides on a starting config, and every finding.

    The start is Bridge's recipe baseline (_pretrain_common), or the shipped recipe `recipe` (a function name of
    megatron.bridge.recipes or perf_recipes). overrides: dotted keys as Bridge's scripts take them
    ({"model.tensor_model_parallel_size": 4}), typed or as command-line strings. config: a ConfigContainer-shaped
    mapping or YAML path (a saved run_config.yaml or an override file), applied before the overrides. launcher_env:
    the environment the job is launched with (its values win over cfg.env_vars). model, shape: as for budget(); the
    result's budget is the config's (or why there is none: the shape is not known, the config does not run)."""
    from . import budget as budgets
    from .run import scenario
    from .findings.analysis import analyze

    analysis = analyze(scenario.with_model(scenario.build(overrides=overrides, **inputs), model, shape))
    analysis.budget = budgets.shown(analysis, model, shape)
    return analysis


@checked(SCENARIO)
def budget(overrides: Mapping[str, Any] | None = None, *, model: str | None = None, shape: Mapping[str, Any] | None = None,
           **inputs):
    """The communication budget of one iteration on one GPU for a requested config (resolve's inputs): per parallel
    dimension the collectives, their sizes and times, what each overlap setting as Bridge leaves it hides, and what
    flipping it would change. model: a known model's name (budget_models.yaml); shape: its keys (hidden_size, ...)."""
    from .verbs.budget import budget as run_budget

    return run_budget(overrides, model=model, shape=shape, **inputs)


@checked(("verbs.plan:make_plan",), SCENARIO)
def plan(**layout):
    """The overrides that turn on every overlap mode a layout can use, checked by the resolver.

    Keywords: the layout (tp, pp, vpp, cp, ep, precision, hidden_size, seq_length, micro_batch_size, lora, moe,
    moe_a2a_overlap, moe_flex_dispatcher_backend, megatron_fsdp, recipe: a recipe function or model family),
    overrides (the user's own dotted keys beside the layout, kept as given), the budget's (model, shape as for
    budget(); global_batch_size) and the scenario's inputs (gpus, gpu, te, bridge_version, task, machine_facts,
    launcher_env)."""
    from .verbs.plan import make_plan

    return make_plan(**layout)


@checked(SCENARIO)
def lint(config: str | os.PathLike | Mapping | None = None, overrides: Mapping[str, Any] | None = None, *, model: str | None = None,
         shape: Mapping[str, Any] | None = None, **inputs):
    """Every finding for a saved run config (or a shipped recipe, recipe=), the overlap it left on the table, and its
    communication budget (model, shape: as for budget(); a saved run config holds the shape itself)."""
    from .verbs.lint import lint as run_lint

    return run_lint(config, overrides, model=model, shape=shape, **inputs)


@checked((*SCENARIO, "config"))
def diff(before: str | os.PathLike | Mapping | None = None, after: str | os.PathLike | Mapping | None = None, *,
         overrides: Mapping[str, Any] | None = None, before_overrides: Mapping[str, Any] | None = None,
         recipe: str | None = None, recipe_before: str | None = None, recipe_after: str | None = None, gpus: int | None = None,
         gpus_before: int | None = None, gpus_after: int | None = None, model: str | None = None,
         shape: Mapping[str, Any] | None = None, **inputs):
    """The overlap-relevant changes from one scenario to another, each with its cause, ranked by expected impact.

    A side is a run config (before/after), or a recipe (recipe for both, or recipe_before/recipe_after), at a GPU
    count (gpus for both, or gpus_before/gpus_after), with overrides (before_overrides; overrides go on AFTER): two
    saved runs, two recipes, one recipe at two GPU counts, or one config before and after overrides. model, shape:
    the model's shape for what the change does to the communication budget (as for budget(); each side's own
    recipe model or saved config where not given)."""
    from .run import scenario
    from .verbs.diff import diff as run_diff

    if before is None and recipe is None and recipe_before is None:
        raise UsageError("diff: give BEFORE and AFTER run configs, or --recipe (or --recipe-before/--recipe-after)")
    # a side's own recipe and count where given: 0 or '' is a value (refused as such), not "not given" (fuzzW W2-5)
    before_sc = scenario.build(config=before, recipe=recipe if recipe_before is None else recipe_before,
                               gpus=gpus if gpus_before is None else gpus_before, overrides=before_overrides,
                               side="before", **inputs)
    after_config = after if after is not None else (before if recipe_after is None and recipe is None else None)
    after_sc = scenario.build(config=after_config, recipe=recipe if recipe_after is None else recipe_after,
                              gpus=gpus if gpus_after is None else gpus_after,
                              overrides={**dict(before_overrides or {}), **dict(overrides or {})}, side="after", **inputs)
    return run_diff(scenario.with_model(before_sc, model, shape), scenario.with_model(after_sc, model, shape), model=model, shape=shape)


@checked(("verbs.diagnose:diagnose",), SCENARIO)
def diagnose(logs: str | os.PathLike | Sequence[str | os.PathLike], *, compare: bool = False, **inputs):
    """The overlap causes a crashed, hung or slow run's logs show, each with its finding, the messages as logged
    (grouped across ranks), where each is raised, its knobs and fix; linked to the analysis of the run's config when
    it is known (config, recipe, overrides, as for resolve; else the summary Bridge printed at start-up).

    logs: files, directories of per-rank logs, or "-" (standard input; stdin= a binary stream to read instead).
    compare: logs are BEFORE and AFTER; the iteration-time change between them, and the config changes."""
    from .verbs.diagnose import diagnose as run_diagnose

    if isinstance(logs, (str, os.PathLike)):  # one path, not its characters (fuzzR R9: "x.log" read "/")
        logs = [logs]
    return run_diagnose(logs, compare=compare, **inputs)


@checked(("verbs.recipes:list_recipes",))
def recipes(**filters):
    """Bridge's shipped recipes with their effective overlap state; filters: model, gpu, gpus, task, precision, name,
    package, bridge_version. The rows are this process's one copy of each recipe's row, shared by every listing (as
    the catalog's entries are): read them, or copy.deepcopy them to change them."""
    from .verbs.recipes import list_recipes

    return list_recipes(**filters)


@checked(SCENARIO)
def trace(paths: str | os.PathLike | Sequence[str | os.PathLike], *, ranks: Sequence[int] | None = None,
          allow_partial: bool = False, jobs: int | None = None, config: str | os.PathLike | Mapping | None = None,
          overrides: Mapping[str, Any] | None = None, model: str | None = None, shape: Mapping[str, Any] | None = None,
          **inputs):
    """Hidden and exposed communication per rank, dimension and step from profiler traces (see trace.analyze). With
    the run's config (config, recipe, overrides and the other inputs of resolve; model, shape as for budget()), the
    result's `predicted` sets the communication budget's figures per dimension beside the measured ones."""
    from .trace import analyze

    if not (config is not None or inputs.get("recipe") is not None or overrides):
        return analyze(paths, ranks=ranks, allow_partial=allow_partial, jobs=jobs)
    from .trace import predicted

    report = None
    try:
        analysis = resolve(overrides, config=config, model=model, shape=shape, **inputs)
    except UsageError as exc:  # a config that records no GPU count: the traces' job size is the run's
        if inputs.get("gpus") is not None or "does not record the GPU count" not in str(exc):
            raise
        report = analyze(paths, ranks=ranks, allow_partial=allow_partial, jobs=jobs)
        if not report.world_size:
            raise
        analysis = resolve(overrides, config=config, model=model, shape=shape, **{**inputs, "gpus": report.world_size})
    layout = _layout_groups(analysis)
    if report is None or layout and layout[1] and _unattributed(report):  # again only where the layout may place a group
        report = analyze(paths, ranks=ranks, allow_partial=allow_partial, jobs=jobs, layout=layout)
    report.predicted = predicted.beside(report.to_dict(), analysis.budget, analysis.gpus)
    return report


def _unattributed(report) -> bool:
    return any(d.dimension == "unattributed" for r in report.ranks for d in r.dimensions)


def _layout_groups(analysis) -> tuple[int, dict] | None:
    """(world size, the run's groups by their ranks) of an analysed config, for trace's attribution."""
    from .upstream.groups import by_ranks

    m, dp = analysis.effective["model"], analysis.data_parallel_size
    if not dp:
        return None
    sizes = {k: m.get(f"{k}_model_parallel_size") or 1 for k in ("tensor", "pipeline")}
    groups = by_ranks(sizes["tensor"], sizes["pipeline"], m.get("context_parallel_size") or 1, dp,
                      m.get("expert_model_parallel_size") or 1, m.get("expert_tensor_parallel_size"),
                      tp_pp_dp=bool(analysis.effective.get("dist", {}).get("use_tp_pp_dp_mapping")))
    return analysis.gpus, groups


@checked(("trace.compare:compare",))
def compare_traces(before: str | os.PathLike | Sequence[str | os.PathLike],
                   after: str | os.PathLike | Sequence[str | os.PathLike], **options):
    from .trace.compare import compare  # (the submodule: the argument check imported it, binding trace.compare to it)

    return compare(before, after, **options)


@checked()
def trace_snippet(form: str, steps: str | None = None, ranks: str | None = None) -> dict:
    """The cfg.profiling snippet that makes Bridge write the traces `trace` reads (form: python, yaml or hydra;
    steps START-END, default 10-13; ranks "0,8" or "all", default 0)."""
    from .trace import snippet

    start, end = snippet.parse_steps(steps or snippet.DEFAULT_STEPS)
    chosen = snippet.parse_ranks(ranks, allow_all=True)
    return snippet.to_dict(form, start, end, (0,) if chosen is None else chosen)


@checked()
def anchors(mbridge_src: str | None = None) -> dict:
    """Where the Bridge code each rule mirrors is now, and whether it is still a verified release's code."""
    from .upstream import releases
    from .upstream.anchors import report

    return {"schema_version": SCHEMA_VERSION, **report(releases.given("--mbridge-src", mbridge_src))}


@checked()
def explain(finding_id: str) -> dict:
    """A finding's record: severity, title, the Bridge code that decides it (and where it is now), example, explanation."""
    from . import findings

    return {"schema_version": SCHEMA_VERSION, **findings.explain(finding_id)}


@checked()
def presets(bridge_version: str | None = None) -> dict:
    """The tuned TP userbuffers presets of a release, with what each name says it was tuned for and its fields: per
    GEMM (qkv_fprop, fc1_dgrad, ...) the method (ring_exchange, pipeline, bulk), num_sm, cga_size, fp8_buf, ..."""
    from .upstream import releases

    release = releases.get(bridge_version)
    content = releases.preset_content()
    return {"schema_version": SCHEMA_VERSION, "bridge_version": release.version,
            "presets": [{**p.to_dict(), "gemms": content.get(p.name, {})} for p in release.presets()]}


@checked()
def check_manifest(path: str | os.PathLike | None = None, check_directory: bool = False) -> dict:
    """SKILL.md against the Agent Skills rules: {"ok", "problems"}."""
    from .verbs.check_manifest import check_file

    problems = check_file(path, check_directory=check_directory)
    return {"schema_version": SCHEMA_VERSION, "ok": not problems, "problems": problems}


@checked()
def release_table() -> dict:
    """Per-release facts side by side."""
    from .upstream import releases

    listed = releases.versions() + sorted(releases.data()["newer_releases"], key=releases.version_key)
    return {"schema_version": SCHEMA_VERSION, "releases": {v: releases.get(v).facts() for v in listed}}


@checked()
def suites() -> dict:
    """The upstream overlap suites verify runs, with the pass count expected per test-file hash and release."""
    from .upstream.suites import expected_counts

    return {"schema_version": SCHEMA_VERSION, **expected_counts()}
