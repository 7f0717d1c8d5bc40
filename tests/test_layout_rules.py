"""Layout rules the config step does not check, and the fixes of an MoE run: what each verb says agrees."""

import pytest

from mbridge_overlap import api


def test_lint_s_fixes_leave_tp_overlap_off_for_an_moe_run_as_plan_does():
    """evalM M3: COMM_OVERLAP_ABSENT's and PP_OVERLAP_NOT_SELECTED's fixes turned TP overlap on for MoE recipes with
    expert parallelism, where plan leaves it off (TP_OVERLAP_NOT_RECOMMENDED) and MODE_LEFT_OFF says nothing."""
    moe = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "model.expert_model_parallel_size": 4,
           "model.num_moe_experts": 8, "model.pipeline_model_parallel_size": 2}
    found = {f["id"]: f for f in api.resolve(moe, gpus=16).to_dict()["findings"]}
    assert "COMM_OVERLAP_ABSENT" in found
    assert found["COMM_OVERLAP_ABSENT"]["fix_overrides"].get("comm_overlap.tp_comm_overlap") is False
    dense = {k: v for k, v in moe.items() if "expert" not in k}
    found = {f["id"]: f for f in api.resolve(dense, gpus=16).to_dict()["findings"]}
    assert found["COMM_OVERLAP_ABSENT"]["fix_overrides"].get("comm_overlap.tp_comm_overlap") is True


@pytest.mark.parametrize("seq, cp, finds", [(4100, 2, True), (4096, 2, False), (4098, 1, True), (4100, 1, False)])
def test_a_sequence_each_cp_rank_cannot_split_over_tp_is_found_before_the_run(seq, cp, finds):
    """evalM M4: Bridge's config step checks CP's split only; sequence parallel's scatter asserts at the first forward."""
    req = {"model.tensor_model_parallel_size": 4, "model.sequence_parallel": True, "model.context_parallel_size": cp,
           "model.seq_length": seq, "dataset.seq_length": seq}
    ids = {f["id"] for f in api.resolve(req, gpus=8 * cp).to_dict()["findings"]}
    assert ("SP_SEQ_LENGTH_NOT_DIVISIBLE_BY_TP" in ids) is finds
    assert "SP_SEQ_LENGTH_NOT_DIVISIBLE_BY_TP" not in {f["id"] for f in api.resolve(
        {**req, "model.sequence_parallel": False}, gpus=8 * cp).to_dict()["findings"]}


def test_a_section_a_fix_or_plan_creates_keeps_the_recipe_s_bucket_size():
    """evalP P1: COMM_OVERLAP_ABSENT's fix and plan --recipe created comm_overlap over the GPT-OSS perf recipes, whose
    ddp.bucket_size (768,000,000) Bridge's section then replaced by its 128 Mi default, without a word."""
    recipe = "gpt_oss_20b_pretrain_512gpu_gb200_fp8mx_config"
    linted = api.lint(recipe=recipe).to_dict()
    tuned = linted["effective"]["ddp"]["bucket_size"]
    assert tuned is not None and tuned != 128 * 1024 * 1024  # a recipe whose own bucket size a section would replace
    (absent,) = [f for f in linted["findings"] if f["id"] == "COMM_OVERLAP_ABSENT"]
    fixed = api.resolve(recipe=recipe, overrides=absent["fix_overrides"]).to_dict()
    assert fixed["effective"]["ddp"]["bucket_size"] == tuned
    plan = api.plan(recipe=recipe).to_dict()
    assert plan["overrides"].get("comm_overlap.bucket_size") == tuned
    assert plan["effective"]["ddp"]["bucket_size"] == tuned


def test_param_gather_without_the_distributed_optimizer_has_a_fix_with_a_comm_overlap_request():
    """evalQ Q3: with comm_overlap.overlap_param_gather=true and no distributed optimizer the only candidate (ddp and
    optimizer off) left comm_overlap's request unmet, so no fix was offered though two single changes hold."""
    asked = {"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False,
             "comm_overlap.tp_comm_overlap": False, "comm_overlap.overlap_param_gather": True}
    found = {f.id: f for f in api.resolve(recipe="llama3_8b_pretrain_config", overrides=asked, gpus=16).findings}
    fix = found["PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER"].fix_overrides
    assert fix
    after = api.resolve(recipe="llama3_8b_pretrain_config", overrides={**asked, **fix}, gpus=16).findings
    assert not [f for f in after if f.severity in ("warning", "error")]


def test_a_config_with_a_section_but_no_recorded_dp_size_is_not_said_to_lack_the_section(tmp_path):
    """evalQ Q4: a config dumped before runtime_config_update has comm_overlap with data_parallel_size null."""
    from mbridge_overlap import UsageError

    path = tmp_path / "run.yaml"
    path.write_text("_target_: megatron.bridge.training.config.ConfigContainer\nmodel:\n  tensor_model_parallel_size: 2\n"
                    "comm_overlap:\n  tp_comm_overlap: false\n  data_parallel_size: null\n")
    with pytest.raises(UsageError) as err:
        api.resolve(config=str(path))
    assert "no comm_overlap section" not in str(err.value) and "data_parallel_size" in str(err.value)


def test_a_plan_that_turns_dp_overlap_on_at_dp_1_with_cp_keeps_the_recipe_s_bucket_size():
    """recheck50 R3: at DP 1 with CP 8 the plan turns DP overlap on over DP x CP; its section's bucket size was None
    there (Megatron-Core's default then), not the recipe's."""
    recipe = "gpt_oss_20b_pretrain_8gpu_b300_fp8mx_config"
    tuned = api.lint(recipe=recipe).to_dict()["effective"]["ddp"]["bucket_size"]
    plan = api.plan(recipe=recipe, cp=8, gpus=8).to_dict()
    assert plan["effective"]["ddp"]["overlap_grad_reduce"] is True
    assert plan["effective"]["ddp"]["bucket_size"] == tuned


def test_a_list_pipeline_layout_fixes_the_stages_a_vpp_fix_must_respect():
    """evalR S1: DeepSeek-V3's recipes give pipeline_model_parallel_layout as a list of stages; VPP 2 alone was offered
    as a proven fix, and Megatron-Core's TransformerConfig refuses it (the layout's stages give VPP 1)."""
    recipe, asked = "deepseek_v3_pretrain_config", {"model.expert_model_parallel_size": 8}
    layout = api.resolve(recipe=recipe, overrides=asked, gpus=128).to_dict()
    found = {f["id"]: f for f in layout["findings"]}
    assert found["PP_OVERLAP_NOT_SELECTED"]["fix_overrides"].get("model.virtual_pipeline_model_parallel_size") is None
    vpp = api.resolve(recipe=recipe, overrides={**asked, "model.virtual_pipeline_model_parallel_size": 2}, gpus=128)
    assert "PIPELINE_LAYOUT_REJECTED" in {f.id for f in vpp.findings}


def test_gemma4_s_own_moe_layer_is_not_said_to_refuse_training():
    """recheck50 R7: Gemma 4's MoE layer (Bridge's Gemma4MoELayer.forward_with_separate_inputs) skips the check."""
    ids = {f.id for f in api.resolve(recipe="gemma4_vl_26b_sft_8gpu_h100_bf16_config",
                                     overrides={"model.sequence_parallel": False}).findings}
    assert "MOE_TP_WITHOUT_SEQUENCE_PARALLEL" not in ids
    ids = {f.id for f in api.resolve(recipe="glm45_355b_sft_config").findings}
    assert "MOE_TP_WITHOUT_SEQUENCE_PARALLEL" in ids


def test_a_vpp_a_list_layout_gives_at_the_finalize_is_asked_for_explicitly():
    """recheck51 T1: at PP 8 DeepSeek-V3's 16-stage list layout gives VPP 2 at the model's finalize, after Bridge chose
    the P2P overlap without it; the answer said overlap_p2p_comm=false was requested and offered nothing, and EP
    overlap's rejection only its off (real 0.6.2 runs both with VPP 2 asked)."""
    recipe = "deepseek_v3_pretrain_config"
    asked = {"model.expert_model_parallel_size": 8, "model.pipeline_model_parallel_size": 8}
    found = {f.id: f for f in api.resolve(recipe=recipe, overrides=asked, gpus=128).findings}
    assert found["PP_OVERLAP_NOT_SELECTED"].fix_overrides == {"model.virtual_pipeline_model_parallel_size": 2}
    assert "was requested" not in found["PP_OVERLAP_NOT_SELECTED"].message
    ep = {**asked, "comm_overlap.overlap_moe_expert_parallel_comm": True}
    rejected = {f.id: f for f in api.resolve(recipe=recipe, overrides=ep, gpus=128).findings}["MOE_OVERLAP_REJECTED"]
    assert rejected.fix_overrides == {"model.virtual_pipeline_model_parallel_size": 2}
    fixed = api.resolve(recipe=recipe, overrides={**ep, **rejected.fix_overrides}, gpus=128)
    assert not [f for f in fixed.findings if f.severity == "error"] and fixed.state.model["overlap_p2p_comm"]


def test_a_list_layout_given_as_an_override_s_text_is_a_list():
    """recheck51 T6: Hydra's [[...],[...]] text was read as a one-stage string layout (a false PIPELINE_LAYOUT_REJECTED);
    the request reads the word as Hydra does, so the layout is the list (held to Bridge's parse_hydra_overrides in
    tier 2, tests/bridge/test_layout_words.py)."""
    over = {"model.pipeline_model_parallel_size": 2, "model.num_layers": 2}
    r = api.resolve({**over, "model.pipeline_model_parallel_layout": "[[embedding, decoder], [decoder, loss]]"}, gpus=16)
    assert r.state.request.context["model.pipeline_model_parallel_layout"] == [["embedding", "decoder"], ["decoder", "loss"]]
    assert "PIPELINE_LAYOUT_REJECTED" not in {f.id for f in r.findings}
    r = api.resolve({**over, "model.pipeline_model_parallel_layout": "[not, a, list, of, lists]"}, gpus=16)
    (f,) = [f for f in r.findings if f.id == "PIPELINE_LAYOUT_REJECTED"]
    assert "must be a list of lists" in f.message


def test_gemma4_s_own_moe_layer_is_spared_only_where_bridge_has_it():
    """recheck51 T2: Bridge 0.5.x's Gemma 4 MoE layer inherits MoELayer.forward, which refuses TP > 1 without SP."""
    from mbridge_overlap.run import scenario
    from mbridge_overlap.findings.analysis import analyze

    sc = scenario.build(overrides={"model.tensor_model_parallel_size": 2, "model.num_moe_experts": 8,
                                   "model.sequence_parallel": False}, gpus=8, family="gemma4_vl_26b")
    assert "MOE_TP_WITHOUT_SEQUENCE_PARALLEL" not in {f.id for f in analyze(sc).findings}
    old = scenario.build(overrides={"model.tensor_model_parallel_size": 2, "model.num_moe_experts": 8,
                                    "model.sequence_parallel": False}, gpus=8, family="gemma4_vl_26b", bridge_version="0.5.1")
    assert "MOE_TP_WITHOUT_SEQUENCE_PARALLEL" in {f.id for f in analyze(old).findings}


def test_the_recipe_s_dp_overlap_over_cp_ranks_is_kept_by_a_section_at_dp_1():
    """recheck51 T5: at DP 1 with CP 8, COMM_OVERLAP_ABSENT's section turned the recipe's DP overlap off."""
    recipe, asked = "gpt_oss_20b_pretrain_8gpu_b300_fp8mx_config", {"model.context_parallel_size": 8}
    before = api.resolve(recipe=recipe, overrides=asked, gpus=8)
    (absent,) = [f for f in before.findings if f.id == "COMM_OVERLAP_ABSENT"]
    after = api.resolve(recipe=recipe, overrides={**asked, **absent.fix_overrides}, gpus=8).state.ddp
    for name in ("overlap_grad_reduce", "overlap_param_gather", "bucket_size"):
        assert after[name] == before.state.ddp[name], name


@pytest.mark.parametrize("target, spared", [("megatron.bridge.models.gemma.gemma4_provider.Gemma4ModelProvider", True),
                                            ("megatron.bridge.models.gemma_vl.gemma4_vl_provider.Gemma4VLModelProvider", True),
                                            ("megatron.bridge.models.gpt_provider.GPTModelProvider", False)])
def test_a_run_config_s_gemma4_provider_is_known_without_a_recipe(tmp_path, target, spared):
    """recheck51 T3: a run config names its model by its provider class; Gemma 4's own MoE layer was spared only for
    a recipe's family."""
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  _target_: {target}\n  tensor_model_parallel_size: 2\n  sequence_parallel: false\n"
                      "  expert_model_parallel_size: 2\n  num_moe_experts: 128\n")
    found = {f.id for f in api.resolve(config=config, gpus=8).findings}
    assert ("MOE_TP_WITHOUT_SEQUENCE_PARALLEL" in found) != spared


@pytest.mark.parametrize("recipe, moe", [("gpt_oss_20b_peft_1gpu_h100_bf16_config", True),
                                         ("llama3_8b_pretrain_config", False)])
def test_a_recipe_without_an_expert_count_is_moe_where_its_model_runs_as_moe(recipe, moe):
    """recheck50 R6: gpt_oss_20b's peft recipes read the model from its Hugging Face config (no expert count offline),
    and were not known as MoE at TP 2 without SP; the same model's pretrain recipes run it with experts."""
    from mbridge_overlap.upstream import catalog

    entry = catalog.lookup(recipe, "0.6.2")
    assert not ((entry.get("request") or {}).get("model") or {}).get("num_moe_experts")
    found = {f.id for f in api.resolve(recipe=recipe, gpus=8, overrides={"model.tensor_model_parallel_size": 2,
                                                                         "model.sequence_parallel": False}).findings}
    assert ("MOE_TP_WITHOUT_SEQUENCE_PARALLEL" in found) == moe


def test_dp_overlap_at_dp_1_with_cp_is_a_mode_of_the_gradients_group():
    """evalS V3: at DP 1 with CP 4 the mode said "DP = 1: no data-parallel communication" while the same answer turned
    DP overlap on and the budget priced a reduce over 4 ranks (Megatron-Core's DDP reduces over DP x CP)."""
    base = {"model.context_parallel_size": 4, "comm_overlap.overlap_grad_reduce": True,
            "comm_overlap.overlap_param_gather": True}
    on = api.resolve(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config", overrides=base).to_dict()["modes"]["dp"]
    assert on["enabled"] and "CP" in on["why"]
    one = api.resolve(overrides={"model.tensor_model_parallel_size": 8}, gpus=8).to_dict()["modes"]["dp"]
    assert not one["enabled"] and one["why"].startswith("DP = 1")


@pytest.mark.parametrize("strategy, forced", [("optim_grads_params", {"overlap_grad_reduce", "overlap_param_gather"}),
                                              ("optim_grads", {"overlap_grad_reduce"}), ("optim", set())])
def test_megatron_fsdp_s_forced_dp_overlap_is_the_run_s(strategy, forced):
    """evalS V2: with optim_grads_params the answer said Megatron-FSDP forces DP overlap on, and with the flags set off
    the same answer's mode said DP overlap off, the budget priced it all exposed, and turning it off "held"
    (megatron_fsdp.py turns them on at model wrap, after runtime_config_update)."""
    over = {"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "fsdp_dtensor",
            "ddp.data_parallel_sharding_strategy": strategy, "comm_overlap.overlap_grad_reduce": False,
            "comm_overlap.overlap_param_gather": False}
    d = api.resolve(recipe="llama3_70b_pretrain_64gpu_b200_fp8mx_config", overrides=over).to_dict()
    assert d["modes"]["dp"]["enabled"] == ("overlap_grad_reduce" in forced)
    for name in ("overlap_grad_reduce", "overlap_param_gather"):
        setting = d["budget"]["settings"][name]
        assert setting["effective"] == (name in forced)
        if name in forced:
            assert not setting["flip"]["holds"] and setting["flip"]["because"] == ["MEGATRON_FSDP_DP_OVERLAP"]


def test_the_pp_mode_s_why_says_the_effective_vpp_and_flags():
    """evalT U8: at VPP 2 with both P2P flags false, the why said "without VPP > 1: batch_p2p_comm=true"."""
    from mbridge_overlap import api

    over = {"model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 2,
            "comm_overlap.overlap_p2p_comm": False, "comm_overlap.batch_p2p_comm": False, "comm_overlap.tp_comm_overlap": False}
    pp = api.resolve(over, gpus=8).to_dict()["modes"]["pp"]
    assert pp["enabled"] is False and "VPP = 2" in pp["why"] and "batch_p2p_comm=false" in pp["why"]
