"""PARAM_GATHER_NEEDS_GRAD_REDUCE against the installed Megatron-Bridge: the record says a Bridge run never runs
Megatron-LM's argument checks (validate_args, validate_yaml) and which of megatron.training's modules Bridge imports.
Both are read from the installed Bridge's own source: its imports of megatron.training, and no call of either check."""

from __future__ import annotations

import ast
from pathlib import Path

from mbridge_overlap import findings


def _bridge_sources():
    import megatron.bridge

    return sorted(Path(megatron.bridge.__file__).parent.rglob("*.py"))


def _training_modules() -> set:
    """The megatron.training modules Bridge's source imports (the package's own first level: config, models, ...)."""
    out = set()
    for path in _bridge_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            out |= {n.split(".")[2] for n in names if n.startswith("megatron.training.")}
    return out


def _record_text() -> str:
    rec = findings.record("PARAM_GATHER_NEEDS_GRAD_REDUCE")
    return " ".join(str(rec.get(k, "")) for k in ("source", "explain"))


def test_bridge_never_calls_megatron_lm_s_argument_checks():
    for path in _bridge_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func).rsplit(".", 1)[-1]
                assert name not in ("validate_args", "validate_yaml"), (path, node.lineno)
    assert {"arguments", "yaml_arguments"}.isdisjoint(_training_modules())


def test_the_record_names_the_training_modules_bridge_imports():
    text = _record_text()
    modules = _training_modules()
    assert modules, "Bridge imports no megatron.training module"
    if modules != {"config"}:
        assert "imports only megatron.training.config" not in text
    for module in modules:
        assert module in text, (module, sorted(modules))
