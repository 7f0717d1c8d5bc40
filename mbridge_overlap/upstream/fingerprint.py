"""The normalised code of one scope (a def, a class, a block inside one, or chosen statements of one) of a Python
file, and its fingerprint.

Normalised: no docstrings, comments, layout or annotations of function signatures. The fingerprint and the line
hashes come from a canonical form of the syntax tree that is the same on every Python from 3.10; the readable lines
(for diffs) are ast.unparse of the running Python.
"""

from __future__ import annotations

import ast
import builtins
import copy
import hashlib
from dataclasses import dataclass
from functools import lru_cache

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCKS = (ast.If, ast.For, ast.While, ast.With, ast.Try)
_BUILTINS = frozenset(dir(builtins))
_STMT_LISTS = ("body", "handlers", "orelse", "finalbody")
_BLOCK_WORDS = {"orelse": "else:", "finalbody": "finally:"}
_UNSTABLE_FIELDS = frozenset({"type_params", "type_comment", "kind"})  # absent before 3.12, or not code


@dataclass
class Measure:
    """The normalised code of one anchor's scope in one file."""

    fingerprint: str
    lines: list  # readable normalised source (ast.unparse of this Python), one entry per logical line
    line_hashes: list  # hash of each line's canonical form, the same on every Python
    steps: list | None
    start: int
    end: int


def _children(node) -> list:
    """Statements directly in a module or class body, looking through if/try blocks (TYPE_CHECKING, imports)."""
    out = []
    for child in getattr(node, "body", []):
        if isinstance(child, (ast.If, ast.Try)):
            out += _children(child) + [s for s in child.orelse]
        else:
            out.append(child)
    return out


def _head(node):
    """A shallow copy with its blocks emptied: what a compound statement's first line says."""
    head = copy.copy(node)
    for f in _STMT_LISTS:
        if getattr(head, f, None):
            setattr(head, f, [])
    return head


def scope_node(tree: ast.Module, scope: str, block: str | None = None):
    """The def or class named by a dotted scope (Class.method), or the block inside it whose first line is `block`."""
    node = tree
    for name in scope.split("."):
        node = next((n for n in _children(node) if isinstance(n, _DEFS) and n.name == name), None)
        if node is None:
            return None
    if block:
        want = canonical(_head(ast.parse(block.strip() + " pass").body[0]))
        return next((n for n in ast.walk(node) if isinstance(n, _BLOCKS) and canonical(_head(n)) == want), None)
    return node


def _flat(node) -> list:
    """The statements inside `node` in source order, each with the index just past its own nested statements."""
    out = []

    def visit(stmts):
        for s in stmts:
            at = len(out)
            out.append([s, 0])
            for f in _STMT_LISTS:
                inner = getattr(s, f, None) or []
                visit(sum((h.body for h in inner), []) if f == "handlers" else inner)
            out[at][1] = len(out)

    visit(node.body)
    return out


def header(stmt) -> str:
    """A statement as one line of ast.unparse text with runs of white space made one space; a compound statement
    by its first line (decorators and header)."""
    if any(getattr(stmt, f, None) for f in _STMT_LISTS):
        head = _head(stmt)
        head.body = [ast.Pass()]
        text = " ".join(ast.unparse(head).splitlines()[:-1])
    else:
        text = ast.unparse(stmt)
    return " ".join(text.split())


def _as_header(text: str) -> str:
    """A statement's text as header() writes it, where it parses as one (alone, or as a compound statement's first
    line); else the text with white space runs made one space (the start of a statement: `x = (`)."""
    text = text.strip()
    for source in (text, text + " pass"):
        try:
            body = ast.parse(source).body
        except (SyntaxError, ValueError):
            continue
        if len(body) == 1:
            return header(body[0])
    return " ".join(text.split())


def pick(node, wanted: list[str]) -> tuple[list, str | None]:
    """The statements inside `node` that `wanted` names, in order: each is the first statement after the one before
    (and outside it) whose header() starts with that text (as header() writes it, where it parses). Returns
    (statements, the first text not found)."""
    flat, at, out = _flat(node), 0, []
    for text in wanted:
        prefix = _as_header(text)
        hit = next((i for i in range(at, len(flat)) if header(flat[i][0]).startswith(prefix)), None)
        if hit is None:
            return out, text
        out.append(flat[hit][0])
        at = flat[hit][1]
    return out, None


def select(tree: ast.Module, spec: dict) -> tuple[list, str | None]:
    """The statements `spec` fingerprints: its scope (or block), or the `statements` named inside it. Returns
    (nodes, None), or ([], what is not there)."""
    node = scope_node(tree, spec["scope"], spec.get("block"))
    if node is None:
        return [], spec["scope"] + (f" (block {spec['block']!r})" if spec.get("block") else "")
    if not spec.get("statements"):
        return [node], None
    nodes, missing = pick(node, spec["statements"])
    return (nodes, None) if missing is None else ([], f"the statement {missing!r} in {spec['scope']}")


def _strip(node):
    """A copy without docstrings and without annotations of function signatures (types carry no rule)."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n.returns = None
            a = n.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
                if arg is not None:
                    arg.annotation = None
        body = getattr(n, "body", None)
        if isinstance(n, _DEFS) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            n.body = body[1:] or [ast.Pass()]
    return node


def canonical(node) -> str:
    """The tree as text, the same on every Python from 3.10 (ast.unparse and ast.dump are not: they change how
    tuples are parenthesised and which empty fields are shown)."""
    if isinstance(node, ast.AST):
        fields = ",".join(f"{f}={canonical(getattr(node, f, None))}" for f in node._fields if f not in _UNSTABLE_FIELDS)
        return f"{type(node).__name__}({fields})"
    if isinstance(node, list):
        return "[" + ",".join(canonical(x) for x in node) + "]"
    return repr(node)


def _lines(node, depth: int = 0) -> list[tuple[str, str]]:
    """(canonical, readable) per logical line: a simple statement, or the header of a compound one followed by
    its blocks one level deeper."""
    blocks = [f for f in _STMT_LISTS if getattr(node, f, None)]
    pad = "    " * depth
    if not blocks:
        return [(f"{depth}|{canonical(node)}", pad + ast.unparse(node).replace("\n", " "))]
    head = _head(node)
    if isinstance(node, ast.stmt):
        head.body = [ast.Pass()]
        readable = " ".join(ast.unparse(head).splitlines()[:-1])  # decorators, then the header
        head.body = []
    else:
        readable = _except_header(node)
    out = [(f"{depth}|{canonical(head)}", pad + readable)]
    for f in blocks:
        if f in _BLOCK_WORDS:
            out.append((f"{depth}|{f}", f"{pad}{_BLOCK_WORDS[f]}"))
        for child in getattr(node, f):
            out += _lines(child, depth + 1 if f != "handlers" else depth)
    return out


def _except_header(handler: ast.ExceptHandler) -> str:
    kind = f" {ast.unparse(handler.type)}" if handler.type is not None else ""
    return f"except{kind}{f' as {handler.name}' if handler.name else ''}:"


def steps(node) -> list[str]:
    """The calls in a function body (or a list of statements) in the order they are written (builtins left out)."""
    out = []

    def visit(n):
        if isinstance(n, ast.Call):
            name = ast.unparse(n.func)
            if name not in _BUILTINS:
                out.append(name)
        for child in ast.iter_child_nodes(n):
            visit(child)

    for stmt in node if isinstance(node, list) else node.body:
        visit(stmt)
    return out


def _hash(text: str, n: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


MAX_LINE = 4000  # characters of one source line; Bridge's longest are a few hundred


@lru_cache(maxsize=8)
def _parse(text: str) -> ast.Module:
    """One file's tree, parsed once for all the anchors in it (nothing here changes a tree: copies are edited). A
    line longer than any source Bridge ships is refused before the parser sees it: CPython's parser can overflow
    its C stack on one (a chain of 200,000 additions kills 3.10's process, fuzzG G3), which no except catches."""
    longest = max(map(len, text.splitlines()), default=0)
    if longest > MAX_LINE:
        raise ValueError(f"a line of {longest:,} characters (Bridge's source has none over {MAX_LINE:,}): not its source")
    return ast.parse(text)


def measure(spec: dict, text: str) -> Measure | None:
    """The normalised code of `spec`'s scope in `text`; None when the scope is not there (missing() says what is
    not). SyntaxError, RecursionError and ValueError (a null byte) propagate for the caller to name."""
    nodes, _ = select(_parse(text), spec)
    if not nodes:
        return None
    lines = [line for node in nodes for line in _lines(_strip(node))]
    body = nodes if spec.get("statements") else nodes[0]
    return Measure(
        fingerprint=_hash("\n".join(c for c, _ in lines), 16),
        lines=[r for _, r in lines],
        line_hashes=[_hash(c, 8) for c, _ in lines],
        steps=steps(body) if spec.get("steps") else None,
        start=nodes[0].lineno,
        end=nodes[-1].end_lineno,
    )


def missing(spec: dict, text: str) -> str | None:
    """What of `spec`'s scope is not in `text` (None when all of it is)."""
    return select(_parse(text), spec)[1]
