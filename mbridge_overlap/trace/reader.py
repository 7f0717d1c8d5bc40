"""Stream a PyTorch profiler (Kineto) trace, .json or .json.gz, in any valid JSON layout, without loading it whole.

The file is one JSON value: an object whose "traceEvents" array holds the events (other keys in any order), or a
bare array of events (the Chrome trace format allows both). Text is read in chunks into a window (window.py); runs
of events are decoded by the C JSON scanner straight from the window, and the commas, brackets and keys between
events are checked here, so one pass reads any layout (Kineto's indented one, json.dumps' compact one, any indent) in time linear in
the file's size and with memory bounded by the window, not the file.

Every byte is checked as JSON: what json.load refuses (corrupt text between or inside events, a missing comma,
data after the trace's closing bracket, a second trace appended) is a UsageError naming the byte offset. A file
that stops inside its JSON raises Truncated instead. NaN and Infinity, which Python's json module accepts, are
counted (Stats.non_finite): the analysis refuses them only where it needs the value.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from collections.abc import Callable

from ..errors import UsageError
from ..imports import importable
from ..safeio import esc, shown
from .source import Source
from .window import Stats, Truncated, Window, char

RUN_CHARS = 1 << 14  # the text of the events one scanner call decodes together


# The optional fast backend: msgspec's JSON decoder where msgspec is installed, unless MBRIDGE_TRACE_JSON=stdlib;
# never required. A run decodes in about half the stdlib scanner's time, but importing msgspec costs about 60 ms,
# so the stdlib decodes the first FAST_AFTER characters of runs and msgspec the rest. msgspec reads numbers as
# the stdlib does (integers of any size up to Python's 4,300 digits, floats correctly rounded) and refuses what
# the stdlib may read otherwise (NaN, lone surrogates, deep nesting), which the stdlib then decides.
BACKEND = "stdlib" if os.environ.get("MBRIDGE_TRACE_JSON", "").lower() == "stdlib" or not importable("msgspec") else "msgspec"
FAST_AFTER = 16 << 20
_decode = None  # msgspec's, once imported
_stdlib_chars = 0
_COMMA = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_CUT = re.compile(r"\}[ \t\n\r]*,[ \t\n\r]*\{")

__all__ = ["read", "BadEvent", "Stats", "Truncated"]


class BadEvent(Exception):
    """Raised by an on_event callback for an event it cannot use (a time that is not a finite number, ...);
    the reader turns it into a UsageError naming the event's byte offset."""


def read(path: Path, on_event: Callable[[dict], None] | None, on_meta: Callable[[str, object], None] | None = None) -> Stats:
    """Call on_meta(key, value) for each top-level key but traceEvents and on_event(event) for each event (a JSON
    object) of the array. With on_event None, stop at traceEvents (the header only). Raises Truncated (with
    .events) when the file ends too soon, UsageError when it is not valid JSON or not a trace."""
    stats = Stats()
    source = Source(path)
    text = Window(source, path, stats)
    try:
        _document(text, on_event, on_meta)
    except Truncated as exc:
        exc.events = stats.events
        raise
    finally:
        source.close()
    return stats


def _document(text: Window, on_event, on_meta) -> None:
    first = text.peek()
    if first == "\ufeff":  # a UTF-8 byte-order mark: not JSON, but harmless (json.load of bytes skips it too)
        text.pos += 1
        first = text.peek()
    if first == "[":  # the Chrome trace format also allows a bare array of events
        if on_event is not None:
            _events(text, on_event)
            _end(text)
        return
    if first != "{":
        if not first:
            raise UsageError(f"{esc(text.path)}: empty file, not a trace")
        raise UsageError(f"{esc(text.path)}: not a JSON trace (it starts with {char(first)}, not '{{' or '[')")
    text.pos += 1
    if _object(text, on_event, on_meta):
        _end(text)


def _object(text: Window, on_event, on_meta) -> bool:
    """The top-level object's members; False when it stopped at traceEvents (on_event None)."""
    seen_events = False
    c = text.peek()
    while c != "}":
        if c != '"':
            if not c:
                raise Truncated()
            raise text.error(text.pos, f"expected a key in double quotes, found {char(c)}")
        key = text.value()
        text.expect(":", f"after the key {shown(key, 40)}")
        if key == "traceEvents":
            if on_event is None:
                return False
            if seen_events:
                raise text.error(text.pos, "a second traceEvents array")
            found = text.peek()
            if not found:
                raise Truncated()
            if found != "[":
                raise UsageError(f"{esc(text.path)}: traceEvents is not an array")
            _events(text, on_event)
            seen_events = True
        else:
            value = text.value()
            if on_meta is not None:
                on_meta(key, value)
        c = text.peek()
        if c == ",":
            text.pos += 1
            c = text.peek()
            if c == "}":
                raise text.error(text.pos, "a comma before '}'")
        elif c != "}":
            if not c:
                raise Truncated()
            raise text.error(text.pos, f"expected ',' or '}}' after the value of {shown(key, 40)}, found {char(c)}")
    text.pos += 1
    if not seen_events:
        raise UsageError(f"{esc(text.path)}: no traceEvents array, so not a PyTorch profiler trace")
    return True


def _end(text: Window) -> None:
    """Only blanks may follow the trace's JSON value."""
    c = text.peek()
    if c:
        what = "a second JSON value (two traces in one file?)" if c in "{[" else f"data ({char(c)})"
        raise text.error(text.pos, f"{what} after the end of the trace")


def _events(text: Window, on_event) -> None:
    """The event array, from its '['. Runs of whole events are decoded by one scanner call each (_runs); where a
    run does not decode as cut, and at the window's end, events are decoded one at a time in a tight loop; the
    event the window cuts, the array's end and anything unexpected go through the careful path below it."""
    text.pos += 1  # '['
    if text.peek() == "]":
        text.pos += 1
        return
    stats, comma = text.stats, _COMMA.match
    while True:
        until = _runs(text, on_event)  # where a run failed: go event by event up to there
        if until is None:
            text.drop()  # the rest of the window, less than a run
        scan, buf, pos, count = text.scan, text.buf, text.pos, stats.events
        limit = len(buf) if until is None else until - text.chars_base
        constants = stats.non_finite  # a failed scan may have counted some; the careful path counts them again
        try:
            while pos < limit:
                try:
                    event, end = scan(buf, pos)
                except (StopIteration, ValueError, RecursionError):
                    break
                m = comma(buf, end)
                if m is None:
                    break  # the window's end, the array's end or an error: the careful path decides
                count += 1
                if event.__class__ is dict:
                    on_event(event)
                pos = m.end()
                constants = stats.non_finite
        except BadEvent as exc:
            raise _bad_event(text, pos, exc) from None
        text.pos, stats.events, stats.non_finite = pos, count, constants
        if until is not None and pos >= limit:
            continue
        buf = None  # the careful path may move the window
        if not text.peek():
            raise Truncated()
        start = text.byte_offset(text.pos)
        event, text.pos = text.decode()
        stats.events += 1
        if event.__class__ is dict:
            try:
                on_event(event)
            except BadEvent as exc:
                raise UsageError(f"{esc(text.path)}: the event at byte {start:,}: {exc}") from None
        c = text.peek()
        if c == ",":
            text.pos += 1
            if text.peek() == "]":
                raise text.error(text.pos, "a comma before ']'")
            continue
        if c == "]":
            text.pos += 1
            return
        if not c:
            raise Truncated()
        raise text.error(text.pos, f"expected ',' or ']' after an event, found {char(c)}")


def _runs(text: Window, on_event) -> int | None:
    """Decode runs of events of about RUN_CHARS, each with one scanner call over "[" + run + "]" (the scanner then
    shares key strings among the run's events: a quarter faster than one call per event). A run ends at a '}'
    followed by ',' and '{', most likely an event's end; a run that does not decode whole as cut (the '}' was
    inside an event, or the JSON is bad) is left to the event-by-event loop, whose file offset this returns.
    None when no run is left in the window."""
    stats, buf, pos = text.stats, text.buf, text.pos
    while True:
        cut = _last_cut(buf, pos, min(len(buf), pos + RUN_CHARS))
        if cut is None:
            text.pos = pos
            return None
        end, after = cut
        run, constants = "[" + buf[pos:end] + "]", stats.non_finite
        events = _fast(run)
        if events is not None:
            stop = len(run)
        else:
            try:
                events, stop = text.scan(run, 0)
            except (StopIteration, ValueError, RecursionError):
                stop = -1
        if stop != len(run):
            stats.non_finite = constants
            text.pos = pos
            return text.chars_base + end
        stats.events += len(events)
        try:
            for event in events:
                if event.__class__ is dict:
                    on_event(event)
        except BadEvent as exc:
            nth = next(i for i, e in enumerate(events) if e is event)
            raise _bad_event(text, _nth_start(text, buf, pos, nth), exc) from None
        pos = after


def use_fast_now() -> None:
    """Use the fast backend from the first run on: before worker processes fork, so that each does not decode its
    first FAST_AFTER characters with the stdlib and import msgspec again."""
    global _decode
    if BACKEND == "msgspec" and _decode is None:
        import msgspec

        _decode = msgspec.json.Decoder().decode


def _fast(run: str) -> list | None:
    """The run's events by the fast backend; None where it is not used (yet) or does not read the run: the stdlib
    scanner then decides, with its own errors."""
    global _decode, _stdlib_chars
    if _decode is None:
        if BACKEND == "stdlib" or _stdlib_chars < FAST_AFTER:
            _stdlib_chars += len(run)
            return None
        import msgspec

        _decode = msgspec.json.Decoder().decode
    try:
        return _decode(run)
    except (ValueError, RecursionError):
        return None


def _last_cut(buf: str, pos: int, limit: int) -> tuple[int, int] | None:
    """(just past the '}', the next '{') of the last '}' in buf[pos:limit] followed by ',' and '{'."""
    j = buf.rfind("}", pos, limit)
    while j > pos:
        m = _CUT.match(buf, j)
        if m:
            return j + 1, m.end() - 1
        j = buf.rfind("}", pos, j)
    return None


def _nth_start(text: Window, buf: str, pos: int, nth: int) -> int:
    """Where the nth event from pos starts (for an error message)."""
    for _ in range(nth):
        _event, end = text.scan(buf, pos)
        pos = _COMMA.match(buf, end).end()
    return pos


def _bad_event(text: Window, pos: int, exc: BadEvent) -> UsageError:
    return UsageError(f"{esc(text.path)}: the event at byte {text.byte_offset(pos):,}: {exc}")
