"""TransformerConfig.__post_init__ refuses the deprecated moe_enable_deepep without the flex dispatcher and beside the
hybridep backend, then sets the backend to deepep (0.19.2 transformer_config.py:1589-1597; core_v0.18.x :1440-1448);
the skill took it (a field it does not model, read as given). tests/bridge/test_moe_enable_deepep_bridge.py holds it to
the installed Megatron-Core."""

import pytest

from mbridge_overlap import api

FLAG = {"model.moe_enable_deepep": "true"}
EXPERTS = {"model.num_moe_experts": 8, "model.expert_model_parallel_size": 8}


def _resolve(overrides, version="0.6.2"):
    return api.resolve({**EXPERTS, **overrides}, gpus=8, bridge_version=version)


def _refused(overrides, version="0.6.2"):
    return [f for f in _resolve(overrides, version).findings if f.id == "MOE_ENABLE_DEEPEP_REJECTED"]


@pytest.mark.parametrize("version", ["0.5.0", "0.5.1", "0.6.2"])
@pytest.mark.parametrize("words, said", [
    ({}, "DeepEP backend is only supported with flex token dispatcher."),
    ({"model.moe_token_dispatcher_type": "alltoall"}, "DeepEP backend is only supported with flex token dispatcher."),
    ({"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "hybridep"},
     "Only one backend is supported for flex token dispatcher."),
])
def test_refused_in_megatron_core_s_words_and_the_flag_off_is_the_fix(version, words, said):
    (f,) = _refused({**FLAG, **words}, version)
    assert f.severity == "error" and f.message.partition(": ")[2] == said
    assert f.fix_overrides == {"model.moe_enable_deepep": False}
    assert not _refused({**FLAG, **words, **f.fix_overrides}, version)


def test_with_flex_it_sets_the_backend_and_the_ncclep_check_is_not_reached():
    assert not _refused({**FLAG, "model.moe_token_dispatcher_type": "flex"})
    flex = _resolve({**FLAG, "model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "ncclep"})
    assert flex.effective["model"]["moe_flex_dispatcher_backend"] == "deepep"
    assert not [f for f in flex.findings if f.severity == "error"]
    found = [f.id for f in _resolve({**FLAG, "model.moe_flex_dispatcher_backend": "ncclep"}).findings if f.severity == "error"]
    assert found == ["MOE_ENABLE_DEEPEP_REJECTED"]  # it raises first: ncclep without flex is never checked
