import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run_cli(*args, env=None, cwd=ROOT):
    """Run `python -m mbridge_overlap ARGS` from the skill folder, as an agent would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "mbridge_overlap", *map(str, args)], cwd=cwd, capture_output=True, text=True, env=full_env)


def cli_json(*args):
    proc = run_cli(*args, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def cli():
    return run_cli
