"""overlap_moe_expert_parallel_comm asked for on the model itself (no comm_overlap section, whose value would be
written over it) is checked by Megatron-Core's TransformerConfig.__post_init__ alone, in its order and its words
(0.19.2 transformer_config.py:2669-2713, 0.18.2 :2399-2441), not by Bridge's comm_overlap asserts: the skill gave
Bridge's words, and refused num_moe_experts=1, which Megatron-Core takes. tests/bridge/test_moe_overlap_post_init_bridge.py
holds every case to the installed Megatron-Core."""

import pytest

from mbridge_overlap import api

ON = {"model.overlap_moe_expert_parallel_comm": True}
EXPERTS = {"model.num_moe_experts": 8, "model.expert_model_parallel_size": 2, "model.moe_token_dispatcher_type": "alltoall"}


def _said(overrides, version="0.6.2"):
    return [f.message.partition(": ")[2] for f in api.resolve({**ON, **overrides}, gpus=8, bridge_version=version).findings
            if f.id == "MOE_OVERLAP_REJECTED"]


def test_megatron_core_s_words_where_the_model_asks_for_the_overlap():
    assert _said({}) == ["overlap_moe_expert_parallel_comm is only supported with expert model parallelism"]
    assert _said({"model.num_moe_experts": 8, "model.expert_model_parallel_size": 2}) == [
        "overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher"]


def test_the_pipeline_check_comes_first_as_in_megatron_core():
    assert _said({"model.pipeline_model_parallel_size": 2}) == [
        "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size > 1"]


def test_one_expert_is_taken_as_megatron_core_takes_it():
    assert _said({**EXPERTS, "model.num_moe_experts": 1}) == []


@pytest.mark.parametrize(("version", "words"), [
    ("0.5.1", "MTP layernum only supports 1 when enabling overlap_moe_expert_parallel_comm."),
    ("0.6.2", "MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm."),
])
def test_the_mtp_words_are_the_release_s(version, words):
    assert _said({**EXPERTS, "model.mtp_num_layers": 2}, version) == [words]


def test_a_comm_overlap_request_keeps_bridge_s_words():
    said = [f.message for f in api.resolve({"comm_overlap.overlap_moe_expert_parallel_comm": True}, gpus=8).findings
            if f.id == "MOE_OVERLAP_REJECTED"]
    assert said and "only supported when expert_model_parallel_size > 1" in said[0]


@pytest.mark.parametrize("version", ["0.5.0", "0.5.1", "0.6.0", "0.6.2"])
@pytest.mark.parametrize("words", [
    "overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher",  # both releases' __post_init__
    "MTP layernum only supports 1 when enabling overlap_moe_expert_parallel_comm.",  # core_v0.18.2 :2439-2441
])
def test_diagnose_names_megatron_core_s_own_words(version, words):
    import io

    log = f"AssertionError: {words}\n".encode()
    causes = api.diagnose(["-"], stdin=io.BytesIO(log), bridge_version=version).to_dict()["causes"]
    assert [c["id"] for c in causes] == ["MOE_OVERLAP_REJECTED"]
