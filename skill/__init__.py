"""nemo-mbridge-perf-tp-dp-comm-overlap: what Megatron-Bridge does with TP/DP/PP communication overlap settings.

The Python API has the command line's verbs; each returns an object whose to_dict() is the command's JSON.
"""

from .api import explain, plan, presets, release_table, resolve
from .errors import UsageError

__all__ = ["resolve", "plan", "presets", "explain", "release_table", "UsageError"]
__version__ = "0.1.0"
