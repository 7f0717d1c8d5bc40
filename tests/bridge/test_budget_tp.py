"""The budget's TP collectives against Transformer Engine's own source in the Bridge venv: the userbuffers GEMMs of a
layer, which collective each runs, TE's default method for each and the pipeline's default splits (initialize_ub in
pytorch/module/base.py, read with ast, not run: it needs GPUs), and the backward collectives TE issues async."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from mbridge_overlap.budget.userbuffers import ASYNC_GEMMS, PIPELINE_SPLITS, UB_GEMMS
from mbridge_overlap.upstream.presets import TE_DEFAULT_METHODS


def _te_module(name: str) -> Path:
    return Path(importlib.util.find_spec("transformer_engine.pytorch").submodule_search_locations[0]) / "module" / name


def _initialize_ub() -> ast.FunctionDef:
    tree = ast.parse(_te_module("base.py").read_text(encoding="utf-8"))
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "initialize_ub")


def _assigned(func: ast.FunctionDef, name: str):
    node = next(n for n in ast.walk(func) if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == name for t in n.targets))
    return node.value


def test_the_userbuffers_gemms_and_their_default_methods_are_transformer_engines():
    func = _initialize_ub()
    methods = ast.literal_eval(_assigned(func, "methods"))
    all_gather = set(ast.literal_eval(_assigned(func, "layers_all_gather_overlap")))
    reduce_scatter = set(ast.literal_eval(_assigned(func, "layers_reduce_scatter_overlap")))
    assert TE_DEFAULT_METHODS == {g: m for m, names in methods.items() if m != "external" for g in names}
    for gemm, (collective, _layer) in UB_GEMMS.items():
        assert gemm in (all_gather if collective == "all_gather" else reduce_scatter), gemm
    assert set(ASYNC_GEMMS) == set(methods["bulk"])
    for gemm, (collective, _layer) in ASYNC_GEMMS.items():
        # the bulk GEMM's buffer: qkv_dgrad all-gathers the input beside dgrad, qkv_wgrad reduce-scatters dgrad's output
        assert gemm in (all_gather if collective == "all_gather" else reduce_scatter), gemm
    # every userbuffers GEMM of a layer is costed, but the wgrad GEMMs TE overlaps with their dgrad's exchange
    every = {g for names in methods.values() for g in names}
    assert every - set(UB_GEMMS) - set(ASYNC_GEMMS) == set(methods["external"])


def test_the_pipeline_default_splits_are_transformer_engines():
    config = next(n for n in ast.walk(_initialize_ub()) if isinstance(n, ast.FunctionDef) and n.name == "get_default_config")
    default = _assigned(config, "default_cfg")
    value = next(v for k, v in zip(default.keys, default.values) if ast.literal_eval(k) == "num_splits")
    assert isinstance(value, ast.IfExp) and ast.literal_eval(value.orelse) == PIPELINE_SPLITS
    assert ast.unparse(value.test) == "method == 'ring_exchange'" and ast.unparse(value.body) == "tp_size"


def test_the_column_layers_backward_collectives_are_async_in_transformer_engine():
    """Without userbuffers' bulk overlap the input's second all-gather and the input gradient's reduce-scatter (its
    all-reduce without sequence parallel) are issued with async_op=True, waited on after the GEMM they run beside."""
    for module in ("linear.py", "layernorm_linear.py"):
        tree = ast.parse(_te_module(module).read_text(encoding="utf-8"))
        issued = {getattr(n.func, "id", None) for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and any(k.arg == "async_op" and getattr(k.value, "value", None) is True for k in n.keywords)}
        assert {"gather_along_first_dim", "reduce_scatter_along_first_dim", "allreduce"} <= issued, (module, issued)


def test_tp_all_gathers_move_quantized_data():
    """gather_along_first_dim (pytorch/distributed.py) gathers FP8, MXFP8 and NVFP4 tensors in their quantized form,
    and the linear modules hand it their quantizer (the budget's GATHER_BYTES)."""
    path = Path(importlib.util.find_spec("transformer_engine.pytorch").submodule_search_locations[0]) / "distributed.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "gather_along_first_dim")
    called = {getattr(n.func, "id", None) for n in ast.walk(func) if isinstance(n, ast.Call)}
    assert {"_all_gather_fp8", "_all_gather_mxfp8", "_all_gather_nvfp4"} <= called
    for module in ("linear.py", "layernorm_linear.py"):
        tree = ast.parse(_te_module(module).read_text(encoding="utf-8"))
        # every gather hands over a quantizer but the one under `if return_layernorm_output_gathered` (the norm's
        # output returned gathered in high precision: LoRA adapters ask for it)
        high = {id(n) for i in ast.walk(tree) if isinstance(i, ast.If) and "return_layernorm_output_gathered" in ast.unparse(i.test)
                for stmt in i.body for n in ast.walk(stmt)}
        gathers = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "gather_along_first_dim"]
        plain = [ast.unparse(g) for g in gathers if id(g) not in high and not any(k.arg == "quantizer" for k in g.keywords)]
        assert len(gathers) >= 3 and not plain, (module, plain)


def test_the_default_sm_margin_is_transformer_engines():
    """get_default_config: num_sm 1 for ring_exchange and COMM_SMS otherwise; set_sm_margin for all but ring_exchange."""
    from mbridge_overlap.budget.userbuffers import COMM_SMS

    config = next(n for n in ast.walk(_initialize_ub()) if isinstance(n, ast.FunctionDef) and n.name == "get_default_config")
    default = _assigned(config, "default_cfg")
    entry = {ast.literal_eval(k): v for k, v in zip(default.keys, default.values)}
    assert ast.unparse(entry["num_sm"]) == f"1 if method == 'ring_exchange' else {COMM_SMS}"
    assert ast.unparse(entry["set_sm_margin"]) == "not method == 'ring_exchange'"
