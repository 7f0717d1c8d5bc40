"""PIPELINE_LAYERS_UNEVEN: where the question makes the layer count known (an override, a run config, a recipe's
own model, the published config of the model a recipe or --model names), a PP that does not divide the layers or a
VPP that does not divide a stage's layers fails when the model is built; a flexible layout is left alone."""

from __future__ import annotations

import pytest

from mbridge_overlap import api

RECIPE = "llama3_70b_pretrain_64gpu_h100_bf16_config"  # reads Llama 3 70B's config: 80 layers, PP 4, VPP 5


def _ids(result) -> set:
    return {f.id for f in result.findings}


def test_a_recipe_s_layers_come_from_its_model_not_the_offline_stand_in():
    assert "PIPELINE_LAYERS_UNEVEN" not in _ids(api.resolve(recipe=RECIPE))  # 20 layers a stage, 5 chunks of 4
    (f,) = [f for f in api.resolve(recipe=RECIPE, overrides={"model.virtual_pipeline_model_parallel_size": 3}).findings
            if f.id == "PIPELINE_LAYERS_UNEVEN"]
    assert "num_layers 80" in f.message and "llama3_70b's published config" in f.message
    assert f.fix_overrides == {"model.virtual_pipeline_model_parallel_size": 2}
    # the fix holds: re-resolved, the finding is gone
    assert "PIPELINE_LAYERS_UNEVEN" not in _ids(api.resolve(recipe=RECIPE, overrides=f.fix_overrides))


@pytest.mark.parametrize("overrides, uneven", [
    ({"model.num_layers": 30, "model.pipeline_model_parallel_size": 4}, True),
    ({"model.num_layers": 32, "model.pipeline_model_parallel_size": 4}, False),
    ({"model.num_layers": 32, "model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 3}, True),
    ({"model.num_layers": 30, "model.pipeline_model_parallel_size": 4, "model.num_layers_in_first_pipeline_stage": 6,
      "model.num_layers_in_last_pipeline_stage": 6}, False),
    ({"model.num_layers": 30, "model.pipeline_model_parallel_size": 4, "model.pipeline_model_parallel_layout": "Et*8|t*8|t*7|t*7L"},
     False),
    ({"model.pipeline_model_parallel_size": 3}, False),  # the baseline's layer count is nobody's: no check
])
def test_the_layer_count_given_decides(overrides, uneven):
    overrides = {"model.tensor_model_parallel_size": 1, "comm_overlap.tp_comm_overlap": False, **overrides}
    got = "PIPELINE_LAYERS_UNEVEN" in _ids(api.resolve(overrides=overrides, gpus=overrides["model.pipeline_model_parallel_size"]))
    assert got == uneven


def test_plan_takes_the_layer_count_of_the_model_it_is_told():
    bad = api.plan(tp=4, pp=4, vpp=3, gpus=64, model="llama3_70b")
    assert "PIPELINE_LAYERS_UNEVEN" in {f.id for f in bad.resolution.findings}
    good = api.plan(tp=4, pp=4, vpp=5, gpus=64, model="llama3_70b")
    assert "PIPELINE_LAYERS_UNEVEN" not in {f.id for f in good.resolution.findings}


@pytest.mark.parametrize("extra, bad", [
    ({"model.cp_comm_type": "a2a+p2p"}, "must be set"),
    ({"model.cp_comm_type": "a2a+p2p", "model.hierarchical_context_parallel_sizes": "[4, 1]"}, "(=4) must equal"),
    ({"model.cp_comm_type": "[p2p, a2a+p2p]"}, "must be set"),  # a per-layer list with one a2a+p2p layer
    ({"model.cp_comm_type": "a2a+p2p", "model.hierarchical_context_parallel_sizes": "[2, 1]"}, None),
    ({"model.cp_comm_type": "a2a"}, None),
    ({"model.hierarchical_context_parallel_sizes": "[2, 2]"}, "(=4) must equal"),  # checked whatever the type
])
def test_hierarchical_cp_sizes_as_bridge_s_validate_checks_them(extra, bad):
    """ConfigContainer._validate_cp_comm_type (Bridge 0.5.0 to 0.6.2)."""
    overrides = {"model.context_parallel_size": 2, "model.seq_length": 8, **extra}
    found = {f.id: f for f in api.resolve(overrides=overrides, gpus=8).findings}
    if bad is None:
        assert "CP_HIERARCHICAL_SIZES_INVALID" not in found
        return
    f = found["CP_HIERARCHICAL_SIZES_INVALID"]
    assert bad in f.message
    if f.fix_overrides:  # the ring alone: proven, and the p2p type no longer reads as unmodelled
        again = {g.id for g in api.resolve(overrides={**overrides, **f.fix_overrides}, gpus=8).findings}
        assert "CP_HIERARCHICAL_SIZES_INVALID" not in again and "UNMODELED_OVERLAP_KEY" not in again


def test_a_sequence_length_set_on_the_model_alone_is_refused_as_bridge_refuses_it():
    """validate() asserts the model's and the dataset's sequence lengths match (a GPT or SFT dataset config): the
    recipe baseline's dataset is 4096 long; a recipe's own dataset is recorded with it (no stand-in)."""
    alone = api.resolve(overrides={"model.seq_length": 8192}, gpus=8)
    (f,) = [f for f in alone.findings if f.id == "SEQ_LENGTH_DATASET_MISMATCH"]
    assert f.fix_overrides == {"dataset.seq_length": 8192} and "dataset config: 4096" in f.message
    both = {g.id for g in api.resolve(overrides={"model.seq_length": 8192, **f.fix_overrides}, gpus=8).findings}
    assert "SEQ_LENGTH_DATASET_MISMATCH" not in both and "UNMODELED_KEY" not in both
    recipe = {g.id for g in api.resolve(recipe=RECIPE, overrides={"model.seq_length": 16384}).findings}
    assert "SEQ_LENGTH_DATASET_MISMATCH" in recipe
    assert "SEQ_LENGTH_DATASET_MISMATCH" not in {g.id for g in api.resolve(recipe=RECIPE).findings}


def test_a_vpp_is_not_offered_where_the_layer_count_is_not_known():
    """evalU V1: VPP 2 was offered (and P2P overlap reported on) for Gemma 3 VL 27B, whose 31 layers a stage no VPP
    splits; its layer count is not known offline. The VPP is not offered as proven, a VPP set is said unchecked, and
    --shape num_layers reaches the check."""
    from mbridge_overlap import api

    name, over = "gemma3_vl_27b_sft_config", {"comm_overlap.tp_comm_overlap": True, "model.sequence_parallel": True}
    pp = next(f for f in api.resolve(over, recipe=name).findings if f.id == "PP_OVERLAP_NOT_SELECTED")
    assert pp.fix_overrides == {} and "num_layers" in pp.fix and "=" not in pp.fix.split("(")[0]
    vpp = {**over, "model.virtual_pipeline_model_parallel_size": 2}
    assert "PIPELINE_LAYERS_NOT_CHECKED" in {f.id for f in api.resolve(vpp, recipe=name).findings}
    checked = {f.id for f in api.resolve(vpp, recipe=name, shape={"num_layers": 62}).findings}
    assert "PIPELINE_LAYERS_UNEVEN" in checked and "PIPELINE_LAYERS_NOT_CHECKED" not in checked


@pytest.mark.parametrize("extra, cleared", [
    ({"model.account_for_embedding_in_pipeline_split": True, "model.account_for_loss_in_pipeline_split": True},
     {"model.account_for_embedding_in_pipeline_split": False, "model.account_for_loss_in_pipeline_split": False}),
    ({"model.pipeline_model_parallel_layout": "Et*17|t*17|t*18L"}, {"model.pipeline_model_parallel_layout": None}),
])
def test_a_hybrid_model_s_split_fix_unsets_what_megatron_core_refuses_beside_it(extra, cleared):
    """recheck55 AB3/AB4: the hybrid allocation reads only the first/last counts, so account_for_* or a layout leave
    Nemotron-H's 52 layers on PP 3 uneven; the counts' fix unsets them (TransformerConfig refuses them together), and
    the fix applied leaves no error."""
    over = {"model.pipeline_model_parallel_size": 3, **extra}
    r = api.resolve(over, recipe="nemotronh_8b_pretrain_config", gpus=24)
    (f,) = [f for f in r.findings if f.id == "PIPELINE_LAYERS_UNEVEN"]
    assert all(f.fix_overrides.get(k, "unset") == v for k, v in cleared.items()), f.fix_overrides
    assert "model.num_layers_in_first_pipeline_stage" in f.fix_overrides
    after = api.resolve({**over, **f.fix_overrides}, recipe="nemotronh_8b_pretrain_config", gpus=24)
    assert not after.errors


def test_a_first_stage_count_vpp_does_not_divide_is_refused_without_the_layer_count():
    """evalX X2-1: TransformerConfig refuses a first/last stage count that VPP does not divide at config time; the
    check waited for a known layer count (Qwen3 14B's recipe reads its model from Hugging Face), so VPP 2 was offered
    as proven beside counts of 9."""
    over = {"model.tensor_model_parallel_size": 4, "model.pipeline_model_parallel_size": 4, "model.sequence_parallel": True,
            "model.num_layers_in_first_pipeline_stage": 9, "model.num_layers_in_last_pipeline_stage": 9}
    with_vpp = api.resolve({**over, "model.virtual_pipeline_model_parallel_size": 2}, recipe="qwen3_14b_pretrain_config", gpus=32)
    assert any(f.id == "PIPELINE_LAYOUT_REJECTED" and "first stage: 9" in f.message for f in with_vpp.errors)
    plain = api.resolve(over, recipe="qwen3_14b_pretrain_config", gpus=32)
    assert all(f.fix_overrides.get("model.virtual_pipeline_model_parallel_size") != 2 for f in plain.findings)


def test_first_and_last_counts_without_a_layer_count_leave_the_vpp_unchecked():
    """recheck57 AD4: counts for the first and last stages leave the middle stages' layers unknown without a layer
    count, so no VPP is proven there (Qwen3 14B: 6 and 8 of 40 leave 13 a middle stage, which VPP 2 does not split)."""
    over = {"model.tensor_model_parallel_size": 4, "model.pipeline_model_parallel_size": 4, "model.sequence_parallel": True,
            "model.num_layers_in_first_pipeline_stage": 6, "model.num_layers_in_last_pipeline_stage": 8}
    r = api.resolve(over, recipe="qwen3_14b_pretrain_config", gpus=32)
    assert all("model.virtual_pipeline_model_parallel_size" not in f.fix_overrides for f in r.findings)
    set_vpp = api.resolve({**over, "model.virtual_pipeline_model_parallel_size": 2}, recipe="qwen3_14b_pretrain_config", gpus=32)
    assert "PIPELINE_LAYERS_NOT_CHECKED" in {f.id for f in set_vpp.findings}


@pytest.mark.parametrize("over", [{"model.overlap_p2p_comm": True},
                                  {"model.overlap_p2p_comm": True, "comm_overlap.tp_comm_overlap": True}])
def test_no_finding_offers_an_unchecked_vpp(over):
    """recheck58 AE1: MODEL_KNOB_OVERWRITTEN offered VPP 2 as proven for DeepSeek-V2 (60 layers at PP 4: 15 a stage,
    which GPTModelProvider.provide refuses to chunk in two) beside PP_OVERLAP_NOT_SELECTED's "none as proven"; with
    the layer count given, the VPP offered divides each stage's layers."""
    name = "deepseek_v2_pretrain_128gpu_h100_bf16_config"
    found = api.resolve(over, recipe=name).findings
    assert not [f.id for f in found if "model.virtual_pipeline_model_parallel_size" in (f.fix_overrides or {})]
    counted = api.resolve({**over, "model.num_layers": 60}, recipe=name).findings
    offered = {f.fix_overrides["model.virtual_pipeline_model_parallel_size"] for f in counted
               if "model.virtual_pipeline_model_parallel_size" in (f.fix_overrides or {})}
    assert offered and all((60 // 4) % vpp == 0 for vpp in offered)


@pytest.mark.parametrize("layout, why", [("Ex*8|t*24L", "Invalid layer character: x"),
                                         ("Et*8|t*25L", "Number of decoder layers 33must match num_layers 32"),
                                         ("t*8E|t*24L", "The first layer must be embedding"),
                                         ("Et*16|t*16L*2", "Loss must be specified exactly once"),
                                         ("Et*8|t*24mL", "Number of mtp layers in layout must match mtp_num_layers")])
def test_a_layout_s_layers_megatron_core_refuses_are_refused(layout, why):
    """fuzzU U2-1: only a layout's stage count was checked; these were answered and costed (tier 2 holds each to
    PipelineParallelLayerLayout)."""
    over = {"model.pipeline_model_parallel_size": 2, "model.context_parallel_size": 1,
            "model.pipeline_model_parallel_layout": layout}
    (f,) = [f for f in api.resolve(over, recipe="llama3_8b_pretrain_config", gpus=16).findings
            if f.id == "PIPELINE_LAYOUT_REJECTED"]
    assert why in f.message and "num_layers" in f.fix
    assert "PIPELINE_LAYOUT_REJECTED" not in {f.id for f in api.resolve(
        {**over, "model.pipeline_model_parallel_layout": "Et*8|t*24L"}, recipe="llama3_8b_pretrain_config", gpus=16).findings}


LAYOUT = "model.pipeline_model_parallel_layout"


def _layout_refusals(layout, n: int, pp: int, mtp=None, **kw) -> list[str]:
    over = {"model.num_layers": n, "model.pipeline_model_parallel_size": pp, "model.mtp_num_layers": mtp, LAYOUT: layout}
    return [x.message for x in api.resolve(over, gpus=8 * pp, **kw).state.rejections if x.id == "PIPELINE_LAYOUT_REJECTED"]


@pytest.mark.parametrize("word", ["'Et|(tt|)*2L'", '"Et|(tt|)*2L"'])
def test_a_quoted_layout_word_is_the_text_hydra_hands_bridge(word):
    """recheck61 AH1, fuzzV V2-5: the quotes were read as layer characters ("Invalid layer character: '"); Hydra strips
    them, and quoting is the only way Hydra takes a layout with parentheses (tier 2: tests/bridge/test_layout_words.py)."""
    assert _layout_refusals(word, 5, 2) == []
    assert _layout_refusals(word, 7, 2) == ["Number of decoder layers 5must match num_layers 7"]


def test_an_unquoted_layout_with_parentheses_is_refused_as_hydra_refuses_it():
    """fuzzV V2-6: Hydra's override parser refuses '(' unquoted (Bridge never starts); it was analysed."""
    from conftest import run_cli

    proc = run_cli("resolve", "--gpus", "16", "model.num_layers=5", "model.pipeline_model_parallel_size=2", f"{LAYOUT}=Et|(tt|)*2L")
    assert proc.returncode == 2 and "Hydra" in proc.stderr and "quote it" in proc.stderr and proc.stderr.count("\n") == 1


def test_a_nested_list_layout_word_is_the_list_hydra_hands_bridge():
    """fuzzV V2-4: [[embedding,decoder],[decoder,loss]] on the command line was refused as a list Hydra does not take."""
    r = api.resolve({"model.num_layers": 2, "model.pipeline_model_parallel_size": 2,
                     LAYOUT: "[[embedding,decoder],[decoder,'loss']]"}, gpus=16)
    assert r.state.request.context[LAYOUT] == [["embedding", "decoder"], ["decoder", "loss"]]
    assert "PIPELINE_LAYOUT_REJECTED" not in {f.id for f in r.findings}


@pytest.mark.parametrize("layout, n, pp, mtp, why", [
    ("Et|tm|L|", 2, 2, 1, "Currently we restrict that the MTP should be always in the last"),  # fuzzV V2-2
    ("Et*8|t*8|t*8|t*8|t*8|t*8|t*13m|mL", 61, 8, 2, "All of the MTP layers must be in the same one virtual pipeline stage"),
    ("Et|t|m|mL", 2, 2, 2, "All of the MTP layers must be in the same one virtual pipeline stage"),  # recheck61 AH3
    ("Etx|tL|", 2, 2, None, "Invalid layer character: x"),  # AH6: the characters before the stage count
    ([["embedding", "decoderx"], ["decoder", "loss"]], 2, 4, None, "pipeline_model_parallel_layout must be divisible"),  # AH6: a list's count first
    ("none", 2, 2, None, "Invalid layer character: n"), ("None", 2, 2, None, "Invalid layer character: N"),  # V2-3
])
def test_a_layout_is_refused_in_megatron_core_s_order(layout, n, pp, mtp, why):
    found = _layout_refusals(layout, n, pp, mtp)
    assert found and found[0].startswith(why), found


@pytest.mark.parametrize("layout, pp", [("Et|t|mL|", 2), ("Et|t||mL", 2), ("Et|(tt|)*30mL", 8)])
def test_mtp_in_each_rank_s_last_virtual_stage_is_taken(layout, pp):
    n = 61 if "30" in layout else 2
    assert _layout_refusals(f"'{layout}'", n, pp, 1) == []


def test_a_multiplier_of_five_digits_is_read():
    """recheck61 AH7: \\d{1,4} read "*00030" as an invalid '0'; parse_str_to_list's \\d+ reads 30."""
    assert _layout_refusals("Et*00030|t*31L", 61, 2) == []
    assert _layout_refusals("Et*00030|t*31L", 60, 2) == ["Number of decoder layers 61must match num_layers 60"]


@pytest.mark.parametrize("text", ['"   "', "none", '""'])
def test_a_config_s_layout_text_is_a_layout(tmp_path, text):
    """fuzzV V2-3: "none", blanks and "" in a config were taken as no layout; YAML's only null is null (and ~)."""
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  pipeline_model_parallel_size: 2\n  pipeline_model_parallel_layout: {text}\n")
    found = [f for f in api.resolve(config=str(config), gpus=16).findings if f.id == "PIPELINE_LAYOUT_REJECTED"]
    assert found


@pytest.mark.parametrize("layout", ["E" + "t" * 5000 + "|L", "'(t*9999999|)*9999999'"])
def test_a_layout_past_the_reading_limits_is_refused_in_one_line(layout):
    """fuzzV V2-1: it was taken as no layout (exit 0, and the budget costed an even split)."""
    from conftest import run_cli

    proc = run_cli("resolve", "--gpus", "16", "model.num_layers=32", "model.pipeline_model_parallel_size=2", f"{LAYOUT}={layout}")
    assert proc.returncode == 2 and "past" in proc.stderr and proc.stderr.count("\n") == 1 and not proc.stdout


@pytest.mark.parametrize("recipe, over", [("deepseek_v4_pro_pretrain_256gpu_gb300_fp8mx_config", {}),
                                          ("deepseek_v4_flash_pretrain_32gpu_h100_bf16_config", {"model.mtp_num_layers": 1})])
def test_a_stand_in_s_mtp_count_is_no_refusal(recipe, over):
    """recheck61 AH2: the catalog's stand-in has no MTP where DeepSeek-V4's Hugging Face config has one (tier 2 holds
    it to Bridge's deepseek_v4_bridge)."""
    assert "PIPELINE_LAYOUT_REJECTED" not in {f.id for f in api.lint(recipe=recipe, overrides=over).findings}
