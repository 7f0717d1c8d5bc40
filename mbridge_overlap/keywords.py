"""The Python API's arguments, checked against the signatures they are passed to: a wrong type is one UsageError line
naming the argument and what it takes, never a TypeError or AttributeError from deep inside, nor a wrong reading
("no" taken as true, an int in a list of logs read as a file descriptor).

`@checked(*targets)` on an API function reads, on its first call, its own parameters and those of the functions its
**kwargs go to (a target: ("module:function" of this package, the keywords of it the API does not take)), with their
annotations, and checks every call against them. An annotation is read as its text (`from __future__ import
annotations`): alternatives joined by |, each one of
    None  bool  int (not a bool)  float  str  os.PathLike (a str, or a path object whose __fspath__() gives a str)
    BinaryIO (a stream of bytes)
    Mapping[K, V], dict[K, V] (each key and value checked)  Sequence[T], list[T], tuple[T, ...], Iterable[T]
    Any, or no annotation (anything)  another name: an object of that class
A mapping that holds another function's keywords (KEYWORDS_OF) is checked against that function's signature. No text
or path holds a NUL byte; a list holds at most MAX_ITEMS items (an iterable is read no further).
"""

from __future__ import annotations

import functools
import importlib
import io
import itertools
import os
from collections.abc import Iterable, Mapping

from .errors import UsageError

KEYWORDS_OF = {"machine_facts": "run.machine:describe"}  # a mapping given as the keywords of another function
_MAPPINGS = ("Mapping", "dict", "MutableMapping")
# The most items a list argument holds (ranks, logs, trace paths): a world size's bound (safeio.MAX_GPUS; a rank is
# below it, and a log or trace file is one rank's). An iterable is read up to one past it, then refused (fuzzW W2-2:
# range(3*10**7) took 21 s and 1.2 GB, itertools.count() every byte of memory).
MAX_ITEMS = 1 << 20
_SEQUENCES = {"Sequence": (list, tuple), "list": (list, tuple), "tuple": (list, tuple),
              "Iterable": (list, tuple, set, frozenset)}


def checked(*targets):
    def wrap(fn):
        specs: dict = {}  # its own parameters; with the targets' (read only for a keyword beyond its own: trace's
        # command imports no release data)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if not specs:
                specs["own"] = _params(fn)
            spec = specs["own"]
            if targets and any(k not in spec[0] for k in kwargs):
                if "all" not in specs:
                    specs["all"] = _with_targets(spec, targets)
                spec = specs["all"]
            args, kwargs = _listed(spec, args, kwargs)
            _check(fn.__name__, spec, args, kwargs)
            return fn(*args, **kwargs)

        call.checked_against = targets
        return call
    return wrap


def _with_targets(own: tuple, targets) -> tuple:
    """(parameters by name -> their alternatives, the positional names, the required names, whether keywords beyond
    them reach a **kwargs no target names)."""
    params, positional, required, more = dict(own[0]), *own[1:]
    for target, *left_out in targets:
        theirs, _, _, more = _target(target)
        params.update({k: v for k, v in theirs.items() if k not in params and k not in left_out})
    return params, positional, required, more


@functools.lru_cache(maxsize=None)
def _target(target: str) -> tuple:
    module, _, name = target.partition(":")
    return _params(getattr(importlib.import_module(f"{__package__}.{module}"), name))


def _params(fn) -> tuple:
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    positional = names[:code.co_argcount]
    required = positional[:len(positional) - len(fn.__defaults__ or ())]
    notes = fn.__annotations__
    params = {n: _alternatives(notes[n] if isinstance(notes.get(n), str) else "Any") for n in names}
    return params, positional, required, bool(code.co_flags & 0x08)


@functools.lru_cache(maxsize=None)
def _alternatives(text: str) -> tuple:
    """An annotation's alternatives, each (name, its arguments' alternatives)."""
    out = []
    for part in _split(text, "|"):
        name, _, rest = part.partition("[")
        args = tuple(_alternatives(a) for a in _split(rest[:-1], ",")) if rest else ()
        out.append((name.strip().rpartition(".")[2], args))
    return tuple(out)


def _split(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "[") - (c == "]")
        if c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in parts + [text[start:]]]


def _listed(spec: tuple, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """An iterable given where a sequence is taken (a generator such as Path.glob's, a range, a set, dict keys) as a
    list: checked, then passed on (a generator read by the check would reach the function empty; recheck62 AI1). It
    is read up to MAX_ITEMS + 1 items: one more is refused, unread further (an endless generator too)."""
    params, positional = spec[0], spec[1]

    def listed(name, value):
        if (any(n in _SEQUENCES for n, _ in params.get(name, ())) and isinstance(value, Iterable)
                and not isinstance(value, (str, bytes, bytearray, Mapping, list, tuple, io.IOBase))):
            items = list(itertools.islice(value, MAX_ITEMS + 1))
            _not_too_many(name, items)
            return items
        return value

    return (tuple(listed(n, v) for n, v in zip(positional, args)) + args[len(positional):],
            {k: listed(k, v) for k, v in kwargs.items()})


def _check(fname: str, spec: tuple, args: tuple, kwargs: dict) -> None:
    params, positional, required, more = spec
    if len(args) > len(positional):
        raise UsageError(f"{fname}: takes {len(positional)} positional argument{'s' * (len(positional) != 1)} "
                         f"({', '.join(positional) or 'none'}), got {len(args)}; give the others by name")
    given = dict(zip(positional, args))
    for name, value in kwargs.items():
        if name in given:
            raise UsageError(f"{fname}: {name} given twice (by position and by name)")
        if name not in params and not more:
            raise UsageError(f"{fname}: unknown keyword {_shown(name)}; it takes {', '.join(sorted(params))}")
        given[name] = value
    missing = [n for n in required if n not in given]
    if missing:
        raise UsageError(f"{fname}: {missing[0]} is required")
    for name, value in given.items():
        if name in params:
            _value(name, value, params[name])


def _value(where, value, alternatives: tuple) -> None:
    """where: the argument's name, or a function giving the item's (spelled only for a message)."""
    for name, args in alternatives:
        if _fits(value, name):
            if name in ("str", "PathLike"):
                _text(where, value, any(n == "PathLike" for n, _ in alternatives))
            if args and name in _MAPPINGS:
                for k, v in value.items():
                    _value(lambda k=k: f"{_said(where)}: key {_shown(k)}", k, args[0])
                    _value(lambda k=k: f"{_said(where)}[{_shown(k)}]", v, args[1])
            elif name in _SEQUENCES:
                _not_too_many(where, value)
                for i, item in enumerate(value if args else ()):
                    _value(lambda i=i: f"{_said(where)}[{i}]", item, args[0])
            if where in KEYWORDS_OF and isinstance(value, Mapping):
                _keywords(where, value)
            return
    raise UsageError(f"{_said(where)}: expected {_expected(alternatives)}, got {_shown(value)} ({type(value).__name__})")


def _text(where, value, path: bool) -> None:
    """A path object's __fspath__() gives a text (not bytes, an int, or its own error), and no text holds a NUL byte:
    no path, name or command-line word can (fuzzW W2-4: TypeError and 'embedded null byte' tracebacks)."""
    what, cls = ("a path" if path else "a text"), type(value).__name__
    if not isinstance(value, str):
        try:
            value = os.fspath(value)
        except Exception as exc:  # the object's own __fspath__ raised, or gave neither str nor bytes
            raise UsageError(f"{_said(where)}: {cls}.__fspath__() failed: {_shown(str(exc))}") from None
        if not isinstance(value, str):
            raise UsageError(f"{_said(where)}: {cls}.__fspath__() gave {_shown(value)} ({type(value).__name__}), "
                             f"not {what} (str)")
    if "\x00" in value:
        raise UsageError(f"{_said(where)}: {what} with a NUL byte ({_shown(value)}); no file name, name or "
                         "command-line word holds one")


def _not_too_many(where, items) -> None:
    if len(items) > MAX_ITEMS:
        raise UsageError(f"{_said(where)}: more than {MAX_ITEMS:,} items (a world size's bound); give the ones meant")


def _said(where) -> str:
    return where() if callable(where) else where


def _keywords(where: str, value: Mapping) -> None:
    params, positional, _, _ = _target(KEYWORDS_OF[where])
    known = [p for p in params if p not in positional]
    for key, item in value.items():
        if key not in known:
            raise UsageError(f"{where}: unknown key {_shown(key)}; it takes {', '.join(known)}")
        _value(lambda key=key: f"{where}[{_shown(key)}]", item, params[key])


def _fits(value, name: str) -> bool:
    if name in ("Any", "..."):
        return True
    if name == "None":
        return value is None
    if name in ("int", "float"):
        return isinstance(value, (int, float) if name == "float" else int) and not isinstance(value, bool)
    if name == "PathLike":
        return isinstance(value, (str, os.PathLike))
    if name == "BinaryIO":
        return callable(getattr(value, "read", None)) and not isinstance(value, io.TextIOBase)
    if name in _MAPPINGS:
        return isinstance(value, Mapping)
    if name in _SEQUENCES:
        return isinstance(value, _SEQUENCES[name])
    return any(c.__name__ == name for c in type(value).__mro__)  # bool, str and any other class, by its name


_WHAT = {"None": "None", "bool": "True or False", "int": "a whole number (int)", "float": "a number (int or float)",
         "str": "a text (str)", "PathLike": "a path (str or os.PathLike)", "Any": "anything",
         "BinaryIO": "a binary stream (open(path, 'rb'), io.BytesIO, sys.stdin.buffer)"}


def _expected(alternatives: tuple) -> str:
    """What an annotation's alternatives take, in words (a str is a path where a path is taken)."""
    names = {name for name, _ in alternatives}
    out = []
    for name, args in alternatives:
        if name == "str" and "PathLike" in names:
            continue
        if name in _MAPPINGS:
            out.append("a mapping" + (" with text (str) keys" if args and args[0][0][0] == "str" else ""))
        elif name in _SEQUENCES and args and args[0][0][0] != "Any":
            inner = _expected(args[0])
            others = _expected(tuple(a for a in alternatives if a[0] not in _SEQUENCES and a[0] != "None"))
            out.append("a list of them" if inner == others else f"a list (each item {inner})")
        else:
            out.append(_WHAT.get(name, f"a {name}"))
    return " or ".join(out)


def _shown(value) -> str:
    from .safeio import shown

    return shown(value)
