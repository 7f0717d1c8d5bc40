"""The import graph of mbridge_overlap, read with ast from every module's source: no cycle, and the engine does not
reach the human-text module.

An edge is every import statement a module holds, at module level or inside a function (a lazy import that would
break a cycle at run time is still an edge: the modules still depend on each other). `from PKG import NAME` is an edge
to PKG.NAME where that is a module, else to PKG. What is not an edge: the import of a parent package that Python
makes before any submodule (every `mbridge_overlap.findings.rules.X` would otherwise be in a cycle with a package __init__
that imports its submodules to register them); a submodule that needs its package's names imports them explicitly,
and that is an edge.
"""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "mbridge_overlap"
# The engine: what answers a question about a config. text.py is the human-readable output of its results.
ENGINE = ("mbridge_overlap.run.resolver", "mbridge_overlap.findings.analysis", "mbridge_overlap.run.scenario", "mbridge_overlap.findings.proof",
          "mbridge_overlap.findings.registry", "mbridge_overlap.findings.rules")
TEXT = "mbridge_overlap.output.text"


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
    assert "mbridge_overlap.output.text" in edges["mbridge_overlap.cli.resolve"]  # from ..output import text
    assert "mbridge_overlap.verbs.plan" in edges["mbridge_overlap.api"]  # inside api.plan()
    assert "mbridge_overlap.findings.registry" in edges["mbridge_overlap.findings.rules.selection"]  # from ..registry import check
    assert "mbridge_overlap.findings.rules.run" in edges["mbridge_overlap.findings.rules"]  # from . import rejections, ..., run
    assert "mbridge_overlap.upstream.anchors" in edges["mbridge_overlap.findings"]  # inside findings._location()


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle_among_the_package_modules():
    assert cycle(graph()) is None


def test_the_engine_does_not_reach_the_text_module():
    edges = graph()
    engine = reachable(edges, ENGINE)
    assert "mbridge_overlap.findings.rules.selection" in engine and "mbridge_overlap.findings" in engine
    assert TEXT not in engine, [m for m in engine if TEXT in edges[m]]


# The layers of the package, lowest first: a module imports its own layer and lower ones only, so that a newcomer
# can read it bottom up (README.md and CONTRIBUTING.md name the folders).
LAYERS = (
    ("errors", "contract", "values", "suggest", "safeio", "pool"),  # the base: errors, the JSON contract, quoting, safe reads, workers
    ("upstream",),  # the upstream facts: releases, recipe catalog, presets, anchors
    ("run",),  # the model of a run: request, scenario, resolver, layout, machine, launch environment
    ("findings", "output", "budget"),  # the findings (records, rules, proof, analysis); text and snippets; the budget
    ("diagnose", "trace", "verbs"),  # the verbs' own logic
    ("api", "keywords"),  # the Python API: one function per verb, and the check of its arguments
    ("cli", "bridge", "__main__", ""),  # the command line, verify's Bridge side, the package itself
)


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    return next(i for i, names in enumerate(LAYERS) if top in names)


def test_every_module_is_in_a_layer():
    for module in graph():
        layer_of(module)


def test_no_module_imports_a_higher_layer():
    edges = graph()
    upward = {(m, n) for m, targets in edges.items() for n in targets if layer_of(n) > layer_of(m)}
    assert not upward, sorted(upward)


def test_one_cli_module_and_one_api_function_per_verb():
    from mbridge_overlap import api, cli

    for verb, module in cli.VERBS.items():
        assert (PACKAGE / "cli" / f"{module}.py").is_file(), verb
    named = {"releases": "release_table", "check-manifest": "check_manifest"}
    assert all(callable(getattr(api, named.get(verb, verb), None)) for verb in cli.VERBS)
