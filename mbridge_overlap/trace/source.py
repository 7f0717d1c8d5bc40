"""The text of a trace file, plain or gzip, in chunks. A gzip stream cut short yields all it holds, so the JSON
reader sees where the text stops (and calls that truncated). Each read inflates at most about `size` characters,
and a gzip bomb is refused (safeio.check_inflation)."""

from __future__ import annotations

import codecs
import os
import zlib
from pathlib import Path

from ..errors import UsageError
from ..safeio import check_inflation, compressed_otherwise, esc, open_input

# A trace on disk may be large (a long multi-GPU capture is gigabytes of JSON): the reader streams it, so the limit
# only stops a file that cannot be a trace; a gzip file's text is limited by how far it inflates.
MAX_TRACE_BYTES = 64 << 30

_GZIP = 16 + zlib.MAX_WBITS
_RAW_READ = 1 << 16
CUT_CHARACTER = "\ufffd"  # stands for a UTF-8 sequence the end of the file cut


class Source:
    """Text from a plain or gzip file, read in chunks."""

    def __init__(self, path: Path):
        self.raw = os.fdopen(open_input(path, MAX_TRACE_BYTES), "rb")
        try:
            first = self.raw.peek(6)[:6]
        except OSError as exc:
            self.raw.close()
            raise UsageError(f"{esc(path)}: cannot read ({esc(exc.strerror or exc)})") from None
        packed, magic = compressed_otherwise(first), first[:2]
        if packed:  # (fuzzR R2: "not UTF-8 text" said of a zstd trace)
            self.raw.close()
            raise UsageError(f"{esc(path)}: {packed} data: decompress it first (trace reads plain and gzip traces)")
        self.path = path
        self.gzip = zlib.decompressobj(_GZIP) if magic == b"\x1f\x8b" else None
        self.pending = b""  # compressed input not inflated yet
        self.compressed = self.inflated = 0  # gzip: the bytes read from the file, and what they inflated to
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.offset = 0  # bytes of text handed to the decoder so far

    def expected_chars(self) -> int:
        """About how many characters the text has: the file's size, or for gzip the size its trailer records
        (modulo 4 GiB, of the last member); 0 where unknown. An estimate: it decides speed, never a result."""
        try:
            size = os.fstat(self.raw.fileno()).st_size
            if self.gzip is None:
                return size
            return int.from_bytes(os.pread(self.raw.fileno(), 4, size - 4), "little") if size >= 18 else 0
        except (OSError, ValueError):  # a pipe, or no pread
            return 0

    def read(self, size: int) -> str:
        """About `size` characters; '' at the end."""
        parts, count = [], 0
        while count < size:
            data, final = self._bytes(size - count)
            parts.append(self._decode(data))
            count += len(parts[-1])
            self.offset += len(data)
            if final:
                try:
                    self.utf8.decode(b"", final=True)
                except UnicodeDecodeError:  # cut inside a character: the JSON reader sees a cut there
                    parts.append(CUT_CHARACTER)
                    self.utf8.reset()
                break
        return "".join(parts)

    def _decode(self, data: bytes) -> str:
        try:
            return self.utf8.decode(data)
        except UnicodeDecodeError as exc:
            where = max(0, self.offset + exc.start - len(exc.object) + len(data))
            raise UsageError(f"{esc(self.path)}: not UTF-8 text (byte {where:,}), so not a JSON trace") from None

    def _bytes(self, size: int) -> tuple[bytes, bool]:
        """Up to `size` bytes of the file's text, and whether it has ended."""
        try:
            if self.gzip is None:
                data = self.raw.read(size)
                return data, not data
            return self._inflate(size)
        except OSError as exc:
            raise UsageError(f"{esc(self.path)}: cannot read ({esc(exc.strerror or exc)})") from None

    def _inflate(self, size: int) -> tuple[bytes, bool]:
        try:
            while True:
                if self.gzip.eof:
                    # zeros after a member are padding, as Python's gzip module (and so HTA) reads them
                    rest = (self.gzip.unused_data + self.pending).lstrip(b"\0")
                    self.pending = b""
                    while not rest:
                        rest = self._raw(_RAW_READ)
                        if not rest:
                            return b"", True
                        rest = rest.lstrip(b"\0")
                    self.gzip = zlib.decompressobj(_GZIP)  # a further gzip member
                    self.pending = rest
                if not self.pending:
                    self.pending = self._raw(_RAW_READ)
                    if not self.pending:
                        return self.gzip.flush(), True  # cut short: all it holds
                out = self.gzip.decompress(self.pending, size)
                self.pending = self.gzip.unconsumed_tail
                if out:
                    self.inflated += len(out)
                    check_inflation(self.path, self.inflated, self.compressed)
                    return out, False
        except zlib.error as exc:
            raise UsageError(f"{esc(self.path)}: not a readable gzip file ({exc})") from None

    def _raw(self, size: int) -> bytes:
        data = self.raw.read(size)
        self.compressed += len(data)
        return data

    def close(self) -> None:
        self.raw.close()
