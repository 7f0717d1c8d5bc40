"""Values of fields the resolver does not model but a rule reads (the layer split, the CP exchange, the sequence
length), as a request holds them: typed as Bridge's fields are, the command line's text included; anything else is
the one-line error every typed field gives."""

from __future__ import annotations

from .. import safeio
from ..errors import UsageError

_NULL = ("", "null", "none")
_TRUE, _FALSE = ("true", "1"), ("false", "0")
MAX_DIGITS = 12  # no layer count, stage or sequence length has more


def integer(key: str, value) -> int | None:
    """A whole number (signed; None for none); UsageError for anything else."""
    if value is None or isinstance(value, str) and value.strip().lower() in _NULL:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value  # a config file's own (its loader bounds the digits); compared, never multiplied
    text = value.strip() if isinstance(value, str) else None
    digits = text[1:] if text and text[0] in "+-" else text
    if digits and digits.isascii() and digits.isdigit() and len(digits) <= MAX_DIGITS:
        return int(text)
    raise UsageError(f"{key}: expected a whole number, got {safeio.shown(value)}")


def flag(key: str, value) -> bool | None:
    """true or false (None for none); UsageError for anything else, as for Bridge's other boolean fields."""
    if value is None or isinstance(value, str) and value.strip().lower() in _NULL:
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise UsageError(f"{key}: expected true or false, got {safeio.shown(value)}")


def integers(key: str, value) -> list[int] | None:
    """A list of whole numbers (a YAML list, or the command line's [a, b]); None for none."""
    if value is None or isinstance(value, str) and value.strip().lower() in _NULL:
        return None
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, str) and value.strip().startswith("[") and value.strip().endswith("]") \
            and not any(c in value.strip()[1:-1] for c in "[]{}"):
        items = [x for x in value.strip()[1:-1].split(",") if x.strip()]
    else:
        raise UsageError(f"{key}: expected a list of whole numbers such as [8, 2], got {safeio.shown(value)}")
    if not items or any(isinstance(x, (list, tuple, dict)) for x in items):
        raise UsageError(f"{key}: expected a list of whole numbers such as [8, 2], got {safeio.shown(value)}")
    return [integer(key, x) for x in items]
