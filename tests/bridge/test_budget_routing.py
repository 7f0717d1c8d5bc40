"""evalAD AD2-1: the budget's EP ranks per token under group-limited routing (budget/routing.py) against a Monte
Carlo of Megatron-Core's own moe_utils.group_limited_topk on random scores (the Bridge venv's Megatron-Core), and
the groups the budget refuses against TransformerConfig.__post_init__'s own refusals."""

from __future__ import annotations

import pytest

from mbridge_overlap import UsageError
from mbridge_overlap.budget import shape as shapes
from mbridge_overlap.budget.routing import ranks_per_token

SHAPES = [(256, 8, 64, 8, 4), (256, 8, 32, 8, 4), (256, 8, 8, 8, 4), (160, 6, 16, 8, 3), (64, 6, 8, 4, 2),
          (128, 8, 32, 16, 2), (96, 6, 12, 8, 2), (256, 8, 4, 8, 4), (256, 8, 64, 8, 1)]


@pytest.mark.parametrize("experts,k,ep,groups,pick", SHAPES)
def test_ranks_per_token_against_group_limited_topk(experts, k, ep, groups, pick):
    import torch
    from megatron.core.transformer.moe.moe_utils import group_limited_topk

    torch.manual_seed(0)
    tokens = 40_000
    _, index = group_limited_topk(torch.randn(tokens, experts).sigmoid(), k, tokens, experts, groups, pick)
    ranks = torch.zeros(tokens, ep).scatter_(1, index // (experts // ep), 1).sum(1)
    measured, error = ranks.mean().item(), ranks.std().item() / tokens ** 0.5
    assert abs(ranks_per_token(experts, k, ep, groups, pick) - measured) < max(4 * error, 0.01 * measured)


@pytest.mark.parametrize("groups,pick", [(None, 2), (6, 2), (4, 8), (8, 4), (8, None), (16, 16)])
def test_the_budget_refuses_groups_where_transformer_config_does(groups, pick):
    from megatron.core.transformer.transformer_config import TransformerConfig

    fields = {"moe_router_num_groups": groups, "moe_router_group_topk": pick}
    try:
        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=8, num_moe_experts=128, moe_router_topk=8,
                          moe_ffn_hidden_size=32, **fields)
        taken = True
    except (ValueError, AssertionError):
        taken = False
    values = {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 256, "num_attention_heads": 8, "vocab_size": 1024,
              "num_moe_experts": 128, "moe_router_topk": 8, **{k: v for k, v in fields.items() if v is not None}}
    try:
        shapes.of(None, values)
        ours = True
    except UsageError:
        ours = False
    assert ours == taken, fields
