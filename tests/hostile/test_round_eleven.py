"""Hostile input, round eleven (fuzzH): each case failed before its fix. The gzip bombs (H1, H2) are cases of
test_diagnose_hostile.py and test_trace_hostile.py; the worker count (H7) is held in test_diagnose_blocks.py; the
hydra lines given back (H8) in test_plan.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hostile_kit import ROOT, assert_one_line, cli_env, run_cli

LOG = ROOT / "tests" / "data" / "logs" / "upstream" / "mlm735_allreduce_timeout_moe.log"
MPI = ["--gpus", "8", "model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
       "comm_overlap.tp_comm_overlap=true", "comm_overlap.tp_comm_bootstrap_backend=mpi"]


def test_a_fifo_where_torch_s_library_is_looked_for_does_not_hang(tmp_path):
    # H3: the MPI check opened the Bridge venv's libtorch_cpu.so with open(), which blocks on a FIFO forever
    lib = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "torch" / "lib"
    lib.mkdir(parents=True)
    os.mkfifo(lib / "libtorch_cpu.so")
    proc = run_cli("resolve", *MPI, "--format", "json", env=cli_env(MBRIDGE_VENV=str(tmp_path / "venv")), timeout=60)
    assert proc.returncode in (0, 1), proc.stderr[-500:]


def test_a_relative_cache_home_is_never_the_working_directory(tmp_path, monkeypatch):
    # H4: XDG_CACHE_HOME=. made `anchors --mbridge-src` run ./nemo-mbridge-perf-tp-dp-comm-overlap/venv-.../bin/python
    from mbridge_overlap import safeio
    from mbridge_overlap.upstream import anchors

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", ".")
    monkeypatch.delenv("MBRIDGE_VENV", raising=False)
    planted = tmp_path / anchors.VENV_CACHE / "venv-mbridge-0.6.2" / "bin" / "python"
    planted.parent.mkdir(parents=True)
    planted.write_text("#!/bin/sh\ntouch planted-ran\n")
    planted.chmod(0o755)
    assert safeio.cache_home() == os.path.join(os.path.expanduser("~"), ".cache")
    found = anchors.bridge_python("0.6.2")
    assert found is None or not str(found.resolve()).startswith(str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert safeio.cache_home() == str(tmp_path)


@pytest.mark.parametrize("args", [
    ["--expect-passed", "\u00b2"], ["--expect-passed", "9" * 5000], ["--expect-passed", "x=\x1b]0;pwned\x07\n5"],
    ["--expect-passed", "\x1b[31m5"], ["--tp", "\u0663"], ["--bogus"], ["--cases", "+8"],
])
def test_verify_s_arguments_get_one_escaped_line(args):
    # H5: tracebacks ('²' passed isdigit()), raw escapes on the terminal, a non-ASCII digit taken as 3, five lines of usage
    proc = subprocess.run([sys.executable, "-m", "mbridge_overlap.bridge.verify", *args], cwd=ROOT, capture_output=True,
                          timeout=60, env=cli_env())
    assert proc.returncode == 2 and args[0].encode() in proc.stderr  # refused for the flag, before Bridge is looked for
    assert_one_line(proc)


def test_saved_snippets_never_write_through_a_link_nor_into_a_fifo(tmp_path):
    # H6: --save-snippets followed a dangling link out of the folder, overwrote a file through a link with --force,
    # blocked on a FIFO, and wrote the first snippets before refusing a later one
    from mbridge_overlap.bridge.verify import save_snippets
    from mbridge_overlap.errors import UsageError

    folder = tmp_path / "d"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (folder / "python.py").symlink_to(victim)
    (folder / "overrides.yaml").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(UsageError, match="exists"):
        save_snippets(str(folder), {"yaml": "Y\n"}, False)
    assert not (tmp_path / "elsewhere.txt").exists()
    save_snippets(str(folder), {"python": "P\n"}, True)
    assert victim.read_text() == "precious" and (folder / "python.py").read_text() == "P\n"
    os.mkfifo(folder / "env.sh")
    with pytest.raises(UsageError, match="FIFO"):
        save_snippets(str(folder), {"hydra": "H\n", "env": "E\n"}, True)
    assert not (folder / "hydra.txt").exists()


@pytest.mark.parametrize("override", ["model.recompute_modules=", "dataset.seq_length=", "model.cp_comm_type= ",
                                      "model.pipeline_model_parallel_layout="])
def test_an_empty_value_is_a_mistake(override):
    # H9: '' became [''] or null for some kinds, against the README
    proc = run_cli("resolve", "--gpus", "8", override)
    assert proc.returncode == 2 and b"an empty value" in proc.stderr
    assert_one_line(proc)


@pytest.mark.parametrize("value", [" 8", "+8", "8\n", "99999999999999999999"])
def test_numeric_flags_take_ascii_digits_within_bounds(value):
    # H10: ' 8', '+8' and '8\n' were taken, and TP 10^20 answered
    proc = run_cli("plan", "--gpus", "8", "--tp", value)
    assert proc.returncode == 2
    assert_one_line(proc)


def test_a_look_alike_key_says_it_holds_non_ascii_characters():
    # H11: "X is not a field; did you mean X?" with a Cyrillic letter that renders as the Latin one
    for args in (["resolve", "--gpus", "8", "model.tensor_model_parallel_s\u0456ze=2"], ["explain", "TP_OVERLAP_OFF_TP_S\u0406ZE"]):
        proc = run_cli(*args)
        assert proc.returncode == 2 and b"non-ASCII" in proc.stderr
        assert_one_line(proc)


def test_a_log_named_twice_is_read_once_and_compare_says_both_sides_are_one(tmp_path):
    # H12: every cause's evidence was listed twice, and --compare A A gave +0.0% with no word
    import json

    once = json.loads(run_cli("diagnose", LOG, "--format", "json").stdout)
    twice = json.loads(run_cli("diagnose", LOG, f"./{LOG.relative_to(ROOT)}", "--format", "json").stdout)
    assert twice["lines"] == once["lines"] and twice["causes"] == once["causes"]
    same = json.loads(run_cli("diagnose", "--compare", LOG, LOG, "--format", "json").stdout)
    assert any("BEFORE and AFTER are the same log files" in n for n in same["notes"])


def test_a_missing_manifest_and_a_trace_link_loop_are_usage_errors(tmp_path):
    # H13: check-manifest exited 1 with its message on stdout; trace called a symlink loop "no such file"
    proc = run_cli("check-manifest", tmp_path / "missing.md")
    assert proc.returncode == 2
    assert_one_line(proc)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    proc = run_cli("trace", tmp_path / "a")
    assert proc.returncode == 2 and b"symbolic links" in proc.stderr
    assert_one_line(proc)


def test_anchors_names_the_source_folder_as_given_and_escaped(tmp_path):
    # H13 (the rest, recheck45): `--mbridge-src /dev/stdin` was named /dev/null (the resolved link), and a folder whose
    # name holds an escape sequence reached the terminal raw
    hostile = tmp_path / "src\x1b[31mX"
    hostile.mkdir()
    for given in (str(hostile), "/dev/stdin"):
        proc = run_cli("anchors", "--mbridge-src", given)
        assert proc.returncode == 2 and b"no src/megatron/bridge there" in proc.stderr
        assert_one_line(proc)
    assert b"/dev/stdin" in proc.stderr and b"/dev/null" not in proc.stderr
