"""Hostile input against `python -m mbridge_overlap trace` (issue 10, the trace reader), generated here, no data files.

Classes: the same trace in other JSON layouts (must give the Kineto layout's report), corrupt or trailing data,
odd numbers (NaN, Infinity, beyond 64 bits, over 4,300 digits), deep nesting, surrogates and control
characters, empty / binary / gzip-garbage files, and paths that are no trace files (an empty directory, a FIFO,
a device). Issue 15 added: odd but legitimate trace shapes (CUDA activities only, only memcpys, kernels without
a stream, ...), files of /proc, /sys and /dev and hostile directories, bidirectional and other invisible
characters, stdout that is closed, full, a broken pipe or ASCII / Latin-1, and (apart, run one at a time) the
worker pool killed by signals or starved by a process limit. Every case runs the CLI as a subprocess from the
skill folder (all cases at once, a few at a time, to keep the suite fast) and asserts the exit status; bad input
gets exactly one line on stderr, with no traceback and no raw unprintable character, and nothing on stdout; a
good trace gets nothing on stderr. CASES holds the case counts per class.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60  # seconds; a FIFO that were opened would hang here


def unsafe(text: str) -> str:
    """The unprintable characters of text but its line breaks (controls, surrogates, bidirectional overrides)."""
    return "".join(c for c in text if c != "\n" and not c.isprintable())


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
    env: dict | None = None  # environment variables to set (None: unset)
    stdout: str = "pipe"  # or "closed" (>&-), "full" (/dev/full), "broken" (a pipe nobody reads)
    encoding: str = "utf-8"  # of stdout, to read it back


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
    _refused("files", "gzip_of_blanks_below_the_floor", lambda: gzip.compress(b"{" + b" " * (32 << 20), 9),
             "truncated", file="rank-0.json.gz"),
    _refused("files", "gzip_bomb_of_blanks", lambda: gzip.compress(b"{" + b" " * (128 << 20), 9),
             "gzip bomb", file="rank-0.json.gz"),
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
    Case("paths", "symlink_loop", _loop, 2, "Too many levels of symbolic links"),
    Case("paths", "missing", lambda folder: [folder / "missing.json"], 2, "no such file"),
    Case("paths", "directory_named_like_a_trace", lambda folder: [(folder / "x.json").mkdir() or folder / "x.json"],
         2, "no .json or .json.gz"),
]


# --- issue 15: odd but legitimate shapes, special files, directories, invisible characters, stdout -------------

def only(doc: dict, keep: Callable[[dict], bool]) -> dict:
    """doc with only the events keep() accepts."""
    return {**doc, "traceEvents": [e for e in doc["traceEvents"] if keep(e)]}


def is_kernel(e: dict) -> bool:
    return e.get("cat") == "kernel"


def edit_kernels(doc: dict, edit: Callable[[dict], None]) -> dict:
    for e in doc["traceEvents"]:
        if is_kernel(e):
            edit(e)
    return doc


def memcpys(cuda_only: bool = False) -> dict:
    """Per step a host-to-device copy and a memset, with launch records unless cuda_only."""
    doc = trace()
    events = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]
    for i in range(4):
        for name, cat in (("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy"), ("Memset (Device)", "gpu_memset")):
            corr = 100 + len(events)
            if not cuda_only:
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
                               "ts": i * 700 + 1, "dur": 1, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": i * 700 + 10, "dur": 50,
                           "args": {"stream": 7, "correlation": corr, "bytes": 4096}})
    return {**doc, "traceEvents": events}


def strip(doc: dict, keys: tuple, which: Callable[[dict], bool] = lambda e: True) -> dict:
    """doc with `keys` removed from the events which() picks."""
    for e in doc["traceEvents"]:
        if which(e):
            for k in keys:
                e.pop(k, None)
    return doc


def _pop(*keys: str) -> Callable[[dict], None]:
    return lambda e: [e["args"].pop(k, None) for k in keys]


def _shape(name: str, doc: Callable[[], dict], status: int = 0, says: str = "", *flags: str) -> Case:
    return Case("shapes", name, _file("rank-0.json", lambda: json.dumps(doc()), *flags), status, says)


RUNTIME = ("cuda_runtime", "ac2g")
SHAPE_CASES = [
    _shape("cuda_activities_only", lambda: only(trace(), is_kernel), 0, "6 GPU kernels, memcpys and memsets"),
    _shape("cuda_activities_and_gpu_annotations", lambda: only(trace(), lambda e: is_kernel(e) or e.get("cat") ==
           "user_annotation" and not e.update(cat="gpu_user_annotation", args={"stream": 7, "correlation": -1})),
           0, "have no launch record"),
    _shape("no_cpu_ops", lambda: only(trace(), lambda e: e.get("cat") != "cpu_op"), 0, "ReduceScatter x2"),
    _shape("no_launch_records_two_steps", lambda: only(trace(), lambda e: e.get("cat") not in RUNTIME),
           0, "the totals and the steps leave them out"),
    _shape("only_memcpy_and_memset", memcpys, 0, "no communication kernels"),
    _shape("only_memcpy_cuda_only", lambda: memcpys(cuda_only=True), 0, "8 memory"),
    _shape("only_communication_kernels", lambda: only(trace(), lambda e: not (is_kernel(e) and "gemm" in e["name"])),
           0, "0.00%"),
    _shape("communication_kernels_cuda_only", lambda: only(trace(), lambda e: is_kernel(e) and "nccl" in e["name"]),
           0, "3 communication"),
    _shape("kernels_without_stream", lambda: edit_kernels(trace(), _pop("stream")), 2, "6 without a stream"),
    # HTA: a row naming a stream without a correlation id is a CPU row, yet takes part, launched at its own start
    _shape("kernels_without_correlation", lambda: edit_kernels(trace(), _pop("correlation")), 0, "ReduceScatter x2"),
    _shape("kernels_without_stream_or_correlation", lambda: edit_kernels(trace(), _pop("stream", "correlation")), 2,
           "none that can be placed on the GPU timeline"),
    _shape("kernels_without_dur", lambda: edit_kernels(trace(), lambda e: e.pop("dur")), 2, "6 without a duration"),
    # refused at the first such kernel, not only where every kernel has one (fuzzG G1: a wrong type on the NCCL
    # kernels alone left them out unsaid, "no communication")
    _shape("kernels_with_string_times", lambda: edit_kernels(trace(), lambda e: e.update(ts=str(e["ts"]))), 2,
           "ts '100' / dur 400: a kernel's time must be a number"),
    _shape("communication_kernels_with_string_times", lambda: edit_kernels(
        trace(), lambda e: e.update(ts=str(e["ts"])) if "nccl" in e["name"] else None), 2, "a kernel's time must be a number"),
    _shape("communication_kernels_with_bool_durations", lambda: edit_kernels(
        trace(), lambda e: e.update(dur=True) if "nccl" in e["name"] else None), 2, "a kernel's time must be a number"),
    _shape("communication_kernels_with_text_streams", lambda: edit_kernels(
        trace(), lambda e: e["args"].update(stream="twenty") if "nccl" in e["name"] else None), 2,
           "stream 'twenty': a kernel's stream must be a whole number"),
    _shape("kernels_with_null_args", lambda: edit_kernels(trace(), lambda e: e.update(args=None)), 2,
           "without a stream"),
    _shape("kernels_with_list_args", lambda: edit_kernels(trace(), lambda e: e.update(args=[7, 1])), 2,
           "without a stream"),
    _shape("one_kernel_without_dur", lambda: with_kernel(trace(), dur=None), 0, "ReduceScatter x2"),
    _shape("only_kernels_have_dur", lambda: strip(trace(), ("dur",), lambda e: not is_kernel(e)), 0,
           "have no launch record"),
    _shape("events_without_ph_pid_tid", lambda: strip(trace(), ("ph", "pid", "tid")), 0, "ReduceScatter x2"),
    _shape("zero_and_negative_durations", lambda: edit_kernels(trace(), lambda e: e.update(
        dur=-e["dur"] if "gemm" in e["name"] else 0)), 0, "rank 0"),
    _shape("fractional_microseconds", lambda: edit_kernels(trace(), lambda e: e.update(ts=e["ts"] + 0.25, dur=e["dur"] + 0.5)),
           0, "ReduceScatter x2"),
    _shape("nanosecond_scale_times", lambda: {**(d := trace()), "traceEvents": [
        {**e, "ts": e["ts"] + 1_700_000_000_000_000_000} if "ts" in e else e for e in d["traceEvents"]]}, 0, "50.00%"),
    _shape("events_in_reverse_order", lambda: {**(d := trace()), "traceEvents": d["traceEvents"][::-1]}, 0, "50.00%"),
    _shape("names_not_strings", lambda: edit_kernels(trace(), lambda e: e.update(name=7) if "gemm" in e["name"] else None),
           0, "0.00%"),
    _shape("distributed_info_not_an_object", lambda: {**trace(), "distributedInfo": ["rank", 0]}, 0, "rank 0"),
    _shape("pg_config_hostile", lambda: {**trace(), "distributedInfo": {"rank": 0, "world_size": 2, "pg_config": [
        None, 7, {"pg_name": 2, "pg_desc": 5}, {"pg_desc": "DATA_PARALLEL_GROUP", "ranks": "9" * 5000},
        {"pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": [[0]]}]}}, 0, "dp"),
    _shape("many_empty_steps", lambda: {**(d := trace()), "traceEvents": d["traceEvents"] + [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": 10_000 + n, "dur": 1}
        for n in range(4, 20_000)]}, 0, "more steps (--format json has them all)"),  # (fuzzR R5: the text is bounded)
]


def _in_dir(*files: tuple[str, Callable[[Path], None]]) -> Callable[[Path], list]:
    """A directory `traces` holding files made by (name, make(path)) pairs."""
    def make(folder: Path) -> list:
        (folder / "traces").mkdir()
        for name, made in files:
            made(folder / "traces" / name)
        return [folder / "traces"]
    return make


def _text(doc_or_text) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(
        doc_or_text if isinstance(doc_or_text, bytes) else json.dumps(doc_or_text).encode())


def _link(target) -> Callable[[Path], None]:
    return lambda path: path.symlink_to(target if not callable(target) else target(path))


def _many(count: int, doc: Callable[[int], object]) -> Callable[[Path], list]:
    def make(folder: Path) -> list:
        (folder / "traces").mkdir()
        for rank in range(count):
            data = doc(rank)
            (folder / "traces" / f"rank-{rank}.json").write_bytes(data if isinstance(data, bytes) else
                                                                   json.dumps(data).encode())
        return [folder / "traces", "--format", "json"]
    return make


def _first_file(root: str) -> str:
    for base, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(base, name)
            if os.path.isfile(path) and not os.path.islink(path):
                return path
    return root


SPECIAL = [p for p in ("/proc/kmsg", "/proc/self/status", "/proc/self/environ", "/proc/version") if os.path.exists(p)]
SPECIAL_CASES = [
    *[Case("special", "file_" + p.strip("/").replace("/", "_"), lambda folder, p=p: [p], 2, "may never end")
      for p in SPECIAL],
    Case("special", "file_of_sys", lambda folder: [_first_file("/sys/kernel")], 2, "/sys"),
    Case("special", "dev_zero", lambda folder: ["/dev/zero"], 2, "not a regular file"),
    Case("special", "dev_stdin", lambda folder: ["/dev/stdin"], 2, ""),
    Case("special", "symlink_to_proc_kmsg", lambda folder: [_link("/proc/self/stat")(folder / "rank-0.json") or
                                                            folder / "rank-0.json"], 2, "may never end"),
    Case("special", "directory_with_a_link_to_proc", _in_dir(("rank-0.json", _text(trace())),
                                                             ("rank-1.json", _link("/proc/self/stat"))), 2, "may never end"),
    Case("special", "directory_with_a_link_to_dev_zero", _in_dir(("rank-0.json", _text(trace())),
                                                                 ("rank-1.json", _link("/dev/zero"))), 0, "rank 0"),
    Case("special", "the_proc_directory", lambda folder: ["/proc"], 2, "no .json or .json.gz"),
]

DIRECTORY_CASES = [
    Case("directories", "symlink_loop_beside_a_trace", _in_dir(("rank-0.json", _text(trace())),
                                                               ("a.json", _link("b.json")), ("b.json", _link("a.json"))),
         0, "rank 0"),
    Case("directories", "directory_loop_beside_a_trace", _in_dir(("rank-0.json", _text(trace())),
                                                                 ("loop.json", _link(lambda p: p.parent))), 0, "rank 0"),
    Case("directories", "dangling_symlink_beside_a_trace", _in_dir(("rank-0.json", _text(trace())),
                                                                   ("rank-1.json", _link("/nonexistent/rank-1.json"))),
         0, "rank 0"),
    Case("directories", "only_symlink_loops", _in_dir(("a.json", _link("b.json")), ("b.json", _link("a.json"))), 2,
         "no .json or .json.gz"),
    Case("directories", "ten_thousand_empty_json_files", _many(10_000, lambda rank: b""), 2, "empty file"),
    Case("directories", "300_ranks", _many(300, lambda rank: trace(rank=rank, world=300)), 0, '"world_size": 300'),
    Case("directories", "300_ranks_one_truncated", _many(300, lambda rank: json.dumps(trace(rank=rank, world=300))[
        :-200 if rank == 250 else None].encode()), 2, "rank-250.json: truncated"),
    Case("directories", "300_ranks_two_jobs", _many(300, lambda rank: trace(rank=rank, world=300 if rank < 200 else 8)),
         2, "two different jobs"),
    Case("directories", "plain_json_named_gz", _in_dir(("rank-0.json.gz", _text(trace()))), 0, "rank 0"),
    Case("directories", "gzip_with_zero_padding", lambda folder: [write(folder, "rank-0.json.gz", gzip.compress(
        kineto(trace()).encode()) + bytes(4096)), "--format", "json"], 0, same_as="kineto"),
    Case("directories", "gzip_empty_member_first", lambda folder: [write(folder, "rank-0.json.gz", gzip.compress(b"")
                                                                         + gzip.compress(kineto(trace()).encode())),
                                                                   "--format", "json"], 0, same_as="kineto"),
    Case("directories", "huge_line_20_mb_name", _file("rank-0.json", lambda: json.dumps(with_kernel(
        trace(), name="sm90_gemm_" + "x" * (20 << 20)))), 0, "rank 0"),
    Case("directories", "huge_blank_runs", _file("rank-0.json", lambda: json.dumps(trace()).replace(
        "}, {", "}," + " " * (8 << 20) + "{", 3)), 0, "rank 0"),
    Case("directories", "a_million_tiny_values", _file("rank-0.json", lambda: json.dumps(trace())[:-1].replace(
        '"traceEvents": [', '"traceEvents": [' + "0," * 1_000_000, 1) + "}"), 0, "rank 0"),
    Case("directories", "jobs_zero", lambda folder: [write(folder, "rank-0.json", json.dumps(trace())), "--jobs", "0"],
         2, "--jobs"),
    Case("directories", "jobs_huge", lambda folder: [write(folder, "rank-0.json", json.dumps(trace())), "--jobs",
                                                     "9" * 400], 2, "--jobs"),
    Case("directories", "jobs_superscript_digit", lambda folder: [write(folder, "rank-0.json", json.dumps(trace())),
                                                                  "--jobs", "\u00b2"], 2, "--jobs"),
    Case("directories", "jobs_more_than_ranks", lambda folder: [write(folder, "rank-0.json", json.dumps(trace())),
                                                                "--jobs", "64", "--format", "json"], 0, same_as="kineto"),
]
if hasattr(os, "geteuid") and os.geteuid() != 0:  # root reads any file
    DIRECTORY_CASES.append(Case("directories", "unreadable_file_in_a_directory", _in_dir(
        ("rank-0.json", _text(trace())), ("rank-1.json", lambda p: (_text(trace(rank=1))(p), p.chmod(0)))),
        2, "ermission denied"))

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
INVISIBLE = BIDI + "\u200b\u2060\ufeff\u00ad\u061c"


def _escaping(name: str, make: Callable[[Path], list], status: int = 0, says: str = "\\u202e") -> Case:
    return Case("escaping", name, make, status, says)


def named(text: str) -> dict:
    """A trace whose text output shows `text`: a kernel so named, on a group so described, of a collective so named
    (the note on groups that are no dimension's quotes the description; the collectives column shows the name)."""
    return with_kernel(trace(), name=f"ncclKernel_{text}", args={"Process Group Description": f"GRP_{text}",
                                                                "Collective name": f"op_{text}"})


ESCAPING_CASES = [
    _escaping("bidi_in_names", _file("rank-0.json", lambda: json.dumps(named(BIDI)))),
    _escaping("invisible_characters_in_names", _file("rank-0.json", lambda: json.dumps(named(INVISIBLE))), 0,
              "\\u200b"),
    _escaping("bidi_in_file_name", lambda folder: [write(folder, f"rank-0{BIDI}.json", json.dumps(trace()))]),
    _escaping("bidi_in_distributed_rank", _file("rank-0.json", lambda: json.dumps(
        {**trace(), "distributedInfo": {"rank": f"0{BIDI}", "world_size": 2}})), 0, "\\u202a"),
    _escaping("bidi_in_a_missing_file", lambda folder: [folder / f"gone{BIDI}.json"], 2),
    _escaping("bidi_in_a_bad_key", _file("rank-0.json", lambda: '{"k' + BIDI + '" 1}'), 2),
    _escaping("bidi_in_a_bad_rank_argument", lambda folder: [write(folder, "rank-0.json", json.dumps(trace())),
                                                             "--rank", f"0{BIDI}"], 2),
    _escaping("bidi_in_json_output", _file("rank-0.json", lambda: json.dumps(named(BIDI)), "--format", "json")),
]

NON_ASCII = "gemm_\u00e9\u4e2d\U0001f600"


def _output(name: str, status: int, says: str, stdout: str = "pipe", env: dict | None = None,
            encoding: str = "utf-8", *flags: str) -> Case:
    return Case("output", name, _file("rank-0.json", lambda: json.dumps(named(NON_ASCII)), *flags),
                status, says, env=env, stdout=stdout, encoding=encoding)


OUTPUT_CASES = [
    _output("ascii_stdout", 0, "gemm_\\xe9\\u4e2d\\U0001f600", env={"PYTHONIOENCODING": "ascii"}, encoding="ascii"),
    _output("latin1_stdout", 0, "gemm_\u00e9\\u4e2d\\U0001f600", env={"PYTHONIOENCODING": "latin-1"},
            encoding="latin-1"),
    _output("lc_all_c", 0, NON_ASCII, env={"LC_ALL": "C", "LANG": None, "PYTHONIOENCODING": None}),
    _output("lc_all_c_without_utf8_mode", 0, "gemm_\\xe9", env={"LC_ALL": "C", "LANG": None, "PYTHONIOENCODING": None,
                                                                 "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
            encoding="ascii"),
    _output("ascii_stdout_json", 0, "\\u00e9", "pipe", {"PYTHONIOENCODING": "ascii"}, "ascii", "--format", "json"),
    _output("stdout_closed", 2, "stdout is closed", stdout="closed"),
    _output("stdout_closed_json", 2, "stdout is closed", "closed", None, "utf-8", "--format", "json"),
    _output("stdout_full", 2, "no space left", stdout="full"),
    _output("stdout_full_json", 2, "no space left", "full", None, "utf-8", "--format", "json"),
    _output("stdout_broken_pipe", 0, "", stdout="broken"),
    _output("stdout_broken_pipe_ascii", 0, "", "broken", {"PYTHONIOENCODING": "ascii"}),
]

ALL_CASES = (LAYOUT_CASES + CORRUPT_CASES + NUMBER_CASES + NESTING_CASES + SURROGATE_CASES + FILE_CASES
             + PATH_CASES + SHAPE_CASES + SPECIAL_CASES + DIRECTORY_CASES + ESCAPING_CASES + OUTPUT_CASES)
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
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    for name, value in (case.env or {}).items():
        env.pop(name, None) if value is None else env.__setitem__(name, value)
    stdout, close = subprocess.PIPE, None
    if case.stdout == "closed":
        argv = ["sh", "-c", 'exec "$0" "$@" >&-', *argv]
    elif case.stdout == "full":
        stdout = close = open("/dev/full", "wb")
    elif case.stdout == "broken":
        read, stdout = os.pipe()
        os.close(read)
        close = stdout
    try:
        proc = subprocess.run(argv, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        return Outcome(None, "", "")
    finally:
        if close is not None:
            os.close(close) if isinstance(close, int) else close.close()
    return Outcome(proc.returncode, (proc.stdout or b"").decode(case.encoding, "surrogateescape"),
                   proc.stderr.decode("utf-8", "surrogateescape"))


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
        assert not unsafe(got.err), ascii(got.err)
        assert case.says in got.err, got.err
    else:
        assert got.err == "", got.err
        assert case.says in got.out, got.out[-2000:]
        assert not unsafe(got.out), ascii(unsafe(got.out))
    if case.same_as:
        assert _report(got) == _report(outcomes[case.same_as])


def test_every_class_is_covered():
    assert set(CASES) == {"layouts", "corrupt", "numbers", "nesting", "surrogates", "files", "paths", "shapes",
                          "special", "directories", "escaping", "output", "pool_signals", "pool_process_limits"}
    print("hostile trace cases per class:", CASES, "total", len(ALL_CASES))


# --- the worker pool under signals and process limits (issue 15), one case at a time ---------------------------

def slow_rank(rank: int, world: int, pairs: int = 300_000) -> bytes:
    """A gzip trace of `pairs` kernels with their launch records: about 1.5 s of analysis, 4 MB."""
    head = json.dumps({"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}})
    chunk = ",".join(
        f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","ts":{i},"dur":1,"args":{{"correlation":{i}}}}},'
        f'{{"ph":"X","cat":"kernel","name":"gemm","ts":{i},"dur":1,"args":{{"stream":7,"correlation":{i}}}}}'
        for i in range(1000))
    return gzip.compress((head[:-1] + ', "traceEvents": [' + ",".join([chunk] * (pairs // 1000)) + "]}").encode(), 1)


RANKS, JOBS = 4, "3"  # --jobs 3: workers even on a one-core machine


@pytest.fixture(scope="module")
def slow_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("slow_ranks")
    for rank in range(RANKS):
        (folder / f"rank-{rank}.json.gz").write_bytes(slow_rank(rank, RANKS))
    return folder


def live_in_group(pgid: int) -> list[int]:
    """Processes of a process group that have not exited (zombies left out: init reaps them in its own time)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in "ZX":
                found.append(int(name))
    return found


def _wait(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@dataclass
class Kill:
    name: str
    signum: int
    group: bool  # the whole process group (Ctrl-C in a terminal), else the parent alone (a harness's time-out)
    status: tuple  # acceptable exit statuses
    err: str  # what stderr must be: "" or the one line it must hold
    argv: tuple = ()  # instead of the CLI: python ARGV... DIR


# A harness that turns SIGTERM into SystemExit itself (as the main CLI does), to prove the pool's shutdown on that path.
SYSTEM_EXIT = ("-c", "import signal, sys\n"
               "def stop(signum, frame): raise SystemExit(128 + signum)\n"
               "signal.signal(signal.SIGTERM, stop)\n"
               "from mbridge_overlap.trace import analyze\n"
               "analyze(sys.argv[1], jobs=3)\n")
KILLS = [
    Kill("parent_sigkill", signal.SIGKILL, False, (-9,), ""),
    Kill("parent_sigterm", signal.SIGTERM, False, (143, -15), ""),
    Kill("parent_sighup", signal.SIGHUP, False, (129, -1), ""),
    Kill("group_sigterm", signal.SIGTERM, True, (143, -15), ""),
    *[Kill(f"group_sigint_{n}", signal.SIGINT, True, (130,), "interrupted") for n in range(1, 4)],
    Kill("systemexit_handler_sigterm", signal.SIGTERM, False, (143,), "", SYSTEM_EXIT),
]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc to find the workers")
@pytest.mark.parametrize("kill", KILLS, ids=[k.name for k in KILLS])
def test_workers_die_with_the_parent(slow_dir, kill):
    argv = [sys.executable, *kill.argv, str(slow_dir)] if kill.argv else [
        sys.executable, "-m", "mbridge_overlap", "trace", str(slow_dir), "--jobs", JOBS]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        started = _wait(lambda: proc.poll() is not None or len(live_in_group(proc.pid)) >= 1 + int(JOBS), 30)
        assert started and proc.poll() is None, ("the workers never started", proc.poll(), proc.stderr.read(500))
        time.sleep(0.2)
        (os.killpg if kill.group else os.kill)(proc.pid, kill.signum)
        start = time.monotonic()
        out, err = proc.communicate(timeout=10)  # returns once stdout and stderr are closed: no worker holds them
        closed = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert closed < 5, f"the pipes closed {closed:.1f} s after the signal"
    assert _wait(lambda: not live_in_group(proc.pid), 5), f"workers left: {live_in_group(proc.pid)}"
    err = err.decode("utf-8", "replace")
    assert proc.returncode in kill.status, (proc.returncode, err)
    assert "Traceback" not in err and out == b""
    if kill.err:
        assert err.count("\n") == 1 and kill.err in err, err
    else:
        assert err == "", err


FORK_LIMIT = ("import os, runpy, sys\n"  # os.fork fails after N forks, as under a process limit (EAGAIN)
              "allowed = [int(sys.argv.pop(1))]\n"
              "real = os.fork\n"
              "def fork():\n"
              "    if allowed[0] <= 0: raise BlockingIOError(11, 'Resource temporarily unavailable')\n"
              "    allowed[0] -= 1\n"
              "    return real()\n"
              "os.fork = fork\n"
              "sys.argv[0] = 'mbridge_overlap'\n"
              "runpy.run_module('mbridge_overlap', run_name='__main__', alter_sys=True)\n")
FORK_PROBE = ("import os, time\n"
              "first = os.fork()\n"
              "if first == 0: time.sleep(2); os._exit(0)\n"
              "try:\n"
              "    second = os.fork()\n"
              "    if second == 0: os._exit(0)\n"
              "    print('unlimited')\n"
              "except OSError: print('limited')\n")


def _nproc_prefix() -> list[str] | None:
    """prlimit --nproc=2 (as nobody where we are root: root is not held to it), where it holds and this Python
    runs the CLI under it; else None."""
    prefix = ["prlimit", "--nproc=2"]
    if not shutil.which("prlimit"):
        return None
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            return None
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *prefix]
    try:
        probe = subprocess.run([*prefix, sys.executable, "-c", "import yaml, jinja2\n" + FORK_PROBE], cwd=ROOT,
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return prefix if probe.stdout.strip() == "limited" else None


@pytest.fixture(scope="module")
def small_dir() -> Path:
    """Four small rank traces in a folder anyone may read (the process-limit case runs as nobody)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="mbridge-trace-ranks-"))
    folder.chmod(0o755)
    for rank in range(RANKS):
        write(folder, f"rank-{rank}.json", json.dumps(trace(rank=rank, world=RANKS, steps=200))).chmod(0o644)
    yield folder
    shutil.rmtree(folder)


LIMITS = ["forks_0", "forks_1", "forks_2", "prlimit_nproc_2"]


@pytest.mark.parametrize("limit", LIMITS)
def test_a_process_limit_falls_back_and_exits(small_dir, limit):
    if limit.startswith("forks_"):
        argv = [sys.executable, "-c", FORK_LIMIT, limit.split("_")[1]]
    else:
        prefix = _nproc_prefix()
        if prefix is None:
            pytest.skip("prlimit --nproc does not hold here, or this Python cannot run as an unprivileged user")
        argv = [*prefix, sys.executable, "-m", "mbridge_overlap"]
    serial = subprocess.run([sys.executable, "-m", "mbridge_overlap", "trace", str(small_dir), "--jobs", "1",
                             "--format", "json"], cwd=ROOT, capture_output=True, timeout=TIMEOUT)
    got = subprocess.run([*argv, "trace", str(small_dir), "--jobs", "4", "--format", "json"], cwd=ROOT,
                         capture_output=True, timeout=TIMEOUT)
    assert got.returncode == 0 and got.stderr == b"", got.stderr.decode()
    assert json.loads(got.stdout) == json.loads(serial.stdout)


POOL_CASES = {"pool_signals": len(KILLS), "pool_process_limits": len(LIMITS)}
CASES.update(POOL_CASES)
