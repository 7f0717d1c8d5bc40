"""`trace`: hidden and exposed communication per parallel dimension, from PyTorch profiler (Kineto) traces.

    analyze(paths) -> TraceReport          one job's traces: files or directories, one file per rank
    compare(before, after) -> TraceComparison

Both results have .to_dict(), equal to `python -m skill trace ... --format json`. Only the standard library is
used (no torch, pandas or HolisticTraceAnalysis); the overlap figure follows HTA's get_comm_comp_overlap.
"""

from .compare import TraceComparison, compare
from .job import analyze
from .report import RankReport, TraceReport

__all__ = ["analyze", "compare", "TraceReport", "TraceComparison", "RankReport"]
