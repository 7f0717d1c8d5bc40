"""Hostile input, round ten (fuzzG): each case failed before its fix."""

from __future__ import annotations

import os
import subprocess
import sys

from hostile_kit import ROOT, assert_one_line, run_cli

RUNS = ROOT / "tests" / "data" / "run_configs"
TRACE = ROOT / "tests" / "data" / "logs"  # any existing path: trace's flags are refused before reading


def test_trace_refuses_config_flags_without_a_config():
    # G4: --model, --gpu, --shape and --gpus were taken and ignored (an unknown model too), exit 0
    for flags in (["--model", "nosuchmodel"], ["--gpu", "\x1b[31mh999"], ["--shape", "num_layers=7"], ["--gpus", "4"]):
        proc = run_cli("trace", str(RUNS / "baseline.yaml"), *flags)
        assert proc.returncode == 2, flags
        assert_one_line(proc)
        assert "go" in proc.stderr.decode() and "with --config or --recipe" in proc.stderr.decode()
        assert "\x1b" not in proc.stderr.decode()


def test_a_non_ascii_key_in_a_saved_run_config_is_refused_not_skipped(tmp_path):
    # G5: a Cyrillic i in tensor_model_parallel_size was skipped as another release's field: the answer was for TP=1
    line = "  tensor_model_parallel_size: 4\n"
    text = (RUNS / "baseline.yaml").read_text()
    assert line in text
    bad = tmp_path / "run_config.yaml"
    bad.write_text(text.replace(line, line.replace("size", "s\u0456ze")), encoding="utf-8")
    proc = run_cli("lint", str(bad))
    assert proc.returncode == 2
    assert_one_line(proc)
    err = proc.stderr.decode()
    assert "tensor_model_parallel_s\\u0456ze" in err and "did you mean 'tensor_model_parallel_size'" in err
    assert run_cli("lint", str(RUNS / "baseline.yaml")).returncode in (0, 1)


def test_diff_says_first_that_before_does_not_run():
    # G12: BEFORE on 3 GPUs (not a multiple of TP x PP) was diffed as if it ran, its refusal only in the budget line
    import json

    proc = run_cli("diff", str(RUNS / "baseline.yaml"), str(RUNS / "tp1.yaml"), "--gpus-before", "3", "--format", "json")
    d = json.loads(proc.stdout)
    assert d["warnings"][0].startswith("BEFORE fails at config as it is given: GPUS_NOT_DIVISIBLE")
    proc = run_cli("diff", str(RUNS / "baseline.yaml"), str(RUNS / "tp1.yaml"))
    assert "BEFORE fails" not in proc.stdout.decode()


def test_check_manifest_reads_a_crlf_skill_md(tmp_path):
    # G11: "must start with a '---' line" for a file that does, with CRLF line ends
    crlf = tmp_path / "SKILL.md"
    crlf.write_bytes((ROOT / "SKILL.md").read_bytes().replace(b"\n", b"\r\n"))
    proc = run_cli("check-manifest", str(crlf))
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_a_source_line_no_release_ships_is_not_parsed():
    # G3: a 200,000-term a+a+... line crashed Python 3.10's parser (SIGSEGV), uncatchable in the process
    import pytest

    from mbridge_overlap.upstream import fingerprint

    with pytest.raises(ValueError, match="not its source"):
        fingerprint._parse("x = " + "+".join(["a"] * 200_000))
    assert fingerprint._parse("x = a + a\n").body


def test_a_relative_cache_home_writes_nothing_into_the_working_directory(tmp_path):
    # G9: XDG_CACHE_HOME=. put the bytecode cache into the working directory (the skill folder, run from there)
    env = {**os.environ, "XDG_CACHE_HOME": "."}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mbridge-overlap"), "explain", "TP_OVERLAP_OFF_TP_SIZE"],
                          cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert list(tmp_path.iterdir()) == []


def test_a_number_yaml_reads_as_text_is_told_how_to_write_it(tmp_path):
    # G8: an unquoted 1e10 was told to "write it without quotes": it has none; YAML 1.1 reads the form as text
    # (1e10 is a float to OmegaConf's loader, which Bridge reads configs with: not an integer, as Bridge's field is)
    for text, says in (('{"ddp": {"bucket_size": 1e10}}\n', "expected an integer"),
                       ('ddp:\n  bucket_size: "100"\n', "write it without quotes")):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(text)
        proc = run_cli("resolve", "--config", str(cfg), "--gpus", "8")
        assert proc.returncode == 2
        assert_one_line(proc)
        assert says in proc.stderr.decode()


def test_a_cut_off_configuration_summary_is_said_as_cut_off(tmp_path):
    # G10: a summary block past MAX_BLOCK_LINES read as "the log holds no Bridge configuration summary"
    import json

    from mbridge_overlap.diagnose.summary import MAX_BLOCK_LINES

    log = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2" / "tp_overlap_default_ub_cfg.log"
    head = "[model] Non-default values (vs Mcore TransformerConfig):\n"
    text = log.read_text()
    assert head in text
    filler = "".join(f"  field_{i}: {i}  (Mcore default: None)\n" for i in range(MAX_BLOCK_LINES + 10))
    cut = tmp_path / "cut.log"
    cut.write_text(text.replace(head, head + filler, 1))
    notes = json.loads(run_cli("diagnose", str(cut), "--format", "json").stdout)["notes"]
    assert any(f"summary is cut off after {MAX_BLOCK_LINES:,} lines" in n for n in notes), notes
    plain = tmp_path / "plain.log"
    plain.write_text("just a line\n")
    notes = json.loads(run_cli("diagnose", str(plain), "--format", "json").stdout)["notes"]
    assert any("holds no Bridge configuration summary" in n for n in notes), notes


def test_trace_compare_names_the_side_that_lacks_a_rank(tmp_path):
    # G6: "--rank 3: not in the traces given (ranks there: 1)" did not say that BEFORE has rank 3 and AFTER has not
    import gzip
    import json

    def rank_file(rank: int):
        doc = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4}, "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
             "args": {"stream": 7, "correlation": 1}}]}
        path = tmp_path / f"rank-{rank}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
        return str(path)

    before, after = rank_file(3), rank_file(1)
    proc = run_cli("trace", "--compare", before, after, "--rank", "3")
    assert proc.returncode == 2
    assert_one_line(proc)
    assert "AFTER: --rank 3: not in the traces given (ranks there: 1)" in proc.stderr.decode()
