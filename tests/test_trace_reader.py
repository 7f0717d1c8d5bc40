"""The streaming reader hands on exactly the events json.load would, whatever the layout and chunk size."""

from __future__ import annotations

import json

import pytest

from mbridge_overlap.trace import analyze, reader
from trace_fixtures import TraceBuilder, nccl, overlap_case


def read_all(path):
    events, meta = [], {}
    count = reader.read(path, events.append, meta.__setitem__)
    return count, events, meta


def wanted(event: dict) -> bool:
    text = json.dumps(event)
    return any(m in text for m in ('"correlation"', "ProfilerStep", '"Process Group', '"Collective name"'))


@pytest.mark.parametrize("chunk", [7, 64, 1000, 1 << 20])
@pytest.mark.parametrize("layout", ["kineto", "compact"])
def test_events_match_json_load(tmp_path, monkeypatch, chunk, layout):
    monkeypatch.setattr(reader, "CHUNK_CHARS", chunk)
    b = overlap_case().step(1, 0, 100)
    b.events.append({"ph": "X", "cat": "cpu_op", "name": 'odd "name" },\n  { with braces', "ts": 1, "dur": 1,
                     "args": {"Collective name": "allreduce", "External id": 5, "nested": {"a": [{"b": "}"}]}}})
    path = b.write(tmp_path / f"t.{layout}.json.gz", layout)
    count, events, meta = read_all(path)
    expected = json.loads(b.text(layout))
    assert count == len(expected["traceEvents"])
    assert meta["distributedInfo"] == expected["distributedInfo"] and meta["traceName"] == "synthetic"
    got = [e for e in events if wanted(e)]  # the fast path may skip the rest; the slow path hands on everything
    assert got == [e for e in expected["traceEvents"] if wanted(e)]


@pytest.mark.parametrize("chunk", [50, 1 << 20])
@pytest.mark.parametrize("nested", ['"deep": [{"a": 1},\n  {"b": 2}], ', '"deep": [{"a": 1},\n  {"stream": 2}], '])
def test_a_separator_at_a_nested_depth_loses_nothing(tmp_path, monkeypatch, chunk, nested):
    """Valid JSON with Kineto's separator inside an event: the fast path must notice and decode exactly."""
    monkeypatch.setattr(reader, "CHUNK_CHARS", chunk)
    b = TraceBuilder().kernel("gemm", 0, 100).kernel(nccl(), 50, 150, stream=20).noise()
    text = b.text().replace('"grid": [', nested + '"grid": [')
    path = tmp_path / "nested.json"
    path.write_text(text)
    _count, events, _meta = read_all(path)
    expected = json.loads(text)["traceEvents"]
    assert [e for e in events if wanted(e)] == [e for e in expected if wanted(e)]


def test_arrays_after_the_events_are_not_taken_for_events(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "CHUNK_CHARS", 1 << 20)
    b = overlap_case()
    text = b.text().replace(
        '  "traceName": "synthetic"',
        '  "deviceProperties": [\n  {\n    "id": 0, "stream": 1\n  },\n  {\n    "id": 1\n  }\n  ],\n'
        '  "traceName": "synthetic"',
    )
    path = tmp_path / "after.json"
    path.write_text(text)
    count, events, meta = read_all(path)
    expected = json.loads(text)
    assert count == len(expected["traceEvents"]) and meta["deviceProperties"] == expected["deviceProperties"]
    assert [e for e in events if wanted(e)] == [e for e in expected["traceEvents"] if wanted(e)]


def test_bare_event_array(tmp_path):
    r = analyze(overlap_case().write(tmp_path / "bare.json", "array")).ranks[0]
    assert (r.rank, r.figures.overlapped_us) == (None, 100)


def test_rank_from_file_name_when_distributed_info_is_missing(tmp_path):
    b = TraceBuilder(distributed=False).kernel("gemm", 0, 10)
    assert analyze(b.write(tmp_path / "rank-7.json")).ranks[0].rank == 7


def test_header_is_read_without_the_events(tmp_path):
    from mbridge_overlap.trace import kineto

    meta = kineto.read_header(overlap_case().write(tmp_path / "h.json.gz"))
    assert meta["distributedInfo"]["rank"] == 0 and "traceName" not in meta  # stops at the first event


def _peak_bytes(path) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        analyze(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_file(tmp_path):
    """Streaming: 4x the events cost far less than 4x the memory (the text is never held whole)."""
    sizes, peaks = [], []
    for n in (3000, 12000):
        b = TraceBuilder().step(1, 0, n * 100).step(2, n * 100, n * 100 + 1)
        for i in range(n):
            b.kernel("gemm", i * 100, i * 100 + 60).noise(1)
        path = b.write(tmp_path / f"big{n}.json")
        sizes.append(path.stat().st_size)
        peaks.append(_peak_bytes(path))
    assert sizes[1] > 3.5 * sizes[0]
    assert peaks[1] < 1.6 * peaks[0], (sizes, peaks)
    assert peaks[1] < sizes[1] / 3, (sizes, peaks)
