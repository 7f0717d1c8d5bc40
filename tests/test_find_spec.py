"""imports.find_spec answers as importlib.util.find_spec does (which the cold start does not import): the same spec,
or the same error, for modules imported or not, packages, namespace packages, built-ins and missing names."""

import importlib.util
import sys

import pytest

from mbridge_overlap import imports


def _seen(find, name):
    try:
        spec = find(name)
    except Exception as exc:  # the error is part of the answer
        return type(exc).__name__
    if spec is None:
        return None
    return spec.name, spec.origin, list(spec.submodule_search_locations or []), type(spec.loader).__name__


NAMES = ["json", "json.decoder", "os.path", "sys", "_socket", "xml.dom.minidom", "email.mime.text", "yaml",
         "nonexistent_package_xyz", "json.nonexistent_xyz", "nonexistent_package_xyz.sub", "json.decoder.sub",
         "nsfake", "nsfake.sub", "nsfake.sub.leaf", "nsfake.missing", "plainfake", "plainfake.sub"]


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """A namespace package (nsfake, no __init__) holding a regular one, and a plain module (plainfake.py)."""
    (tmp_path / "nsfake" / "sub").mkdir(parents=True)
    (tmp_path / "nsfake" / "sub" / "__init__.py").write_text("")
    (tmp_path / "nsfake" / "sub" / "leaf.py").write_text("")
    (tmp_path / "plainfake.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] in ("nsfake", "plainfake")]:
        del sys.modules[name]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("first", ["ours", "importlib"])
def test_the_same_answer_as_importlib(name, first, fake_packages):
    """Each way asked first (a dotted name's parent is imported by whichever asks first)."""
    finders = [imports.find_spec, importlib.util.find_spec]
    if first == "importlib":
        finders.reverse()
    answers = [_seen(find, name) for find in finders]
    assert answers[0] == answers[1]
    assert answers[0] is not None or "nonexistent" in name or "missing" in name


def test_a_module_without_a_spec_is_an_error_in_both(monkeypatch):
    module = type(sys)("specless_fake")
    module.__spec__ = None
    monkeypatch.setitem(sys.modules, "specless_fake", module)
    assert _seen(imports.find_spec, "specless_fake") == _seen(importlib.util.find_spec, "specless_fake") == "ValueError"
    monkeypatch.setitem(sys.modules, "specless_fake", None)
    assert imports.find_spec("specless_fake") is importlib.util.find_spec("specless_fake") is None
