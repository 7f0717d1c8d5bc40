"""nemo-mbridge-perf-tp-dp-comm-overlap: what Megatron-Bridge does with TP/DP/PP communication overlap settings.

The Python API has the command line's verbs; each returns an object whose to_dict() is the command's JSON.
"""

import os as _os
import sys as _sys


def _keep_skill_folder_clean() -> None:
    """Run from a skill folder (not an installed package), Python would write __pycache__ into it: send bytecode to
    the user's cache instead, and drop the one file written before this ran (this module's own, on `python -m`)."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.basename(_os.path.dirname(here)) in ("site-packages", "dist-packages") or _sys.pycache_prefix:
        return
    cache = _os.environ.get("XDG_CACHE_HOME") or _os.path.join(_os.path.expanduser("~"), ".cache")
    _sys.pycache_prefix = _os.path.join(cache, "mbridge-overlap", "pycache")
    own = globals().get("__cached__")
    if own and _os.path.dirname(_os.path.dirname(own)) == here:
        for path, remove in ((own, _os.remove), (_os.path.dirname(own), _os.rmdir)):
            try:
                remove(path)
            except OSError:
                return  # not there, not ours to remove, or the folder holds other files


_keep_skill_folder_clean()

# Every verb is in mbridge_overlap.api; those whose names no submodule uses are re-exported here (lint, diff, trace
# and anchors are also module names, so they are reached as mbridge_overlap.api.lint and so on). They and the
# submodules are imported on first use, so that the command line imports only what the verb asked for needs (the
# answer server's client: this package, launch and server, nothing else).
__all__ = ["resolve", "plan", "recipes", "presets", "explain", "release_table", "suites", "UsageError"]


def __getattr__(name: str):
    if name == "UsageError":
        from .errors import UsageError

        return UsageError
    if name in __all__:
        from . import api

        return getattr(api, name)
    try:
        __import__(f"{__name__}.{name}")  # not importlib.import_module: importing importlib costs a cold start 0.5 ms
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return _sys.modules[f"{__name__}.{name}"]


__version__ = "0.2.0"
