"""Hostile input, round thirteen (fuzzJ): each case failed before its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hostile_kit import ROOT, count_findall, run_cli

from mbridge_overlap import api
from mbridge_overlap.diagnose import fuzzy
from mbridge_overlap.trace import attribution, kineto


def _shared_ranks_trace(path, ranks: int, kernels: int):
    """One CPU collective record with a long "Process Group Ranks" string (a group pg_config does not describe),
    shared through its External id by `kernels` NCCL kernels (fuzzJ's mk_ranks.py)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
               "args": {"External id": 5, "Process Group Name": "9", "Collective name": "allreduce",
                        "Process Group Ranks": str(list(range(ranks)))}}]
    events += [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 7,
                "ts": 10 + 2 * i, "dur": 1, "args": {"stream": 7, "correlation": i, "External id": 5}} for i in range(kernels)]
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}))
    return path


def test_a_group_s_ranks_are_read_once_however_many_kernels_share_them(tmp_path, monkeypatch):
    # J1: the ranks string was parsed once per kernel (and again under --config): 852 KB took 44 s
    calls = count_findall(monkeypatch, attribution)
    report = api.trace([_shared_ranks_trace(tmp_path / "t.json", 20_000, 400)]).to_dict()
    assert report["ranks"] and len(calls) <= 2, len(calls)


def test_a_repeated_step_event_is_kept_once(tmp_path):
    # J2: every ProfilerStep event was kept (150 bytes each): a 3 MB .json.gz took 3 GB
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {}}
    kernel = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"stream": 7, "correlation": 1}}
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"traceEvents": [kernel] + [dict(step, ts=1 + i) for i in range(20_000)]}))
    trace = kineto.load(path)
    assert len(trace.steps) == 1
    (start, end, latest), = trace.steps.values()
    assert (start, end, latest) == (1, 2, 20_000)  # the first span, and the latest start the step cutoff reads


def test_a_log_of_lines_full_of_only_is_read_in_linear_time(tmp_path):
    # J3: "\bonly\b.*\bwith\b" rescanned the rest of the line for every "only": half a second a line (10 MB: minutes)
    log = tmp_path / "only.log"
    log.write_text("".join("only " * (13_000 - i) + "x" * i + "\n" for i in range(160)))  # distinct lines: each is read
    proc = run_cli("diagnose", log, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr[-500:]
    assert fuzzy.errorish("overlap_param_gather is only supported with the distributed optimizer")
    assert fuzzy.errorish("only " * 100 + "x" * 500 + " with") and not fuzzy.errorish("with only these")


def test_bridge_env_quotes_what_the_user_typed(tmp_path):
    # J5: an OSC string in --release retitled the terminal, "\e[2J" cleared it
    for argv in (["--release", "\x1b]0;PWN\x07\x1b[2J"], ["\x1b[31mX"]):
        proc = subprocess.run([str(ROOT / "scripts" / "bridge_env.sh"), *argv], capture_output=True, timeout=30)
        assert proc.returncode == 2 and b"\x1b" not in proc.stderr and proc.stderr.count(b"\n") == 1, proc.stderr


def _install(skills_dir, env=None):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "install-skill"), str(skills_dir)],
                          capture_output=True, timeout=120, env=env)


def test_install_skill_escapes_its_paths_refuses_an_empty_folder_and_installs_readable(tmp_path):
    # J4: the "try:" line printed the path raw; '' installed into the current folder; the install was 0700
    proc = _install(tmp_path / "a\x1bb")
    assert proc.returncode == 0 and b"\x1b" not in proc.stdout, proc.stdout
    mode = (tmp_path / "a\x1bb" / "nemo-mbridge-perf-tp-dp-comm-overlap").stat().st_mode & 0o777
    assert mode == 0o777 & ~_umask(), oct(mode)
    empty = subprocess.run([sys.executable, str(ROOT / "scripts" / "install-skill"), ""], capture_output=True,
                           timeout=60, cwd=tmp_path)
    assert empty.returncode == 2 and b"empty" in empty.stderr and not any(tmp_path.glob("nemo-*"))


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_compare_says_unknown_for_a_log_without_iteration_times(tmp_path):
    # J6: "-> None (unknown (a log without iteration lines))" for a log whose iteration lines all read 0 ms
    line = (" [2026-12-01 19:52:10] iteration {i:>8}/    1000 | consumed samples: 5120 | elapsed time per iteration (ms): "
            "{ms} | learning rate: 1.000000E-04 | global batch size:   512 |\n")
    before, after = tmp_path / "before.log", tmp_path / "after.log"
    before.write_text("".join(line.format(i=i, ms=1000.0) for i in range(1, 20)))
    after.write_text("".join(line.format(i=i, ms=0.0) for i in range(1, 20)))
    proc = run_cli("diagnose", "--compare", before, after, "--gpus", "8", timeout=60)
    out = proc.stdout.decode()
    assert "compare: median ms per iteration" in out and "None" not in out and "-> unknown" in out, out
