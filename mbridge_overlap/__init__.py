"""nemo-mbridge-perf-tp-dp-comm-overlap: what Megatron-Bridge does with TP/DP/PP communication overlap settings.

The Python API has the command line's verbs; each returns an object whose to_dict() is the command's JSON. Every
verb is in mbridge_overlap.api; those whose names no submodule uses are re-exported here, imported on first use.
"""

__all__ = ["resolve", "plan", "recipes", "presets", "explain", "release_table", "suites", "UsageError"]
__version__ = "0.2.0"


def __getattr__(name: str):
    if name == "UsageError":
        from .errors import UsageError

        return UsageError
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
