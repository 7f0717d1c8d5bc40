"""Wall time of the skill's answering verbs, each command in its own process as an agent runs it, beside a bare
interpreter start (issue 29: every command within 100 ms on an idle machine).

    python3 benchmarks/bench_cli.py [--runs 31] [--goal-ms 100] [--python PYTHON ...] [--wait-load L] [--only NAME ...]
                                    [--write-docs]

Each run is a fresh process of the launcher SKILL.md uses (scripts/mbridge-overlap, run from another folder), with
its bytecode cached as it is for a user (under the user's cache folder). The floor is the same interpreter's
`python -c pass`. The commands are timed round-robin (one run of each, then the next round), so that the load of a
shared machine falls on every command alike; "x floor" is the median of the rounds' own ratios (each run over the
floor's run of the same round). Exit status 1 when a command's median is over --goal-ms. --write-docs puts the table
into docs/benchmarks.md (its bench_cli section), with the machine and the date.

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

import bench_common  # beside this file

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


def timed(python: str, args: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([python, *args], cwd="/", check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # a user's Python caches bytecode


def bench(python: str, names: list[str], runs: int, wait_load: float | None) -> dict[str, list[float]]:
    cmds = {FLOOR: ["-c", "pass"], **{n: [LAUNCHER, *COMMANDS[n]] for n in names}}
    for cmd in cmds.values():  # warm the file and bytecode caches, not Python
        timed(python, cmd, ENV)
    times: dict[str, list[float]] = {n: [] for n in cmds}
    deadline = time.monotonic() + 600
    for _ in range(runs):
        if wait_load:
            bench_common.wait_for_load(wait_load, deadline)
        for name, cmd in cmds.items():
            times[name].append(timed(python, cmd, ENV))
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=31, help="cold runs of each command (default 31)")
    p.add_argument("--goal-ms", type=float, default=100.0, help="the most a command's median wall time may be (default 100 ms)")
    p.add_argument("--python", action="append", help="interpreter to measure with (repeatable; default this one)")
    p.add_argument("--wait-load", type=float, metavar="L", help="start each round once the 1-minute load average is below L")
    p.add_argument("--only", action="append", choices=sorted(COMMANDS), metavar="NAME", help="measure only this command (repeatable)")
    p.add_argument("--write-docs", action="store_true", help="write the table into docs/benchmarks.md")
    args = p.parse_args()
    names = args.only or list(COMMANDS)
    lines = [f"machine: {os.cpu_count()} cores, {bench_common.cpu_model()}; load average before: {bench_common.load()}"]
    over = []
    for python in args.python or [sys.executable]:
        version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True).stdout.strip()
        times = bench(python, names, args.runs, args.wait_load)
        lines += ["", f"Python {version}, {args.runs} runs of each command in its own process, round-robin", "",
                  "| command | median ms | min ms | max ms | x floor |", "| --- | ---: | ---: | ---: | ---: |"]
        for name, ts in times.items():
            median = statistics.median(ts)
            ratio = bench_common.paired_ratio(ts, times[FLOOR])
            lines.append(f"| `{name}` | {median * 1e3:.1f} | {min(ts) * 1e3:.1f} | {max(ts) * 1e3:.1f} | {ratio:.2f} |")
            if name != FLOOR and median * 1e3 > args.goal_ms:
                over.append(f"{name} ({median * 1e3:.0f} ms)")
    lines += ["", f"load average after: {bench_common.load()}",
              f"goal (every command's median within {args.goal_ms:g} ms): " + ("met" if not over else "NOT met: " + ", ".join(over))]
    print("\n".join(lines))
    if args.write_docs:
        bench_common.write_section("bench_cli", "\n".join(lines))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
