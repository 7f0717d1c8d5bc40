"""Data classes without the dataclasses module, for the answering path of a cold start.

The standard library's dataclasses imports inspect (with ast, dis and tokenize) and compiles three or four methods
per class, asking inspect for each one's signature: for the twenty classes a cold `plan` defines, that was about a
quarter of its run. `dataclass` here makes the same classes for what this package uses: the fields are the class's
annotations in order, each with its default or field(default=, default_factory=, repr=, compare=); eq always, frozen
on request (then hashable, from the compared fields); __init__, __repr__, __eq__, __hash__, __setattr__ and
__delattr__ behave as dataclasses writes them; replace() makes a changed copy. No base class may have fields. The
dataclasses module's own functions (replace, fields, asdict, is_dataclass) work on a record too: its
__dataclass_fields__ are made, with dataclasses, the first time something asks for them. tests/test_records.py holds
these classes to dataclasses'. The trace package's are records too; the Bridge adapter, which imports Bridge anyway,
keeps the standard library's.
"""

from __future__ import annotations

from reprlib import recursive_repr

__all__ = ["FrozenInstanceError", "dataclass", "field", "replace"]

_MISSING = object()
_FACTORY = object()  # the __init__ default of a field with a default_factory


class FrozenInstanceError(AttributeError):
    """Assigning to (or deleting) a field of a frozen record."""


class Field:
    __slots__ = ("name", "default", "default_factory", "repr", "compare")

    def __init__(self, default=_MISSING, default_factory=_MISSING, repr=True, compare=True):
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name, self.default, self.default_factory, self.repr, self.compare = None, default, default_factory, repr, compare


def field(*, default=_MISSING, default_factory=_MISSING, repr: bool = True, compare: bool = True) -> Field:
    return Field(default, default_factory, repr, compare)


def dataclass(cls=None, /, *, frozen: bool = False):
    """@dataclass or @dataclass(frozen=True), as dataclasses.dataclass with its other options at their defaults."""

    def wrap(c):
        return _make(c, frozen)

    return wrap if cls is None else wrap(cls)


def replace(obj, /, **changes):
    """A copy of the record `obj` with `changes`: dataclasses.replace."""
    for f in type(obj).__record_fields__:
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


class _DataclassFields:
    """A record's __dataclass_fields__, for the dataclasses module's functions: those of the dataclass that the same
    declaration makes, built (importing dataclasses) on first use and then kept on the class."""

    def __get__(self, obj, owner):
        import dataclasses

        namespace = {"__annotations__": {f.name: "object" for f in owner.__record_fields__}, "__module__": owner.__module__}
        for f in owner.__record_fields__:
            namespace[f.name] = dataclasses.field(**{k: v for k, v in (("default", f.default), ("default_factory", f.default_factory))
                                                     if v is not _MISSING}, repr=f.repr, compare=f.compare)
        made = dataclasses.dataclass(type(owner.__name__, (), namespace)).__dataclass_fields__
        owner.__dataclass_fields__ = made
        return made


def _fields(cls) -> tuple:
    if any("__dataclass_fields__" in vars(base) for base in cls.__mro__[1:]):
        raise TypeError(f"{cls.__name__}: a record's base classes have no fields")
    out, defaulted = [], None
    for name, kind in cls.__dict__.get("__annotations__", {}).items():
        if isinstance(kind, str) and kind.startswith(("ClassVar", "typing.ClassVar")):
            continue
        given = cls.__dict__.get(name, _MISSING)
        f = given if isinstance(given, Field) else Field(given)
        f.name = name
        if isinstance(f.default, (list, dict, set)):
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed: use default_factory")
        if isinstance(given, Field):  # the class attribute is the default, as dataclasses leaves it
            if f.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        if f.default is _MISSING and f.default_factory is _MISSING:
            if defaulted is not None:
                raise TypeError(f"non-default argument {name!r} follows default argument")
        else:
            defaulted = name
        out.append(f)
    return tuple(out)


def _init(cls, fields: tuple, frozen: bool):
    """__init__ as dataclasses writes it: one parameter per field, in order, a default_factory called per instance."""
    namespace = {"_record_factory_": _FACTORY, "_record_set_": object.__setattr__}
    params, lines = [], []
    for f in fields:
        value = f.name
        if f.default_factory is not _MISSING:
            namespace[f"_record_make_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_record_factory_")
            value = f"_record_make_{f.name}() if {f.name} is _record_factory_ else {f.name}"
        elif f.default is not _MISSING:
            namespace[f"_record_default_{f.name}"] = f.default
            params.append(f"{f.name}=_record_default_{f.name}")
        else:
            params.append(f.name)
        lines.append(f"    _record_set_(self, {f.name!r}, {value})" if frozen else f"    self.{f.name} = {value}")
    exec(f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(lines) or "    pass"), namespace)  # our own names and values only
    return namespace["__init__"]


def _make(cls, frozen: bool):
    fields = _fields(cls)
    cls.__record_fields__ = fields
    cls.__dataclass_fields__ = _DataclassFields()
    names = tuple(f.name for f in fields)
    shown = tuple(f.name for f in fields if f.repr)
    compared = tuple(f.name for f in fields if f.compare)

    def __repr__(self):
        return self.__class__.__qualname__ + "(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in shown) + ")"

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)
        return NotImplemented

    methods = {"__init__": _init(cls, fields, frozen), "__repr__": recursive_repr()(__repr__), "__eq__": __eq__}
    for name, fn in methods.items():
        if name not in cls.__dict__:
            fn.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, fn)
    class_hash = cls.__dict__.get("__hash__", _MISSING)
    explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in cls.__dict__))
    if frozen:
        if "__setattr__" in cls.__dict__ or "__delattr__" in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute __setattr__ or __delattr__ in class {cls.__name__}")

        def __setattr__(self, name, value):
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            super(cls, self).__setattr__(name, value)

        def __delattr__(self, name):
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot delete field {name!r}")
            super(cls, self).__delattr__(name)

        for fn in (__setattr__, __delattr__):
            fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
            setattr(cls, fn.__name__, fn)
        if not explicit_hash:
            def __hash__(self):
                return hash(tuple(getattr(self, n) for n in compared))

            __hash__.__qualname__ = f"{cls.__qualname__}.__hash__"
            cls.__hash__ = __hash__
    elif not explicit_hash:
        cls.__hash__ = None
    if "__match_args__" not in cls.__dict__:
        cls.__match_args__ = names
    return cls
