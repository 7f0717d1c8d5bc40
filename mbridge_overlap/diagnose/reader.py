"""Log lines from files, directories of per-rank logs and standard input, streamed with bounded memory.

Every byte is normal input: lines are decoded as UTF-8 with replacement characters, ANSI codes and carriage returns
are the matcher's business (messages.clean), a gzip file is inflated as it is read, and a line longer than MAX_LINE
bytes keeps its first and its last MAX_LINE bytes (the middle is dropped and the line says so). A line names its
rank where the launcher prefixed one: torch's `[rank3]:`, torchrun's `[default3]:` (a local rank), srun -l's
`3: `, mpirun --tag-output's `[1,3]<stderr>:`; else the rank its file's path names (rank3.log, torchrun's
log_dir/.../attempt_0/3/stderr.log).

A log of one JSON object a line (docker's json-file driver `{"log":"...\\n","stream":"stderr","time":"..."}`,
fluentd / fluent-bit, a structured logger's `{"message": ...}`) is read as its records' text: a line that is such a
record is the string value of its first RECORD_KEYS key, JSON-unescaped, its final newline dropped (record_lines),
with the traceback a structured logger writes beside it (TRACE_KEYS) as its further lines; a value holding more
lines is those lines, each numbered as the record's line. Other lines are read as they are.

A line that its writer split into partial records is read whole, per stream (stdout and stderr apart): Kubernetes'
CRI lines (`<time> stdout P <text>`, continued by the next record of that stream up to the one tagged F) and docker
json-file records whose "log" lacks its final newline (a line of over 16 KiB). The joined line is numbered as its
first record and kept to MAX_LINE bytes at each end like any long line; a run that never ends is read at the end.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import zlib
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from ..errors import UsageError
from ..safeio import check_inflation, compressed_otherwise, esc, file_identity, open_input, reason
from .messages import RAY_PREFIX

MAX_LINE = 1 << 17  # bytes of a line kept at each end (the matcher looks at 64 Ki characters of each)
CHUNK = 1 << 20
BLOCK = 1 << 18  # bytes of complete lines a block holds, about (its work stays in the CPU cache: a few % faster than 1 MiB)
MAX_LOG_BYTES = 1 << 40  # a log may be huge; it streams, so the limit only stops what cannot be a log
MAX_FILES = 20_000  # files of one directory tree
MAX_DEPTH = 32  # folders below the one given (torchrun's log_dir/<run>/attempt_N/<local rank>/stderr.log is 4 deep)
_LOG_STEM = r"(?:\.(?:log|txt|out|err|stdout|stderr)|^(?:stdout|stderr|output|log))(?:\.\d+)?"
LOG_NAMES = re.compile(_LOG_STEM + r"(?:\.gz)?\Z", re.I)
# compressed otherwise than gzip: named, but not read (fuzzO F6: their bytes were read as text, "causes: none")
_PACKED = re.compile(_LOG_STEM + r"\.(?:xz|bz2|zst|lz4)\Z", re.I)
CUT = " [... {n:,} bytes left out ...] "
_GZIP = 16 + zlib.MAX_WBITS

# ASCII digits only (re.A): a launcher writes no other, and a rank is one label however it is written ([rank03] is 3)
_PREFIX = re.compile(
    r"^(?:\[rank(?P<rank>\d{1,7})\]:"  # torch's own (c10 logging, tracebacks with TORCH_SHOW... / torchrun -r)
    r"|\[(?P<role>[A-Za-z_][A-Za-z_]*?)(?P<local>\d{1,7})\]:"  # torchrun --tee / --log-dir: [role local_rank]:
    r"|\[\d{1,7},(?P<mpi>\d{1,7})\]<(?:stdout|stderr)>:"  # mpirun --tag-output
    r"|(?P<task>\d{1,7}): )",  # srun -l / --label
    re.A,
)
# Ray's prefix on a worker's line, as the driver prints it (ray-project/ray python/ray/_private/worker.py
# print_worker_logs: f"{color_pre}({prefix_for(data)}{pid}{ip_prefix}){color_post} {line}", prefix_for giving "pid="
# with the actor's or task's name and a space before it where the record has one, ip_prefix ", ip=<ip>" for another
# node's worker, color_pre a colorama foreground code and color_post RESET_ALL unless RAY_COLOR_PREFIX=0): `(pid=4242) `,
# `(MegatronPolicyWorker pid=4242, ip=10.0.0.3) `. SkyPilot's is Ray's with its task named `head, rank=0,` or
# `worker1, rank=1,` (skypilot-org/skypilot sky/backends/task_codegen.py RayCodeGen._add_ray_task: name_str
# f'{node_name}, rank={rank},', or '{task_name},' on one node): `(head, rank=0, pid=1234) `, `(task, pid=1234) `. The
# same shape as messages.LAUNCH_PREFIX's Ray branch; its rank= is a node's, no process's: the line names no rank by it,
# and a rank prefix after it (`(pid=1) [rank3]: `) is read as without it (fuzzZ Z-4).
_RAY = re.compile(r"(?:\x1b\[[0-9;]{0,16}m){0,4}" + RAY_PREFIX + r"(?:\x1b\[[0-9;]{0,16}m){0,4}(?: |\Z)", re.A)
# The keys whose string value is a JSON log record's text, the first present: docker json-file and fluentd ("log"),
# structured loggers ("message": python-json-logger's JsonFormatter; "msg"), journald's export ("MESSAGE"), Google
# Cloud Logging ("textPayload"), structlog's JSONRenderer ("event": BoundLoggerBase._process_event puts a call's text
# there, src/structlog/_base.py), loguru's serialize=True ("text": Handler._serialize_record writes {"text": the
# formatted line, its traceback with it, "record": {...}}, loguru/_handler.py)
RECORD_KEYS = ("log", "message", "msg", "MESSAGE", "textPayload", "event", "text")
# The keys whose string value is the traceback (or stack) a structured logger writes beside the record's text, which
# plain logging prints as the record's next lines (fuzzX X2-4): python-json-logger's "exc_info" (formatException, or
# the record's exc_text) and "stack_info" (pythonjsonlogger core.py BaseJsonFormatter.format), structlog's "exception"
# (format_exc_info, ExceptionRenderer) and "stack" (StackInfoRenderer, src/structlog/processors.py), and the
# "exc_text", "stack_trace" of other formatters. Each is read as further lines of the record, in this order.
TRACE_KEYS = ("exc_info", "exc_text", "exception", "stack_trace", "stack_info", "stack")
_TRACE_SET = frozenset(TRACE_KEYS)
# a record the JSON reader refuses (a line cut in its middle: MAX_LINE): its key's value, as far as it goes, where that
# key comes first
_RECORD_HEAD = re.compile(r'\{"(?:' + "|".join(RECORD_KEYS) + r')"\s*:\s*"((?:[^"\\]+|\\.)*)')
# docker's json-file record, {"log":"...","stream":"stderr","time":"..."}: "log" first, then fields of strings or scalars
# (moby daemon/logger/jsonfilelog/jsonlog/jsonlogbytes.go MarshalJSONBuf writes log, stream, attrs, time: the stream,
# group 2, second)
_DOCKER = re.compile(rb'\{"log":"((?:[^"\\\n]+|\\.)*)"(?:,"stream":"(stdout|stderr)")?'
                     rb'(?:,"[^"\\\n]*":(?:"(?:[^"\\\n]+|\\.)*"|[-+.\w]*))*\}[ \t\r]*')
# Partial records. Docker (moby daemon/logger/copier.go copySrc) reads a container's stream into a 16 KiB buffer
# (defaultBufSize; json-file sets no other) and logs a line that fills it in pieces of PartialLogMetaData, every one
# but the last without the newline (jsonfilelog.go marshalMessage appends "\n" only to a whole line or a last piece);
# so does a stream's unfinished line at its end. Kubernetes' CRI log line (the files under /var/log/pods that kubelet
# reads for `kubectl logs`) is `<time> <stdout|stderr> <tag> <text>`, one space after each: containerd
# (internal/cri/io/logger.go redirectLogs) writes time.RFC3339Nano and tag P for a piece of a line longer than
# max_container_log_line_size (16 KiB by default) or one its stream ended without a newline, F for a line's end;
# CRI-O's conmon (src/ctr_logging.c) the same with a numeric UTC offset (set_k8s_timestamp), a piece being what its
# read buffer held. kubelet (pkg/kubelet/kuberuntime/logs/logs.go parseCRILog) takes the tag's first ':'-separated
# part, P meaning partial (the writers write P or F: no other tag is read as one, so a plain log's
# `<time> stderr WARNING ...` stays as it is), and writes a P record's text without its newline: the line is the texts of its stream's P
# records up to and with the next F record's. A record is read as its text, as kubelet writes it (a docker record is
# read as its "log"): the prefix goes (_CRI_LINES, where a block's first or last line is a record: see _parts).
_CRI_HEAD = rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) (stdout|stderr) ([PF])(?::[^ \n]*)? "
_CRI = re.compile(_CRI_HEAD)
_CRI_TEXT = re.compile(_CRI_HEAD.decode(), re.A)
_CRI_LINES = re.compile(b"\n" + _CRI_HEAD)  # (a literal first: the regex engine finds the line ends at memchr's speed)
_CRI_PARTIAL = (b" stdout P", b" stderr P")  # where a P record may be (checked by _CRI at its line's start)
_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')
_INNER_RANK = re.compile(r"\[rank(\d{1,7})\]:", re.A)
_PATH_RANK = re.compile(r"rank[_-]?(\d{1,7})(?!\d)", re.I | re.A)


class Line(NamedTuple):
    """One line of a log (a named tuple: millions are made, each in a fraction of a frozen dataclass's time)."""

    source: str  # the file as given ("-" for standard input)
    number: int  # 1-based line number in that source
    rank: str | None  # "3" (a global rank), "local 3" (torchrun's local rank), None: not known
    text: str  # the line without its launcher prefix (ANSI codes and all: the matcher cleans)
    cut: int = 0  # bytes left out of the middle of an over-long line


def files(paths: Iterable[str], notes: list | None = None) -> list[str]:
    """The logs a list of arguments names: files as given ("-": standard input), each directory's log files
    (LOG_NAMES, depth-first in name order with numbers as numbers, symbolic links not followed); a file named twice
    (by another path too) is read once, where first named (fuzzH H12), as trace reads a rank file named twice.
    `notes` gets what a folder held that is not read (unreadable folders under it, logs compressed otherwise)."""
    notes = [] if notes is None else notes
    out: list[str] = []
    for path in paths:
        if path == "-":
            out.append(path)
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise UsageError(f"{esc(path)}: {reason(exc)}") from None
        out.extend(_walk(path, notes) if stat.S_ISDIR(mode) else [path])
        if len(out) > MAX_FILES:
            raise UsageError(f"{esc(path)}: over {MAX_FILES:,} log files; name the ranks' folders or files you want read")
    return _once(out)


def _once(paths: list[str]) -> list[str]:
    seen, out = set(), []
    for path in paths:
        key = file_identity(path)
        if key not in seen:
            seen.add(key)
            out.append(path)
    return out


def _natural(name: str) -> list:
    """A name's sort key with its numbers as numbers: rank2.log before rank10.log."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d{1,18})", name)]


def _walk(top: str, notes: list) -> list[str]:
    """The log files under `top`, depth-first in name order (numbers as numbers); refused as soon as there are more than MAX_FILES
    (counted as the folders are listed, before anything is sorted). A folder under `top` that cannot be listed is
    left out with a note (fuzzO F7: a lost+found stopped the whole read), as are logs compressed otherwise than gzip."""
    found: list[str] = []
    stack, too_deep, unread, packed = [(top, 0)], False, [], 0
    while stack:
        folder, depth = stack.pop()
        logs, folders = [], []
        try:
            with os.scandir(folder) as it:
                for e in it:
                    if e.is_symlink():
                        continue
                    if e.is_dir(follow_symlinks=False):
                        folders.append(e.name)
                    elif LOG_NAMES.search(e.name) and e.is_file(follow_symlinks=False):
                        logs.append(e.name)
                        if len(found) + len(logs) > MAX_FILES:
                            raise UsageError(f"{esc(top)}: over {MAX_FILES:,} log files; name the ranks' folders or files you want read")
                    elif _PACKED.search(e.name):
                        packed += 1
        except OSError as exc:
            if folder == top:
                raise UsageError(f"{esc(folder)}: {reason(exc)}") from None
            unread.append(f"{esc(folder)} ({reason(exc)})")
            continue
        found += [os.path.join(folder, name) for name in sorted(logs, key=_natural)]
        if folders and depth + 1 > MAX_DEPTH:
            too_deep = True
            continue
        stack += [(os.path.join(folder, name), depth + 1) for name in sorted(folders, reverse=True)]
    if unread:
        notes.append(f"{len(unread):,} folder{'s' * (len(unread) > 1)} under {esc(top)} could not be listed, their logs not "
                     f"read: {', '.join(unread[:3])}" + (f" and {len(unread) - 3:,} more" if len(unread) > 3 else ""))
    if packed:
        notes.append(f"{packed:,} log{'s' * (packed > 1)} under {esc(top)} compressed otherwise than gzip (xz, bzip2, zstd, "
                     "lz4) not read: decompress them, or gzip them, first")
    if not found:
        deeper = f"; folders more than {MAX_DEPTH} levels down were not read" if too_deep else ""
        raise UsageError(f"{esc(top)}: no log files in it (names ending .log, .txt, .out or .err, or stdout/stderr){deeper}")
    return found


def lines(sources: Iterable[str], stdin=None, notes: list | None = None) -> Iterator[Line]:
    """Every line of every source, in order; `notes` gets a line for a source read otherwise than as UTF-8 lines
    (UTF-16 or UTF-32 by its byte-order mark, carriage returns as line ends)."""
    for source in sources:
        yield from _lines(source, stdin, notes if notes is not None else [])


def _lines(source: str, stdin, notes: list) -> Iterator[Line]:
    stream, path_rank = _open(source, stdin)
    try:
        runs = _Runs(source, path_rank)
        yield from _numbered(source, 0, _texts(_normalised(_chunks(stream, source, notes), source, notes)), path_rank, runs)
        yield from runs.rest()
    finally:
        if stream is not stdin and source != "-":
            stream.close()


def _open(source: str, stdin):
    """(a binary stream, the rank the path names)."""
    if source == "-":
        if stdin is None and sys.stdin is None:  # started with standard input closed
            raise UsageError("-: standard input is closed; give the log's path")
        stream = stdin if stdin is not None else sys.stdin.buffer
        if _a_device(stream):
            raise UsageError("-: standard input is a device (such as /dev/zero), not a log; give the log's path or pipe it in")
        return stream, None
    return os.fdopen(open_input(source, MAX_LOG_BYTES), "rb"), rank_of_path(source)


def _a_device(stream) -> bool:
    """A character device that is not a terminal (a terminal is a user pasting a log)."""
    try:
        return stat.S_ISCHR(os.fstat(stream.fileno()).st_mode) and not stream.isatty()
    except (AttributeError, OSError, ValueError):  # an in-memory stream (the API's stdin=BytesIO)
        return False


def _numbered(source: str, number: int, texts, path_rank: str | None, runs: _Runs) -> Iterator[Line]:
    """The lines as Lines, partial records joined in `runs` (whose rest the caller takes at the source's end)."""
    for lines_, cuts in texts:
        for i, text in enumerate(lines_):
            number += 1
            cut = cuts[i] if cuts else 0
            if text[:1].isdigit() or runs.cri:
                m = _CRI_TEXT.match(text)
                if m is not None:
                    joined = runs.cri_record(m[1], m[2] == "P", number, text[m.end():].encode("utf-8", "replace"), cut)
                    if joined is not None:
                        yield from joined
                        continue
                    text = text[m.end():]
            record = _record(text) if text[:2] == '{"' else None
            if record is not None and record[2] is not None and (not record[1] or record[2] in runs.docker):
                value, ended, key = record
                if ended:
                    yield from runs.end(runs.docker, key, value.encode("utf-8", "replace"), cut)
                else:
                    runs.add(runs.docker, key, number, value.encode("utf-8", "replace"), cut)
                continue
            for part in (record[0].replace("\r\n", "\n").split("\n") if record is not None else (text,)):
                rank, part = split_prefix(part)
                yield Line(source, number, rank if rank is not None else path_rank, part, cut)


class _Runs:
    """The lines under way in partial records of one source (module docstring: CRI's P records, docker's records
    without their final newline), one a stream: [the first record's line number, head, tail, bytes dropped], kept as
    _grow keeps a long line (its first and its last MAX_LINE bytes, the same CUT note between them). A line is its
    records' texts, a docker one's several lines (or a CRI one's JSON log record) read as those lines. Head and tail
    are bytearrays added to in place: a piece costs its own bytes, not a copy of the kept tail (fuzzY Y2-6: a chain of
    a million one-byte P records copied up to 128 KiB a piece); the tail is cut to its last MAX_LINE bytes once it
    holds MAX_LINE more (and when the run ends), so a run that never ends holds at most 3 x MAX_LINE bytes a stream."""

    __slots__ = ("source", "path_rank", "cri", "docker", "seen")

    def __init__(self, source: str, path_rank: str | None):
        self.source, self.path_rank = source, path_rank
        self.cri: dict = {}  # stream (str) -> run
        self.docker: dict = {}
        self.seen = False  # a block of CRI records read: the source's later blocks are read as such too

    def add(self, runs: dict, key: str, number: int, piece: bytes, cut: int = 0) -> None:
        run = runs.get(key)
        if run is None:
            run = runs[key] = [number, bytearray(), bytearray(), 0]
        head, tail = run[1], run[2]
        if not tail:
            room = MAX_LINE - len(head)
            if len(piece) <= room:
                head += piece
                piece = b""
            elif room > 0:
                head += piece[:room]
                piece = piece[room:]
        if piece:
            tail += piece
            if len(tail) >= 2 * MAX_LINE:  # (amortised: a cut every MAX_LINE bytes; bytearray drops its front in place)
                _trim(run)
        run[3] += cut

    def end(self, runs: dict, key: str, piece: bytes, cut: int = 0) -> Iterator[Line]:
        """The run of `key` ended by its last piece, as Lines (a docker record's text of several lines: one each)."""
        self.add(runs, key, 0, piece, cut)
        return self._lines(runs.pop(key), runs is self.docker)

    def cri_record(self, stream: str, partial: bool, number: int, piece: bytes, cut: int = 0) -> Iterator[Line] | None:
        """A CRI record (line `number`, its text `piece`) read by kubelet's rule (module docstring), for both readers:
        a P record (`partial`) adds to its stream's run (no Lines yet), an F record ends its stream's run (the joined
        line's Lines); None for an F record with no run of its stream under way (a whole line, read in its place)."""
        if partial:
            self.add(self.cri, stream, number, piece, cut)
            return iter(())
        return self.end(self.cri, stream, piece, cut) if stream in self.cri else None

    def rest(self) -> Iterator[Line]:
        """The runs the source leaves under way (a stream that ended without a newline, a hostile log), in order."""
        left = sorted([(run, False) for run in self.cri.values()] + [(run, True) for run in self.docker.values()])
        self.cri, self.docker = {}, {}
        for run, docker in left:
            yield from self._lines(run, docker)

    def _lines(self, run: list, docker: bool) -> Iterator[Line]:
        _trim(run)
        number, head, tail, dropped = run
        text = _text(head, tail, dropped)
        if docker:
            parts = text.replace("\r\n", "\n").split("\n") if "\n" in text else (text,)
        else:
            parts = (record_lines(text) if text[:2] == '{"' else None) or (text,)
        mark = CUT.format(n=dropped) if dropped else None
        for part in parts:
            rank, part = split_prefix(part)
            yield Line(self.source, number, rank if rank is not None else self.path_rank, part,
                       dropped if mark is not None and mark in part else 0)


def _trim(run: list) -> None:
    """A run's tail cut to its last MAX_LINE bytes, the bytes cut counted as dropped."""
    excess = len(run[2]) - MAX_LINE
    if excess > 0:
        del run[2][:excess]
        run[3] += excess


def record_lines(text: str) -> list[str] | None:
    """The text of a line that is a JSON log record (RECORD_KEYS: docker json-file's "log", a structured logger's
    "message"), as lines: the key's string value JSON-unescaped, without its final newline, split at the others (a
    record of a multi-line print); None for any other line (not JSON, or no such key with a string value). A record
    the JSON reader refuses (cut in its middle: MAX_LINE) gives its key's value as far as it goes, where the key
    comes first."""
    record = _record(text)
    return None if record is None else record[0].replace("\r\n", "\n").split("\n")


def _record(text: str) -> tuple[str, bool, str | None] | None:
    """(record_lines' value before it is split, whether it ended with a newline, the docker stream of a record that
    may be a piece of a line: its "log" key's, with "stream" stdout or stderr) of a JSON log record; None for
    another line."""
    if not text.startswith('{"'):
        return None
    line = text.rstrip()
    value, stream = None, None
    if line.endswith("}"):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # not JSON; nested past the parser's depth; an integer of too many digits
            record = None
        if isinstance(record, dict):
            key = next((k for k in RECORD_KEYS if isinstance(record.get(k), str)), None)
            if key is None:
                return None
            value = record[key]
            if key == "log" and record.get("stream") in ("stdout", "stderr"):
                stream = record["stream"]
            if not _TRACE_SET.isdisjoint(record):  # (one C loop over the record's keys where it has none)
                value = _with_traces(value, record)
    if value is None:
        m = _RECORD_HEAD.match(line)
        if m is None:
            return None
        value = _unescaped(m[1])
    ended = value.endswith("\n")
    return (value[:-1] if ended else value), ended, stream


def _with_traces(value: str, record: dict) -> str:
    """A record's text with the string values of its TRACE_KEYS after it, as the lines plain logging prints after the
    message (a text that holds one already: once; a blank or non-string value: none)."""
    traces = [t for k in TRACE_KEYS if isinstance(t := record.get(k), str) and t.strip() and t not in value]
    if not traces:
        return value
    return "\n".join([value[:-1] if value.endswith("\n") else value,
                      *(t[:-1] if t.endswith("\n") else t for t in traces)]) + "\n"


def _unescaped(value: str) -> str:
    """A JSON string's inside with its escapes undone (a surrogate pair is one character); an escape the JSON reader
    refuses (a cut line) is undone where it is whole, kept as it is where not."""
    try:
        return json.loads(f'"{value}"')
    except ValueError:
        return _ESCAPE.sub(_unescape, value)


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(m: re.Match) -> str:
    e = m.group()[1:]
    return chr(int(e[1:], 16)) if e[0] == "u" else _ESCAPES[e]


def _record_lines(block: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of the lines of a block that start with `{"` (found by the byte search, not by a regular
    expression tried at every position), their newline left out."""
    at = 0 if block.startswith(b'{"') else block.find(b'\n{"') + 1 or -1
    while at >= 0:
        end = block.find(b"\n", at)
        if end == -1:
            yield at, len(block)
            return
        yield at, end
        at = block.find(b'\n{"', end)
        at = at + 1 if at != -1 else -1


def _parts(source: str, number: int, block: bytes, path_rank: str | None, runs: _Runs) -> Iterator[tuple[int, bytes] | Line]:
    """A block of complete lines as _records gives it, CRI records read as their text first (_cri: partial records
    joined, the prefixes of the others taken off) where its first or last line is a CRI record or a CRI line is under
    way, or was in an earlier block of the source: a plain log pays two anchored matches a block. (CRI records only
    between plain lines in a source's blocks before are read as plain text.)"""
    if runs.cri or runs.seen or _CRI.match(block) or _CRI.match(block, block.rfind(b"\n", 0, len(block) - 1) + 1):
        runs.seen = True
        for part in _cri(number, block, runs):
            if isinstance(part, Line):
                yield part
            else:
                data = _CRI_LINES.sub(b"\n", b"\n" + part[1])[1:]
                yield from _records(source, part[0], data, path_rank, runs)
    else:
        yield from _records(source, number, block, path_rank, runs)


def _cri(number: int, block: bytes, runs: _Runs) -> Iterator[tuple[int, bytes] | Line]:
    """The block with its CRI P records and the F records that end their runs taken out (a run ended: its Lines in
    their place), the rest as (number of the first line, bytes) parts. Lines are read one by one only while a run is
    under way; else the next P record is found by a byte search (each of _CRI_PARTIAL's places kept until passed)."""
    cri, size = runs.cri, len(block)
    start, first = 0, number  # the block's part not yet given: where it starts, its first line's number
    at, n = 0, number  # the line read next
    hits = [block.find(p) for p in _CRI_PARTIAL]
    while at < size:
        if not cri:
            for k, p in enumerate(_CRI_PARTIAL):
                if -1 < hits[k] < at:
                    hits[k] = block.find(p, at)
            found = [h for h in hits if h != -1]
            if not found:
                break
            line = block.rfind(b"\n", at, min(found)) + 1 or at
            n += block.count(b"\n", at, line)
            at = line
        end = block.find(b"\n", at)
        end = size if end == -1 else end
        m = _CRI.match(block, at, end)
        joined = None if m is None else runs.cri_record(m[1].decode(), m[2] == b"P", n, block[m.end():end])
        if joined is not None:
            if start < at:
                yield first, block[start:at]
            yield from joined
            start, first = end + 1, n + 1
        at, n = end + 1, n + 1
    if start < size:
        yield first, block[start:]


def _records(source: str, number: int, block: bytes, path_rank: str | None,
             runs: _Runs | None = None) -> Iterator[tuple[int, bytes] | Line]:
    """A block of complete lines (the first numbered `number`) with its JSON log records read as their text
    (record_lines): a record of one line is replaced in the block by its text (the block keeps its line count), one
    of several lines comes as Lines, each numbered as the record's line, between the block's parts before and after
    it. A block without `{"` is as it is: a plain log pays a search for one byte a block (memchr: a search for the
    two bytes `{"` costs 5% of a plain log's whole scan), two where it holds braces. A docker json-file record
    (_DOCKER: "log" first, flat) is read from its bytes, without the JSON reader. A docker record that is a piece of
    a line (no final newline) is taken out, into `runs`; the one that ends the line gives it, as Lines, in its place."""
    if b"{" not in block or b'{"' not in block:
        yield number, block
        return
    runs = runs if runs is not None else _Runs(source, path_rank)
    start, out = 0, []  # where the block's part not yet given starts, and its pieces before that (records' texts)
    first, base = number, 0  # that part's first line: its number, and where it starts in the block
    for a, b in _record_lines(block):
        docker = _DOCKER.fullmatch(block, a, b)
        if docker is not None:
            value, stream = docker.group(1), docker.group(2)
            ended = value.endswith(b"\\n") and (len(value) - len(value[:-1].rstrip(b"\\"))) % 2 == 0
            if ended:
                value = value[:-2]  # the final newline (an odd run of backslashes before the n: not an escaped one)
            stream = stream.decode() if stream is not None and (not ended or runs.docker) else None
            if b"\\" not in value and (stream is None or (ended and stream not in runs.docker)):
                out += [block[start:a], value]
                start = b
                continue
            text = _unescaped(value.decode("utf-8", "replace")) if b"\\" in value else value.decode("utf-8", "replace")
        else:
            record = _record(block[a:b].decode("utf-8", "replace"))
            if record is None:
                continue
            text, ended, stream = record
        if stream is not None and (not ended or stream in runs.docker):
            at = first + block.count(b"\n", base, a)
            if out or start < a:
                yield first, b"".join(out) + block[start:a]
            if ended:
                yield from runs.end(runs.docker, stream, text.encode("utf-8", "replace"))
            else:
                runs.add(runs.docker, stream, at, text.encode("utf-8", "replace"))
            start = base = b + 1
            out, first = [], at + 1
            continue
        lines_ = text.replace("\r\n", "\n").split("\n")
        if len(lines_) == 1:
            out += [block[start:a], lines_[0].encode("utf-8", "replace")]
            start = b
            continue
        at = first + block.count(b"\n", base, a)
        if out or start < a:
            yield first, b"".join(out) + block[start:a]
        for part in lines_:
            rank, part = split_prefix(part)
            yield Line(source, at, rank if rank is not None else path_rank, part)
        start = base = b + 1
        out, first = [], at + 1
    rest = b"".join(out) + block[start:]
    if rest:
        yield first, rest


def blocks(source: str, stdin=None, notes: list | None = None) -> Iterator[tuple[int, bytes] | Line]:
    """The source as blocks of complete lines, (number of the first line, bytes) for Scan.read_block, normalised as
    lines() normalises them. A line that runs on past 2 x MAX_LINE bytes ends the blocks: it and the rest of the
    source come as Lines (lines() cuts such a line with bounded memory)."""
    stream, path_rank = _open(source, stdin)
    try:
        notes = notes if notes is not None else []
        chunks = _normalised(_chunks(stream, source, notes), source, notes)
        number, carry = 1, b""
        runs = _Runs(source, path_rank)
        for chunk in chunks:
            data = carry + chunk if carry else chunk
            last = data.rfind(b"\n")
            if last == -1 and len(data) > 2 * MAX_LINE:
                yield from _numbered(source, number - 1, _texts(_chain(data, chunks)), path_rank, runs)
                carry = b""
                break
            carry = data[last + 1:]
            start = 0
            while start <= last:  # blocks of about BLOCK bytes: a block's work stays in the CPU's cache
                end = data.rfind(b"\n", start, start + BLOCK) if last - start >= BLOCK else last
                end = data.find(b"\n", start + BLOCK) if end == -1 else end  # (a line longer than BLOCK)
                yield from _parts(source, number, data[start:end + 1], path_rank, runs)
                number += data.count(b"\n", start, end + 1)
                start = end + 1
        if carry:
            yield from _parts(source, number, carry, path_rank, runs)
        yield from runs.rest()
    finally:
        if stream is not stdin and source != "-":
            stream.close()


def line_text(raw: bytes) -> tuple[str, int]:
    """One line's bytes (no newline) as lines() decodes it: (text, bytes left out of its middle)."""
    if len(raw) <= MAX_LINE:
        return raw.decode("utf-8", "replace"), 0
    head, tail, dropped = _grow(b"", b"", 0, raw)
    return _text(head, tail, dropped), dropped


def _chunks(stream, source: str, notes: list) -> Iterator[bytes]:
    """The file's bytes in chunks, inflated when it is gzip (several members, zero padding, a cut end: all it holds).
    A regular file is read up to the size it had when opened: a log that grows while it is read (a run still
    writing it) is the log as it was, and diagnose ends."""
    read = _bounded(stream)
    try:
        first = read(CHUNK)
        packed = compressed_otherwise(first)
        if packed:
            raise UsageError(f"{esc(source)}: {packed} data: decompress it first (diagnose reads plain and gzip logs)")
        if first[:2] != b"\x1f\x8b":
            while first:
                yield first
                first = read(CHUNK)
            return
        ended = yield from _inflate(read, first, source)
        if ended == TRAILING:
            notes.append(f"{esc(source)}: bytes that are no gzip data follow its last gzip member: ignored, as gzip -d does")
        elif ended:
            notes.append(f"{esc(source)}: the gzip stream ends early (a cut file): its last line may be cut too")
    except OSError as exc:
        raise UsageError(f"{esc(source)}: cannot read ({esc(exc.strerror or exc)})") from None
    except zlib.error as exc:
        raise UsageError(f"{esc(source)}: not a readable gzip file ({esc(exc)})") from None


# Byte-order marks, longest first (UTF-32 LE starts as UTF-16 LE does): what PowerShell's `>` and Windows tools write
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
         (b"\xfe\xff", "utf-16-be"), (b"\xef\xbb\xbf", "utf-8"))


def _normalised(chunks: Iterator[bytes], source: str, notes: list) -> Iterator[bytes]:
    """The chunks as UTF-8 with newline line ends: a log that starts with a UTF-16 or UTF-32 byte-order mark is
    transcoded (decoded by its mark), and one whose first chunk ends lines with carriage returns alone (old Mac
    line ends, a tool's progress output saved as is) has them read as line ends. Each says so in `notes`."""
    first = _head(chunks)
    if any(first == bom for bom, _ in _BOMS):
        return  # a byte-order mark and nothing after it: an empty log (recheck50 R8)
    encoding = next((name for bom, name in _BOMS if first.startswith(bom) and _wide(first, name)), None)
    how = "it starts with that byte-order mark"
    if encoding == "utf-8":
        first, encoding = first[3:], None
    elif encoding is None and (encoding := _utf16_without_mark(first)):
        how = "no byte-order mark, but the zero byte UTF-16 puts beside each ASCII character, line ends at least"
    if encoding is not None:
        import codecs

        notes.append(f"{esc(source)}: read as {encoding.upper()} ({how})")
        decoder = codecs.getincrementaldecoder(encoding)("replace")
        chunks = (decoder.decode(c).encode("utf-8") for c in _chain(first, chunks))
        first = next(chunks, b"").removeprefix("\ufeff".encode())
    cr_only = b"\n" not in first and b"\r" in first
    if cr_only:
        notes.append(f"{esc(source)}: its lines end with carriage returns alone; read as line ends")
    for chunk in _chain(first, chunks):
        yield chunk.replace(b"\r", b"\n") if cr_only else chunk


def _head(chunks: Iterator[bytes], size: int = 4096) -> bytes:
    """The first chunks, joined up to `size` bytes at least where the file has them: a gzip's first member may hold
    two characters, or only a byte-order mark (fuzzL L4), and the encoding is decided on the text, not on a member."""
    first = b""
    for chunk in chunks:
        first += chunk
        if len(first) >= size:
            break
    return first


def _wide(first: bytes, encoding: str) -> bool:
    """Whether text after a UTF-16 or UTF-32 mark is in that encoding: a log's text is mostly ASCII, whose every
    character holds a zero byte in UTF-16 (three in UTF-32); bytes FF FE before UTF-8 text (junk, a cut binary) hold
    none, and stay UTF-8."""
    if encoding == "utf-8":
        return True
    sample = first[:4096]
    return sample.count(0) >= len(sample) * (0.4 if encoding.startswith("utf-32") else 0.1)


def _utf16_without_mark(first: bytes) -> str | None:
    """UTF-16 without a byte-order mark (Python's utf-16-le, some Windows tools; fuzzK K8): a log is mostly ASCII,
    which UTF-16 writes with a zero byte after (LE) or before (BE) each character, and UTF-8 text holds no zero."""
    sample = first[:4096]
    half = len(sample) // 2
    if half < 8:
        return None
    even, odd = sample[0:2 * half:2].count(0), sample[1:2 * half:2].count(0)
    if odd >= 0.8 * half and even <= 0.05 * half:
        return "utf-16-le"
    if even >= 0.8 * half and odd <= 0.05 * half:
        return "utf-16-be"
    # text that is not mostly ASCII (progress bars, CJK: fuzzL L4): every line end a UTF-16 one, at an even offset
    ends = sample.count(b"\n")
    if ends >= 2:
        for pair, name in ((b"\n\x00", "utf-16-le"), (b"\x00\n", "utf-16-be")):
            at = [i for i in range(0, 2 * half - 1, 2) if sample[i:i + 2] == pair]
            if len(at) == ends:
                return name
    return None


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _bounded(stream):
    """stream.read, stopping at a regular file's size when opened (a pipe or standard input: as it comes)."""
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return stream.read
    if not stat.S_ISREG(st.st_mode):
        return stream.read
    left = st.st_size

    def read(n: int) -> bytes:
        nonlocal left
        if left <= 0:
            return b""
        data = stream.read(min(n, left))
        left -= len(data)
        return data

    return read


TRAILING = "trailing"


def _inflate(read, data: bytes, source: str):
    """Yields the inflated bytes; returns whether the stream was cut inside a member (TRAILING: bytes that are no
    gzip member follow the last one). A gzip bomb is refused (safeio.check_inflation)."""
    z = zlib.decompressobj(_GZIP)
    compressed, inflated = len(data), 0

    def more(n: int) -> bytes:
        nonlocal compressed
        got = read(n)
        compressed += len(got)
        return got

    while True:
        while data:
            out = z.decompress(data, CHUNK)
            # at a member's end the rest of the input is unused_data; unconsumed_tail may still hold the same bytes
            data = z.unused_data if z.eof else z.unconsumed_tail
            if out:
                inflated += len(out)
                check_inflation(source, inflated, compressed)
                yield out
            if z.eof:
                data = data.lstrip(b"\0")
                if not data:
                    data = more(CHUNK).lstrip(b"\0")
                if len(data) == 1:
                    data += more(CHUNK)
                if not data:
                    return False
                if data[:2] != b"\x1f\x8b":  # bytes after the last member that start none: gzip -d ignores them too
                    return TRAILING
                z = zlib.decompressobj(_GZIP)
        data = more(CHUNK)
        if not data:
            rest = z.flush()
            if rest:
                yield rest
            return not z.eof


def _texts(chunks: Iterator[bytes]) -> Iterator[tuple[list, list | None]]:
    """The decoded lines of the chunks, a list of them at a time, with the bytes left out of each (None: none cut).
    A line of up to MAX_LINE bytes is decoded whole; a longer one keeps its first and its last MAX_LINE bytes
    (_grow), decoded apart, CUT between them when bytes were left out; at most 2 x MAX_LINE bytes of a line are held.
    The complete lines of a chunk are decoded in one call: a newline byte never belongs to a UTF-8 sequence, so
    that decodes each line as decoding it alone would."""
    head, tail, dropped = b"", b"", 0  # the line under way
    for chunk in chunks:
        first = chunk.find(b"\n")
        if first == -1:
            head, tail, dropped = _grow(head, tail, dropped, chunk)
            continue
        last = chunk.rfind(b"\n")
        head, tail, dropped = _grow(head, tail, dropped, chunk[:first])
        out, cuts = [_text(head, tail, dropped)], [dropped]
        if first < last:
            middle = chunk[first + 1:last]
            if len(middle) <= MAX_LINE or max(map(len, middle.split(b"\n"))) <= MAX_LINE:
                out += middle.decode("utf-8", "replace").split("\n")
                cuts += [0] * (len(out) - 1) if dropped else ()
            else:
                for part in middle.split(b"\n"):
                    h, t, d = _grow(b"", b"", 0, part)
                    out.append(_text(h, t, d))
                    cuts.append(d)
        yield out, (cuts if any(cuts) else None)
        head, tail, dropped = _grow(b"", b"", 0, chunk[last + 1:])
    if head or tail:
        yield [_text(head, tail, dropped)], [dropped] if dropped else None


def _grow(head: bytes, tail: bytes, dropped: int, part: bytes) -> tuple[bytes, bytes, int]:
    """The line under way with `part` added: its first MAX_LINE bytes (head), its last MAX_LINE bytes after those
    (tail), and how many bytes between them were dropped."""
    if not tail and len(head) + len(part) <= MAX_LINE:
        return (head + part if head else part), tail, dropped
    if not tail:
        room = MAX_LINE - len(head)
        head, part = head + part[:room], part[room:]
    tail += part
    if len(tail) > MAX_LINE:
        dropped += len(tail) - MAX_LINE
        tail = tail[-MAX_LINE:]
    return head, tail, dropped


def _text(head: bytes, tail: bytes, dropped: int) -> str:
    text = head.decode("utf-8", "replace")
    if tail:
        text += (CUT.format(n=dropped) if dropped else "") + tail.decode("utf-8", "replace")
    return text


def split_prefix(text: str) -> tuple[str | None, str]:
    """(rank, the line without the launcher's prefix); torchrun's local-rank prefix gives way to torch's own
    `[rankN]:` right after it."""
    span, label, start = prefix_of(text)
    return (None if span is None else f"{label}{int(text[span[0]:span[1]])}"), text[start:]


def prefix_of(text: str) -> tuple[tuple[int, int] | None, str, int]:
    """Where a line's launcher prefix puts its rank: (the span of the rank's digits or None, "local " for torchrun's
    local rank else "", where the text after the prefix starts). Ray's or SkyPilot's prefix (_RAY) goes first, with
    no rank of its own."""
    if text.startswith(("(", "\x1b")):
        ray = _RAY.match(text)
        if ray is not None:
            at = ray.end()
            span, label, start = _rank_prefix(text[at:])
            return (None if span is None else (span[0] + at, span[1] + at)), label, start + at
    return _rank_prefix(text)


def _rank_prefix(text: str) -> tuple[tuple[int, int] | None, str, int]:
    m = _PREFIX.match(text)
    if m is None:
        if "[rank" in text[:160]:
            inner = _INNER_RANK.search(text, 0, 160)
            if inner:
                return inner.span(1), "", 0
        return None, "", 0
    for group in ("rank", "mpi", "task"):
        if m[group] is not None:
            return m.span(group), "", m.end()
    inner = _PREFIX.match(text[m.end():])  # (not match(text, pos): the pattern's ^ holds at the string's start only)
    if inner is not None and inner["rank"] is not None:
        a, b = inner.span("rank")
        return (a + m.end(), b + m.end()), "", m.end() + inner.end()
    return m.span("local"), "local ", m.end()


def rank_of_path(path: str) -> str | None:
    """The rank a log file's path names: rank3.log, rank_3, or torchrun's log_dir/.../attempt_0/3/stderr.log."""
    p = Path(path)
    m = _PATH_RANK.search(p.name)
    if m:
        return str(int(m.group(1)))
    if p.parent.name.isascii() and p.parent.name.isdigit() and len(p.parent.name) <= 7 \
            and p.name.lower().startswith(("stdout", "stderr")):
        return f"local {int(p.parent.name)}"
    return None
