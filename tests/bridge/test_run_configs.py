"""The run configs the lint/diff tests read are exactly what Megatron-Bridge writes for those runs today."""

import subprocess
import sys

from fixture_checkout import Path

ROOT = Path(__file__).resolve().parents[2]


def test_saved_run_configs_are_current():
    proc = subprocess.run([sys.executable, "-W", "ignore", str(ROOT / "tools" / "gen_run_configs.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
