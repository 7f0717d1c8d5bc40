"""HybridEP's combine chunk (evalAG AG-2): every Bridge 0.6.2 perf recipe whose flex dispatcher runs hybridep sets
NUM_OF_TOKENS_PER_CHUNK_COMBINE_API in its env_vars (the real catalog: 128, two Nemotron H100 recipes 64), as Bridge
0.5.1's perf launcher did for hybridep (scripts/performance/perf_plugins.py _set_nvl_domain_size: "Workaround for
unfused combine performance regression in DeepEP hybrid-ep"); the 0.6 launcher's apply_target_topology_environment
leaves "model-specific environment ... explicit in the recipe". The launch environment said nothing of it, so a run of
a library recipe without it (deepseek_v3_pretrain_config) was never told what Bridge's own hybridep runs set."""

import pytest

from mbridge_overlap import api
from mbridge_overlap.run import launch_env
from mbridge_overlap.upstream import catalog, releases

NAME = "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API"
HYBRIDEP_PERF = [e for e in catalog.entries("0.6.2") if e["package"] == "perf_recipes" and e["builds"]
                 and not e.get("alias_of") and e["bridge"]["error"] is None
                 and e["bridge"]["effective"]["model"]["moe_flex_dispatcher_backend"] == "hybridep"
                 and e["bridge"]["effective"]["model"]["moe_token_dispatcher_type"] == "flex"]


def _rule(**kw):
    lay = launch_env.Layout(tp=1, cp=1, dp=8, gpu="h100", moe_flex_dispatcher_backend="hybridep", ep=8, **kw)
    return {n: v for n, v, _ in launch_env.rules(releases.get("0.6.2"), lay)}


def test_every_hybridep_perf_recipe_sets_the_combine_chunk():
    assert len(HYBRIDEP_PERF) > 200
    values = [e["bridge"]["env"].get(NAME) for e in HYBRIDEP_PERF]
    assert None not in values
    assert values.count(_rule(flex_in_use=True)[NAME]) > 0.95 * len(values)


def test_the_rule_keys_on_the_flex_dispatcher_running_hybridep():
    assert _rule(flex_in_use=True)[NAME] == "128"
    assert NAME not in _rule(flex_in_use=False)  # (hybridep named but the alltoall dispatcher runs: no combine)


def test_a_library_recipe_without_it_is_told_and_a_recipe_s_own_value_is_kept():
    r = api.resolve(recipe="deepseek_v3_pretrain_config", overrides={"model.expert_model_parallel_size": 8})
    assert r.launch_env[NAME]["value"] == "128"
    (f,) = [f for f in r.findings if f.id == "LAUNCH_ENV_NOT_SET" and NAME in f.message]
    assert f.fix_overrides == {f"env_vars.{NAME}": 128}
    own = api.resolve(recipe="nemotron_3_super_pretrain_64gpu_h100_bf16_config")
    assert str(own.to_dict()["env_vars"][NAME]) == "64"
    assert not [f for f in own.findings if NAME in f.message]


@pytest.mark.parametrize("release", ["0.5.1", "0.5.0"])
def test_0_5_rules_stay_the_library_plugin_s(release):
    lay = launch_env.Layout(tp=1, cp=1, dp=8, gpu="h100", moe_flex_dispatcher_backend="hybridep", flex_in_use=True, ep=8)
    assert NAME not in {n for n, _, _ in launch_env.rules(releases.get(release), lay)}
