"""Warm benchmark of scripts/verify.sh (goal: 15 s on the project's 2-core machine), with where the time goes.

    python3 benchmarks/bench_verify.py [--runs 3] [--goal 15] [--mode held|own|both] [--mbridge-src CHECKOUT] [--wait-load L]
                                    [-- VERIFY ARGS]

Warm: the Bridge venv is built (scripts/bridge_env.sh reuses it) and one verify run, not counted, has filled the OS
file cache. Each counted run is a new `scripts/verify.sh --mbridge-src CHECKOUT` as a user runs it, every run from
one folder of its own, in this environment as it is (PYTHONDONTWRITEBYTECODE included; --as-user drops it, as
bench_cli.py does). Two modes (both by default, own first): `own`, each run in its own process, importing Bridge
(MBRIDGE_OVERLAP_SERVER=0: the first verify of a session); `held`, each run served by verify's Bridge holder
(mbridge_overlap/bridge/holder.py), which the warm-up run starts (in a socket folder of the benchmark's own, stopped
at the end); a run that was not what its mode says fails the benchmark. The goal is the held median's where held runs.
The checkout: --mbridge-src, else $MBRIDGE_SRC, else the v0.6.0 tag of the Megatron-Bridge git mirror
($MBRIDGE_SKILL_MIRROR or ../.mirror/NVIDIA-NeMo+Megatron-Bridge/repo) extracted once into a temporary folder.

verify writes [wall, CPU] at the end of each phase to $MBRIDGE_VERIFY_PHASES (verify.py's `mark`), so each run is
split into: launch (verify.sh and its venv check, Python, the skill's imports), plan, the Bridge import, snippets
(every form applied), anchors, the wait for the suites, report + exit; and `suites (forked)`, the suites' pytest from
the fork (right after the import) to its end, which runs beside snippets and anchors. CPU: user + system of
verify.sh and every process under it (held: and of the held verify and its pytest, by their own clocks), split into
verify's own, the forked pytest's and the rest. Every run must end
with the same exit status and verdict; the median wall time is compared with the goal (exit 1 when over). On a
shared machine the wall time is the other sessions' too: the load average is printed with each run, and
--wait-load L starts each run only once the 1-minute load average is below L (waiting up to 10 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_common  # scripts/, beside this file

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
    held = "verify's Bridge holder" in proc.stderr
    if held:  # the held verify and its pytest are the holder's children, not this process's: their clocks say
        total_cpu += cpu.get("report", 0.0) + cpu.get("suites_pytest_done", 0.0)
    return {"wall": end - t0, "rc": proc.returncode, "verdict": verdict.split(" (")[0], "marks": marks, "cpu_marks": cpu,
            "cpu": total_cpu, "stderr": proc.stderr, "held": held}


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
    p.add_argument("--goal", type=float, default=15.0)
    p.add_argument("--mbridge-src", metavar="CHECKOUT")
    p.add_argument("--verify", metavar="VERIFY_SH", default=str(VERIFY), help="another copy's verify.sh, to compare (default: this one's)")
    p.add_argument("--no-warmup", action="store_true", help="count the first run too")
    p.add_argument("--wait-load", type=float, metavar="L", help="before each run, wait (up to 10 min) for the 1-minute load "
                   "average to fall below L: on a shared machine, runs in its quiet minutes")
    p.add_argument("--as-user", action="store_true", help="without PYTHONDONTWRITEBYTECODE, as bench_cli.py runs (a user's Python caches bytecode)")
    p.add_argument("--mode", choices=("held", "own", "both"), default="both",
                   help="held: each run served by verify's Bridge holder (the warm-up run starts it); own: each run in its "
                   "own process (MBRIDGE_OVERLAP_SERVER=0), as the first verify of a session; both (default): own, then held. "
                   "The goal is the held median's where held runs")
    p.add_argument("verify_args", nargs="*", help="more arguments for verify.sh (after --)")
    args = p.parse_args()
    keep: list = []
    cmd = [args.verify, "--mbridge-src", checkout(args.mbridge_src, keep), *args.verify_args]
    print(f"machine: {os.cpu_count()} cores, {bench_common.cpu_model()}; load average before: {bench_common.load()}")
    print(f"command: {' '.join(cmd)}")
    env = dict(os.environ)
    if args.as_user:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    print(f"PYTHONDONTWRITEBYTECODE: {env.get('PYTHONDONTWRITEBYTECODE', 'unset')}")
    # every run from one folder of its own, as a user's loop (from the skill's, `python -m` would import the package
    # there, not the one verify.sh names); the holder in a socket folder of its own, stopped at the end
    folder = tempfile.TemporaryDirectory(prefix="bench-verify-")
    runtime = tempfile.mkdtemp(prefix="bvh-", dir="/tmp")
    keep.append(folder)
    env["XDG_RUNTIME_DIR"] = runtime
    medians = {}
    try:
        for mode in (("own", "held") if args.mode == "both" else (args.mode,)):
            medians[mode] = bench_mode(mode, cmd, {**env, "MBRIDGE_OVERLAP_SERVER": "1" if mode == "held" else "0"}, folder.name, args)
    finally:
        subprocess.run([args.verify, "--holder", "stop"], env={**env, "MBRIDGE_OVERLAP_SERVER": "1"}, capture_output=True)
        shutil.rmtree(runtime, ignore_errors=True)
    if None in medians.values():
        return 1
    median = medians.get("held", medians.get("own"))
    met = median <= args.goal
    print(f"goal: median within {args.goal:g} s ({'held' if 'held' in medians else 'own process'}): " + ("met" if met else "NOT met"))
    return 0 if met else 1


def bench_mode(mode: str, cmd: list, env: dict, folder: str, args) -> float | None:
    print(f"--- {mode}: " + ("each run served by verify's Bridge holder" if mode == "held" else "each run in its own process"))
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
        print(f"run {i + 1} (load {load}): {r['wall']:.1f} s wall, exit {r['rc']}, {r['verdict']}"
              f"{'' if r['held'] == (mode == 'held') else ' (NOT ' + mode + ')'} | {split} | CPU {r['cpu']:.1f} s: {cpu}")
    rcs = {(r["rc"], r["verdict"]) for r in runs}
    if len(rcs) != 1:
        print(f"runs disagree: {sorted(rcs)}")
        return None
    if any(r["held"] != (mode == "held") for r in runs):
        print(f"not every run was {mode}")
        return None
    walls = [r["wall"] for r in runs]
    median = statistics.median(walls)
    per_phase = {name: statistics.median(t[name] for t in (phase_times(r["marks"]) for r in runs) if name in t)
                 for name, _, _ in PHASES if any(name in phase_times(r["marks"]) for r in runs)}
    print(f"median of {len(runs)}: {median:.1f} s wall (min {min(walls):.1f}, max {max(walls):.1f}), "
          f"{statistics.median(r['cpu'] for r in runs):.1f} s CPU; load average after: {bench_common.load()}")
    print("median per phase: " + "  ".join(f"{k} {v:.1f} s" for k, v in per_phase.items()))
    print("median CPU: " + "  ".join(f"{k} {statistics.median(cpu_split(r)[k] for r in runs):.1f} s" for k in cpu_split(runs[0])))
    return median


if __name__ == "__main__":
    sys.exit(main())
