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
import sys
from pathlib import Path
from collections.abc import Callable

from ..errors import UsageError
from importlib.util import find_spec
from ..safeio import esc, shown
from .source import Source
from .window import Stats, Truncated, Window, char

RUN_CHARS = 1 << 14  # the text of the events one scanner call decodes together


# The optional fast backend: msgspec's JSON decoder where msgspec is installed, unless MBRIDGE_TRACE_JSON=stdlib;
# never required. Told which keys the callback reads (read's `keys`), it decodes each event into a dict of those
# keys alone, skipping the rest of the event unbuilt: a run in about a quarter of the stdlib scanner's time. Importing
# msgspec costs about 35 ms (the stdlib's time for about 4 million characters): msgspec reads a file whose text is
# expected to be longer than EAGER_CHARS from its start; in others the stdlib decodes the first FAST_AFTER
# characters of runs and msgspec the rest.
# msgspec reads the values it builds as the stdlib does (integers of any size up to Python's 4,300 digits, floats
# correctly rounded) and refuses what the stdlib may read otherwise (NaN, lone surrogates, deep nesting, a value of
# another type than an object where one is read), which the stdlib then decides. A value it skips is checked as JSON
# but never converted, so a run with an integer longer than the stdlib takes (the only JSON the stdlib refuses that
# a skip lets pass) is left to the stdlib too (_long_integer).
BACKEND = "stdlib" if os.environ.get("MBRIDGE_TRACE_JSON", "").lower() == "stdlib" or find_spec("msgspec") is None else "msgspec"
FAST_AFTER = 4 << 20
EAGER_CHARS = 6 << 20
_decoders: dict = {}  # keys -> msgspec's decode for them, once msgspec is in use
_stdlib_chars = 0
_COMMA = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_CUT = re.compile(r"\}[ \t\n\r]*,[ \t\n\r]*\{")
_DIGITS = re.compile(r"[0-9]*")

__all__ = ["read", "BadEvent", "Stats", "Truncated"]


class BadEvent(Exception):
    """Raised by an on_event callback for an event it cannot use (a time that is not a finite number, ...);
    the reader turns it into a UsageError naming the event's byte offset."""


def read(path: Path, on_event: Callable[[dict], None] | None, on_meta: Callable[[str, object], None] | None = None,
         keys: tuple | None = None) -> Stats:
    """Call on_meta(key, value) for each top-level key but traceEvents and on_event(event) for each event (a JSON
    object) of the array. With on_event None, stop at traceEvents (the header only). `keys`, where on_event reads
    only some of an event: ((key, None or (its keys, where its value is an object)), ...); the fast backend then
    hands it events with those keys alone (the stdlib's have every key). Raises Truncated (with .events) when the
    file ends too soon, UsageError when it is not valid JSON or not a trace."""
    stats = Stats()
    source = Source(path)
    text = Window(source, path, stats)
    text.keys = keys
    if on_event is not None and BACKEND == "msgspec" and keys not in _decoders and source.expected_chars() > EAGER_CHARS:
        use_fast_now(keys)
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
    seen_events, keys = False, set()
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
            if key in keys:  # the second would silently replace the first (fuzzM M4: a pg_config lost)
                raise UsageError(f"{esc(text.path)}: the key {shown(key, 40)} twice at the top level: the second would "
                                 "silently replace the first")
            keys.add(key)
            value = text.value(meta=True)
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
        events = _fast(run, text.keys)
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


def use_fast_now(keys: tuple | None = None) -> None:
    """Use the fast backend from the first run on, for reads of `keys` (read's): before worker processes fork, so
    that each does not decode its first FAST_AFTER characters with the stdlib and import msgspec again."""
    if BACKEND == "msgspec":
        _decoder_of(keys)


def _fast(run: str, keys: tuple | None) -> list | None:
    """The run's events by the fast backend; None where it is not used (yet) or does not read the run: the stdlib
    scanner then decides, with its own errors."""
    global _stdlib_chars
    decode = _decoders.get(keys)
    if decode is None:
        if BACKEND == "stdlib" or not _decoders and _stdlib_chars < FAST_AFTER:
            _stdlib_chars += len(run)
            return None
        decode = _decoder_of(keys)
    if keys is not None and _long_integer(run):
        return None
    try:
        return decode(run)
    except (ValueError, RecursionError):
        return None


def _decoder_of(keys: tuple | None):
    """The decode for reads of `keys`, made once."""
    decode = _decoders.get(keys)
    if decode is None:
        decode = _decoders[keys] = _decoder(keys)
    return decode


def _decoder(keys: tuple | None):
    """msgspec's decode of a run: into whole events, or into dicts of `keys` alone (TypedDicts, every key optional);
    where this msgspec cannot make it (it will not import, or it is too old for TypedDicts), one that leaves every
    run to the stdlib."""
    try:
        msgspec = _import_msgspec()
        if keys is None:
            return msgspec.json.Decoder().decode
        from typing import Any, TypedDict  # msgspec has imported typing already

        def typed(name: str, members: tuple):
            return TypedDict(name, {k: Any if sub is None else typed(k, tuple((s, None) for s in sub)) for k, sub in members},
                             total=False)

        return msgspec.json.Decoder(list[typed("Event", keys)]).decode
    except Exception:  # ImportError, or a TypeError of a msgspec without TypedDict support
        return _to_the_stdlib


def _import_msgspec():
    import msgspec

    return msgspec


def _to_the_stdlib(run: str) -> None:
    return None


def _long_integer(run: str) -> bool:
    """Whether the run holds more ASCII digits in a row than int() takes (sys.get_int_max_str_digits()). Such a
    stretch starts less than half the limit before a multiple of half the limit and runs on past the next one: only
    there is it measured (in C: a run is a few such positions)."""
    limit = _int_digits()
    if not limit or len(run) <= limit:
        return False
    half = (limit + 1) // 2
    match = _DIGITS.match
    for at in range(0, len(run) - half, half):
        if "0" <= run[at] <= "9":  # most positions are not: no regex call there
            end = match(run, at).end()
            if end - at > half and end - at + match(run[max(0, at - half):at][::-1]).end() > limit:
                return True
    return False


def _int_digits() -> int:
    get = getattr(sys, "get_int_max_str_digits", None)  # Python 3.10.7 and later: 0 is no limit
    return get() if get is not None else 0


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
