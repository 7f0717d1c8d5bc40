"""Bad input: one clear line naming the file and what is wrong (UsageError, exit 2); partial results only when asked."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from mbridge_overlap.errors import UsageError
from mbridge_overlap.trace import analyze
from trace_fixtures import TraceBuilder, nccl, overlap_case

REPO = Path(__file__).resolve().parent.parent


def busy_trace() -> TraceBuilder:
    b = TraceBuilder().step(1, 0, 10_000).step(2, 10_000, 20_000).step(3, 20_000, 30_000)
    for i in range(300):
        b.kernel("gemm", i * 100, i * 100 + 60).kernel(nccl(), i * 100 + 50, i * 100 + 90, stream=20)
    return b


def error_of(paths, **kw) -> str:
    with pytest.raises(UsageError) as info:
        analyze(paths, **kw)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", ["cut.json", "cut.json.gz"])
def test_truncated_trace_is_refused_then_marked_partial(tmp_path, name):
    text = busy_trace().text().encode()
    data = gzip.compress(text)[: len(gzip.compress(text)) * 6 // 10] if name.endswith(".gz") else text[: len(text) * 6 // 10]
    path = tmp_path / name
    path.write_bytes(data)
    message = error_of(path)
    assert str(path) in message and "truncated" in message and "--allow-partial" in message
    report = analyze(path, allow_partial=True)
    assert report.partial and report.to_dict()["partial"] is True
    rank = report.ranks[0].to_dict()
    assert rank["partial"] is True and rank["notes"][0].startswith("PARTIAL")
    assert 0 < rank["communication_us"] < 300 * 40


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "empty file"),
        (b"hello, world", "not a JSON trace"),
        (b'{"schemaVersion": 1, "traceEvents": [ {"ph": "X"}, nonsense ]}', "not valid JSON"),
        (b'{"schemaVersion": 1}', "no traceEvents array"),
        (b'{"traceEvents": {"ph": "X"}}', "traceEvents is not an array"),
        (b'{"traceEvents": []}', "has no events"),
        (b"\x1f\x8b\x08\x00garbage that is not deflate", "not a readable gzip file"),
        (b"\xff\xfe{", "not UTF-8"),
    ],
)
def test_malformed_files(tmp_path, content, expected):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    message = error_of(path)
    assert str(path) in message and expected in message


def test_cpu_only_trace(tmp_path):
    b = TraceBuilder().step(1, 0, 100).cpu_op("aten::mm", 5, 10).cpu_op("aten::add", 20, 5)
    message = error_of(b.write(tmp_path / "cpu.json"))
    assert "CPU-only" in message and "cpu.json" in message


def test_mixed_jobs(tmp_path):
    a = overlap_case().write(tmp_path / "a.json")
    other_world = TraceBuilder(rank=1, world_size=4).kernel("gemm", 0, 10).write(tmp_path / "b.json")
    assert "two different jobs" in error_of([a, other_world])
    same_rank = TraceBuilder(rank=0, world_size=2).kernel("gemm", 0, 10).write(tmp_path / "c.json")
    message = error_of([a, same_rank])
    assert "rank 0 again" in message and "a.json" in message


def test_paths_and_ranks(tmp_path):
    assert "no such file" in error_of(tmp_path / "missing.json")
    (tmp_path / "empty").mkdir()
    assert "no .json or .json.gz" in error_of(tmp_path / "empty")
    overlap_case().write(tmp_path / "rank-0.json")
    assert "--rank 5" in error_of(tmp_path, ranks=[5])
    assert [r.rank for r in analyze(tmp_path, ranks=[0]).ranks] == [0]


def test_directory_of_ranks(tmp_path):
    for rank in (1, 0):
        TraceBuilder(rank=rank, world_size=2).kernel("gemm", 0, 100).kernel(nccl(), 50, 150, stream=20).write(
            tmp_path / f"rank-{rank}.json.gz")
    (tmp_path / "notes.txt").write_text("not a trace")
    report = analyze(tmp_path)
    assert [r.rank for r in report.ranks] == [0, 1] and report.world_size == 2
    assert [r.figures.hidden_pct for r in report.ranks] == [50.0, 50.0]


def test_a_bad_rank_among_good_ones_names_its_file(tmp_path):
    overlap_case().write(tmp_path / "rank-0.json.gz")
    (tmp_path / "rank-1.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", '
                                                           b'"name": "aten::mm", "ts": 1, "dur": 2}]}'))
    message = error_of(tmp_path)  # analysed in worker processes; the error still comes back as one line
    assert "rank-1.json.gz" in message and "CPU-only" in message


def test_cli_prints_one_line_and_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    proc = subprocess.run([sys.executable, "-m", "mbridge_overlap", "trace", str(bad)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr
