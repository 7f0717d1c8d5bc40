"""Every check an analysis runs, registered in mbridge_overlap.findings.registry (the ruff pattern: the finding is the unit of
change). Importing this package registers them; they run in registration order: the modules below, top to bottom.
proof.collect runs them on a state. The registry's names and collect are re-exported here.
"""

from __future__ import annotations

from ..proof import collect, one_value_per_key  # noqa: F401 (re-exported)
from ..registry import CHECKS, RAISERS, check, declare  # noqa: F401 (re-exported)
from . import rejections, later, selection, left_off, run  # noqa: F401 (registers them, in this order)
