"""The 0.5 launch environment: the library's PerfEnvPlugin (run_plugins.py) is what plan's snippets build; where Bridge
0.5's own perf launcher (scripts/performance/perf_plugins.py, its own PerfEnvPlugin: 32 connections on every SM100+
GPU) would set another CUDA_DEVICE_MAX_CONNECTIONS, the answer says so (evalM M5)."""

import itertools

import pytest

from mbridge_overlap import api

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


def test_hybridep_topology_is_the_0_6_launcher_s():
    """recheck53 X3: the launcher (apply_target_topology_environment, v0.6.0) keys on the backend whatever the
    dispatcher type, and raises for EP > 72 on an NVL72 system, where the skill gave 72 ranks per domain as a fix."""
    from mbridge_overlap import api

    beyond = api.resolve(recipe="qwen3_30b_a3b_pretrain_32gpu_gb200_bf16_config", gpus=256,
                         overrides={"model.expert_model_parallel_size": 128})
    assert "HYBRIDEP_EP_BEYOND_NVLINK_DOMAIN" in {f.id for f in beyond.findings}
    assert "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN" not in beyond.launch_env
    assert not [f for f in beyond.findings if f.fix_overrides.get("env_vars.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN")]
    lay = launch_env.Layout(tp=1, cp=1, dp=8, gpu="gb300", moe_flex_dispatcher_backend="hybridep", flex_in_use=False, ep=16)
    names = {n: v for n, v, _ in launch_env.rules(releases.get("0.6.2"), lay)}
    assert names["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "16" and names["NVLINK_DOMAIN_SIZE"] == "72"


def test_launcher_value_against_the_rule_is_unset_not_adopted():
    """evalT U7: a launcher's NCCL_NVLS_ENABLE=1 over the recipe's 0 (the rule's, without nccl_ub) was adopted into
    the config; the fix is to unset it in the launcher."""
    from mbridge_overlap import api

    r = api.resolve(recipe="llama31_405b_pretrain_128gpu_gb300_fp8cs_config", launcher_env={"NCCL_NVLS_ENABLE": "1"})
    (f,) = [f for f in r.findings if f.id == "LAUNCHER_ENV_WINS" and "NCCL_NVLS_ENABLE" in f.message]
    assert f.fix_overrides == {} and "unset" in f.fix


def test_an_explicit_topology_override_is_the_launcher_s_to_keep():
    """recheck54 Y4: the 0.6 perf launcher keeps a topology variable an explicit env_vars override names (its protected
    names); "Bridge's launcher uses 8 here" was said of the user's 4, with a fix to change it."""
    from mbridge_overlap import api

    name = "qwen3_30b_a3b_pretrain_32gpu_gb200_bf16_config"
    over = {"env_vars.NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": 4}
    assert not [f for f in api.resolve(over, recipe=name).findings if "NUM_OF_HYBRID_EP_RANKS" in f.message]


@pytest.mark.parametrize("exported, warned", [("8", True), ("1", False)])
def test_a_decisive_variable_the_0_5_launcher_exports_otherwise_is_a_warning(exported, warned):
    """recheck53 X4 (0.5): Megatron-Bridge 0.5 has no cfg.env_vars, and a launcher exporting CUDA_DEVICE_MAX_CONNECTIONS=8
    for a TP-overlap run on Hopper (the rule's 1) said nothing there; as in 0.6, it is the launcher's value that runs."""
    over = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True}
    r = api.resolve(over, gpus=8, gpu="h100", bridge_version="0.5.1", launcher_env={"CUDA_DEVICE_MAX_CONNECTIONS": exported})
    found = [f for f in r.findings if f.id == "LAUNCHER_ENV_DIFFERS_FROM_BRIDGE"]
    assert bool(found) == warned
    if warned:
        assert found[0].severity == "warning" and "export CUDA_DEVICE_MAX_CONNECTIONS=1 in the launcher" in found[0].fix


def test_the_launch_environment_listed_keeps_a_topology_override():
    """recheck55 AB8: an explicit ++env_vars override of HybridEP's topology is kept by the 0.6 perf launcher (its
    protected names), and no finding said otherwise, yet the listing of what the launcher uses gave its own rule's 8."""
    name = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"
    recipe = "qwen3_30b_a3b_pretrain_32gpu_gb200_bf16_config"
    plain = api.resolve(recipe=recipe).launch_env[name]["value"]
    kept = api.resolve({f"env_vars.{name}": 4}, recipe=recipe).launch_env[name]
    assert plain != "4" and kept["value"] == "4" and plain in kept["why"]


@pytest.mark.parametrize("fmt", ["env", "nemo_run"])
def test_the_0_5_launcher_snippets_carry_what_its_executor_exports(fmt):
    """evalX X2-6: 0.5's perf executor exports TORCH_NCCL_HIGH_PRIORITY=1 and NCCL_NVLS_ENABLE=0 beside PerfEnvPlugin;
    the JSON said so, the snippets for the launcher did not."""
    from mbridge_overlap.output import snippets

    text = snippets.of_plan(fmt, api.plan(tp=4, gpus=16, gpu="h100", bridge_version="0.5.1"))
    assert "TORCH_NCCL_HIGH_PRIORITY=1" in text and "NCCL_NVLS_ENABLE=0" in text


def test_a_budget_flip_that_brings_a_warning_holds_with_the_launch_variable_it_asks_for():
    """evalAB AB2-5: MoE overlap flipped on DeepSeek-V3's perf recipe at 256 H100s (EP 16) brings only the warning
    LAUNCH_ENV_DIFFERS_FROM_BRIDGE (CUDA_DEVICE_MAX_CONNECTIONS 1 where Bridge's launcher sets 32): the flip was said not
    to hold, though real Bridge 0.6.2's runtime_config_update and validate() accept it. It holds; the warning's
    launch variable is in its fix and its `with` list. An error still stops a flip."""
    from mbridge_overlap.output import text

    over = {"model.expert_model_parallel_size": 16}
    d = api.budget(over, recipe="perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config", gpus=256).to_dict()
    flip = d["budget"]["settings"]["overlap_moe_expert_parallel_comm"]["flip"]
    assert flip["holds"] is True and flip["because"] == []
    assert flip["with"] == [{"id": "LAUNCH_ENV_DIFFERS_FROM_BRIDGE", "overrides": {"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 32}}]
    assert flip["fix"] == "comm_overlap.overlap_moe_expert_parallel_comm=true ++env_vars.CUDA_DEVICE_MAX_CONNECTIONS=32"
    said = text.budget(d)
    assert "turning it on changes the iteration" in said and "LAUNCH_ENV_DIFFERS_FROM_BRIDGE, whose launch setting" in said
    # the fix applied as a whole brings nothing new
    fixed = api.resolve({**over, "comm_overlap.overlap_moe_expert_parallel_comm": True,
                         "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 32},
                        recipe="perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config", gpus=256).to_dict()
    assert not [f for f in fixed["findings"] if f["id"] == "LAUNCH_ENV_DIFFERS_FROM_BRIDGE"]
    assert not [f for f in fixed["findings"] if f["severity"] == "error"]


def test_the_max_connections_reason_is_the_launcher_rule_as_it_reads():
    """evalAB AB2-5: "the flex dispatcher runs hybridep, which needs the extra queues": on Hopper with TP/CP the rule
    gives 1 unless MoE all-to-all overlap is on (Bridge 0.6.0 scripts/performance/utils/overrides.py:257-263; 0.5.x
    perf_plugins.py:260-278): the same recipe with hybridep gets 1 without the overlap, 32 with it."""
    recipe = "perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config"
    over = {"model.expert_model_parallel_size": 16}
    off = api.resolve(over, recipe=recipe, gpus=256).to_dict()["launch_env"]["CUDA_DEVICE_MAX_CONNECTIONS"]
    on = api.resolve({**over, "comm_overlap.overlap_moe_expert_parallel_comm": True}, recipe=recipe,
                     gpus=256).to_dict()["launch_env"]["CUDA_DEVICE_MAX_CONNECTIONS"]
    assert (off["value"], on["value"]) == ("1", "32")
    assert "needs the extra queues" not in on["why"] and "unless MoE all-to-all overlap" in on["why"]
    for version in ("0.5.1", "0.6.0"):
        layout = launch_env.Layout(tp=2, pp=1, cp=1, dp=8, gpu="h100", moe_a2a_overlap=True, moe_flex_dispatcher_backend="deepep", flex_in_use=True)
        value, why = dict((n, (v, w)) for n, v, w in launch_env.rules(releases.get(version), layout))["CUDA_DEVICE_MAX_CONNECTIONS"]
        assert value == "32" and "unless MoE all-to-all overlap" in why, (version, why)


def test_the_launcher_rule_reads_so_in_bridge_s_scripts():
    """The rule the reason words, in the mirror's tags (the 0.6.2 wheel carries no scripts/)."""
    import os
    import subprocess
    from pathlib import Path

    mirror = Path(os.environ.get("MBRIDGE_SKILL_MIRROR", Path(__file__).resolve().parents[2] / ".mirror" / "NVIDIA-NeMo+Megatron-Bridge" / "repo"))
    if not mirror.exists():
        pytest.skip(f"no Megatron-Bridge mirror at {mirror} (set MBRIDGE_SKILL_MIRROR)")

    def show(tag, path):
        return subprocess.run(["git", f"--git-dir={mirror}", "show", f"{tag}:{path}"], capture_output=True, text=True, check=True).stdout

    lines = show("v0.6.0", "scripts/performance/utils/overrides.py").splitlines()
    assert lines[257].strip() == 'max_connections = 32 if base_dispatcher_backend in {"deepep", "hybridep"} else 8'
    assert lines[260].strip() == "elif (tp_size > 1 or cp_size > 1) and not moe_a2a_overlap:" and lines[261].strip() == "max_connections = 1"
    for tag in ("v0.5.0", "v0.5.1"):
        text = show(tag, "scripts/performance/perf_plugins.py").splitlines()
        assert text[260].strip() == 'if moe_flex_dispatcher_backend in ["deepep", "hybridep"]:'
        assert text[270].strip() == "if (tp_size > 1 or cp_size > 1) and not moe_a2a_overlap:"
