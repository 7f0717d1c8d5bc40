"""Messages worded otherwise than the catalog's release words them: another release (a word added or dropped, clauses
moved, values written another way), a framework's copy of Megatron-LM's checks. An error line that no catalog pattern
matches is compared with the catalog's error messages word by word.

Each message's words (its literal text, lower-cased, field values left out) are weighted by how rare they are in the
catalog (inverse document frequency), so that "sequence", "expert" and "parallelism" count and "the", "must" hardly
do. A line matches a message when the words they share carry at least THRESHOLD of the message's weight, at least
MIN_SHARED distinctive words are shared, and the line holds no more than LONGER times the message's words (a log line
that merely mentions several of them is not the message). Only lines that read as an error are compared
(ERRORISH), and only messages of the overlap topics with enough words of their own (MIN_WORDS).

Words alone are not a message (fresh16 F16-2: a thread's sentence naming "--overlap-grad-reduce --overlap-param-gather"
matched "Must use --overlap-param-gather with --overlap-grad-reduce"): a line without an exception's, an assert's or a
log level's mark (MARKER) matches only where it reads as the message (Fuzzy.ordered: the shared words in the message's
order carry THRESHOLD of its weight, and nothing but stop words, ranks, times and level names stand before them). And
a message raised only while a setting is off (required(): an assert of `args.Y`, a raise under `X and not Y`) is not a
line that shows that setting on (contradicted(): `Y=true`, `Y: true`, Megatron-LM's arguments dump, a command line's
`--a --y`); Scan applies this to exact matches too, to the line beside the message.

A short message (fewer than MIN_WORDS words) is matched another way: a line whose words end with all of the message's
words, in order, identifiers read as words (`ub_manager` is "ub manager"), case, punctuation and the fillers of
FILLER left out ("ub_manager not initialized" is TE's "UB manager is not initialized."), where the line holds at most
MAX_LEAD words before them, each a rank, a time, an exception's or a level's name (_LEAD), and no other message of the
catalog has those words or ends with them. It needs no
ERRORISH word: the line is the whole message.

The threshold was set on the development part of tests/data/diagnose_corpus/corpus.yaml and the project's own
logs: no negative control matches at it (tests/test_diagnose_corpus.py holds the dev part to that).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache

from . import causes
from .messages import FIELD, LEAD, Catalog, Entry

WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]+")
ERRORISH = re.compile(r"Error\b|Exception\b|[Aa]ssert|\bmust\b|\bshould\b|\brequires?\b|not supported|\bcannot\b|\binvalid\b|"
                      r"\bexpected\b|\bincompatible\b|(?-i:\bNaN\b|\bInf\b)|result (?:nan|inf)\b", re.I)
# and "only ... with", as two searches (fuzzJ J3: "\bonly\b.*\bwith\b" rescanned the line for every "only")
_ONLY, _WITH = re.compile(r"\bonly\b", re.I), re.compile(r"\bwith\b", re.I)
# every ERRORISH alternative (and "only") holds one of these (lower-cased)
_KEYS = ("error", "exception", "assert", "must", "should", "require", "not supported", "cannot", "invalid", "expected",
         "only", "incompatible")
_CASED = ("NaN", "Inf", "result nan", "result inf")  # not INFO, nor an iteration line's "number of nan iterations"
STOP = frozenset("the a an and or of to in is be are for with when using it this that by on as at if not no do does".split())
THRESHOLD = 0.8
MIN_SHARED = 4
MIN_WORDS = 5
LONGER = 3.0
# words a paraphrase drops or adds without changing what a short message says
FILLER = frozenset("the a an is are was were be been has have".split())
SAME_MIN = 3  # a short message is matched by its words when it has at least this many (fillers left out)
MAX_LEAD = 4  # and the line holds at most this many words before them
_TOKEN = re.compile(r"[a-z0-9]+")
# a word before a short message that is no part of a sentence: a rank or time (digits), an exception's or a level's
# name (recheck59 AF1: "ONNX export of" and cuDNN's "FP4 input with" joined a longer sentence to the message); the
# exact matcher's rule for a message's start (messages.at_boundary) reads words by it too
_LEAD = LEAD


def words_of(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)} - STOP


class Fuzzy:
    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        entries = [e for e in catalog.entries if e.template and e.severity == "error" and causes.overlap_related(e)]
        self.words = {e.id: words_of(_literal(e.template)) for e in entries}
        self.words = {k: v for k, v in self.words.items() if len(v) >= MIN_WORDS}
        df = Counter(w for ws in self.words.values() for w in ws)
        n = max(len(self.words), 1)
        self.idf = {w: math.log(1 + n / c) for w, c in df.items()}
        self.index: dict = {}
        for eid, ws in self.words.items():
            for w in ws:
                self.index.setdefault(w, []).append(eid)

        # short messages without fields, by their words in order (same())
        by_words: dict = {}
        for e in catalog.entries:
            if (e.template and not e.fields and e.severity == "error" and causes.overlap_related(e)
                    and len(words_of(e.template)) < MIN_WORDS):
                key = tokens_of(e.template)
                if len(key) >= SAME_MIN:
                    by_words.setdefault(key, set()).add(e.id)
        # no other message of the catalog, of any topic, has those words or ends with them (recheck59 AF2: TE's "ONNX
        # export of quantized output is not supported" ends with the userbuffers "Quantized output is not supported")
        ends: dict = {}
        for e in catalog.entries:
            for n in {len(k) for k in by_words} if e.template else ():
                ends.setdefault(tokens_of(_literal(e.template))[-n:], set()).add(FIELD.sub("{}", e.template))
        self.same_words = {k: catalog.by_id(min(ids)) for k, ids in by_words.items()
                           if len(texts := {catalog.by_id(i).template for i in ids}) == 1 and ends[k] <= texts}
        self.same_lengths = sorted({len(k) for k in self.same_words})
        self.same_masked = {tuple(w.translate(_MASK) for w in k) for k in self.same_words}
        self._ordered: dict = {}  # message id -> ordered()'s words of it (_in_order)
        self._stops: dict = {}  # message id -> the stop words of its text (_own_stops)

    def same(self, text: str, masked: bool = False) -> Entry | None:
        """The short message whose words, in order, end this line (see the module's doc); with `masked`, whether a
        line of this shape (digits written 0) may be one (True or None)."""
        words = tokens_of(text)
        if not words or len(words) > MAX_LEAD + (self.same_lengths[-1] if self.same_lengths else 0):
            return None
        for n in self.same_lengths:
            if n <= len(words) <= n + MAX_LEAD and all(_LEAD.search(w) for w in words[:-n]):
                key = tuple(words[-n:])
                if masked:
                    if tuple(w.translate(_MASK) for w in key) in self.same_masked:
                        return True
                elif key in self.same_words:
                    return self.same_words[key]
        return None

    def match(self, text: str) -> tuple[Entry, float] | None:
        """The catalog message this error line is, worded otherwise, and how close (0..1); None when none is close.
        A line without an exception's, an assert's or a log level's mark (MARKER) must read as the message (ordered():
        its words in the message's order, from the line's start); a message whose raise condition the line shows
        unmet (contradicted()) is not the line's."""
        short = self.same(text)
        if short is not None:
            return short, 1.0
        if not errorish(text):
            return None
        line = words_of(text)
        shared = Counter(eid for w in line for eid in self.index.get(w, ()))
        marked = None
        found = []
        for eid, count in shared.items():
            if count < MIN_SHARED:
                continue
            ws = self.words[eid]
            if len(line) > LONGER * len(ws) + 8:
                continue
            score = sum(self.idf[w] for w in ws & line) / sum(self.idf[w] for w in ws)
            if score >= THRESHOLD:
                found.append((score, eid))
        for score, eid in sorted(found, key=lambda x: (-x[0], x[1])):
            if marked is None:
                marked = MARKER.search(text) is not None
            if not marked and not self.ordered(eid, text):
                continue  # prose that names the message's words (fresh16 F16-2): not the message
            entry = self.catalog.by_id(eid)
            if contradicted(entry, text):
                continue
            return entry, round(score, 3)
        return None

    def ordered(self, eid: str, text: str) -> bool:
        """Whether a line reads as the message: the message's words, in its order, carry THRESHOLD of its weight
        (a weighted longest common subsequence), and the line holds before the first of them only words LEAD takes
        (a rank, a time, an exception's or a level's name) and the message's own stop words (its "Using" or "the").
        Every word before them counts, one letter long too (_lead_ok: fuzzY Y2-3, "I use --overlap-param-gather with
        --overlap-grad-reduce ..." is a sentence, not the message)."""
        msg, weight, total = self._in_order(eid)
        seq = [w.lower() for w in WORD.findall(text)]
        if len(seq) > LONGER * len(msg) + 8 or not total:
            return False
        # best[j][i]: (weight, first line index) of the best alignment of msg[:i] with seq[:j]
        prev = [(0.0, None)] * (len(msg) + 1)
        for j, w in enumerate(seq):
            cur = [(0.0, None)]
            for i, m in enumerate(msg):
                options = [prev[i + 1], cur[i]]
                if m == w:
                    got, first = prev[i]
                    options.append((got + weight[i], j if first is None else first))
                cur.append(max(options, key=lambda x: (x[0], -(x[1] if x[1] is not None else 1 << 30))))
            prev = cur
        got, first = prev[-1]
        if got < THRESHOLD * total or first is None:
            return False
        return _lead_ok(text[:_nth_word(text, first)], self._own_stops(eid))

    def _own_stops(self, eid: str) -> frozenset:
        got = self._stops.get(eid)
        if got is None:
            words = {w.lower() for w in _LEAD_WORD.findall(_literal(self.catalog.by_id(eid).template))}
            got = self._stops[eid] = frozenset(words & STOP)
        return got

    def _in_order(self, eid: str) -> tuple[list, list, float]:
        """(the message's words in order, stop words left out; each one's weight; the weight of its distinct words),
        for ordered(): worked out once a message, where first needed."""
        got = self._ordered.get(eid)
        if got is None:
            msg = [w.lower() for w in WORD.findall(_literal(self.catalog.by_id(eid).template)) if w.lower() not in STOP]
            weight = [self.idf.get(w, 0.0) for w in msg]
            total = sum(weight[i] for i, w in enumerate(msg) if w not in msg[:i])
            got = self._ordered[eid] = (msg, weight, total)
        return got


# an exception's, an assert's or a log level's mark on a line: it reports an error, whatever order its words are in
MARKER = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning)\b|\bassert\b|\bAssertion\b|\b(?:ERROR|WARNING|WARN|CRITICAL|FATAL)\b"
                    r"|\[NeMo [EWC] |(?:^|\s)[EWF]\d{4} \d\d:")


# every word of a line's lead, one letter long too ("I", "a"), not a letter glued to digits (a time's T or Z)
_LEAD_WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9_]*")
_LEVEL_LETTERS = frozenset("ewi")  # LEAD's level letters (NeMo's `[NeMo W 2025-...`, glog's): a prefix's where a time follows
_DIGIT = re.compile(r"\d")


def _lead_ok(lead: str, own_stops: frozenset) -> bool:
    """Whether the words before a line's first word of the message are a prefix's (a rank, a time, an exception's or a
    level's name: LEAD) or the message's own stop words: a one-letter level name only where a time or a rank follows it
    in the lead (the pronoun "I" is no NeMo level letter), another stop word only where the message has it ("a", "it",
    "this" start a sentence that quotes the message)."""
    for m in _LEAD_WORD.finditer(lead):
        w = m[0].lower()
        if w in _LEVEL_LETTERS:
            if _DIGIT.search(lead, m.end()) is None:
                return False
        elif w in STOP:
            if w not in own_stops:
                return False
        elif not _LEAD.search(w):
            return False
    return True


def _nth_word(text: str, n: int) -> int:
    """Where the n-th word (WORD) of text starts."""
    for i, m in enumerate(WORD.finditer(text)):
        if i == n:
            return m.start()
    return len(text)


# A setting shown on: `name=true`, `name: true`, Megatron-LM's arguments dump (`name ...... True`), or a command
# line's flag beside another flag (`--a --name`); not a message's own "use --name".
_ON = r"(?:[Tt]rue|TRUE|1|[Yy]es)\b"


@lru_cache(maxsize=512)
def _shown_on(name: str):
    flag = re.escape("--" + name.replace("_", "-"))
    key = re.escape(name)
    return re.compile(rf"(?<![\w-]){key}[\"']?\s*[=:]\s*[\"']?{_ON}|(?<![\w-]){key} \.{{3,}} {_ON}"
                      rf"|--[A-Za-z][\w-]*\s+{flag}(?![\w-])|(?<![\w-]){flag}\s+--[A-Za-z]")


def required(entry: Entry) -> tuple:
    """The settings a message is raised without: the names its assert requires (a condition `args.Y`, or one of an
    `or` of such: `not args.X or args.Y`), or that its raise's innermost branch tests false (`X and not Y`). The
    message is raised only while each of them is off."""
    if entry.kind not in ("assert", "raise"):
        return ()
    return _required(entry.kind, entry.condition, entry.branch[-1] if entry.branch else None)


@lru_cache(maxsize=4096)
def _required(kind: str, condition: str | None, branch: str | None) -> tuple:
    import ast

    def name(node) -> str | None:
        if isinstance(node, ast.Attribute):
            return node.attr
        return node.id if isinstance(node, ast.Name) else None

    def parse(code: str):
        try:
            return ast.parse(code, mode="eval").body
        except (SyntaxError, ValueError):
            return None

    out = []
    if kind == "assert" and condition and (node := parse(condition)) is not None:
        terms_ = node.values if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) else [node]
        out = [n for t in terms_ if (n := name(t))]
    elif kind == "raise" and branch and (node := parse(branch)) is not None:
        terms_ = node.values if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) else [node]
        out = [n for t in terms_ if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and (n := name(t.operand))]
    return tuple(n for n in out if "_" in n and n.islower())  # a setting's name, not a local (`ok`) nor HAVE_TE


def contradicted(entry: Entry, text: str) -> str | None:
    """The setting a line shows on that the message is raised only without (required()): the line is not that
    message (fresh16 F16-2: "Must use --overlap-param-gather with --overlap-grad-reduce" is raised when
    overlap_grad_reduce is off; a text running `--overlap-grad-reduce --overlap-param-gather` has it on)."""
    for name in required(entry):
        rx = _shown_on(name)
        if rx.search(text) and not (entry.template and rx.search(entry.template)):
            return name
    return None


def errorish(text: str) -> bool:
    """Whether a line reads as an error (ERRORISH): only such lines are compared. Substrings first: most lines have
    none."""
    lower = text.lower()
    if not (any(k in lower for k in _KEYS) or any(k in text for k in _CASED)):
        return False
    if ERRORISH.search(text) is not None:
        return True
    only = _ONLY.search(text)
    return only is not None and _WITH.search(text, only.end()) is not None


_MASK = str.maketrans("0123456789", "0000000000")


def tokens_of(text: str) -> tuple:
    """A text's words in order, lower-cased, identifiers split at their underscores, fillers (FILLER) left out."""
    return tuple(w for w in _TOKEN.findall(text.lower()) if w not in FILLER)


def _literal(template: str) -> str:
    """The message's own words: its {field} placeholders left out."""
    return FIELD.sub(" ", template)


@lru_cache(maxsize=8)
def for_catalog(catalog: Catalog) -> Fuzzy:
    return Fuzzy(catalog)
