"""Text from a trace or a file name, made safe for one line of a terminal: control characters (newlines, ANSI
escapes), lone surrogates and other unprintable characters are written as Python escapes."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\ufeff]")


def _escape(m: re.Match) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value) -> str:
    """str(value) with every unsafe character escaped (newlines too)."""
    text = str(value)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def lines(text: str) -> str:
    """Multi-line output of our own: escape unsafe characters but keep the newlines."""
    return "\n".join(shown(line) for line in text.split("\n"))
