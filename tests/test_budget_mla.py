"""Multi-latent attention in the budget (tier 1; tier 2 holds the parameters and buckets to Megatron-Core's model:
tests/bridge/test_budget_mla.py): parameters, FLOPs, TP collectives, CP's keys and values, the config's fields."""

import json
import re

import pytest

from mbridge_overlap import api, cli
from mbridge_overlap.errors import UsageError
from mbridge_overlap.budget import finalize, shape as shapes

BASE = {"num_layers": 2, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16, "vocab_size": 32000,
        "multi_latent_attention": True, "q_lora_rank": 384, "kv_lora_rank": 256, "qk_head_dim": 64,
        "qk_pos_emb_head_dim": 32, "v_head_dim": 96, "qk_layernorm": True}


def _shape(**over):
    return shapes.of(None, {**BASE, **over})[0]


def test_mla_parameters_per_layer():
    p = {n.partition("layers.0.")[2]: k for n, k, _ in shapes.stage_params(_shape(), 2, 1, 1, first=False, last=False)}
    assert list(p)[:8] == ["input_layernorm.weight", "self_attention.linear_proj.weight",
                           "self_attention.linear_q_down_proj.weight", "self_attention.linear_q_up_proj.layer_norm_weight",
                           "self_attention.linear_q_up_proj.weight", "self_attention.linear_kv_down_proj.weight",
                           "self_attention.linear_kv_up_proj.layer_norm_weight", "self_attention.linear_kv_up_proj.weight"]
    assert p["self_attention.linear_proj.weight"] == 1024 * 16 * 96 // 2
    assert p["self_attention.linear_q_down_proj.weight"] == 384 * 1024  # duplicated: whole on each TP rank
    assert p["self_attention.linear_q_up_proj.weight"] == 16 * 96 // 2 * 384
    assert p["self_attention.linear_kv_down_proj.weight"] == (256 + 32) * 1024
    assert p["self_attention.linear_kv_up_proj.weight"] == 16 * (64 + 96) // 2 * 256
    assert not any("linear_qkv" in n or "q_layernorm" in n for n in p)
    none = {n.partition("layers.0.")[2] for n, _, _ in shapes.stage_params(_shape(q_lora_rank=None, qk_layernorm=False), 2, 1, 1,
                                                                         first=False, last=False)}
    assert "self_attention.linear_q_proj.weight" in none and not any("q_down" in n or "layer_norm_weight" in n
                                                                      for n in none if "self_attention" in n)


def test_mla_flops_and_duplicated_down_projections():
    f = shapes.layer_flops(_shape(), 4096, 4096, 2, 1, sp=True)
    assert set(f) >= {"q_down", "q_up", "kv_down", "kv_up", "attention", "proj"} and "qkv" not in f
    assert f["q_down"] == 2 * 4096 * 1024 * 384 / 2  # the rank's sequence shard
    assert shapes.layer_flops(_shape(), 4096, 4096, 2, 1, sp=False)["q_down"] == 2 * f["q_down"]  # every token again
    assert f["attention"] == 2 * 4096 * 4096 * 16 * (96 + 96) * 0.5 / 2
    params = shapes.stage_params(_shape(), 2, 1, 1, first=False, last=False)  # (finalize.py sums them over TP)
    assert sum(n for name, n, _ in params if finalize.tp_summed(name, _shape(), True)) == \
        1024 + 384 * 1024 + 384 + 288 * 1024 + 256 + 1024


def _budget(over=None, shape=None):
    overrides = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "model.seq_length": 4096,
                 "dataset.seq_length": 4096, "train.global_batch_size": 16, "train.micro_batch_size": 1,
                 "comm_overlap.tp_comm_overlap": True, **(over or {})}
    return api.budget(overrides, shape={**BASE, **(shape or {})}, gpus=8).to_dict()["budget"]


def test_mla_tp_collectives_replace_qkv_s_and_userbuffers_run_none():
    b = _budget()
    tp = [c for c in b["collectives"] if c["dimension"] == "tp"]
    whats = " | ".join(c["what"] for c in tp)
    assert "MLA up projections' inputs" in whats and "rotary key part" in whats and "every TP rank holds whole" in whats
    assert all(c["hidden_ms"] == 0 for c in tp if c["setting"] == "tp_comm_overlap")  # no userbuffers with MLA
    (up,) = [c for c in tp if c["what"].startswith("MLA up projections' inputs (forward")]
    assert up["bytes"] == 4096 * 384 * 2 and up["count"] == 2 * 2 * 4  # q (384 wide) and kv (256) per layer, 4 micro-batches (DP 4)
    assert any("MLA (multi_latent_attention)" in a for a in b["assumptions"])
    assert not any(a.startswith("not modelled") for a in b["assumptions"])
    plain = _budget(shape={"multi_latent_attention": False})
    assert not any("MLA" in c["what"] for c in plain["collectives"])


def test_mla_cp_exchanges_the_up_projections_keys_and_values():
    b = _budget({"model.context_parallel_size": 2, "model.tensor_model_parallel_size": 2})
    (fwd,) = [c for c in b["collectives"] if c["dimension"] == "cp" and "(forward)" in c["what"]]
    assert fwd["bytes"] == 4096 // 2 * 16 // 2 * (96 + 96) * 2


def test_a_config_s_mla_fields_are_read_and_q_lora_rank_null_is_none():
    read = shapes.in_config({"multi_latent_attention": True, "q_lora_rank": None, "kv_lora_rank": 512, "v_head_dim": 128})
    assert read == {"multi_latent_attention": True, "q_lora_rank": None, "kv_lora_rank": 512, "v_head_dim": 128}
    assert shapes.of("deepseek_v3", {})[0].multi_latent_attention


DEEPSEEK = "perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config"


@pytest.mark.parametrize("key", sorted(shapes.NOT_NULL))
def test_a_null_mla_size_megatron_core_cannot_build_is_refused(key):
    """fuzzV V2-7: model.kv_lora_rank=null (qk_head_dim, qk_pos_emb_head_dim, v_head_dim) was dropped and the recipe's
    own size priced; Megatron-Core's MLA layer adds and multiplies them (a TypeError at build: tier 2 builds it), so
    null is refused as 0 is: by the budget, in --shape, in a config file, and resolve's budget says why there is none."""
    said = (f"{key}: expected a whole number, got null (only moe_router_group_topk, moe_router_num_groups, "
            "moe_router_topk_limited_devices, mtp_num_layers and q_lora_rank take null")
    with pytest.raises(UsageError, match=re.escape(f"model.{said}")):
        api.budget({f"model.{key}": "null"}, recipe=DEEPSEEK)
    with pytest.raises(UsageError, match=re.escape(said)):
        api.budget(recipe=DEEPSEEK, shape={key: None})
    with pytest.raises(UsageError, match=re.escape(f"run.yaml: model.{said}")):
        shapes.in_config({"multi_latent_attention": True, key: None}, "run.yaml")
    assert said in api.resolve({f"model.{key}": None}, recipe=DEEPSEEK).to_dict()["budget"]["unavailable"]


def test_q_lora_rank_null_is_taken_on_the_command_line_as_in_an_override(capsys):
    """fuzzV V2-8: --shape q_lora_rank=null was refused with a message saying null is taken."""
    assert shapes.value_of("q_lora_rank", "null") is None and shapes.value_of("mtp_num_layers", "NULL") is None
    common = ["budget", "--model", "deepseek_v3", "--gpus", "1024", "model.seq_length=4096", "dataset.seq_length=4096",
              "train.global_batch_size=8192", "--format", "json"]
    assert cli.main(common + ["--shape", "q_lora_rank=null"]) == 0
    flag = json.loads(capsys.readouterr().out)["budget"]
    asked = {"model.seq_length": 4096, "dataset.seq_length": 4096, "train.global_batch_size": 8192}
    typed = api.budget(asked, model="deepseek_v3", gpus=1024, shape={"q_lora_rank": None}).to_dict()["budget"]
    own = api.budget(asked, model="deepseek_v3", gpus=1024).to_dict()["budget"]
    assert flag["iteration_ms"] == typed["iteration_ms"] != own["iteration_ms"]


def test_the_mla_up_projections_recompute_runs_them_and_their_gathers_again():
    """recheck59 AF4: recompute_modules mla_up_proj (DeepSeek-V3's recipes set it) reruns the up projections in the
    backward (MLASelfAttention's qkv_up_checkpoint), with sequence parallel their input all-gathers too; the budget
    gave the same numbers with and without it."""
    from mbridge_overlap import api

    recipe = "perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config"

    def budget(modules):
        return api.budget({"model.recompute_modules": modules}, recipe=recipe).to_dict()["budget"]

    def gathers(b):
        return next(i["count"] for i in b["collectives"] if i["what"].startswith("MLA up projections' inputs (forward"))

    up, plain = budget(["mla_up_proj", "mlp"]), budget(["mlp"])
    assert gathers(up) == 2 * gathers(plain)
    assert up["compute_ms"] > plain["compute_ms"]


def test_no_worth_finding_blames_the_compute_for_tp_overlap_megatron_core_turns_off():
    """recheck59 AF6: on DeepSeek-V3 with tp_comm_overlap=true, WORTH_OVERLAP_CANNOT_PAY said the collectives were
    longer than the compute (fix: a larger micro-batch); Megatron-Core turns the overlap off at the first down
    projection (TP_OVERLAP_OFF_MLA says so, with the fix that holds)."""
    from mbridge_overlap import api

    r = api.resolve({"comm_overlap.tp_comm_overlap": True}, recipe="perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config")
    ids = [f.id for f in r.findings]
    assert "TP_OVERLAP_OFF_MLA" in ids
    worth = [f for f in r.findings if f.id.startswith("WORTH_") and "tp_comm_overlap" in f.message]
    assert not worth, [f.message for f in worth]
