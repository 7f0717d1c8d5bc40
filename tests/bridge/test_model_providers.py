"""What budget_models.yaml says a known model's Bridge provider sets beyond its shape (`provider.fields`, which an
answer with --model and no recipe reports where its baseline model differs: evalM M9) is what the installed Bridge's
model bridge sets, built from a Hugging Face config of the model's published shape (no download)."""

import os

import pytest

from mbridge_overlap.budget import shape
from mbridge_overlap.run import layers

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WITH_PROVIDER = sorted(name for name in shape.models() if layers.model_provider(name))


def _hf_config(name: str):
    transformers = pytest.importorskip("transformers")
    s = layers.model_shape(name)
    if not name.startswith("qwen3_") or not s.get("num_moe_experts"):
        pytest.fail(f"{name}: no Hugging Face config builder here for a model with provider fields")
    return transformers.Qwen3MoeConfig(
        vocab_size=s["vocab_size"], hidden_size=s["hidden_size"], intermediate_size=s["ffn_hidden_size"],
        num_hidden_layers=s["num_layers"], num_attention_heads=s["num_attention_heads"], num_key_value_heads=s["num_query_groups"],
        head_dim=s["kv_channels"], num_experts=s["num_moe_experts"], num_experts_per_tok=s["moe_router_topk"],
        moe_intermediate_size=s["moe_ffn_hidden_size"], tie_word_embeddings=s["share_embeddings_and_output_weights"],
        torch_dtype="bfloat16", architectures=["Qwen3MoeForCausalLM"])


def test_some_model_records_provider_fields():
    assert WITH_PROVIDER


@pytest.mark.parametrize("name", WITH_PROVIDER)
def test_provider_fields_are_what_bridge_s_model_bridge_sets(name):
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge

    provider = AutoBridge.from_hf_config(_hf_config(name)).to_megatron_provider(load_weights=False)
    for key, value in layers.model_provider(name)["fields"].items():
        section, _, field = key.partition(".")
        assert section == "model" and getattr(provider, field) == value, (name, key)
