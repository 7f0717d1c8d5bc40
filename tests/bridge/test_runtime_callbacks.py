"""evalAD AD2-2: the callbacks diagnose never gives as knobs (causes.RUNTIME_FIELDS) are exactly the model-config
attributes the installed Bridge's _update_model_config_funcs assigns at run time, and the no_sync_func assert
precedes its assignment there and in Megatron-LM's train()."""

from __future__ import annotations

import ast
import inspect

from mbridge_overlap.diagnose.causes import RUNTIME_FIELDS


def _assigned(fn, owner: str) -> list:
    tree = ast.parse(inspect.getsource(fn))
    return [(t.attr, node.lineno) for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == owner]


def _asserted_first(fn, owner: str) -> bool:
    tree = ast.parse(inspect.getsource(fn))
    asserts = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)
               and ast.unparse(n.test) == f"{owner}.no_sync_func is None"]
    sets = [line for name, line in _assigned(fn, owner) if name == "no_sync_func"]
    return bool(asserts and sets) and max(asserts) < min(sets)


def test_runtime_fields_are_what_bridge_installs():
    from megatron.bridge.training import setup

    assert {name for name, _ in _assigned(setup._update_model_config_funcs, "model_config")} == RUNTIME_FIELDS
    assert _asserted_first(setup._update_model_config_funcs, "model_config")


def test_megatron_lm_train_asserts_then_installs_no_sync_func():
    from megatron.training import training

    assert _asserted_first(training.train, "config")
