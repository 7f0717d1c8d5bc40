"""One pass over a run's log lines: every catalog message they show, grouped across ranks, and the facts the analysis
needs (Bridge's configuration summary, the TP size, userbuffers' start-up, iteration times).

Memory is bounded by the catalog, not by the log: a group per message (its first line kept, its ranks as a set capped
at MAX_RANKS), iteration times in arrays of doubles (capped per log and in all), at most MAX_FRAMES open tracebacks,
one summary block.

Files are read by blocks of complete lines (read(), read_block()): only the lines whose shape can hold something
(shapes.py) are decoded and fed; the others are counted, and their iteration times and ranks sliced out. feed() reads
one line in full, as read_block() does with a hot one.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from itertools import accumulate
from dataclasses import dataclass, field
from typing import NamedTuple

from . import causes, frames, fuzzy, groups as pg, reader, terms
from . import shapes as shapes_
from .patterns import EXCEPTION, ITERATION_PHRASE, LITERAL, STOPPED, iteration_ms_span
from .messages import FIELD, Catalog, Entry, Hit, after_prefix, clean, parse_condensed, parse_frame, rich_code, rich_name
from .reader import CUT, Line, line_text, split_prefix

MAX_RANKS = 4096  # rank labels kept per message (the count goes on)
_CUT_MARK = re.compile(re.escape(CUT).replace(r"\{n:,\}", r"[\d,]+"))  # a long line's middle left out (reader.CUT)
_BLANK = b" \t\r\n\x0b\x0c\x00"  # what a log of nothing holds: white space, and NULs (a truncated file's hole)
MAX_SIZES = 16  # group sizes a sized watchdog message is told apart by; lines of further sizes are one group
MAX_ITERATIONS = 100_000  # iteration times kept per log
MAX_ITERATION_TIMES = 1_000_000  # and in all (8 MB)
MAX_DOMAINS = 4096  # NVLink domains kept from userbuffers' start-up lines
MAX_FRAMES = 4096  # tracebacks under way at once (one per source and rank); the oldest is forgotten past it
MAX_SHOWN = 2000  # characters of a logged line kept for the report
MAX_TRACEBACKS = 256  # groups of tracebacks through overlap-path code (one per place and exception); past it, counted
MAX_PATH = 400  # characters of a traceback frame's path kept
MAX_UNEXPLAINED = 16  # exception lines nothing explains, kept (by text) to say the run failed otherwise
UNEXPLAINED = "unexplained"  # their entries' origin
_DIGITS = re.compile(r"[0-9]+")
MEMO = 4096  # line texts whose matches are remembered
CODE_WITHIN = 256  # lines of its log within which a traceback frame's code line follows it (other ranks' lines between)
_BARE = re.compile(r"^\s*(?:\[rank\d+\]:\s*)?(?:[\w.]+\.)?(AssertionError|RuntimeError|ValueError|TypeError|NotImplementedError)\s*$")
TRACEBACK = "traceback"  # the pseudo-topic of a traceback group: OVERLAP_PATH_TRACEBACK
NCCL_ON_PATH = "NCCL_FAILURE_ON_OVERLAP_PATH"  # ... whose exception is NCCL's failure (TRANSPORT)
NONE_GROUP = "OVERLAP_PATH_ERROR"  # ... whose exception is a process group that is None (report._none_group)
_TP_SIZE = "> initialized tensor model parallel with size "
# what Bridge prints once its setup (initialize_megatron, which runs initialize_ub) is done: training/setup.py, train.py
UB_STARTED = ("native.ub_create_communicator", "native.ub_register_ubuf", "native.ub_p2p_ubuf")  # TE's start-up lines
FATAL = ("native.python_fatal_error", "native.pybind11_gil_not_held")  # a process that died in native code
_PER_SOURCE = frozenset(UB_STARTED + FATAL)  # read in every source, never as a repeat (_hot): where each sits counts
_SETUP_DONE = ("time to initialize megatron (seconds)", "done with setup ...", "Starting training loop at iteration")
_WORLD = "using world size: "  # Megatron-LM's validate_args / validate_yaml
_GRID = re.compile(r"> initialized HyperCommGrid (?:for language model )?with tp=(\d+), pp=(\d+), cp=(\d+), dp=(\d+)")


def _path_end(path: str) -> str:
    """A traceback frame's path, its end kept where it is longer than MAX_PATH (fuzzV V2-10: a Bridge frame's 1,114
    characters cut to their start lost megatron/bridge/ and the file): from a directory's start, after "...", so that
    no pattern anchored at a path's start or a "/" reads a cut name as whole."""
    if len(path) <= MAX_PATH:
        return path
    tail = path[-MAX_PATH:]
    return "..." + tail[max(tail.find("/"), 0):]


def _holds_text(data: bytes) -> bool:
    """Whether a block holds more than white space and NULs (fuzzN N2), Unicode's spaces too (recheck51 T11: a log of
    no-break and ideographic spaces); a copy of one block, once per log until it holds text."""
    rest = data.strip(_BLANK)
    return bool(rest) and not rest.decode("utf-8", "ignore").isspace()


class OnPath(NamedTuple):
    """A traceback's innermost frame on the overlap path, as its exception line will be attributed."""

    path: str | None  # the frame's path (and how it reaches the path: "..., calling f", a FALLBACK frame's way)
    number: int | None
    function: str | None
    dim: str
    fields: list
    line: Line | None  # the frame's own line (the evidence of a traceback cut before its exception)
    torch_own: bool = False  # a FALLBACK frame: torch's own code, taken where no frame above it is on the path


@dataclass
class Group:
    """One message as the log shows it: where first, how often, on which ranks."""

    entry: Entry
    findings: list  # the finding ids its first line links to (causes.links)
    text: str  # the first line that showed it, cleaned
    source: str
    number: int
    truncated: bool = False
    count: int = 0
    ranks: set = field(default_factory=set)
    more_ranks: int = 0  # ranks past MAX_RANKS
    frame: tuple | None = None  # (path, line, function) of the traceback frame just before it, when there was one
    groups: tuple = ()
    approximate: float | None = None  # matched by words, not by its pattern (fuzzy.py): how close; None: matched exactly
    first_rank: str | None = None  # the rank of the line `text` is
    elsewhere: tuple = ()  # every other place writing the same text: (package, version, file, function, line)
    tag: str | None = None  # its process group's description, where another line of its work prints it (groups.tag)
    # a watchdog line's works (groups.work_seq): (SeqNum, rank) -> the group description the line prints (groups.tag)
    works: dict = field(default_factory=dict)

    def add(self, rank: str | None) -> None:
        if not self.count:
            self.first_rank = rank
        self.count += 1
        if rank is not None and rank not in self.ranks:
            if len(self.ranks) < MAX_RANKS:
                self.ranks.add(rank)
            else:
                self.more_ranks += 1


@dataclass
class Scan:
    catalog: Catalog
    summary: object | None = None  # a diagnose.summary.Summary, fed until its block is complete
    summary_from: str | None = None  # the source whose block `summary` is
    later: object | None = None  # a further block, read to be compared with the first
    summaries_differ: list = field(default_factory=list)  # (summary_from, source, fields) of blocks that differ
    groups: dict = field(default_factory=dict)  # entry id -> Group, in order of first appearance
    iterations: dict = field(default_factory=dict)  # source -> array('d') of the ms per iteration, in log order
    iteration_lines: dict = field(default_factory=dict)  # source -> array('q') of those iterations' line numbers
    facts: dict = field(default_factory=dict)  # tp_size, ub_started, ub_multicast, ub_domains
    ub_start: dict = field(default_factory=dict)  # source -> line number of TE's first userbuffers start-up line there
    fatal: dict = field(default_factory=dict)  # source -> [its first native crash's text, the first after ub_start's]
    lines: int = 0
    times: int = 0  # iteration times kept, all sources
    megatron_frames: bool = False  # a traceback frame of Megatron's family's code was seen (_owner)
    foreign_frames: bool = False  # and one of another trainer's
    bridge_frames: bool = False  # a frame of Megatron-Bridge's code
    driver: str | None = None  # the first frame's path of code other than Megatron-Core's, TE's and Bridge's
    sources: dict = field(default_factory=dict)  # source -> {"lines": n, "ranks": set, "text": any line not blank}
    _frames: dict = field(default_factory=dict)  # (source, rank) -> [path, line, function, source line or None, indent,
    # line number, own (off the path), the state before it (rich's header without its name), in the second syntax]
    _on_path: dict = field(default_factory=dict)  # (source, rank) -> the innermost overlap-path frame of its traceback
    _awaiting: dict = field(default_factory=dict)  # (source, rank) -> line number of a frame whose code line may follow
    _shapes: object = None  # shapes.Shapes, made on the first block
    _memo: dict = field(default_factory=dict)  # text -> _matches(text)
    _repeats: dict = field(default_factory=dict)  # a hot line's bytes -> the group reading it again only adds to
    _wrapped: dict = field(default_factory=dict)  # source -> an exception line no message matched, which its next
    # line may continue (a message a paste or a terminal wrapped over two lines)
    _lead: dict = field(default_factory=dict)  # (source, rank) -> an exception line printed right before its
    # traceback's first frame, with no "Traceback" line (a doc's order, fresh19 F19-2): the exception of a block cut after
    _literals: dict = field(default_factory=dict)  # source -> the lines of Python string literals read so far, which
    # Python joins into one message (an assert's or a raise's message quoted from source, _literal_line)
    _opened: dict = field(default_factory=dict)  # source -> the number of a line ending with "(" (a call or a
    # parenthesis opened: `assert cond, (`, `raise ValueError(`), after which a run of literal lines is joined

    def feed(self, line: Line) -> None:
        """One line, read in full."""
        src = self._count(line.source, 1, line.rank)
        if not src["text"] and _CUT_MARK.sub("", line.text).strip(" \t\r\n\x0b\x0c\x00"):
            src["text"] = True
        self._read(line)
        if line.text.rstrip().endswith("("):
            self._opened[line.source] = line.number

    def _count(self, source: str, n: int, rank: str | None) -> dict:
        self.lines += n
        src = self.sources.get(source)
        if src is None:
            src = self.sources[source] = {"lines": 0, "ranks": set(), "text": False}
        src["lines"] += n
        if rank is not None and len(src["ranks"]) < MAX_RANKS:
            src["ranks"].add(rank)
        return src

    def _read(self, line: Line) -> str | None:
        """Read one line in full. Returns the group it was recorded in when reading the same text again, with no
        traceback open anywhere, can only add its rank to that group (read_block's repeats)."""
        pending = self._literals.get(line.source) if self._literals else None
        if pending is not None or (self._opened.get(line.source) == line.number - 1 and LITERAL.match(line.text)):
            frame = self._frames.get((line.source, line.rank))
            if not (frame is not None and frame[3] is None):  # (a traceback frame's code line is that frame's)
                return self._literal(line, pending)
        return self._read_one(line)

    def _literal(self, line: Line, pending: list | None) -> str | None:
        """Python source quoted in a log or a thread: a message written as adjacent string literals over several
        lines (`assert cond, (` / `"part one "` / `"part two"`) is read as the one message Python makes of them
        (fresh16 F16-1), recorded at the first; where the joined text matches nothing, each line is read as before.
        A run starts only right after a line ending with "(" (the call or parenthesis holding the message): a literal
        line elsewhere (a list of strings, pprint's output) is an ordinary line, on the block reader's fast path
        (fuzzY Y2-1)."""
        m = LITERAL.match(line.text)
        if pending is not None and (m is None or pending[-1].rank != line.rank or pending[-1].number + 1 != line.number):
            self._flush_literals(line.source)
            pending = None
        if m is None:
            return self._read_one(line)
        if pending is None:
            pending = self._literals[line.source] = []
        pending.append(line)
        if m["end"] or len(pending) >= MAX_LITERALS:  # a comma or a bracket ends what Python joins
            self._flush_literals(line.source)
        return None

    def _flush_literals(self, source: str) -> None:
        lines = self._literals.pop(source, None) or []
        if len(lines) > 1:
            joined = "".join(_literal_text(x.text) for x in lines)
            hits, _near = self._matches(joined)
            if hits:
                first = lines[0]
                self._read_one(Line(first.source, first.number, first.rank, joined, first.cut))
                return
        for x in lines:
            self._read_one(x)

    def _read_one(self, line: Line) -> str | None:
        text = line.text
        wrapped = self._wrapped.pop(line.source, None) if self._wrapped else None
        if wrapped is not None:
            first = wrapped[0]
            if first.rank == line.rank and first.number + 1 == line.number and self._joined(first, line):
                return None
            if wrapped[1] is None and first.rank == line.rank and first.number + 1 == line.number and 'File "' in text \
                    and len(self._lead) < MAX_FRAMES:
                self._lead[(line.source, line.rank)] = first  # the traceback's exception, or else unexplained (_end_lead)
            else:
                self._unexplained(*wrapped)
        if self.summary is not None and self._summary_line(line.source, clean(text)):
            return None
        quiet = not self._frames
        key = (line.source, line.rank)
        frame = self._frames.get(key)
        parsed = shortened = None
        if 'File "' in text:
            parsed = parse_frame(text)
        elif ".py:" in text:
            parsed = shortened = parse_condensed(text)
        elif (function := frames.TORCH_P2P_CODE.get(text.strip())) and not (frame is not None and frame[3] is None):
            parsed = shortened = (frames.TORCH_C10D, None, function, text.strip())  # torch's own, its File line left out
        elif frame is not None and frame[7] is not None and frame[5] == line.number - 1 and (name := rich_name(text)):
            frame, parsed = self._unwrap(key, frame, name)  # rich's header, its name wrapped onto this line
            shortened = (*parsed, None)
        if parsed is not None:
            self._frame(line, key, frame, parsed[:3], shortened)
            return None
        elif "Traceback (most recent call last)" in text:
            self._on_path.pop(key, None)
            self._end_lead(key)
            if frame is not None:
                frame[6] = False  # a new traceback: no frame of its own above yet
        code = rich_code(text) if frame is not None and frame[3] is None and frame[8] else None
        if frame is not None and frame[3] is None and (code or _indent(text) > frame[4]) and line.number - frame[5] <= CODE_WITHIN:
            frame[3] = code or text.strip()  # the frame's code line: kept for frame(), not matched (it holds the literal)
            self._awaiting.pop(key, None)
            # a frame off the path whose code calls a function on it (a model's scatter_to_sequence_parallel_region):
            # what is raised below is that function's, as if the log showed a frame inside it (fresh16 F16-5)
            if frames.overlap_frame(frame[0], frame[2]) is None and (call := frames.call_on_path(frame[3], self.catalog)):
                self._on_path[key] = OnPath(f"{frame[0]}, calling {call[0]}", frame[1], call[1], call[2], call[3], line)
            return None
        iteration = ITERATION_PHRASE in text
        if iteration:
            self._iteration(line)
        hits, near = self._matches(text)
        # a text the package raises off the overlap path too, with no traceback frame in the entry's file: another
        # failure (causes.off_path_too: Entry.off_path_too, generated), neither the entry's nor the frames'
        # (a message a finding names is that finding wherever it is raised: DATASET_PACKING_REJECTED's texts, which
        # Bridge's dataset config raises too)
        elsewhere = bool(hits) and causes.off_path_too(hits[0].entry) is not None \
            and not any(causes.index(self.catalog).get(h.entry.id) for h in hits) \
            and not any(_in_file(frame, h.entry) for h in hits)
        gid = None
        if elsewhere:
            self._unexplained(line, tuple(frame[:3]) if frame else None)
        elif hits and hits[0].entry.id in TRANSPORT and key in self._on_path and self._traceback(line, key, nccl=True):
            pass  # NCCL's own failure, raised in a collective or send the traceback's frames place on the overlap path
        elif hits and hits[0].entry.id in ON_GROUP and (place := pg.failed_on(text)) \
                and self._traceback(line, key, nccl=True, place=place):
            pass  # NCCL's failure on a process group of a dimension that the line names (Megatron-Core's description)
        elif hits:  # the catalog knows the line (on the overlap path or not): it, not the frames, says what it is
            gid = self._record(line, hits, frame, near[1] if near else None)
        elif not (frame is not None and _BARE.match(clean(text)) and self._bare(line, frame)) and not self._traceback(line, key):
            if EXCEPTION.match(clean(text)) and len(text) <= MAX_SHOWN:
                self._wrapped[line.source] = (line, tuple(frame[:3]) if frame else None)
            return None
        self._frames.pop(key, None)  # an exception line ends its traceback
        self._on_path.pop(key, None)
        self._end_lead(key)
        self._awaiting.pop(key, None)
        return gid if quiet and not iteration else None

    def _frame(self, line: Line, key, frame: list | None, parsed: tuple, shortened: tuple | None) -> None:
        """A traceback frame: Python's `File "...", line N, in f` (shortened None) or the second syntax
        (messages.parse_condensed: its code or None in shortened[3]), placed on the overlap path or off it."""
        parsed = (_path_end(parsed[0]), parsed[1], parsed[2][:MAX_PATH])
        if key not in self._frames and len(self._frames) >= MAX_FRAMES:
            oldest = next(iter(self._frames))
            del self._frames[oldest]
            self._on_path.pop(oldest, None)
            self._awaiting.pop(oldest, None)
        before = (frame, self._on_path.get(key))  # what rich's header wrapped before its name undoes (_unwrap)
        if shortened is None:
            where = frames.overlap_frame(parsed[0], parsed[2])
            self._owner(parsed[0])
        else:
            placed = frames.shortened_frame(parsed[0], parsed[2], self.catalog)
            where = placed[1:] if placed else None
            self._owner(placed[0] if placed else parsed[0])
        own = frame is not None and frame[6]  # a frame of code off the path (the model's) above this one
        via = None if where is not None or own or key in self._on_path else frames.fallback_frame(parsed[0], parsed[2])
        if where is not None:
            self._on_path[key] = OnPath(*parsed, *where, line)
        elif via is not None:
            self._on_path[key] = OnPath(f"{parsed[0]}, {via[0]}", parsed[1], parsed[2], *via[1:], line, True)
        elif not frames.neutral(parsed[0]):  # raised below the path, in code of its own (the model's)
            self._on_path.pop(key, None)
            own = True
        code = shortened[3] if shortened else None
        self._frames[key] = [*parsed, code, _indent(line.text), line.number, own and where is None,
                             before if shortened and not parsed[2] else None, shortened is not None]
        if code is None:
            self._awaiting[key] = line.number
        elif where is None and (call := frames.call_on_path(code, self.catalog)):
            self._on_path[key] = OnPath(f"{parsed[0]}, calling {call[0]}", parsed[1], call[1], call[2], call[3], line)

    def _unwrap(self, key, frame: list, name: str) -> tuple[list | None, tuple]:
        """Rich's frame header whose name its panel wrapped onto the next line: the state before the header, restored,
        and the header whole."""
        before, on_path = frame[7]
        if before is None:
            self._frames.pop(key, None)
        else:
            self._frames[key] = before
        if on_path is None:
            self._on_path.pop(key, None)
        else:
            self._on_path[key] = on_path
        return before, (frame[0], frame[1], name)

    def _end_lead(self, key) -> None:
        """A lead exception line (printed right before its traceback's first frame) that its traceback did not take
        as its exception (another traceback or exception line came first): a failure nothing explains. One line, one
        answer: a lead the traceback takes is its cause only, never also an unexplained failure."""
        lead = self._lead.pop(key, None)
        if lead is not None:
            self._unexplained(lead, None)

    def _unexplained(self, line: Line, frame: tuple | None) -> None:
        """An exception line that nothing explains (no message of the catalog, no overlap-path code, no continuation):
        a group of its own, reported as a failure that is not an overlap cause; the first MAX_UNEXPLAINED kinds."""
        text = clean(line.text).strip()
        m = EXCEPTION.match(text)
        gid = f"{UNEXPLAINED}:{_DIGITS.sub('#', text[:MAX_PATH])}"  # one kind: the ranks' texts differ by their numbers
        group = self.groups.get(gid)
        if group is None:
            if m is None:
                return
            if self._unexplained_kinds(bool(terms.named(text)[0])) >= MAX_UNEXPLAINED:
                self.facts["unexplained_dropped"] = self.facts.get("unexplained_dropped", 0) + 1
                return
            path, number, function = frame or (None, None, None)
            entry = Entry(id=gid, origin=UNEXPLAINED, kind="raise", severity="error", topic="other", exception=m[1],
                          file=path, function=function, line=number)
            group = self.groups[gid] = Group(entry, [], text[:MAX_SHOWN], line.source, line.number, frame=frame)
        group.add(line.rank)

    def _unexplained_kinds(self, named: bool) -> int:
        """The unexplained kinds kept whose words name a dimension (named) or not: each has MAX_UNEXPLAINED places, so
        that a flood of one does not crowd out the other."""
        return sum(1 for g in self.groups.values() if g.entry.origin == UNEXPLAINED and bool(terms.named(g.text)[0]) == named)

    def _joined(self, first: Line, line: Line) -> bool:
        """An exception line no message matched and the next line of its source and rank, read as one line: recorded
        (at the first line) where a message matches across the two, exactly (no fuzzy match across a join)."""
        head = clean(first.text).rstrip()
        hits = [h for h in self.catalog.match(f"{head} {clean(line.text).strip()}") if h.span[0] < len(head) < h.span[1]]
        if not hits:
            return False
        self._record(first, hits, None)
        return True

    def _matches(self, text: str) -> tuple[list, tuple | None]:
        """(the catalog's hits, or the fuzzy matcher's as one hit; its (entry, closeness) or None) for a line's text,
        remembered for the last MEMO texts (a warning repeated every iteration is matched once)."""
        got = self._memo.get(text)
        if got is None:
            hits, near = self.catalog.match(text), None
            if hits:  # a message raised only without a setting the line shows on is not the line's (fuzzy.contradicted)
                hits = [h for h in hits if not fuzzy.required(h.entry)
                        or not fuzzy.contradicted(h.entry, f"{h.text[:h.span[0]]} {h.text[h.span[1]:]}")]
            if not hits:
                cleaned = clean(text)
                near = fuzzy.for_catalog(self.catalog).match(cleaned)
                if near is not None:
                    hits = [Hit(near[0], (), (0, len(cleaned)), cleaned)]
            if len(self._memo) >= MEMO:
                self._memo.clear()
            got = self._memo[text] = (hits, near)
        return got

    def finish(self, source: str | None = None) -> None:
        """A log's end (of `source`, or of all): a traceback through overlap-path code that the log cuts before its
        exception line (a paste, a killed process) is still its innermost such frame's group."""
        for key, on_path in list(self._on_path.items()):
            if source is None or key[0] == source:
                lead = self._lead.pop(key, None)
                if lead is not None:  # its exception, printed before its frames
                    if not self._traceback(lead, key):
                        self._unexplained(lead, None)
                else:
                    self._traceback(on_path.line, key, cut=True)  # the frame's own line is the evidence
                self._on_path.pop(key, None)
        for key in [k for k in self._lead if source is None or k[0] == source]:
            self._end_lead(key)
        for name in [n for n in self._literals if source is None or n == source]:
            self._flush_literals(name)
        for name in [n for n in self._wrapped if source is None or n == source]:
            self._unexplained(*self._wrapped.pop(name))

    def merge(self, part: Scan) -> None:
        """Add the scan of logs that come after this one's (a worker's, diagnose --jobs): as if its lines had been fed
        here after these."""
        for source, src in part.sources.items():  # (the lines counted with them)
            mine = self._count(source, src["lines"], None)
            mine["text"] = mine["text"] or src["text"]
            for rank in src["ranks"]:
                if len(mine["ranks"]) >= MAX_RANKS:
                    break
                mine["ranks"].add(rank)
        for source, times in part.iterations.items():
            self._times(source, times)
        for source, numbers in part.iteration_lines.items():
            self.iteration_lines.setdefault(source, array("q")).extend(numbers)
        room = MAX_TRACEBACKS - self._tracebacks()
        for gid, group in part.groups.items():
            have = self.groups.get(gid)
            if have is None and group.entry.topic == TRACEBACK:
                if room <= 0:
                    self.facts["tracebacks_dropped"] = self.facts.get("tracebacks_dropped", 0) + group.count
                    continue
                room -= 1
            if have is None and group.entry.origin == UNEXPLAINED:  # as one process keeps them: the first texts
                if self._unexplained_kinds(bool(terms.named(group.text)[0])) >= MAX_UNEXPLAINED:
                    self.facts["unexplained_dropped"] = self.facts.get("unexplained_dropped", 0) + group.count
                    continue
            if have is None and "@" in gid and not gid.endswith("@more"):  # a sized group: within MAX_SIZES sizes
                base, _, n = gid.rpartition("@")
                kept = self._sized(base, int(n)) if n.isdigit() else gid
                if kept != gid:
                    self.facts["sizes_merged"] += group.count - 1
                    gid, have = kept, self.groups.get(kept)
            if have is None:
                self.groups[gid] = group
                continue
            have.count += group.count
            have.more_ranks += group.more_ranks
            for rank in group.ranks:
                if rank not in have.ranks and len(have.ranks) >= MAX_RANKS:
                    have.more_ranks += 1
                else:
                    have.ranks.add(rank)
            for key, desc in group.works.items():  # (a watchdog line's works, as _record keeps them)
                if len(have.works) >= MAX_RANKS:
                    break
                have.works.setdefault(key, desc)
        self._merge_facts(part.facts)
        for source, number in part.ub_start.items():
            self.ub_start.setdefault(source, number)
        for source, seen in part.fatal.items():
            self.fatal.setdefault(source, seen)
        self.megatron_frames |= part.megatron_frames
        self.foreign_frames |= part.foreign_frames
        self.bridge_frames |= part.bridge_frames
        self.driver = self.driver or part.driver
        if part.summary is not None and part.summary.done:
            if self.summary is not None and self.summary.done:
                self._compare_summary(part.summary, part.summary_from)
            else:
                self.summary, self.summary_from = part.summary, part.summary_from
        for differ in part.summaries_differ[:MAX_DIFFERING - len(self.summaries_differ)]:
            self.summaries_differ.append(differ)

    def _owner(self, path: str) -> None:
        """Whose code a traceback frame is: Megatron's family (Megatron-Core, TE, Bridge, NeMo, apex, a framework's
        Megatron backend), or another trainer's (fresh12 F12-5: ms-swift's own 'sequence parallel' check)."""
        if frames.MEGATRON_FAMILY.search(path):
            self.megatron_frames = True
        elif not frames.neutral(path):
            self.foreign_frames = True
        if frames.BRIDGE.search(path):
            self.bridge_frames = True
        elif self.driver is None and not frames.CORE.search(path) and not frames.neutral(path):
            self.driver = path

    def ub_crashes(self) -> list:
        """The native crashes (their text) logged after Transformer Engine's userbuffers start-up lines: in a log with
        such lines, after the first of them (fuzzU U2-4: one before them, a relaunch's, is not their setup's); in a
        log without, any, where another log of the set has them (recheck61 AH5: TE prints them on rank 0 to stdout, a
        crash goes to stderr or to its rank's file)."""
        if not self.ub_start:
            return []
        crashes = (after if source in self.ub_start else first for source, (first, after) in self.fatal.items())
        return [what for what in crashes if what is not None]

    @property
    def foreign(self) -> bool:
        """Tracebacks through another trainer's code only: its words for a dimension are not Megatron's knobs."""
        return self.foreign_frames and not self.megatron_frames

    def _merge_facts(self, facts: dict) -> None:
        for key in ("tracebacks_dropped", "unexplained_dropped", "sizes_merged"):
            if facts.get(key):
                self.facts[key] = self.facts.get(key, 0) + facts[key]
        for key in ("tp_size", "world_size"):
            if key in facts:
                self.facts.setdefault(key, facts[key])
        for key in ("ub_started", "setup_done"):
            if facts.get(key):
                self.facts[key] = True
        if facts.get("ub_multicast"):
            self.facts["ub_multicast"] = True
        elif "ub_multicast" in facts:
            self.facts.setdefault("ub_multicast", False)
        for number, ranks in (facts.get("ub_domains") or {}).items():
            domains = self.facts.setdefault("ub_domains", {})
            if len(domains) < MAX_DOMAINS:
                domains[number] = ranks

    def _summary_line(self, source: str, text: str) -> bool:
        """Feed a line to the configuration summary, or once it is complete, to a later one (another rank's, another
        run's), which is only compared with it. True when the line belongs to a block."""
        if not self.summary.done:
            if not self.summary.feed(text):
                return False
            if self.summary.done:
                self.summary_from = source
            return True
        if self.later is None:
            self.later = type(self.summary)()
        if not self.later.feed(text):
            return False
        if self.later.done:
            self._compare_summary(self.later, source)
            self.later = None
        return True

    def _compare_summary(self, other, source: str) -> None:
        fields = differing(self.summary, other)
        if fields and len(self.summaries_differ) < MAX_DIFFERING:
            self.summaries_differ.append((self.summary_from, source, fields))

    def _traceback(self, line: Line, key, cut: bool = False, nccl: bool = False, place: tuple | None = None) -> bool:
        """An exception line whose message no finding names, ending a traceback through overlap-path code (or an
        AttributeError on an overlap attribute): a group of its own, the innermost such frame's. `place`: instead,
        the process group an NCCL failure's line names (groups.failed_on), whatever the line starts with."""
        text = clean(line.text)
        m = EXCEPTION.match(text) if not cut else None
        if m is None and not cut and place is None:
            return False
        exception = m[1] if m else "the NCCL watchdog's exception" if place else "an exception the log does not show"
        if m and STOPPED.match(exception):  # an interrupt, a signal or OOM: one of the other failures, whatever code it stopped
            self._on_path.pop(key, None)
            return False
        on_path = OnPath(*place) if place else self._on_path.get(key)
        if on_path is not None:
            path, number, function, dim, fields = on_path[:5]
            if m and frames.TORCH_BUG.match(exception) and on_path.torch_own:
                self._on_path.pop(key, None)
                return False
        else:
            attr = frames.missing_attribute(text)
            if attr is None:
                return False
            path, number, (dim, fields), callee = None, None, attr[1:3], attr[3]
            function = f"{callee}()" if callee else None
        gid = f"{TRACEBACK}:{path}:{function}:{exception[:MAX_PATH]}"
        group = self.groups.get(gid)
        if group is None and ("tracebacks_dropped" in self.facts or self._tracebacks() >= MAX_TRACEBACKS):
            self.facts["tracebacks_dropped"] = self.facts.get("tracebacks_dropped", 0) + 1  # bounded memory and answer
            return True
        if group is None:
            fid = "OVERLAP_PATH_TRACEBACK_CUT" if cut else NCCL_ON_PATH if nccl else "OVERLAP_PATH_TRACEBACK"
            if m and (none := frames.none_process_group(text, (self._frames.get(key) or [None] * 4)[3])):
                fid, fields = NONE_GROUP, [none]  # a process group never initialized, not an overlap setting (fix21 C)
            entry = Entry(id=gid, origin="traceback", kind="raise", severity="error", topic=TRACEBACK, file=path, function=function,
                          line=number, exception=exception, condition=" ".join(fields), package=dim)
            group = self.groups[gid] = Group(entry, [fid], text[:MAX_SHOWN], line.source, line.number,
                                             frame=(path, number, function) if path else None)
        group.add(line.rank)
        return True

    def _tracebacks(self) -> int:
        return sum(1 for g in self.groups.values() if g.entry.topic == TRACEBACK)

    def _record(self, line: Line, hits, frame, approximate: float | None = None) -> str:
        best = hits[0]
        # the same text raised in several places (Bridge's copy of a Megatron-Core check): one group, every place's
        # findings; a message whose field merely swallows a longer one's words is not the same
        same = [h for h in hits if h.span == best.span and h.truncated == best.truncated and _shape(h.entry) == _shape(best.entry)]
        entry = _by_frame(same, frame) or best.entry
        # a message whose findings depend on the line's own text (a selector's `line`) is grouped by what it links to:
        # two ranks' timeouts of one message on different process groups, or two shape errors, are two causes
        by_text = any(causes.conditional(self.catalog, h.entry) for h in same)
        linked = self._linked(same) if by_text else None
        gid = f"{entry.id}#{'+'.join(linked) or '-'}" if by_text else entry.id
        if entry.id in pg.SIZED and (n := pg.size(best.text)):
            gid = self._sized(gid, n)  # a watchdog's all-gathers of two group sizes are two groups' (diagnose tells them apart)
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = Group(entry, linked if linked is not None else self._linked(same), best.text[:MAX_SHOWN],
                                             line.source, line.number, best.truncated,
                                             frame=tuple(frame[:3]) if frame else None, groups=best.groups,
                                             approximate=approximate, elsewhere=self._elsewhere(entry))
        group.add(line.rank)
        if (seq := pg.work_seq(entry.id, best.text)) is not None and len(group.works) < MAX_RANKS:
            group.works.setdefault((seq, line.rank), pg.tag(best.text))  # (every line's: they pair by rank and work)
        self._fact(entry, best, line)
        return gid

    def _elsewhere(self, entry: Entry) -> tuple:
        """Every other place that writes the entry's text: the other packages' and files' entries of the same text
        (Megatron-LM's training.py and Bridge's setup.py: fresh16 F16-1) and each one's raised_elsewhere."""
        if entry.origin != "python":
            return ()
        out = []
        for e in (entry, *self.catalog.same_text(entry)):
            if e is not entry:
                out.append((e.package, e.package_version, e.file, e.function, e.line))
            out += [(e.package, e.package_version, x[0], x[1], x[2]) for x in e.raised_elsewhere]
        own = (entry.file, entry.function)
        return tuple(dict.fromkeys(x for x in out if (x[2], x[3]) != own))[:MAX_PLACES]

    def _sized(self, gid: str, n: int) -> str:
        """The group of a sized watchdog message for a group size: one per size up to MAX_SIZES sizes (a run has a few
        group sizes), then one for the rest (counted in facts: a log of ever new sizes is not a group per line)."""
        sized = f"{gid}@{n}"
        if sized in self.groups:
            return sized
        if sum(1 for g in self.groups if g.startswith(f"{gid}@") and not g.endswith("@more")) < MAX_SIZES:
            return sized
        self.facts["sizes_merged"] = self.facts.get("sizes_merged", 0) + 1
        return f"{gid}@more"

    def _linked(self, same) -> list:
        linked: list = []
        for h in same:
            linked += [f for f in causes.links(self.catalog, h.entry, h.text) if f not in linked]
        return linked

    def _bare(self, line: Line, frame) -> bool:
        """An exception line without a message (a bare assert): the entry raised in the traceback's last frame;
        whether the catalog has one."""
        path, number, function, code = frame[:4]
        entries = self.catalog.frame(path, function, code, number)
        if not entries:
            return False
        entry = entries[0]
        group = self.groups.get(entry.id)
        if group is None:
            group = self.groups[entry.id] = Group(entry, causes.links(self.catalog, entry, clean(line.text)),
                                                  clean(line.text)[:MAX_SHOWN], line.source, line.number,
                                                  frame=(path, number, function))
        group.add(line.rank)
        return True

    def _fact(self, entry: Entry, hit, line: Line) -> None:
        if entry.template and entry.template.startswith(_TP_SIZE) and hit.groups and _size(hit.groups[0]):
            self.facts.setdefault("tp_size", _size(hit.groups[0]))
        elif entry.template and entry.template.startswith(_WORLD) and hit.groups and _size(hit.groups[0]):
            self.facts.setdefault("world_size", _size(hit.groups[0]))
        elif entry.template and "HyperCommGrid" in entry.template:
            m = _GRID.search(hit.text)
            sizes = [_size(g) for g in m.groups()] if m else []
            if sizes and all(sizes):
                self.facts.setdefault("world_size", sizes[0] * sizes[1] * sizes[2] * sizes[3])
        elif entry.template and entry.template.startswith(_SETUP_DONE):
            self.facts["setup_done"] = True  # (Bridge prints these after initialize_ub returned: recheck60 AG2)
        elif entry.id in UB_STARTED:
            # TE's printf, at its line's start (after a launcher's or collector's prefix, messages.LAUNCH_PREFIX: Ray's
            # worker, CRI's, a time; recheck63 AJ4): not a grep result or a doc quoting it
            if after_prefix(hit.text, hit.span[0]):
                self.facts["ub_started"] = True
                self.ub_start.setdefault(line.source, line.number)
        elif entry.id in FATAL:
            what = hit.text[hit.span[0]:hit.span[1]][:MAX_PATH] if entry.id == FATAL[0] else "pybind11's GIL check failed"
            seen = self.fatal.setdefault(line.source, [what, None])
            if seen[1] is None and line.source in self.ub_start:
                seen[1] = what
        elif entry.id == "native.ub_mc_initialized":
            self.facts["ub_multicast"] = True
        elif entry.id == "native.ub_mc_not_initialized":
            self.facts.setdefault("ub_multicast", False)
        elif entry.id == "native.ub_domain_ranks_legacy" and len(hit.groups) >= 2 and _size(hit.groups[0], 0) is not None:
            ranks = [r for r in (_size(x, 0) for x in re.findall(r"[0-9]+", hit.groups[1])[:4096]) if r is not None]
            domains = self.facts.setdefault("ub_domains", {})
            if len(domains) < MAX_DOMAINS:
                domains[_size(hit.groups[0], 0)] = ranks

    def _iteration(self, line: Line) -> None:
        if self._capped(line.source):
            return
        text = clean(line.text)
        span = iteration_ms_span(text)
        if span is not None:
            self._time(line.source, float(text[span[0]:span[1]]))
            self.iteration_lines.setdefault(line.source, array("q")).append(line.number)

    def _capped(self, source: str) -> bool:
        times = self.iterations.get(source)
        return self.times >= MAX_ITERATION_TIMES or (times is not None and len(times) >= MAX_ITERATIONS)

    def _time(self, source: str, ms: float) -> None:
        self._times(source, (ms,))

    def _times(self, source: str, values) -> None:
        values = [v for v in values if v > 0]  # no iteration takes 0 ms: a field that says so is not a time
        times = self.iterations.get(source)
        room = min(MAX_ITERATION_TIMES - self.times, MAX_ITERATIONS - (len(times) if times is not None else 0))
        if room <= 0 or not values:
            return
        if times is None:
            times = self.iterations[source] = array("d")
        kept = values[:room]
        times.extend(kept)
        self.times += len(kept)

    # -- blocks of lines: the prefilter (shapes.py) -------------------------------------------------------------
    def read_block(self, source: str, number: int, data: bytes, path_rank: str | None) -> None:
        """Complete lines of one source as bytes (the last may lack its newline at the end of the input), the first
        of them line `number`: the same scan as feeding each line, reading in full only the lines whose shape can
        hold something (and every line while a configuration summary block or a traceback frame's code line is under
        way); of the others only the iteration times and ranks are taken, by their shape's slices."""
        if self._shapes is None:
            self._shapes = shapes_.for_catalog(self.catalog, shapes_.title_of(self.summary))
        shapes = data.translate(shapes_.MASK).split(b"\n")
        if data.endswith(b"\n"):
            shapes.pop()
        distinct = set(shapes)
        info = self._shapes.of(distinct)
        src = self._count(source, len(shapes), None)
        if not src["text"] and _holds_text(data):
            src["text"] = True
        if path_rank is not None and src["text"] and any(info[s].rank is None for s in distinct):  # (recheck51 T11)
            self._count(source, 0, path_rank)
        special = {s: x for s in distinct if (x := info[s]) is not shapes_.COLD and (x.hot or x.rank or x.iteration)}
        joins = self._joins(source, number, shapes, distinct, info)
        if not special and not joins and not self._every_line(source, number):
            self._last_opens(source, number, shapes)
            return
        raw = _Lines(data, shapes)
        hot_shapes = {s for s, shape in special.items() if shape.hot}
        quiet_shapes = special.keys() - hot_shapes
        hot = [i for i, s in enumerate(shapes) if s in hot_shapes] if hot_shapes else []
        if joins:
            hot = sorted(joins.union(hot))
        quiet = [i for i, s in enumerate(shapes) if s in quiet_shapes] if quiet_shapes else []
        i, h, q, n = 0, 0, 0, len(shapes)
        while i < n:
            if self._every_line(source, number + i) or i in joins:
                if i in joins:
                    self._opened[source] = number + i - 1
                self._read_raw(source, number + i, raw[i], path_rank)
                i += 1
                continue
            h = bisect_left(hot, i, h)
            end = hot[h] if h < len(hot) else n
            q0 = bisect_left(quiet, i, q)
            q = bisect_left(quiet, end, q0)
            self._quiet(source, src, quiet[q0:q], shapes, raw, special, path_rank, number)
            if end < n and end not in joins:
                self._hot(source, number + end, raw[end], special[shapes[end]], path_rank)
                i = end + 1
            else:
                i = end
        self._last_opens(source, number, shapes)

    def _last_opens(self, source: str, number: int, shapes: list) -> None:
        if shapes and shapes[-1].rstrip().endswith(b"("):
            self._opened[source] = number + len(shapes) - 1

    def _joins(self, source: str, number: int, shapes: list, distinct: set, info: dict) -> set:
        """The lines of a block (indexes) that are Python string literals right after a line ending with "(" (the
        block's line before, or the source's last line read before the block): each may start a run of literals that
        Python joins into one message (_literal), and is read in full."""
        openers = {s for s in distinct if s.rstrip().endswith(b"(")}
        before = self._opened.get(source) == number - 1
        if not openers and not before:
            return set()
        literal = {s for s in distinct if info[s].literal}
        if not literal:
            return set()
        out = {i for i in range(1, len(shapes)) if shapes[i] in literal and shapes[i - 1] in openers}
        if before and shapes[0] in literal:
            out.add(0)
        return out

    def _hot(self, source: str, number: int, raw: bytes, shape, path_rank: str | None) -> None:
        """A hot line: read in full, unless the same bytes were read before to the same end (a warning that every
        iteration repeats): then its rank joins that group."""
        gid = self._repeats.get(raw) if not self._frames else None
        if gid is None:
            gid = self._read_raw(source, number, raw, path_rank)
            if gid is not None and gid not in _PER_SOURCE and not getattr(self.groups.get(gid), "works", None):  # (a work's rank may be the path's)
                if len(self._repeats) >= MEMO:
                    self._repeats.clear()
                self._repeats[raw] = gid
            return
        rank = shapes_.rank_of(raw, shape.rank, path_rank) if shape.rank is not None else path_rank
        self._count(source, 0, rank)
        self.groups[gid].add(rank)

    def _read_raw(self, source: str, number: int, raw: bytes, path_rank: str | None) -> str | None:
        text, cut = line_text(raw)
        rank, text = split_prefix(text)
        rank = rank if rank is not None else path_rank
        self._count(source, 0, rank)
        return self._read(Line(source, number, rank, text, cut))

    def _quiet(self, source: str, src: dict, lines: list, shapes: list, raw: list, special: dict, path_rank,
               number: int) -> None:
        """Lines read by their shape's slices alone (lines: their indexes in the block starting at line `number`):
        their ranks and iteration times."""
        ranks = src["ranks"]
        for i in lines:
            rule = special[shapes[i]].rank
            if rule is not None and len(ranks) < MAX_RANKS:
                ranks.add(shapes_.rank_of(raw[i], rule, path_rank))
        if not self._capped(source):
            at = [i for i in lines if special[shapes[i]].iteration]
            self._times(source, [float(raw.part(i, special[shapes[i]].iteration)) for i in at])
            if at:
                self.iteration_lines.setdefault(source, array("q")).extend(number + i for i in at)

    def _every_line(self, source: str, number: int) -> bool:
        """Whether the line `number` of `source` must be read in full whatever its shape: a configuration summary
        block is under way, a traceback frame of this source may still get its code line, or the line may continue
        the exception line before it."""
        wrapped = self._wrapped.get(source) if self._wrapped else None
        if wrapped is not None and number == wrapped[0].number + 1:
            return True
        literals = self._literals.get(source) if self._literals else None
        if literals is not None and number == literals[-1].number + 1:
            return True
        if self._awaiting:
            for key, at in list(self._awaiting.items()):
                if key[0] == source and number - at <= CODE_WITHIN:
                    return True
                del self._awaiting[key]
        if self.summary is None:
            return False
        return self.summary.collecting if not self.summary.done else self.later is not None and self.later.collecting


class _Lines:
    """The lines of a block by number, found by the lengths of their shapes (a shape is as long as its line): only
    the lines asked for are cut out of the block."""

    def __init__(self, data: bytes, shapes: list):
        self.data, self.shapes = data, shapes
        self.ends = list(accumulate(map(len, shapes), initial=0))  # line i starts at ends[i] + i

    def __getitem__(self, i: int) -> bytes:
        start = self.ends[i] + i
        return self.data[start:start + len(self.shapes[i])]

    def part(self, i: int, span: tuple) -> bytes:
        start = self.ends[i] + i
        return self.data[start + span[0]:start + span[1]]


def read(scan: Scan, sources, stdin=None, notes: list | None = None) -> None:
    """Scan every line of the sources (reader.files' list), by blocks. Each source is a log of its own: a
    configuration summary block or a traceback it leaves unfinished does not go on in the next."""
    for source in sources:
        if scan.summary is not None and not scan.summary.done:
            scan.summary = type(scan.summary)()
        scan.later = None
        path_rank = reader.rank_of_path(source) if source != "-" else None
        for part in reader.blocks(source, stdin=stdin, notes=notes):
            if isinstance(part, Line):
                scan.feed(part)
            else:
                scan.read_block(source, part[0], part[1], path_rank)
        scan.finish(source)




# NCCL's failures as torch raises them (DistBackendError): they say that a collective or a send failed, not which;
# a traceback through overlap-path code says which communication it was (NCCL_FAILURE_ON_OVERLAP_PATH)
TRANSPORT = frozenset({"native.nccl_error", "native.nccl_unhandled_cuda_error"})
# ... and the watchdog's line that such a failure ended it, which torch 2.4+ tags with the group's description
ON_GROUP = TRANSPORT | {"native.pg_watchdog_terminated"}
MAX_DIFFERING = 8  # configuration summaries that differ from the first, kept to be said


def differing(first, other) -> list[str]:
    """The section.field names whose printed values differ between two configuration summaries (or that one prints
    and the other does not)."""
    out = []
    for section in sorted(set(first.sections) | set(other.sections)):
        a, b = first.sections.get(section) or {}, other.sections.get(section) or {}
        out += [f"{section}.{name}" for name in sorted(set(a) | set(b)) if a.get(name, ...) != b.get(name, ...)]
    return out


MAX_SIZE = 1 << 20  # a parallel size, world size or rank a log can state (more GPUs than any machine has: not a fact)


def _size(text: str, least: int = 1) -> int | None:
    """A size or rank as a log line states it: ASCII digits (str.isdigit takes '²'), at least `least` and below
    MAX_SIZE; None otherwise."""
    if not (0 < len(text) <= 7 and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if least <= value < MAX_SIZE else None


_LITERAL_PART = re.compile(r"""[rRuUfF]{0,2}(?:"((?:[^"\\\n]|\\.)*)"|'((?:[^'\\\n]|\\.)*)')""")
MAX_LITERALS = 16  # string literal lines joined into one message at most
MAX_PLACES = 16  # other places of a message's text kept


def _literal_text(text: str) -> str:
    """The text Python makes of a line of adjacent string literals (their quotes' escapes undone)."""
    return "".join(m[m.lastindex].replace('\\"', '"').replace("\\'", "'") if m.lastindex else ""
                   for m in _LITERAL_PART.finditer(text))


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


def _shape(entry: Entry) -> str | None:
    """A message's literal text with its fields blanked."""
    return FIELD.sub("{}", entry.template) if entry.template else entry.pattern


def _in_file(frame, entry: Entry) -> bool:
    """Whether the traceback's last frame is in the entry's file."""
    return frame is not None and bool(entry.file) and frame[0].replace("\\", "/").endswith("/" + entry.file)


def _by_frame(hits, frame) -> Entry | None:
    """Of messages with the same text in several packages, the one raised where the traceback's last frame is."""
    if len(hits) < 2 or frame is None:
        return None
    path = frame[0].replace("\\", "/")
    for h in hits:
        if h.entry.file and path.endswith("/" + h.entry.file):
            return h.entry
    return None
