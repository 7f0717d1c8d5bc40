"""Which NVLink domain each rank of a group sits in: a dimension's collectives cross the network when any of its
groups has ranks in two domains (Megatron-Core's order tp-cp-ep-dp-pp), not only when a group is larger than one."""

from __future__ import annotations

import itertools
from dataclasses import replace
from types import SimpleNamespace

import pytest

from mbridge_overlap import api
from mbridge_overlap.budget import layout
from mbridge_overlap.budget.layout import fewest_local, spans_domains


def _groups(tp, cp, dp, pp, dim):
    """Every group of a dimension, enumerated from the coordinates (rank = t + tp*(c + cp*(d + dp*p)))."""
    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    rank = lambda t, c, d, p: t + tp * (c + cp * (d + dp * p))  # noqa: E731
    others = [k for k in sizes if k != dim and not (dim == "dpcp" and k in ("dp", "cp"))]
    varying = ["cp", "dp"] if dim == "dpcp" else [dim]
    for fixed in itertools.product(*(range(sizes[k]) for k in others)):
        coords = dict(zip(others, fixed))
        group = []
        for moving in itertools.product(*(range(sizes[k]) for k in varying)):
            coords.update(zip(varying, moving))
            group.append(rank(coords["tp"], coords["cp"], coords["dp"], coords["pp"]))
        yield group


@pytest.mark.parametrize("tp, cp, dp, pp, domain", [
    (1, 1, 32, 8, 72), (8, 1, 18, 1, 36), (4, 2, 8, 4, 8), (8, 2, 9, 1, 72), (2, 4, 4, 4, 72), (4, 1, 16, 4, 8),
    (1, 2, 16, 2, 36), (4, 4, 2, 2, 72),
])
def test_a_dimension_crosses_where_some_group_of_it_does(tp, cp, dp, pp, domain):
    lay = SimpleNamespace(tp=tp, cp=cp, dp=dp, pp=pp, domain=domain)
    for dim, stride, size in (("tp", 1, tp), ("cp", tp, cp), ("dpcp", tp, cp * dp), ("pp", tp * cp * dp, pp)):
        crosses = any(len({r // domain for r in g}) > 1 for g in _groups(tp, cp, dp, pp, dim))
        assert spans_domains(lay, stride, size) == crosses, (dim, tp, cp, dp, pp, domain)


@pytest.mark.parametrize("tp, cp, dp, pp, domain", [(1, 1, 32, 8, 72), (8, 1, 18, 1, 36), (2, 4, 4, 4, 72), (1, 2, 16, 2, 36)])
def test_the_fewest_ranks_a_group_has_in_one_domain_are_counted_over_every_group(tp, cp, dp, pp, domain):
    lay = SimpleNamespace(tp=tp, cp=cp, dp=dp, pp=pp, domain=domain)
    for dim, stride, size in (("tp", 1, tp), ("cp", tp, cp), ("dpcp", tp, cp * dp), ("pp", tp * cp * dp, pp)):
        fewest = min(min(sum(1 for r in g if r // domain == x // domain) for x in g) for g in _groups(tp, cp, dp, pp, dim))
        assert fewest_local(lay, stride, size) == fewest, (dim, tp, cp, dp, pp, domain)


def test_an_all_to_all_of_a_group_across_two_domains_is_priced_by_its_worst_placed_rank():
    """evalO O1: 256 GB200 at EP 32 (domains of 72): ranks 64-95 are an EP group with 8 ranks in one domain and 24 in
    the next; the all-to-all was labelled network and priced as if all 32 shared a domain (the 64-GPU domain's time)."""
    recipe = "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8cs_config"

    def ep(domain):
        b = api.budget(recipe=recipe, machine_facts={"nvlink_domain": domain}).to_dict()["budget"]
        (c,) = [c for c in b["collectives"] if c["dimension"] == "ep"]
        return c, b["assumptions"]

    (inside, _), (across, said) = ep(64), ep(72)
    assert (inside["link"], across["link"]) == ("nvlink", "network") and across["ms"] > 2 * inside["ms"]
    assert any("as few as 8 ranks in one NVLink domain of 72" in a for a in said)


def test_the_budget_prices_a_group_across_a_rack_boundary_at_the_network():
    # 144 GB200 with NVLink domains of 36: TP 8 groups 32-39 and 104-111 straddle a boundary (8 does not divide 36)
    over = {"model.tensor_model_parallel_size": 8, "model.pipeline_model_parallel_size": 1,
            "model.virtual_pipeline_model_parallel_size": None, "model.context_parallel_size": 1, "train.global_batch_size": 144}
    b = api.budget(over, recipe="llama3_70b_pretrain_64gpu_gb200_bf16_config", gpus=144,
                   machine_facts={"nvlink_domain": 36}).to_dict()["budget"]
    assert {c["link"] for c in b["collectives"] if c["dimension"] == "tp"} == {"network"}
    b = api.budget(over, recipe="llama3_70b_pretrain_64gpu_gb200_bf16_config", gpus=144,
                   machine_facts={"nvlink_domain": 72}).to_dict()["budget"]
    assert {c["link"] for c in b["collectives"] if c["dimension"] == "tp"} == {"nvlink"}


def test_moe_layers_make_only_the_attention_s_tp_collectives():
    """Qwen3-235B-A22B (every layer MoE, expert TP 1): per layer and micro-batch 3 all-gathers and 2 reduce-scatters
    (linear_qkv's and linear_proj's), where a dense layer of the same layout makes 6 and 4."""
    recipe = "perf_recipes.qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config"
    moe = api.budget({}, recipe=recipe).to_dict()["budget"]
    dense = api.budget({}, recipe=recipe, model="llama3_70b").to_dict()["budget"]

    def per_layer(b, collective, layers):
        return sum(c["count"] for c in b["collectives"] if c["dimension"] == "tp" and c["collective"] == collective) / (
            layers * b["layout"]["micro_batches"])

    stage = moe["layout"]["pp"]
    assert per_layer(moe, "all_gather", -(-94 // stage)) == 3 and per_layer(moe, "reduce_scatter", -(-94 // stage)) == 2
    assert per_layer(dense, "all_gather", -(-80 // stage)) == 6 and per_layer(dense, "reduce_scatter", -(-80 // stage)) == 4


def test_what_the_budget_prices_as_another_path_says_so():
    """The allgather token dispatcher is priced as the alltoall one; Megatron-FSDP as the distributed optimizer."""
    moe = api.budget({"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True,
                      "model.expert_model_parallel_size": 8, "model.moe_token_dispatcher_type": "allgather"},
                     recipe="qwen3_30b_a3b_pretrain_config", gpus=32).to_dict()["budget"]
    assert any("allgather token dispatcher" in a for a in moe["assumptions"])
    fsdp = api.budget({}, recipe="llama3_70b_pretrain_64gpu_gb200_bf16_config").to_dict()["budget"]
    assert any("Megatron-FSDP" in a for a in fsdp["assumptions"])
    plain = api.budget({}, recipe="llama3_70b_pretrain_64gpu_h100_bf16_config").to_dict()["budget"]
    assert not any("Megatron-FSDP" in a or "allgather token dispatcher" in a for a in plain["assumptions"])


def test_fewer_gpus_per_node_make_a_smaller_domain_where_nvlink_does_not_span_nodes():
    """fuzzV V2-12: --gpus-per-node 4 on H100 kept its 8-GPU domain and called it multi-node NVLink, and TP 8 over
    nodes of 4 was priced at NVLink's rate. An H100, B200 or B300 node's NVLink is the node (Bridge's perf scripts:
    NVLINK_DOMAIN_SIZE 8, USE_MNNVL 0), so the domain follows the GPUs per node given, and says so; a GB200's rack
    domain does not; a domain given stands."""
    recipe = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    m = api.resolve(recipe=recipe, machine_facts={"gpus_per_node": 4}).to_dict()["inputs"]["machine"]
    assert (m["nvlink_domain"], m["mnnvl"]) == (4, False) and "4 GPUs per node given" in m["assumed"]["nvlink_domain"]
    over = {"model.tensor_model_parallel_size": 8, "comm_overlap.tp_comm_overlap": False}
    links = [{c["link"] for c in api.budget(over, recipe=recipe, machine_facts=facts).to_dict()["budget"]["collectives"]
              if c["dimension"] == "tp"} for facts in ({"gpus_per_node": 4}, {})]
    assert links == [{"network"}, {"nvlink"}]
    assert "UB_TP_ACROSS_NVLINK_DOMAINS" in {f.id for f in api.resolve({"model.tensor_model_parallel_size": 8}, recipe=recipe,
                                                                        machine_facts={"gpus_per_node": 4}).errors}
    for gpu, facts, domain in (("gb200", {"gpus_per_node": 2}, 72), ("h100", {"gpus_per_node": 16}, 8),
                               ("h100", {"gpus_per_node": 4, "nvlink_domain": 8}, 8)):
        m = api.resolve(gpus=8, gpu=gpu, machine_facts=facts).to_dict()["inputs"]["machine"]
        assert m["nvlink_domain"] == domain and m["mnnvl"] == (domain > facts["gpus_per_node"])


def _segment_domain(gpus: int, per_node: int = 4) -> int:
    """The GPUs of one Slurm segment as Bridge's perf launcher sizes it (scripts/performance/utils/executors.py
    slurm_executor): the job's nodes up to 18, else the largest divisor of them up to 18."""
    nodes = -(-gpus // per_node)
    return per_node * (nodes if nodes <= 18 else max(s for s in range(1, 19) if nodes % s == 0))


@pytest.mark.parametrize("gpus, domain", [(256, 64), (40, 40), (76, 4), (288, 72), (72, 72)])
def test_a_perf_recipe_on_gb200_is_placed_in_the_perf_launcher_s_slurm_segments(gpus, domain):
    """evalAG AG-7: Bridge's perf launcher asks Slurm for segments of 16 nodes for 256 GB200 (64 nodes of 4), each in
    one NVLink domain; the budget placed ranks on consecutive domains of 72 from rank 0."""
    assert _segment_domain(gpus) == domain
    lay = replace(_qwen_layout(), domain=72)
    sc = SimpleNamespace(machine=SimpleNamespace(sources={"nvlink_domain": "gb200"}, gpus_per_node=4),
                         recipe={"package": "perf_recipes"}, gpus=gpus)
    placed = layout.placed(lay, sc)
    assert placed.domain == domain and placed.placement[0] == "perf_launcher"
    assert f"--segment={domain // 4} " in placed.placement[1]
    library = layout.placed(lay, SimpleNamespace(**{**vars(sc), "recipe": {"package": "recipes"}}))
    assert (library.domain, library.placement[0]) == (72, "assumed")


def _qwen_layout():
    return api.budget(recipe="qwen3_235b_a22b_pretrain_256gpu_gb200_fp8cs_config").budget.layout


def test_the_qwen3_gb200_recipe_s_ep_groups_stay_in_one_domain_and_the_budget_says_why():
    b = api.budget(recipe="qwen3_235b_a22b_pretrain_256gpu_gb200_fp8cs_config").to_dict()["budget"]
    place = b["layout"]["placement"]
    assert (b["layout"]["nvlink_domain"], place["from"]) == (64, "perf_launcher")
    assert "--segment=16 for 64 nodes of 4 GPUs" in place["said"] and "ep_ms" not in place
    (ep,) = [c for c in b["collectives"] if c["dimension"] == "ep"]
    assert ep["link"] == "nvlink"
    same = api.budget(recipe="qwen3_235b_a22b_pretrain_256gpu_gb200_fp8cs_config",
                      machine_facts={"nvlink_domain": 64}).to_dict()["budget"]
    assert same["layout"]["placement"]["from"] == "given" and same["iteration_ms"] == b["iteration_ms"]


def test_an_assumed_placement_says_how_much_of_the_iteration_it_decides():
    """Not a perf recipe's launcher (8 GPUs a node given: the perf launcher sizes no segment): ranks on consecutive
    72-GPU domains from rank 0, EP 32 straddling two; the answer gives EP and the iteration with that placement and
    with every EP group in one domain, the latter the budget of domains of 64 given."""
    recipe = "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8cs_config"
    b = api.budget(recipe=recipe, machine_facts={"gpus_per_node": 8}).to_dict()["budget"]
    place = b["layout"]["placement"]
    assert (b["layout"]["nvlink_domain"], place["from"]) == (72, "assumed")
    ep_total = sum(c["ms"] for c in b["collectives"] if c["dimension"] == "ep")
    assert place["ep_ms"] == pytest.approx(ep_total, abs=0.01) and place["iteration_ms"] == b["iteration_ms"]
    aligned = api.budget(recipe=recipe, machine_facts={"gpus_per_node": 8, "nvlink_domain": 64}).to_dict()["budget"]
    assert place["nvlink_domain_in_one_domain"] == 64
    assert place["iteration_ms_in_one_domain"] == aligned["iteration_ms"]
    assert place["ep_ms_in_one_domain"] == pytest.approx(sum(c["ms"] for c in aligned["collectives"] if c["dimension"] == "ep"), abs=0.01)
    assert place["ep_ms"] > 5 * place["ep_ms_in_one_domain"]
    from mbridge_overlap.output import text

    said = text.budget(api.budget(recipe=recipe, machine_facts={"gpus_per_node": 8}).to_dict())
    assert ("placement (assumed): not known: consecutive ranks taken to share NVLink domains of 72 GPUs" in said
            and f"it decides EP's {place['ep_ms']:,.1f} ms of the {place['iteration_ms']:,.1f} ms iteration" in said)
