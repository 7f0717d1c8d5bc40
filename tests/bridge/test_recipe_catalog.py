"""The shipped recipe catalog is what real Bridge gives today: regenerate it and compare, byte for byte."""

import subprocess
import sys

from conftest import ROOT


def test_regenerated_catalog_matches_the_shipped_one():
    proc = subprocess.run([sys.executable, "-W", "ignore", str(ROOT / "tools" / "gen_recipe_catalog.py"), "--check"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith("catalog matches")
