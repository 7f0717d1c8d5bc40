"""Hostile input, round four: what a fresh fuzzing pass broke (each case failed before its fix).

A log of more distinct line shapes than diagnose remembers; sizes the checks accepted and the budget's floats could
not hold (a 400-digit batch in a saved run config or in a log's configuration summary); launch variables of more
digits than Python converts; Transformer Engine versions nothing checked; numbers that are not finite in JSON; lone
surrogates of a file name in JSON; fields of sections the resolver does not model; a model's name and shape keys
checked only when a budget was computed.
"""

from __future__ import annotations

import json
import random

import pytest

from hostile_kit import ROOT, assert_clean_stderr, assert_one_line, run_cli

RUNS = ROOT / "tests" / "data" / "run_configs"
LOG = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2" / "baseline_no_gpu.log"
HUGE = "9" * 400


def test_a_log_of_more_distinct_shapes_than_are_remembered_is_read(tmp_path, monkeypatch):
    """Shapes.of() forgets past MAX_SHAPES; it forgot the current block's own shapes too (KeyError in read_block)."""
    from mbridge_overlap import api
    from mbridge_overlap.diagnose import reader, shapes

    monkeypatch.setattr(shapes, "MAX_SHAPES", 64)
    monkeypatch.setattr(reader, "BLOCK", 1024)  # many blocks, each with the blank line's shape seen before
    rng = random.Random(0)
    lines = ["req " + "".join(rng.choice("abcdefgh") for _ in range(12)) + "\n\n" for _ in range(500)]
    lines.insert(250, "RuntimeError: UB: cannot create multicast objects; use UB_SKIPMC=1\n")
    log = tmp_path / "unique.log"
    log.write_text("".join(lines))
    report = api.diagnose([str(log)]).to_dict()
    assert report["lines"] == 1001


def test_the_same_log_through_the_cli_with_the_real_bound(tmp_path):
    rng = random.Random(1)
    log = tmp_path / "unique.log"
    log.write_text("".join("req " + "".join(rng.choice("abcdefgh") for _ in range(12)) + "\n\n" for _ in range(70_000)))
    proc = run_cli("diagnose", log, "--format", "json", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_clean_stderr(proc)
    assert json.loads(proc.stdout)["lines"] == 140_000


def _with(tmp_path, name: str, field: str) -> str:
    text = (RUNS / "baseline.yaml").read_text()
    lines = [f"  {field}: {HUGE}" if line.startswith(f"  {field}: ") else line for line in text.splitlines()]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("field", ["global_batch_size", "seq_length", "micro_batch_size"])
def test_a_saved_config_of_impossible_size_gets_no_budget_and_no_traceback(tmp_path, field):
    path = _with(tmp_path, "big.yaml", field)
    resolved = run_cli("resolve", "--config", path, "--format", "json")
    assert resolved.returncode in (0, 1), resolved.stderr
    assert_clean_stderr(resolved)
    assert "budget takes up to" in json.loads(resolved.stdout)["budget"]["unavailable"]
    budget = run_cli("budget", "--config", path)
    assert budget.returncode == 2
    assert_one_line(budget)
    assert field in budget.stderr.decode()


@pytest.mark.parametrize("argv, word", [
    (["plan", "--gpus", "8", "--model", "llama3_8b", "--seq-length", "9" * 160, "--global-batch-size", "8"], "--seq-length"),
    (["plan", "--gpus", "16", "--pp", "2", "--vpp", "9" * 320, "--model", "llama3_8b"], "--vpp"),
    (["plan", "--gpus", "8", "--tp", "2", "--hidden-size", "999999999"], "--hidden-size"),
    (["budget", "--model", "llama3_8b", "--gpus", "8", "model.seq_length=1" + "0" * 150, "dataset.seq_length=1" + "0" * 150,
      "train.global_batch_size=8"],
     "seq_length"),
])
def test_a_size_no_run_has_is_one_line(argv, word):
    _refused(argv, word)


def _refused(argv, word):
    proc = run_cli(*argv)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc)
    assert word in proc.stderr.decode()


def test_a_huge_batch_in_a_logged_summary_is_one_line(tmp_path):
    text = LOG.read_text()
    assert "  global_batch_size: 8\n" in text
    big = tmp_path / "big.log"
    big.write_text(text.replace("  global_batch_size: 8\n", f"  global_batch_size: {HUGE}\n", 1))
    proc = run_cli("diagnose", "--compare", LOG, big, "--gpus", "8")
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc)


@pytest.mark.parametrize("how", ["--launcher-env", "--shell-env", "env_vars"])
def test_a_launch_variable_of_thousands_of_digits_is_text_not_a_traceback(how):
    digits = "9" * 4301
    if how == "--launcher-env":
        proc = run_cli("plan", "--gpus", "8", "--launcher-env", f"CUDA_DEVICE_MAX_CONNECTIONS={digits}")
    elif how == "--shell-env":
        import os

        proc = run_cli("plan", "--gpus", "8", "--shell-env", env={**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": digits})
    else:  # a Hydra override past 4,300 digits is Hydra's refusal (recheck55 AB9), one line; 4,300 is text
        proc = run_cli("resolve", "--gpus", "8", f"++env_vars.NCCL_FOO={digits}", "--format", "json")
        assert proc.returncode == 2 and b"4,300" in proc.stderr
        assert_one_line(proc)
        proc = run_cli("resolve", "--gpus", "8", f"++env_vars.NCCL_FOO={digits[:4300]}", "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert_clean_stderr(proc)


@pytest.mark.parametrize("version, ok", [("2.20.2", True), ("2.9.0.dev0+abc", True), ("1.9.0.post1", True),
                                         ("-1", False), ("garbage", False), ("2.20\x1b[31m", False), ("9" * 5000, False)])
def test_a_transformer_engine_version_is_checked(version, ok):
    proc = run_cli("plan", "--gpus", "8", "--tp", "2", "--te-version", version)
    if ok:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 2
        assert_one_line(proc)
        assert "--te-version" in proc.stderr.decode()


def test_a_number_that_is_not_finite_is_the_text_bridge_exports(tmp_path):
    # (refused before; Hydra and OmegaConf type them as floats, and Bridge exports str() of them: fuzzQ Q8)
    proc = run_cli("resolve", "--gpus", "8", "++env_vars.NCCL_FOO=1e999", "--format", "json")
    assert proc.returncode in (0, 1) and json.loads(proc.stdout)["env_vars"]["NCCL_FOO"] == "inf"
    config = tmp_path / "nan.yaml"
    config.write_text("env_vars:\n  NCCL_FOO: .nan\n")
    proc = run_cli("diff", "--gpus", "8", RUNS / "baseline.yaml", config, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr


def test_json_output_is_valid_json_whatever_the_data():
    from mbridge_overlap.cli.options import to_json

    data = {"a": float("inf"), "b": [float("nan"), 1.5], "path": "rank3\udcff\udcfe.log", "emoji": "\U0001F600",
            "lone": "x\ud800y"}
    text = to_json(data)
    back = json.loads(text)
    text.encode("utf-8")  # no lone surrogate survives
    assert back["a"] == "inf" and back["b"] == ["nan", 1.5] and back["emoji"] == "\U0001F600"
    assert back["path"] == "rank3\\xff\\xfe.log" and "\\ud800" in back["lone"]


def test_a_file_name_of_undecodable_bytes_is_valid_json(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "rank3\udcff\udcfe.log").write_bytes(LOG.read_bytes())
    proc = run_cli("diagnose", folder, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    json.loads(proc.stdout.decode("utf-8"))  # strict UTF-8: a lone surrogate's escape would be refused here
    assert b"\\\\xff\\\\xfe" in proc.stdout


@pytest.mark.parametrize("argv, word", [
    (["resolve", "--gpus", "8", "logger.log_intervall=10"], "logger.log_interval"),
    (["resolve", "--gpus", "8", "scheduler.lr_warmup_iterz=5"], "scheduler.lr_warmup_iters"),
    (["plan", "--gpus", "8", "--model", "nosuchmodel"], "--model"),
    (["resolve", "--gpus", "8", "--shape", "bogus=1"], "bogus"),
    (["lint", str(RUNS / "baseline.yaml"), "--shape", "hidden_size=0"], "hidden_size"),
])
def test_an_unknown_key_or_name_is_one_line_even_where_nothing_reads_it(argv, word):
    _refused(argv, word)


def test_a_real_field_of_a_section_the_resolver_does_not_model_is_still_taken(tmp_path):
    proc = run_cli("resolve", "--gpus", "8", "logger.log_interval=10", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text("logger:\n  log_intervall: 10\n")
    proc = run_cli("resolve", "--gpus", "8", "--config", typo)
    assert proc.returncode == 2
    assert_one_line(proc)
    assert "log_interval" in proc.stderr.decode()


def test_jobs_of_thousands_of_digits_is_one_line():
    proc = run_cli("trace", "--jobs", "9" * 5000, str(RUNS))
    assert proc.returncode == 2
    assert_one_line(proc)
    assert "_jobs" not in proc.stderr.decode()


def test_a_device_on_standard_input_is_one_line():
    """`diagnose /dev/zero` was refused, `diagnose - < /dev/zero` read forever."""
    with open("/dev/zero", "rb") as zero:
        proc = run_cli("diagnose", "-", stdin=zero, timeout=20)
    assert proc.returncode == 2
    assert_one_line(proc)
    assert "device" in proc.stderr.decode()


def test_output_into_dev_shm_is_a_file_like_any_other(tmp_path):
    """Reading from /dev/shm was allowed, writing there refused: its folder itself resolved to /dev."""
    import os
    import uuid

    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    target = f"/dev/shm/mbridge-overlap-test-{uuid.uuid4().hex}.txt"
    try:
        proc = run_cli("plan", "--gpus", "8", "--output", target)
        assert proc.returncode == 0, proc.stderr
        assert os.path.getsize(target) > 0
    finally:
        if os.path.exists(target):
            os.unlink(target)
