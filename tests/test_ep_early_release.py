"""TransformerConfig.__post_init__ refuses ep_overlap_early_attn_memory_release without overlap_moe_expert_parallel_comm
(0.19.2 transformer_config.py:2772-2776; core_v0.18.2 and 0.18.0 :2477-2481); the skill took it (a field it does not
model, read as given). tests/bridge/test_ep_early_release_bridge.py holds it to the installed Megatron-Core."""

import pytest

from mbridge_overlap import api

WORDS = "overlap_moe_expert_parallel_comm must be enabled when enabling ep_overlap_early_attn_memory_release"
EARLY = {"model.ep_overlap_early_attn_memory_release": "true"}


def _refused(overrides, version="0.6.2"):
    return [f for f in api.resolve(overrides, gpus=8, bridge_version=version).findings if f.id == "MOE_OVERLAP_REJECTED"]


@pytest.mark.parametrize("version", ["0.5.0", "0.5.1", "0.6.2"])
def test_early_release_without_the_overlap_is_refused_and_the_fix_turns_it_off(version):
    (f,) = _refused(EARLY, version)
    assert f.message.partition(": ")[2] == WORDS
    assert f.fix_overrides == {"model.ep_overlap_early_attn_memory_release": False}
    assert not _refused({**EARLY, **f.fix_overrides}, version)


def test_not_with_the_overlap_nor_off_nor_after_delay_wgrad_s_refusal():
    on = {"model.overlap_moe_expert_parallel_comm": True, "model.num_moe_experts": 8,
          "model.expert_model_parallel_size": 2, "model.moe_token_dispatcher_type": "alltoall"}
    assert not _refused({**EARLY, **on})
    assert not _refused({"model.ep_overlap_early_attn_memory_release": "false"})
    # delay_wgrad_compute without the overlap is asserted first (0.19.2 :2749-2752)
    said = [f.message for f in _refused({**EARLY, "model.delay_wgrad_compute": True})]
    assert len(said) == 1 and "delay_wgrad_compute" in said[0]


def test_diagnose_names_the_words():
    import io

    causes = api.diagnose(["-"], stdin=io.BytesIO(f"AssertionError: {WORDS}\n".encode())).to_dict()["causes"]
    assert [c["id"] for c in causes] == ["MOE_OVERLAP_REJECTED"]
