"""verify's Bridge holder (mbridge_overlap.bridge.holder), its mechanics without Bridge: tests/holder_demo.py asks it
as verify does. A held run is the run of the caller's own process (output, exit status, folder, umask, stdin, the
variables only verify reads); a caller in another environment runs in its own process and its holder replaces the
old one; a changed file stops it; Ctrl-C reaches the held run and a killed caller's run is stopped; a busy holder
leaves the next caller to its own process; it never keeps its caller's pipes (every run here would hit its time-out).
tests/bridge/test_holder.py runs real verify through it."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mbridge_overlap.bridge import holder

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "tests" / "holder_demo.py"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the holder is Linux's (fork, Unix sockets)")


@pytest.fixture
def env(monkeypatch):
    runtime = Path(tempfile.mkdtemp(prefix="mbh-", dir="/tmp"))  # short: a Unix socket's path has at most 107 bytes
    env = {**os.environ, "MBRIDGE_OVERLAP_SERVER": "1", "XDG_RUNTIME_DIR": str(runtime), "HOLDER_DEMO_SKILL": str(ROOT)}
    env.pop("MBRIDGE_SRC", None)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # control() here finds the demo's holder
    monkeypatch.setenv("MBRIDGE_OVERLAP_SERVER", "1")
    yield env
    state = holder.control("status")
    holder.control("stop")
    if state["running"]:
        with pytest.raises(ProcessLookupError):
            for _ in range(100):
                os.kill(state["pid"], 0)
                time.sleep(0.05)
            os.kill(state["pid"], signal.SIGKILL)
    shutil.rmtree(runtime, ignore_errors=True)


def demo(*args, env: dict, cwd=ROOT, script=DEMO, stdin=b"line\n") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, input=stdin, capture_output=True, timeout=60)


def started(*args, env: dict) -> subprocess.Popen:
    """A demo run, once it has reached its sleep."""
    proc = subprocess.Popen([sys.executable, str(DEMO), *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_output(proc.stderr, b"sleeping\n", 60)
    return proc


def wait_for_output(pipe, text: bytes, seconds: float) -> bytes:
    """What a child writes into `pipe` until `text` appears; a test that waits longer fails rather than hangs."""
    seen, deadline = b"", time.monotonic() + seconds
    while text not in seen:
        ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"{text!r} not written within {seconds} s: {seen!r}"
        chunk = os.read(pipe.fileno(), 65536)
        assert chunk, f"the pipe closed before {text!r}: {seen!r}"
        seen += chunk
    return seen


def served_or_own(proc) -> str:
    return proc.stderr.decode().splitlines()[0]


def children(pid: int) -> list:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return fh.read().split()


def test_a_held_run_is_the_run_of_the_callers_own_process(env, tmp_path):
    first = demo("exit=3", env=env)
    assert served_or_own(first) == "own" and first.returncode == 3
    state = holder.control("status")
    assert state["running"] and state["served"] == 0
    other = tmp_path / "elsewhere"
    other.mkdir()
    caller = {**env, "MBRIDGE_SRC": "/src/of/this/caller"}  # read by verify only: may differ
    for args in (["exit=3"], ["a b", "exit=0"], ["exit=2"]):
        served = subprocess.run(["sh", "-c", 'umask 027; exec "$@"', "sh", sys.executable, str(DEMO), *args], cwd=other,
                                env=caller, input=b"from the caller\n", capture_output=True, timeout=60)
        own = subprocess.run(["sh", "-c", 'umask 027; exec "$@"', "sh", sys.executable, str(DEMO), *args], cwd=other,
                             env={**caller, "MBRIDGE_OVERLAP_SERVER": "0"}, input=b"from the caller\n", capture_output=True, timeout=60)
        assert (served_or_own(served), served_or_own(own)) == ("served", "own")
        assert (served.stdout, served.returncode) == (own.stdout, own.returncode), args
        assert f"cwd={other} umask=27 MBRIDGE_SRC=/src/of/this/caller stdin='from the caller'".encode() in served.stdout
    assert holder.control("status") == {**state, "served": 3}


def test_another_environment_runs_in_its_own_process_and_its_holder_replaces_the_old(env):
    demo(env=env)
    old = holder.control("status")["pid"]
    changed = {**env, "NVTE_SOMETHING": "1"}  # the import could read it: only a holder started with it may run it
    assert served_or_own(demo(env=changed)) == "own"
    new = holder.control("status")
    assert new["running"] and new["pid"] != old
    assert served_or_own(demo(env=changed)) == "served"
    assert served_or_own(demo(env=env)) == "own"  # the old holder stopped when its socket became the new one's


def test_a_changed_file_stops_the_holder_before_it_runs_anything(env, tmp_path):
    script = tmp_path / "demo.py"
    shutil.copy(DEMO, script)
    assert served_or_own(demo(env=env, script=script)) == "own"
    assert served_or_own(demo(env=env, script=script)) == "served"
    old = holder.control("status")["pid"]
    script.write_text(script.read_text() + "\n")
    assert served_or_own(demo(env=env, script=script)) == "own"
    assert holder.control("status")["pid"] != old


def test_a_python_m_run_of_the_package_that_writes_bytecode_changes_nothing_the_holder_watches(env):
    """`python -m mbridge_overlap...` (verify.sh runs verify so) writes the package's __init__ bytecode into the skill
    folder before the package sends bytecode to the cache, and removes it: the folder's time changes, its files do not."""
    demo(env=env)
    pid = holder.control("status")["pid"]
    writing = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-m", "mbridge_overlap", "releases"], cwd=ROOT, env={**writing, "MBRIDGE_OVERLAP_SERVER": "0"},
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not (ROOT / "mbridge_overlap" / "__pycache__").exists()
    assert served_or_own(demo(env=env)) == "served"
    assert holder.control("status")["pid"] == pid


def test_ctrl_c_reaches_the_held_run_and_ends_its_caller_as_it_would_end_its_own_process(env):
    own = subprocess.Popen([sys.executable, str(DEMO), "sleep=0"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    assert own.wait(60) == 0
    pid = holder.control("status")["pid"]
    proc = started("sleep=30", env=env)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGINT
    assert b"KeyboardInterrupt" in err
    assert holder.control("status")["pid"] == pid and children(pid) == []


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_callers_run_is_stopped(env, how):
    demo(env=env)
    pid = holder.control("status")["pid"]
    proc = started("sleep=30", env=env)
    assert len(children(pid)) == 1
    proc.send_signal(how)
    assert proc.wait(10) == -how  # as its own process would have ended
    deadline = time.monotonic() + 10
    while children(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children(pid) == []
    assert served_or_own(demo(env=env)) == "served"


def test_a_busy_holder_leaves_the_next_caller_to_its_own_process_and_stays(env):
    demo(env=env)
    pid = holder.control("status")["pid"]
    proc = started("sleep=15", env=env)
    try:
        began = time.monotonic()
        assert served_or_own(demo(env=env)) == "own"
        # ACCEPT_S, then its own run: its pipes were not left in the busy holder's queue until the sleep ended
        assert time.monotonic() - began < holder.ACCEPT_S + 5
        state = holder.control("status")
        assert state.get("busy") and "busy" in holder.describe(state), state
    finally:
        proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert holder.control("status")["pid"] == pid


def test_switched_off_nothing_is_held(env):
    off = {**env, "MBRIDGE_OVERLAP_SERVER": "0"}
    assert served_or_own(demo(env=off)) == "own"
    assert served_or_own(demo(env=off)) == "own"
    assert holder.control("status")["running"] is False


def test_an_idle_holder_stops(env):
    demo(env={**env, "MBRIDGE_OVERLAP_SERVER_IDLE_S": "1"})
    deadline = time.monotonic() + 15
    while holder.control("status")["running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert holder.control("status")["running"] is False


def test_nonsense_on_its_socket_leaves_the_holder_serving(env):
    demo(env=env)
    for junk in (b"", b"x", b"99999999999:", b"5:abc,", b"3:abc,"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(holder.socket_path(create=False))
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(16)
    assert served_or_own(demo(env=env)) == "served"


def test_status_and_stop(env):
    assert holder.control("status") == {"enabled": True, "socket": holder.socket_path(create=False), "running": False}
    demo(env=env)
    state = holder.control("status")
    assert state["running"] and state["idle_s"] == holder.IDLE_S and state["pid"] != os.getpid()
    assert "pid" in holder.describe(state)
    assert holder.control("stop")["stopped"] is True
    assert holder.control("status")["running"] is False
    assert served_or_own(demo(env=env)) == "own"
