"""Cold-start benchmark of the skill's main command (goal: 0.3 s on the project's 2-core machine).

    python scripts/bench_cli.py [--runs 15] [--goal 0.3] [--python PYTHON]

Each run is a fresh process of the launcher SKILL.md uses (scripts/mbridge-overlap, from another folder) or of
`python -m mbridge_overlap` from the skill folder; the median wall time is compared with the goal (exit 1 when over).
`resolve --recipe` loads the recipe catalog (about 3 MB of JSON): its cold start is the one to watch. Python's own
start-up is measured too, for scale. Bytecode is cached as it is for a user (under the user's cache folder).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = str(ROOT / "scripts" / "mbridge-overlap")
COMMANDS = {
    "resolve --recipe": [LAUNCHER, "resolve", "--recipe", "llama3_70b_pretrain_64gpu_gb200_nvfp4_config", "--format", "json"],
    "lint --recipe": [LAUNCHER, "lint", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "--format", "json"],
    "plan (launcher)": [LAUNCHER, "plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--gpu", "h100"],
    "plan (text)": ["-m", "mbridge_overlap", "plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--gpu", "h100"],
    "plan --format json": ["-m", "mbridge_overlap", "plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--format", "json"],
    "plan --format yaml": ["-m", "mbridge_overlap", "plan", "--tp", "4", "--gpus", "8", "--hidden-size", "12288", "--seq-length", "2048",
                           "--micro-batch-size", "1", "--format", "yaml"],
    "resolve --format json": ["-m", "mbridge_overlap", "resolve", "--gpus", "64", "model.tensor_model_parallel_size=4",
                              "comm_overlap.tp_comm_overlap=true", "--format", "json"],
    "python -c pass (floor)": ["-c", "pass"],
}


def timed(python: str, args: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # a user's Python caches bytecode
    cwd = "/" if args[0] == LAUNCHER else ROOT
    start = time.perf_counter()
    subprocess.run([python, *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--goal", type=float, default=0.3)
    p.add_argument("--python", default=sys.executable)
    args = p.parse_args()
    timed(args.python, COMMANDS["plan (text)"])  # warm the OS file cache, not Python: each run is a new process
    print(f"{'command':<24} {'median s':>9} {'min s':>7} {'max s':>7}   ({args.runs} cold runs each, {args.python})")
    over = []
    for name, cmd in COMMANDS.items():
        times = [timed(args.python, cmd) for _ in range(args.runs)]
        median = statistics.median(times)
        print(f"{name:<24} {median:9.3f} {min(times):7.3f} {max(times):7.3f}")
        if "floor" not in name and median > args.goal:
            over.append(name)
    print(f"goal: median under {args.goal} s: " + ("met" if not over else f"NOT met by {', '.join(over)}"))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
