"""`trace`: hidden and exposed communication per parallel dimension, from PyTorch profiler (Kineto) traces.

    analyze(paths) -> TraceReport          one job's traces: files or directories, one file per rank
    compare(before, after) -> TraceComparison

Both results have .to_dict(), equal to `python -m mbridge_overlap trace ... --format json`. Only the standard library is
needed (no torch, pandas or HolisticTraceAnalysis; msgspec, where installed, decodes faster to the same result);
the overlap figure follows HTA's get_comm_comp_overlap.
"""

__all__ = ["analyze", "compare", "TraceReport", "TraceComparison", "RankReport"]

_WHERE = {"analyze": "job", "compare": "compare", "TraceComparison": "compare", "TraceReport": "report", "RankReport": "report"}


def __getattr__(name):
    """Import the analysis modules on first use, so `python -m mbridge_overlap plan` does not pay for them."""
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value  # importing the submodule `compare` bound the module to this name; rebind it
        return value
    raise AttributeError(name)
