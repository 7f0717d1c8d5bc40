"""evalAD AD2-1: the flex dispatcher's copies per token follow group-limited routing (moe_router_num_groups,
moe_router_group_topk), which Bridge gives DeepSeek-V3 (HF n_group 8, topk_group 4 through model_bridge.py's
CONFIG_MAPPING). The expected values are Megatron-Core 0.19.2's own group_limited_topk on 100,000 tokens of random
scores (tests/bridge/test_budget_routing.py runs it in the Bridge venv): DeepSeek-V3 at EP 64 reaches 7.49 ranks,
not the ungrouped 7.68, nor the 7.36 of a uniform 8-subset of the chosen groups' experts."""

from __future__ import annotations

import pytest

from mbridge_overlap import UsageError, api
from mbridge_overlap.budget.routing import ranks_per_token, split

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


# (experts, top-k, EP, EP ranks in the sender's NVLink domain, groups, chosen groups): the sender EP rank 0's copies
# kept, sent to the rest of its domain and across the network, and the other domains a token reaches, by Megatron-Core
# 0.19.2's group_limited_topk on 40,000 tokens (tests/bridge/test_budget_routing.py runs it)
MEASURED_SPLIT = [((256, 8, 64, 8, 8, 4), (0.115, 0.816, 6.549, 3.473)),  # DeepSeek-V3: a group is a node
                  ((256, 8, 32, 8, 4, 2), (0.214, 1.462, 4.997, 1.498)),
                  ((256, 8, 8, 8, 8, 4), (0.491, 3.473, 0.0, None))]  # one node: nothing crosses the network


@pytest.mark.parametrize("args,measured", MEASURED_SPLIT)
def test_the_copies_inside_the_domain_and_across_the_network(args, measured):
    experts, k, ep, local, groups, pick = args
    sp = split(experts, k, ep, local, True, groups, pick)
    for key, value in zip(("own", "nvlink", "network"), measured):
        assert sp[key] == pytest.approx(value, rel=0.03, abs=0.01), key
    assert sp.get("remote_domains") == (None if measured[3] is None else pytest.approx(measured[3], rel=0.02))
    # uniform routing: every rank as likely reached, so the network's share is the EP group's, groups or not
    assert sp["network"] / sp["copies"] == pytest.approx((ep - local) / ep, abs=0.002)


def test_deepseek_v3s_all_to_all_is_split_by_link():
    b = _budget()
    said = [a for a in b["assumptions"] if "group-limited routing" in a][0]
    assert ("of a token's 7.49 copies the sender with 8 of the 64 EP ranks in its NVLink domain keeps 0.12, sends 0.82 "
            "over NVLink and 6.55 across the network (87.5%; without the groups 6.72 of 7.68, 87.5%)") in said
    assert "the other NVLink domains a token reaches: 3.46 of 7 (4.63 without the groups)" in said
    assert "still priced as the EP group's over the network" not in said
    # each part on its link: the network part (6.55 of the 7.49 copies) sets the time, as the EP group's share did
    from mbridge_overlap.budget import system
    gpu = system.get("b200")
    item = _ep(b)
    sp = split(256, 8, 64, 8, True, 8, 4)
    parts = (sp["nvlink"] / sp["copies"], sp["network"] / sp["copies"])
    one = gpu.seconds("all_to_all", item["bytes"], 64, "network", 8, parts)
    assert item["ms"] == pytest.approx(one * item["count"] * 1e3, rel=1e-6)
    assert one == pytest.approx(gpu.seconds("all_to_all", item["bytes"], 64, "network", 8), rel=1e-3)


def test_the_bubble_says_how_it_is_counted():
    b = _budget()
    said = [a for a in b["assumptions"] if a.startswith("PP: the bubble")]
    assert said and "the costed rank's wait in an event simulation of Megatron-Core's schedule" in said[0]
    assert "forward_backward_pipelining_without_interleaving" in said[0]
    # DeepSeek-V3's layout: 8 layers on ranks 0-6, 5 and the MTP and output layers on rank 7 (tests/test_budget_pipeline.py)
    assert "so the costed rank 1 waits" in said[0]


def test_limited_devices_is_group_limited_routing_over_the_ep_ranks():
    """recheck66 AM-2: Megatron-Core's TransformerConfig (0.19.2 transformer_config.py:2357-2363, 0.18.2 :2133-2139)
    turns the deprecated moe_router_topk_limited_devices into group_topk = it, num_groups = EP where the groups are
    unset: priced as those groups, and said; beside moe_router_group_topk it raises ValueError, in its words."""
    over = {"model.expert_model_parallel_size": 16, "model.moe_token_dispatcher_type": "flex",
            "model.moe_flex_dispatcher_backend": "deepep", "model.num_moe_experts": 128, "model.moe_router_topk": 8}
    kw = {"recipe": "perf_recipes.qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", "model": "qwen3_30b_a3b", "gpus": 64}
    limited = api.budget({**over, "model.moe_router_topk_limited_devices": 2}, **kw).to_dict()["budget"]
    grouped = api.budget({**over, "model.moe_router_num_groups": 16, "model.moe_router_group_topk": 2},
                         **kw).to_dict()["budget"]
    plain = api.budget(over, **kw).to_dict()["budget"]
    assert _ep(limited)["bytes"] == _ep(grouped)["bytes"] < _ep(plain)["bytes"]  # (was the plain one's 105.5 MiB)
    assert any("moe_router_topk_limited_devices=2 is deprecated" in a and "moe_router_num_groups 16 (the EP size)" in a
               for a in limited["assumptions"])
    with pytest.raises(UsageError, match="moe_router_topk_limited_devices is deprecated and replaced by "
                                         "moe_router_group_topk and moe_router_num_groups"):
        api.budget({**over, "model.moe_router_topk_limited_devices": 2, "model.moe_router_num_groups": 16,
                    "model.moe_router_group_topk": 2}, **kw)
    # resolve without --model: the config does not run, said as the budget's refusal
    out = api.resolve({**over, "model.moe_router_topk_limited_devices": 2, "model.moe_router_num_groups": 16,
                       "model.moe_router_group_topk": 2, "model.seq_length": 4096, "dataset.seq_length": 4096,
                       "train.global_batch_size": 512}, recipe=kw["recipe"], gpus=64).to_dict()
    assert "moe_router_topk_limited_devices is deprecated and replaced by" in out["budget"]["unavailable"]


def test_deepeps_internode_dispatch_crosses_the_network_once_per_node():
    """evalAE AE2-3: with backend deepep Megatron-Core's flex dispatcher runs DeepEP's normal internode kernels
    (fused_a2a.py deep_ep.Buffer, normal mode): a token crosses the network once per other node reached (3.46 of 7 for
    DeepSeek-V3 at EP 64), forwarded over NVLink there, not once per EP rank (6.55); hybridep and alltoall keep per-rank."""
    from mbridge_overlap.budget import system
    gpu = system.get("b200")
    deepep, hybrid = _budget("model.moe_flex_dispatcher_backend=deepep"), _budget()
    item, per_rank = _ep(deepep), _ep(hybrid)
    sp = split(256, 8, 64, 8, True, 8, 4)
    assert sp["remote_domains"] == pytest.approx(3.46, abs=0.01) and sp["landing"] == pytest.approx(0.94, abs=0.01)
    parts = ((sp["copies"] - sp["landing"]) / sp["copies"], sp["remote_domains"] / sp["copies"])
    one = gpu.seconds("all_to_all", item["bytes"], 64, "network", 8, parts)
    assert item["bytes"] == per_rank["bytes"]
    assert item["ms"] == pytest.approx(one * item["count"] * 1e3, rel=1e-6)
    assert item["ms"] < 0.6 * per_rank["ms"]
    said = [a for a in deepep["assumptions"] if "DeepEP's normal internode kernels" in a]
    assert said and "3.46 cross the network (one per other domain reached, of 7)" in said[0]
    assert not [a for a in hybrid["assumptions"] if "DeepEP's normal internode kernels" in a]
    grouped = [a for a in deepep["assumptions"] if "group-limited routing" in a][0]
    assert "the budget prices one copy per rank" not in grouped
    alltoall = _budget("model.moe_token_dispatcher_type=alltoall", "model.moe_flex_dispatcher_backend=deepep")
    assert not [a for a in alltoall["assumptions"] if "DeepEP's normal internode kernels" in a]
