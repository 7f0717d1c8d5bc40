"""TransformerConfig.__post_init__ refuses Transformer Engine CUDA graphs on the moe or mlp modules beside
overlap_moe_expert_parallel_comm (0.19.2 transformer_config.py:2737-2746, core_v0.18.2 :2443-2451); the skill took it.
Its earlier CUDA-graph asserts (0.19.2 :2471-2512) read moe_layer_freq, moe_expert_capacity_factor and
moe_pad_expert_input_to_capacity, which the resolver does not model: the refusal is judged where they are not read (at
most one expert). tests/bridge/test_moe_overlap_te_graphs_bridge.py holds it to the installed Megatron-Core."""

import pytest

from mbridge_overlap import api

WORDS = "CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm"
ONE_EXPERT = {"model.overlap_moe_expert_parallel_comm": True, "model.num_moe_experts": 1,
              "model.expert_model_parallel_size": 2, "model.moe_token_dispatcher_type": "alltoall",
              "model.cuda_graph_impl": "transformer_engine"}


def _refused(overrides, version="0.6.2"):
    return [f for f in api.resolve(overrides, gpus=8, bridge_version=version).findings if f.id == "MOE_OVERLAP_REJECTED"]


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
@pytest.mark.parametrize("graphs", [{"model.cuda_graph_modules": "[mlp]"}, {"model.cuda_graph_modules": "[attn,mlp]"},
                                    {"model.cuda_graph_scope": "[mlp]"}])
def test_te_graphs_on_mlp_are_refused_beside_the_overlap_and_the_fix_turns_it_off(version, graphs):
    (f,) = _refused({**ONE_EXPERT, **graphs}, version)
    assert f.message.partition(": ")[2] == WORDS
    assert f.fix_overrides == {"model.overlap_moe_expert_parallel_comm": False}
    assert not _refused({**ONE_EXPERT, **graphs, **f.fix_overrides}, version)


def test_not_without_mlp_nor_where_an_earlier_cuda_graph_check_decides():
    assert not _refused({**ONE_EXPERT, "model.cuda_graph_modules": "[attn]"})
    # one expert: Megatron-Core's "moe cuda graph is only supported for MoE." comes first
    assert not [f for f in _refused({**ONE_EXPERT, "model.cuda_graph_modules": "[moe]"}) if WORDS in f.message]
    # eight experts, every layer MoE by default: "mlp cuda graph is only supported for dense layers..." comes first
    assert not [f for f in _refused({**ONE_EXPERT, "model.num_moe_experts": 8, "model.cuda_graph_modules": "[mlp]"})
                if WORDS in f.message]
