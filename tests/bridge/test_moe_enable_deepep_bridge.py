"""MOE_ENABLE_DEEPEP_REJECTED against the installed Megatron-Core: moe_enable_deepep with every dispatcher and flex
backend, as Hydra words through runtime_config_update, is refused by the skill with Megatron-Core's words exactly where
it raises them, ncclep's check is never the one said where the flag raises first, and the fix is taken.
tests/bridge/test_second_release.py runs this on a second release (Megatron-Core 0.18 has the same checks)."""

import itertools

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter
from test_dataset_seq_length_bridge import _bridge

WORDS = ("DeepEP backend is only supported with flex token dispatcher.",
         "Only one backend is supported for flex token dispatcher.")
EXPERTS = ["model.num_moe_experts=8", "model.expert_model_parallel_size=8"]


def test_moe_enable_deepep_is_refused_exactly_where_megatron_core_refuses_it():
    version, refusals = adapter.bridge_version(), 0
    for flag, dispatcher, backend in itertools.product(("true", "false"), ("allgather", "alltoall", "flex"),
                                                        ("deepep", "hybridep", "ncclep")):
        words = EXPERTS + [f"model.moe_enable_deepep={flag}", f"model.moe_token_dispatcher_type={dispatcher}",
                           f"model.moe_flex_dispatcher_backend={backend}"]
        taken, error = _bridge(words)
        assert taken, words
        real = bool(error and any(w in error for w in WORDS))
        refusals += real
        errors = [f for f in api.resolve(dict(w.split("=", 1) for w in words), gpus=8, bridge_version=version).findings
                  if f.severity == "error"]
        ours = [f for f in errors if f.id == "MOE_ENABLE_DEEPEP_REJECTED"]
        assert bool(ours) == real, (words, ours, error)
        for f in ours:
            assert errors == [f], (words, errors)  # the first refusal of __post_init__: nothing after it is reached
            assert f"ValueError: {f.message.partition(': ')[2]}" == error
            fixed = words + [f"{k}={str(v).lower()}" for k, v in f.fix_overrides.items()]
            assert not any(w in (_bridge(fixed)[1] or "") for w in WORDS), fixed
    assert refusals == 7  # the flag beside allgather and alltoall (every backend), and beside flex with hybridep
