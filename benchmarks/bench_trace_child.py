"""One analysis measured for benchmarks/bench_trace.py, in a process of its own that imports only what it uses (the
benchmark's own imports, about 15 ms, are no part of either tool's whole-process time):

    python benchmarks/bench_trace_child.py ours|hta TRACE

prints {"seconds", "cpu_seconds", "peak_mb", "hidden_pct", "report"} as one JSON line ("ours": this package's
trace.analyze, its report with the file names blanked; "hta": HolisticTraceAnalysis's get_comm_comp_overlap).
"""

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(tool: str, path: str) -> None:
    """Run one analysis in this process and print {"seconds", "cpu_seconds", "peak_mb", "hidden_pct", "report"}."""
    report, cpu = None, None
    if tool == "ours":
        sys.path.insert(0, str(REPO))  # the package sends its bytecode to the user's cache itself
        from mbridge_overlap.trace import analyze

        start, cpu = time.perf_counter(), time.process_time()
        result = analyze(path)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        pct = result.ranks[0].figures.hidden_pct
        report = result.to_dict()
        for rank in report["ranks"]:
            rank["file"] = None
    else:
        import logging

        logging.disable(logging.CRITICAL)
        from hta.trace_analysis import TraceAnalysis

        start = time.perf_counter()
        analysis = TraceAnalysis(trace_files={0: path}, trace_dir=str(Path(path).parent))
        pct = float(analysis.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0])
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_mb": peak_rss_mb(), "hidden_pct": pct,
                      "report": report}))


def peak_rss_mb() -> float:
    """This process's peak resident set. VmHWM belongs to the address space made at exec; ru_maxrss would also
    carry the parent's size at fork over (Linux keeps it across execve)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


if __name__ == "__main__":
    main(*sys.argv[1:3])
