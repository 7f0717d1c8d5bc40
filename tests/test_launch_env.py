"""The 0.5 launch environment: the library's PerfEnvPlugin (run_plugins.py) is what plan's snippets build; where Bridge
0.5's own perf launcher (scripts/performance/perf_plugins.py, its own PerfEnvPlugin: 32 connections on every SM100+
GPU) would set another CUDA_DEVICE_MAX_CONNECTIONS, the answer says so (evalM M5)."""

import itertools

from mbridge_overlap.run import launch_env
from mbridge_overlap.upstream import releases


def test_sm100_connections_name_the_perf_launchers_value_where_it_differs():
    release = releases.get("0.5.1")
    seen = set()
    for tp, pp, dp, gpu, flex in itertools.product([1, 2], [1, 2], [1, 4], ["b200", "gb300", "h100"], [None, "deepep"]):
        layout = launch_env.Layout(tp=tp, pp=pp, dp=dp, gpu=gpu, moe_flex_dispatcher_backend=flex, flex_in_use=flex is not None)
        value, why = next((v, w) for k, v, w in launch_env.rules(release, layout) if k == "CUDA_DEVICE_MAX_CONNECTIONS")
        differs = gpu != "h100" and value != "32"
        assert ("sets 32 on every sm100 GPU" in why) == differs, layout
        seen.add(differs)
    assert seen == {True, False}


def test_flat_recipe_releases_have_one_launcher():
    layout = launch_env.Layout(gpu="b200")
    why = next(w for k, v, w in launch_env.rules(releases.get("0.6.2"), layout) if k == "CUDA_DEVICE_MAX_CONNECTIONS")
    assert "perf_plugins.py" not in why


def test_the_sm100_gpus_are_the_release_s():
    """recheck48 R5: v0.5.0's perf launcher leaves vr200 out of its SM100 list (perf_plugins.py: gpu_sm100_or_newer);
    v0.5.1 has it. On 0.5.0 a vr200 with TP 2 takes the Hopper rule's 1, and no note says 32."""
    vr200 = launch_env.Layout(tp=2, dp=4, gpu="vr200")
    for version, want in (("0.5.0", "1"), ("0.5.1", "32")):
        value, why = next((v, w) for k, v, w in launch_env.rules(releases.get(version), vr200) if k == "CUDA_DEVICE_MAX_CONNECTIONS")
        assert value == want and "every sm100 GPU" not in why and not why.startswith("Hopper"), version
    assert "vr200" not in launch_env.sm100_gpus(releases.get("0.5.0")) and "vr200" in launch_env.sm100_gpus(releases.get("0.5.1"))


def test_hybridep_s_topology_follows_ep_and_the_gpu():
    """evalS V5: both releases' perf launchers set HybridEP's NVLink topology from the GPU type and EP; a recipe's own
    NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8 at EP 32 on GB200 passed without a word."""
    from mbridge_overlap import api

    r = api.resolve(recipe="qwen3_30b_a3b_pretrain_32gpu_gb200_bf16_config", overrides={"model.expert_model_parallel_size": 32})
    f = [f for f in r.findings if f.id == "LAUNCH_ENV_DIFFERS_FROM_BRIDGE" and "NUM_OF_HYBRID_EP_RANKS" in f.message]
    assert f and f[0].fix_overrides == {"env_vars.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 32}
    shipped = api.resolve(recipe="qwen3_30b_a3b_pretrain_32gpu_gb200_bf16_config")
    assert not [f for f in shipped.findings if "NUM_OF_HYBRID_EP_RANKS" in f.message]
