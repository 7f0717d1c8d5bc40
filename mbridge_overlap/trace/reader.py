"""Stream a PyTorch profiler (Kineto) trace, .json or .json.gz, without loading it whole.

The file is one JSON object whose "traceEvents" array holds the events. We read text in chunks, decode the small
top-level values (distributedInfo, ...) as they come, and hand events of the array to a callback, so memory stays
at a few chunks however large the trace is.

Fast path: Kineto writes one event per block, separated by "},\\n  {". A raw newline never occurs inside a JSON
string, so splitting there is safe whenever the separator sits at the array's depth. We decode only the blocks that
can matter (they hold a correlation, a ProfilerStep or a process group) with one json.loads call. A block
split at the wrong depth cannot decode on its own, and a stretch that may hold the array's end is not split at all;
either way that stretch is decoded event by event with the C scanner, which is exact for any JSON layout.
"""

from __future__ import annotations

import json
import re
from json.scanner import make_scanner
from pathlib import Path
from typing import Callable

from ..errors import UsageError
from .source import Source

CHUNK_CHARS = 1 << 20
MAX_VALUE_CHARS = 64 << 20  # one event or metadata value larger than this means the JSON is broken
SEPARATOR = "},\n  {"
_WS = re.compile(r"[ \t\n\r]*")
_ARRAY_END = re.compile(r"\}\s*\]\s*[,}]")
_SCAN = make_scanner(json.JSONDecoder())
# Events without these are CPU ops, flows, counters and metadata: nothing the analysis reads (a GPU event always
# carries its correlation).
_MARKERS = ('"correlation"', "ProfilerStep", '"Process Group', '"Collective name"')


class Truncated(Exception):
    """The file ended inside the trace; what was read so far has been handed on already."""

    events = 0


class _Text:
    """A window over the decoded text: buf[pos:] is not consumed yet; base + pos is the offset in the file."""

    def __init__(self, fh, path: Path):
        self.fh, self.path = fh, path
        self.buf, self.pos, self.base, self.eof = "", 0, 0, False
        self.events = 0  # events of the array seen so far, decoded or skipped

    def offset(self) -> int:
        return self.base + self.pos

    def fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.fh.read(CHUNK_CHARS)
        if not chunk:
            self.eof = True
            return False
        self.base += self.pos
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the file), consuming the blanks."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def value(self):
        """Decode the next JSON value, reading more text while it is incomplete."""
        if not self.peek():
            raise Truncated()
        while True:
            try:
                obj, end = _SCAN(self.buf, self.pos)
                if end < len(self.buf) or self.eof:  # a number at the very end may go on in the next chunk
                    self.pos = end
                    return obj
                problem = "value cut at the end of a chunk"
            except StopIteration:
                problem = f"expected a JSON value, found '{self.buf[self.pos:self.pos + 1]}'"
            except json.JSONDecodeError as exc:
                problem = exc.msg
            if len(self.buf) - self.pos > MAX_VALUE_CHARS or not self.fill():
                raise self.bad(problem)

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise self.bad(f"expected '{char}', found '{found}'")
        self.pos += 1

    def bad(self, what: str) -> Exception:
        if self.eof and not self.buf.rstrip().endswith(("}", "]")):  # it stops mid-value: cut short, not malformed
            return Truncated()
        return UsageError(f"{self.path}: not valid JSON near character {self.offset():,} ({what})")


def read(path: Path, on_event: Callable[[dict], None] | None, on_meta: Callable[[str, object], None] | None = None) -> int:
    """Call on_meta(key, value) for each top-level key but traceEvents and on_event(event) for the events that may
    matter; return how many events the array held. With on_event None, stop at traceEvents (the header only).
    Raises Truncated (with .events) when the file ends too soon."""
    source = Source(path)
    text = _Text(source, path)
    try:
        _document(text, on_event, on_meta)
    except Truncated as exc:
        exc.events = text.events
        raise
    finally:
        source.close()
    return text.events


def _document(text: _Text, on_event, on_meta) -> None:
    first = text.peek()
    if first == "[":  # the Chrome trace format also allows a bare array of events
        if on_event is not None:
            _events(text, on_event)
        return
    if first != "{":
        if not first:
            raise UsageError(f"{text.path}: empty file, not a trace")
        raise UsageError(f"{text.path}: not a JSON trace (it starts with '{first}', expected '{{')")
    text.pos += 1
    _object(text, on_event, on_meta)


def _object(text: _Text, on_event, on_meta) -> None:
    seen_events = False
    while True:
        c = text.peek()
        if c == "}":
            break
        if c == ",":
            text.pos += 1
            continue
        if not c:
            raise Truncated()
        key = text.value()
        if not isinstance(key, str):
            raise text.bad("expected a key")
        text.expect(":")
        if key == "traceEvents":
            if on_event is None:
                return
            if text.peek() != "[":
                raise UsageError(f"{text.path}: traceEvents is not an array")
            _events(text, on_event)
            seen_events = True
        else:
            value = text.value()
            if on_meta is not None:
                on_meta(key, value)
    if not seen_events:
        raise UsageError(f"{text.path}: no traceEvents array, so not a PyTorch profiler trace")


def _events(text: _Text, on_event) -> None:
    text.pos += 1  # '['
    while True:
        c = text.peek()
        if c == "]":
            text.pos += 1
            return
        if c == ",":
            text.pos += 1
            continue
        if not c:
            raise Truncated()
        if c == "{" and _fast_region(text, on_event):
            continue
        event = text.value()
        text.events += 1
        if isinstance(event, dict):
            on_event(event)


def _fast_region(text: _Text, on_event) -> bool:
    """Decode the events before the last separator in the window; False when the window has none left."""
    last = text.buf.rfind(SEPARATOR, text.pos)
    while last < 0:  # the window ends inside this event
        if len(text.buf) - text.pos > MAX_VALUE_CHARS or not text.fill():
            return False
        last = text.buf.rfind(SEPARATOR, text.pos)
    region = text.buf[text.pos + 1:last]
    if _ARRAY_END.search(region):
        _slow_region(text, text.base + last + 1, on_event)
        return True
    wanted = _wanted_blocks(region)
    try:
        events = json.loads("[{" + "},{".join(wanted) + "}]") if wanted else ()
    except ValueError:
        _slow_region(text, text.base + last + 1, on_event)
        return True
    for event in events:
        on_event(event)
    text.events += region.count(SEPARATOR) + 1
    text.pos = last + 2  # past "},"; the next event's '{' follows
    return True


def _wanted_blocks(region: str) -> list[str]:
    """The blocks (text between separators) holding a marker, in order. Found with str.find, so the blocks
    without one (most of a trace) cost no Python work at all."""
    found: dict[int, int] = {}
    gap = len(SEPARATOR)
    for marker in _MARKERS:
        pos = region.find(marker)
        while pos >= 0:
            start = region.rfind(SEPARATOR, 0, pos)
            start = 0 if start < 0 else start + gap
            end = region.find(SEPARATOR, pos)
            end = len(region) if end < 0 else end
            found[start] = end
            pos = region.find(marker, end)
    return [region[start:found[start]] for start in sorted(found)]


def _slow_region(text: _Text, end: int, on_event) -> None:
    """Decode event by event up to file offset `end` (exclusive), or up to the end of the array."""
    while text.offset() < end:
        c = text.peek()
        if c == ",":
            text.pos += 1
            continue
        if c == "]":
            return
        event = text.value()
        text.events += 1
        if isinstance(event, dict):
            on_event(event)
