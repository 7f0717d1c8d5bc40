"""Values of fields the resolver does not model but a rule reads (the layer split, the CP exchange, the sequence
length), as a request holds them: typed as Bridge's fields are, the command line's text included; anything else is
the one-line error every typed field gives."""

from __future__ import annotations

from .. import safeio
from ..errors import UsageError
from . import schema
from .request import convert

_NULL = ("", "null")  # (Hydra's null, any case; an empty config value)
_NOT_NULL = ("none", "~")  # text to Hydra and a word it refuses: refused as a typed field's word is (request.convert)
_ONE_ZERO = {"1": True, "0": False}  # beside true and false, as the other boolean fields of a request are not
MAX_DIGITS = 12  # no layer count, stage or sequence length has more


def integer(key: str, value) -> int | None:
    """A whole number (signed; None for none), typed as every integer field of a request is (request.convert), the
    command line's text at most MAX_DIGITS digits; UsageError for anything else."""
    if isinstance(value, str) and value.strip().lower() in _NULL:
        return None
    _not_null(key, schema.OPT_INT, value)
    if isinstance(value, str) and len(value.strip().lstrip("+-")) > MAX_DIGITS:
        raise UsageError(f"{key}: a whole number of at most {MAX_DIGITS} digits, got {safeio.shown(value)}")
    return convert(key, schema.Field(schema.OPT_INT, minimum=None), value, None)  # (Megatron-Core judges the sign)


def flag(key: str, value) -> bool | None:
    """true or false (None for none), typed as every boolean field of a request is (request.convert); 1 and 0 too."""
    if isinstance(value, str) and value.strip().lower() in _NULL:
        return None
    _not_null(key, schema.OPT_BOOL, value)
    if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip() in _ONE_ZERO:
        return _ONE_ZERO[str(value).strip()]
    return convert(key, schema.Field(schema.OPT_BOOL), value, None)


def _not_null(key: str, kind: str, value) -> None:
    """none (the text 'none' to Hydra, which Bridge sets on the field: real 0.6.2 takes moe_expert_rank_capacity_factor=None
    and raises on it) and ~ (refused by Hydra's grammar) are refused in one line, as on a field the resolver models."""
    if isinstance(value, str) and value.strip().lower() in _NOT_NULL:
        convert(key, schema.Field(kind, minimum=None), value, None, command_line=True)


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
