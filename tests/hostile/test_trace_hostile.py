"""Hostile input against `python -m mbridge_overlap trace` (issue 10, the trace reader), generated here, no data files.

Classes: the same trace in other JSON layouts (must give the Kineto layout's report), corrupt or trailing data,
odd numbers (NaN, Infinity, beyond 64 bits, over 4,300 digits), deep nesting, surrogates and control
characters, empty / binary / gzip-garbage files, and paths that are no trace files (an empty directory, a FIFO,
a device). Every case runs the CLI as a subprocess from the skill folder (all cases at once, a few at a time, to
keep the suite fast) and asserts the exit status; bad input gets exactly one line on stderr, with no traceback
and no raw control character, and nothing on stdout; a good trace gets nothing on stderr. CASES holds the case
counts per class.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNSAFE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
TIMEOUT = 60  # seconds; a FIFO that were opened would hang here


# --- generators ------------------------------------------------------------------------------------------------

def trace(rank: int = 0, world: int = 2, steps: int = 3, distributed: bool = True) -> dict:
    """A small training trace: per step a GEMM on stream 7 and a DP ReduceScatter on stream 20 that half overlaps
    it, each with its launch record; CPU ops and flows around them."""
    events, corr, ext = [], 0, 5000
    for step in range(steps):
        t0 = step * 1000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": 1000, "args": {"External id": ext}})
        for name, stream, start, dur, args in (
            ("sm90_xmma_gemm_bf16", 7, t0 + 100, 400, {}),
            ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)", 20, t0 + 300, 400,
             {"Process Group Description": "DATA_PARALLEL_GROUP", "Process Group Name": "2"}),
        ):
            corr, ext = corr + 1, ext + 1
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 5,
                           "dur": 3, "args": {"External id": ext, "Input Dims": [[8, 16], [16, 8]]}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t0 + 10, "dur": 2, "args": {"External id": ext, "correlation": corr}})
            events.append({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": t0 + 10, "cat": "ac2g", "name": "ac2g"})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": start, "dur": dur,
                           "args": {"External id": ext, "stream": stream, "correlation": corr, "grid": [1, 1, 1],
                                    **args}})
    doc = {"schemaVersion": 1}
    if distributed:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return {**doc, "traceEvents": events, "traceName": "hostile"}


def kineto(doc: dict) -> str:
    """As the profiler writes it: "},\\n  {" between events."""
    head = "".join(f'  "{k}": {json.dumps(v)},\n' for k, v in doc.items() if k not in ("traceEvents", "traceName"))
    body = ",\n".join("  " + json.dumps(e, indent=2).replace("\n", "\n  ") for e in doc["traceEvents"])
    tail = f',\n  "traceName": {json.dumps(doc["traceName"])}' if "traceName" in doc else ""
    return "{\n" + head + '  "traceEvents": [\n' + body + "\n  ]" + tail + "\n}\n"


def with_kernel(doc: dict, **fields) -> dict:
    """doc with one more GEMM whose kernel event carries `fields` (ts, dur, name, args entries)."""
    args = {"stream": 7, "correlation": 900, **fields.pop("args", {})}
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                               "ts": 10, "dur": 1, "args": {"correlation": 900}})
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 5,
                               **fields, "args": args})
    return doc


def with_cpu_arg(doc: dict, value_text: str) -> str:
    """Compact text of doc with a CPU op (nothing the analysis reads) whose args.v is value_text, verbatim."""
    doc["traceEvents"].insert(3, {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1,
                                  "dur": 1, "args": {"v": "@V@"}})
    return json.dumps(doc).replace('"@V@"', value_text)


def mutate(text: str, old: str, new: str, nth: int = 5) -> str:
    """text with the nth occurrence of old replaced by new (an event somewhere in the middle)."""
    at = -1
    for _ in range(nth):
        at = text.index(old, at + 1)
    return text[:at] + new + text[at + len(old):]


def write(folder: Path, name: str, data) -> Path:
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    return path


# --- cases -----------------------------------------------------------------------------------------------------

@dataclass
class Case:
    kind: str
    name: str
    make: Callable[[Path], list]  # writes under a folder, returns the arguments after `trace`
    status: int  # 0 whole, 1 partial (--allow-partial), 2 refused
    says: str = ""  # in stderr when refused, else in stdout
    same_as: str = ""  # a case whose --format json report this one must equal (file names aside)


def _file(name: str, data: Callable[[], object], *flags: str) -> Callable[[Path], list]:
    return lambda folder: [write(folder, name, data() if callable(data) else data), *flags]


def _layout(name: str, text: Callable[[dict], str], gz: bool = False, distributed: bool = True):
    def make(folder: Path) -> list:
        data = text(trace(distributed=distributed)).encode("utf-8")
        return [write(folder, "rank-0.json.gz" if gz else "rank-0.json", gzip.compress(data) if gz else data),
                "--format", "json"]
    return Case("layouts", name, make, 0, same_as="kineto" if distributed else "kineto_no_info")


LAYOUT_CASES = [
    _layout("kineto", kineto),
    _layout("kineto_no_info", kineto, distributed=False),
    _layout("compact", lambda d: json.dumps(d, separators=(",", ":"))),
    _layout("json_dumps", json.dumps),
    _layout("indent_4", lambda d: json.dumps(d, indent=4)),
    _layout("indent_1", lambda d: json.dumps(d, indent=1)),
    _layout("tabs_crlf", lambda d: json.dumps(d, indent="\t").replace("\n", "\r\n")),
    _layout("blanks_everywhere", lambda d: " \n" + json.dumps(d, separators=(" , ", " : ")) + " \n\t "),
    _layout("events_first", lambda d: json.dumps({"traceEvents": d["traceEvents"],
                                                  **{k: v for k, v in d.items() if k != "traceEvents"}})),
    _layout("keys_reversed", lambda d: json.dumps(dict(reversed(list(d.items()))))),
    _layout("bare_array", lambda d: json.dumps(d["traceEvents"]), distributed=False),
    _layout("compact_gzip", lambda d: json.dumps(d, separators=(",", ":")), gz=True),
    _layout("utf8_bom", lambda d: "\ufeff" + json.dumps(d)),
    _layout("non_ascii_unescaped", lambda d: json.dumps({**d, "traceName": "trace \u00e9\u4e2d\U0001f600"},
                                                        ensure_ascii=False)),
]


def _refused(kind: str, name: str, data, says: str, *flags: str, file: str = "rank-0.json") -> Case:
    return Case(kind, name, _file(file, data, *flags), 2, says)


def _cut(text: str, fraction: float) -> str:
    return text[: int(len(text) * fraction)]


CORRUPT_CASES = [
    _refused("corrupt", "garbage_between_events", lambda: mutate(kineto(trace()), "},\n  {", "},\n  oops,\n  {"),
             "not valid JSON at byte"),
    _refused("corrupt", "missing_comma_between_events", lambda: mutate(kineto(trace()), "},\n  {", "}\n  {"),
             "not valid JSON at byte"),
    _refused("corrupt", "missing_comma_in_a_cpu_op", lambda: mutate(json.dumps(trace()), '"dur": 3,', '"dur": 3'),
             "not valid JSON at byte"),
    _refused("corrupt", "missing_colon_in_a_flow", lambda: mutate(json.dumps(trace()), '"cat": "ac2g"', '"cat" "ac2g"'),
             "not valid JSON at byte"),
    _refused("corrupt", "single_quotes", lambda: mutate(json.dumps(trace()), '"aten::mm"', "'aten::mm'"),
             "not valid JSON at byte"),
    _refused("corrupt", "bad_escape", lambda: mutate(json.dumps(trace()), '"aten::mm"', '"aten\\qmm"'),
             "not valid JSON at byte"),
    _refused("corrupt", "raw_newline_in_a_string", lambda: mutate(json.dumps(trace()), '"aten::mm"', '"aten\n::mm"'),
             "not valid JSON at byte"),
    _refused("corrupt", "nul_byte_between_events", lambda: mutate(json.dumps(trace()), "}, {", "},\x00 {"),
             "not valid JSON at byte"),
    _refused("corrupt", "comma_before_bracket", lambda: json.dumps(trace()).replace("}]", "},]", 1),
             "not valid JSON at byte"),
    _refused("corrupt", "stray_bracket", lambda: mutate(json.dumps(trace()), "}, {", "}], {"), "not valid JSON at byte"),
    _refused("corrupt", "trailing_garbage", lambda: json.dumps(trace()) + "\n# saved by a tool\n",
             "after the end of the trace"),
    _refused("corrupt", "two_traces_concatenated", lambda: json.dumps(trace()) + json.dumps(trace()),
             "a second JSON value"),
    _refused("corrupt", "two_traces_gzip_members", lambda: gzip.compress(json.dumps(trace()).encode()) * 2,
             "a second JSON value", file="rank-0.json.gz"),
    _refused("corrupt", "second_trace_events_key", lambda: json.dumps(trace())[:-1] + ', "traceEvents": []}',
             "a second traceEvents array"),
    _refused("corrupt", "truncated", lambda: _cut(kineto(trace()), 0.6), "truncated"),
    _refused("corrupt", "truncated_gzip", lambda: _cut(gzip.compress(json.dumps(trace()).encode()), 0.7),
             "truncated", file="rank-0.json.gz"),
    _refused("corrupt", "truncated_inside_a_character", lambda: json.dumps({**trace(), "traceName": "\u4e2d"},
                                                                           ensure_ascii=False).encode()[:-3],
             "truncated"),
    Case("corrupt", "truncated_allow_partial", _file("rank-0.json", lambda: _cut(kineto(trace(steps=6)), 0.7),
                                                     "--allow-partial"), 1, "PARTIAL"),
    _refused("corrupt", "garbage_allow_partial", lambda: mutate(kineto(trace()), "},\n  {", "},\n  oops,\n  {"),
             "not valid JSON at byte", "--allow-partial"),
]

NUMBER_CASES = [
    _refused("numbers", "nan_kernel_ts", lambda: json.dumps(with_kernel(trace(), ts=float("nan"))), "finite number"),
    _refused("numbers", "infinity_kernel_dur", lambda: json.dumps(with_kernel(trace(), dur=float("inf"))),
             "finite number"),
    _refused("numbers", "minus_infinity_ts", lambda: json.dumps(with_kernel(trace(), ts=float("-inf"))),
             "finite number"),
    _refused("numbers", "float_overflow_ts", lambda: json.dumps(with_kernel(trace(), ts=1)).replace('"ts": 1,', '"ts": 1e400,'),
             "finite number"),
    _refused("numbers", "ts_2_pow_63", lambda: json.dumps(with_kernel(trace(), ts=2 ** 63)), "out of range"),
    _refused("numbers", "dur_2_pow_64", lambda: json.dumps(with_kernel(trace(), dur=2 ** 64)), "out of range"),
    _refused("numbers", "correlation_2_pow_63", lambda: json.dumps(with_kernel(trace(), args={"correlation": 2 ** 63})),
             "out of range"),
    _refused("numbers", "5000_digit_integer", lambda: with_cpu_arg(trace(), "9" * 5000), "too long to read"),
    Case("numbers", "nan_where_unused", _file("rank-0.json", lambda: with_cpu_arg(trace(), "[NaN, Infinity, -Infinity]")),
         0, "3 NaN or Infinity values"),
    Case("numbers", "huge_integer_where_unused", _file("rank-0.json", lambda: with_cpu_arg(trace(), str(2 ** 200))), 0),
    Case("numbers", "5000_digit_step_number", _file("rank-0.json", lambda: json.dumps(trace()).replace(
        "ProfilerStep#1", "ProfilerStep#" + "7" * 5000)), 0),
    Case("numbers", "rank_beyond_64_bits", _file("rank-0.json", lambda: json.dumps(
        {**trace(), "distributedInfo": {"rank": 2 ** 70, "world_size": 2}})), 0, "not a rank"),
]

DEPTH = 100_000
NESTING_CASES = [
    _refused("nesting", "deep_array_in_an_event", lambda: with_cpu_arg(trace(), "[" * DEPTH + "]" * DEPTH), "nested deeper"),
    _refused("nesting", "deep_object_before_the_events", lambda: json.dumps(trace()).replace(
        '{"schemaVersion": 1', '{"x": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + ', "schemaVersion": 1', 1),
        "nested deeper"),
    _refused("nesting", "deep_and_never_closed", lambda: '{"traceEvents": [' + "[" * DEPTH, "nested deeper"),
    Case("nesting", "500_deep_where_unused", _file("rank-0.json", lambda: with_cpu_arg(trace(), "[" * 500 + "]" * 500)), 0),
]


def _named(name: str, text: Callable[[], str], *flags: str) -> Case:
    return Case("surrogates", name, _file("rank-0.json", text, *flags), 0)


SURROGATE_CASES = [
    _named("lone_surrogate_in_kernel_name", lambda: json.dumps(with_kernel(trace(), name="ncclKernel_AllReduce\udc80x"))),
    _named("lone_surrogate_in_group", lambda: json.dumps(with_kernel(trace(), name="ncclDevKernel_AllGather(x)", args={
        "Process Group Description": "GRP\ud800\x1b[31m\nnext line\u2028"}))),
    _named("lone_surrogate_json_output", lambda: json.dumps(with_kernel(trace(), name="ncclDevKernel_AllGather(x)", args={
        "Process Group Description": "GRP\ud800", "Collective name": "x\udfff"})), "--format", "json"),
    _named("control_characters_in_collective", lambda: json.dumps(with_kernel(trace(), name="ncclKernel_\x1b]0;t\x07\r", args={
        "Collective name": "\x1b[2J\x00"}))),
    _named("valid_surrogate_pair", lambda: json.dumps(with_kernel(trace(), name="gemm_\U0001f600"))),
    _refused("surrogates", "encoded_surrogate_bytes", lambda: json.dumps(trace()).encode().replace(
        b"aten::mm", b"aten\xed\xa0\x80mm", 1), "not UTF-8"),
    Case("surrogates", "control_characters_in_file_name",
         lambda folder: [write(folder, "rank-0\n\x1b[31m.json", json.dumps(trace()))], 0),
    Case("surrogates", "missing_file_with_control_characters",
         lambda folder: [folder / "gone\n\x1b[31m\udcff.json"], 2, "no such file"),
]

FILE_CASES = [
    _refused("files", "empty", b"", "empty file"),
    _refused("files", "blanks_only", b" \n\t\r\n ", "empty file"),
    _refused("files", "binary", lambda: bytes(range(256)) * 8, "not UTF-8"),
    _refused("files", "png_header", b"\x89PNG\r\n\x1a\n" + bytes(64), "not UTF-8"),
    _refused("files", "utf16_json", lambda: json.dumps(trace()).encode("utf-16"), "not UTF-8"),
    _refused("files", "nul_bytes", b"\x00" * 4096, "not a JSON trace"),
    _refused("files", "gzip_garbage", b"\x1f\x8b\x08\x00" + bytes(range(200)), "not a readable gzip file",
             file="rank-0.json.gz"),
    _refused("files", "gzip_of_nothing", lambda: gzip.compress(b""), "empty file", file="rank-0.json.gz"),
    _refused("files", "gzip_of_binary", lambda: gzip.compress(bytes(range(256)) * 4), "not UTF-8", file="rank-0.json.gz"),
    _refused("files", "gzip_then_garbage", lambda: gzip.compress(json.dumps(trace()).encode()) + b"garbage",
             "not a readable gzip file", file="rank-0.json.gz"),
    _refused("files", "gzip_bomb_of_blanks", lambda: gzip.compress(b"{" + b" " * (64 << 20), 9),
             "truncated", file="rank-0.json.gz"),
    _refused("files", "json_string", b'"traceEvents"', "not a JSON trace"),
    _refused("files", "json_null", b"null", "not a JSON trace"),
    _refused("files", "empty_object", b"{}", "no traceEvents array"),
    _refused("files", "events_not_an_array", b'{"traceEvents": {"ph": "X"}}', "not an array"),
    _refused("files", "no_events", b'{"traceEvents": []}', "no events"),
    _refused("files", "empty_array", b"[]", "no events"),
    _refused("files", "cpu_only", lambda: json.dumps({"traceEvents": [e for e in trace()["traceEvents"]
                                                                     if e.get("cat") != "kernel"]}), "CPU-only"),
]


def _fifo(folder: Path) -> list:
    path = folder / "rank-0.json"
    os.mkfifo(path)
    return [path]


def _loop(folder: Path) -> list:
    (folder / "a.json").symlink_to(folder / "b.json")
    (folder / "b.json").symlink_to(folder / "a.json")
    return [folder / "a.json"]


def _empty_dir(folder: Path) -> list:
    (folder / "traces").mkdir()
    (folder / "traces" / "notes.txt").write_text("no traces here")
    return [folder / "traces"]


def _dir_with_a_fifo(folder: Path) -> list:
    (folder / "traces").mkdir()
    os.mkfifo(folder / "traces" / "rank-0.json")
    return [folder / "traces"]


PATH_CASES = [
    Case("paths", "directory_without_traces", _empty_dir, 2, "no .json or .json.gz"),
    Case("paths", "fifo", _fifo, 2, "not a regular file"),
    Case("paths", "directory_with_only_a_fifo", _dir_with_a_fifo, 2, "no .json or .json.gz"),
    Case("paths", "dev_null", lambda folder: ["/dev/null"], 2, "not a regular file"),
    Case("paths", "symlink_loop", _loop, 2, "no such file"),
    Case("paths", "missing", lambda folder: [folder / "missing.json"], 2, "no such file"),
    Case("paths", "directory_named_like_a_trace", lambda folder: [(folder / "x.json").mkdir() or folder / "x.json"],
         2, "no .json or .json.gz"),
]

ALL_CASES = (LAYOUT_CASES + CORRUPT_CASES + NUMBER_CASES + NESTING_CASES + SURROGATE_CASES + FILE_CASES
             + PATH_CASES)
CASES = dict(Counter(case.kind for case in ALL_CASES))  # cases per class, for the report
assert len({c.name for c in ALL_CASES}) == len(ALL_CASES)


# --- running ---------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    status: int | None  # None: it ran past TIMEOUT
    out: str
    err: str


def _run(case: Case, folder: Path) -> Outcome:
    folder.mkdir()
    argv = [sys.executable, "-m", "mbridge_overlap", "trace", *map(str, case.make(folder))]
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=TIMEOUT,
                              env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    except subprocess.TimeoutExpired:
        return Outcome(None, "", "")
    decode = lambda b: b.decode("utf-8", "surrogateescape")  # noqa: E731
    return Outcome(proc.returncode, decode(proc.stdout), decode(proc.stderr))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("hostile_trace")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {c.name: pool.submit(_run, c, root / c.name) for c in ALL_CASES}
        return {name: f.result() for name, f in futures.items()}


def _report(outcome: Outcome) -> dict:
    d = json.loads(outcome.out)
    for rank in d["ranks"]:
        rank["file"] = None
    return d


@pytest.mark.parametrize("case", ALL_CASES, ids=[f"{c.kind}-{c.name}" for c in ALL_CASES])
def test_hostile_trace_input(outcomes, case):
    got = outcomes[case.name]
    assert got.status is not None, f"ran past {TIMEOUT} s"
    assert "Traceback" not in got.err and "Traceback" not in got.out
    assert got.status == case.status, (got.status, got.err[-500:])
    if case.status == 2:
        assert got.out == ""
        assert got.err.endswith("\n") and got.err.count("\n") == 1, got.err
        assert not UNSAFE.search(got.err), ascii(got.err)
        assert case.says in got.err, got.err
    else:
        assert got.err == "", got.err
        assert case.says in got.out, got.out[-2000:]
        assert not UNSAFE.search(got.out.replace("\n", "")), ascii(got.out)
    if case.same_as:
        assert _report(got) == _report(outcomes[case.same_as])


def test_every_class_is_covered():
    assert set(CASES) == {"layouts", "corrupt", "numbers", "nesting", "surrogates", "files", "paths"}
    print("hostile trace cases per class:", CASES, "total", len(ALL_CASES))
