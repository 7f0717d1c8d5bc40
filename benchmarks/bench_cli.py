"""Cold-start benchmark of the skill's answering verbs against a bare interpreter start (issue 19: within 1.3x).

    python3 benchmarks/bench_cli.py [--runs 31] [--goal 1.3] [--python PYTHON ...] [--wait-load L] [--only NAME ...]
                                 [--mode served|own|both]

Each run is a fresh process of the launcher SKILL.md uses (scripts/mbridge-overlap, run from another folder), with
its bytecode cached as it is for a user (under the user's cache folder). Each command is measured two ways: `served`,
as a user's second and later commands are (the answer server that the first one started answers: the launcher's
own start-up plus the server's work), and `own` (MBRIDGE_OVERLAP_SERVER=0: the whole command in its own process, as
the first command after the server's idle time is). The floor is the same interpreter's `python -c pass`. The
commands are timed round-robin (one run of each, then the next round), so that the load of a shared machine falls on
every command alike. "x floor" is the median of the rounds' own ratios (each run over the floor's run of the same
round, which met the same machine: this host's speed drifts by tens of per cent from one second to the next, as
bench_trace.py measures its pool); "medians" is the command's median over the floor's median, printed beside it.
Exit status 1 when a served verb's "x floor" is over --goal (own-process ratios are reported, not held to it).

On a shared machine the wall time is the other sessions' too: the load average is printed, and --wait-load L
starts each round only once the 1-minute load average is below L (waiting up to 10 minutes in all).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
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


def timed(python: str, args: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([python, *args], cwd="/", check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # a user's Python caches bytecode
OWN = " (own process)"


def bench(python: str, names: list[str], runs: int, wait_load: float | None, modes: tuple) -> dict[str, list[float]]:
    runtime = tempfile.mkdtemp(prefix="mbo-bench-", dir="/tmp")  # this benchmark's own server, stopped at the end
    served = {**ENV, "XDG_RUNTIME_DIR": runtime, "MBRIDGE_OVERLAP_SERVER": "1"}
    own = {**ENV, "MBRIDGE_OVERLAP_SERVER": "0"}
    cmds = {FLOOR: (["-c", "pass"], ENV)}
    for n in names:
        if "served" in modes:
            cmds[n] = ([LAUNCHER, *COMMANDS[n]], served)
        if "own" in modes:
            cmds[n + OWN] = ([LAUNCHER, *COMMANDS[n]], own)
    try:
        for cmd, env in cmds.values():  # warm the file and bytecode caches (and start the server), not Python
            timed(python, cmd, env)
        time.sleep(2)  # the server's own warm-up
        times: dict[str, list[float]] = {n: [] for n in cmds}
        deadline = time.monotonic() + 600
        for _ in range(runs):
            if wait_load:
                bench_common.wait_for_load(wait_load, deadline)
            for name, (cmd, env) in cmds.items():
                times[name].append(timed(python, cmd, env))
    finally:
        subprocess.run([python, LAUNCHER, "server", "stop"], env=served, stdout=subprocess.DEVNULL)
        shutil.rmtree(runtime, ignore_errors=True)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=31, help="cold runs of each command (default 31)")
    p.add_argument("--goal", type=float, default=1.3, help="the most a served verb's x floor may be (default 1.3)")
    p.add_argument("--python", action="append", help="interpreter to measure with (repeatable; default this one)")
    p.add_argument("--wait-load", type=float, metavar="L", help="start each round once the 1-minute load average is below L")
    p.add_argument("--only", action="append", choices=sorted(COMMANDS), metavar="NAME", help="measure only this command (repeatable)")
    p.add_argument("--mode", choices=("served", "own", "both"), default="both",
                   help="served by the answer server, in the command's own process, or both (default)")
    args = p.parse_args()
    names = args.only or list(COMMANDS)
    print(f"machine: {os.cpu_count()} cores, {bench_common.cpu_model()}; load average before: {bench_common.load()}")
    over = []
    for python in args.python or [sys.executable]:
        version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True).stdout.strip()
        modes = ("served", "own") if args.mode == "both" else (args.mode,)
        times = bench(python, names, args.runs, args.wait_load, modes)
        floor = statistics.median(times[FLOOR])
        print(f"\n{python} (Python {version}), {args.runs} cold runs each, round-robin")
        print(f"{'command':<40} {'median ms':>9} {'min ms':>7} {'max ms':>7} {'x floor':>8} {'medians':>8}")
        missed = []
        for name, ts in times.items():
            median = statistics.median(ts)
            ratio = bench_common.paired_ratio(ts, times[FLOOR])
            print(f"{name:<40} {median * 1e3:9.1f} {min(ts) * 1e3:7.1f} {max(ts) * 1e3:7.1f} {ratio:8.2f} {median / floor:8.2f}")
            if name != FLOOR and not name.endswith(OWN) and ratio > args.goal:
                missed.append(name)
        if "served" in modes:
            print(f"served within {args.goal}x the floor: {len(names) - len(missed)} of {len(names)}"
                  + (f"; over: {', '.join(missed)}" if missed else ""))
        over += missed
    print(f"\nload average after: {bench_common.load()}")
    print(f"goal (every served verb within {args.goal}x the floor, paired by round): " + ("met" if not over else "NOT met"))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
