"""The shapes the budget takes are the ones Megatron-Core's TransformerConfig takes (its __post_init__ in the Bridge
venv): KV groups that are a multiple or a divisor of TP, a hidden size that is no multiple of the heads."""

from __future__ import annotations

import pytest

from mbridge_overlap import UsageError, api

RECIPE = "llama3_70b_pretrain_64gpu_h100_bf16_config"  # TP 4


def _megatron_takes(**shape) -> bool:
    from megatron.core.transformer.transformer_config import TransformerConfig

    try:
        TransformerConfig(num_layers=2, tensor_model_parallel_size=4, **shape)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("shape", [
    {"hidden_size": 8192, "num_attention_heads": 64, "num_query_groups": 2},
    {"hidden_size": 8192, "num_attention_heads": 64, "num_query_groups": 8},
    {"hidden_size": 8192, "num_attention_heads": 64, "num_query_groups": 1},
    {"hidden_size": 8200, "num_attention_heads": 64, "num_query_groups": 8},
    {"hidden_size": 8192, "num_attention_heads": 60, "num_query_groups": 6},
])
def test_the_budget_takes_a_shape_exactly_where_transformer_config_does(shape):
    try:
        api.budget(recipe=RECIPE, shape=shape)
        ours = True
    except UsageError:
        ours = False
    assert ours == _megatron_takes(**shape), shape


def test_a_refused_split_is_raised_where_the_finding_says():
    """SHAPE_REFUSED_BY_MEGATRON_CORE names where Megatron-Core raises: TransformerConfig for the heads (at finalize),
    the column-parallel layer's divide() for the MLP's size and BaseMoELayer's assert for the experts (building the model)."""
    import inspect

    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from megatron.core.transformer.moe.moe_layer import BaseMoELayer
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.utils import divide

    with pytest.raises(ValueError, match=r"num_attention_heads \(6\) must be a multiple of tensor_model_parallel_size \(4\)"):
        TransformerConfig(num_layers=2, hidden_size=8192, num_attention_heads=6, tensor_model_parallel_size=4)
    assert "self.output_size_per_partition = divide(output_size, world_size)" in inspect.getsource(ColumnParallelLinear.__init__)
    with pytest.raises(AssertionError, match="28673 is not divisible by 4"):
        divide(28673, 4)
    assert "assert self.config.num_moe_experts % ep_size == 0" in inspect.getsource(BaseMoELayer.__init__)
    findings = {f.id: f for f in api.resolve(recipe=RECIPE, overrides={"model.num_attention_heads": 6}).findings}
    assert findings["SHAPE_REFUSED_BY_MEGATRON_CORE"].severity == "error"


_PATTERN = [0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("freq", [_PATTERN, 3, 1])
@pytest.mark.parametrize("embedding_counted", [False, True])
def test_the_moe_layers_of_each_pipeline_stage_are_megatron_core_s(freq, embedding_counted):
    """moe_layer_freq (an int N or a 0/1 list) on PP 4 x VP 2, with and without the embedding counted as a layer:
    the MoE layers of every stage's model chunks, in order, as get_gpt_decoder_block_spec slices them (pp_rank and
    vp_stage given: no process group), against the budget's stage numbering (layout.stage_numbers, the costed
    stage) and the first stage's (dp.numbers, the DP buckets)."""
    from types import SimpleNamespace

    import torch
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_config import TransformerConfig

    from mbridge_overlap.budget import dp, layout, shape as shapes

    n = 16 - embedding_counted
    freq = freq[:n] if isinstance(freq, list) else freq
    extra = {"account_for_embedding_in_pipeline_split": True} if embedding_counted else {}
    cfg = TransformerConfig(num_layers=n, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=4,
                            virtual_pipeline_model_parallel_size=2, pipeline_dtype=torch.bfloat16, num_moe_experts=4,
                            moe_layer_freq=freq, **extra)
    sh, _ = shapes.of(None, {"num_layers": n, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 128,
                             "num_moe_experts": 4, "moe_layer_freq": tuple(freq) if isinstance(freq, list) else freq})
    lay = SimpleNamespace(pp=4, vp=2, layer_slots=(embedding_counted, False), chunk_offset=int(embedding_counted), stages=())
    for rank in range(4):
        theirs = [getattr(s.submodules.mlp, "func", None) is MoELayer
                  for vp in range(2) for s in get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm",
                                                                         vp_stage=vp, pp_rank=rank).layer_specs]
        mine = [sh.is_moe_layer(i) for i in layout.stage_numbers(lay, n, rank)]
        assert mine == theirs, rank
        if rank == 0:
            assert [sh.is_moe_layer(i) for i in dp.numbers(lay, len(theirs))] == theirs
    assert any(mine) and (freq == 1 or not all(mine))


@pytest.mark.parametrize("freq", [[1, 0, 1], [0, 1, 1, 1, 1], 0, [1, 2, 1, 1]])
def test_a_moe_layer_freq_megatron_core_refuses_the_budget_refuses(freq):
    """A pattern of another length than the layers (an assert in get_gpt_decoder_layer_specs), or with another value
    than 0 and 1 (its ValueError), and an int below 1 (i % 0): refused by both."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_layer_specs
    from megatron.core.transformer.transformer_config import TransformerConfig

    with pytest.raises((AssertionError, ValueError, ZeroDivisionError)):
        cfg = TransformerConfig(num_layers=4, hidden_size=64, num_attention_heads=4, num_moe_experts=4, moe_layer_freq=freq)
        get_gpt_decoder_layer_specs(cfg, use_transformer_engine=False, normalization="RMSNorm")
    from mbridge_overlap.budget import shape as shapes

    with pytest.raises(UsageError, match="moe_layer_freq"):
        shapes.of(None, {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 128,
                         "num_moe_experts": 4, "moe_layer_freq": tuple(freq) if isinstance(freq, list) else freq})
