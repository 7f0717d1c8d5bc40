"""The import graph of mbridge_overlap, read with ast from every module's source: no cycle, and the engine does not
reach the human-text module.

An edge is every import statement a module holds, at module level or inside a function (a lazy import that would
break a cycle at run time is still an edge: the modules still depend on each other). `from PKG import NAME` is an edge
to PKG.NAME where that is a module, else to PKG. What is not an edge: the import of a parent package that Python
makes before any submodule (every `mbridge_overlap.checks.X` would otherwise be in a cycle with a package __init__
that imports its submodules to register them); a submodule that needs its package's names imports them explicitly,
and that is an edge.
"""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "mbridge_overlap"
# The engine: what answers a question about a config. text.py is the human-readable output of its results.
ENGINE = ("mbridge_overlap.resolver", "mbridge_overlap.analysis", "mbridge_overlap.scenario", "mbridge_overlap.proof",
          "mbridge_overlap.registry", "mbridge_overlap.checks")
TEXT = "mbridge_overlap.text"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(name: str, path: Path, modules: set) -> set:
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            prefix = ".".join(base + ([node.module] if node.module else []))
            out |= {f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in modules else prefix for alias in node.names}
    return {m for m in out if m in modules and m != name}


def graph(package: Path = PACKAGE) -> dict:
    paths = {module_name(p): p for p in package.rglob("*.py")}
    return {name: imports_of(name, path, set(paths)) for name, path in paths.items()}


def cycle(edges: dict) -> list | None:
    """One import cycle (a list of modules, the first repeated at the end), or None."""
    state: dict = {}
    stack: list = []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def reachable(edges: dict, start) -> set:
    seen, todo = set(), [m for m in edges if any(m == s or m.startswith(s + ".") for s in start)]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += edges.get(m, ())
    return seen


def test_the_reader_sees_module_level_lazy_and_relative_imports():
    edges = graph()
    assert "mbridge_overlap.text" in edges["mbridge_overlap.cli"]  # from . import api, releases, safeio, text
    assert "mbridge_overlap.planner" in edges["mbridge_overlap.api"]  # inside api.plan()
    assert "mbridge_overlap.registry" in edges["mbridge_overlap.checks.selection"]  # from ..registry import check
    assert "mbridge_overlap.checks.run" in edges["mbridge_overlap.checks"]  # from . import rejections, ..., run
    assert "mbridge_overlap.anchors" in edges["mbridge_overlap.findings"]  # inside findings._location()


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle_among_the_package_modules():
    assert cycle(graph()) is None


def test_the_engine_does_not_reach_the_text_module():
    edges = graph()
    engine = reachable(edges, ENGINE)
    assert "mbridge_overlap.checks.selection" in engine and "mbridge_overlap.findings" in engine
    assert TEXT not in engine, [m for m in engine if TEXT in edges[m]]
