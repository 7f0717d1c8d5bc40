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
