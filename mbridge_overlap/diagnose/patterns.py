"""The line patterns diagnose reads besides the catalog's messages: Bridge's iteration record and the exception line
that ends a traceback. scan.py reads lines with them; shapes.py decides by them which lines need reading."""

from __future__ import annotations

import re

ITERATION_PHRASE = "elapsed time per iteration"
# Bridge's training_log line: `iteration N/ M | ... | elapsed time per iteration (ms): X | ...`, found as the regex
# _ITER_HEAD, then anything but a newline, then _ITER_MS would find it (iteration_ms_span), in linear time
_ITER_HEAD = re.compile(r"\biteration\s+(\d{1,12})/\s*(\d{1,12})\s*\|")
_ITER_MS = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9]{1,12}(?:\.[0-9]*)?)(?=\s|\||$)")  # a whole number
# the line that ends a traceback: an exception's name at the start (after a rank prefix), then its message or nothing
EXCEPTION = re.compile(r"^\s*(?:\[rank\d+\]:\s*)?(?:[\w.]+\.)?(\w*(?:Error|Exception|Interrupt)\w*)(?::|\s*$)")
# what stops a run from outside its code: an interrupt, a signal, the process's exit, memory running out. A traceback
# it ends shows where the run was, not what went wrong there
STOPPED = re.compile(r"^(?:KeyboardInterrupt|SystemExit|SignalException|\w*OutOfMemoryError)$")


def iteration_ms_span(text: str) -> tuple[int, int] | None:
    """Where the ms of the first iteration record in text lie: the first _ITER_MS after the leftmost _ITER_HEAD that
    one follows on its line (the regex HEAD.*?MS, which backtracks quadratically over a line that repeats the head)."""
    pos = 0
    for m in _ITER_MS.finditer(text):
        nl = text.rfind("\n", pos, m.start())
        h = _ITER_HEAD.search(text, pos, m.start())
        while h is not None and h.end() <= nl:  # on an earlier line than the ms
            h = _ITER_HEAD.search(text, h.start() + 1, m.start())
        if h is not None:
            return m.span(1)
        pos = m.start()  # (no head can hold the ms text: every head before it has been seen)
    return None


# A line that is Python string literals only (adjacent ones, any prefix), as source quoted in a log or a thread shows
# an assert's or a raise's message: `end` is a comma or closing bracket after them, which ends what Python joins
LITERAL = re.compile(r"""^\s*(?:[rRuUfF]{0,2}(?:"(?:[^"\\\n]|\\.){0,2000}"|'(?:[^'\\\n]|\\.){0,2000}')\s*)+(?P<end>[,)\]]*)\s*$""")
