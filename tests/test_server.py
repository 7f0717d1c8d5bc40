"""The answer server (mbridge_overlap.server): what it answers is byte for byte what the caller's own process answers
(stdout, stderr, exit status), it never holds the caller's pipes, it stops when a file it loaded changes or after
its idle time, and it is never started where its socket's folder is not private."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from blocked_pipe import full_pipe  # tests/, beside conftest.py
from conftest import GLIBC
from test_schemas import check

ROOT = Path(__file__).resolve().parent.parent
RECIPE = "llama3_70b_pretrain_64gpu_h100_bf16_config"
CASES = {
    "resolve": ["resolve", "--gpus", "64", "model.tensor_model_parallel_size=4", "comm_overlap.tp_comm_overlap=true"],
    "resolve json": ["resolve", "--gpus", "64", "model.tensor_model_parallel_size=4", "--format", "json"],
    "resolve recipe": ["resolve", "--recipe", RECIPE, "model.context_parallel_size=1"],
    "resolve launcher env": ["resolve", "--gpus", "8", "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1", "--launcher-env"],
    "resolve help": ["resolve", "--help"],
    "resolve bad gpus": ["resolve", "--gpus", "0"],
    "resolve unknown key": ["resolve", "--gpus", "8", "model.no_such_field=1"],
    "plan": ["plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--gpu", "h100"],
    "plan python": ["plan", "--tp", "4", "--gpus", "8", "--hidden-size", "12288", "--seq-length", "2048", "--micro-batch-size", "1",
                    "--format", "python"],
    "plan recipe": ["plan", "--recipe", "llama3_70b", "--gpus", "64"],
    "lint recipe": ["lint", "--recipe", RECIPE, "--format", "json"],
    "lint file": ["lint", "run.yaml"],
    "lint missing file": ["lint", "no-such.yaml"],
    "diff": ["diff", "--recipe", RECIPE, "--gpus-after", "128"],
    "recipes": ["recipes", "--model", "llama3_70b", "--gpu", "h100"],
    "recipes json": ["recipes", "--format", "json"],
    "explain": ["explain", "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL"],
    "explain unknown": ["explain", "TP_OVERLAP_OFF_NO_SEQUENCE_PARALEL"],
    "explain non-ascii": ["explain", "\u00dcBER_\u202eX"],
    "explain undecodable": ["explain", b"\xff\xfeX"],
    "presets": ["presets", "--format", "json"],
    "releases": ["releases"],
}


def launch(*args, env: dict, cwd=ROOT, launcher=ROOT / "scripts" / "mbridge-overlap") -> subprocess.CompletedProcess:
    """A command as SKILL.md runs it; the time-out fails a test whose server kept the caller's pipes open."""
    return subprocess.run([sys.executable, str(launcher), *args], cwd=cwd, env=env, capture_output=True, timeout=120)


def status(env: dict, launcher=ROOT / "scripts" / "mbridge-overlap") -> dict:
    proc = launch("server", "--format", "json", env=env, launcher=launcher)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    check("server", d)
    return d


def wait_for(env: dict, running: bool, launcher=ROOT / "scripts" / "mbridge-overlap", seconds: float = 30) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        d = status(env, launcher)
        if d["running"] == running or time.monotonic() > deadline:
            return d
        time.sleep(0.2)


@pytest.fixture
def env(tmp_path):
    runtime = Path(tempfile.mkdtemp(prefix="mbo-", dir="/tmp"))  # short: a Unix socket's path has at most 107 bytes
    env = {**os.environ, "MBRIDGE_OVERLAP_SERVER": "1", "XDG_RUNTIME_DIR": str(runtime), "COLUMNS": "100",
           "CUDA_DEVICE_MAX_CONNECTIONS": "32", "MBRIDGE_TEST_UNDECODABLE": os.fsdecode(b"\xfe\xff")}
    yield env
    for launcher in (ROOT / "scripts" / "mbridge-overlap", tmp_path / "skill" / "scripts" / "mbridge-overlap"):
        if launcher.exists():
            d = status(env, launcher)
            launch("server", "stop", env=env, launcher=launcher)
            if d["running"]:
                try:
                    os.kill(d["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
    shutil.rmtree(runtime, ignore_errors=True)


def test_a_served_answer_is_the_answer_of_the_callers_own_process(env, tmp_path):
    shutil.copy(ROOT / "tests" / "data" / "run_configs" / "baseline.yaml", tmp_path / "run.yaml")
    alone = {**env, "MBRIDGE_OVERLAP_SERVER": "0"}
    expected = {name: launch(*argv, env=alone, cwd=tmp_path) for name, argv in CASES.items()}
    assert not status(env)["running"]
    first = launch(*CASES["explain"], env=env, cwd=tmp_path)  # answered here, and a server started
    assert (first.returncode, first.stdout) == (expected["explain"].returncode, expected["explain"].stdout)
    assert wait_for(env, running=True)["running"]
    for name, argv in CASES.items():
        got = launch(*argv, env=env, cwd=tmp_path)
        want = expected[name]
        assert (got.returncode, got.stdout.decode(), got.stderr.decode()) == (want.returncode, want.stdout.decode(), want.stderr.decode()), name
    assert status(env)["answered"] >= len(CASES)


def test_stdin_and_output_are_never_served(env, tmp_path):
    launch(*CASES["explain"], env=env)
    before = wait_for(env, running=True)["answered"]
    out = tmp_path / "plan.yaml"
    proc = launch("plan", "--tp", "2", "--gpus", "8", "--outp", str(out), env=env)
    assert proc.returncode == 0 and out.exists(), proc.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mbridge-overlap"), "lint", "-"], input=b"", env=env,
                          capture_output=True, timeout=120)
    assert proc.returncode == 2
    assert status(env)["answered"] == before


def test_a_changed_file_stops_the_server_before_it_answers(env, tmp_path):
    skill = tmp_path / "skill"
    for part in ("mbridge_overlap", "templates", "scripts"):
        shutil.copytree(ROOT / part, skill / part, ignore=shutil.ignore_patterns("__pycache__"))
    launcher = skill / "scripts" / "mbridge-overlap"
    launch(*CASES["explain"], env=env, launcher=launcher)
    old = wait_for(env, running=True, launcher=launcher)
    text = skill / "mbridge_overlap" / "text.py"
    text.write_text(text.read_text(encoding="utf-8").replace('"answer server: ', '"the answer server: '), encoding="utf-8")
    proc = launch("explain", "MODE_LEFT_OFF", env=env, launcher=launcher)
    assert proc.returncode == 0
    new = wait_for(env, running=True, launcher=launcher)
    assert new["pid"] != old["pid"] and new["answered"] == 0
    shown = launch("server", env=env, launcher=launcher)
    assert shown.stdout.decode().startswith("the answer server: running")  # the new code, as the server's answer


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_the_server_answers_in_the_memory_of_the_answers_before(env):
    """glibc keeps what an answer frees (mbridge_overlap/malloc.py): the whole listing, served again, maps its 1.6 MB
    of text into memory freed before, not into new pages (with glibc's own thresholds: about 860 faults each)."""
    launch(*CASES["explain"], env=env)
    pid = wait_for(env, running=True)["pid"]
    time.sleep(2)  # the server's warm-up
    for _ in range(2):
        launch(*CASES["recipes json"], env=env)

    def faults() -> int:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[7])  # minflt, the 10th field

    for _attempt in range(3):  # a warm-up step the server ran between two answers counts once, not again
        before = faults()
        for _ in range(5):
            assert launch(*CASES["recipes json"], env=env).returncode == 0
        per_answer = (faults() - before) / 5
        if per_answer < 300:
            break
    assert per_answer < 300


def test_an_idle_server_stops(env):
    env = {**env, "MBRIDGE_OVERLAP_SERVER_IDLE_S": "1"}
    launch(*CASES["explain"], env=env)
    assert not wait_for(env, running=False, seconds=60)["running"]


def test_stop(env):
    launch(*CASES["explain"], env=env)
    d = wait_for(env, running=True)
    stopped = launch("server", "stop", "--format", "json", env=env)
    assert json.loads(stopped.stdout)["stopped"] is True
    assert not wait_for(env, running=False)["running"]
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(d["pid"], 0)
            time.sleep(0.1)


def test_no_server_where_its_folder_is_not_private(env, tmp_path):
    folder = Path(env["XDG_RUNTIME_DIR"]) / "mbridge-overlap"
    folder.mkdir()
    folder.chmod(0o777)
    proc = launch(*CASES["explain"], env=env)
    assert proc.returncode == 0
    d = status(env)
    assert d["socket"] is None and not d["running"]
    assert list(folder.iterdir()) == []


def test_switched_off_nothing_is_started(env):
    off = {**env, "MBRIDGE_OVERLAP_SERVER": "0"}
    launch(*CASES["explain"], env=off)
    d = status(off)
    assert d["enabled"] is False and not d["running"]
    assert not (Path(env["XDG_RUNTIME_DIR"]) / "mbridge-overlap").exists()


def test_a_caller_under_other_resource_limits_is_not_served(env):
    import resource

    launch(*CASES["explain"], env=env)
    before = wait_for(env, running=True)["answered"]

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mbridge-overlap"), *CASES["explain"]], env=env,
                          capture_output=True, timeout=120, preexec_fn=limit)
    assert proc.returncode == 0 and proc.stdout.startswith(b"TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL")
    assert status(env)["answered"] == before


def test_a_served_answer_goes_into_the_callers_own_open_file(env, tmp_path):
    """The server writes through the caller's file descriptors: into a file opened for appending, after what the
    file held, as the caller's own process writes."""
    launch(*CASES["explain"], env=env)
    wait_for(env, running=True)
    want = launch(*CASES["presets"], env={**env, "MBRIDGE_OVERLAP_SERVER": "0"}).stdout
    out = tmp_path / "answers.txt"
    out.write_bytes(b"before\n")
    with open(out, "ab") as fh:
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mbridge-overlap"), *CASES["presets"]], env=env,
                              stdout=fh, stderr=subprocess.PIPE, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == b"before\n" + want
    assert status(env)["answered"] >= 1


def blocked_caller(env: dict, stderr) -> tuple[subprocess.Popen, int]:
    """(a caller whose answer the server is writing into a full pipe, the read end of that pipe)."""
    read_end, write_end = full_pipe()
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "mbridge-overlap"), "recipes", "--format", "json"],
                            stdout=write_end, stderr=stderr, env=env)
    os.close(write_end)
    return proc, read_end


def test_a_caller_killed_while_its_pipe_is_full_leaves_no_pipe_held(env):
    """The server blocked writing into a caller's full pipe: the caller is killed (SIGTERM: 128 + 15), and its pipes
    reach their end (the server lets go of them) instead of hanging whoever reads them; the server answers on."""
    launch(*CASES["explain"], env=env)
    before = wait_for(env, running=True)["answered"]
    proc, read_end = blocked_caller(env, subprocess.PIPE)
    try:
        time.sleep(1.5)
        assert proc.poll() is None  # still waiting for its answer, which waits for the pipe
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
        ready, _, _ = select.select([proc.stderr], [], [], 10)
        assert ready and proc.stderr.read() == b""  # the end of the pipe within 10 s: nobody holds it
    finally:
        proc.kill() if proc.poll() is None else None
        os.close(read_end)
    again = launch(*CASES["explain"], env=env)
    assert again.returncode == 0 and status(env)["answered"] >= before + 1


def test_a_caller_that_gives_up_on_a_busy_server_leaves_it_none_of_its_pipes(env):
    """A server blocked writing into one caller's full pipe: the next caller runs its command itself after ACCEPT_S
    (from server.py), and its output reaches its end then, not when the server gets to its request."""
    from mbridge_overlap import server

    launch(*CASES["explain"], env=env)
    wait_for(env, running=True)
    blocked, read_end = blocked_caller(env, subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        assert blocked.poll() is None  # the server is writing its answer into the full pipe
        began = time.monotonic()
        second = launch(*CASES["explain"], env=env)
        assert second.returncode == 0 and b"TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL" in second.stdout
        assert time.monotonic() - began < server.ACCEPT_S + 5
    finally:
        blocked.kill()
        blocked.wait(10)
        os.close(read_end)


def test_a_caller_in_another_mount_namespace_is_not_served(env):
    """A caller that sees another file system (another mount namespace: a container sharing /tmp) runs the command
    itself, and starts no rival server."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --mount is not available to this user")
    launch(*CASES["explain"], env=env)
    before = wait_for(env, running=True)["answered"]
    proc = subprocess.run([unshare, "--mount", sys.executable, str(ROOT / "scripts" / "mbridge-overlap"), *CASES["explain"]],
                          env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith(b"TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL"), proc.stderr
    d = status(env)
    assert d["answered"] == before and d["running"]
