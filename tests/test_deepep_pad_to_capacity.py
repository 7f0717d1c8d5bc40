"""TransformerConfig.__post_init__ refuses moe_pad_expert_input_to_capacity with the flex dispatcher's deepep backend
(0.19.2 transformer_config.py:1599-1607; core_v0.18.x :1451-1458); the skill took it (a field it does not model, read
as given). tests/bridge/test_deepep_pad_to_capacity_bridge.py holds it to the installed Megatron-Core."""

import pytest

from mbridge_overlap import api

WORDS = "Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity"
PAD = {"model.moe_pad_expert_input_to_capacity": "true", "model.moe_expert_capacity_factor": "1.0",
       "model.num_moe_experts": 8, "model.expert_model_parallel_size": 8}


def _errors(overrides, version="0.6.2"):
    return [f for f in api.resolve(overrides, gpus=8, bridge_version=version).findings if f.severity == "error"]


@pytest.mark.parametrize("version", ["0.5.0", "0.5.1", "0.6.2"])
@pytest.mark.parametrize("words", [{}, {"model.moe_flex_dispatcher_backend": "deepep"},
                                   {"model.moe_flex_dispatcher_backend": "hybridep", "model.moe_enable_deepep": "true"}])
def test_flex_with_deepep_is_refused_and_the_padding_off_is_the_fix(version, words):
    overrides = {**PAD, "model.moe_token_dispatcher_type": "flex", **words}
    if words.get("model.moe_enable_deepep"):  # the flag's own check raises first (hybridep beside it)
        assert [f.id for f in _errors(overrides, version)] == ["MOE_ENABLE_DEEPEP_REJECTED"]
        return
    (f,) = _errors(overrides, version)
    assert f.id == "DEEPEP_PAD_TO_CAPACITY_REJECTED" and f.message.partition(": ")[2] == WORDS
    assert f.fix_overrides == {"model.moe_pad_expert_input_to_capacity": False}
    assert not _errors({**overrides, **f.fix_overrides}, version)


def test_not_without_flex_nor_deepep_nor_the_padding():
    assert not _errors({**PAD, "model.moe_token_dispatcher_type": "alltoall"})
    assert not _errors({**PAD, "model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "hybridep"})
    assert not _errors({**PAD, "model.moe_token_dispatcher_type": "flex", "model.moe_pad_expert_input_to_capacity": "false"})
    flag = {**PAD, "model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "ncclep",
            "model.moe_enable_deepep": "true"}  # the flag makes the backend deepep first
    assert [f.id for f in _errors(flag)] == ["DEEPEP_PAD_TO_CAPACITY_REJECTED"]
