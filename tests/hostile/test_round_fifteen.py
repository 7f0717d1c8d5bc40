"""Hostile input, round fifteen (fuzzM): each case failed before its fix."""

from __future__ import annotations

import gzip
import json

import pytest

from hostile_kit import ROOT, assert_one_line, run_cli

from mbridge_overlap import UsageError, api
from mbridge_overlap.trace import kineto

LOG = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2" / "baseline_no_gpu.log"
PG = [{"pg_name": "1", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": [0, 1]}]


def _kernel(i: int, dur=20, **group) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 7,
            "ts": 5 + 100 * i, "dur": dur, "args": {"stream": 7, "correlation": i, **group}}


def _trace(path, events, info=None):
    info = {"rank": 0, "world_size": 8, "pg_config": PG} if info is None else info
    text = json.dumps({"distributedInfo": info, "traceEvents": events})
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_a_long_group_description_is_echoed_bounded(tmp_path):
    # M2: a 3 M-character description was printed whole in a note (and three times per rank in the JSON)
    long = "x" * 300_000
    path = _trace(tmp_path / "t.json.gz", [_kernel(0, **{"Process Group Name": "9", "Process Group Description": long})])
    proc = run_cli("trace", path, "--format", "json")
    assert proc.returncode == 0 and len(proc.stdout) < 20_000, len(proc.stdout)
    assert "300,000 characters" in proc.stdout.decode()


def test_two_long_descriptions_stay_two_groups(tmp_path):
    # M2's bound keeps each text's identity: two descriptions alike in their first characters are two groups
    a, b = "y" * 5_000 + "a", "y" * 5_000 + "b"
    path = _trace(tmp_path / "t.json", [_kernel(0, **{"Process Group Name": "8", "Process Group Description": a}),
                                        _kernel(1, **{"Process Group Name": "9", "Process Group Description": b})])
    notes = api.trace([path]).to_dict()["ranks"][0]["notes"]
    assert sum("which is not one of Megatron-Core's per-dimension groups" in n for n in notes) == 2


def test_a_trace_of_huge_distinct_group_texts_is_refused(tmp_path, monkeypatch):
    # M1: every distinct ranks text was kept whole, twice: a few MB of gzip took GBs of memory
    monkeypatch.setattr(kineto, "MAX_GROUP_TEXT", 1 << 16)
    ranks = [str(list(range(i, i + 2_000))) for i in range(40)]
    path = _trace(tmp_path / "t.json", [_kernel(i, **{"Process Group Name": str(i), "Process Group Ranks": r})
                                        for i, r in enumerate(ranks)])
    with pytest.raises(UsageError, match="distinct text"):
        api.trace([path])


def test_a_negative_kernel_duration_is_said(tmp_path):
    # M3: a TP kernel with dur -50 was counted as 0 us without a word
    path = _trace(tmp_path / "t.json", [_kernel(0, dur=-50, **{"Process Group Name": "1"})])
    notes = api.trace([path]).to_dict()["ranks"][0]["notes"]
    assert any("negative duration" in n for n in notes)


def test_a_second_top_level_key_is_refused(tmp_path):
    # M4: a second distributedInfo silently replaced the first, and its pg_config with it
    text = json.dumps({"distributedInfo": {"rank": 0, "world_size": 8, "pg_config": PG}, "traceEvents": [_kernel(0)]})
    path = tmp_path / "t.json"
    path.write_text(text[:-1] + ', "distributedInfo": {"rank": 0, "world_size": 8}}')
    proc = run_cli("trace", path)
    assert_one_line(proc)
    assert b"twice at the top level" in proc.stderr


@pytest.mark.parametrize("key,value", [("rank", 1.9), ("world_size", 8.7)])
def test_a_fractional_rank_or_world_size_is_no_rank(tmp_path, key, value):
    # M5: 1.9 and 8.7 were read as rank 1 and world size 8, without a word
    info = {"rank": 1, "world_size": 8, "pg_config": PG, key: value}
    rank = api.trace([_trace(tmp_path / "t.json", [_kernel(0)], info)]).to_dict()["ranks"][0]
    assert any(f"distributedInfo.{key} is {value}" in n for n in rank["notes"])


def test_trace_compare_of_one_file_with_itself_says_so(tmp_path):
    # M6: diagnose --compare A A said so (fuzzH H12); trace --compare did not
    path = _trace(tmp_path / "t.json", [_kernel(0)])
    link = tmp_path / "other.json"
    link.symlink_to(path)
    d = api.compare_traces(path, link).to_dict()
    assert any("same trace files" in n for n in d["notes"])
    other = _trace(tmp_path / "u.json", [_kernel(0)])
    assert not any("same trace files" in n for n in api.compare_traces(path, other).to_dict()["notes"])


def test_an_empty_log_is_refused(tmp_path):
    # M7: "0 logs, 0 lines ... causes: none", exit 0
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    proc = run_cli("diagnose", empty)
    assert_one_line(proc)
    assert b"empty, no log lines to read" in proc.stderr
    proc = run_cli("diagnose", "--compare", LOG, empty)
    assert_one_line(proc)
    assert b"AFTER" in proc.stderr


def test_an_empty_log_among_others_is_noted(tmp_path):
    (tmp_path / "rank0.log").write_bytes(LOG.read_bytes())
    (tmp_path / "rank1.log").write_bytes(b"")
    notes = api.diagnose([tmp_path]).to_dict()["notes"]
    assert any("1 of the 2 log files are empty" in n and "rank1.log" in n for n in notes)


@pytest.mark.parametrize("data", [b"\n\n  \r\n\t\n", b"\xff\xfe", b"\xef\xbb\xbf"], ids=["blank-lines", "utf16-mark", "utf8-mark"])
def test_a_log_of_blank_lines_or_a_mark_only_is_empty(tmp_path, data):
    # recheck50 R8: zero bytes were refused, blank lines or a lone byte-order mark were "causes: none", exit 0
    path = tmp_path / "blank.log"
    path.write_bytes(data)
    proc = run_cli("diagnose", path)
    assert_one_line(proc)
    assert b"empty, no log lines to read" in proc.stderr


@pytest.mark.parametrize("info", ['{"rank": 0, "world_size": 8, "world_size": 2}',
                                  '{"rank": 0, "pg_config": [{"pg_name": "1", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", '
                                  '"pg_desc": "DATA_PARALLEL_GROUP", "ranks": [0, 1]}]}'], ids=["world_size", "pg_desc"])
def test_a_key_twice_inside_the_trace_s_metadata_is_refused(tmp_path, info):
    # fuzzN N1: the second silently replaced the first (a TP kernel read as DP, world size 8 as 2)
    path = tmp_path / "t.json"
    path.write_text('{"distributedInfo": ' + info + ', "traceEvents": [' + json.dumps(_kernel(0)) + "]}")
    proc = run_cli("trace", path)
    assert_one_line(proc)
    assert b"twice in one object" in proc.stderr


def test_a_log_of_nul_bytes_is_empty(tmp_path):
    # fuzzN N2: a truncated file's hole of NULs was "causes: none", exit 0
    path = tmp_path / "hole.log"
    path.write_bytes(b"\0" * 300_000)
    proc = run_cli("diagnose", path)
    assert_one_line(proc)
    assert b"empty, no log lines to read" in proc.stderr


def test_a_long_launch_variable_s_deletion_is_whole_or_not_written_as_code():
    # fuzzN N5: "del cfg.env_vars['NCCL_AAAA...]": the name cut and its quote left open
    from mbridge_overlap.run import scenario
    from mbridge_overlap.verbs.diff import diff

    name = "NCCL_" + "A" * 200
    before = {"model.tensor_model_parallel_size": 2}
    d = diff(scenario.build(overrides=before, gpus=8),
             scenario.build(overrides={**before, f"env_vars.{name}": 1}, gpus=8)).to_dict()
    (change,) = [c for c in d["overlap_changes"] if c["key"] == f"env_vars.{name}"]
    assert f"del cfg.env_vars[{name!r}]" in change["fix"]
