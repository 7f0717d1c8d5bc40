import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# A shell's background job starts with SIGINT ignored, which every CLI the tests start inherits (Python then installs
# no KeyboardInterrupt handler): the Ctrl-C tests would wait forever on a CLI blocked writing into a full pipe. A
# handler here (reset to the default at exec) gives each child the SIGINT a terminal gives it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def diagnose_causes(text: str) -> list[dict]:
    """The causes diagnose gives for a text read from standard input (the Python API, one call)."""
    import io

    from mbridge_overlap import api

    return api.diagnose(["-"], stdin=io.BytesIO(text.encode("utf-8"))).to_dict()["causes"]


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
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_all.py"), "--check"], capture_output=True, text=True)
    out = {}
    for line in proc.stdout.splitlines():
        script, _, rest = line.partition(": ")
        if script.endswith(".py"):
            status, _, said = rest.partition(": ")
            out[script] = (status == "ok", said)
    assert out and proc.returncode == (0 if all(ok for ok, _ in out.values()) else 1), proc.stdout + proc.stderr
    return out


def ours_running() -> list[str]:
    """Processes of this skill still alive besides this one: children of this process (however deep) or orphans
    (adopted by init), whose command line runs the package, its launcher or its verify. None may outlive its command."""
    procs = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if stat[0] not in "ZX":
            procs[int(name)] = (int(stat[1]), cmdline)
    me = os.getpid()

    def descends(pid: int) -> bool:
        seen = set()
        while pid in procs and pid not in seen:
            seen.add(pid)
            pid = procs[pid][0]
            if pid == me:
                return True
        return False

    return [f"{pid}: {cmd.strip()}" for pid, (ppid, cmd) in procs.items()
            if pid != me and (ppid == 1 or descends(pid)) and any(w in cmd for w in ("mbridge_overlap", "mbridge-overlap"))]


def pytest_sessionfinish(session, exitstatus):
    """After the whole tier: nothing of ours is still running (no server, no worker, no verify left behind)."""
    left = ours_running()
    if left:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            "processes of the skill outlived their commands:\n  " + "\n  ".join(left), red=True)
        session.exitstatus = 1
