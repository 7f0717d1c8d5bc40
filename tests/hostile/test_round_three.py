"""Hostile input, round three (issue 32): the classes a held-back corpus broke, generated here, no data files.

Classes (CASES has the counts): credentials (a command reads a file with the caller's privileges: what the caller
may not read is "permission denied"), encodings (logs in UTF-16 and UTF-32 with a byte-order mark, CR-only line ends:
read, with a note), foreign_traces (a trace of no job among a job's ranks, ranks of different steps: a note),
numbers (ranks, steps and GPU counts in ASCII digits, within the plausible), folders (a log many folders down, a
folder of more log files than are read), help_into_closed_pipes (every verb's --help into a pipe whose reader went
away), append_only (--output into an append-only folder), venv_build_lock (two builds of the Bridge venv at once).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile_kit import ROOT, assert_clean_stderr, assert_one_line, cli_env, run_cli

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from mbridge_overlap.cli import VERBS  # noqa: E402
from trace_fixtures import TraceBuilder, nccl  # noqa: E402

CASES: dict[str, int] = {}
LOG = ROOT / "tests" / "data" / "logs" / "upstream" / "bridge650_multicast_not_supported_ub_skipmc.log"
CAUSE = "UB_NEEDS_MULTICAST"  # what diagnose names in LOG


def count(cls: str, items: list) -> list:
    CASES[cls] = CASES.get(cls, 0) + len(items)
    return items


def diagnose_json(path: Path) -> dict:
    proc = run_cli("diagnose", path, "--format", "json", env=cli_env())
    assert proc.returncode == 1, proc.stderr.decode()
    return json.loads(proc.stdout)


# --- credentials: no process reads for another -----------------------------------------------------------------

def _drop(how: str) -> list[str] | None:
    """A prefix that runs a command with fewer privileges than this test, where this machine can."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    if how == "no_capabilities":  # root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH
        return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
    if how == "nobody":
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    return None


CREDENTIALS = count("credentials", ["no_capabilities", "nobody"])


@pytest.mark.parametrize("how", CREDENTIALS)
def test_a_file_the_caller_may_not_read_is_permission_denied(tmp_path, how):
    prefix = _drop(how)
    if prefix is None:
        pytest.skip("needs root and setpriv to run a command with fewer privileges than the test's")
    probe = subprocess.run([*prefix, sys.executable, "-c", "import yaml, jinja2"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this Python cannot run the skill as {how}: {probe.stderr.strip().splitlines()[-1:]}")
    tmp_path.chmod(0o755)
    secret = tmp_path / "run_config.yaml"
    secret.write_text("model:\n  tensor_model_parallel_size: 4\n  seq_length: 31337\n")
    secret.chmod(0o000)
    first = run_cli("resolve", "--config", secret, "--gpus", "8", env=cli_env())  # this test's own command reads it
    assert first.returncode in (0, 1), first.stderr.decode()
    proc = subprocess.run([*prefix, sys.executable, "-m", "mbridge_overlap", "resolve", "--config", str(secret), "--gpus", "8"],
                          cwd=ROOT, capture_output=True, env=cli_env())
    assert proc.returncode == 2 and b"permission denied" in proc.stderr.lower(), proc.stderr.decode()
    assert b"31337" not in proc.stdout + proc.stderr
    assert_one_line(proc)


# --- encodings and line ends of logs -------------------------------------------------------------------------------

ENCODINGS = count("encodings", [
    ("utf16_le_bom", lambda t: b"\xff\xfe" + t.encode("utf-16-le"), "UTF-16-LE"),
    ("utf16_be_bom", lambda t: b"\xfe\xff" + t.encode("utf-16-be"), "UTF-16-BE"),
    ("utf32_le_bom", lambda t: b"\xff\xfe\x00\x00" + t.encode("utf-32-le"), "UTF-32-LE"),
    ("utf32_be_bom", lambda t: b"\x00\x00\xfe\xff" + t.encode("utf-32-be"), "UTF-32-BE"),
    ("utf8_bom", lambda t: b"\xef\xbb\xbf" + t.encode(), None),
    ("cr_only", lambda t: t.replace("\n", "\r").encode(), "carriage returns"),
    ("crlf", lambda t: t.replace("\n", "\r\n").encode(), None),
    ("utf16_cr_only", lambda t: b"\xff\xfe" + t.replace("\n", "\r").encode("utf-16-le"), "carriage returns"),
])


@pytest.mark.parametrize("name, encode, note", ENCODINGS, ids=[e[0] for e in ENCODINGS])
def test_a_log_in_another_encoding_is_read_with_a_note(tmp_path, name, encode, note):
    path = tmp_path / f"{name}.log"
    path.write_bytes(encode(LOG.read_text(encoding="utf-8")))
    d = diagnose_json(path)
    assert CAUSE in [c["id"] for c in d["causes"]]
    if note:
        assert any(note in n for n in d["notes"]), d["notes"]
    else:
        assert not any("byte-order" in n or "carriage" in n for n in d["notes"])


# --- foreign and mismatched traces among a job's ranks ---------------------------------------------------------------

def _rank_trace(path: Path, rank: int, world: int = 2, first_step: int = 1, distributed: bool = True) -> None:
    b = TraceBuilder(rank=rank, world_size=world, distributed=distributed)
    for s in range(3):
        t0 = s * 1000
        b.step(first_step + s, t0, t0 + 1000)
        b.kernel("sm90_gemm", t0 + 10, t0 + 500)
        b.kernel(nccl("AllGather"), t0 + 100, t0 + 300, stream=20)
    b.write(path)


FOREIGN = count("foreign_traces", ["no_distributed_info_among_ranks", "ranks_of_different_steps"])


@pytest.mark.parametrize("case", FOREIGN)
def test_traces_that_are_not_one_capture_get_a_note(tmp_path, case):
    _rank_trace(tmp_path / "rank-0.json", 0)
    if case == "no_distributed_info_among_ranks":
        _rank_trace(tmp_path / "rank-1.json", 1)
        _rank_trace(tmp_path / "other.json", 0, distributed=False)
        says = "no distributedInfo"
    else:
        _rank_trace(tmp_path / "rank-1.json", 1, first_step=20)
        says = "different ProfilerSteps"
    proc = run_cli("trace", tmp_path, "--format", "json", env=cli_env())
    assert proc.returncode == 0, proc.stderr.decode()
    assert any(says in n for n in json.loads(proc.stdout)["notes"])
    text = run_cli("trace", tmp_path, env=cli_env())
    assert says in text.stdout.decode()


# --- numbers -------------------------------------------------------------------------------------------------------

NUMBERS = count("numbers", [
    ("trace", "--rank", "\u0661"), ("trace", "--rank", "0,\u0968"), ("trace", "--rank", "99999999999"),
    ("trace", "--snippet", "python", "--steps", "\u0661-\u0663"), ("trace", "--snippet", "python", "--rank", "\uff11"),
    ("plan", "--tp", "2", "--gpus", "123456789012345678901234567890"), ("plan", "--tp", "2", "--gpus", "2000000"),
    ("resolve", "--gpus", "1048577"), ("plan", "--tp", "2", "--gpus", "8", "--nvlink-domain", "9999999"),
    ("diff", "--recipe", "llama3_8b_pretrain_8gpu_h100_bf16_config", "--gpus-after", "4194304"),
])


@pytest.mark.parametrize("argv", NUMBERS, ids=[" ".join(a).encode("ascii", "backslashreplace").decode() for a in NUMBERS])
def test_numbers_are_ascii_digits_within_what_a_machine_has(argv, tmp_path):
    if argv[0] == "trace" and "--snippet" not in argv:
        _rank_trace(tmp_path / "rank-1.json", 1)
        argv = (*argv, tmp_path)
    proc = run_cli(*argv, env=cli_env())
    assert proc.returncode == 2, proc.stdout[:300]
    assert_one_line(proc)


def test_the_largest_plausible_world_size_is_answered():
    proc = run_cli("plan", "--tp", "8", "--gpus", "1048576", "--format", "json", env=cli_env())
    assert proc.returncode == 0 and json.loads(proc.stdout)["layout"]["gpus"] == 1048576


# --- deep and huge folders -------------------------------------------------------------------------------------------

FOLDERS = count("folders", ["log_12_folders_down", "log_30_folders_down", "more_logs_than_read"])


@pytest.mark.parametrize("case", FOLDERS)
def test_folders_deep_and_huge(tmp_path, case):
    from mbridge_overlap.diagnose import reader

    if case == "more_logs_than_read":
        folder = tmp_path / "many"
        folder.mkdir()
        for i in range(reader.MAX_FILES + 1):
            (folder / f"rank{i}.log").touch()
        start = time.monotonic()
        proc = run_cli("diagnose", folder, env=cli_env(), timeout=120)
        assert proc.returncode == 2 and b"over 20,000 log files" in proc.stderr
        assert_one_line(proc)
        assert time.monotonic() - start < 60
        return
    depth = 12 if case == "log_12_folders_down" else 30
    folder = tmp_path.joinpath(*[f"d{i}" for i in range(depth)])
    folder.mkdir(parents=True)
    shutil.copy(LOG, folder / "rank0.log")
    d = diagnose_json(tmp_path)
    assert CAUSE in [c["id"] for c in d["causes"]]


def test_a_log_deeper_than_is_read_is_named_as_such(tmp_path):
    from mbridge_overlap.diagnose import reader

    folder = tmp_path.joinpath(*[f"d{i}" for i in range(reader.MAX_DEPTH + 2)])
    folder.mkdir(parents=True)
    shutil.copy(LOG, folder / "rank0.log")
    proc = run_cli("diagnose", tmp_path, env=cli_env())
    assert proc.returncode == 2 and f"more than {reader.MAX_DEPTH} levels down".encode() in proc.stderr
    assert_one_line(proc)


# --- --help into a pipe whose reader went away -------------------------------------------------------------------------

HELP = count("help_into_closed_pipes", [[], *[[verb] for verb in VERBS]])


@pytest.mark.parametrize("argv", HELP, ids=["main"] + list(VERBS))
def test_help_into_a_closed_pipe_is_quiet(argv):
    reader_fd, writer_fd = os.pipe()
    os.close(reader_fd)  # the reader went away before anything was written
    try:
        proc = subprocess.run([sys.executable, "-m", "mbridge_overlap", *argv, "--help"], cwd=ROOT, stdout=writer_fd,
                              stderr=subprocess.PIPE, env=cli_env(), timeout=60)
    finally:
        os.close(writer_fd)
    assert proc.returncode == 0, proc.stderr.decode()
    assert_clean_stderr(proc)
    assert proc.stderr == b""


# --- --output into an append-only folder -----------------------------------------------------------------------------

APPEND_ONLY = count("append_only", ["new_file", "existing_file_with_force"])


@pytest.fixture
def append_only(tmp_path):
    folder = tmp_path / "ao"
    folder.mkdir()
    (folder / "plan.txt").write_text("the user's\n")
    made = subprocess.run(["chattr", "+a", str(folder)], capture_output=True) if shutil.which("chattr") else None
    if made is None or made.returncode != 0:
        pytest.skip("chattr +a is not available here (needs root and a file system with attributes)")
    yield folder
    subprocess.run(["chattr", "-a", str(folder)], capture_output=True)


@pytest.mark.parametrize("case", APPEND_ONLY)
def test_output_into_an_append_only_folder(append_only, case):
    name = "new.txt" if case == "new_file" else "plan.txt"
    flags = ["--force"] if case != "new_file" else []
    proc = run_cli("plan", "--tp", "2", "--gpus", "8", "--output", append_only / name, *flags, env=cli_env())
    left = sorted(p.name for p in append_only.iterdir())
    if case == "new_file":
        assert proc.returncode == 0 and left == ["new.txt", "plan.txt"], proc.stderr.decode()
    else:
        assert proc.returncode == 2 and b"append-only" in proc.stderr, proc.stderr.decode()
        assert_one_line(proc)
        assert left == ["plan.txt"] and (append_only / "plan.txt").read_text() == "the user's\n"


# --- two builds of the Bridge venv at once ---------------------------------------------------------------------------

LOCK = count("venv_build_lock", ["second_build_waits_for_the_first"])


def test_a_second_build_of_the_bridge_venv_waits_for_the_first(tmp_path):
    venv = tmp_path / "venv-mbridge"
    lock = open(f"{venv}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # a build under way
    proc = subprocess.Popen([str(ROOT / "scripts" / "bridge_env.sh"), "--print-python"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "MBRIDGE_VENV": str(venv)}, start_new_session=True)
    try:
        time.sleep(3)
        assert proc.poll() is None, proc.stderr.read().decode()
        assert not venv.exists()  # it waits before it touches the venv
        fcntl.flock(lock, fcntl.LOCK_UN)
        deadline = time.monotonic() + 60
        while not venv.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert venv.exists(), "the second build never went on once the first let go"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        lock.close()
    err = proc.stderr.read().decode()
    assert "another process is building or checking" in err, err


# --- the communication budget's model shapes ---------------------------------------------------------------------------

BUDGET = ("budget", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "--model", "llama3_70b")
SHAPES = count("budget_shapes", [
    ("num_layers=0", "num_layers"), ("num_layers=-8", "whole number"), ("num_layers=1.5", "whole number"),
    ("num_layers=999999999", "num_layers"), ("hidden_size=0", "hidden_size"), ("hidden_size=99999999", "hidden_size"),
    ("num_attention_heads=0", "num_attention_heads"), ("num_attention_heads=7", "num_attention_heads"),
    ("num_query_groups=3", "num_query_groups"), ("vocab_size=100000000", "vocab_size"), ("ffn_hidden_size=nan", "whole number"),
    ("num_attention_heads=66", "num_attention_heads"), ("gated_linear_unit=2", "gated_linear_unit"), ("num_moe_experts=0", "num_moe_experts"),
    ("moe_router_topk=9999", "moe_router_topk"), ("num_layers=\x1b[31m", "whole number"), ("=4", "KEY=VALUE"),
    ("hidden_size", "KEY=VALUE"),
])


@pytest.mark.parametrize("token, word", SHAPES, ids=[t.encode("unicode_escape").decode() for t, _ in SHAPES])
def test_an_impossible_model_shape_is_one_line(token, word):
    proc = run_cli(*BUDGET, "--shape", token)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc)
    assert word in proc.stderr.decode()


def test_a_huge_batch_is_arithmetic_not_memory():
    # the largest the budget takes (fuzzI I7 bounded it at 2**24 sequences: 2**40 was costed)
    proc = run_cli(*BUDGET, f"train.global_batch_size={1 << 24}", "--format", "json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert_clean_stderr(proc)
    assert json.loads(proc.stdout)["budget"]["layout"]["micro_batches"] == (1 << 24) // 2
