"""The streaming reader hands on exactly the events json.load would, whatever the layout and chunk size, and
judges a file as json.load does: what it refuses we refuse, and a file cut short is truncated, never corrupt."""

from __future__ import annotations

import json
import random

import pytest

from mbridge_overlap.errors import UsageError
from mbridge_overlap.trace import analyze, reader, window
from trace_fixtures import LAYOUTS, TraceBuilder, kineto_layout, nccl, overlap_case, real_traces, relayout

REAL_TRACES = real_traces()


def read_all(path):
    events, meta = [], {}
    stats = reader.read(path, events.append, meta.__setitem__)
    return stats.events, events, meta


def odd_case() -> TraceBuilder:
    """Text that looks like structure inside strings and nested values."""
    b = overlap_case().step(1, 0, 100)
    b.events.append({"ph": "X", "cat": "cpu_op", "name": 'odd "name" },\n  { with [braces] \\ and \u00e9\u4e2d\U0001f600',
                     "ts": 1, "dur": 1, "args": {"Collective name": "allreduce", "External id": 5,
                                                 "nested": {"a": [{"b": "}"}, [], {}, [[1.5e3, -2, True, None]]]}}})
    b.events.append(7)  # a value that is not an event: counted, not handed on
    return b


@pytest.mark.parametrize("chunk", [7, 64, 1000, 1 << 20])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_events_match_json_load(tmp_path, monkeypatch, chunk, layout):
    monkeypatch.setattr(window, "CHUNK_CHARS", chunk)
    b = odd_case()
    path = b.write(tmp_path / f"t.{layout}.json.gz", layout)
    count, events, meta = read_all(path)
    expected = json.loads(b.text(layout))
    expected_events = expected if layout == "array" else expected["traceEvents"]
    assert count == len(expected_events)
    assert events == [e for e in expected_events if isinstance(e, dict)]
    if layout != "array":
        assert meta == {k: v for k, v in expected.items() if k != "traceEvents"}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_give_the_same_report(tmp_path, layout):
    b = TraceBuilder(rank=1, world_size=4).step(1, 0, 1000).step(2, 1000, 2000).step(3, 2000, 3000)
    for i in range(40):
        b.kernel("gemm", i * 70, i * 70 + 50, launch=i * 70).kernel(nccl(), i * 70 + 30, i * 70 + 65, stream=20)
    b.noise(20)
    # the array layout has no distributedInfo: its reference is the same events with the rank in the file name
    (tmp_path / "ref").mkdir()
    (tmp_path / layout).mkdir()
    if layout == "array":
        b.meta = {}
    reference = b.write(tmp_path / "ref" / "rank-1.json")
    other = b.write(tmp_path / layout / "rank-1.json", layout)
    want, got = analyze(reference).to_dict(), analyze(other).to_dict()
    for d in (want, got):
        d["ranks"][0]["file"] = None
    assert got == want


def test_a_separator_inside_an_event_loses_nothing(tmp_path):
    """Kineto's separator at a nested depth is just text to a JSON reader."""
    b = TraceBuilder().kernel("gemm", 0, 100).kernel(nccl(), 50, 150, stream=20).noise()
    text = b.text().replace('"grid": [', '"deep": [{"a": 1},\n  {"stream": 2}], "grid": [')
    path = tmp_path / "nested.json"
    path.write_text(text)
    _count, events, _meta = read_all(path)
    assert events == json.loads(text)["traceEvents"]


def test_bare_event_array(tmp_path):
    r = analyze(overlap_case().write(tmp_path / "bare.json", "array")).ranks[0]
    assert (r.rank, r.figures.hidden_us) == (None, 100)


def test_rank_from_file_name_when_distributed_info_is_missing(tmp_path):
    b = TraceBuilder(distributed=False).kernel("gemm", 0, 10)
    assert analyze(b.write(tmp_path / "rank-7.json")).ranks[0].rank == 7


def test_header_is_read_without_the_events(tmp_path):
    from mbridge_overlap.trace import kineto

    meta = kineto.read_header(overlap_case().write(tmp_path / "h.json.gz"))
    assert meta["distributedInfo"]["rank"] == 0 and "traceName" not in meta  # stops at the first event


# --- judged as json.load judges ---------------------------------------------------------------------------------

def verdict(path) -> str:
    """'ok', 'truncated', 'json' (not valid JSON) or 'other' (valid JSON, not a trace)."""
    try:
        reader.read(path, lambda e: None)
        return "ok"
    except reader.Truncated:
        return "truncated"
    except UsageError as exc:
        refused = ("not valid JSON", "not UTF-8", "not a JSON trace")
        return "json" if any(r in str(exc) for r in refused) else "other"


def small_trace_text(layout: str) -> str:
    return TraceBuilder().step(1, 0, 50).kernel("gemm", 0, 10).kernel(nccl(), 5, 20, stream=20).noise(1).text(layout)


@pytest.mark.parametrize("chunk", [5, 1 << 20])
@pytest.mark.parametrize("layout", ["kineto", "compact", "indent4", "array"])
def test_every_cut_is_truncated_never_corrupt(tmp_path, monkeypatch, chunk, layout):
    monkeypatch.setattr(window, "CHUNK_CHARS", chunk)
    data = small_trace_text(layout).rstrip().encode()
    path = tmp_path / "cut.json"
    verdicts = {}
    for cut in sorted(set(range(1, 200)) | set(random.Random(layout).sample(range(1, len(data)), 400))):
        path.write_bytes(data[:cut])
        verdicts[cut] = verdict(path)
    assert set(verdicts.values()) == {"truncated"}, {k: v for k, v in verdicts.items() if v != "truncated"}
    path.write_bytes(data)
    assert verdict(path) == "ok"


MUTATIONS = 300


@pytest.mark.parametrize("layout", ["kineto", "compact", "array"])
def test_random_corruption_is_judged_as_json_load_judges(tmp_path, monkeypatch, layout):
    """A byte deleted, doubled or replaced anywhere: refused exactly when json.loads refuses the text."""
    monkeypatch.setattr(window, "CHUNK_CHARS", 64)
    rng = random.Random(f"corrupt-{layout}")
    data = small_trace_text(layout).encode()
    path = tmp_path / "bad.json"
    disagreements = []
    for _ in range(MUTATIONS):
        i = rng.randrange(len(data))
        how = rng.choice(("delete", "double", "replace"))
        new = {"delete": b"", "double": data[i:i + 2], "replace": bytes([rng.choice(b'{}[],:" x0\\\n')])}[how]
        mutated = data[:i] + new + data[i + 1:]
        path.write_bytes(mutated)
        try:
            json.loads(mutated)
            expected = {"ok", "other"}
        except ValueError:
            expected = {"json", "truncated"}
        got = verdict(path)
        if got not in expected:
            disagreements.append((i, how, new, got))
    assert not disagreements, disagreements[:5]


@pytest.mark.parametrize(
    "text, where",
    [
        ('{"traceEvents": [{"a": 1}, garbage, {"b": 2}]}', 27),  # corrupt text between events
        ('{"traceEvents": [{"a": 1} {"b": 2}]}', 26),  # a missing comma between events
        ('{"traceEvents": [{"a": 1, "b" 2}]}', 30),  # a missing colon inside an event nobody reads
        ('{"traceEvents": [{"a": 1},]}', 26),  # a comma before ']'
        ('{"traceEvents": [{"a": 1}]} trailing', 28),  # data after the trace
        ('{"traceEvents": [{"a": 1}]}{"traceEvents": []}', 27),  # two traces in one file
        ('{"traceEvents": [{"a": 1}]]', 26),
        ('{"x": 1 "traceEvents": []}', 8),
        ('{"traceEvents": [{"\u00e9": 1}, x]}', 28),  # the offset counts bytes, not characters
    ],
)
def test_corrupt_json_names_the_byte(tmp_path, text, where):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        reader.read(path, lambda e: None)
    assert f"not valid JSON at byte {where:,}:" in str(info.value), str(info.value)


REAL_EVENTS = 15000


@pytest.mark.skipif(not REAL_TRACES, reason="no real traces (set MBRIDGE_SKILL_TRACES)")
@pytest.mark.parametrize("source", REAL_TRACES, ids=[p.name.split(".")[0] for p in REAL_TRACES])
def test_real_traces_in_every_layout(tmp_path, source):
    """A real trace (REAL_EVENTS events in time around its first NCCL kernel, to keep this fast;
    benchmarks/bench_trace.py checks whole ones)
    saved again by other tools gives the report its Kineto layout gives."""
    import gzip

    document = json.loads(gzip.decompress(source.read_bytes()))
    events = document["traceEvents"]
    timed = sorted(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)))
    first_nccl = min(e["ts"] for e in events if str(e.get("name")).startswith("nccl") and "ts" in e)
    middle = timed.index(first_nccl)
    since, until = timed[max(0, middle - REAL_EVENTS // 2)], timed[min(len(timed) - 1, middle + REAL_EVENTS // 2)]
    document["traceEvents"] = [e for e in events if not isinstance(e.get("ts"), (int, float)) or since <= e["ts"] <= until]
    kineto = tmp_path / "kineto.json"
    kineto.write_text(kineto_layout(document))
    want = analyze(kineto).to_dict()
    events_only = tmp_path / "events_only.json"
    events_only.write_text(kineto_layout({"traceEvents": document["traceEvents"]}))
    bare = analyze(events_only).to_dict()
    assert want["ranks"][0]["kernel_counts"]["communication"] > 0
    for layout in ("compact", "indent4", "events_first", "array"):
        path = tmp_path / f"{layout}.json"
        path.write_text(relayout(document, layout))
        got = analyze(path).to_dict()
        for d in (got, want, bare):
            d["ranks"][0]["file"] = None
        assert got == (bare if layout == "array" else want), layout


def _peak_bytes(path) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        analyze(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("layout", ["kineto", "compact"])
def test_memory_does_not_grow_with_the_text(tmp_path, monkeypatch, layout):
    """Streaming: the same kernels among 4x the events cost hardly more memory, and far less than the file
    (the text is never held whole, only a window of a few chunks; the chunk is made small here so that the
    window is small beside these files). What grows with the kernels is measured by benchmarks/bench_trace.py."""
    monkeypatch.setattr(window, "CHUNK_CHARS", 1 << 16)
    sizes, peaks = [], []
    for noise in (1, 12):
        b = TraceBuilder().step(1, 0, 300_000).step(2, 300_000, 300_001)
        for i in range(3000):
            b.kernel("gemm", i * 100, i * 100 + 60).noise(noise)
        path = b.write(tmp_path / f"noise{noise}.json", layout)
        sizes.append(path.stat().st_size)
        peaks.append(_peak_bytes(path))
    assert sizes[1] > 3.5 * sizes[0]
    assert peaks[1] - peaks[0] < (sizes[1] - sizes[0]) / 50, (sizes, peaks)  # under 2% of the added text
    assert peaks[1] < sizes[1] / 5, (sizes, peaks)


@pytest.mark.parametrize("run", [40, 300, 1 << 14])
@pytest.mark.parametrize("layout", ["kineto", "compact"])
def test_runs_cut_inside_an_event_lose_nothing(tmp_path, monkeypatch, run, layout):
    """Runs of events are cut at '}' ',' '{'; where that sits inside an event (args holding a list of objects),
    the run does not decode and the events are read one by one: the same events either way."""
    monkeypatch.setattr(reader, "RUN_CHARS", run)
    b = TraceBuilder()
    for i in range(30):
        b.kernel("gemm", i * 10, i * 10 + 5, deep=[{"a": i}, {"b": [{"c": 1}, {"d": 2}]}] if i % 3 else [])
        b.events.append(i)  # values that are not events count too
    path = b.write(tmp_path / f"runs.{layout}.json", layout)
    count, events, _meta = read_all(path)
    expected = json.loads(path.read_text())["traceEvents"]
    assert count == len(expected) and events == [e for e in expected if isinstance(e, dict)]


@pytest.mark.parametrize("run", [40, 1 << 14])
@pytest.mark.parametrize("chunk", [50, 1 << 20])
def test_an_unusable_event_is_named_by_its_byte(tmp_path, monkeypatch, run, chunk):
    monkeypatch.setattr(reader, "RUN_CHARS", run)
    monkeypatch.setattr(window, "CHUNK_CHARS", chunk)
    b = TraceBuilder().kernel("gemm", 0, 10).noise(5).kernel("bad", 20, 30).noise(5)
    b.events[-14]["ts"] = float("nan")  # the "bad" kernel: its flow event and the noise follow it
    text = b.text("compact")
    where = text.encode().index(b'{"ph":"X","cat":"kernel","name":"bad"')
    path = tmp_path / "nan.json"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        analyze(path)
    assert f"the event at byte {where:,}: ts nan" in str(info.value), str(info.value)


def test_long_kernel_names_are_kept_as_what_the_analysis_reads(tmp_path):
    """fuzzR R4: every distinct kernel name was kept whole (900,000 names of 2 KB: 2.3 GB); a name past the label
    bound is kept as its kind, collective and userbuffers flag, and the analysis reads the same from it."""
    from mbridge_overlap.trace import kernels, kineto

    pad = "x" * 2000
    names = [f"ncclDevKernel_AllReduce_{i}_{pad}" for i in range(50)] + [f"ncclDevKernel_ReduceScatter_{pad}",
                                                                        f"userbuffers_fp16_sum_inplace_{pad}"]
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 20, "ts": i * 10, "dur": 5,
               "args": {"stream": 20, "correlation": i}} for i, n in enumerate(names)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}))
    trace = kineto.load(path)
    kept = [k.name for k in trace.comm]
    assert len(kept) == len(names) and max(map(len, kept)) <= 64 and len({id(k) for k in kept}) <= 3
    assert [kernels.collective_of(k) for k in kept] == [kernels.collective_of(n) for n in names]
    assert [kernels.is_userbuffers(k) for k in kept] == [kernels.is_userbuffers(n) for n in names]
