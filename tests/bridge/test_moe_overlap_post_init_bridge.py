"""overlap_moe_expert_parallel_comm on the model itself against the installed Megatron-Core: each failing precondition
(and two that hold), as Hydra words on Bridge's command line through runtime_config_update, is refused by the skill
exactly where TransformerConfig.__post_init__ refuses it, in its words. tests/bridge/test_second_release.py runs this on a
second release (0.18's MTP words differ)."""

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter
from test_dataset_seq_length_bridge import _bridge

ON = ["model.overlap_moe_expert_parallel_comm=true"]
EXPERTS = ["model.num_moe_experts=8", "model.expert_model_parallel_size=2", "model.moe_token_dispatcher_type=alltoall"]
CASES = [
    ON, ON + EXPERTS[:2], ON + EXPERTS, ON + ["model.num_moe_experts=1"] + EXPERTS[1:],
    ON + ["model.pipeline_model_parallel_size=2"], ON + EXPERTS + ["model.pipeline_model_parallel_size=2"],
    ON + EXPERTS + ["model.mtp_num_layers=2"], ON + EXPERTS + ["model.moe_shared_expert_overlap=true"],
    ON + EXPERTS + ["model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"],
]


def test_the_model_s_own_overlap_is_refused_exactly_where_megatron_core_refuses_it():
    version, refusals = adapter.bridge_version(), 0
    for words in CASES:
        taken, error = _bridge(words)
        assert taken, words
        ours = [f for f in api.resolve(dict(w.split("=", 1) for w in words), gpus=8, bridge_version=version).findings
                if f.id == "MOE_OVERLAP_REJECTED"]
        assert bool(ours) == bool(error), (words, ours, error)
        refusals += bool(error)
        for f in ours:
            assert f"AssertionError: {f.message.partition(': ')[2]}" == error, (words, f.message, error)
    assert refusals == len(CASES) - 2  # alltoall with 8 experts, and with 1
