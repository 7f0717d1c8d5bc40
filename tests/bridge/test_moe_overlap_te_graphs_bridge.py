"""Transformer Engine CUDA graphs on moe or mlp beside the model's own overlap_moe_expert_parallel_comm, against the
installed Megatron-Core: each case as Hydra words on Bridge's command line through runtime_config_update is refused by
the skill with Megatron-Core's words exactly where it raises them, and the fix is taken. tests/bridge/test_second_release.py
runs this on a second release (Megatron-Core 0.18 has the same assert)."""

from mbridge_overlap.bridge import adapter
from refusals import refused_alike

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
        refusals += refused_alike(words, "MOE_OVERLAP_REJECTED", WORDS, version)
    assert refusals == 3  # one expert with mlp graphed: with eight, an earlier CUDA-graph assert decides
