"""The budget's recompute model against Megatron-Core's own code (read with ast): which layers each method
recomputes, over what a virtual stage holds, the default selective module, and which modules selective recompute
reruns (budget/layout.py recomputed)."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from mbridge_overlap.budget.layout import Layout, recomputed


def _tree(relative: str) -> ast.Module:
    root = Path(importlib.util.find_spec("megatron.core").submodule_search_locations[0])
    return ast.parse((root / relative).read_text(encoding="utf-8"))


def _function(tree, name):
    return next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)


def test_uniform_recomputes_every_layer_and_block_the_first_layers_of_a_virtual_stage():
    body = ast.unparse(_function(_tree("recompute.py"), "checkpointed_forward"))
    # uniform: chunks of recompute_num_layers over all of the block's layers, each checkpointed
    assert "while layer_idx < self.num_layers_per_pipeline_rank:" in body and "chunk_runner(layer_idx, chunk_end, True)" in body
    # block: the first recompute_num_layers layers of the block only
    assert "layer_idx < self.config.recompute_num_layers + recompute_skip_num_layers" in body
    # a block is one virtual stage's layers (each virtual stage builds a TransformerBlock of its own)
    init = ast.unparse(_function(_tree("transformer/transformer_block.py"), "__init__"))
    assert "self.num_layers_per_pipeline_rank = len(self.layers)" in init


def test_selective_recompute_defaults_and_modules_are_megatron_cores():
    def shows(relative, *lines):  # consecutive statements, whatever their indentation
        return re.search(r"\n\s*".join(map(re.escape, lines)), ast.unparse(_tree(relative))) is not None

    assert shows("transformer/transformer_config.py", "if self.recompute_modules is None:",
                 "self.recompute_modules = ['core_attn']")
    assert shows("transformer/attention.py", "self.checkpoint_core_attention = self.config.recompute_granularity == "
                 "'selective' and 'core_attn' in self.config.recompute_modules")
    assert shows("transformer/transformer_layer.py", "if 'mlp' in self.config.recompute_modules:", "if not self.is_moe_layer:",
                 "self.recompute_mlp = True")


def test_the_budget_reads_them_so():
    def lay(recompute, vp=1):
        return Layout(tp=1, pp=1, vp=vp, cp=1, ep=1, dp=1, sp=False, seq=4096, mbs=1, gbs=8, precision="bf16", domain=8,
                      settings={}, ddp={}, recompute=recompute)

    assert recomputed(lay(("full", "uniform", 1, ("core_attn",))), 20, False)["layer"] == 1.0
    assert recomputed(lay(("full", "block", 2, ("core_attn",)), vp=5), 20, False)["layer"] == 0.5  # 2 of 4 a virtual stage
    assert recomputed(lay(("selective", None, None, ("core_attn",))), 20, False) == {"layer": 0.0, "core_attn": 1.0, "mlp": 0.0,
                                                                                     "shared": 0.0, "mla_up": 0.0}
    assert recomputed(lay(("selective", None, None, ("mlp",))), 20, True)["mlp"] == 0.0  # mlp is the dense layers'
    # a MoE layer's shared expert: inside the moe checkpoint, or one of its own (shared_experts)
    assert recomputed(lay(("selective", None, None, ("moe",))), 20, True)["shared"] == 1.0
    assert recomputed(lay(("selective", None, None, ("shared_experts",))), 20, True) == {"layer": 0.0, "core_attn": 0.0, "mlp": 0.0,
                                                                                        "shared": 1.0, "mla_up": 0.0}
    assert recomputed(lay(("selective", None, None, ("mla_up_proj", "mlp"))), 20, False)["mla_up"] == 1.0
    assert recomputed(lay(("selective", None, None, ("shared_experts", "mlp"))), 20, False)["shared"] == 0.0


def test_a_shared_expert_is_recomputed_with_the_moe_layer_or_on_its_own():
    """MoELayer.forward's checkpointed custom_forward (moe in recompute_modules) computes the shared expert first;
    shared_experts in recompute_modules checkpoints the shared expert alone (MoELayer.shared_experts_compute)."""
    import inspect

    from megatron.core.transformer.moe.moe_layer import MoELayer

    init = inspect.getsource(MoELayer.__init__)
    assert 'and "shared_experts" in config.recompute_modules' in init and 'and "moe" in config.recompute_modules' in init
    forward = inspect.getsource(MoELayer.forward)
    assert "shared_expert_output = self.shared_experts_compute(hidden_states)" in forward
    assert "if self.moe_layer_recompute and self.training:" in forward
    assert "if self.shared_experts_recompute:" in inspect.getsource(MoELayer.shared_experts_compute)


def test_the_recompute_modules_megatron_core_accepts_are_the_resolver_s():
    """RECOMPUTE_MODULES_REJECTED: TransformerConfig.__post_init__'s allowed_modules for selective recompute, read
    with ast from the installed Megatron-Core, equal the set the resolver keeps for its release."""
    import ast
    import importlib.util
    from pathlib import Path

    from megatron.core import __version__ as core_version
    from mbridge_overlap.run import resolver
    from mbridge_overlap.upstream import releases

    path = Path(importlib.util.find_spec("megatron.core.transformer.transformer_config").origin)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    post_init = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__post_init__")
    sets = sorted((n for n in ast.walk(post_init) if isinstance(n, ast.Assign)
                   and any(getattr(t, "id", None) == "allowed_modules" for t in n.targets)), key=lambda n: n.lineno)
    first = ast.literal_eval(sets[0].value)  # the recompute one comes first in the source (offload_modules' later)
    assert "core_attn" in first and "qkv_linear" not in first
    known = sorted(resolver.RECOMPUTE_MODULES, key=releases.version_key)
    since = [k for k in known if releases.version_key(k) <= releases.version_key(core_version)]
    assert set(resolver.RECOMPUTE_MODULES[since[-1]]) == first


def test_mla_up_proj_checkpoints_the_up_projections_and_not_the_rotary_gather():
    """recheck59 AF4: MLASelfAttention checkpoints qkv_up_proj_and_rope_apply (the up projections: linear_q_up_proj or
    linear_q_proj, linear_kv_up_proj) where recompute_modules holds mla_up_proj; the rotary key part's sequence-parallel
    gather runs before it, once (the budget's mla.tp_collectives)."""
    import inspect

    from megatron.core.transformer.multi_latent_attention import MLASelfAttention, MultiLatentAttention

    init = inspect.getsource(MultiLatentAttention.__init__)
    assert '"mla_up_proj" in self.config.recompute_modules' in init
    qkv = inspect.getsource(MLASelfAttention.get_query_key_value_tensors)
    up = qkv.index("def qkv_up_proj_and_rope_apply(")
    assert "self.linear_kv_up_proj(" in qkv[up:] and "self.linear_q_up_proj(" in qkv[up:]
    assert qkv.index("gather_from_sequence_parallel_region(k_pos_emb") < up
    assert "self.qkv_up_checkpoint.checkpoint(" in qkv and "qkv_up_proj_and_rope_apply, q_compressed" in qkv
