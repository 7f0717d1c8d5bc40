"""Run the upstream overlap suites from a Megatron-Bridge checkout against the installed package, with a
pass-count check. The outcome is read from pytest's JUnit XML, never from its console text.

A suite PASSES only with failed = 0, errors = 0, passed >= 1 and passed equal to the expected count (given,
measured for that exact file in mbridge_overlap/data/suites.yaml, or else the number collected)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..releases import DATA_DIR, load_yaml

SKILL_ROOT = Path(__file__).resolve().parents[2]
PASS, FAIL, NOT_RUN, SKIPPED = "PASS", "FAIL", "NOT RUN", "SKIPPED"


@dataclass
class SuiteResult:
    name: str
    status: str
    reason: str = ""
    counts: dict = field(default_factory=dict)  # collected, passed, failed, errors, skipped
    expected: int | None = None
    expected_from: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def table() -> dict:
    return load_yaml(DATA_DIR / "suites.yaml")


def expected_counts() -> dict:
    """The pass counts verify requires, by suite, test-file sha256 and installed release (data/suites.yaml)."""
    data = table()
    return {
        "suites": {name: {"path": s["path"], "needs_module": s.get("needs_module")} for name, s in data["suites"].items()},
        "expected": [dict(row) for row in data["measured"]],
        "otherwise": "a file and release not listed: verify requires passed == collected",
    }


def find_checkout(explicit: str | None = None) -> Path | None:
    """--mbridge-src, else $MBRIDGE_SRC, else the first folder above the skill that is a Bridge checkout."""
    for candidate in (explicit, os.environ.get("MBRIDGE_SRC")):
        if candidate:
            root = Path(candidate).expanduser().resolve()
            if not (root / "tests").is_dir():
                raise UsageError(f"--mbridge-src {root}: not a Megatron-Bridge checkout (no tests/ folder)")
            return root
    for parent in SKILL_ROOT.parents:
        if (parent / "src" / "megatron" / "bridge").is_dir() and (parent / "tests" / "unit_tests").is_dir():
            return parent
    return None


def expected_count(name: str, path: Path, bridge_version: str, given: dict) -> tuple[int | None, str]:
    if name in given:
        return given[name], "--expect-passed"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for row in table()["measured"]:
        if row["suite"] == name and row["sha256"] == digest and row["bridge"] == bridge_version:
            return row["passed"], f"measured for this file ({', '.join(row['upstream'])}) against {row['bridge']}"
    return None, "passed = collected (no measured figure for this file and release)"


def has_module(python: str, module: str) -> bool:
    """Installed in that Python (found, not imported: importing nemo_run takes seconds)."""
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], capture_output=True, text=True).returncode == 0


def parse_junit(path: Path, suite_paths: dict[str, str]) -> dict[str, dict]:
    """Per-suite counts from pytest's JUnit XML; a test belongs to the suite whose module its classname names."""
    counts = {name: dict(collected=0, passed=0, failed=0, errors=0, skipped=0) for name in suite_paths}
    modules = {name: p[:-3].replace("/", ".") for name, p in suite_paths.items()}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        # a collection error is reported with an empty classname and the module as its name
        qualified = f"{classname}.{case.get('name', '')}".strip(".")
        name = next((n for n, m in modules.items() if classname == m or classname.startswith(m + ".") or qualified == m), None)
        if name is None:
            continue
        c = counts[name]
        c["collected"] += 1
        tags = {child.tag for child in case}
        if "error" in tags:
            c["errors"] += 1
        elif "failure" in tags:
            c["failed"] += 1
        elif "skipped" in tags:
            c["skipped"] += 1
        else:
            c["passed"] += 1
    return counts


def judge(name: str, counts: dict, expected: int | None, expected_from: str, exit_code: int) -> SuiteResult:
    result = SuiteResult(name, FAIL, counts=counts, expected=expected, expected_from=expected_from)
    want = expected if expected is not None else counts["collected"]
    if counts["collected"] == 0:
        result.reason = f"pytest collected nothing (exit {exit_code})"
    elif counts["failed"] or counts["errors"]:
        result.reason = f"{counts['failed']} failed, {counts['errors']} errors"
    elif counts["passed"] == 0:
        result.reason = f"nothing passed ({counts['skipped']} skipped)"
    elif counts["passed"] != want:
        result.reason = f"{counts['passed']} passed, expected {want} ({expected_from})"
    else:
        result.status, result.reason = PASS, f"{counts['passed']} passed, as expected ({expected_from})"
    return result


def run(python: str, checkout: Path | None, bridge_version: str, given: dict | None = None, progress=None) -> list[SuiteResult]:
    """Run every suite in one pytest process (Bridge is imported once) and judge each."""
    given = given or {}
    suites = table()["suites"]
    if checkout is None:
        why = "no Megatron-Bridge checkout: pass --mbridge-src PATH or set MBRIDGE_SRC (a checkout at the tag of your release)"
        return [SuiteResult(name, NOT_RUN, why) for name in suites]
    results, to_run = {}, {}
    for name, spec in suites.items():
        path = checkout / spec["path"]
        if not path.is_file():
            results[name] = SuiteResult(name, NOT_RUN, f"{spec['path']} is not in {checkout}")
        elif spec.get("needs_module") and not has_module(python, spec["needs_module"]):
            results[name] = SuiteResult(name, SKIPPED, f"{spec['needs_module']} is not installed in {python}")
        else:
            to_run[name] = spec["path"]
    if to_run:
        results.update(_run_pytest(python, checkout, to_run, bridge_version, given, progress))
    return [results[name] for name in suites]


def _run_pytest(python, checkout, to_run, bridge_version, given, progress) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        junit, origin = Path(tmp) / "junit.xml", Path(tmp) / "origin.json"
        cmd = [python, "-m", "pytest", *to_run.values(), "-q", "--continue-on-collection-errors", "-p", "no:cacheprovider", "-p", "mbridge_overlap.bridge.pytest_origin", f"--junitxml={junit}"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SKILL_ROOT), os.environ.get("PYTHONPATH")])), "MBRIDGE_SKILL_ORIGIN": str(origin)}
        if progress:
            progress(f"suites: running {', '.join(to_run)} in {checkout}")
        proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=1800)
        if not junit.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            return {n: SuiteResult(n, FAIL, f"pytest wrote no report (exit {proc.returncode}): {' | '.join(tail)}") for n in to_run}
        counts = parse_junit(junit, to_run)
        ran_against = json.loads(origin.read_text()) if origin.exists() else {}
    out = {}
    for name, path in to_run.items():
        expected, source = expected_count(name, checkout / path, bridge_version, given)
        result = judge(name, counts[name], expected, source, proc.returncode)
        package = ran_against.get("file", "")
        if package and str(checkout) in package:
            result.status, result.reason = FAIL, f"ran against the checkout's source ({package}), not the installed package"
        result.counts["megatron_bridge"] = package
        out[name] = result
    return out

