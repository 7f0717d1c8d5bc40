"""Megatron-Core 0.19's TransformerConfig.__post_init__ (0.19.2 transformer_config.py:1609-1614) refuses
moe_flex_dispatcher_backend='ncclep' with any moe_token_dispatcher_type but flex; the skill took it (the baseline's
dispatcher is allgather). tests/bridge/test_ncclep_dispatcher_bridge.py holds it to the installed Megatron-Core."""

import pytest

from mbridge_overlap import api

MESSAGE = "moe_flex_dispatcher_backend='ncclep' requires moe_token_dispatcher_type='flex'."


def _refused(overrides, **inputs):
    return [f for f in api.resolve(overrides, gpus=8, **inputs).findings if f.id == "NCCLEP_NEEDS_FLEX_DISPATCHER"]


@pytest.mark.parametrize("dispatcher", [None, "allgather", "alltoall"])
def test_ncclep_without_the_flex_dispatcher_is_refused_and_the_fix_keeps_the_dispatcher(dispatcher):
    overrides = {"model.moe_flex_dispatcher_backend": "ncclep"}
    if dispatcher:
        overrides["model.moe_token_dispatcher_type"] = dispatcher
    (f,) = _refused(overrides)
    assert f.severity == "error" and f.message.endswith(MESSAGE)
    assert f.fix_overrides == {"model.moe_flex_dispatcher_backend": "deepep"}
    assert f"the {dispatcher or 'allgather'} dispatcher never reads" in f.fix
    assert not _refused({**overrides, **f.fix_overrides})


def test_not_with_the_flex_dispatcher_nor_another_backend_nor_megatron_core_0_18():
    flex = {"model.moe_flex_dispatcher_backend": "ncclep", "model.moe_token_dispatcher_type": "flex",
            "model.num_moe_experts": 8, "model.expert_model_parallel_size": 8}
    assert not _refused(flex, gpu="h100")
    assert not _refused({"model.moe_flex_dispatcher_backend": "hybridep"})
    for version in ("0.5.0", "0.5.1"):
        assert not _refused({"model.moe_flex_dispatcher_backend": "ncclep"}, bridge_version=version)
    assert _refused({"model.moe_flex_dispatcher_backend": "ncclep"}, bridge_version="0.6.0")
