#!/usr/bin/env python3
"""Benchmark `python -m mbridge_overlap trace`: time and memory against size for each JSON layout, and against
HolisticTraceAnalysis's get_comm_comp_overlap on real traces.

    python benchmarks/bench_trace.py [--sizes 10,50,200] [--layouts kineto,compact,indent4] [--no-hta]
                                  [--traces DIR] [--hta-python PY] [--repeat N] [--ranks 4,8] [--no-pool]

1. Scaling. For each size (MB of Kineto-layout JSON) and layout it writes a synthetic trace of the same events
   (plain .json, in a temporary directory) and analyses it in a fresh process: seconds of the analysis call, wall
   and CPU (MB/s from the fastest wall time of --repeat runs), and the process's peak resident set (VmHWM,
   interpreter included). Layouts: `kineto` (as the profiler writes it), `compact`
   (json.dumps with separators=(",", ":")), `indent4` (json.dumps(indent=4)). All layouts of one size must give
   the same report (checked). Then the memory that grows with the trace: bytes of peak RSS per GPU kernel, the
   slope between the smallest and the largest size of a layout.
   Each size and layout runs with each JSON backend: the stdlib scanner, and msgspec where it is installed
   (MBRIDGE_TRACE_JSON=stdlib forces the first).
2. Real traces ($MBRIDGE_SKILL_TRACES, else <repo>/../shared/data/traces): ours against HTA, time and peak memory,
   in-process (the analysis call) and whole-process (the wall time of a process that runs the analysis and writes
   its JSON report, against one that imports HTA and runs get_comm_comp_overlap: benchmarks/bench_trace_child.py,
   which imports nothing of the benchmark's), per backend (exit 1 when the stdlib backend is not
   at least 5x faster in-process in total and 3x lighter on each trace; 2 when HTA cannot run), and each trace
   re-saved in every layout must give the report its Kineto layout gives. The tools take turns on each trace,
   --repeat times, and the fastest run of each counts: a machine shared with other work slows both alike.
3. The worker pool: copies of the real traces as the ranks of one job (distributedInfo rewritten, in a temporary
   directory), analysed with --jobs 1 and with the default, in-process and whole-process; the reports must match.
   Two jobs of each rank count: "mixed" (the traces in turn, as unequal as they are) and "equal" (every rank a copy
   of the median-sized trace, as one job's ranks mostly are); "at best" is the speed-up the ranks' sizes allow the
   workers at all (a mixed job's ranks cannot be split quite evenly between two). --repeat rounds, each running the
   serial and the pooled analysis back to back and, between them, two processes of pure-Python arithmetic against
   one ("machine": what this machine's cores give any pool in that round); a speed-up is the median of the rounds'
   own ratios, so that a drift of the machine's speed between rounds falls on both sides of each.

What grows with the GPU kernels, and why it must: the overlap needs every kernel's interval, and it can only be
computed at the end (the cut-off, where the last ProfilerStep starts, and the launch records may come anywhere in
the file). Kept per GPU kernel, memcpy and memset, in typed arrays: start and end (int64 each), kind (int8), the
launch time (int64) and, until launches are matched, the correlation id (int64): 33 bytes. Per CPU launch record
its correlation and start (16 bytes), dropped once matched (the lookup table meanwhile: at most 32 bytes a
record). The analysis walks the rows in order of start (an int64 array of row numbers, 8 bytes a row, sorted
through a transient list of packed Python ints of about 40 bytes a row) and merges them as it goes into int64
arrays: 16 bytes per merged interval and scope (the totals and the row's step). About 70 bytes a kernel at the
peak under tracemalloc; the peak RSS per kernel printed here also counts the allocator's slack. The text is never
held: a window of a few 1 MB chunks is all of it in memory at once.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_common  # scripts/, beside this file

REPO = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "bench_trace_child.py"  # one measured analysis, with only its own imports
SPEED_GOAL, MEMORY_GOAL = 5.0, 3.0
LAYOUTS = ("kineto", "compact", "indent4")


BACKENDS = ("stdlib", "msgspec")


def backends() -> list[str]:
    """The JSON backends this Python can run: the stdlib always, msgspec where it imports."""
    probe = subprocess.run([sys.executable, "-c", "import msgspec"], capture_output=True)
    return list(BACKENDS) if probe.returncode == 0 else ["stdlib"]


def _env(backend: str | None) -> dict:
    """The environment of a measured process: this one's, as a user's Python runs (it caches bytecode: without
    PYTHONDONTWRITEBYTECODE, under which our process, whose bytecode goes to a prefix folder, would compile every
    module it imports after the package, msgspec's and the standard library's, at every run), with `backend`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MBRIDGE_TRACE_JSON", "PYTHONDONTWRITEBYTECODE")}
    if backend == "stdlib":
        env["MBRIDGE_TRACE_JSON"] = "stdlib"
    return env


def measure(python: str, tool: str, path: Path, repeat: int, backend: str | None = None) -> dict:
    """The fastest of `repeat` runs of the child; "wall" is the child process's whole wall time."""
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(
            [python, str(CHILD), tool, str(path)], capture_output=True, text=True, cwd=str(REPO),
            env=_env(backend),
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} on {path.name} failed: {proc.stderr.strip().splitlines()[-1:]}")
        best = _faster(best, {**json.loads(proc.stdout.strip().splitlines()[-1]), "wall": wall})
    return best


def _faster(best: dict | None, result: dict) -> dict:
    """The faster analysis of two measurements, with the faster whole-process wall of the two."""
    if best is None:
        return result
    wall = min(best["wall"], result["wall"])
    return {**(result if result["seconds"] < best["seconds"] else best), "wall": wall}


def cli_wall(target: Path, repeat: int, backend: str | None, *flags: str) -> tuple[float, str]:
    """The fastest wall time of `python -m mbridge_overlap trace TARGET --format json` (a whole process, as an agent
    runs it), and its output."""
    best, out = None, ""
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "mbridge_overlap", "trace", str(target), "--format", "json",
                               *flags], capture_output=True, text=True, cwd=str(REPO), env=_env(backend))
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"trace {target.name} failed: {proc.stderr.strip()}")
        best, out = (wall, proc.stdout) if best is None or wall < best else (best, out)
    return best, out


def json_mb(path: Path) -> float:
    with gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb") as fh:
        size = 0
        while chunk := fh.read(1 << 20):
            size += len(chunk)
    return size / 1e6


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)


# --- synthetic trace -------------------------------------------------------------------------------------------

_EVENT = (
    '  {{\n    "ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1,\n    "ts": {t}, "dur": 30,\n'
    '    "args": {{\n      "External id": {e}, "Sequence number": {e}, "Fwd thread id": 0,\n'
    '      "Input Dims": [[8, 4096], [4096, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]\n    }}\n  }},\n'
    '  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,\n'
    '    "ts": {t1}, "dur": 5,\n    "args": {{\n      "External id": {e}, "cbid": 211, "correlation": {c}\n    }}\n  }},\n'
    '  {{\n    "ph": "s", "id": {c}, "pid": 1, "tid": 1, "ts": {t1}, "cat": "ac2g", "name": "ac2g"\n  }},\n'
    '  {{\n    "ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", '
    '"pid": 0, "tid": 7,\n    "ts": {k}, "dur": 80,\n    "args": {{\n      "External id": {e}, "queued": 0, '
    '"device": 0, "context": 1, "stream": 7, "correlation": {c}, "registers per thread": 168,\n'
    '      "shared memory": 164864, "blocks per SM": 1.0, "warps per SM": 8.0, "grid": [132, 1, 1], '
    '"block": [384, 1, 1], "est. achieved occupancy %": 12\n    }}\n  }},\n'
    '  {{\n    "ph": "f", "id": {c}, "pid": 0, "tid": 7, "ts": {k}, "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }},\n'
)
_COMM = (
    '  {{\n    "ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,\n    "ts": {t}, "dur": 9,\n'
    '    "args": {{\n      "External id": {e}, "Process Group Name": "2", "Process Group Description": '
    '"DATA_PARALLEL_GROUP", "Collective name": "reduce_scatter_tensor_coalesced", "Group size": 8\n    }}\n  }},\n'
    '  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,\n'
    '    "ts": {t}, "dur": 5,\n    "args": {{\n      "External id": {e}, "cbid": 211, "correlation": {c}\n    }}\n  }},\n'
    '  {{\n    "ph": "X", "cat": "kernel", "name": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", '
    '"pid": 0, "tid": 20,\n    "ts": {k}, "dur": 100,\n    "args": {{\n      "External id": {e}, "device": 0, '
    '"stream": 20, "correlation": {c}, "grid": [16, 1, 1], "block": [640, 1, 1]\n    }}\n  }},\n'
)
OPS_PER_STEP = 1000
_HEAD = '{\n  "schemaVersion": 1,\n  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},\n  "traceEvents": [\n'
_TAIL = '  {\n    "name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 0\n  }\n  ]\n}\n'


def _steps():
    """Kineto-layout text, one step at a time, and the GPU kernels in it: per step OPS_PER_STEP GEMMs of 80 us
    every 100 us on stream 7, and every tenth op a 100 us ReduceScatter on stream 20 starting 50 us in, so 80 of
    its 100 us overlap compute: 80.00 % (the last step is left out of the totals, as HTA does)."""
    step, corr = 0, 0
    while True:
        base = step * OPS_PER_STEP * 100
        parts = ['  {{\n    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{s}", "pid": 1, "tid": 1,\n'
                 '    "ts": {t}, "dur": {d}\n  }},\n'.format(s=step + 1, t=base, d=OPS_PER_STEP * 100)]
        kernels = 0
        for i in range(OPS_PER_STEP):
            corr += 2
            t = base + i * 100
            parts.append(_EVENT.format(t=t + 1, t1=t + 2, e=corr, c=corr, k=t))
            kernels += 1
            if i % 10 == 0:
                parts.append(_COMM.format(t=t + 3, e=corr + 1, c=corr + 1, k=t + 50))
                kernels += 1
        yield "".join(parts), kernels
        step += 1


def _relaid(block: str, layout: str) -> str:
    """A block of Kineto-layout events ("{...},\\n" each) in another layout, ending with the separator."""
    events = json.loads("[" + block.rstrip().rstrip(",") + "]")
    if layout == "compact":
        return ",".join(json.dumps(e, separators=(",", ":")) for e in events) + ","
    return ",\n".join("    " + json.dumps(e, indent=4).replace("\n", "\n    ") for e in events) + ",\n"


def _frame(layout: str) -> tuple[str, str]:
    """The text before the first event and after the last one (the closing event, then the brackets)."""
    if layout == "kineto":
        return _HEAD, _TAIL
    options = {"compact": {"separators": (",", ":")}, "indent4": {"indent": 4}}[layout]
    meta = json.loads(_HEAD + "]}")
    meta["traceEvents"] = ["@EVENTS@", json.loads(_TAIL.strip()[:-4].strip())]
    head, tail = json.dumps(meta, **options).split('"@EVENTS@",')
    return head, tail


def write_synthetic(path: Path, steps: int, layout: str) -> tuple[float, int]:
    """`steps` ProfilerSteps of events in `layout`; returns (MB written, GPU kernels)."""
    head, tail = _frame(layout)
    written, kernels = 0, 0
    with path.open("w") as out:
        out.write(head)
        written += len(head)
        for (block, count), _ in zip(_steps(), range(steps)):
            text = block if layout == "kineto" else _relaid(block, layout)
            out.write(text)
            written += len(text)
            kernels += count
        out.write(tail)
        written += len(tail)
    return written / 1e6, kernels


def steps_for(mb: float) -> int:
    """Steps that make about `mb` MB of Kineto-layout JSON (the other layouts of the same events differ in size)."""
    block, _count = next(_steps())
    return max(2, round(mb * 1e6 / len(block)))


def scaling(sizes: list[float], layouts: list[str], repeat: int) -> bool:
    rows = [["layout", "backend", "JSON MB", "GPU kernels", "seconds", "CPU s", "MB/s", "peak RSS MB", "hidden %"]]
    per_kernel, same = [], True
    with tempfile.TemporaryDirectory() as tmp:
        reports: dict[float, dict] = {}
        for layout in layouts:
            for backend in backends():
                points = []
                for size in sizes:
                    path = Path(tmp) / f"rank-0.{layout}.{size:g}.json"
                    if not path.exists():
                        write_synthetic(path, steps_for(size), layout)
                    mb = path.stat().st_size / 1e6
                    result = measure(sys.executable, "ours", path, repeat, backend)
                    kernels = sum(result["report"]["ranks"][0]["kernel_counts"].values())
                    points.append((kernels, result["peak_mb"]))
                    if reports.setdefault(size, result["report"]) != result["report"]:
                        same = False
                    rows.append([layout, backend, f"{mb:.1f}", f"{kernels:,}", f"{result['seconds']:.2f}",
                                 f"{result['cpu_seconds']:.2f}", f"{mb / result['seconds']:.0f}",
                                 f"{result['peak_mb']:.0f}", f"{result['hidden_pct']}"])
                if len(points) > 1 and points[-1][0] > points[0][0]:
                    slope = (points[-1][1] - points[0][1]) * 2 ** 20 / (points[-1][0] - points[0][0])
                    per_kernel.append(f"{layout}/{backend} {slope:.0f}")
            for size in sizes:
                (Path(tmp) / f"rank-0.{layout}.{size:g}.json").unlink(missing_ok=True)
    print(table(rows))
    print(f"\nhidden % is 80.00 by construction; every layout and backend of a size gives the same report: "
          f"{'yes' if same else 'NO'}")
    if per_kernel:
        print("peak RSS per GPU kernel, bytes (slope from the smallest to the largest size): " + ", ".join(per_kernel))
    return same


def real_layouts(files: list[Path]) -> bool:
    """Each real trace re-saved in every layout gives the report the file itself gives."""
    sys.path.insert(0, str(REPO))
    from mbridge_overlap.trace import analyze

    same = True
    with tempfile.TemporaryDirectory() as tmp:
        for source in files:
            document = json.loads(gzip.decompress(source.read_bytes()) if source.name.endswith(".gz")
                                  else source.read_bytes())
            want = analyze(source).to_dict()
            want["ranks"][0]["file"] = None
            for _layout, kw in (("compact", {"separators": (",", ":")}), ("indent4", {"indent": 4})):
                path = Path(tmp) / source.name.replace(".gz", "")
                path.write_text(json.dumps(document, **kw))
                got = analyze(path).to_dict()
                got["ranks"][0]["file"] = None
                same &= got == want
                path.unlink()
    print(f"real traces re-saved compact and with indent=4 give the same report: {'yes' if same else 'NO'}")
    return same


def against_hta(files: list[Path], hta_python: str, repeat: int) -> int:
    probe = subprocess.run([hta_python, "-c", "import hta"], capture_output=True)
    if probe.returncode != 0:
        print(f"bench_trace: {hta_python} cannot import hta (pip install holistictraceanalysis)", file=sys.stderr)
        return 2
    names = backends()
    rows = [["trace", "JSON MB", "HTA s", "HTA wall s", *[f"{b} {w}" for b in names for w in ("s", "wall s")],
             "ours MB", "HTA MB", "lighter", "ours %", "HTA %"]]
    hta_sums, sums = [0.0, 0.0], {b: [0.0, 0.0] for b in names}
    lighter, same = [], True
    for path in files:
        hta, runs = None, {}
        for _ in range(repeat):  # the tools take turns, so each one's fastest run meets the same machine
            hta = _faster(hta, measure(hta_python, "hta", path, 1))
            for backend in names:
                ours, walls = runs.get(backend, (None, []))
                runs[backend] = _faster(ours, measure(sys.executable, "ours", path, 1, backend)), walls
                walls.append(cli_wall(path, 1, backend)[0])
        hta_sums[0] += hta["seconds"]
        hta_sums[1] += hta["wall"]
        cells, reports = [], []
        for backend in names:
            ours, walls = runs[backend]
            wall = min(walls)
            sums[backend][0] += ours["seconds"]
            sums[backend][1] += wall
            cells += [f"{ours['seconds']:.2f}", f"{wall:.2f}"]
            reports.append(ours["report"])
        same &= all(r == reports[0] for r in reports)
        lighter.append(hta["peak_mb"] / ours["peak_mb"])
        rows.append([path.name, f"{json_mb(path):.1f}", f"{hta['seconds']:.2f}", f"{hta['wall']:.2f}", *cells,
                     f"{ours['peak_mb']:.0f}", f"{hta['peak_mb']:.0f}", f"{lighter[-1]:.1f}x",
                     f"{ours['hidden_pct']}", f"{hta['hidden_pct']}"])
    rows.append(["all traces", "", f"{hta_sums[0]:.2f}", f"{hta_sums[1]:.2f}",
                 *[f"{v:.2f}" for b in names for v in sums[b]], "", "", f"min {min(lighter):.1f}x", "", ""])
    print(table(rows))
    print()
    for backend in names:
        inproc, whole = hta_sums[0] / sums[backend][0], hta_sums[1] / sums[backend][1]
        print(f"{backend}: {inproc:.1f}x HTA in-process (the analysis call), {whole:.1f}x whole-process (wall)")
    print(f"every backend gives the same report on every trace: {'yes' if same else 'NO'}")
    speedup = hta_sums[0] / sums["stdlib"][0]
    ok_speed, ok_memory = speedup >= SPEED_GOAL, min(lighter) >= MEMORY_GOAL
    print(f"goal >= {SPEED_GOAL:.0f}x faster in total (stdlib, in-process): {'met' if ok_speed else 'NOT met'} "
          f"({speedup:.1f}x); goal >= {MEMORY_GOAL:.0f}x less peak memory on every trace: "
          f"{'met' if ok_memory else 'NOT met'} ({min(lighter):.1f}x)")
    return 0 if ok_speed and ok_memory and same else 1


def job_of(files: list[Path], ranks: int, folder: Path) -> list[int]:
    """`ranks` copies of `files` (round robin) as ranks 0..ranks-1 of one job: distributedInfo rewritten. Returns
    each rank's characters of JSON."""
    sizes = []
    for rank in range(ranks):
        source = files[rank % len(files)]
        document = json.loads(gzip.decompress(source.read_bytes()) if source.name.endswith(".gz")
                              else source.read_bytes())
        info = document.get("distributedInfo") if isinstance(document.get("distributedInfo"), dict) else {}
        document["distributedInfo"] = {**info, "rank": rank, "world_size": ranks}
        text = json.dumps(document).encode()
        sizes.append(len(text))
        (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(text, 1))
    return sizes


def best_speedup(sizes: list[int], workers: int) -> float:
    """The speed-up `workers` could reach on ranks whose work goes with their size, each rank on one worker (the
    largest first, each to the least loaded: what the pool does): a job of unequal ranks is capped below `workers`."""
    loads = [0] * max(1, workers)
    for size in sorted(sizes, reverse=True):
        loads[loads.index(min(loads))] += size
    return sum(sizes) / max(loads)


# Two processes of pure-Python arithmetic against one doing both halves: what this machine's two cores give at all.
_MACHINE = ("import os, time\n"
            "def work():\n    s = 0\n    for i in range(3_000_000): s += i * i\n"
            "t = time.perf_counter(); work(); work(); serial = time.perf_counter() - t\n"
            "t = time.perf_counter(); pid = os.fork()\n"
            "if pid == 0:\n    work(); os._exit(0)\n"
            "work(); os.waitpid(pid, 0); print(serial / (time.perf_counter() - t))")
_IN_PROCESS = ("import sys, time; from mbridge_overlap.trace import analyze\n"
               "t = time.perf_counter(); analyze(sys.argv[1], jobs=int(sys.argv[2])) if sys.argv[2] != '0' "
               "else analyze(sys.argv[1]); print(time.perf_counter() - t)")


def _in_process(folder: str, jobs: str, backend: str) -> float:
    return float(subprocess.run([sys.executable, "-c", _IN_PROCESS, folder, jobs], capture_output=True, text=True,
                                cwd=str(REPO), env=_env(backend), check=True).stdout)


def _machine() -> float:
    return float(subprocess.run([sys.executable, "-c", _MACHINE], capture_output=True, text=True, check=True).stdout)


def pool_scaling(files: list[Path], rank_counts: list[int], repeat: int) -> bool:
    """Serial (--jobs 1) against the pool (the default) on one job of N ranks, in-process and whole-process: ranks
    that are copies of the real traces in turn ("mixed": sizes as unequal as the traces'), and ranks that are all
    copies of the median-sized trace ("equal", as one job's ranks mostly are). Each round runs the serial and the
    pooled analysis back to back, in-process and whole-process, and the machine's own two-process speed-up
    (_MACHINE) between them; a speed-up is the median of the rounds' own ratios (a round's pair meets the same
    machine, whose speed drifts by tens of per cent from second to second on a shared host), the times the fastest
    of the rounds."""
    sys.path.insert(0, str(REPO))
    from mbridge_overlap.trace import job

    rows = [["ranks", "job", "backend", "jobs", "at best", "machine", "serial s", "pool s", "speed-up",
             "serial wall s", "pool wall s", "speed-up (wall)", "same report"]]
    same_all = True
    median = sorted(files, key=lambda f: f.stat().st_size)[len(files) // 2]
    for ranks, kind in ((n, kind) for kind in ("mixed", "equal") for n in rank_counts):
        with tempfile.TemporaryDirectory() as tmp:
            sizes = job_of(files if kind == "mixed" else [median], ranks, Path(tmp))
            ideal = best_speedup(sizes, job.default_jobs(ranks))
            for backend in backends():
                rounds = []
                for _ in range(max(1, repeat)):
                    serial = _in_process(tmp, "1", backend)
                    serial_wall, serial_out = cli_wall(Path(tmp), 1, backend, "--jobs", "1")
                    machine = _machine()
                    pool_wall, pool_out = cli_wall(Path(tmp), 1, backend)
                    pooled = _in_process(tmp, "0", backend)
                    same = serial_out == pool_out
                    same_all &= same
                    rounds.append((serial, pooled, serial_wall, pool_wall, machine, same))
                s, p, sw, pw, m, same = zip(*rounds)
                speedup, speedup_wall = bench_common.paired_ratio(s, p), bench_common.paired_ratio(sw, pw)
                rows.append([str(ranks), kind, backend, str(job.default_jobs(ranks)), f"{ideal:.2f}x",
                             f"{statistics.median(m):.2f}x", f"{min(s):.2f}", f"{min(p):.2f}", f"{speedup:.2f}x",
                             f"{min(sw):.2f}", f"{min(pw):.2f}", f"{speedup_wall:.2f}x", "yes" if all(same) else "NO"])
    print(table(rows))
    print(f"\n{os.cpu_count()} cores here; 'at best': the speed-up the ranks' sizes allow its workers; 'machine': two "
          "processes of pure-Python arithmetic against one, in the same rounds (the most any pool gets here then); "
          "speed-ups: the median of each round's pair; the pool gives the serial report: "
          f"{'yes' if same_all else 'NO'}")
    return same_all


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--sizes", default="10,50,200", help="MB of Kineto-layout JSON per synthetic trace (the "
                        "same events in another layout differ in size; default 10,50,200; '' skips the scaling table)")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help=f"default {','.join(LAYOUTS)}")
    parser.add_argument("--traces", type=Path, default=Path(os.environ.get(
        "MBRIDGE_SKILL_TRACES", REPO.parent / "shared" / "data" / "traces")))
    parser.add_argument("--hta-python", default=sys.executable, help="a Python with holistictraceanalysis")
    parser.add_argument("--no-hta", action="store_true", help="skip the comparison with HTA on real traces")
    parser.add_argument("--repeat", type=int, default=1, help="runs per measurement, the fastest counting; for the "
                        "pool, rounds, the median of their ratios counting (default 1)")
    parser.add_argument("--ranks", default="4,8", help="rank counts of the pool's job (default 4,8)")
    parser.add_argument("--no-pool", action="store_true", help="skip the worker pool's scaling")
    args = parser.parse_args()
    status = 0
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    layouts = [name for name in args.layouts.split(",") if name]
    if set(layouts) - set(LAYOUTS):
        parser.error(f"--layouts: one of {', '.join(LAYOUTS)}")
    if sizes and not scaling(sizes, layouts, args.repeat):
        status = 1
    files = sorted(args.traces.glob("*.json.gz")) + sorted(args.traces.glob("*.json"))
    if not files:
        print(f"bench_trace: no real traces in {args.traces}; skipped them", file=sys.stderr)
        return status
    print()
    if not real_layouts(files):
        status = 1
    if not args.no_hta:
        print()
        status = max(status, against_hta(files, args.hta_python, args.repeat))
    if not args.no_pool:
        print()
        if not pool_scaling(files, [int(n) for n in args.ranks.split(",") if n.strip()], args.repeat):
            status = max(status, 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
