"""EXPERT_RANK_CAPACITY_REJECTED against the installed Megatron-Core: moe_expert_rank_capacity_factor with every flex
backend, dispatcher and op fuser setting, as Hydra words through runtime_config_update, is refused by the skill with
Megatron-Core's words exactly where it raises them, and the fix is taken. tests/bridge/test_second_release.py runs this
on a second release (Megatron-Core 0.18 has the check in another form)."""

import itertools

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter
from mbridge_overlap.upstream.releases import get, version_key
from test_dataset_seq_length_bridge import _bridge

EXPERTS = ["model.num_moe_experts=8", "model.expert_model_parallel_size=8"]


def _word(key, value):
    return f"{key}={'null' if value is None else str(value).lower()}"


def test_rank_capacity_is_refused_exactly_where_megatron_core_refuses_it():
    version, refusals = adapter.bridge_version(), 0
    for factor, backend, dispatcher, fuser in itertools.product(("1.5", "null"), ("deepep", "hybridep", "ncclep"),
                                                                 ("alltoall", "flex"), ("true", "false")):
        words = EXPERTS + [f"model.moe_expert_rank_capacity_factor={factor}", f"model.moe_flex_dispatcher_backend={backend}",
                           f"model.moe_token_dispatcher_type={dispatcher}", f"model.use_transformer_engine_op_fuser={fuser}"]
        taken, error = _bridge(words)
        assert taken, words
        real = bool(error and "ValueError: moe_expert_rank_capacity_factor " in error)
        refusals += real
        ours = [f for f in api.resolve(dict(w.split("=", 1) for w in words), gpus=8, bridge_version=version).findings
                if f.id == "EXPERT_RANK_CAPACITY_REJECTED"]
        assert bool(ours) == real, (words, ours, error)
        for f in ours:
            assert f"ValueError: {f.message.partition(': ')[2]}" == error
            fixed = words + [_word(k, v) for k, v in f.fix_overrides.items()]
            assert "moe_expert_rank_capacity_factor " not in (_bridge(fixed)[1] or ""), fixed
    # 0.19: deepep (4), hybridep without the op fuser (2), not ncclep beside alltoall (its own check first);
    # 0.18: no op fuser (6), the op fuser with deepep or ncclep (4)
    assert refusals == (6 if version_key(get(version).megatron_core) >= version_key("0.19.0") else 10)
