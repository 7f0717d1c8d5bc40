"""The Bridge tier: needs the real megatron-bridge (scripts/test.sh runs it with the Bridge venv's python).

Without Bridge the tier is skipped with the reason, unless MBRIDGE_SKILL_REQUIRE_BRIDGE=1 (as in CI), where
a missing Bridge is a failure rather than a silent skip."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mbridge_overlap.bridge import adapter  # noqa: E402

# mbridge_overlap/__init__.py sends bytecode to a cache folder (sys.pycache_prefix); under a prefix Python ignores
# the bytecode pip compiled beside torch, Transformer Engine and Bridge, so each tier-2 process would compile them
# again (about 16 s). This tier reads the installed bytecode and writes none.
sys.pycache_prefix, sys.dont_write_bytecode = None, True

try:
    adapter.import_bridge()
    adapter.quiet()
    BRIDGE_ERROR = None
except adapter.BridgeUnavailable as exc:
    BRIDGE_ERROR = str(exc)


def pytest_collection_modifyitems(config, items):
    if BRIDGE_ERROR is None:
        return
    if os.environ.get("MBRIDGE_SKILL_REQUIRE_BRIDGE") == "1":
        raise pytest.UsageError(f"the Bridge tier needs megatron-bridge: {BRIDGE_ERROR}")
    for item in items:
        item.add_marker(pytest.mark.skip(reason=f"needs megatron-bridge ({BRIDGE_ERROR}); run scripts/test.sh"))
