"""Whether this interpreter can import a module, and where it would import it from, asked of sys.meta_path's finders
as importlib.util.find_spec asks them, without importing importlib.util (1.6 ms of a cold start) or the module."""

import sys


def importable(module: str) -> bool:
    """For a top-level name."""
    return module in sys.modules or _search(module, None) is not None


def find_spec(name: str):
    """importlib.util.find_spec(name) for an absolute name: the module's spec, or None. As there, a dotted name's
    parent package is imported (ModuleNotFoundError where it is not there or is no package), and a module already
    imported answers with its own __spec__ (ValueError where it has none)."""
    if name in sys.modules:
        module = sys.modules[name]
        if module is None:
            return None
        spec = getattr(module, "__spec__", None)
        if spec is None:
            raise ValueError(f"{name}.__spec__ is not set")
        return spec
    parent, _, _ = name.rpartition(".")
    path = None
    if parent:
        package = __import__(parent, fromlist=["__path__"])
        try:
            path = package.__path__
        except AttributeError as exc:
            raise ModuleNotFoundError(f"__path__ attribute not found on {parent!r} while trying to find {name!r}",
                                      name=name) from exc
    return _search(name, path)


def _search(name: str, path):
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, path) if find is not None else None
        if spec is not None:
            return spec
    return None
