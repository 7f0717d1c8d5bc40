"""Each finding's example and counter-example, from its registry record, run through the API (example_command.command
is the command line that runs one, as explain and references/findings.md show it).

An example is a mapping with `verb` and that verb's inputs:
    resolve     overrides, gpus, gpu, recipe, te, bridge_version, launcher_env
    plan        plan's keywords
    lint        overrides, gpus, gpu; with_launch_env: every launch variable of Bridge's rules set on top
    lint_saved  edits: {section: {field: value}} on the saved run config tests/data/run_configs/baseline.yaml
    diff        before, after (overrides of two override files), gpus: [before, after]
    diagnose    log: the lines of a log (written to a file and diagnosed)
    diagnose_compare  before, after: two logs' times per iteration in ms (Bridge's iteration lines)
    budget      overrides, recipe, gpus, model, machine_facts: the budget's own findings (about worth)
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from mbridge_overlap import findings
from mbridge_overlap.findings.example_command import command  # noqa: F401 (the command line that runs an example, as explain shows it)
from dataclasses import dataclass

SAVED = Path(__file__).resolve().parent.parent / "tests" / "data" / "run_configs" / "baseline.yaml"


@dataclass
class Shown:
    """A finding as a verb shows it (for diff: a change, by the rule that explains it)."""

    id: str
    message: str
    fix: str


def run(example: dict) -> list[Shown]:
    """The findings (plan: and its notes; diff: its changes) the example earns."""
    from mbridge_overlap import api

    kw = {k: v for k, v in example.items() if k != "verb"}
    verb = example["verb"]
    if verb == "resolve":
        return _shown(api.resolve(**kw).findings)
    if verb == "plan":
        d = api.plan(**kw).to_dict()
        return [Shown(f["id"], f["message"], f["fix"]) for f in d["findings"] + d["plan_notes"]]
    if verb == "budget":
        return _shown(api.budget(**kw).budget.findings)
    with tempfile.TemporaryDirectory(prefix="mbridge-overlap-example-") as tmp:
        if verb == "lint":
            overrides = dict(kw["overrides"])
            if kw.get("with_launch_env"):
                an = api.lint(None, overrides, gpus=kw["gpus"], gpu=kw["gpu"]).analysis
                overrides.update({f"env_vars.{name}": rule["value"] for name, rule in an.launch_env.items()})
            return _shown(api.lint(None, overrides, gpus=kw["gpus"], gpu=kw["gpu"]).findings)
        if verb == "lint_saved":
            return _shown(api.lint(_saved(tmp, kw["edits"]), gpu="h100").findings)
        if verb in ("diagnose", "diagnose_compare"):
            return [Shown(c.finding.id, c.finding.message, c.finding.fix) for c in diagnosed(example, tmp).causes]
        if verb == "diff":
            result = api.diff(_file(tmp, "before", kw["before"]), _file(tmp, "after", kw["after"]),
                              gpus_before=kw["gpus"][0], gpus_after=kw["gpus"][1])
            return [Shown(c.rule, c.message, c.fix or "") for c in result.changes]
    raise ValueError(f"unknown example verb {verb!r}")


def diagnosed(example: dict, tmp: str):
    """The Diagnosis of a diagnose or diagnose_compare example (its logs written under tmp)."""
    from mbridge_overlap import api

    if example["verb"] == "diagnose":
        return api.diagnose([_log(tmp, "run", example["log"])])
    logs = [_log(tmp, side, [iteration_line(i, len(example[side]), ms) for i, ms in enumerate(example[side], 1)])
            for side in ("before", "after")]
    return api.diagnose(logs, compare=True)


def iteration_line(iteration: int, total: int, ms: float) -> str:
    """A training log line as Bridge's training_log prints it (train_utils.py)."""
    return (f" [2026-12-01 12:00:00] iteration {iteration:8d}/{total:8d} | consumed samples: {iteration * 8:12d} |"
            f" elapsed time per iteration (ms): {ms:.1f} | learning rate: 3.000000E-04 | global batch size:     8 |")


def _log(tmp: str, name: str, lines: list) -> str:
    path = Path(tmp) / f"{name}.log"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def of(finding_id: str) -> tuple[dict, dict]:
    rec = findings.record(finding_id)
    return rec["example"], rec["counter_example"]


def _shown(items) -> list[Shown]:
    return [Shown(f.id, f.message, f.fix) for f in items]


def _file(tmp: str, name: str, overrides: dict) -> str:
    path = Path(tmp) / f"{name}.yaml"
    path.write_text(json.dumps(nested(overrides)))  # JSON is YAML
    return str(path)


def nested(overrides: dict) -> dict:
    """Dotted overrides as a config file: sections of fields; a whole section (mixed_precision=RECIPE) as a value."""
    out: dict = {}
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if name:
            out.setdefault(section, {})[name] = value
        else:
            out[section] = value
    return out


def _saved(tmp: str, edits: dict) -> str:
    import yaml

    raw = yaml.safe_load(SAVED.read_text())
    for section, values in edits.items():
        raw[section].update(values)
    path = Path(tmp) / "run_config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)
