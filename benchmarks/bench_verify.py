"""Warm benchmark of scripts/verify.sh, with where the time goes.

    python3 benchmarks/bench_verify.py [--runs 3] [--goal 30] [--mbridge-src CHECKOUT] [--wait-load L] [--write-docs]
                                       [-- VERIFY ARGS]

Warm: the Bridge venv is built (scripts/bridge_env.sh reuses it) and one verify run, not counted, has filled the OS
file cache. Each counted run is a new `scripts/verify.sh --mbridge-src CHECKOUT` as a user runs it, every run from
one folder of its own, in this environment as it is (PYTHONDONTWRITEBYTECODE included; --as-user drops it, as
bench_cli.py does). Each run is its own process, importing Bridge. --write-docs puts the summary into
docs/benchmarks.md (its bench_verify section).
The checkout: --mbridge-src, else $MBRIDGE_SRC, else the v0.6.0 tag of the Megatron-Bridge git mirror
($MBRIDGE_SKILL_MIRROR or ../.mirror/NVIDIA-NeMo+Megatron-Bridge/repo) extracted once into a temporary folder.

verify writes [wall, CPU] at the end of each phase to $MBRIDGE_VERIFY_PHASES (verify.py's `mark`), so each run is
split into: launch (verify.sh and its venv check, Python, the skill's imports), plan, the Bridge import, snippets
(every form applied), anchors, the wait for the suites, report + exit; and `suites (forked)`, the suites' pytest from
the fork (right after the import) to its end, which runs beside snippets and anchors. CPU: user + system of
verify.sh and every process under it, split into verify's own, the forked pytest's and the rest. Every run must end
with the same exit status and verdict; the median wall time is compared with the goal (exit 1 when over). On a
shared machine the wall time is the other sessions' too: the load average is printed with each run, and
--wait-load L starts each run only once the 1-minute load average is below L (waiting up to 10 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_common  # beside this file

ROOT = Path(__file__).resolve().parent.parent
VERIFY = ROOT / "scripts" / "verify.sh"
TAG = "v0.6.0"
# (column, phase that starts it, phase that ends it); "t0" is the moment the run was started here
PHASES = [
    ("launch", "t0", "main"),
    ("plan", "main", "plan"),
    ("import", "plan", "import"),
    ("snippets", "import", "apply"),
    ("anchors", "apply", "anchors"),
    ("suites wait", "anchors", "suites"),
    ("report+exit", "suites", "end"),
    ("suites (forked)", "suites_launched", "suites_pytest_done"),
]


def checkout(explicit: str | None, keep: list) -> str:
    if explicit or os.environ.get("MBRIDGE_SRC"):
        return explicit or os.environ["MBRIDGE_SRC"]
    mirror = os.environ.get("MBRIDGE_SKILL_MIRROR") or str(ROOT.parent / ".mirror" / "NVIDIA-NeMo+Megatron-Bridge" / "repo")
    if not Path(mirror).is_dir():
        sys.exit(f"bench_verify: no checkout: pass --mbridge-src CHECKOUT, set MBRIDGE_SRC, or MBRIDGE_SKILL_MIRROR (no {mirror})")
    folder = tempfile.TemporaryDirectory(prefix="bench-verify-")
    keep.append(folder)
    archive = subprocess.run(["git", "--git-dir", mirror, "archive", TAG, "src", "tests", "pyproject.toml"], capture_output=True, check=True)
    subprocess.run(["tar", "x", "-C", folder.name], input=archive.stdout, check=True)
    return folder.name


def one_run(cmd: list[str], env: dict, folder: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-verify-phases-") as tmp:
        phases_file = Path(tmp) / "phases.json"
        before = os.times()
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=folder, env={**env, "MBRIDGE_VERIFY_PHASES": str(phases_file)})
        end = time.time()
        after = os.times()
        marks = {k: v[0] for k, v in json.loads(phases_file.read_text()).items()} if phases_file.exists() else {}
        cpu = {k: v[1] for k, v in json.loads(phases_file.read_text()).items()} if phases_file.exists() else {}
    marks.update(t0=t0, end=end)
    total_cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    verdict = next((line for line in proc.stdout.splitlines() if line.startswith("verdict:")), "no verdict line")
    return {"wall": end - t0, "rc": proc.returncode, "verdict": verdict.split(" (")[0], "marks": marks, "cpu_marks": cpu,
            "cpu": total_cpu, "stderr": proc.stderr}


def phase_times(marks: dict) -> dict:
    return {name: marks[b] - marks[a] for name, a, b in PHASES if a in marks and b in marks}


def cpu_split(run: dict) -> dict:
    """CPU seconds: verify's own process, the forked pytest, and the rest (bash, bridge_env.sh, the env snippet's
    shells, Python start-up and exit)."""
    c = run["cpu_marks"]
    own = c.get("report", 0.0)
    forked = c.get("suites_pytest_done", 0.0)  # the child's CPU clock starts at 0 when it is forked
    return {"verify": own, "pytest (forked)": forked, "rest": run["cpu"] - own - forked}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--goal", type=float, default=30.0, help="the most the median wall time may be, in seconds (default 30)")
    p.add_argument("--mbridge-src", metavar="CHECKOUT")
    p.add_argument("--verify", metavar="VERIFY_SH", default=str(VERIFY), help="another copy's verify.sh, to compare (default: this one's)")
    p.add_argument("--no-warmup", action="store_true", help="count the first run too")
    p.add_argument("--wait-load", type=float, metavar="L", help="before each run, wait (up to 10 min) for the 1-minute load "
                   "average to fall below L: on a shared machine, runs in its quiet minutes")
    p.add_argument("--as-user", action="store_true", help="without PYTHONDONTWRITEBYTECODE, as bench_cli.py runs (a user's Python caches bytecode)")
    p.add_argument("--write-docs", action="store_true", help="write the summary into docs/benchmarks.md")
    p.add_argument("verify_args", nargs="*", help="more arguments for verify.sh (after --)")
    args = p.parse_args()
    keep: list = []
    cmd = [args.verify, "--mbridge-src", checkout(args.mbridge_src, keep), *args.verify_args]
    lines = [f"machine: {os.cpu_count()} cores, {bench_common.cpu_model()}; load average before: {bench_common.load()}",
             f"command: {' '.join(cmd)}"]
    env = dict(os.environ)
    if args.as_user:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    lines.append(f"PYTHONDONTWRITEBYTECODE: {env.get('PYTHONDONTWRITEBYTECODE', 'unset')}")
    print("\n".join(lines))
    folder = tempfile.TemporaryDirectory(prefix="bench-verify-")  # every run from one folder of its own, as a user's loop
    keep.append(folder)
    median, summary = bench_runs(cmd, env, folder.name, args)
    if median is None:
        return 1
    met = median <= args.goal
    summary.append(f"goal: median within {args.goal:g} s: " + ("met" if met else "NOT met"))
    print(summary[-1])
    if args.write_docs:
        bench_common.write_section("bench_verify", "\n".join(lines + summary))
    return 0 if met else 1


def bench_runs(cmd: list, env: dict, folder: str, args) -> tuple:
    if not args.no_warmup:
        warm = one_run(cmd, env, folder)
        print(f"warm-up run (not counted): {warm['wall']:.1f} s, exit {warm['rc']}, {warm['verdict']}")
    runs = []
    for i in range(args.runs):
        if args.wait_load:
            bench_common.wait_for_load(args.wait_load, time.monotonic() + 600)
        load = bench_common.load()
        r = one_run(cmd, env, folder)
        runs.append(r)
        split = "  ".join(f"{k} {v:.1f}" for k, v in phase_times(r["marks"]).items())
        cpu = "  ".join(f"{k} {v:.1f}" for k, v in cpu_split(r).items())
        print(f"run {i + 1} (load {load}): {r['wall']:.1f} s wall, exit {r['rc']}, {r['verdict']} | {split} | CPU {r['cpu']:.1f} s: {cpu}")
    rcs = {(r["rc"], r["verdict"]) for r in runs}
    if len(rcs) != 1:
        print(f"runs disagree: {sorted(rcs)}")
        return None, []
    walls = [r["wall"] for r in runs]
    median = statistics.median(walls)
    per_phase = {name: statistics.median(t[name] for t in (phase_times(r["marks"]) for r in runs) if name in t)
                 for name, _, _ in PHASES if any(name in phase_times(r["marks"]) for r in runs)}
    summary = [f"median of {len(runs)}: {median:.1f} s wall (min {min(walls):.1f}, max {max(walls):.1f}), "
               f"{statistics.median(r['cpu'] for r in runs):.1f} s CPU; load average after: {bench_common.load()}",
               "median per phase: " + "  ".join(f"{k} {v:.1f} s" for k, v in per_phase.items()),
               "median CPU: " + "  ".join(f"{k} {statistics.median(cpu_split(r)[k] for r in runs):.1f} s" for k in cpu_split(runs[0]))]
    print("\n".join(summary))
    return median, summary


if __name__ == "__main__":
    sys.exit(main())
