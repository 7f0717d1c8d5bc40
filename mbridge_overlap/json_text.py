"""The commands' JSON: exactly json.dumps(data, indent=2, default=str), faster.

Python's json module uses its C encoder only without indent; with indent it walks the data through nested
generators in pure Python (46-70 ms for the 1.6 MB of `recipes --format json`). This walks it with plain calls,
each scalar inline, and hands each container of scalars only to the C encoder whole (about two thirds of the time).
tests/test_json_text.py holds it to json.dumps on random data and on every verb's JSON.
"""

from __future__ import annotations

from json.encoder import c_make_encoder
from json.encoder import encode_basestring_ascii as _string

_INF = float("inf")
_FLAT = frozenset({str, int, float, bool, type(None)})  # exact types: a subclass takes the walk, as json's own does
_LEAVES: dict = {}  # indent -> json's C encoder writing a flat container with that depth's item separator


def _leaf(container, nl: str, inner: str) -> str | None:
    """A container of scalars only (string keys), written by json's C encoder; None for any other. The C encoder
    writes no indent, only "{k: v,<newline+indent>k: v}": the brackets get theirs here."""
    if c_make_encoder is None:
        return None
    if type(container) is dict:
        for k, v in container.items():
            if type(k) is not str or type(v) not in _FLAT:
                return None
    else:
        for v in container:
            if type(v) not in _FLAT:
                return None
    enc = _LEAVES.get(inner)
    if enc is None:
        enc = _LEAVES[inner] = c_make_encoder(None, _no_default, _string, None, ": ", "," + inner, False, False, True)
    text = "".join(enc(container, 0))
    return text[0] + inner + text[1:-1] + nl + text[-1]


def _no_default(o):
    raise TypeError(f"not a scalar: {o!r}")  # never: a leaf holds json's own types only


def dumps(data) -> str:
    """json.dumps(data, indent=2, default=str) (ensure_ascii, allow_nan, no sort, no circular-reference check: the
    data a command prints is a tree)."""
    out: list[str] = []
    _value(data, out, "\n")
    return "".join(out)


def _float(f: float) -> str:
    if f != f:
        return "NaN"
    if f == _INF:
        return "Infinity"
    if f == -_INF:
        return "-Infinity"
    return float.__repr__(f)


def _scalar(v):
    """The text of a scalar as json writes it, None for a container or another object."""
    t = type(v)
    if t is str:
        return _string(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if t is int:
        return int.__repr__(v)
    if t is float:
        return _float(v)
    if t is dict or t is list or t is tuple:
        return None
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        return _float(v)
    return None


def _value(v, out: list, nl: str) -> None:
    text = _scalar(v)
    if text is not None:
        out.append(text)
    elif isinstance(v, (list, tuple)):
        _list(v, out, nl)
    elif isinstance(v, dict):
        _dict(v, out, nl)
    else:
        out.append(_string(str(v)))  # default=str: the object's str, as a JSON string


def _list(items, out: list, nl: str) -> None:
    if not items:
        out.append("[]")
        return
    inner = nl + "  "
    flat = _leaf(items, nl, inner) if type(items) is list or type(items) is tuple else None
    if flat is not None:
        out.append(flat)
        return
    sep = "[" + inner
    for v in items:
        text = _scalar(v)
        if text is not None:
            out.append(sep + text)
        else:
            out.append(sep)
            _value(v, out, inner)
        sep = "," + inner
    out.append(nl + "]")


def _dict(d: dict, out: list, nl: str) -> None:
    if not d:
        out.append("{}")
        return
    inner = nl + "  "
    flat = _leaf(d, nl, inner) if type(d) is dict else None
    if flat is not None:
        out.append(flat)
        return
    sep = "{" + inner
    for k, v in d.items():
        key = _string(k) if type(k) is str else _key(k)
        text = _scalar(v)
        if text is not None:
            out.append(sep + key + ": " + text)
        else:
            out.append(sep + key + ": ")
            _value(v, out, inner)
        sep = "," + inner
    out.append(nl + "}")


def _key(k) -> str:
    if isinstance(k, str):
        return _string(k)
    if isinstance(k, float):
        return _string(_float(k))
    if k is True:
        return '"true"'
    if k is False:
        return '"false"'
    if k is None:
        return '"null"'
    if isinstance(k, int):
        return '"' + int.__repr__(k) + '"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")
