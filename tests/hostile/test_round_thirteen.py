"""Hostile input, round thirteen (fuzzJ): each case failed before its fix."""

from __future__ import annotations

import json

from hostile_kit import run_cli

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
    calls = []

    class Counting:
        def __getattr__(self, name):
            return getattr(attribution_re, name)

        def findall(self, *args):
            calls.append(1)
            return attribution_re.findall(*args)

    attribution_re = attribution.re
    monkeypatch.setattr(attribution, "re", Counting())
    attribution._ranks_of_text.cache_clear()
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
