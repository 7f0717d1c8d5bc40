"""The prefilter of `diagnose`: what a log line can hold, decided once per shape instead of once per line.

A line's shape is the line with every ASCII digit written as 0 (one bytes.translate of a whole block of lines). A
training log repeats a few dozen shapes millions of times: iteration records, NCCL INFO lines, timers. What the scan
looks for is decided the same way for every line of one shape wherever its test does not tell one digit from
another: the anchors are looked up with their digits masked (a superset of the real lookup), a message without digits
in its literal text is matched on the shape itself, a native regex only where no part of it tells digits apart
(_digit_blind). Where a test does (a message about fp8 or bf16, a regex with [1-9]), every shape that shows its
pieces is hot. So a shape is read once (`Shapes.of`) and told:

* hot: some line of this shape may be a catalog message, a traceback line (either syntax), an exception, an error the fuzzy matcher
  compares, the configuration summary's title, or a line too long to judge: every such line is read in full;
* literal: the line is Python string literals only; scan reads it in full where the line before it opens a call or a
  parenthesis (ends with "(": `assert cond, (`, `raise ValueError(`, `logger.warning(`), since a run of adjacent
  literals there is the one message Python joins; a literal line anywhere else (a list of strings, pprint's output,
  quoted samples) stays on the fast path (fuzzY Y2-1);
* iteration: where in the line Bridge's iteration record puts the ms per iteration (a slice of the line: the digits
  differ, their places do not), or None;
* rank: where the launcher's prefix puts the rank (a slice, read with int()), None when the line names none (its
  file's rank then), or PARSE when only reading the line tells.

Lines of no such shape are counted and never decoded. tests/test_diagnose_blocks.py holds the result equal to reading
every line, on every log of the test data and on lines whose digits are changed at random.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from . import frames, fuzzy, patterns
from .messages import MAX_LINE_CHARS, MIN_CUT_CHARS, Catalog, Group, _words, clean, parse_condensed, pieces

try:
    from re import _parser as _sre_parse
except ImportError:  # Python 3.10
    import sre_parse as _sre_parse
from .reader import prefix_of, split_prefix

MASK = bytes.maketrans(b"0123456789", b"0000000000")
_STR_MASK = str.maketrans("0123456789", "0000000000")
PARSE = "parse"
MAX_SHAPES = 65_536  # shapes remembered; past it the memory is cleared (a log of unique lines costs a verdict each)
MAX_SHAPE_BYTES = 64 << 20


@dataclass(frozen=True)
class Shape:
    hot: bool
    iteration: tuple | None = None  # (start, end) of the ms in the line's bytes
    rank: object = None  # None | PARSE | (start, end, "" or "local ")
    literal: bool = False  # a line of Python string literals only: read in full only after a line ending with "("


COLD = Shape(False)


def mask(text: str) -> str:
    return text.translate(_STR_MASK)


@lru_cache(maxsize=4)
def for_catalog(catalog: Catalog, title: str | None) -> "Shapes":
    """The Shapes of a catalog, shared by every scan of this process (what a shape holds does not change)."""
    return Shapes(catalog, title)


def title_of(summary) -> str | None:
    """The configuration summary's title, when the scan collects the summary."""
    if summary is None:
        return None
    from .summary import TITLE

    return TITLE


def rank_of(raw: bytes, rule, path_rank: str | None) -> str | None:
    """A line's rank by its shape's rule (split_prefix's answer, read from the rule's slice)."""
    if rule == PARSE:
        rank, _ = split_prefix(raw.decode("utf-8", "replace"))
        return rank if rank is not None else path_rank
    a, b, label = rule
    return f"{label}{int(raw[a:b])}"


class Shapes:
    """What the lines of each shape can hold, for one catalog (and whether the summary's title is looked for)."""

    def __init__(self, catalog: Catalog, title: str | None):
        index, contains = catalog.finders()
        self.catalog = catalog
        self.anchors = _masked(index)  # masked anchor word -> the matchers it finds
        self.contains = _masked(contains)  # masked contains key -> the same
        self._tests: dict = {}  # id(matcher) -> its test (_test), made when a shape first shows its key
        self.title = mask(title) if title else None
        self.known: dict[bytes, Shape] = {}
        self._bytes = 0

    def of(self, shapes) -> dict:
        """Shape -> what it can hold, for the distinct shapes given; cold shapes included."""
        known = self.known
        new = [s for s in shapes if s not in known]
        if new:
            if len(known) + len(new) > MAX_SHAPES or self._bytes > MAX_SHAPE_BYTES:
                kept = {s: known[s] for s in shapes if s in known}  # the caller reads every shape it gave
                known.clear()
                known.update(kept)
                self._bytes = sum(map(len, kept))
            for s in new:
                known[s] = self._judge(s)
                self._bytes += len(s)
        return known

    def _judge(self, shape: bytes) -> Shape:
        if len(shape) > MAX_LINE_CHARS:
            return Shape(True)
        line = shape.decode("utf-8", "replace")
        rank, text = _split(line)
        literal = patterns.LITERAL.match(text) is not None or patterns.LITERAL.match(clean(text)) is not None
        if self._hot(text):
            return Shape(True, rank=rank, literal=literal)
        iteration = None
        if patterns.ITERATION_PHRASE in text:
            iteration = _iteration_span(shape, line, text)
            if iteration is None:  # a record the slice cannot read (ANSI codes, other scripts): read in full
                return Shape(True, rank=rank)
        if iteration is None and rank is None and not literal:
            return COLD
        return Shape(False, iteration, rank, literal)

    def _test(self, m):
        test = self._tests.get(id(m))
        if test is None:
            test = self._tests[id(m)] = _test(m)
        return test

    def _hot(self, text: str) -> bool:
        cleaned = clean(text)
        if self.title is not None and cleaned.startswith(self.title):
            return True
        if 'File "' in text or "Traceback (most recent call last)" in text:
            return True
        if ".py:" in text and parse_condensed(text) is not None:  # a frame in the second syntax (rich's, a condensed chain's)
            return True
        if text.strip() in frames.TORCH_P2P_CODE:  # torch's isend / irecv code line without its frame line
            return True
        found = [self.anchors[k] for k in set(pieces(text)).union(pieces(cleaned)) if k in self.anchors]
        found += [ms for k, ms in self.contains.items() if k in text or k in cleaned]
        if any(self._test(m)(t) for ms in found for m in ms for t in {text, cleaned}):
            return True
        return (patterns.EXCEPTION.match(cleaned) is not None or fuzzy.errorish(cleaned)
                or fuzzy.for_catalog(self.catalog).same(cleaned, masked=True) is not None)


def _masked(finders: dict) -> dict:
    out: dict = {}
    for key, matchers in finders.items():
        out.setdefault(mask(key), []).extend(matchers)
    return out


def _test(m):
    """A test of a shape for one message: True when some line of that shape may match it, whole or cut off.

    A message whose literal text holds no digit is matched on the shape as on any of its lines: its literal pieces
    sit where they sit in the line, and its fields (\\d+, .*?, floats) take a 0 wherever they take a digit. A message
    with digits in its literal text (fp8, bf16) may sit elsewhere in the shape: any shape showing its pieces up to
    where a cut-off line must reach is hot. A native regex is run on the shape when no part of it tells one digit
    from another, else every shape showing its anchor is hot."""
    if m.tokens is None:
        return (lambda t: m.rx.search(t) is not None) if _digit_blind(m.rx.pattern) else (lambda t: True)
    literals = [t for t in m.tokens if not isinstance(t, Group)]
    if not any(c.isdigit() for t in literals for c in t):
        return lambda t: m.search(t) is not None or (m.anchor is not None and m.cut(t) is not None)
    need = max(MIN_CUT_CHARS, m.anchor_end)
    pieces = [mask(w) for w, end, _ in _words(m.tokens, glued_start=False) if end <= need] or [mask(m.anchor or "")]
    return lambda t: all(p in t for p in pieces)


def _digit_blind(pattern: str) -> bool:
    """Whether a regex matches a text exactly when it matches the text with its digits written as 0: no digit in its
    literals, and every class it uses holds all ten digits or none."""
    try:
        tree = _sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - a pattern this cannot read is not trusted
        return False
    return _blind(tree)


def _blind(items) -> bool:
    for op, arg in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL") and chr(arg).isdigit():
            return False
        if name == "IN":
            digits = {d for d in "0123456789" if _in_class(arg, d)}
            if digits and len(digits) < 10:
                return False
        elif name in ("SUBPATTERN",):
            if not _blind(arg[-1]):
                return False
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if not _blind(arg[2]):
                return False
        elif name == "BRANCH":
            if not all(_blind(b) for b in arg[1]):
                return False
        elif name in ("ASSERT", "ASSERT_NOT"):
            if not _blind(arg[1]):
                return False
        elif name in ("GROUPREF_EXISTS", "ATOMIC_GROUP"):
            return False
    return True


def _in_class(items, ch: str) -> bool:
    """Whether a parsed character class [items] holds ch (ASCII digits only are asked)."""
    code = ord(ch)
    hit = False
    negate = False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            hit |= arg == code
        elif name == "RANGE":
            hit |= arg[0] <= code <= arg[1]
        elif name == "CATEGORY":
            hit |= str(arg) in ("CATEGORY_DIGIT", "CATEGORY_WORD", "CATEGORY_UNI_DIGIT", "CATEGORY_UNI_WORD",
                                "CATEGORY_NOT_SPACE", "CATEGORY_UNI_NOT_SPACE", "CATEGORY_NOT_LINEBREAK",
                                "CATEGORY_UNI_NOT_LINEBREAK")
        else:
            return True  # unknown: say it holds some digits only, which makes the pattern untrusted
    return hit != negate


def _split(line: str) -> tuple[object, str]:
    """(the rank rule, the text after the launcher's prefix) of a shape: reader.prefix_of's places; PARSE where the
    characters before the rank are not all ASCII (a character's place in the text is not its place in the bytes)."""
    span, label, start = prefix_of(line)
    if span is None:
        return None, line[start:]
    return ((*span, label) if line[:span[1]].isascii() else PARSE), line[start:]


def _iteration_span(shape: bytes, line: str, text: str) -> tuple | None:
    """Where the ms of the line's iteration record lie in its bytes; None when no record is read or its place in the
    bytes is not its place in the text (ANSI codes, a line end inside, characters outside ASCII)."""
    if "\x1b" in text or "\r" in text or not shape.isascii():
        return None
    span = patterns.iteration_ms_span(text)
    if span is None:
        return None
    offset = len(line) - len(text)
    return span[0] + offset, span[1] + offset
