"""The text of a trace file, plain or gzip, in chunks. A gzip stream cut short yields all it holds, so the JSON
parser sees where the text stops (the reader calls that truncated)."""

from __future__ import annotations

import codecs
import zlib
from pathlib import Path

from ..errors import UsageError


class Source:
    """Text from a plain or gzip file, read in chunks."""

    def __init__(self, path: Path):
        try:
            self.raw = path.open("rb")
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
        self.path = path
        self.gzip = zlib.decompressobj(16 + zlib.MAX_WBITS) if self.raw.peek(2)[:2] == b"\x1f\x8b" else None
        self.utf8 = codecs.getincrementaldecoder("utf-8")()

    def read(self, size: int) -> str:
        """About `size` characters (a little more from gzip); '' at the end."""
        parts, count = [], 0
        while count < size:
            data = self.raw.read(size - count if self.gzip is None else 1 << 16)
            final = not data
            if self.gzip is not None:
                data = self._inflate(data)
            try:
                text = self.utf8.decode(data, final=final)
            except UnicodeDecodeError:
                raise UsageError(f"{self.path}: not UTF-8 text, so not a JSON trace") from None
            parts.append(text)
            count += len(text)
            if final:
                break
        return "".join(parts)

    def _inflate(self, data: bytes) -> bytes:
        try:
            if not data:
                return self.gzip.flush()
            out = self.gzip.decompress(data)
            while self.gzip.eof and self.gzip.unused_data:  # a further gzip member
                rest = self.gzip.unused_data
                self.gzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out += self.gzip.decompress(rest)
            return out
        except zlib.error as exc:
            raise UsageError(f"{self.path}: not a readable gzip file ({exc})") from None

    def close(self) -> None:
        self.raw.close()
