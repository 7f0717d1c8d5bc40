"""Bridge's command line as Hydra and OmegaConf read it: a KEY=VALUE word split, its value typed (null, numbers,
bools, quoted texts, one-level lists, the {KEY:VALUE} word plan writes for comm_overlap) or refused in one line where
Hydra's grammar refuses it or where Bridge would evaluate it (sweeps, function calls, interpolations); a launch
variable's value as Bridge exports it. Each rule is held to Hydra's parser and OmegaConf in tier 2
(tests/bridge/test_hydra_quoting.py)."""

from __future__ import annotations

import math
import re

from .. import safeio
from ..errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs a cold start about 2 ms
    from typing import Any

_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*[ \t]*\(")  # int(1), glob(x): Hydra's grammar functions
# the rest of an unquoted value: escape runs (each unescaped to every other character), interpolations, and the
# characters Hydra's lexer takes outside quotes (VALUE_MODE's ID, UNQUOTED_CHAR, COLON, WS); anything else it refuses
# (one escape a token, and a backslash that escapes nothing apart: no two ways to read a text, which made the match
# exponential in a run of escapes before a refused character: fuzzQ Q1)
ESC = re.compile(r"\\[()\[\]{}:=, \t\\]")
_UNQUOTED = re.compile(r"(?:" + ESC.pattern + r"|\\(?![()\[\]{}:=, \t\\])|\$\{[^}]+\}|[A-Za-z0-9_/+.$%*@?|: \t-])*\Z")


class Key(str):
    """A command-line word's key with the prefix it was written with ("" bare, "+" or "++"): Bridge's Hydra overrides
    take each in its own way (Request.judge), so the prefix stays with the key through the request. A plain str key
    (the API's, a fix's) carries none and is taken as setting the field. `value`: its own word's value, which a later
    word on the key replaces in the overrides (Request.judge judges the word as written)."""

    prefix: str
    value: str | None

    def __new__(cls, key: str, prefix: str = "", value: str | None = None):
        out = super().__new__(cls, key)
        out.prefix, out.value = prefix, value
        return out

    def __reduce__(self):
        return Key, (str(self), self.prefix, self.value)


def prefixed(key: str) -> tuple[str, str]:
    """(Hydra's prefix, the key): '++model.x' -> ('++', 'model.x'); a Key gives its own prefix."""
    if isinstance(key, Key):
        return key.prefix, str(key)
    prefix = "++" if key.startswith("++") else "+" if key.startswith("+") else ""
    return prefix, key[len(prefix):]


def parse_override(text: str) -> tuple[str, str]:
    """Split `section.field=value` (a leading '+' or '++' as Hydra allows) into key and raw value; the key is a Key
    that keeps the prefix."""
    if text.startswith("~"):  # (fuzzA2: refused as "expected KEY=VALUE", or read as a home directory)
        raise UsageError(f"override {safeio.shown(text)}: a Hydra deletion (~KEY), which this skill does not apply: "
                         "leave out the word that sets the key (a config file's key: take it out of the file)")
    prefix = "++" if text.startswith("++") else "+" if text.startswith("+") else ""
    body = text[len(prefix):]
    key, sep, value = body.partition("=")
    if not sep or not key or " " in key.strip():
        raise UsageError(f"override {safeio.shown(text)}: expected KEY=VALUE, e.g. model.tensor_model_parallel_size=4")
    value = value.lstrip(" \t")
    if value[:1] in ("'", '"') and _BLANKS_AFTER_QUOTE.search(value):  # (fuzzQ Q6: Hydra's lexer refuses them)
        raise UsageError(f"override {safeio.shown(text)}: blanks after a quoted value are refused by Hydra's override "
                         "grammar (Bridge refuses the override): drop them")
    value = _trailing_dropped(value).strip("\r\n\f\v")
    return Key(key.strip(), prefix, value), value


_BLANKS_AFTER_QUOTE = re.compile(r"['\"][ \t]+\Z")


def merged(value: Any) -> bool:
    """A value Hydra's +KEY= merges into a held key (a list or a mapping), rather than refusing it."""
    return isinstance(value, (list, dict)) or isinstance(value, str) and value.strip()[:1] in ("[", "{")


def append_refused(word: str, name: str) -> UsageError:
    """Hydra's refusal of +KEY=VALUE where an item is already at KEY (its ConfigLoaderImpl._apply_overrides_to_config:
    OmegaConf.select is not None and the value is no dict or list)."""
    return UsageError(f"{safeio.shown(word)}: Bridge's Hydra overrides refuse it (Could not append to config. An item "
                      f"is already at '{safeio.esc(name)}'. Either remove + prefix: '{safeio.esc(word[1:])}' Or add a "
                      f"second + to add or override '{safeio.esc(name)}': '+{safeio.esc(word)}')")


MAX_LIST_DEPTH = 4  # lists in lists this skill reads (a layout of stages is two deep: fuzzV V2-4)


def value_of(key: str, text: str, depth: int = 0) -> Any:
    """A command-line value as Hydra types it for Bridge: null, a number or a bool, a quoted text, a list of such
    (lists nested, as Hydra's grammar takes them, up to MAX_LIST_DEPTH), or an unquoted text with its escapes undone;
    refused in one line where Hydra's grammar refuses it."""
    plain = text.strip()
    if plain[:1] in ("'", '"'):
        if not (len(plain) >= 2 and plain[-1] == plain[0] and _one_quoted(plain)):
            raise UsageError(f"{key}: {safeio.shown(plain)} is not one quoted value to Hydra (Bridge refuses the override)")
        return _interpolated(key, safeio.hydra_unquoted(plain))  # (as OmegaConf leaves it: \${ is the literal ${)
    if plain[:1] == "[":
        items = _items(plain[1:-1]) if plain.endswith("]") and len(plain) > 1 else None
        if items is None:
            raise UsageError(f"{key}: {safeio.shown(plain)} is not a list Hydra's grammar takes ([a,b], [[a,b],[c]]): "
                             "Bridge refuses the override")
        if depth >= MAX_LIST_DEPTH:
            raise UsageError(f"{key}: lists nested more than {MAX_LIST_DEPTH} deep, past what this skill reads")
        return [value_of(key, item, depth + 1) for item in items] if plain[1:-1].strip() else []
    if not plain:
        raise UsageError(f"{key}: an empty item is not a value Hydra takes (Bridge refuses the override)")
    if plain[:1] == "{":  # (fuzzT T3-6: it was said to be refused by Hydra, which takes it as a mapping)
        raise UsageError(f"{key}: {safeio.shown(plain)} is a mapping to Hydra, which this skill takes for comm_overlap "
                         "only: give the fields one by one (KEY.FIELD=VALUE), or quote it to give the text")
    if plain.lower() == "null":  # (Hydra's only null: ~ and none are not)
        return None
    if plain.lower() in ("true", "false"):
        return plain.lower() == "true"
    if safeio.HYDRA_INT.match(plain) or safeio.HYDRA_FLOAT.match(plain):
        return number(plain)
    if safeio.HYDRA_NOT_FINITE.match(plain):  # (recheck57 AD3: nan and inf are Hydra's floats)
        return float(plain)
    return _text(key, plain)


def _items(inner: str) -> list[str] | None:
    """A list's items: split at the commas outside quotes and nested lists that no backslash escapes (recheck57 AD5:
    ['x,y'] is one); None where its brackets do not pair (Hydra refuses it)."""
    items, start, quote, depth, i = [], 0, None, 0, 0
    while i < len(inner):
        c = inner[i]
        if c == "\\":
            i += 1
        elif quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[]":
            depth += 1 if c == "[" else -1
            if depth < 0:
                return None
        elif c == "," and not depth:
            items.append(inner[start:i])
            start = i + 1
        i += 1
    return None if depth else items + [inner[start:]]


def number(text: str):
    """A number Hydra reads, as its int or float."""
    return int(text.replace("_", "")) if safeio.HYDRA_INT.match(text) else float(text.replace("_", ""))


_DIGITS = 4300  # sys.get_int_max_str_digits()'s default, which Hydra's int() of a token meets


def command_line_value(key: str, text: str) -> str:
    """A command-line value as Hydra and OmegaConf leave it for Bridge, or refused in one line: a number past Hydra's
    digit limit, and for any key but a launch variable's (env_value reads those) a sweep, a function call, an
    interpolation or a malformed list or quote (fuzzR R7: model.cp_comm_type=p2p,a2a and model.fp8_recipe=${x} were
    answered; Bridge's parse_hydra_overrides refuses the first, OmegaConf resolves the second where Bridge runs)."""
    if not isinstance(text, str):
        return text
    digits = text.strip().lstrip("+-").replace("_", "")
    if len(digits) > _DIGITS and safeio.HYDRA_INT.match(text.strip()):  # (recheck55 AB9)
        raise UsageError(f"{key}: a number of {len(digits):,} digits, which Hydra refuses past {_DIGITS:,} (Python's "
                         "integer conversion limit): Bridge's overrides refuse it")
    if key.startswith("env_vars."):
        return text
    if live_interpolation(text):
        raise UsageError(f"{key}: {safeio.shown(text)} holds an OmegaConf interpolation, which Bridge resolves where it "
                         "runs and this skill does not: give the value itself")
    plain = text.strip()
    if plain[:1] in ("'", '"', "["):
        value_of(key, plain)  # refused where Hydra's grammar refuses it (fuzzS S2-2: '[p2p,a2a' was answered)
        return text
    if plain[:1] == "{":
        return text
    if _FUNCTION.match(plain):
        raise UsageError(f"{key}: {safeio.shown(plain)} is a Hydra function call, which Bridge evaluates and this skill "
                         "does not: give the value itself")
    if "," in ESC.sub("", plain):
        raise UsageError(f"{key}: {safeio.shown(plain)} is a sweep to Hydra, which Bridge's overrides refuse; a list is "
                         "written [a,b], a text with a comma quoted")
    return text


# trailing blanks Hydra drops: not an escaped one (`Ring\\ ` is "Ring ": fuzzQ Q3)
_BLANKS_AT_END = re.compile(r"[ \t]+\Z")


def _trailing_dropped(text: str) -> str:
    """Hydra's trailing blanks dropped: not an escaped one (`Ring\\ ` is "Ring ": fuzzQ Q3), which an odd run of
    backslashes makes, nor those after an unescaped colon, which its lexer keeps (VALUE_COLON: WS? ':' WS?;
    recheck55 AB2)."""
    m = _BLANKS_AT_END.search(text)
    if m is None:
        return text
    head = text[:m.start()]
    if _backslashes_before(head, len(head)) % 2:
        return head + m[0][0]
    if head.endswith(":") and _backslashes_before(head, len(head) - 1) % 2 == 0:
        return text
    return head


def _backslashes_before(text: str, end: int) -> int:
    return end - len(text[:end].rstrip("\\"))


_SCALAR_END = re.compile(r"[,}\]]")
_BRACE_DEPTH = 4  # comm_overlap > tp_comm_overlap_cfg > a GEMM's config > a list: as plan --format hydra nests them


def brace_fields(value: Any) -> list[tuple[str, Any]] | None:
    """The KEY:VALUE pairs of a Hydra brace value as plan --format hydra writes comm_overlap ({_target_:...,k:v}, a
    preset's fields nested as {...} and [...]); a top-level value stays text, a nested one is typed. None where the
    value is not one (fuzzH H8, recheck N2: the tool's own hydra lines were refused)."""
    text = value.strip() if isinstance(value, str) else ""
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        pairs, end = _brace_pairs(text, 1, 1)
    except (IndexError, ValueError):
        pairs, end = None, -1
    if pairs is None or end != len(text):
        raise UsageError(f"comm_overlap={safeio.shown(text)}: expected {{KEY:VALUE,...}} as plan --format hydra writes it")
    return pairs


def _brace_pairs(text: str, i: int, depth: int) -> tuple[list | None, int]:
    """KEY:VALUE pairs from text[i] (after a '{') to the matching '}'; (pairs, the index after it)."""
    pairs = []
    while text[i] != "}":
        colon = text.index(":", i)
        name = text[i:colon].strip()
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            return None, -1
        value, i = _brace_value(text, colon + 1, depth)
        pairs.append((name, value))
        if text[i] == ",":
            i += 1
        elif text[i] != "}":
            return None, -1
    return pairs, i + 1


def _brace_value(text: str, i: int, depth: int) -> tuple[Any, int]:
    while text[i] == " ":
        i += 1
    if text[i] in "{[":
        if depth >= _BRACE_DEPTH:
            raise ValueError("nested too deep")
        if text[i] == "{":
            pairs, end = _brace_pairs(text, i + 1, depth + 1)
            if pairs is None:
                raise ValueError("not KEY:VALUE pairs")
            return dict(pairs), end
        items, i = [], i + 1
        while text[i] != "]":
            item, i = _brace_value(text, i, depth + 1)
            items.append(item)
            if text[i] == ",":
                i += 1
            elif text[i] != "]":  # an item must end at "," or "]" (fuzzK K1: "[}" looped on the "}" for ever)
                raise ValueError("a list item not followed by ',' or ']'")
        return items, i + 1
    found = _SCALAR_END.search(text, i)  # the nearest, so a long line is read once (three finds would rescan it)
    end = found.start() if found else len(text)
    raw = text[i:end].strip()
    return (raw if depth == 1 else _typed(raw)), end


def unquoted(text: str) -> str:
    """The text inside one matching pair of quotes around it (an unmatched quote stays: Hydra refuses it)."""
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def _one_quoted(text: str) -> bool:
    """Whether the quoted text is one QUOTED_VALUE to Hydra's lexer: its first quote after the opening one that an
    even run of backslashes precedes is the closing one."""
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == text[0]:
            return i == len(text) - 1
        else:
            i += 1
    return False


def _typed(raw: str) -> Any:
    """A nested brace value as Hydra types it: null (its only null), a bool, an integer, else its text."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    return number(raw) if safeio.HYDRA_INT.match(raw) else raw


def env_value(key: str, value: Any, typed: bool = False) -> Any:
    """Type an env_vars value as Hydra's override grammar would (null, in any case, is its only null: "none" and "~"
    are text), unless YAML already typed it (`typed`); Bridge stores str(value) in os.environ."""
    text = None
    if isinstance(value, str) and typed:
        return _interpolated(key, value)  # (OmegaConf resolves a config file's too: recheck54 Y3)
    if isinstance(value, str) and unquoted(value.strip()) != value.strip():
        if not _one_quoted(value.strip()):  # (fuzzQ Q6: """ and 'a\' were read as text; Hydra's lexer refuses them)
            raise UsageError(f"{key}: {safeio.shown(value.strip())} is not one quoted value to Hydra (a quote inside it "
                             "ends it: Bridge refuses the override); escape the quote with a backslash")
        return _interpolated(key, safeio.hydra_unquoted(value.strip()))  # quoted: text, as Hydra reads it
    if isinstance(value, str):
        text = _trailing_dropped(value.strip("\r\n\f\v").lstrip(" \t"))
        if text.lower() == "null":
            value = None
        elif text.lower() in ("true", "false"):
            return text.lower() == "true"
        elif text[:1] in ("[", "{") or "," in ESC.sub("", text):  # (recheck52 W5: a list, a mapping, a sweep)
            raise UsageError(f"{key}: {safeio.shown(text)} is a list, a mapping or a sweep to Hydra, which Bridge "
                             "refuses (environment values must be scalars); quote it to give the text")
        elif safeio.HYDRA_INT.match(text):  # (010 is text to Hydra, 1_000 the number 1000)
            digits = text.replace("_", "").lstrip("+")
            return int(digits) if len(digits) <= 18 else digits  # (past 18 digits no count: its text, as Bridge exports it)
        elif safeio.HYDRA_FLOAT.match(text):
            value = float(text.replace("_", ""))
        elif safeio.HYDRA_NOT_FINITE.match(text):
            value = float(text)  # ("NaN" goes as nan, below)
        else:
            return _text(key, text)
    if value is None or not isinstance(value, (str, int, float, bool)):
        raise UsageError(f"{key}: environment values must be scalars (Bridge raises TypeError otherwise)")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # what Bridge exports: str() of it (a config's .inf, 1e999; fuzzQ Q8)
    return value


def _text(key: str, text: str) -> str:
    """An unquoted value's text as Hydra reads it (escapes undone: a\\ b is "a b"), or refused as Hydra's lexer
    refuses it (~, a=b, a quote inside, a non-ASCII letter: Bridge's parse_hydra_overrides raises)."""
    if _FUNCTION.match(text):  # (fuzzP P2: taken as their text)
        raise UsageError(f"{key}: {safeio.shown(text)} is a Hydra function call, which Bridge evaluates before it "
                         "exports the value and this skill does not: give the value itself")
    if not _UNQUOTED.match(text):
        raise UsageError(f"{key}: {safeio.shown(text)} is not a value Hydra's override grammar takes unquoted (Bridge "
                         "refuses the override); quote it to give the text")
    return _interpolated(key, ESC.sub(lambda m: m[0][1], text))


# a ${ after a run of backslashes: OmegaConf reads each \\ before it as one backslash, and a ${ after an odd run as
# the literal ${ (recheck55 AB1: \\${x} is a backslash and a live interpolation)
_INTERPOLATION = re.compile(r"(?<!\\)((?:\\\\)*)(\\?)\$\{")


def live_interpolation(text: str) -> bool:
    return any(not m[2] for m in _INTERPOLATION.finditer(text))


def _interpolated(key: str, text: str) -> str:
    """A launch variable's text as OmegaConf leaves it (Bridge resolves the config with to_container(resolve=True)):
    an escaped \\${ is a literal ${; an interpolation is refused, for it is resolved where Bridge runs (fuzzP P2,
    recheck54 Y3: a quoted one, or a config file's, was taken as its text)."""
    if live_interpolation(text):
        raise UsageError(f"{key}: {safeio.shown(text)} holds an OmegaConf interpolation, which Bridge resolves where it "
                         "runs and this skill does not: give the value itself (\\${ for a literal ${)")
    return _INTERPOLATION.sub(lambda m: "\\" * (len(m[1]) // 2) + "${", text)
