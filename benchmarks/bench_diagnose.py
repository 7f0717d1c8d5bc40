#!/usr/bin/env python3
"""Benchmark `python -m mbridge_overlap diagnose` on a synthetic multi-rank log set: streaming in linear time and
bounded memory (issue 18), and the planted causes found with the right rank counts.

    python benchmarks/bench_diagnose.py [--size 2G] [--layout ranks|interleaved] [--ranks 64] [--fractions 0.25,0.5,1]
                                     [--keep DIR] [--band 0.75] [--rss-slack 32] [--max-rss 0] [--min-mbps 0]
                                     [--jobs N] [--grep-ratio 3] [--speedup 1.8] [--write-docs] [--profile MB]

For each fraction of --size (default 1/4, 1/2 and all of 2 GB) it writes a log set into a temporary folder (or
--keep DIR, left there) and runs `diagnose DIR --format json` on it in a fresh process: wall time, throughput (MB of
log a CPU second of that process: the machine may be shared, and diagnose is CPU-bound; wall MB/s is printed too)
and the process's peak resident set (os.wait4's ru_maxrss and CPU times of that child alone). Layouts: `ranks`
(default: one file per rank, rank<R>.log, torch's `[rankR]:` prefix on the lines of a traceback, as a SLURM
`--output=rank%t.log` job writes them) and `interleaved` (one file, all ranks' lines interleaved behind srun -l's
`R: ` prefix, the torchrun `[defaultL]:` prefix after it).

The lines: Bridge's training_log iteration lines, its timers, NeMo-style logging with ANSI colours, NCCL INFO lines,
torch and Python warnings, a line of binary junk (NULs, invalid UTF-8) in every block, and per file a few very long
lines (300 KiB, cut by the reader, and 60 KiB). Into them, at known positions, the error lines of real reports from
tests/data/logs/upstream/ (each read from its log by a first `diagnose` run on it), each on a known set of ranks.

Generation is fast: each file is one block of about 1 MiB (its lines built once per rank) written again and again,
with the planted lines and long lines written between blocks at their positions.

Each size runs diagnose twice, on one core (--jobs 1) and with --jobs N (default every core; the two answers must be
equal), and GNU grep -a -c -F with the catalog's literal prefixes (each message's text up to its first field, and the
words native messages are found by) over the same files: grep reads every byte and decides nothing, the floor a
reader of these logs can reach. --write-docs puts the table into docs/benchmarks.md.

Goals (exit 1 when one fails; flags change them):
  --band B        the full size's MB/s (per CPU second) is at least B times the fastest size's (linear time)
  --rss-slack MB  the peak RSS at the full size is at most MB above the smallest size's (bounded memory)
  --max-rss MB    and at most MB in all (0: no goal)
  --min-mbps X    every size at least X MB/s (0: no goal)
  --grep-ratio R  diagnose on one core within R x grep's wall time (3; 0: no goal)
  --speedup S     --jobs N at least S x one core's wall time, where N > 1 (1.8; 0: no goal)
  every planted cause found, its message on exactly the planted ranks, as many times as planted; no other cause.

--profile MB: instead, profile `diagnose` in this process (cProfile) on an MB-sized log set and print the top functions.
Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = REPO / "tests" / "data" / "logs" / "upstream"
BLOCK = 1 << 20

# (log of a real report, which ranks show it (of R ranks), where in each file (a fraction of its size))
PLANTS = (
    ("bridge650_multicast_not_supported_ub_skipmc", lambda r: list(range(0, r, 8)), 0.30),  # one a node
    ("mlm1129_param_grad_none_overlap_grad_reduce", lambda r: [r - 1], 0.55),
    ("megatron_llama26_sequence_parallel_needs_one_connection", lambda r: list(range(r)), 0.05),
    ("mlm935_reduce_scatter_timeout_distributed_optimizer", lambda r: list(range(1, r, 2)), 0.97),
    ("mlm1150_bucket_communication_not_issued", lambda r: list(range(r // 2)), 0.75),
    ("nccl1788_nvls_multicast_add_device_401", lambda r: [3, 5] if r > 5 else [0], 0.15),
)

JUNK = bytes(range(256))[::7] + b"\x00\x00\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x90\x28\xbc\x1b[999"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2G, 500M)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))


# -- the lines -------------------------------------------------------------------------------------------------------

def _noise(rank: int, ranks: int, n: int) -> list[str]:
    """About n lines of what a healthy rank writes (iteration numbers from n on; the block repeats)."""
    node, local = divmod(rank, 8)
    host, pid = f"node-{node:03d}", 41000 + rank
    peer = (rank + 1) % ranks
    out = []
    it = 0
    while len(out) < n:
        it += 1
        ms = 1500.0 + (it * 37 % 100) / 10
        out.append(f" [2026-12-01 12:{it // 60 % 60:02d}:{it % 60:02d}] iteration {it:8d}/  500000 | consumed samples: "
                   f"{it * 512:12d} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 412.3 | "
                   f"learning rate: 2.999998E-04 | global batch size:   512 | lm loss: {2.5 + (it % 13) / 100:.6E} | "
                   f"loss scale: 1.0 | grad norm: 0.{it % 1000:03d} | number of skipped iterations:   0 | "
                   "number of nan iterations:   0 |")
        out.append(f"{host}:{pid}:{pid + 7} [{local}] NCCL INFO Channel {it % 32:02d}/0 : {rank}[{local}] -> "
                   f"{peer}[{peer % 8}] via P2P/CUMEM/read")
        out.append(f"{host}:{pid}:{pid + 7} [{local}] NCCL INFO comm 0x5581a2c3f0 rank {rank} nRanks {ranks} "
                   f"nNodes {max(1, ranks // 8)} localRanks 8 localRank {local} MNNVL 0")
        if it % 4 == 0:
            out.append("(min, max) time across ranks (ms):")
            out.append(f"    forward-backward ...............................: ({ms - 20:.2f}, {ms:.2f})")
            out.append(f"    optimizer ......................................: ({ms / 50:.2f}, {ms / 40:.2f})")
        if it % 8 == 0:
            out.append(f"\x1b[32m[NeMo I 2026-12-01 12:00:00 nemo_logging:393]\x1b[0m Saved checkpoint shard {it} in "
                       f"\x1b[1m{ms / 1000:.2f}\x1b[0m s")
            out.append("/usr/local/lib/python3.12/dist-packages/torch/utils/checkpoint.py:87: UserWarning: None of "
                       "the inputs have requires_grad=True. Gradients will be None")
            out.append("  warnings.warn(")
        if it % 16 == 0:
            out.append(f"INFO:megatron.core.timers:[Rank {rank}] data loader wait {it % 7}.{it % 10} ms")
            out.append("W1201 12:00:00.123456 140231 torch/distributed/elastic/multiprocessing/api.py:897] "
                       "Sending process 41234 closing signal SIGTERM")
    return out


def _prefix(layout: str, rank: int, inner: bool) -> str:
    """The launcher's prefix of a line; `inner`: a traceback line, which torch prefixes with [rankR]:."""
    if layout == "interleaved":
        return f"{rank}: [default{rank % 8}]:" + (f"[rank{rank}]: " if inner else "")
    return f"[rank{rank}]: " if inner else ""


def _block(layout: str, ranks: list[int], total_ranks: int) -> bytes:
    """About BLOCK bytes of lines of `ranks` (one rank: its file; all: the interleaved file), junk line included."""
    per = [_noise(r, total_ranks, 4000 // len(ranks) + 16) for r in ranks]
    lines = []
    for i in range(max(len(p) for p in per)):
        for r, p in zip(ranks, per):
            if i < len(p):
                lines.append((_prefix(layout, r, False) + p[i]).encode())
    body = b"\n".join(lines) + b"\n"
    reps = max(1, BLOCK // (len(body) + len(JUNK) + 1))
    return (body + JUNK + b"\n") * reps


def _long_lines(layout: str, rank: int) -> bytes:
    """A 300 KiB line (a dumped tensor; the reader keeps its ends) and a 60 KiB one (an argument dump)."""
    big = "tensor([" + ", ".join(f"{i % 997 / 997:.4f}" for i in range(300 * 1024 // 8)) + "])"
    mid = "Namespace(" + ", ".join(f"arg_{i}={i}" for i in range(60 * 1024 // 12)) + ")"
    return (_prefix(layout, rank, False) + big + "\n" + _prefix(layout, rank, False) + mid + "\n").encode()


def plants(ranks: int) -> list[dict]:
    """Each planted report: its message as logged (from a diagnose run on its own log), cause, message id, ranks."""
    out = []
    for name, which, where in PLANTS:
        path = UPSTREAM / f"{name}.log"
        proc = subprocess.run([sys.executable, "-m", "mbridge_overlap", "diagnose", str(path), "--format", "json"],
                              cwd=REPO, capture_output=True, timeout=120)
        d = json.loads(proc.stdout)
        cause = d["causes"][0]
        ev = cause["evidence"][0]
        out.append({"log": name, "cause": cause["id"], "message_id": ev["message_id"], "text": ev["logged"],
                    "ranks": sorted(set(which(ranks))), "at": where})
    return out


def generate(folder: Path, size: int, layout: str, ranks: int, planted: list[dict]) -> int:
    """Write the log set; returns its bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [[r] for r in range(ranks)] if layout == "ranks" else [list(range(ranks))]
    per_file = size // len(files)
    written = 0
    t0 = time.time()
    last = t0
    for group in files:
        path = folder / (f"rank{group[0]}.log" if layout == "ranks" else "job.log")
        block = _block(layout, group, ranks)
        extras = []  # (offset, bytes)
        for p in planted:
            shown = [r for r in p["ranks"] if r in group]
            if shown:
                extras.append((int(per_file * p["at"]), b"".join(
                    (_prefix(layout, r, True) + p["text"] + "\n").encode() for r in shown)))
        longs = [r for r in group if r % 8 == 0][:8]  # one rank a node writes the long lines
        if longs:
            extras.append((int(per_file * 0.5), b"".join(_long_lines(layout, r) for r in longs)))
        extras.sort(key=lambda x: x[0])
        n = 0
        with open(path, "wb", buffering=0) as fh:
            while n < per_file:
                while extras and extras[0][0] <= n:
                    n += fh.write(extras.pop(0)[1])
                n += fh.write(block[:per_file - n] if per_file - n < len(block) else block)
                now = time.time()
                if now - last > 2:
                    _say(f"  generating: {(written + n) / 2**20:,.0f} of {size / 2**20:,.0f} MiB "
                         f"({(written + n) / 2**20 / (now - t0):,.0f} MiB/s)")
                    last = now
            for _, data in extras:
                n += fh.write(data)
            if not fh.tell() or block[-1:] != b"\n":
                fh.write(b"\n")
        written += n
    return written


# -- running diagnose ------------------------------------------------------------------------------------------------

def run_diagnose(folder: Path, timeout: float, jobs: int = 1) -> tuple[float, float, int, dict, int]:
    """(wall seconds, CPU seconds, peak RSS bytes, the JSON report, exit status) of one diagnose process (and its
    workers: wait4 counts the CPU of the children it waited for; the peak RSS is the largest process's)."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": os.path.join(tempfile.gettempdir(), "mbridge-overlap-bench-pycache")}
    out = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mbridge_overlap", "diagnose", str(folder), "--format", "json",
                             "--jobs", str(jobs)], cwd=REPO, stdout=out, stderr=subprocess.PIPE, env=env)
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            raise SystemExit(f"diagnose ran past {timeout:.0f} s")
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode("utf-8", "replace")
    out.seek(0)
    data = out.read()
    if proc.returncode not in (0, 1) or not data:
        raise SystemExit(f"diagnose failed (exit {proc.returncode}): {err.strip()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, json.loads(data), proc.returncode


def catalog_prefixes() -> list[str]:
    """The literal text each catalog message starts with (up to its first field, first line, 8 characters or more),
    and the words a native message is found by: what a grep for the catalog's messages looks for."""
    sys.path.insert(0, str(REPO))
    from mbridge_overlap.diagnose import messages

    out = set()
    for e in messages.load().entries:
        if not e.matchable:
            continue
        if e.template:
            head = messages.FIELD.split(e.template)[0].split("\n")[0].strip()
            if len(head) >= 8:
                out.add(head)
        out.update(w for w in (*e.anchors, *e.contains) if w)
    return sorted(out)


def run_grep(folder: Path, prefixes: Path) -> tuple[float, int] | None:
    """(wall seconds, candidate lines) of GNU grep -F over the log set with the catalog's literal prefixes; None
    where there is no GNU grep."""
    grep = shutil.which("grep")
    if grep is None:
        return None
    files = sorted(str(p) for p in folder.rglob("*") if p.is_file())
    t0 = time.perf_counter()
    proc = subprocess.run([grep, "-a", "-c", "-F", "-f", str(prefixes), "--", *files], capture_output=True,
                          env={**os.environ, "LC_ALL": "C"})
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        return None
    return wall, sum(int(line.rsplit(b":", 1)[-1]) for line in proc.stdout.splitlines() if line.strip())


def check_plants(report: dict, planted: list[dict]) -> list[str]:
    """What the report gets wrong about the planted causes (empty: all right)."""
    bad = []
    causes = {c["id"]: c for c in report["causes"]}
    for p in planted:
        c = causes.get(p["cause"])
        if c is None:
            bad.append(f"{p['log']}: {p['cause']} not found")
            continue
        ev = [e for e in c["evidence"] if e["message_id"] == p["message_id"]]
        if not ev:
            bad.append(f"{p['log']}: {p['cause']} found without its message {p['message_id']}")
            continue
        want = [str(r) for r in p["ranks"]]
        e = ev[0]
        if e["rank_count"] != len(want) or e["ranks"] != want or e["count"] != len(want):
            bad.append(f"{p['log']}: {p['message_id']} on {e['rank_count']} ranks, {e['count']} lines; planted on "
                       f"{len(want)} ranks, one line each")
    extra = sorted(set(causes) - {p["cause"] for p in planted})
    if extra:
        bad.append(f"causes not planted: {', '.join(extra)}")
    return bad


def profile(mb: int, layout: str, ranks: int) -> int:
    import cProfile
    import pstats

    sys.path.insert(0, str(REPO))
    from mbridge_overlap import api

    planted = plants(ranks)
    with tempfile.TemporaryDirectory(prefix="bench-diagnose-") as tmp:
        size = generate(Path(tmp), mb << 20, layout, ranks, planted)
        api.diagnose([Path(tmp) / "rank0.log" if layout == "ranks" else Path(tmp) / "job.log"])  # warm the catalog
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        report = api.diagnose([tmp]).to_dict()
        prof.disable()
        wall = time.perf_counter() - t0
    print(f"{size / 2**20:.0f} MiB in {wall:.1f} s under cProfile ({size / 2**20 / wall:.1f} MiB/s)")
    for problem in check_plants(report, planted):
        print("  planted:", problem)
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    return 0


def _table(args, rows: list, jobs: int, prefixes: int) -> str:
    out = [f"diagnose on {args.layout} logs of {args.ranks} ranks (Python {sys.version.split()[0]}); grep: GNU grep -a -c -F "
           f"with the catalog's {prefixes:,} literal prefixes, LC_ALL=C", "",
           f"| size | lines | 1 core: wall s | CPU s | MB/s (CPU) | peak RSS | --jobs {jobs}: wall s | speed-up | grep s "
           f"| 1 core / grep | planted |", "|" + "---|" * 11]
    for _frac, size, wall, cpu, mbps, rss, lines, ok, wall_n, grep in rows:
        par = f"{wall_n:.2f} | {wall / wall_n:.2f}x" if wall_n else "- | -"
        gr = f"{grep[0]:.2f} | {wall / grep[0]:.1f}x" if grep else "- | -"
        out.append(f"| {size / 2**20:,.0f} MiB | {lines:,} | {wall:.2f} | {cpu:.2f} | {mbps:.1f} | {rss / 2**20:.0f} MiB "
                   f"| {par} | {gr} | {'all found' if ok else 'WRONG'} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=parse_size, default=parse_size("2G"), help="the full size, all files together (2G)")
    ap.add_argument("--layout", choices=("ranks", "interleaved"), default="ranks")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--fractions", default="0.25,0.5,1", help="sizes to run, as fractions of --size")
    ap.add_argument("--keep", type=Path, help="write the log sets here (one folder per size) and leave them")
    ap.add_argument("--band", type=float, default=0.75, help="goal: slowest MB/s >= BAND x fastest")
    ap.add_argument("--rss-slack", type=float, default=32, help="goal: full-size peak RSS <= smallest size's + MB")
    ap.add_argument("--max-rss", type=float, default=0, help="goal: peak RSS <= MB (0: none)")
    ap.add_argument("--min-mbps", type=float, default=0, help="goal: every size >= MB/s (0: none)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one diagnose run may take")
    ap.add_argument("--profile", type=int, metavar="MB", help="profile diagnose in-process on an MB-sized log set instead")
    ap.add_argument("--jobs", type=int, default=0, help="worker processes of the second run (0: every core)")
    ap.add_argument("--grep-ratio", type=float, default=3.0, help="goal: diagnose on one core within RATIO x grep's time (0: none)")
    ap.add_argument("--speedup", type=float, default=1.8, help="goal: --jobs on 2+ cores at least SPEEDUP x one core (0: none)")
    ap.add_argument("--write-docs", action="store_true", help="write the table into docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.ranks < 1:
        ap.error("--ranks must be at least 1")
    if args.profile:
        return profile(args.profile, args.layout, args.ranks)
    fractions = sorted(float(f) for f in args.fractions.split(","))
    sys.path.insert(0, str(REPO))
    from mbridge_overlap.diagnose.parallel import cores

    jobs = args.jobs or cores()
    _say(f"planting {len(PLANTS)} real error lines (reading them from tests/data/logs/upstream/)")
    planted = plants(args.ranks)
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-diagnose-"))
    rows, problems = [], []
    prefixes = base / "catalog-prefixes.txt"
    try:
        base.mkdir(parents=True, exist_ok=True)
        words = catalog_prefixes()
        prefixes.write_text("\n".join(words) + "\n")
        for frac in fractions:
            folder = base / f"{args.layout}-{frac:g}"
            if folder.exists():
                shutil.rmtree(folder)
            t0 = time.time()
            _say(f"size {frac:g} x {args.size / 2**30:.2f} GiB ({args.layout}, {args.ranks} ranks) into {folder}")
            size = generate(folder, int(args.size * frac), args.layout, args.ranks, planted)
            _say(f"  generated {size / 2**20:,.0f} MiB in {time.time() - t0:.1f} s; running diagnose")
            wall, cpu, rss, report, rc = run_diagnose(folder, args.timeout)
            mbps = size / 1e6 / cpu
            _say(f"  diagnose: {wall:.1f} s wall, {cpu:.1f} s CPU, {mbps:.1f} MB/s, peak RSS {rss / 2**20:.0f} MiB, "
                 f"exit {rc}, {report['lines']:,} lines")
            bad = check_plants(report, planted)
            wall_n = None
            if jobs > 1:
                wall_n, _cpu, _rss, report_n, _rc = run_diagnose(folder, args.timeout, jobs)
                _say(f"  diagnose --jobs {jobs}: {wall_n:.1f} s wall ({wall / wall_n:.2f}x)")
                if report_n != report:
                    bad.append(f"--jobs {jobs} answered otherwise than one process")
            grep = run_grep(folder, prefixes)
            if grep:
                _say(f"  grep -F with the catalog's prefixes: {grep[0]:.2f} s, {grep[1]:,} candidate lines")
            problems += [f"size {frac:g}: {b}" for b in bad]
            rows.append((frac, size, wall, cpu, mbps, rss, report["lines"], not bad, wall_n, grep))
            if not args.keep:
                shutil.rmtree(folder)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    table = _table(args, rows, jobs, len(words))
    print(table)
    if args.write_docs:
        from bench_common import cpu_model, load, write_section

        write_section("bench_diagnose", f"{cpu_model()}, {cores()} cores, load {load()} at the end.\n\n{table}")
    for _frac, size, wall, *_rest, wall_n, grep in rows:
        if args.grep_ratio and grep and wall > args.grep_ratio * grep[0]:
            problems.append(f"{size / 2**20:,.0f} MiB: one core {wall:.2f} s, {wall / grep[0]:.1f}x grep's {grep[0]:.2f} s "
                            f"(goal {args.grep_ratio:g}x)")
        if args.speedup and wall_n and wall / wall_n < args.speedup:
            problems.append(f"{size / 2**20:,.0f} MiB: --jobs {jobs} {wall / wall_n:.2f}x one core (goal {args.speedup:g}x)")
    speeds = [r[4] for r in rows]
    if len(rows) > 1 and speeds[-1] < args.band * max(speeds):  # (a small size is slower: the start-up is fixed)
        problems.append(f"not linear: {speeds[-1]:.1f} MB/s at the full size against {max(speeds):.1f} (band {args.band})")
    if len(rows) > 1 and rows[-1][5] > rows[0][5] + args.rss_slack * 2**20:
        problems.append(f"memory grows: {rows[-1][5] / 2**20:.0f} MiB at the full size against "
                        f"{rows[0][5] / 2**20:.0f} at the smallest (slack {args.rss_slack:g} MiB)")
    if args.max_rss and max(r[5] for r in rows) > args.max_rss * 2**20:
        problems.append(f"peak RSS {max(r[5] for r in rows) / 2**20:.0f} MiB over {args.max_rss:g}")
    if args.min_mbps and min(speeds) < args.min_mbps:
        problems.append(f"{min(speeds):.1f} MB/s under {args.min_mbps:g}")
    for p in problems:
        print("FAIL:", p)
    print("goals met" if not problems else f"{len(problems)} goal(s) failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
