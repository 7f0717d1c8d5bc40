"""Transformer Engine CUDA graphs on moe or mlp beside the model's own overlap_moe_expert_parallel_comm, against the
installed Megatron-Core: each case as Hydra words on Bridge's command line through runtime_config_update is refused by
the skill with Megatron-Core's words exactly where it raises them, and the fix is taken. tests/bridge/test_second_release.py
runs this on a second release (Megatron-Core 0.18 has the same assert)."""

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter
from test_dataset_seq_length_bridge import _bridge

WORDS = "CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm"
ON = ["model.overlap_moe_expert_parallel_comm=true", "model.expert_model_parallel_size=2",
      "model.moe_token_dispatcher_type=alltoall", "model.cuda_graph_impl=transformer_engine"]
CASES = [[f"model.num_moe_experts={n}", graphs] for n in (1, 8) for graphs in (
    "model.cuda_graph_modules=[mlp]", "model.cuda_graph_modules=[attn,mlp]", "model.cuda_graph_scope=[mlp]",
    "model.cuda_graph_modules=[attn]", "model.cuda_graph_modules=[moe]", "model.cuda_graph_modules=[attn,moe_router]")]


def test_te_graphs_on_moe_or_mlp_are_refused_exactly_where_megatron_core_refuses_them():
    version, refusals = adapter.bridge_version(), 0
    for case in CASES:
        words = ON + case
        taken, error = _bridge(words)
        assert taken, words
        real = bool(error and WORDS in error)
        refusals += real
        ours = [f for f in api.resolve(dict(w.split("=", 1) for w in words), gpus=8, bridge_version=version).findings
                if f.id == "MOE_OVERLAP_REJECTED" and WORDS in f.message]
        assert bool(ours) == real, (words, ours, error)
        for f in ours:
            assert f"AssertionError: {f.message.partition(': ')[2]}" == error
            fixed = words + [f"{k}={str(v).lower()}" for k, v in f.fix_overrides.items()]
            assert _bridge(fixed) == (True, None), fixed
    assert refusals == 3  # one expert with mlp graphed: with eight, an earlier CUDA-graph assert decides
