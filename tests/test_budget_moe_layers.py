"""The budget of MoE models with shared experts (moe_shared_expert_intermediate_size, moe_shared_expert_gate) and
dense layers among the MoE ones (moe_layer_freq: an int N, every N-th layer from layer 0, or a 0/1 list): parameters,
FLOPs, TP collectives and EP all-to-alls on the right layers. Expected numbers are counted here from the shape
(tests/bridge/test_budget_buckets.py and test_budget_shapes.py hold the parameters and the MoE layers to
Megatron-Core's own)."""

from __future__ import annotations

import pytest

from mbridge_overlap import UsageError, api
from mbridge_overlap.budget import shape as shapes

QWEN_MOE = "perf_recipes.qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"
LAYOUT = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "model.expert_model_parallel_size": 8}
H, LAYERS = 2048, 48  # Qwen3-30B-A3B's hidden size and layers (its Hugging Face config.json)
SHARED = 1536


def _budget(shape=None, overrides=None, **kw):
    return api.budget({**LAYOUT, **(overrides or {})}, recipe=QWEN_MOE, model="qwen3_30b_a3b", gpus=32,
                      shape=shape or {}, **kw).to_dict()["budget"]


def _items(b, dim, collective=None):
    return [c for c in b["collectives"] if c["dimension"] == dim and collective in (None, c["collective"])]


def test_a_shared_expert_is_a_dense_tp_split_mlp_after_the_experts():
    sh, _ = shapes.of("qwen3_30b_a3b", {"moe_shared_expert_intermediate_size": SHARED, "moe_shared_expert_gate": True})
    plain, _ = shapes.of("qwen3_30b_a3b", {})
    params = shapes.stage_params(sh, 2, 8, 2, first=False, last=False)
    names = [n for n, _, _ in params]
    layer0 = [n for n in names if n.startswith("decoder.layers.0.")]
    # the router, the experts, then the shared expert: its gate (a parameter of its own module) before its linears
    assert layer0[-3:] == ["decoder.layers.0.mlp.shared_experts.gate_weight", "decoder.layers.0.mlp.shared_experts.linear_fc1.weight",
                           "decoder.layers.0.mlp.shared_experts.linear_fc2.weight"]
    assert names.index("decoder.layers.0.mlp.router.weight") < names.index("decoder.layers.0.mlp.experts.linear_fc2.weight15")
    shared = {n.rpartition("shared_experts.")[2]: (e, x) for n, e, x in params if n.startswith("decoder.layers.1.mlp.shared_experts.")}
    # SwiGLU: fc1 is two [SHARED / TP, H] matrices, fc2 one [H, SHARED / TP]; the gate one [1, H]; none expert-parallel
    assert shared == {"gate_weight": (H, False), "linear_fc1.weight": (2 * SHARED // 2 * H, False),
                      "linear_fc2.weight": (H * SHARED // 2, False)}
    extra = sum(e for _, e, _ in params) - sum(e for _, e, _ in shapes.stage_params(plain, 2, 8, 2, first=False, last=False))
    assert extra == 2 * (H + 3 * SHARED * H // 2)


@pytest.mark.parametrize("freq, moe_layers", [(2, [0, 2, 4]), (3, [0, 3]), ((0, 1, 1, 0, 1), [1, 2, 4]), (1, [0, 1, 2, 3, 4])])
def test_moe_layer_freq_makes_these_layers_moe_and_the_others_dense(freq, moe_layers):
    given = {"num_layers": 5, "moe_layer_freq": freq, "moe_shared_expert_intermediate_size": SHARED}
    sh, _ = shapes.of("qwen3_30b_a3b", given)
    params = shapes.stage_params(sh, 1, 8, 5, first=True, last=True)
    routed = sorted({int(n.split(".")[2]) for n, _, _ in params if ".mlp.router." in n})
    dense = sorted({int(n.split(".")[2]) for n, _, _ in params if n.endswith(".mlp.linear_fc1.weight")})
    assert routed == moe_layers and dense == [i for i in range(5) if i not in moe_layers]
    assert sorted({int(n.split(".")[2]) for n, _, _ in params if ".shared_experts." in n}) == moe_layers
    # a dense layer's MLP is the model's ffn_hidden_size (6144), its norm fused into fc1
    for i in dense:
        (fc1,) = [e for n, e, _ in params if n == f"decoder.layers.{i}.mlp.linear_fc1.weight"]
        assert fc1 == 2 * 6144 * H
    # a stage's numbers are global: the second half of the model on its own stage
    later = shapes.stage_params(sh, 1, 8, 2, first=False, last=True, numbers=[3, 4])
    assert [".mlp.router." in n for n, _, _ in later if n.endswith((".router.weight", ".mlp.linear_fc1.weight"))] == [
        3 in moe_layers, 4 in moe_layers]


def test_a_shared_expert_s_flops_are_a_dense_mlp_of_its_size_for_every_token():
    sh, _ = shapes.of("qwen3_30b_a3b", {"moe_shared_expert_intermediate_size": SHARED})
    tokens = 4096
    f = shapes.layer_flops(sh, tokens, 4096, 2, 1)
    assert f["shared_fc1"] == 2 * tokens * H * 2 * SHARED / 2 and f["shared_fc2"] == 2 * tokens * SHARED * H / 2
    dense = shapes.layer_flops(sh, tokens, 4096, 2, 1, moe=False)  # a dense layer of the same model
    assert "shared_fc1" not in dense and dense["fc1"] == 2 * tokens * H * 2 * 6144 / 2 and "router" not in dense


def _per_layer(b, dim):
    out: dict = {}
    for c in _items(b, dim):
        if "finalize_model_grads" in c["what"]:
            continue  # (once an iteration, not per layer: tests/test_budget_finalize.py)
        out[c["collective"]] = out.get(c["collective"], 0) + c["count"]
    return out, b["layout"]["micro_batches"]


def test_tp_runs_the_shared_expert_s_collectives_on_each_moe_layer():
    """With sequence parallel a layer's attention makes 3 all-gathers (QKV's input forward, proj's output gradient,
    QKV's input again for wgrad) and 2 reduce-scatters (proj's output, QKV's input gradient); a dense MLP as many
    (fc1, fc2): so does the shared expert, while the routed experts make none."""
    plain, m = _per_layer(_budget(), "tp")
    shared, _ = _per_layer(_budget({"moe_shared_expert_intermediate_size": SHARED}), "tp")
    assert plain == {"all_gather": 3 * LAYERS * m, "reduce_scatter": 2 * LAYERS * m}
    assert shared == {"all_gather": 6 * LAYERS * m, "reduce_scatter": 4 * LAYERS * m}


def test_ep_all_to_alls_run_on_the_moe_layers_only():
    b = _budget({"moe_layer_freq": 4})
    m = b["layout"]["micro_batches"]
    (a2a,) = _items(b, "ep")
    assert a2a["count"] == 4 * (LAYERS // 4) * m  # dispatch and combine, forward and backward, on 12 of 48 layers
    tp, _ = _per_layer(b, "tp")
    assert tp == {"all_gather": (3 * LAYERS + 3 * (LAYERS - LAYERS // 4)) * m,  # the 36 dense layers' MLPs
                  "reduce_scatter": (2 * LAYERS + 2 * (LAYERS - LAYERS // 4)) * m}
    assert any("holds 12 MoE and 36 dense layers" in a for a in b["assumptions"])
    pattern = tuple([0] * 3 + [1] * (LAYERS - 3))  # DeepSeek-V3's first three layers dense
    (a2a,) = _items(_budget({"moe_layer_freq": pattern}), "ep")
    assert a2a["count"] == 4 * (LAYERS - 3) * m


@pytest.mark.parametrize("ffn, moe_stage", [(16384, False), (1024, True)])
def test_the_pipeline_stage_with_the_most_compute_is_costed(ffn, moe_stage):
    """Four stages of 12 layers, the dense ones all on the first: a dense MLP of 16,384 (3 x 16,384 x H a token)
    outweighs the top-8 experts of 768 (8 x 3 x 768 x H) and the first stage is costed, with no all-to-all; one of
    1,024 does not, and a later stage, all MoE, is (its all-to-alls: 12 layers')."""
    b = _budget({"moe_layer_freq": tuple([0] * 12 + [1] * 36), "ffn_hidden_size": ffn},
                {"model.pipeline_model_parallel_size": 4, "comm_overlap.overlap_moe_expert_parallel_comm": False})
    m = b["layout"]["micro_batches"]
    assert [c["count"] for c in _items(b, "ep")] == ([4 * 12 * m] if moe_stage else [])
    assert any(f"holds {12 * moe_stage} MoE and {12 * (not moe_stage)} dense layers" in a for a in b["assumptions"])


def test_dense_layers_change_the_dp_buckets_and_experts_with_ep_1_share_the_dense_buffer():
    plain = {c["what"].partition(" ")[0]: c for c in _items(_budget(), "dp", "reduce_scatter")}
    mixed = {c["what"].partition(" ")[0]: c for c in _items(_budget({"moe_layer_freq": 2}), "dp", "reduce_scatter")}
    assert set(plain) == set(mixed) == {"gradients", "expert"}
    assert mixed["expert"]["count"] * mixed["expert"]["bytes"] < plain["expert"]["count"] * plain["expert"]["bytes"]
    # EP 1 with expert TP = TP: Megatron-Core leaves allreduce on the experts' weights: one buffer; with expert TP 1
    # (the recipe's) under TP 2 they are expert-parallel still (use_expert_pgs), a buffer of their own
    for etp, buffers in ((2, ["gradients"]), (1, ["gradients", "expert"])):
        over = {"model.expert_model_parallel_size": 1, "comm_overlap.overlap_moe_expert_parallel_comm": False,
                "model.expert_tensor_parallel_size": etp}
        assert [c["what"].partition(" ")[0] for c in _items(_budget(overrides=over), "dp", "reduce_scatter")] == buffers


def test_shared_experts_and_dense_layers_are_no_longer_said_unmodelled():
    said = shapes.unmodelled({"moe_shared_expert_intermediate_size": 2048, "moe_layer_freq": [0, 1, 1]})
    assert said == []
    assert shapes.unmodelled({"mtp_num_layers": 1, "multi_latent_attention": True, "moe_layer_freq": [0, 1, 1]}) == []


def test_a_config_s_pattern_and_a_command_line_s_are_read():
    assert shapes.in_config({"moe_layer_freq": [0, 1, 1], "moe_shared_expert_intermediate_size": 64,
                             "moe_shared_expert_gate": True}) == {
        "moe_layer_freq": (0, 1, 1), "moe_shared_expert_intermediate_size": 64, "moe_shared_expert_gate": True}
    assert shapes.value_of("moe_layer_freq", "[0, 1,1]") == (0, 1, 1)
    assert shapes.value_of("model.moe_layer_freq", "2") == 2


@pytest.mark.parametrize("given, match", [
    ({"moe_layer_freq": (0, 1)}, "a list of 2 entries for 48 layers"),
    ({"moe_layer_freq": tuple([2] * 48)}, "a 0 .dense. or 1 .MoE. per layer"),
    ({"moe_layer_freq": 0}, "moe_layer_freq: must be a whole number"),
    ({"moe_shared_expert_intermediate_size": 0}, "moe_shared_expert_intermediate_size: must be a whole number"),
    ({"moe_shared_expert_gate": 1}, "moe_shared_expert_gate: must be true or false"),
])
def test_a_shape_megatron_core_refuses_is_refused(given, match):
    with pytest.raises(UsageError, match=match):
        shapes.of("qwen3_30b_a3b", given)


def test_a_shared_expert_tp_cannot_split_is_refused_as_megatron_core_refuses_it():
    with pytest.raises(UsageError, match=r"moe_shared_expert_intermediate_size \(1537\) is not a multiple of TP \(2\)"):
        _budget({"moe_shared_expert_intermediate_size": 1537})


@pytest.mark.parametrize("modules, again", [(["shared_experts"], 1), (["core_attn"], 0)])
def test_a_recomputed_shared_expert_gathers_and_scatters_again(modules, again):
    """Selective recompute of shared_experts runs each MoE layer's shared expert forward again in its backward: its
    fc1's input all-gather and fc2's output reduce-scatter once more a layer (the attention's are not recomputed)."""
    over = {"model.recompute_granularity": "selective", "model.recompute_modules": modules}
    base, m = _per_layer(_budget({"moe_shared_expert_intermediate_size": SHARED}), "tp")
    more, _ = _per_layer(_budget({"moe_shared_expert_intermediate_size": SHARED}, over), "tp")
    assert more == {c: n + again * LAYERS * m for c, n in base.items()}
