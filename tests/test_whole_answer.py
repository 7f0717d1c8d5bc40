"""Every piece of advice holds against the whole answer: an answer's fix_overrides applied all at once bring no new
warning or error and leave none of the findings they fix; diff's restores each bring their setting back in AFTER and
together clear what AFTER broke; a fix applied to a saved run config is not reported as a saved value that differs."""

from __future__ import annotations

from pathlib import Path

import pytest

import mbridge_overlap.verbs.lint
from mbridge_overlap import api
from mbridge_overlap.findings.proof import BLOCKING, signature

RUNS = Path(__file__).parent / "data" / "run_configs"
QWEN = "perf_recipes.qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config"
LLAMA = "llama3_70b_pretrain_64gpu_h100_bf16_config"


@pytest.mark.parametrize("recipe, overrides", [
    (QWEN, {"comm_overlap.overlap_moe_expert_parallel_comm": None, "comm_overlap.delay_wgrad_compute": None,
            "model.overlap_moe_expert_parallel_comm": True, "model.delay_wgrad_compute": True}),
    (LLAMA, {"ddp.overlap_grad_reduce": False, "model.sequence_parallel": False, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 8}),
    (LLAMA, {"model.virtual_pipeline_model_parallel_size": 3, "comm_overlap.bucket_size": 1 << 30}),
])
def test_an_answer_s_fixes_applied_at_once_bring_nothing_new(recipe, overrides):
    first = api.resolve(recipe=recipe, overrides=overrides)
    union = {}
    for f in first.findings:
        union.update(f.fix_overrides)
    assert union
    before = {signature(f) for f in first.findings if f.severity in BLOCKING}
    fixed = {signature(f) for f in first.findings if f.fix_overrides}
    after = {signature(f) for f in api.resolve(recipe=recipe, overrides={**overrides, **union}).findings if f.severity in BLOCKING}
    assert not after - before, after - before
    assert not after & fixed, after & fixed


def test_all_fixes_says_what_comes_once_every_fix_is_applied():
    """evalE 5: the fixes of an overwritten DP request and of sequence parallel off, applied together, bring info
    findings (DP overlap left off, as asked; TP overlap's preset) the answer never announced: all_fixes lists them."""
    over = {"model.virtual_pipeline_model_parallel_size": 3, "ddp.overlap_grad_reduce": False,
            "ddp.overlap_param_gather": False, "model.sequence_parallel": False}
    d = api.resolve(recipe=LLAMA, overrides=over).to_dict()
    union = {}
    for f in d["findings"]:
        union.update(f["fix_overrides"])
    assert d["all_fixes"]["overrides"] == union
    had = {f["id"] for f in d["findings"]}
    after = api.resolve(recipe=LLAMA, overrides={**over, **union}).to_dict()["findings"]
    assert [t["id"] for t in d["all_fixes"]["then"]] == list(dict.fromkeys(f["id"] for f in after if f["id"] not in had))
    assert "MODE_LEFT_OFF" in [t["id"] for t in d["all_fixes"]["then"]]


def test_a_fix_that_clashes_with_the_others_gives_way_to_theirs():
    """EP overlap back on makes Bridge's launcher pick CUDA_DEVICE_MAX_CONNECTIONS=8, the config's own value: the
    variable's fix (1, right while EP overlap stays off) would clash; the EP fix clears that finding too."""
    over = {"comm_overlap.overlap_moe_expert_parallel_comm": None, "comm_overlap.delay_wgrad_compute": None,
            "model.overlap_moe_expert_parallel_comm": True, "model.delay_wgrad_compute": True}
    r = api.resolve(recipe=QWEN, overrides=over)
    (env,) = [f for f in r.findings if f.id == "LAUNCH_ENV_DIFFERS_FROM_BRIDGE"]
    assert "clears it too" in env.fix and "env_vars.CUDA_DEVICE_MAX_CONNECTIONS" not in env.fix_overrides
    again = {f.id for f in api.resolve(recipe=QWEN, overrides={**over, **env.fix_overrides}).findings}
    assert "LAUNCH_ENV_DIFFERS_FROM_BRIDGE" not in again


def _diff():
    return api.diff(recipe=LLAMA, overrides={"model.virtual_pipeline_model_parallel_size": None, "model.sequence_parallel": False,
                                              "ddp.use_distributed_optimizer": False,
                                              "optimizer.use_distributed_optimizer": False}).to_dict()


def test_each_restore_brings_its_setting_back_in_after():
    d = _diff()
    after = {"model.virtual_pipeline_model_parallel_size": None, "model.sequence_parallel": False,
             "ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False}
    for c in d["overlap_changes"]:
        assert c["fix_overrides"], c["key"]
        r = api.resolve(recipe=LLAMA, overrides={**after, **c["fix_overrides"]}).to_dict()["effective"]
        section, _, name = c["key"].partition(".")
        assert r[section][name] == c["before"], (c["key"], c["fix_overrides"])
    # align_param_gather needs both VPP and the distributed optimizer back (Bridge selects it for the interleaved
    # schedule, and applies the optimizer's overlap settings only with the distributed optimizer)
    (align,) = [c for c in d["overlap_changes"] if c["key"] == "ddp.align_param_gather"]
    assert {"model.virtual_pipeline_model_parallel_size", "ddp.use_distributed_optimizer"} <= set(align["fix_overrides"])


def test_the_restores_together_clear_after_s_new_error_and_say_so():
    d = _diff()
    assert d["restore_all"]["holds"] and d["restore_all"]["clears"] == [e["id"] for e in d["new_errors"]]
    assert all(e["cleared_by_restores"] for e in d["new_errors"])


def test_a_saved_config_with_an_override_is_compared_as_saved(tmp_path):
    plain = {f["id"] for f in mbridge_overlap.verbs.lint.lint(RUNS / "sequence_parallel_off.yaml", gpu="h100").to_dict()["findings"]}
    fixed = mbridge_overlap.verbs.lint.lint(RUNS / "sequence_parallel_off.yaml", {"model.sequence_parallel": True}, gpu="h100")
    ids = {f["id"] for f in fixed.to_dict()["findings"]}
    assert "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL" in plain and "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL" not in ids
    assert "SAVED_EFFECTIVE_DIFFERS" not in ids
    edited = tmp_path / "edited.yaml"  # a saved value that the config itself does not give: still said
    edited.write_text((RUNS / "baseline.yaml").read_text().replace("  overlap_grad_reduce: true\n", "  overlap_grad_reduce: false\n", 1))
    ids = {f["id"] for f in mbridge_overlap.verbs.lint.lint(edited, {"model.sequence_parallel": True}).to_dict()["findings"]}
    assert "SAVED_EFFECTIVE_DIFFERS" in ids


def test_a_fix_that_adds_the_comm_overlap_section_keeps_tp_overlap_where_the_layout_takes_it():
    """evalF F6: llama3_8b_64k (TP 4 with sequence parallel, PP, no comm_overlap section): the PP fix added the section
    with TP overlap off, and two other findings of the same answer then said to turn it on again."""
    recipe = "llama3_8b_64k_pretrain_config"
    shape = {"num_layers": 32}  # (Llama 3 8B's: the recipe reads its model from a Hugging Face config; evalU V1)
    d = api.resolve(recipe=recipe, gpus=64, shape=shape).to_dict()
    assert d["effective"]["model"]["tensor_model_parallel_size"] > 1 and d["effective"]["model"]["sequence_parallel"]
    fixes = {f["id"]: f["fix_overrides"] for f in d["findings"]}
    assert fixes["PP_OVERLAP_NOT_SELECTED"].get("comm_overlap.tp_comm_overlap") is True
    after = api.resolve(recipe=recipe, gpus=64, shape=shape, overrides=d["all_fixes"]["overrides"]).to_dict()
    assert after["modes"]["tp"]["enabled"] and after["modes"]["pp"]["enabled"]


def test_an_overwritten_p2p_overlap_request_is_made_to_hold_and_what_still_stands_is_said():
    """evalG G1: model.overlap_p2p_comm=true without VPP is overwritten; its fix accepted the overwrite, which left P2P
    overlap off and the VPP fix waiting on the wrong finding. VPP 2 makes the request hold (Bridge picks the overlap);
    the answer's fixes together then leave no warning or error standing."""
    over = {"model.sequence_parallel": False, "model.virtual_pipeline_model_parallel_size": None,
            "model.overlap_p2p_comm": True, "ddp.use_distributed_optimizer": False, "ddp.overlap_param_gather": True}
    d = api.resolve(recipe=LLAMA, overrides=over).to_dict()
    fixes = {f["id"]: f["fix_overrides"] for f in d["findings"]}
    assert fixes["MODEL_KNOB_OVERWRITTEN"] == {"model.virtual_pipeline_model_parallel_size": 2}
    after = api.resolve(recipe=LLAMA, overrides={**over, **d["all_fixes"]["overrides"]}).to_dict()
    assert after["modes"]["pp"]["enabled"] and after["modes"]["tp"]["enabled"]
    assert d["all_fixes"]["still"] == [f["id"] for f in after["findings"] if f["severity"] != "info"] == []



def test_a_bucket_size_that_reads_as_bytes_is_not_replaced_by_bridge_s_default():
    """evalG G2: the overwritten ddp.bucket_size=268435456 (256 Mi: parameters, or 256 MiB of gradients) got the fix
    ddp.bucket_size=134217728, Bridge's default in the user's place; the user says which they meant."""
    over = {"model.tensor_model_parallel_size": 4, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True,
            "ddp.bucket_size": 268435456}
    found = {f.id: f for f in api.resolve(overrides=over, gpus=64).findings}
    knob = found["DP_OVERLAP_KNOB_OVERWRITTEN"]
    assert knob.fix_overrides == {} and "BUCKET_SIZE_LOOKS_LIKE_BYTES" in knob.fix
    assert "BUCKET_SIZE_LOOKS_LIKE_BYTES" in found


@pytest.mark.parametrize("version", ["0.5.0", "0.5.1", "0.6.0", "0.6.2"])
@pytest.mark.parametrize("tp, cp", [(2, 1), (1, 2), (4, 2)])
def test_a_planned_launch_environment_is_one_the_plan_s_config_accepts(version, tp, cp):
    """evalJ D1: for Bridge 0.5 the plan of Megatron-FSDP on Hopper with TP/CP > 1 gave PerfEnvPlugin's
    CUDA_DEVICE_MAX_CONNECTIONS=1, which the same config refuses (FSDP_WITH_ONE_CONNECTION). The plan's launch
    environment, given as the launcher's, brings no blocking finding its overrides did not already have; and where
    PerfEnvPlugin would write 1 the nemo_run form leaves it out and sets the executor's variables alone."""
    from mbridge_overlap.output import snippets

    plan = api.plan(tp=tp, cp=cp, gpus=64, gpu="h100", megatron_fsdp=True, bridge_version=version)
    d = plan.to_dict()
    env = {name: str(rule["value"]) for name, rule in d["launch_env"].items()}
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] != "1"
    alone = {signature(f) for f in api.resolve(d["overrides"], gpus=64, gpu="h100", bridge_version=version).findings
             if f.severity in BLOCKING}
    launched = api.resolve(d["overrides"], gpus=64, gpu="h100", bridge_version=version, launcher_env=env).findings
    assert {signature(f) for f in launched if f.severity in BLOCKING} <= alone
    if plan.perf_env_plugin_args() is not None:
        assert plan.perf_env_plugin_refused()
        listed, plugins = type("Executor", (), {"env_vars": {}})(), []
        exec(compile(snippets.of_plan("nemo_run", plan), "nemo_run_snippet", "exec"), {"plugins": plugins, "executor": listed})
        assert plugins == [] and listed.env_vars == env


@pytest.mark.parametrize("version", ["0.6.0", "0.6.2"])
def test_a_megatron_fsdp_plan_of_a_recipe_that_exports_one_connection_sets_what_fsdp_takes(version):
    """recheck N1: a Hopper TP recipe's env_vars set CUDA_DEVICE_MAX_CONNECTIONS=1; plan --megatron-fsdp left it, so
    its own answer failed (FSDP_WITH_ONE_CONNECTION) and no snippet came. The plan sets the value FSDP takes."""
    plan = api.plan(recipe=LLAMA, megatron_fsdp=True, bridge_version=version)
    d = plan.to_dict()
    assert not plan.errors and str(d["overrides"]["env_vars.CUDA_DEVICE_MAX_CONNECTIONS"]) != "1"
    assert "FSDP_WITH_ONE_CONNECTION" in {f.id for f in api.resolve(
        {**d["overrides"], "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1}, recipe=LLAMA, bridge_version=version).findings}


def test_the_all_fixes_line_says_the_budget_comes_once_the_config_runs():
    """evalW W2-2: TP 16 across two NVLink domains fails at setup, so no budget is priced; with the fixes applied the
    budget's WORTH_TP_ACROSS_NETWORK warning came and MODE_LEFT_OFF went, which `then` could not say."""
    from mbridge_overlap.output import text

    over = {"model.tensor_model_parallel_size": 16, "model.context_parallel_size": 1}
    r = api.resolve(over, recipe="llama31_405b_pretrain_512gpu_h100_bf16_config", gpus=128)
    lines = text.resolution(r.to_dict()).splitlines()
    assert any("may add or settle findings" in li for li in lines)
    fixed = api.resolve({**over, **r.all_fixes()["overrides"]}, recipe="llama31_405b_pretrain_512gpu_h100_bf16_config", gpus=128)
    assert "may add or settle findings" not in text.resolution(fixed.to_dict())


def test_a_fix_with_nothing_before_it_does_not_start_with_or():
    """evalW W2-6: a layout's PP with no VPP to prove left the alternatives' text starting "or set VPP ..."."""
    r = api.resolve(recipe="deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config", gpus=512)
    assert all(not f.fix.startswith("or ") for f in r.findings), [f.fix for f in r.findings if f.fix.startswith("or ")]


def test_the_fields_of_a_whole_section_word_are_the_override_s():
    """evalW W2-7: the ++comm_overlap={...} word SKILL.md says to paste set fields labelled 'set by the default'."""
    word = "{_target_:megatron.bridge.training.comm_overlap.CommOverlapConfig,tp_comm_overlap:false,overlap_grad_reduce:true}"
    set_by = api.resolve({"comm_overlap": word}, recipe="qwen25_32b_sft_16gpu_h100_bf16_config", gpus=32).requested()["set_by"]
    assert set_by["comm_overlap.overlap_grad_reduce"] == "override" and set_by["comm_overlap.tp_comm_overlap"] == "override"


def test_moe_overlap_s_vpp_fix_needs_the_layer_count_as_every_vpp_fix_does():
    """evalX X2-5: MOE_OVERLAP_REJECTED offered VPP 2 as proven for GLM-4.5-Air (its layers read from Hugging Face:
    46, so 23 a stage at PP 2), while PP_OVERLAP_NOT_SELECTED of the same answer said no VPP could be."""
    over = {"model.pipeline_model_parallel_size": 2, "comm_overlap.overlap_moe_expert_parallel_comm": True,
            "comm_overlap.tp_comm_overlap": False}
    recipe = "glm45_air_106b_pretrain_32gpu_h100_bf16_config"
    (f,) = [f for f in api.resolve(over, recipe=recipe).findings if f.id == "MOE_OVERLAP_REJECTED"]
    assert "model.virtual_pipeline_model_parallel_size" not in f.fix_overrides
    (g,) = [f for f in api.resolve({**over, "model.num_layers": 46}, recipe=recipe).findings if f.id == "MOE_OVERLAP_REJECTED"]
    vpp = g.fix_overrides.get("model.virtual_pipeline_model_parallel_size")
    assert vpp is None or 23 % vpp == 0


def test_a_shape_megatron_core_refuses_is_no_config_that_does_not_run():
    """recheck58 AE3: a shared expert of 1001 at TP 2 runs through Bridge's config step; the budget refuses the shape
    (SHAPE_REFUSED_BY_MEGATRON_CORE, an error it adds itself), and none of the fixes changes the shape: the all-fixes
    line said the budget 'may add or settle findings' once the config runs."""
    from mbridge_overlap.output import text

    over = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True,
            "model.moe_shared_expert_intermediate_size": 1001}
    d = api.resolve(over, recipe="qwen3_30b_a3b_pretrain_config", gpus=16).to_dict()
    assert [f["id"] for f in d["findings"] if f["severity"] == "error"] == ["SHAPE_REFUSED_BY_MEGATRON_CORE"]
    assert "may add or settle findings" not in text.resolution(d)
