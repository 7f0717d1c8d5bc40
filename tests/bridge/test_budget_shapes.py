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
