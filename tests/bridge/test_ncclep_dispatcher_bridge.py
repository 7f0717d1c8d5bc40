"""NCCLEP_NEEDS_FLEX_DISPATCHER against the installed Bridge and Megatron-Core: every flex backend with every
dispatcher, as Hydra words on Bridge's command line through runtime_config_update (the model's finalize), is refused
by the skill exactly where Megatron-Core refuses it, in its words, and the fix is taken. Megatron-Core 0.18 (Bridge
0.5.x) has no such check: tests/bridge/test_second_release.py runs this on a second release."""

import itertools

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter
from mbridge_overlap.upstream.releases import get, version_key
from test_dataset_seq_length_bridge import _bridge


def test_the_skill_refuses_ncclep_exactly_where_megatron_core_does():
    version = adapter.bridge_version()
    refusals = 0
    for backend, dispatcher in itertools.product(("deepep", "hybridep", "ncclep"), ("allgather", "alltoall", "flex")):
        words = [f"model.moe_flex_dispatcher_backend={backend}", f"model.moe_token_dispatcher_type={dispatcher}",
                 "model.num_moe_experts=8", "model.expert_model_parallel_size=8"]
        taken, error = _bridge(words)
        assert taken, words
        refused = bool(error and "requires moe_token_dispatcher_type='flex'" in error)
        refusals += refused
        ours = [f for f in api.resolve(dict(w.split("=", 1) for w in words), gpus=8, bridge_version=version).findings
                if f.id == "NCCLEP_NEEDS_FLEX_DISPATCHER"]
        assert bool(ours) == refused, (words, ours, error)
        for f in ours:
            assert f.message.partition(": ")[2] in error
            fixed = words + [f"{k}={v}" for k, v in f.fix_overrides.items()]
            assert "requires moe_token_dispatcher_type" not in (_bridge(fixed)[1] or "")
    core = version_key(get(version).megatron_core)
    assert refusals == (2 if core >= version_key("0.19.0") else 0)  # ncclep beside allgather and alltoall
