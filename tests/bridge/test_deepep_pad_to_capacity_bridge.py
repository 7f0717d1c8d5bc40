"""DEEPEP_PAD_TO_CAPACITY_REJECTED against the installed Megatron-Core: moe_pad_expert_input_to_capacity with every
dispatcher and flex backend, with and without moe_enable_deepep, as Hydra words through runtime_config_update, is
refused by the skill with Megatron-Core's words exactly where it raises them, and the fix is taken.
tests/bridge/test_second_release.py runs this on a second release (Megatron-Core 0.18 has the same check)."""

import itertools

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter
from test_dataset_seq_length_bridge import _bridge

WORDS = "Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity"
EXPERTS = ["model.num_moe_experts=8", "model.expert_model_parallel_size=8", "model.moe_expert_capacity_factor=1.0"]


def test_padding_with_deepep_is_refused_exactly_where_megatron_core_refuses_it():
    version, refusals = adapter.bridge_version(), 0
    for pad, flag, dispatcher, backend in itertools.product(("true", "false"), ("true", "false"), ("alltoall", "flex"),
                                                             ("deepep", "hybridep", "ncclep")):
        words = EXPERTS + [f"model.moe_pad_expert_input_to_capacity={pad}", f"model.moe_enable_deepep={flag}",
                           f"model.moe_token_dispatcher_type={dispatcher}", f"model.moe_flex_dispatcher_backend={backend}"]
        taken, error = _bridge(words)
        assert taken, words
        real = bool(error and WORDS in error)
        refusals += real
        errors = [f for f in api.resolve(dict(w.split("=", 1) for w in words), gpus=8, bridge_version=version).findings
                  if f.severity == "error"]
        ours = [f for f in errors if f.id == "DEEPEP_PAD_TO_CAPACITY_REJECTED"]
        assert bool(ours) == real, (words, ours, error)
        for f in ours:
            assert errors == [f], (words, errors)  # nothing after it in __post_init__ is reached
            assert f"ValueError: {f.message.partition(': ')[2]}" == error
            fixed = words + [f"{k}={str(v).lower()}" for k, v in f.fix_overrides.items()]
            assert WORDS not in (_bridge(fixed)[1] or ""), fixed
    assert refusals == 3  # flex with deepep; with the flag, flex with deepep or ncclep (hybridep: the flag's own check)
