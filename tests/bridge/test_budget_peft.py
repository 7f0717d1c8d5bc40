"""The budget's PEFT model against the installed packages' own code (read with ast, or built on the CPU): Bridge's
LoRA defaults and freeze_model, Megatron-Core's DDP buffers holding only trainable parameters, and Transformer
Engine's layers running no wgrad GEMM and no re-gather for frozen weights."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from pathlib import Path

from mbridge_overlap.run import peft


def _source(package: str, relative: str) -> ast.Module:
    root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
    return ast.parse((root / relative).read_text(encoding="utf-8"))


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_the_lora_defaults_are_bridges():
    from megatron.bridge.peft.lora import LoRA

    defaults = {f.name: f for f in dataclasses.fields(LoRA)}
    assert tuple(defaults["target_modules"].default_factory()) == peft.DEFAULT_TARGETS
    assert defaults["dim"].default == peft.DEFAULT_DIM


def test_bridges_peft_freezes_every_base_weight():
    freeze = _function(_source("megatron.bridge", "peft/base.py"), "freeze_model")
    assigns = [n for n in ast.walk(freeze) if isinstance(n, ast.Assign)]
    assert any(ast.unparse(t) == "param.requires_grad" and ast.unparse(n.value) == "False" for n in assigns for t in n.targets)


def test_megatron_cores_ddp_buffers_skip_frozen_parameters():
    tree = _source("megatron.core", "distributed/distributed_data_parallel.py")
    init = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "DistributedDataParallel")
    tests = {ast.unparse(n.test) for n in ast.walk(init) if isinstance(n, ast.If)}
    assert "not param.requires_grad" in tests


# (module, what the backward reads for "the weight trains", what says the input is gathered again for wgrad)
TE_MODULES = (("layernorm_linear.py", "ctx.requires_wgrad", "ctx.ln_out_needs_gather"),
              ("linear.py", "bwd_args.requires_wgrad", "backward_input_needs_gather"))


def test_transformer_engine_runs_no_wgrad_and_no_regather_for_frozen_weights():
    for module, trains, regather in TE_MODULES:
        tree = _source("transformer_engine.pytorch", f"module/{module}")
        guarded = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == trains]
        assert any("wgrad_gemm(" in ast.unparse(n) for n in guarded), module  # the wgrad GEMM only where it trains
        sets = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(ast.unparse(t) == regather for t in n.targets)]
        assert sets and all("requires_grad" in ast.unparse(n.value) for n in sets), module


def test_the_lora_adapters_sequence_parallel_collectives_are_bridges():
    """tp._adapter_collectives: a column-parallel adapter gathers its input unless sequence-parallel
    communication is off (Bridge turns it off where TP overlap is off and TE returns the gathered input); a
    row-parallel one gathers its output (gather_output) and scatters it to the sequence shard."""
    tree = _source("megatron.bridge", "peft/utils.py")
    adapter = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ParallelLinearAdapter")
    forward = next(n for n in adapter.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    calls = {ast.unparse(n.test): ast.unparse(n) for n in ast.walk(forward) if isinstance(n, ast.If)}
    column = calls["not self.disable_sequence_parallel_comm and (not self.input_is_parallel) and (not self.is_expert)"]
    row = calls["not self.disable_sequence_parallel_comm and self.input_is_parallel and (not self.is_expert)"]
    assert "gather_from_sequence_parallel_region(x, group=self.tp_group)" in column
    assert "scatter_to_sequence_parallel_region(x, group=self.tp_group)" in row
    init = ast.unparse(next(n for n in adapter.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"))
    assert "lin_out_gather_output = True if input_is_parallel else False" in init
    assert "sequence_parallel_input_regather: bool = False" in ast.unparse(_source("megatron.bridge", "peft/lora.py"))
    attributes = ast.unparse(_function(tree, "get_adapter_attributes_from_linear"))
    assert "if hasattr(m, 'config') and m.config.sequence_parallel and (not ub_overlap_ag):" in attributes
    assert "disable_sequence_parallel_comm = True" in attributes and "not getattr(m.config, 'tp_comm_overlap', False)" in attributes


def test_te_drops_the_gathered_layernorm_outputs_gradient_and_bridges_lora_asks_for_it():
    """LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED: in _LayerNormLinear.backward the returned LayerNorm output's gradient
    (grad_outputs[1]) is used once, under `not ctx.return_layernorm_output_gathered`; Bridge's LoRA sets the
    gathered form where sequence parallel is on and the linear has no userbuffers all-gather; TE is 2.4 or later."""
    import transformer_engine

    from mbridge_overlap.findings.rules.run import TE_GATHERED_GRAD_DROPPED
    from mbridge_overlap.upstream import releases

    tree = _source("transformer_engine.pytorch", "module/layernorm_linear.py")
    backward = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "backward")
    uses = [n for n in ast.walk(backward) if isinstance(n, ast.Subscript) and ast.unparse(n) == "grad_outputs[1]"]
    guards = [n for n in ast.walk(backward) if isinstance(n, ast.If) and any(u in ast.walk(n) for u in uses)]
    assert len(uses) == 1 and [ast.unparse(g.test) for g in guards] == [
        "ctx.return_layernorm_output and (not ctx.return_layernorm_output_gathered)"]
    attributes = ast.unparse(_function(_source("megatron.bridge", "peft/utils.py"), "get_adapter_attributes_from_linear"))
    assert "if hasattr(m, 'config') and m.config.sequence_parallel and (not ub_overlap_ag):" in attributes
    assert "m.return_layernorm_output_gathered = not sequence_parallel_input_regather" in attributes
    assert releases.version_key(transformer_engine.__version__) >= releases.version_key(TE_GATHERED_GRAD_DROPPED)


def test_te_reduce_scatters_a_bulk_wgrad_input_gradient_only_beside_the_wgrad_gemm():
    """PEFT_BULK_WGRAD_ON_FROZEN_WEIGHTS: with ub_bulk_wgrad the input gradient is the wgrad userbuffer's local chunk,
    the wgrad GEMM that reduce-scatters it (bulk_overlap) runs only `if ctx.requires_wgrad`, and nothing turns
    ub_bulk_wgrad off for a frozen weight any more (TE PR 702's guard); Megatron-Core passes tp_comm_bulk_wgrad,
    default True."""
    tree = _source("transformer_engine.pytorch", "module/layernorm_linear.py")
    backward = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "backward")
    text = ast.unparse(backward)
    assert "elif ctx.ub_bulk_wgrad:\n" in text and "dgrad = ub_obj_wgrad.get_buffer(local_chunk=True)" in text
    wgrad = [n for n in ast.walk(backward) if isinstance(n, ast.If) and ast.unparse(n.test) == "ctx.requires_wgrad"]
    assert any("'bulk_overlap': ctx.ub_bulk_wgrad" in ast.unparse(n) for n in wgrad)
    cleared = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and "ub_bulk_wgrad" in ast.unparse(n.targets[0])
               and ast.unparse(n.value) == "False"]
    assert not any("requires_grad" in ast.unparse(p) for n in cleared for p in _parents(tree, n))
    extension = ast.unparse(_source("megatron.core", "extensions/transformer_engine.py"))
    assert "extra_kwargs['ub_bulk_wgrad'] = self.config.tp_comm_bulk_wgrad" in extension
    config = ast.unparse(_source("megatron.core", "model_parallel_config.py"))
    assert "tp_comm_bulk_wgrad: bool = True" in config


def _parents(tree, node):
    """The if-statements that enclose `node` (their tests)."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and any(c is node for c in ast.walk(n)):
            out.append(n.test)
    return out
