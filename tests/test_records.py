"""mbridge_overlap.records makes the classes dataclasses makes, for what the package uses: every class of the package
declared both ways behaves the same (construction, defaults, repr, equality, hashing, frozen errors, replace), and
so do the declarations dataclasses refuses."""

import ast
import copy
import dataclasses
import importlib
import inspect
import pickle

import pytest

from conftest import ROOT
from mbridge_overlap import records


def _declare(maker, frozen=False, body=None, namespace=None):
    namespace = {**(namespace or {}), "field": maker.field}
    exec("from __future__ import annotations\n" + (body or """
class Thing:
    a: int
    b: str = "x"
    c: list = field(default_factory=list)
    d: dict = field(default_factory=dict, compare=False)
    e: int | None = field(default=None, repr=False)
    f: object = None

    def total(self):
        return self.a + len(self.c)
"""), namespace)
    return maker.dataclass(frozen=frozen)(namespace["Thing"])


@pytest.mark.parametrize("frozen", [False, True])
def test_construction_defaults_repr_and_equality(frozen):
    std, ours = _declare(dataclasses, frozen), _declare(records, frozen)
    for args, kwargs in [((1,), {}), ((1, "y", [2], {"k": 1}, 5, "z"), {}), ((), {"a": 2, "c": [1, 2], "f": ours})]:
        s, o = std(*args, **kwargs), ours(*args, **kwargs)
        assert repr(s) == repr(o)
        assert vars(s) == vars(o)
        assert o.total() == s.total()
    assert ours(1) == ours(1) and ours(1) != ours(2) and ours(1, d={"x": 1}) == ours(1)  # d is not compared
    assert ours(1).c is not ours(1).c  # a default_factory per instance
    assert (ours(1) == std(1)) is False and ours(1).__eq__(1) is NotImplemented
    assert [hasattr(ours, n) for n in "abcdef"] == [hasattr(std, n) for n in "abcdef"]
    assert [getattr(ours, n, "-") for n in "bef"] == [getattr(std, n, "-") for n in "bef"]
    assert ours.__match_args__ == std.__match_args__
    params = [(p.name, p.kind, p.default is p.empty) for p in inspect.signature(ours.__init__).parameters.values()]
    assert params == [(p.name, p.kind, p.default is p.empty) for p in inspect.signature(std.__init__).parameters.values()]
    for bad in [((), {}), ((1, 2, 3, 4, 5, 6, 7), {}), ((1,), {"g": 1}), ((1,), {"a": 1})]:
        with pytest.raises(TypeError):
            std(*bad[0], **bad[1])
        with pytest.raises(TypeError):
            ours(*bad[0], **bad[1])


def test_hashing_follows_frozen():
    with pytest.raises(TypeError, match="unhashable"):
        hash(_declare(records)(1))
    std, ours = _declare(dataclasses, True), _declare(records, True)
    with pytest.raises(TypeError, match="unhashable"):
        hash(ours(1))  # its list field is compared
    assert hash(ours(1, c=(), d=[])) == hash(std(1, c=(), d=[]))  # d is not compared, so not hashed


def test_frozen_refuses_assignment_as_dataclasses_does():
    std, ours = _declare(dataclasses, True), _declare(records, True)
    for obj, error in ((std(1), dataclasses.FrozenInstanceError), (ours(1), records.FrozenInstanceError)):
        for action in (lambda o: setattr(o, "a", 2), lambda o: setattr(o, "new", 2), lambda o: delattr(o, "a")):
            with pytest.raises(error) as info:
                action(obj)
            assert isinstance(info.value, AttributeError)
    messages = []
    for obj in (std(1), ours(1)):
        try:
            obj.a = 3
        except AttributeError as exc:
            messages.append(str(exc))
    assert messages[0] == messages[1] == "cannot assign to field 'a'"


@pytest.mark.parametrize("frozen", [False, True])
def test_replace_copy_and_pickle(frozen):
    ours = _declare(records, frozen)
    globals()["Thing"] = ours  # picklable by name
    ours.__qualname__, ours.__name__, ours.__module__ = "Thing", "Thing", __name__
    try:
        one = ours(1, c=[1])
        two = records.replace(one, a=5)
        assert (two.a, two.c, one.a) == (5, [1], 1) and two.c is one.c
        assert copy.deepcopy(one) == one and copy.copy(one) == one and pickle.loads(pickle.dumps(one)) == one
        with pytest.raises(TypeError):
            records.replace(one, nope=1)
    finally:
        del globals()["Thing"]


def test_recursive_repr():
    for maker in (dataclasses, records):
        node = _declare(maker)(1)
        node.f = node
        assert repr(node) == "Thing(a=1, b='x', c=[], d={}, f=...)"


@pytest.mark.parametrize("body, error", [
    ("class Thing:\n    a: int = 1\n    b: int\n", TypeError),
    ("class Thing:\n    a: list = []\n", ValueError),
    ("class Thing:\n    a: int = field(default=1, default_factory=int)\n", ValueError),
])
def test_what_dataclasses_refuses_is_refused(body, error):
    with pytest.raises(error):
        _declare(dataclasses, body=body)
    with pytest.raises(error):
        _declare(records, body=body)


def test_explicit_methods_are_kept():
    body = "class Thing:\n    a: int\n    def __repr__(self):\n        return 'mine'\n    def __hash__(self):\n        return 7\n"
    for maker in (dataclasses, records):
        cls = _declare(maker, body=body)
        assert repr(cls(1)) == "mine" and hash(cls(1)) == 7


def _package_records():
    """(module path, class node) of every class the package declares with records.dataclass."""
    out = []
    for path in sorted((ROOT / "mbridge_overlap").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "from .records import" not in text and "from ..records import" not in text:
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
                out.append((path.relative_to(ROOT).as_posix(), node))
    return out


@pytest.mark.parametrize("where, node", _package_records(), ids=lambda x: x if isinstance(x, str) else x.name)
def test_each_package_record_is_what_dataclasses_would_make(where, node):
    """The class with its decorator both ways: the same fields, defaults, repr and equality of a default instance."""
    decorator = ast.unparse(node.decorator_list[0])
    frozen = "frozen=True" in decorator
    plain = ast.ClassDef(name=node.name, bases=node.bases, keywords=node.keywords, body=node.body, decorator_list=[])
    body = ast.unparse(ast.fix_missing_locations(ast.Module(body=[plain], type_ignores=[])))
    module = importlib.import_module(where[:-3].replace("/", "."))
    std = _declare(dataclasses, frozen, body.replace(node.name, "Thing", 1), vars(module))
    ours = _declare(records, frozen, body.replace(node.name, "Thing", 1), vars(module))
    std_fields = [(f.name, f.default is not dataclasses.MISSING, f.default_factory is not dataclasses.MISSING, f.repr, f.compare)
                  for f in dataclasses.fields(std)]
    our_fields = [(f.name, f.default is not records._MISSING, f.default_factory is not records._MISSING, f.repr, f.compare)
                  for f in ours.__record_fields__]
    assert our_fields == std_fields, where
    required = {f.name: i for i, f in enumerate(dataclasses.fields(std)) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}
    s, o = std(**dict.fromkeys(required, 0)), ours(**dict.fromkeys(required, 0))
    assert repr(s) == repr(o) and vars(s) == vars(o)
    assert (std.__hash__ is None) == (ours.__hash__ is None)


@pytest.mark.parametrize("frozen", [False, True])
def test_the_dataclasses_functions_work_on_a_record(frozen):
    std, ours = _declare(dataclasses, frozen), _declare(records, frozen)
    s, o = std(1, c=[2]), ours(1, c=[2])
    assert dataclasses.is_dataclass(o) and dataclasses.is_dataclass(ours)
    assert [(f.name, f.repr, f.compare) for f in dataclasses.fields(o)] == [(f.name, f.repr, f.compare) for f in dataclasses.fields(s)]
    assert dataclasses.asdict(o) == dataclasses.asdict(s) and dataclasses.astuple(o) == dataclasses.astuple(s)
    changed = dataclasses.replace(o, a=3, b="z")
    assert type(changed) is ours and (changed.a, changed.b, changed.c) == (3, "z", [2])
    assert repr(changed) == repr(dataclasses.replace(s, a=3, b="z"))
    assert not dataclasses.is_dataclass(records.Field())
