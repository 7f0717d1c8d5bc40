"""ep_overlap_early_attn_memory_release against the installed Megatron-Core: with and without the model's own
overlap_moe_expert_parallel_comm and delay_wgrad_compute, as Hydra words through runtime_config_update, the skill refuses
it with Megatron-Core's words exactly where it raises them, and the fix is taken. tests/bridge/test_second_release.py
runs this on a second release (Megatron-Core 0.18 has the same assert)."""

import itertools

from mbridge_overlap.bridge import adapter
from refusals import refused_alike

WORDS = "overlap_moe_expert_parallel_comm must be enabled when enabling ep_overlap_early_attn_memory_release"
EXPERTS = ["model.num_moe_experts=8", "model.expert_model_parallel_size=2", "model.moe_token_dispatcher_type=alltoall"]


def test_early_release_is_refused_exactly_where_megatron_core_refuses_it():
    version, refusals = adapter.bridge_version(), 0
    for early, overlap, delay in itertools.product(("true", "false"), repeat=3):
        words = EXPERTS + [f"model.ep_overlap_early_attn_memory_release={early}",
                           f"model.overlap_moe_expert_parallel_comm={overlap}", f"model.delay_wgrad_compute={delay}"]
        refusals += refused_alike(words, "MOE_OVERLAP_REJECTED", WORDS, version)
    assert refusals == 1  # early release alone: delay_wgrad_compute's own refusal comes first
