"""evalAD AD2-1: the flex dispatcher's copies per token follow group-limited routing (moe_router_num_groups,
moe_router_group_topk), which Bridge gives DeepSeek-V3 (HF n_group 8, topk_group 4 through model_bridge.py's
CONFIG_MAPPING). The expected values are Megatron-Core 0.19.2's own group_limited_topk on 100,000 tokens of random
scores (tests/bridge/test_budget_routing.py runs it in the Bridge venv): DeepSeek-V3 at EP 64 reaches 7.49 ranks,
not the ungrouped 7.68, nor the 7.36 of a uniform 8-subset of the chosen groups' experts."""

from __future__ import annotations

import pytest

from mbridge_overlap import UsageError, api
from mbridge_overlap.budget.routing import ranks_per_token

DSV3 = "perf_recipes.deepseek_v3_pretrain_256gpu_b200_bf16_config"


def _budget(*overrides, **kw):
    over = dict(o.split("=", 1) for o in ("model.expert_model_parallel_size=64", *overrides))
    return api.budget(over, recipe=DSV3, gpus=512, **kw).to_dict()["budget"]


def _ep(b):
    (item,) = [c for c in b["collectives"] if c["dimension"] == "ep" and c["collective"] == "all_to_all"]
    return item


# (experts, top-k, EP, groups, chosen groups): distinct EP ranks per token by Megatron-Core's group_limited_topk
# (sigmoid of normal logits; softmax and uniform scores agree within 0.8 %), 100,000 tokens each
MEASURED = [((256, 8, 64, 8, 4), 7.486), ((256, 8, 32, 8, 4), 6.854), ((256, 8, 8, 8, 4), 3.964),
            ((256, 8, 16, 8, 4), 5.725), ((160, 6, 16, 8, 3), 4.381), ((64, 6, 8, 4, 2), 3.504),
            ((128, 8, 32, 16, 2), 3.908), ((96, 6, 12, 8, 2), 3.328), ((256, 8, 4, 8, 4), 3.123)]


@pytest.mark.parametrize("args,measured", MEASURED)
def test_ranks_per_token_match_megatron_cores_router(args, measured):
    assert ranks_per_token(*args) == pytest.approx(measured, rel=0.015)


def test_deepseek_v3s_all_to_all_is_priced_with_its_groups():
    b = _budget()
    size = _ep(b)["bytes"]
    tokens_x_hidden = 4096 * 7168 * 2  # one micro-batch's tokens on a rank, hidden 7168, BF16
    assert size / tokens_x_hidden == pytest.approx(7.486, rel=0.01)  # (was 7.676: 429.8 MiB, now 419.4)
    said = [a for a in b["assumptions"] if "group-limited routing" in a]
    assert said and "moe_router_num_groups 8, moe_router_group_topk 4" in said[0]
    assert "a group is 8 EP ranks, so a token reaches at most 32 of the 64" in said[0]
    # the run's own null: no groups, the free routing's 7.68 again
    free = _budget("model.moe_router_num_groups=null", "model.moe_router_group_topk=null")
    assert _ep(free)["bytes"] / tokens_x_hidden == pytest.approx(7.676, rel=0.001)
    assert not [a for a in free["assumptions"] if "group-limited routing" in a]


def test_an_override_sets_the_groups_of_a_model_without_them():
    over = {"model.expert_model_parallel_size": 8, "model.moe_token_dispatcher_type": "flex",
            "model.moe_flex_dispatcher_backend": "deepep"}
    recipe, model = "perf_recipes.qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", "qwen3_30b_a3b"
    plain = api.budget(over, recipe=recipe, model=model, gpus=32).to_dict()["budget"]
    grouped = api.budget({**over, "model.moe_router_num_groups": 8, "model.moe_router_group_topk": 2}, recipe=recipe,
                         model=model, gpus=32).to_dict()["budget"]
    assert _ep(grouped)["bytes"] / _ep(plain)["bytes"] == pytest.approx(ranks_per_token(128, 8, 8, 8, 2)
                                                                        / ranks_per_token(128, 8, 8), rel=1e-3)
    assert ranks_per_token(128, 8, 8, 8, 2) < 2.01  # a group is one rank: at most the 2 chosen groups' ranks


@pytest.mark.parametrize("groups,pick,words", [
    (None, 2, "moe_router_num_groups must be specified"),
    (6, 2, "should be divisible by moe_router_num_groups (6)"),
    (4, 8, "moe_router_group_topk (8) should be smaller than moe_router_num_groups (4)"),
])
def test_megatron_cores_refusals_of_the_groups(groups, pick, words):
    shape = {"moe_router_group_topk": pick, **({"moe_router_num_groups": groups} if groups else {})}
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        api.budget({}, recipe="perf_recipes.qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", model="qwen3_30b_a3b",
                   gpus=16, shape=shape)
