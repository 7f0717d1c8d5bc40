"""What one rank's trace holds for the analysis, gathered in one streaming pass.

Rows follow HolisticTraceAnalysis's parser (hta/common/trace_parser.py, trace.py, trace_filter.py, 0.5.0):
- events without "dur" or "cat", and cat "Trace", are dropped;
- ts is rounded up and ts + dur down to whole microseconds (round_down_time_stamps; a no-op on integer traces);
- a GPU row has args.stream >= 0 and args.correlation >= 0; every other row is a CPU row
  ("Event Sync" and "Context Sync" are GPU rows without a stream, so they take part in nothing here);
- a row takes part in the overlap when its stream is not -1 (a GPU kernel, memcpy or memset).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from . import kernels, reader
from ..safeio import MAX_GPUS, esc

PG_KEYS = ("Process Group Name", "Process Group Description", "Process Group Ranks", "Collective name", "Group size")
# What of an event the analysis reads (the adder and _unusable): the fast JSON backend builds nothing else.
EVENT_KEYS = (("name", None), ("cat", None), ("ts", None), ("dur", None), ("args", ("correlation", "stream", "External id", *PG_KEYS)))
_SYNC = frozenset(("Event Sync", "Context Sync"))
NO_LAUNCH = -(1 << 62)  # a GPU row whose launching CPU record is not in the trace
LIMIT = 1 << 62  # times and ids must lie in (-LIMIT, LIMIT): the rows are 64-bit arrays, NO_LAUNCH is below
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d{1,9})(?!\d)", re.IGNORECASE)


def _int(value, default: int = -1) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and not value.is_integer():  # a rank of 1.9 is no rank (fuzzM M5), nor 1
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # NaN, Infinity, more digits than int() takes
        return default


@dataclass
class CommKernel:
    row: int
    name: str
    external_id: int
    group: dict  # the PG_KEYS the kernel itself carries (PyTorch 2.3+ copies them onto the kernel)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


# A group's name or description longer than this is kept as its start, its length and a digest (one identity per
# text): Megatron-Core's are a few words, and a notes line or the JSON echoes it (fuzzM M2: 3 M characters a line).
MAX_LABEL = 200
# The distinct process-group text (names, descriptions, ranks lists) one trace may hold: a 64k-GPU world's ranks list
# is 0.4 MB; a few MB of gzip held 1.2 GB of them, kept whole (fuzzM M1: 3.5 GB of memory)
MAX_GROUP_TEXT = 16 << 20


class _Groups(dict):
    """repr of a record's PG_KEYS -> one shared dict per distinct content (thousands of kernels share a few groups),
    with the text they hold counted."""

    size = 0


def _label(value):
    if not isinstance(value, str) or len(value) <= MAX_LABEL:
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"{value[:MAX_LABEL // 2]}...({len(value):,} characters, {digest})"


def _group(args: dict, seen: _Groups) -> dict:
    """The PG_KEYS of a record, shared per distinct content, the names and descriptions bounded (_label)."""
    group = {k: args[k] if k == "Process Group Ranks" else _label(args[k]) for k in PG_KEYS if k in args}
    key = repr(group)
    known = seen.get(key)
    if known is None:
        seen.size += len(key)
        if seen.size > MAX_GROUP_TEXT:
            raise reader.BadEvent(f"its process groups' names, descriptions and ranks lists hold more than "
                                  f"{MAX_GROUP_TEXT >> 20} MB of distinct text: no profiler writes that many")
        known = seen[key] = group
    return known


@dataclass
class RankTrace:
    path: Path
    meta: dict = field(default_factory=dict)
    events: int = 0  # events in the array
    non_finite: int = 0  # NaN / Infinity literals in the file (none where the analysis reads a value)
    negative: int = 0  # GPU rows with a negative duration: counted as nothing (fuzzM M3), and said
    partial: bool = False
    start: array = field(default_factory=lambda: array("q"))  # device rows: [start, end) in whole microseconds
    end: array = field(default_factory=lambda: array("q"))
    correlation: array = field(default_factory=lambda: array("q"))  # -1 for a CPU row that names a stream
    kind: array = field(default_factory=lambda: array("b"))  # kernels.COMMUNICATION, ...
    launch: array = field(default_factory=lambda: array("q"))  # device rows: start of the launching CPU record
    comm: list[CommKernel] = field(default_factory=list)
    cpu_correlation: array = field(default_factory=lambda: array("q"))  # CPU rows with a correlation, until resolved
    cpu_start: array = field(default_factory=lambda: array("q"))
    # rows named *ProfilerStep*, one per (name, gpu): (start, end) of the first, and the latest start of any (fuzzJ J2:
    # a step event repeated millions of times kept a row each, 1,000 times the compressed file in memory)
    steps: dict[tuple[str, bool], tuple[int, int, int]] = field(default_factory=dict)
    collectives: dict[int, dict] = field(default_factory=dict)  # External id -> PG_KEYS of the CPU record
    peer_copies: array = field(default_factory=lambda: array("q"))  # device rows of peer-to-peer copies (Memcpy PtoP)

    @property
    def distributed(self) -> dict:
        info = self.meta.get("distributedInfo")
        return info if isinstance(info, dict) else {}

    @property
    def recorded_rank(self) -> int | None:
        rank = _int(self.distributed.get("rank"), -1)
        return rank if 0 <= rank < LIMIT else None

    @property
    def name_rank(self) -> int | None:
        """The rank in the file name (Bridge writes rank-<global rank>.json.gz)."""
        m = _RANK_IN_NAME.search(self.path.name)
        return int(m.group(1)) if m else None

    @property
    def rank(self) -> int | None:
        recorded = self.recorded_rank
        return self.name_rank if recorded is None else recorded

    @property
    def world_size(self) -> int | None:
        size = _int(self.distributed.get("world_size"), -1)
        return size if 0 < size <= MAX_GPUS else None  # beyond any machine: not a world size (trace/notes.py says so)

    def adder(self):
        """The per-event callback, with everything it touches bound to locals (it runs once per event)."""
        steps, collectives, comm, kinds, groups = self.steps, self.collectives, self.comm, {}, _Groups()
        starts, ends, corrs, kind_rows = self.start.append, self.end.append, self.correlation.append, self.kind
        cpu_corrs, cpu_starts, kind_add = self.cpu_correlation.append, self.cpu_start.append, kind_rows.append
        ceil, floor, COMM, limit = math.ceil, math.floor, kernels.COMMUNICATION, LIMIT
        MEMORY, peer = kernels.MEMORY, self.peer_copies.append

        def add(event: dict) -> None:
            args = event.get("args")
            if args.__class__ is not dict:
                args = {}
            name = event.get("name")
            if name.__class__ is not str or name in _SYNC:
                return
            if not args:  # a flow or instant event (no args): only a step's name makes it one to read
                if "ProfilerStep" not in name:
                    return
            elif "correlation" not in args and "stream" not in args and "ProfilerStep" not in name and (
                    "Process Group Name" not in args and "Collective name" not in args):
                return  # a CPU op or counter: most events, nothing the analysis reads
            dur, cat = event.get("dur"), event.get("cat")
            if dur is None or cat is None or cat == "Trace":
                return
            ts = event.get("ts")
            if ts.__class__ is int and dur.__class__ is int:
                start, end = ts, ts + dur
            elif isinstance(ts, (int, float)) and isinstance(dur, (int, float)) and not isinstance(ts, bool) and not isinstance(dur, bool):
                try:
                    start, end = ceil(ts), floor(ts + dur)
                except (ValueError, OverflowError):  # NaN, Infinity
                    raise reader.BadEvent(f"ts {ts!r} and dur {dur!r}: a time must be a finite number") from None
            elif cat in _DEVICE_CATS:  # a kernel whose time is no number: refused, as a NaN one is (fuzzG G1)
                raise reader.BadEvent(f"ts {_short(ts)} / dur {_short(dur)}: a kernel's time must be a number")
            else:
                return
            if not (-limit < start < limit and -limit < end < limit):
                raise reader.BadEvent(f"ts {_short(ts)} / dur {_short(dur)} out of range (64-bit microseconds)")
            stream, corr = args.get("stream", -1), args.get("correlation", -1)
            if stream.__class__ is not int:
                stream = _int(stream)
                if stream < 0 and cat in _DEVICE_CATS and "stream" in args:  # dropped, it would vanish unsaid (fuzzG G1)
                    raise reader.BadEvent(f"stream {_short(args['stream'])}: a kernel's stream must be a whole number")
            if corr.__class__ is not int:
                corr = _int(corr)
            if corr >= limit:
                raise reader.BadEvent(f"correlation {_short(corr)} out of range (64-bit)")
            gpu = stream >= 0 and corr >= 0
            if "ProfilerStep" in name:
                seen = steps.get((name, gpu))
                steps[name, gpu] = (start, end, start) if seen is None else (seen[0], seen[1], max(seen[2], start))
            if not gpu:
                if corr >= 0:
                    cpu_corrs(corr)
                    cpu_starts(start)
                if "Process Group Name" in args or "Collective name" in args:
                    collectives[_int(args.get("External id"))] = _group(args, groups)
                if stream == -1:
                    return
            if cat == "gpu_user_annotation":
                return  # annotations are ranges, not kernels (HTA would count one that carried a stream)
            known = kinds.get(name)
            if known is None:
                known = (kernels.kind_of(name), name)
                if len(name) > MAX_LABEL:  # kept only as what the analysis reads of it (fuzzR R4: 2 KB names, 2.3 GB)
                    short = kernels.reduced(name)
                    known = kinds.setdefault((known[0], short), (known[0], short))
                else:
                    kinds[name] = known
            kind, name = known  # one string object per distinct kernel name
            if kind == COMM:
                comm.append(CommKernel(len(kind_rows), name, _int(args.get("External id")), _group(args, groups)))
            elif kind == MEMORY and name.startswith("Memcpy PtoP"):
                peer(len(kind_rows))
            if dur < 0:
                self.negative += 1
            starts(start)
            ends(end)
            corrs(corr if gpu else -1)
            kind_add(kind)

        return add


def _launch_table(trace: RankTrace):
    """correlation -> earliest CPU record start: an array over a dense id range (Kineto counts them up), else a dict."""
    corrs, starts = trace.cpu_correlation, trace.cpu_start
    if not corrs:  # CUDA activities only: no kernel has a launch record
        return lambda corr: NO_LAUNCH
    low, high = min(corrs), max(corrs)
    if high - low < 4 * len(corrs) + 1024:
        table = array("q", [NO_LAUNCH]) * (high - low + 1)
        for corr, start in zip(corrs, starts):
            i = corr - low
            if table[i] == NO_LAUNCH or start < table[i]:
                table[i] = start
        return lambda corr: table[corr - low] if low <= corr <= high else NO_LAUNCH
    earliest: dict[int, int] = {}
    for corr, start in zip(corrs, starts):
        if start < earliest.get(corr, start + 1):
            earliest[corr] = start
    return lambda corr: earliest.get(corr, NO_LAUNCH)


def resolve_launches(trace: RankTrace) -> None:
    """Give each device row the start of its launch (HTA joins GPU and CPU rows on correlation); a CPU row that
    names a stream is its own launch."""
    lookup = _launch_table(trace)
    trace.launch = array("q", (
        start if corr < 0 else lookup(corr) for start, corr in zip(trace.start, trace.correlation)
    ))
    trace.cpu_correlation, trace.cpu_start = array("q"), array("q")


def read_header(path: Path) -> dict:
    """The top-level keys before traceEvents (where Kineto writes distributedInfo); cheap."""
    meta: dict = {}
    try:
        reader.read(path, None, meta.__setitem__)
    except reader.Truncated:
        pass  # load() says so, with what --allow-partial does
    return meta


def load(path: Path, allow_partial: bool = False) -> RankTrace:
    trace = RankTrace(path)

    def on_meta(key, value):
        if key in ("distributedInfo", "schemaVersion", "traceName", "baseTimeNanoseconds"):
            trace.meta[key] = value

    try:
        stats = reader.read(path, trace.adder(), on_meta, EVENT_KEYS)
        trace.events, trace.non_finite = stats.events, stats.non_finite
    except reader.Truncated as exc:
        trace.events = exc.events
        if not allow_partial:
            raise UsageError(
                f"{esc(path)}: truncated (the file ends inside the trace); pass --allow-partial to analyse what was read"
            ) from None
        trace.partial = True
    _check(trace)
    resolve_launches(trace)
    return trace


def _check(trace: RankTrace) -> None:
    if len(trace.kind):
        return
    if trace.events == 0 and not trace.partial:
        raise UsageError(f"{esc(trace.path)}: the trace has no events")
    unusable = _unusable(trace.path)
    if unusable:
        why = ", ".join(f"{n} {what}" for what, n in sorted(unusable.items(), key=lambda item: -item[1]))
        raise UsageError(
            f"{esc(trace.path)}: {sum(unusable.values()):,} kernel, memcpy or memset events, but none that can be placed "
            f"on the GPU timeline ({why}); HolisticTraceAnalysis leaves them out too"
        )
    raise UsageError(
        f"{esc(trace.path)}: no GPU kernel, memcpy or memset events: a CPU-only trace? "
        "Profile a GPU job with CUDA activities (Bridge's use_pytorch_profiler records them)"
    )


_DEVICE_CATS = frozenset(("kernel", "gpu_memcpy", "gpu_memset"))


def _unusable(path: Path) -> Counter:
    """Why the kernel, memcpy and memset events were not used (a second pass, only for a trace with none used)."""
    why: Counter = Counter()

    def count(event: dict) -> None:
        if event.get("cat") not in _DEVICE_CATS:
            return
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if _int(args.get("stream")) < 0:
            why["without a stream"] += 1
        elif _int(args.get("correlation")) < 0:
            why["without a correlation id"] += 1
        elif not _number(event.get("dur")):
            why["without a duration"] += 1
        elif not _number(event.get("ts")):
            why["without a time stamp"] += 1
        else:
            why["without a usable name"] += 1

    try:
        reader.read(path, count, keys=EVENT_KEYS)
    except reader.Truncated:
        pass
    return why


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
