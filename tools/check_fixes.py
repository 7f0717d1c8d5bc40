#!/usr/bin/env python3
"""The fix properties of issue 9, proven by re-resolution over generated configs and the recipe catalog.

For every finding with `fix_overrides`, the same request is resolved again with the fix applied: the finding (same id,
same knobs) must be gone and no warning or error (id and knobs) may appear that was not there before. Two findings on
one config must never set one key to different values, every finding's `asserts` must hold in `effective`, and a
fix's text must name every key its overrides set. Exit status 1 when any of that fails.

    python tools/check_fixes.py --count 20000            # generated configs (conformance's generator, seed 0)
    python tools/check_fixes.py --catalog                # every built recipe of the catalog, and lint of the perf ones
    python tools/check_fixes.py --count 2000 --by-id     # also the fixes proven and the findings without one, per id
    python tools/check_fixes.py --count 2000 --lint      # also lint of those configs (lint's own findings and fixes)

tests/test_fix_properties.py runs the same functions over 2,000 generated configs and the catalog.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mbridge_overlap import api
from mbridge_overlap.upstream import catalog  # noqa: E402
from mbridge_overlap.bridge import conformance  # noqa: E402  (generate() needs no Bridge)
from mbridge_overlap.errors import UsageError  # noqa: E402
from mbridge_overlap.findings.analysis import analyze  # noqa: E402
from tools.examples import nested  # noqa: E402

BLOCKING = ("warning", "error")


def signature(f) -> tuple:
    return f.id, tuple(sorted(f.knobs))


@dataclass
class Tally:
    """What the properties found: counts, and every failure of each kind."""

    configs: int = 0
    findings: int = 0
    tried: int = 0
    proven: int = 0
    failing: list = field(default_factory=list)  # (where, finding id, reason)
    conflicts: list = field(default_factory=list)  # (where, key, (id, value), (id, value))
    contradictions: list = field(default_factory=list)  # (where, finding id, key, asserted, effective)
    untold: list = field(default_factory=list)  # (where, finding id, key): a key of fix_overrides its fix text omits
    inexpressible: int = 0  # fixes an override file cannot carry (lint's re-runs), not tried
    asserts_checked: int = 0
    by_id: Counter = field(default_factory=Counter)  # finding id -> fixes proven
    text_only: Counter = field(default_factory=Counter)  # finding id -> findings without fix_overrides

    def bad(self) -> int:
        return len(self.failing) + len(self.conflicts) + len(self.contradictions) + len(self.untold)

    def counts(self) -> dict:
        return {"configs": self.configs, "findings": self.findings, "fixes_tried": self.tried, "fixes_proven": self.proven,
                "fixes_failing": len(self.failing), "conflicts": len(self.conflicts),
                "asserts_checked": self.asserts_checked, "contradictions": len(self.contradictions), "untold": len(self.untold),
                **({"not_expressible_in_a_file": self.inexpressible} if self.inexpressible else {})}


def effective_value(res, key: str):
    """An effective value by dotted key: `effective` where it reports the key, else the resolver's state (env.X:
    the process environment after cfg.env_vars)."""
    section, _, name = key.partition(".")
    values = res.effective.get(section, {})
    if name in values:
        return values[name]
    return res.state.value(key)


# A setting written in a fix's text (KEY=VALUE, a dotted config key): what the text tells the user to set.
_TEXT_SETTING = None


def names(fix: str, key: str) -> bool:
    """Whether a fix's text names the key: KEY=..., or a comm_overlap field inside the ++comm_overlap={...} word that
    creates the section where the config has none (recheck54 Y5)."""
    import re

    if key in fix:
        return True
    section, _, name = key.partition(".")
    return section == "comm_overlap" and re.search(r"\+\+comm_overlap=\{[^']*[{,]" + re.escape(name) + ":", fix) is not None


def text_settings(fix: str) -> dict:
    """The KEY=VALUE settings a fix's text recommends, beside its fix_overrides: none of those a "no single change"
    text lists as what each candidate brings."""
    global _TEXT_SETTING
    import re

    from mbridge_overlap.run.hydra import brace_fields, parse_override

    if _TEXT_SETTING is None:
        _TEXT_SETTING = re.compile(r"(?<![\w.])((?:model|ddp|optimizer|comm_overlap|mixed_precision|dist|train|env_vars|checkpoint|dataset)"
                                   r"\.[A-Za-z0-9_.]+=[^\s;,()]+)")
    if "no single change settles it" in fix:
        fix = fix.split("no single change settles it", 1)[0]
    out = {}
    for section in re.findall(r"'\+\+comm_overlap=(\{[^']*\})'", fix):  # the word that creates the section (Y5)
        fields = [(k, v) for k, v in brace_fields(section) if k != "_target_"]
        if all(isinstance(v, str) for _k, v in fields):
            out.update((f"comm_overlap.{k}", v) for k, v in fields)
        else:  # a preset spelled out: the section as the command line takes it
            out["comm_overlap"] = section
    for token in _TEXT_SETTING.findall(fix):
        try:
            key, value = parse_override(token)
        except UsageError:
            continue
        out[key] = value
    return out


def check_config(where: str, findings: list, res, rerun, tally: Tally, can_carry=None) -> None:
    """The properties on one resolved config. rerun(overrides, remove_keys) -> the findings after the fix, or raises
    UsageError when the fix is not a valid override; can_carry(overrides, remove_keys): whether rerun can express it."""
    tally.configs += 1
    tally.findings += len(findings)
    before = {signature(f) for f in findings if f.severity in BLOCKING}
    for f in findings:
        for key, value in f.asserts.items():
            tally.asserts_checked += 1
            have = effective_value(res, key)
            if have != value:
                tally.contradictions.append((where, f.id, key, value, have))
    _conflicts(where, findings, tally)
    for f in findings:
        if not f.fix_overrides:
            tally.text_only[f.id] += 1
            told = text_settings(f.fix)
            if told and (can_carry is None or can_carry(told, ())):
                tally.tried += 1
                reason = _text_fails(f, told, before, rerun)
                if reason is not None:
                    tally.failing.append((where, f.id, f"its text: {reason}"))
            continue
        tally.untold += [(where, f.id, key) for key in f.fix_overrides if not names(f.fix, key)]
        if can_carry is not None and not can_carry(f.fix_overrides, f.remove_keys):
            tally.inexpressible += 1
            continue
        tally.tried += 1
        reason = _fix_fails(f, before, rerun)
        if reason is None:
            tally.proven += 1
            tally.by_id[f.id] += 1
        else:
            tally.failing.append((where, f.id, reason))


def _fix_fails(f, before: set, rerun) -> str | None:
    try:
        after = rerun(f.fix_overrides, f.remove_keys)
    except UsageError as exc:
        return f"the fix is not a valid override: {exc}"
    if signature(f) in {signature(g) for g in after}:
        return f"still raised after {f.fix_overrides}"
    gained = sorted({signature(g) for g in after if g.severity in BLOCKING} - before)
    if gained:
        return f"{f.fix_overrides} adds {gained}"
    return None


def _text_fails(f, told: dict, before: set, rerun) -> str | None:
    """A setting a fix's text recommends must bring no error that was not there (it need not settle the finding
    alone: the text may say what more it needs)."""
    try:
        after = rerun(told, ())
    except UsageError as exc:
        return f"{told} is not a valid override: {exc}"
    gained = sorted({signature(g) for g in after if g.severity == "error"} - {s for s in before})
    return f"{told} adds {gained}" if gained else None


def _conflicts(where: str, findings: list, tally: Tally) -> None:
    seen: dict = {}
    for f in findings:
        for key, value in f.fix_overrides.items():
            other = seen.setdefault(key, (f.id, value))
            if other[1] != value or type(other[1]) is not type(value):
                tally.conflicts.append((where, key, other, (f.id, value)))


# --- the three sources ---------------------------------------------------------------------------------------------


def resolution_rerun(res):
    """The same scenario analysed again with a fix: the path every verb and the proofs take."""
    def rerun(overrides, remove=()):
        return analyze(res.scenario.derive(overrides, remove)).findings

    return rerun


def check_generated(count: int, seed: int = 0, tally: Tally | None = None, progress=None) -> Tally:
    tally = tally or Tally()
    for i, case in enumerate(conformance.generate(count, seed)):
        try:
            res = api.resolve(case.overrides, gpus=case.gpus, te=case.te)
        except UsageError:
            continue  # a case this release refuses as input (conformance checks Bridge refuses it too)
        check_config(f"generated #{i} {case.overrides} gpus={case.gpus} te={case.te}", res.findings, res, resolution_rerun(res), tally)
        if progress and (i + 1) % 2000 == 0:
            progress(f"{i + 1}/{count}: {tally.counts()}")
    return tally


def check_generated_lint(count: int, seed: int, tmp: Path, tally: Tally | None = None) -> Tally:
    """lint (--gpu h100) of the generated configs an override file can carry (not those with a field of the
    mixed-precision recipe or a null), and lint again with each fix on top."""
    tally = tally or Tally()
    for i, case in enumerate(conformance.generate(count, seed)):
        if any(k.startswith("mixed_precision.") or v is None for k, v in case.overrides.items()):
            continue

        def run(overrides, case=case):
            path = tmp / "config.yaml"
            path.write_text(json.dumps(nested(overrides)))
            return api.lint(str(path), gpus=case.gpus, gpu="h100", te=case.te)

        def rerun(fix, remove=(), case=case):
            # a fix's text (KEY=VALUE) written into the file as a user writes YAML: values unquoted, typed by YAML
            typed = {k: yaml.safe_load(v) if isinstance(v, str) else v for k, v in fix.items()}
            return run({**case.overrides, **typed}).findings

        try:
            result = run(case.overrides)
        except UsageError:
            continue
        check_config(f"lint of generated #{i} {case.overrides} gpus={case.gpus} te={case.te}", result.findings, result.analysis, rerun, tally,
                     _file_can_carry)
    return tally


# The grid of issue 30: layouts x GPU types x machines x launcher environments, each planned and its plan resolved.
GRID_LAYOUTS = [dict(tp=1), dict(tp=2), dict(tp=4, pp=2), dict(tp=4, pp=4, vpp=2), dict(tp=8, cp=2), dict(tp=16), dict(pp=4),
                dict(tp=2, pp=2, vpp=2, cp=2), dict(tp=8, pp=2, megatron_fsdp=True), dict(tp=2, precision="nvfp4")]
GRID_GPUS = [("h100", 64), ("h100", 128), ("gb200", 144), ("b200", 64)]
GRID_MACHINES = [{}, {"multicast": False}, {"nvlink_domain": 4}, {"torch_mpi": False}]
GRID_LAUNCHERS = [None, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, {"UB_SKIPMC": "1"}]


def grid(limit: int | None = None):
    """(layout, gpu, gpus, machine facts, launcher env), in a fixed order; every one of them when limit is None."""
    import itertools

    cases = list(itertools.product(GRID_LAYOUTS, GRID_GPUS, GRID_MACHINES, GRID_LAUNCHERS))
    return cases if limit is None else cases[::max(1, len(cases) // limit)]


def check_grid(tally: Tally | None = None, plans: Tally | None = None, limit: int | None = None) -> tuple[Tally, Tally]:
    """Every case of the grid: the plan's own findings and fixes, and resolve of the plan's overrides with the same
    machine facts and launcher environment (its findings, their fixes and fix texts). A plan's launch environment
    rows are checked as fixes too: set in env_vars, they bring no warning or error."""
    tally, plans = tally or Tally(), plans or Tally()
    for layout, (gpu, gpus), machine, launcher in grid(limit):
        where = f"plan {layout} on {gpus} {gpu}, machine {machine}, launcher {launcher}"
        inputs = dict(gpu=gpu, gpus=gpus, machine_facts=machine, launcher_env=launcher)
        try:
            plan = api.plan(**layout, **inputs)
        except UsageError:
            continue
        an = plan.analysis
        check_config(where, an.findings + plan.notes, an, resolution_rerun(an), plans)
        if an.scenario.release.env_vars and an.launch_env:
            exported = an.scenario.launcher_env  # where the launcher exports a row's variable, the row goes there
            rows = {(f"launcher:{k}" if k in exported else f"env_vars.{k}"): v["value"] for k, v in an.launch_env.items()}
            reason = _launch_rows_fail(an, rows)
            if reason:
                plans.failing.append((where, "launch_env", reason))
        res = api.resolve(plan.overrides, **{k: v for k, v in inputs.items() if k != "gpu"}, gpu=gpu)
        check_config(f"resolve of the {where}", res.findings, res, resolution_rerun(res), tally)
    return tally, plans


def _launch_rows_fail(an, rows: dict) -> str | None:
    """A plan's launch environment, set in env_vars: no warning or error that the plan did not have."""
    from mbridge_overlap.run.hydra import parse_override

    typed = {k: v for k, v in rows.items() if k.startswith("launcher:")}
    typed.update(parse_override(f"{k}={v}") for k, v in rows.items() if not k.startswith("launcher:"))
    before = {signature(f) for f in an.findings if f.severity in BLOCKING}
    after = analyze(an.scenario.derive(typed)).findings
    gained = sorted({signature(f) for f in after if f.severity in BLOCKING} - before)
    return f"its launch environment {rows} brings {gained}" if gained else None


def built_recipes(version: str = "0.6.2") -> list[dict]:
    return [e for e in catalog.entries(version) if e["builds"]]


def recipe_name(entry: dict) -> str:
    return f"{entry['package']}.{entry['name']}"


def check_recipe(entry: dict, tally: Tally) -> None:
    res = api.resolve(recipe=recipe_name(entry), gpus=entry["bridge"]["gpus"], gpu=entry["gpu"])
    check_config(f"recipe {recipe_name(entry)}", res.findings, res, resolution_rerun(res), tally)


def check_recipe_lint(entry: dict, tally: Tally, tmp: Path) -> None:
    """lint --recipe NAME, and lint again with each fix as overrides on top of the recipe."""
    name = recipe_name(entry)
    result = api.lint(recipe=name, gpu=entry["gpu"])
    res = result.analysis

    def rerun(overrides, remove=()):
        return api.lint(None, overrides, recipe=name, gpus=res.gpus, gpu=entry["gpu"]).findings

    check_config(f"lint {name}", result.findings, res, rerun, tally, lambda overrides, remove=(): not remove)


def _file_can_carry(overrides: dict, remove=()) -> bool:
    """Whether an override file on top of a config or recipe says the same: it cannot drop a key, nor set a field of
    a mixed-precision recipe it names (the file's mixed_precision section is a recipe by name or a whole config)."""
    return not remove and not any(k.startswith("mixed_precision.") for k in overrides)


def check_catalog(tally: Tally | None = None, lint_tally: Tally | None = None, tmp: Path | None = None) -> tuple[Tally, Tally | None]:
    tally = tally or Tally()
    for entry in built_recipes():
        check_recipe(entry, tally)
        if lint_tally is not None and entry["package"] == "perf_recipes":
            check_recipe_lint(entry, lint_tally, tmp)
    return tally, lint_tally


def report(label: str, tally: Tally, show: int, by_id: bool = False) -> None:
    print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in tally.counts().items()))
    if by_id:
        print(f"  proven by id: {dict(sorted(tally.by_id.items()))}")
        print(f"  without fix_overrides by id: {dict(sorted(tally.text_only.items()))}")
    for kind in ("failing", "conflicts", "contradictions", "untold"):
        items = getattr(tally, kind)
        if items:
            print(f"  {kind} by id: {dict(Counter(x[1] if kind != 'conflicts' else x[2][0] + '/' + x[3][0] for x in items))}")
            for item in items[:show]:
                print(f"    {item}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=0, help="generated configs to check (conformance's generator)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--catalog", action="store_true", help="every built recipe of the catalog, and lint of the perf recipes")
    ap.add_argument("--lint", action="store_true", help="also lint (--gpu h100) of the --count generated configs")
    ap.add_argument("--show", type=int, default=5, help="examples to print per kind of failure")
    ap.add_argument("--by-id", action="store_true", help="also the fixes proven, and the findings without one, per id")
    ap.add_argument("--grid", action="store_true", help="the grid of layouts x GPU types x machines x launcher environments")
    args = ap.parse_args(argv)
    bad = 0
    if args.count:
        start = time.time()
        tally = check_generated(args.count, args.seed, progress=lambda m: print(m, file=sys.stderr))
        report(f"generated ({args.count}, seed {args.seed}, {time.time() - start:.0f} s)", tally, args.show, args.by_id)
        bad += tally.bad()
    if args.lint and args.count:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            tally = check_generated_lint(args.count, args.seed, Path(tmp))
        report("lint of the generated configs", tally, args.show, args.by_id)
        bad += tally.bad()
    if args.grid:
        start = time.time()
        tally, plans = check_grid()
        report(f"grid: plans ({time.time() - start:.0f} s)", plans, args.show, args.by_id)
        report("grid: resolve of each plan", tally, args.show, args.by_id)
        bad += tally.bad() + plans.bad()
    if args.catalog:
        import tempfile

        start = time.time()
        with tempfile.TemporaryDirectory() as tmp:
            tally, lint_tally = check_catalog(Tally(), Tally(), Path(tmp))
        report(f"catalog resolve ({time.time() - start:.0f} s with lint)", tally, args.show, args.by_id)
        report("catalog lint (perf recipes)", lint_tally, args.show, args.by_id)
        bad += tally.bad() + lint_tally.bad()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
