"""Multi-token prediction in the budget (tier 1): the MTP block's parameters and where they are placed, its compute,
its TP collectives (never userbuffers: TELinear turns tp_comm_overlap off at eh_proj), and what it does to the DP
buckets. Tier 2 (tests/bridge/test_budget_mtp.py) holds the parameters and buckets to Megatron-Core's own model."""

from types import SimpleNamespace

from mbridge_overlap import api
from mbridge_overlap.budget import dp as budget_dp, mtp, shape as shapes

DENSE = {"num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "vocab_size": 1024}


def _shape(**kw):
    return shapes.of(None, {**DENSE, **kw})[0]


def test_an_mtp_layer_s_parameters_follow_the_decoder_s_final_norm():
    sh = _shape(mtp_num_layers=2)
    names = [n for n, _, _ in shapes.stage_params(sh, 2, 1, 4, first=True, last=True)]
    assert names[-1] == "output_layer.weight" and names.index("decoder.final_layernorm.weight") < names.index("mtp.layers.0.enorm.weight")
    one = [n.partition("mtp.layers.1.")[2] for n in names if n.startswith("mtp.layers.1.")]
    assert one[:3] == ["enorm.weight", "hnorm.weight", "eh_proj.weight"] and one[-1] == "final_layernorm.weight"
    assert "mtp_model_layer.self_attention.linear_qkv.weight" in one
    sizes = dict((n, k) for n, k, _ in shapes.stage_params(sh, 2, 1, 4, first=True, last=True))
    assert sizes["mtp.layers.0.eh_proj.weight"] == 256 // 2 * 512  # column-parallel: 2h in, h / TP out


def test_mtp_lives_on_the_last_stage_with_an_embedding_of_its_own():
    sh = _shape(mtp_num_layers=1)
    first = [n for n, _, _ in shapes.stage_params(sh, 1, 1, 2, first=True, last=False)]
    last = [n for n, _, _ in shapes.stage_params(sh, 1, 1, 2, first=False, last=True)]
    assert not any(n.startswith("mtp.") for n in first)
    assert last[0] == "embedding.word_embeddings.weight" and any(n.startswith("mtp.") for n in last)
    plain = [n for n, _, _ in shapes.stage_params(_shape(), 1, 1, 2, first=False, last=True)]
    assert "embedding.word_embeddings.weight" not in plain
    tied = [n for n, _, _ in shapes.stage_params(_shape(mtp_num_layers=1, share_embeddings_and_output_weights=True),
                                                   1, 1, 2, first=False, last=True)]
    assert "output_layer.weight" in tied  # (not the first stage: its output layer's weight is its own copy)


def test_the_mtp_layer_is_of_the_model_s_last_layer_s_kind():
    moe = dict(num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=128, mtp_num_layers=1)
    assert mtp.moe(_shape(**moe, moe_layer_freq=(1, 0, 0, 1)))
    assert not mtp.moe(_shape(**moe, moe_layer_freq=(1, 1, 1, 0)))
    names = [n for n, _, _ in shapes.mtp_params(_shape(**moe, moe_layer_freq=(0, 0, 0, 1)), 1, 1, 1, 1)]
    assert "mtp.layers.0.mtp_model_layer.mlp.router.weight" in names


def test_mla_makes_the_mtp_layer_an_mla_layer():
    sh = _shape(multi_latent_attention=True, mtp_num_layers=1)
    names = [n for n, _, _ in shapes.mtp_params(sh, 2, 1, 2, 1)]
    assert "mtp.layers.0.mtp_model_layer.self_attention.linear_kv_down_proj.weight" in names


def _budget(extra=None, **kw):
    over = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True,
            "train.global_batch_size": 64, **(extra or {})}
    return api.budget(over, recipe="llama3_8b_pretrain_config", gpus=8, **kw).to_dict()["budget"]


def test_mtp_layers_add_their_compute_and_tp_collectives_without_userbuffers():
    plain, one, two = _budget(), _budget(shape={"mtp_num_layers": 1}), _budget(shape={"mtp_num_layers": 2})
    assert plain["compute_ms"] < one["compute_ms"] < two["compute_ms"]
    rows = [c for c in one["collectives"] if "MTP" in c["what"]]
    assert rows and all(c["setting"] is None for c in rows) and not any("MTP" in c["what"] for c in plain["collectives"])
    forward = [c for c in rows if c["what"].startswith("MTP layers: sequence-parallel")]
    assert forward[0]["exposed_ms"] == forward[0]["ms"]  # TP overlap on, but no userbuffers in the MTP layer
    eh = [c for c in rows if c["what"].startswith("MTP eh_proj: input (")]
    assert eh[0]["bytes"] == 2 * next(c for c in forward)["bytes"]  # its input is 2 x hidden wide
    count = {c["what"]: c["count"] for c in two["collectives"]}
    assert all(count[c["what"]] == 2 * c["count"] for c in rows)
    assert any(a.startswith("MTP (mtp_num_layers)") for a in one["assumptions"])


def test_tp_overlap_s_flip_leaves_the_mtp_layer_exposed():
    on, off = _budget(shape={"mtp_num_layers": 1}), _budget({"comm_overlap.tp_comm_overlap": False}, shape={"mtp_num_layers": 1})
    mine = lambda b: sorted((c["what"], c["exposed_ms"]) for c in b["collectives"] if "MTP" in c["what"])  # noqa: E731
    assert mine(on) == mine(off)


def test_mtp_on_the_only_stage_adds_a_dp_bucket_s_parameters():
    plain, one = _budget(), _budget(shape={"mtp_num_layers": 1})
    grads = lambda b: next(c for c in b["collectives"] if c["dimension"] == "dp" and c["collective"] == "reduce_scatter")  # noqa: E731
    assert grads(one)["ms"] > grads(plain)["ms"]


def test_with_pp_the_first_stage_s_embedding_is_a_bucket_of_its_own():
    """With MTP and PP > 1 GPTModel's setup_embeddings_and_output_layer marks the first stage's embedding
    shared_embedding (tied to the MTP stage's copy) whether or not the output weights are shared: the distributed
    optimizer gives it a bucket of its own (distrib_optimizer.py _does_param_require_new_bucket)."""
    lay = SimpleNamespace(ddp={"use_distributed_optimizer": True}, quantized=None)
    sh = _shape(mtp_num_layers=1)
    params = shapes.stage_params(sh, 1, 1, 2, first=True, last=False)
    alone = budget_dp._bucket_groups(lay, params, 10**9, True, 4, "embedding.word_embeddings.weight", lambda name: False)
    together = budget_dp._bucket_groups(lay, params, 10**9, True, 4, None, lambda name: False)
    assert len(alone) == 2 and len(together) == 1


def test_a_layout_s_mtp_rank_is_costed_where_it_is_the_busiest():
    """DeepSeek-V3's B200 recipe places 8 decoder layers on each of 7 ranks and 5 with the MTP layer and the loss on
    the last: with its whole output layer (recheck63 AJ1) that rank is the busiest, and costed; a layout whose last
    rank holds fewer costs another (tests/test_budget_rank.py holds both)."""
    # (costrank: the costed rank is the longest iteration under the schedule; on this recipe rank 1's, whose DP tail
    # is the longest (tests/test_budget_rank.py derives it), so the MTP rank 7 is said not to be it)
    b = api.budget(recipe="deepseek_v3_pretrain_256gpu_b200_bf16_config").to_dict()["budget"]
    assert any("MTP layers (7) is not the busiest" in a for a in b["assumptions"])
    assert any("costs pipeline rank 1, the busiest" in a for a in b["assumptions"])
    assert b["pipeline"]["busiest_rank"] == 7  # (the slowest stage still)
    few = api.budget({"model.pipeline_model_parallel_layout": "Et*7|t*9|t*9|t*9|t*9|t*9|t*9|mL"},
                     recipe="deepseek_v3_pretrain_256gpu_b200_bf16_config").to_dict()["budget"]
    assert any("MTP layers (7) is not the busiest" in a for a in few["assumptions"])
    assert any("costs pipeline rank 1, the busiest with ranks 2, 3, 4, 5 and 6, which hold the same (rank 1 the first, with "
               "the least pipeline slack beside its DP): each holds 9 MoE decoder layers;" in a for a in few["assumptions"])
    assert mtp.rank(SimpleNamespace(pp=4, mtp_stage=None)) == 3 and mtp.rank(SimpleNamespace(pp=4, mtp_stage=6)) == 2
