"""Cold-start benchmark of the skill's answering verbs against a bare interpreter start (issue 19: within 1.3x).

    python3 scripts/bench_cli.py [--runs 31] [--goal 1.3] [--python PYTHON ...] [--wait-load L] [--only NAME ...]

Each run is a fresh process of the launcher SKILL.md uses (scripts/mbridge-overlap, run from another folder), with
its bytecode cached as it is for a user (under the user's cache folder). The floor is the same interpreter's
`python -c pass`. The commands are timed round-robin (one run of each, then the next round), so that the load of a
shared machine falls on every command alike; each command's median is divided by the floor's median. Exit status 1
when a verb's ratio is over --goal.

On a shared machine the wall time is the other sessions' too: the load average is printed, and --wait-load L
starts each round only once the 1-minute load average is below L (waiting up to 10 minutes in all).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bench_common  # scripts/, beside this file

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = str(ROOT / "scripts" / "mbridge-overlap")
RECIPE = "llama3_70b_pretrain_64gpu_h100_bf16_config"
FLOOR = "python -c pass (floor)"
COMMANDS = {
    "resolve": ["resolve", "--gpus", "64", "model.tensor_model_parallel_size=4", "comm_overlap.tp_comm_overlap=true"],
    "resolve --format json": ["resolve", "--gpus", "64", "model.tensor_model_parallel_size=4", "comm_overlap.tp_comm_overlap=true",
                              "--format", "json"],
    "resolve --recipe": ["resolve", "--recipe", "llama3_70b_pretrain_64gpu_gb200_nvfp4_config", "--format", "json"],
    "resolve --recipe (text)": ["resolve", "--recipe", RECIPE, "model.context_parallel_size=1"],
    "plan": ["plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--gpu", "h100"],
    "plan --format json": ["plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--format", "json"],
    "plan --format python": ["plan", "--tp", "4", "--gpus", "8", "--hidden-size", "12288", "--seq-length", "2048",
                             "--micro-batch-size", "1", "--format", "python"],
    "plan --recipe": ["plan", "--recipe", "llama3_70b", "--gpus", "64"],
    "lint --recipe": ["lint", "--recipe", RECIPE, "--format", "json"],
    "lint --recipe (text)": ["lint", "--recipe", RECIPE],
    "recipes": ["recipes", "--model", "llama3_70b", "--gpu", "h100"],
    "recipes --format json": ["recipes", "--format", "json"],
    "explain": ["explain", "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL"],
    "explain --format json": ["explain", "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL", "--format", "json"],
}


def timed(python: str, args: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # a user's Python caches bytecode
    start = time.perf_counter()
    subprocess.run([python, *args], cwd="/", check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def bench(python: str, names: list[str], runs: int, wait_load: float | None) -> dict[str, list[float]]:
    cmds = {FLOOR: ["-c", "pass"], **{n: [LAUNCHER, *COMMANDS[n]] for n in names}}
    for cmd in cmds.values():  # warm the OS file cache and the bytecode cache, not Python: each run is a new process
        timed(python, cmd)
    times: dict[str, list[float]] = {n: [] for n in cmds}
    deadline = time.monotonic() + 600
    for _ in range(runs):
        if wait_load:
            bench_common.wait_for_load(wait_load, deadline)
        for name, cmd in cmds.items():
            times[name].append(timed(python, cmd))
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=31, help="cold runs of each command (default 31)")
    p.add_argument("--goal", type=float, default=1.3, help="the most a verb's median may be, in floors (default 1.3)")
    p.add_argument("--python", action="append", help="interpreter to measure with (repeatable; default this one)")
    p.add_argument("--wait-load", type=float, metavar="L", help="start each round once the 1-minute load average is below L")
    p.add_argument("--only", action="append", choices=sorted(COMMANDS), metavar="NAME", help="measure only this command (repeatable)")
    args = p.parse_args()
    names = args.only or list(COMMANDS)
    print(f"machine: {os.cpu_count()} cores, {bench_common.cpu_model()}; load average before: {bench_common.load()}")
    over = []
    for python in args.python or [sys.executable]:
        version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True).stdout.strip()
        times = bench(python, names, args.runs, args.wait_load)
        floor = statistics.median(times[FLOOR])
        print(f"\n{python} (Python {version}), {args.runs} cold runs each, round-robin")
        print(f"{'command':<26} {'median ms':>9} {'min ms':>7} {'max ms':>7} {'x floor':>8}")
        missed = []
        for name, ts in times.items():
            median = statistics.median(ts)
            ratio = median / floor
            print(f"{name:<26} {median * 1e3:9.1f} {min(ts) * 1e3:7.1f} {max(ts) * 1e3:7.1f} {ratio:8.2f}")
            if name != FLOOR and ratio > args.goal:
                missed.append(name)
        print(f"within {args.goal}x the floor: {len(names) - len(missed)} of {len(names)}" + (f"; over: {', '.join(missed)}" if missed else ""))
        over += missed
    print(f"\nload average after: {bench_common.load()}")
    print(f"goal (every median within {args.goal}x the floor): " + ("met" if not over else "NOT met"))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
