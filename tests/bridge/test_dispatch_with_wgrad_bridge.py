"""overlap_dispatch_backward_with_experts_wgrad against the installed Megatron-Core: with and without the model's own
overlap_moe_expert_parallel_comm and delay_wgrad_compute, as Hydra words through runtime_config_update, the skill refuses
it with Megatron-Core's words exactly where it raises them, and the fix is taken. tests/bridge/test_second_release.py
runs this on a second release (Megatron-Core 0.18 has the same assert)."""

import itertools

from mbridge_overlap.bridge import adapter
from refusals import refused_alike

WORDS = "overlap_moe_expert_parallel_comm must be disabled when enabling overlap_dispatch_backward_with_experts_wgrad."
EXPERTS = ["model.num_moe_experts=8", "model.expert_model_parallel_size=2", "model.moe_token_dispatcher_type=alltoall"]


def test_dispatch_with_wgrad_is_refused_exactly_where_megatron_core_refuses_it():
    version, refusals = adapter.bridge_version(), 0
    for dispatch, overlap, delay in itertools.product(("true", "false"), repeat=3):
        words = EXPERTS + [f"model.overlap_dispatch_backward_with_experts_wgrad={dispatch}",
                           f"model.overlap_moe_expert_parallel_comm={overlap}", f"model.delay_wgrad_compute={delay}"]
        refusals += refused_alike(words, "MOE_OVERLAP_REJECTED", WORDS, version)
    assert refusals == 2  # beside the overlap, with and without delay_wgrad_compute
