"""verify through its Bridge holder, with real Bridge: a held verify reports what the caller's own process reports,
passing and failing, with no Bridge import of its own; Ctrl-C stops it and its suites' pytest as in a terminal.
tests/test_holder.py tests the holder's mechanics without Bridge."""

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import fixture_checkout as fx

ROOT = Path(__file__).resolve().parents[2]
VERIFY = str(ROOT / "scripts" / "verify.sh")


@pytest.fixture(scope="module")
def env():
    runtime = Path(tempfile.mkdtemp(prefix="mbv-", dir="/tmp"))  # short: a Unix socket's path has at most 107 bytes
    env = {**os.environ, "MBRIDGE_OVERLAP_SERVER": "1", "XDG_RUNTIME_DIR": str(runtime)}
    for name in ("MBRIDGE_SRC", "PYTHONDONTWRITEBYTECODE"):  # as a user runs it: Python writes bytecode
        env.pop(name, None)
    yield env
    stop = subprocess.run([VERIFY, "--holder", "stop", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr
    shutil.rmtree(runtime, ignore_errors=True)


def verify(*args, env: dict, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([VERIFY, *map(str, args), "--json"], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    report = json.loads(proc.stdout)
    report.pop("seconds")
    return proc, report


def holder_state(env: dict) -> dict:
    proc = subprocess.run([VERIFY, "--holder", "status", "--json"], env=env, capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout)


def children(pid: int) -> list:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(p) for p in fh.read().split()]


def test_a_held_verify_reports_what_its_own_process_reports(env, tmp_path):
    passing, failing = fx.make(tmp_path / "passing"), fx.make(tmp_path / "failing", comm_overlap=fx.FAILING)
    cold, cold_report = verify("--mbridge-src", passing, env=env, cwd=tmp_path)
    assert "importing megatron.bridge" in cold.stderr and cold.returncode == 0, cold.stderr
    state = holder_state(env)
    assert state["running"], state

    phases = tmp_path / "phases.json"
    held, held_report = verify("--mbridge-src", passing, env={**env, "MBRIDGE_VERIFY_PHASES": str(phases)}, cwd=tmp_path)
    assert f"verify's Bridge holder (pid {state['pid']}" in held.stderr, held.stderr
    assert (held.returncode, held_report) == (cold.returncode, cold_report)
    marks = json.loads(phases.read_text())
    assert marks["import"][0] - marks["plan"][0] < 1.0  # no import of its own

    own, own_report = verify("--mbridge-src", failing, env={**env, "MBRIDGE_OVERLAP_SERVER": "0"}, cwd=tmp_path)
    held, held_report = verify("--mbridge-src", failing, env=env, cwd=tmp_path)
    assert "importing megatron.bridge" in own.stderr and "verify's Bridge holder" in held.stderr
    assert (held.returncode, held_report) == (own.returncode, own_report) and own.returncode == 1
    assert held_report["verdict"] == "FAIL"
    assert holder_state(env)["served"] == 2


def test_ctrl_c_stops_the_held_verify_and_its_suites(env, tmp_path):
    subprocess.run([VERIFY, "--skip-suites"], cwd=tmp_path, env=env, capture_output=True, timeout=600)  # a holder
    pid = holder_state(env)["pid"]
    slow = fx.make(tmp_path / "slow", comm_overlap="import time\n\n\ndef test_a():\n    time.sleep(120)\n")
    proc = subprocess.Popen([VERIFY, "--mbridge-src", str(slow)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen, deadline = b"", time.monotonic() + 120
    while b"suites: running" not in seen:  # a verify that hangs fails the test rather than hanging it
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, seen
        chunk = os.read(proc.stderr.fileno(), 65536)
        assert chunk, seen
        seen += chunk
    running = children(pid)
    assert len(running) == 1, "the held verify"
    deadline = time.monotonic() + 30
    while not children(running[0]) and time.monotonic() < deadline:  # the suites' pytest, forked
        time.sleep(0.1)
    assert children(running[0])
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT and b"KeyboardInterrupt" in err, seen + err
    with pytest.raises(ProcessLookupError):
        os.killpg(running[0], 0)  # the verify's process group, its pytest with it, is gone
    assert holder_state(env)["pid"] == pid and children(pid) == []
