"""TransformerConfig.__post_init__ refuses moe_expert_rank_capacity_factor unless the flex backend can use it: 0.19.2
transformer_config.py:1692-1706 (hybridep or ncclep; hybridep with the op fuser), core_v0.18.x :1515-1525 (the op fuser
first, then hybridep); the skill took it (a field it does not model, read as given).
tests/bridge/test_expert_rank_capacity_bridge.py holds it to the installed Megatron-Core."""

import pytest

from mbridge_overlap import api

BACKEND = "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep' or 'ncclep'."
HYBRIDEP = ("moe_expert_rank_capacity_factor with the 'hybridep' backend requires use_transformer_engine_op_fuser to "
            "be enabled.")
FUSER_018 = "moe_expert_rank_capacity_factor requires use_transformer_engine_op_fuser to be enabled."
BACKEND_018 = "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep'."
FACTOR = {"model.moe_expert_rank_capacity_factor": "1.5", "model.num_moe_experts": 8, "model.expert_model_parallel_size": 8}
FUSER, OFF = {"model.use_transformer_engine_op_fuser": True}, {"model.moe_expert_rank_capacity_factor": None}


def _errors(overrides, version="0.6.2", **inputs):
    return [f for f in api.resolve(overrides, gpus=8, bridge_version=version, **inputs).findings if f.severity == "error"]


@pytest.mark.parametrize("version, words, said, fix", [
    ("0.6.2", {}, BACKEND, OFF),
    ("0.6.2", {"model.moe_flex_dispatcher_backend": "hybridep"}, HYBRIDEP, FUSER),
    ("0.6.0", {"model.moe_flex_dispatcher_backend": "hybridep", **{k: False for k in FUSER}}, HYBRIDEP, FUSER),
    ("0.5.1", {}, FUSER_018, OFF),
    ("0.5.0", {"model.moe_flex_dispatcher_backend": "hybridep"}, FUSER_018, FUSER),
    ("0.5.1", {"model.moe_flex_dispatcher_backend": "ncclep", **FUSER}, BACKEND_018, OFF),
])
def test_refused_in_this_release_s_words_and_the_fix_clears_it(version, words, said, fix):
    (f,) = _errors({**FACTOR, **words}, version)
    assert f.id == "EXPERT_RANK_CAPACITY_REJECTED" and f.message.partition(": ")[2] == said
    assert f.fix_overrides == fix
    assert not _errors({**FACTOR, **words, **f.fix_overrides}, version)


def test_not_where_it_is_taken_unknown_or_an_earlier_check_decides():
    assert not _errors({**FACTOR, "model.moe_flex_dispatcher_backend": "hybridep", **FUSER})
    assert not _errors({**FACTOR, "model.moe_flex_dispatcher_backend": "ncclep", "model.moe_token_dispatcher_type": "flex"})
    assert not _errors({**FACTOR, "model.moe_expert_rank_capacity_factor": "null"})
    assert not _errors({**FACTOR, "model.moe_expert_capacity_factor": "1.0",  # its own checks come first
                        "model.moe_router_load_balancing_type": "sinkhorn"})
    ncclep = _errors({**FACTOR, "model.moe_flex_dispatcher_backend": "ncclep"})
    assert [f.id for f in ncclep] == ["NCCLEP_NEEDS_FLEX_DISPATCHER"]  # raised first
    # a recipe's op fuser is not recorded: hybridep's need of it is not judged, the backend's is
    def ours(backend):
        return [f.message for f in _errors({"model.moe_expert_rank_capacity_factor": "1.5",
                                            "model.moe_flex_dispatcher_backend": backend},
                                           recipe="qwen3_30b_a3b_pretrain_config") if f.id == "EXPERT_RANK_CAPACITY_REJECTED"]
    assert not ours("hybridep")
    assert [m.partition(": ")[2] for m in ours("deepep")] == [BACKEND]
