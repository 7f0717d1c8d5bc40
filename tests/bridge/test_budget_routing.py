"""evalAD AD2-1: the budget's EP ranks per token under group-limited routing (budget/routing.py) against a Monte
Carlo of Megatron-Core's own moe_utils.group_limited_topk on random scores (the Bridge venv's Megatron-Core), and
the groups the budget refuses against TransformerConfig.__post_init__'s own refusals."""

from __future__ import annotations

import pytest

from mbridge_overlap import UsageError
from mbridge_overlap.budget import shape as shapes
from mbridge_overlap.budget.routing import ranks_per_token, split

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


# (experts, top-k, EP, EP ranks per NVLink domain, groups, chosen groups): DeepSeek-V3 at EP 64 with 8 GPUs a node (a
# group is a node), EP 32 with 4 groups of two nodes, EP 8 in one node; and 6 groups that do not align with 8 ranks
SPLITS = [(256, 8, 64, 8, 8, 4), (256, 8, 32, 8, 4, 2), (256, 8, 8, 8, 8, 4), (48, 6, 8, 2, 6, 2), (256, 8, 64, 8, None, None)]


@pytest.mark.parametrize("experts,k,ep,local,groups,pick", SPLITS)
def test_split_against_group_limited_topk(experts, k, ep, local, groups, pick):
    """Each sender's copies inside its NVLink domain (EP ranks local x d onward, as the expert grid places them) and
    across the network, and the other domains a token reaches, by the router's own code on random scores."""
    import torch
    from megatron.core.transformer.moe.moe_utils import group_limited_topk

    torch.manual_seed(0)
    tokens = 40_000
    scores = torch.randn(tokens, experts).sigmoid()
    index = (group_limited_topk(scores, k, tokens, experts, groups, pick)[1] if groups
             else torch.topk(scores, k, dim=-1)[1])
    hit = torch.zeros(tokens, ep).scatter_(1, index // (experts // ep), 1)
    sp = split(experts, k, ep, local, True, groups, pick)
    worst = None
    for sender in range(ep):
        home = hit[:, sender // local * local:(sender // local + 1) * local].sum(1)
        network = (hit.sum(1) - home).mean().item()
        if worst is None or network > worst[2]:
            worst = (hit[:, sender].mean().item(), home.mean().item() - hit[:, sender].mean().item(), network)
    assert sp["network"] == pytest.approx(worst[2], rel=0.01, abs=0.01)
    assert sp["own"] + sp["nvlink"] == pytest.approx(worst[0] + worst[1], rel=0.02, abs=0.01)
    if ep > local:
        nodes = hit.view(tokens, ep // local, local).amax(2)
        assert sp["remote_domains"] == pytest.approx((nodes.sum(1) - nodes[:, 0]).mean().item(), rel=0.02)


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


@pytest.mark.parametrize("groups,pick,limited", [(None, None, 2), (16, 2, 2), (None, 2, 2), (8, None, 4), (None, None, 1)])
def test_limited_devices_as_transformer_config_reads_it(groups, pick, limited):
    """recheck66 AM-2: moe_router_topk_limited_devices is group_topk = it, num_groups = EP where group_topk is unset,
    and a ValueError beside group_topk, as the installed Megatron-Core's TransformerConfig says (its words)."""
    import warnings

    from megatron.core.transformer.transformer_config import TransformerConfig

    fields = {"moe_router_num_groups": groups, "moe_router_group_topk": pick, "moe_router_topk_limited_devices": limited}
    ep = 16
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=8, num_moe_experts=128,
                                       moe_router_topk=8, moe_ffn_hidden_size=32, expert_model_parallel_size=ep, **fields)
        theirs = (config.moe_router_num_groups, config.moe_router_group_topk)
    except (ValueError, AssertionError) as exc:
        theirs = str(exc)
    values = {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 256, "num_attention_heads": 8, "vocab_size": 1024,
              "num_moe_experts": 128, "moe_router_topk": 8, **{k: v for k, v in fields.items() if v is not None}}
    try:
        sh, _ = shapes.limited_devices(shapes.of(None, values)[0], ep)
        ours = (sh.moe_router_num_groups, sh.moe_router_group_topk)
    except UsageError as exc:
        ours = str(exc)
    if isinstance(theirs, str):
        assert isinstance(ours, str) and ours.startswith(theirs), (ours, theirs)
    else:
        assert ours == theirs
