"""A window over a trace file's text, a few chunks long, and the JSON values decoded from it.

The C JSON scanner decodes straight from the window; a value the window's end cuts is decoded again once more
text is in (the window then grows by doubling, so a long value costs O(1) passes). Errors name the byte offset in
the file's JSON text (decompressed, for gzip); a file that ends inside a value raises Truncated.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.scanner import make_scanner
from pathlib import Path

from ..errors import UsageError
from ..safeio import esc, shown
from .source import Source

CHUNK_CHARS = 1 << 20
MAX_VALUE_CHARS = 64 << 20  # one event or metadata value larger than this means the JSON is broken
_NEAR_END = 16  # a decode error this close to the window's end may be a value cut by the window
_WS = re.compile(r"[ \t\n\r]*")
_CUT_TOKEN = re.compile(r"[-+.\w\\]*[ \t\n\r]*\Z")  # what may be left of a number, literal or escape cut at the end


class Truncated(Exception):
    """The file ended inside the trace; what was read so far has been handed on already."""

    events = 0


@dataclass
class Stats:
    events: int = 0  # values in the event array, dict or not
    non_finite: int = 0  # NaN, Infinity and -Infinity literals decoded anywhere in the file


class Window:
    """A window over the decoded text: buf[pos:] is not consumed yet; `byte_base` is the file's byte offset of
    buf[0] (the decompressed JSON text's, for gzip)."""

    def __init__(self, source: Source, path: Path, stats: Stats):
        self.source, self.path, self.stats = source, path, stats
        self.buf, self.pos, self.byte_base, self.eof = "", 0, 0, False
        self.chars_base = 0  # characters before buf[0]
        self.scan = make_scanner(json.JSONDecoder(parse_constant=_counter(stats)))
        # metadata (distributedInfo, ...) is small and read once: a key twice in one of its objects is refused, as the
        # second would silently replace the first (fuzzN N1: a pg_config entry's pg_desc, world_size)
        self.meta_scan = make_scanner(json.JSONDecoder(parse_constant=_counter(stats), object_pairs_hook=_unique))

    def fill(self, more: int = 0) -> bool:
        """Drop the consumed text and append at least `more` characters (a chunk); False at the end of the file."""
        if self.eof:
            return False
        more = max(more, CHUNK_CHARS)
        parts, count = [], 0
        while count < more:
            chunk = self.source.read(CHUNK_CHARS)
            if not chunk:
                self.eof = True
                break
            parts.append(chunk)
            count += len(chunk)
        self.drop()
        self.buf += parts[0] if len(parts) == 1 else "".join(parts)
        return count > 0

    def byte_offset(self, index: int) -> int:
        if self.buf.isascii():  # O(1): CPython knows
            return self.byte_base + index
        return self.byte_base + len(self.buf[:index].encode("utf-8"))

    def drop(self) -> None:
        """Drop the consumed text (a decode error's message then counts lines over the rest only)."""
        consumed = self.buf[: self.pos]
        self.byte_base += len(consumed) if consumed.isascii() else len(consumed.encode("utf-8"))
        self.chars_base += self.pos
        self.buf, self.pos = self.buf[self.pos:], 0

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the file), consuming the blanks."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def decode(self, scan=None):
        """(value, end) of the JSON value at pos, reading more while the window may have cut it."""
        scan = scan or self.scan
        constants = self.stats.non_finite
        while True:
            buf, pos = self.buf, self.pos
            self.stats.non_finite = constants  # a try the window cut counted them already
            try:
                value, end = scan(buf, pos)
                if end < len(buf) or self.eof:  # a number at the very end may go on in the next chunk
                    return value, end
                at, problem = end, "value cut by the end of the window"
            except StopIteration as exc:  # no value where one must be; exc.value is where (maybe nested)
                at = exc.value if isinstance(exc.value, int) else pos
                problem = _no_value(buf, at)
            except json.JSONDecodeError as exc:
                at, problem = exc.pos, exc.msg[:1].lower() + exc.msg[1:].removesuffix(" at")  # "... character at"
                if exc.msg.startswith("Unterminated string"):
                    at = len(buf)  # it runs to the end of what we have
            except DuplicateKey as exc:
                raise self.beyond(pos, f"the key {shown(exc.args[0], 40)} twice in one object: the second would silently "
                                       "replace the first") from None
            except RecursionError:
                raise self.beyond(pos, "JSON nested deeper than Python's JSON reader allows (no profiler writes that)") from None
            except ValueError as exc:  # int(): more digits than sys.get_int_max_str_digits()
                raise self.beyond(pos, f"a number too long to read ({str(exc).split(':')[0]})") from None
            if self.eof:
                if at >= len(buf) or _CUT_TOKEN.match(buf, at):
                    raise Truncated()
                raise self.error(at, problem)
            if at < len(buf) - _NEAR_END:
                raise self.error(at, problem)
            if len(buf) - pos > MAX_VALUE_CHARS:
                raise self.error(pos, f"one value longer than {MAX_VALUE_CHARS >> 20} MB of text")
            more, buf = len(buf) - pos, None  # (buf: let the old window go as the new one is made)
            self.fill(more)  # doubling: a long value is re-scanned O(1) times

    def value(self, meta: bool = False):
        if not self.peek():
            raise Truncated()
        value, self.pos = self.decode(self.meta_scan if meta else None)
        return value

    def expect(self, token: str, after: str) -> None:
        found = self.peek()
        if found != token:
            if not found:
                raise Truncated()
            raise self.error(self.pos, f"expected '{token}' {after}, found {char(found)}")
        self.pos += 1

    def error(self, index: int, problem: str) -> UsageError:
        return UsageError(f"{esc(self.path)}: not valid JSON at byte {self.byte_offset(index):,}: {problem}")

    def beyond(self, index: int, problem: str) -> UsageError:
        """Valid JSON, but beyond what a trace holds or Python reads."""
        return UsageError(f"{esc(self.path)}: the value at byte {self.byte_offset(index):,}: {problem}")


class DuplicateKey(ValueError):
    pass


def _unique(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def _counter(stats: Stats):
    """parse_constant for the scanner: count NaN / Infinity / -Infinity (bound to stats, not to the window, so
    that no reference cycle keeps a window alive after the read)."""

    def constant(name: str) -> float:
        stats.non_finite += 1
        return float(name)

    return constant


def char(c: str) -> str:
    """A character found where it should not be, for a message."""
    return "the end of the file" if not c else shown(c)


def _no_value(buf: str, pos: int) -> str:
    return "expected a JSON value, found " + char(buf[pos:pos + 1])
