import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Every command a test runs is answered in its own process (its resource limits and signals are the test's);
# tests/test_server.py turns the answer server on for itself.
os.environ.setdefault("MBRIDGE_OVERLAP_SERVER", "0")
# Where mbridge_overlap/malloc.py can set glibc's thresholds (tests of its effect skip elsewhere).
GLIBC = sys.platform.startswith("linux") and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")


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


@functools.lru_cache(maxsize=None)
def generated() -> dict:
    """tools/gen_all.py --check, run once for the whole tier: {generator script: (up to date, what it printed)}.
    The tests of each generated file read their generator's line here instead of running its check again."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_all.py"), "--check"], capture_output=True, text=True)
    out = {}
    for line in proc.stdout.splitlines():
        script, _, rest = line.partition(": ")
        if script.endswith(".py"):
            status, _, said = rest.partition(": ")
            out[script] = (status == "ok", said)
    assert out and proc.returncode == (0 if all(ok for ok, _ in out.values()) else 1), proc.stdout + proc.stderr
    return out
