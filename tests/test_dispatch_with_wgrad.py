"""TransformerConfig.__post_init__ refuses overlap_dispatch_backward_with_experts_wgrad beside
overlap_moe_expert_parallel_comm (0.19.2 transformer_config.py:2759-2763; core_v0.18.x :2464-2468); the skill took it
(a field it does not model, read as given). tests/bridge/test_dispatch_with_wgrad_bridge.py holds it to the installed
Megatron-Core."""

import pytest

from mbridge_overlap import api

WORDS = "overlap_moe_expert_parallel_comm must be disabled when enabling overlap_dispatch_backward_with_experts_wgrad."
DISPATCH = {"model.overlap_dispatch_backward_with_experts_wgrad": "true"}
ON = {"model.overlap_moe_expert_parallel_comm": True, "model.num_moe_experts": 8,
      "model.expert_model_parallel_size": 2, "model.moe_token_dispatcher_type": "alltoall"}


def _refused(overrides, version="0.6.2"):
    return [f for f in api.resolve(overrides, gpus=8, bridge_version=version).findings if f.id == "MOE_OVERLAP_REJECTED"]


@pytest.mark.parametrize("version", ["0.5.0", "0.5.1", "0.6.2"])
def test_beside_the_overlap_it_is_refused_and_either_fix_is_taken(version):
    (f,) = _refused({**ON, **DISPATCH}, version)
    assert f.message.partition(": ")[2] == WORDS
    assert f.fix_overrides == {"model.overlap_dispatch_backward_with_experts_wgrad": False}
    assert not _refused({**ON, **DISPATCH, **f.fix_overrides}, version)
    assert not _refused({**ON, **DISPATCH, "model.overlap_moe_expert_parallel_comm": False}, version)


def test_not_alone_nor_after_an_earlier_overlap_assert():
    assert not _refused(DISPATCH)
    said = [f.message for f in _refused({**ON, **DISPATCH, "model.expert_model_parallel_size": 1})]
    assert len(said) == 1 and "expert model parallelism" in said[0]
