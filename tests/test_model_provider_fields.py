"""A recipe's model fields are those of its own provider class (data/releases/VERSION/model_providers.json, generated
from the installed Bridge by tools/gen_bridge_data.py; tier 2 holds the acceptances and refusals to Bridge's own
override path: tests/bridge/test_model_provider_fields.py). recheck59 AF5 (MLAModelProvider), recheck55 AB6
(HybridModelProvider)."""

import json
import re
from dataclasses import fields

import pytest

from mbridge_overlap import api
from mbridge_overlap.budget.shape import Shape
from mbridge_overlap.errors import UsageError
from mbridge_overlap.upstream import catalog, releases

V3 = "perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config"
NEMOTRON_H = "nemotronh_8b_pretrain_config"
MLA = ["q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "mla_down_proj_fusion"]


def _providers(version):
    return json.loads((releases.DATA_DIR / "releases" / version / "model_providers.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("version", ["0.6.2", "0.5.1", "0.5.0"])
def test_each_release_records_the_mla_and_hybrid_classes_and_their_recipes(version):
    data = _providers(version)
    assert data["bridge_version"] == version and data["base"] == "GPTModelProvider"
    assert set(MLA) <= set(data["classes"]["MLAModelProvider"]["adds"])
    hybrid = "HybridModelProvider" if version == "0.6.2" else "MambaModelProvider"  # (0.5.x's recipes build Mamba's)
    assert "hybrid_layer_pattern" in data["classes"][hybrid]["adds"] or "hybrid_override_pattern" in data["classes"][hybrid]["adds"]
    names = {r.rpartition(".")[2] for r in data["recipes"]["MLAModelProvider"]}
    assert any(n.startswith("deepseek_v3") for n in names) and any(n.startswith("moonlight") for n in names)
    refs = {catalog.reference(e, version) for e in catalog.entries(version)}
    every = [r for rs in data["recipes"].values() for r in rs]
    assert len(every) == len(set(every)) and set(every) <= refs  # one class each, and every one a catalog recipe
    assert not any(n.startswith("llama3") for n in {r.rpartition(".")[2] for r in every})  # LlamaForCausalLM: GPT's


@pytest.mark.parametrize("field", MLA)
def test_an_mla_recipe_takes_its_provider_s_fields_as_context(field):
    value = "null" if field == "q_lora_rank" else "true" if field == "mla_down_proj_fusion" else "64"
    out = api.resolve({f"model.{field}": value}, recipe=V3).to_dict()
    read_past = any(f["id"] == "UNMODELED_KEY" and f"model.{field}" in json.dumps(f) for f in out["findings"])
    assert read_past != (field in {f.name for f in fields(Shape)})  # the budget prices the shape's (evalAH AH2)


def test_an_unknown_field_is_refused_with_the_closest_of_the_recipe_s_class():
    with pytest.raises(UsageError, match=r"v_head_dimm.*MLAModelProvider.*did you mean 'model\.v_head_dim'"):
        api.resolve({"model.v_head_dimm": 64}, recipe=V3)
    with pytest.raises(UsageError, match=r"not a field of model \(MLAModelProvider"):
        api.resolve({"model.hybrid_layer_pattern": "M-"}, recipe=V3)


def test_a_hybrid_recipe_takes_hybrid_fields_and_refuses_gpt_fields_its_class_lacks():
    out = api.resolve({"model.hybrid_layer_pattern": "M-M-"}, recipe=NEMOTRON_H).to_dict()
    assert any(f["id"] == "UNMODELED_KEY" for f in out["findings"])
    with pytest.raises(UsageError, match=r"rope_scaling.*HybridModelProvider"):
        api.resolve({"model.rope_scaling": True}, recipe=NEMOTRON_H)


def test_without_a_recipe_the_baseline_gpt_provider_s_fields_stay():
    with pytest.raises(UsageError, match=r"'q_lora_rank' is not a field of model in Megatron-Bridge"):
        api.resolve({"model.q_lora_rank": 8})
    with pytest.raises(UsageError, match="not a field of model"):  # a Llama recipe's model is a GPTModelProvider
        api.resolve({"model.q_lora_rank": 8}, recipe="llama3_8b_pretrain_config")


def test_a_config_file_s_model_section_is_checked_against_the_recipe_s_class(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("model:\n  kv_lora_rank: 128\n", encoding="utf-8")
    api.resolve({}, config=str(cfg), recipe=V3)
    cfg.write_text("model:\n  kv_lora_rankk: 128\n", encoding="utf-8")
    with pytest.raises(UsageError, match="kv_lora_rank"):
        api.resolve({}, config=str(cfg), recipe=V3)


def _budget(overrides):
    return api.budget(overrides, recipe=V3).to_dict()["budget"]


def test_the_budget_reads_the_mla_shape_from_the_overrides():
    base = _budget({})
    none = _budget({"model.q_lora_rank": "null"})  # linear_q_proj, hidden to heads x q_head_dim: more compute than q_down + q_up
    assert "overrides: model.q_lora_rank" in none["shape_from"] and none["compute_ms"] > base["compute_ms"]
    small = _budget({"model.v_head_dim": 64, "model.qk_head_dim": 64})
    assert "model.qk_head_dim, model.v_head_dim" in small["shape_from"] and small["compute_ms"] < base["compute_ms"]
    assert _budget({"model.kv_lora_rank": 128})["compute_ms"] < base["compute_ms"]


def test_a_saved_config_s_model_target_names_its_provider_class(tmp_path):
    """fuzzU U2-2: a saved DeepSeek run config (model._target_ MLAModelProvider) without --recipe had its q_lora_rank
    'not in Megatron-Bridge's config, ignored (saved by another release?)', though the budget reads it."""
    config = tmp_path / "run_config.yaml"
    config.write_text("model:\n  _target_: megatron.bridge.models.mla_provider.MLAModelProvider\n"
                      "  tensor_model_parallel_size: 2\n  sequence_parallel: true\n  q_lora_rank: null\n")
    r = api.lint(str(config), gpus=8)
    assert not any("q_lora_rank" in n for n in r.to_dict().get("notes", []))
    config.write_text("model:\n  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  q_lora_rank: null\n")
    assert any("q_lora_rank" in n for n in api.lint(str(config), gpus=8).to_dict().get("notes", []))


@pytest.mark.parametrize("body, said", [("q_lora_rank: 1.5", "expected an integer (or null), got 1.5"),
                                        ("kv_lora_rank: [512]", "expected an integer, got [512]")])
def test_a_config_s_non_integer_mla_field_is_named_so(tmp_path, body, said):
    """fuzzU U2-3: a float or a list in q_lora_rank was 'the text ... write it without quotes'."""
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  {body}\n")
    with pytest.raises(UsageError, match=re.escape(said)):
        api.resolve(config=str(config), recipe="deepseek_v3_pretrain_256gpu_b200_bf16_config")


def test_plan_for_a_model_family_takes_its_recipes_provider_fields():
    """A question that names an MLA model without a recipe (plan --model deepseek_v3, or --recipe deepseek_v3 as a
    family) plans the model its recipes build, MLAModelProvider: its q_lora_rank was 'not a field of model'. A Llama
    family's recipes build GPTModelProvider, which has none."""
    for named in ({"model": "deepseek_v3"}, {"recipe": "deepseek_v3"}):
        out = api.plan(gpus=64, overrides={"model.q_lora_rank": "null"}, **named).to_dict()
        assert "model.q_lora_rank" in json.dumps(out)
        with pytest.raises(UsageError, match=r"MLAModelProvider, the model of deepseek_v3's recipes.*'model\.q_lora_rank'"):
            api.plan(gpus=64, overrides={"model.q_lora_rnak": 1}, **named)
    with pytest.raises(UsageError, match=r"'q_lora_rank' is not a field of model in Megatron-Bridge"):
        api.plan(gpus=8, model="llama3_8b", overrides={"model.q_lora_rank": 1})


@pytest.mark.parametrize("body, said", [
    ("q_lora_rank: -5", "model.q_lora_rank: must be a whole number from 1 to"),
    ("hidden_size: 99999999999", "model.hidden_size: must be a whole number from 1 to"),
    ("moe_layer_freq: [0, 2, 1]", "model.moe_layer_freq: a list must hold a 0 (dense) or 1 (MoE) per layer")])
def test_a_config_s_out_of_range_shape_names_its_file_and_section(tmp_path, body, said):
    """fuzzU U2-3's rest: the bounds error said 'q_lora_rank: ...', naming neither the file nor its section; the
    command line's own value is named as typed (model.KEY)."""
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  {body}\n")
    with pytest.raises(UsageError, match=re.escape(f"{config}: {said}")):
        api.budget(config=str(config), recipe="deepseek_v3_pretrain_256gpu_b200_bf16_config")
    key, _, value = body.partition(": ")
    with pytest.raises(UsageError, match=r"^" + re.escape(said.partition(":")[0] + ":")):
        api.budget({f"model.{key}": value.replace(" ", "")}, recipe="deepseek_v3_pretrain_256gpu_b200_bf16_config")
