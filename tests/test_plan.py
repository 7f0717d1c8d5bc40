"""plan: overrides, modes, presets and launch environment, against Bridge's own rules."""

import subprocess
import sys
from pathlib import Path

import pytest

import mbridge_overlap
from mbridge_overlap import api
from mbridge_overlap import UsageError
from mbridge_overlap.upstream.releases import Preset, data


def plan(**kw):
    return mbridge_overlap.plan(**kw).to_dict()


def test_seed_layout_enables_every_mode_with_minimal_overrides():
    d = plan(tp=4, pp=4, vpp=2, gpus=64, gpu="h100")
    assert d["data_parallel_size"] == 4
    assert all(m["enabled"] for m in d["modes"].values())
    assert d["overrides"] == {
        "model.tensor_model_parallel_size": 4,
        "model.pipeline_model_parallel_size": 4,
        "model.virtual_pipeline_model_parallel_size": 2,
        "model.context_parallel_size": 1,  # evalH H8: pasted over a recipe of CP 2, the plan's DP 4 would be DP 2
        "model.sequence_parallel": True,
        "comm_overlap.tp_comm_overlap": True,
        "comm_overlap.tp_comm_overlap_cfg": None,
        "ddp.use_distributed_optimizer": True,
    }
    # the plan is checked by the resolver: its effective values are the resolution of those overrides
    again = mbridge_overlap.resolve(d["overrides"], gpus=64).to_dict()
    assert again["effective"] == d["effective"]


def test_tp1_dp1_layout_says_why_modes_are_off():
    d = plan(tp=1, pp=1, gpus=1)
    assert not any(m["enabled"] for m in d["modes"].values())
    assert "TP = 1" in d["modes"]["tp"]["why"] and "DP = 1" in d["modes"]["dp"]["why"]
    assert "model.sequence_parallel" not in d["overrides"]
    assert "ddp.use_distributed_optimizer" not in d["overrides"]
    assert d["overrides"]["comm_overlap.tp_comm_overlap"] is False


def test_pp_without_vpp_is_not_overlapped():
    d = plan(tp=2, pp=4, gpus=16)
    assert d["modes"]["pp"]["enabled"] is False and "VPP >= 2" in d["modes"]["pp"]["why"]
    assert d["effective"]["model"]["batch_p2p_comm"] is True


def test_no_te_turns_tp_mode_off():
    d = plan(tp=4, gpus=8, te=False)
    assert d["modes"]["tp"]["enabled"] is False
    assert d["overrides"]["comm_overlap.tp_comm_overlap"] is False


def _flags(p: Preset) -> dict:
    gpu = {"h100": "h100", "b200": "b200"}[p.gpu]
    return dict(
        tp=p.tp, cp=p.cp, gpus=p.tp * p.cp * 2, gpu=gpu, precision=p.precision, hidden_size=p.hidden_size,
        seq_length=p.seq_length, micro_batch_size=p.micro_batch_size, lora=p.lora,
    )


@pytest.mark.parametrize("name", data()["tp_overlap_presets"])
def test_every_preset_matches_exactly_the_layout_its_name_spells(name):
    d = plan(**_flags(Preset.parse(name)))
    assert d["preset"] == name
    assert d["overrides"]["comm_overlap.tp_comm_overlap_cfg"] == name
    assert d["effective"]["model"]["tp_comm_overlap_cfg"] == name


def test_there_are_19_presets():
    assert len(data()["tp_overlap_presets"]) == 19


def test_blackwell_family_uses_b200_presets_like_bridge_perf_recipes():
    d = plan(tp=2, gpus=8, gpu="gb200", hidden_size=8192, seq_length=8192, micro_batch_size=1)
    assert d["preset"] == "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192"
    msg = next(f["message"] for f in d["plan_notes"] if f["id"] == "TP_PRESET_MATCHED")
    assert "tuned on b200" in msg


def test_no_preset_for_vr200_or_other_sizes():
    for kw in (dict(gpu="vr200"), dict(hidden_size=4096)):
        args = dict(tp=2, gpus=8, gpu="h100", hidden_size=8192, seq_length=8192, micro_batch_size=1)
        args.update(kw)
        d = plan(**args)
        assert d["preset"] is None
        assert "TP_OVERLAP_DEFAULT_UB_CFG" in {f["id"] for f in d["findings"]}


@pytest.mark.parametrize("precision", ["nvfp4", "fp8_sc"])
def test_no_tp_overlap_where_userbuffers_cannot_carry_the_precision(precision):
    """The first trap of issue 8: NVFP4 (and blockwise FP8) with TP overlap fails at the first step."""
    d = plan(tp=2, gpus=64, gpu="gb200", precision=precision)
    assert d["overrides"]["comm_overlap.tp_comm_overlap"] is False and d["preset"] is None
    assert "TP_OVERLAP_NOT_RECOMMENDED" in {f["id"] for f in d["plan_notes"]}
    assert not [f for f in d["findings"] if f["severity"] == "error"]
    forced = mbridge_overlap.resolve({**d["overrides"], "comm_overlap.tp_comm_overlap": True}, gpus=64, gpu="gb200")
    assert "TP_OVERLAP_UNSUPPORTED_PRECISION" in {f.id for f in forced.errors}


def test_missing_model_sizes_list_the_candidates():
    d = plan(tp=4, gpus=8, gpu="h100")
    msg = next(f["message"] for f in d["findings"] if f["id"] == "TP_OVERLAP_DEFAULT_UB_CFG")
    assert "--hidden-size" in msg
    assert "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048" in msg and "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192" in msg


def test_fp8_precision_sets_the_perf_recipe_and_fp8_preset():
    d = plan(tp=4, gpus=8, precision="fp8", hidden_size=12288, seq_length=2048, micro_batch_size=1)
    assert d["overrides"]["mixed_precision"] == "bf16_with_fp8_current_scaling_mixed"
    assert d["preset"] == "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048"
    assert d["effective"]["ddp"]["fp8_param_gather"] is True


def test_precision_on_a_recipe_of_another_precision_replaces_its_mixed_precision():
    """--precision was ignored with --recipe: the header said fp8_cs, the snippet kept the recipe's BF16."""
    d = plan(recipe="llama3_8b_pretrain_config", precision="fp8_cs", tp=2, gpus=8)
    assert d["overrides"]["mixed_precision"] == "bf16_with_fp8_current_scaling_mixed"
    assert d["effective"]["model"]["fp8"] == "hybrid" and d["layout"]["precision"] == "fp8_cs"
    same = plan(recipe="llama3_8b_pretrain_config", precision="bf16", tp=2, gpus=8)
    assert "mixed_precision" not in same["overrides"]  # the recipe's own precision: nothing to replace
    back = plan(recipe="llama3_70b_pretrain_64gpu_gb200_nvfp4_config", precision="bf16")
    assert back["overrides"]["mixed_precision"] == "bf16_mixed" and not back["effective"]["model"].get("fp4")


@pytest.mark.parametrize("kw", [dict(tp=2, pp=2, gpus=32, gpu="h100", moe=True),
                                dict(recipe="qwen3_30b_a3b_pretrain_config", tp=2, gpus=16, gpu="h100"),
                                dict(tp=2, gpus=8, gpu="gb200", precision="nvfp4")])
def test_a_plan_never_leaves_tp_overlap_off_and_offers_to_turn_it_on(kw):
    """plan --moe without expert parallelism left TP overlap off for MoE practice while the config's MODE_LEFT_OFF
    offered comm_overlap.tp_comm_overlap=true in the same answer."""
    d = plan(**kw)
    left_off = [f for f in d["findings"] if f["id"] == "MODE_LEFT_OFF" and "comm_overlap.tp_comm_overlap" in f["fix_overrides"]]
    not_recommended = [n for n in d["plan_notes"] if n["id"] == "TP_OVERLAP_NOT_RECOMMENDED"]
    assert not (left_off and not_recommended), (left_off, not_recommended)
    assert bool(not_recommended) == (d["effective"]["model"]["tp_comm_overlap"] is False)


# CUDA_DEVICE_MAX_CONNECTIONS by release: 0.6 follows the rule all 444 perf recipes follow (scripts/performance/utils/
# overrides.py), 0.5 follows recipes/run_plugins.py PerfEnvPlugin. Megatron-Core's default flex backend is deepep.
@pytest.mark.parametrize(
    "release, kw, expected",
    [
        ("0.6.2", dict(tp=4, gpus=8, gpu="h100"), "1"),  # Hopper with TP > 1
        ("0.6.2", dict(cp=2, gpus=8, gpu="h100"), "1"),  # Hopper with CP > 1
        ("0.6.2", dict(tp=1, gpus=8, gpu="h100"), "32"),  # the deepep default backend
        ("0.6.2", dict(recipe="qwen35_vl_122b_a10b_pretrain_128gpu_h100_bf16_config", moe_a2a_overlap=True), "32"),  # TP 2, a2a overlap
        ("0.6.2", dict(tp=4, gpus=8, gpu="h100", megatron_fsdp=True), "32"),  # never 1: Megatron-FSDP asserts it
        ("0.6.2", dict(tp=1, gpus=8, gpu="h100", moe_flex_dispatcher_backend="ncclep"), "8"),
        ("0.6.2", dict(tp=2, gpus=2, gpu="b200"), "32"),  # Blackwell: 32 whatever the layout
        ("0.6.2", dict(tp=2, gpus=2, gpu="r100"), "1"),  # R100 is not in 0.6's Blackwell list
        ("0.5.1", dict(tp=2, gpus=2, gpu="b200"), "8"),  # 0.5: 32 only with TP/CP > 1 and DP/PP > 1
        ("0.5.1", dict(tp=2, gpus=4, gpu="b200"), "32"),
        ("0.5.1", dict(tp=2, pp=2, gpus=4, gpu="gb200"), "32"),
        ("0.5.1", dict(tp=2, gpus=4, gpu="h100"), "1"),
    ],
)
def test_cuda_device_max_connections(release, kw, expected):
    d = plan(bridge_version=release, **kw)
    assert d["launch_env"]["CUDA_DEVICE_MAX_CONNECTIONS"]["value"] == expected
    assert not [f for f in d["findings"] if f["severity"] == "error"]


def test_layernorm_margin_by_release():
    assert plan(tp=2, gpus=8)["launch_env"]["NVTE_BWD_LAYERNORM_SM_MARGIN"]["value"] == "20"
    assert plan(tp=2, gpus=8, bridge_version="0.5.0")["launch_env"]["NVTE_FWD_LAYERNORM_SM_MARGIN"]["value"] == "16"
    # evalH H9: 0.5's perf launcher (perf_plugins.py) raises it to 20 with a DeepEP or HybridEP flex backend
    for release in ("0.5.0", "0.5.1"):
        for backend, margin in (("deepep", "20"), ("hybridep", "20"), ("ncclep", "16")):
            d = plan(tp=2, pp=2, ep=8, gpus=32, gpu="h100", model="qwen3_30b_a3b", bridge_version=release,
                     moe_flex_dispatcher_backend=backend)
            assert d["launch_env"]["NVTE_FWD_LAYERNORM_SM_MARGIN"]["value"] == margin, (release, backend)


def test_p2p_chunksize_only_where_bridge_sets_it():
    assert plan(tp=4, pp=4, gpus=64, recipe="llama3_70b")["launch_env"]["NCCL_P2P_NET_CHUNKSIZE"]["value"] == "2097152"
    assert plan(tp=4, pp=4, gpus=64, recipe="llama3_8b", task="sft")["launch_env"]["NCCL_P2P_NET_CHUNKSIZE"]["value"] == "2097152"
    assert "NCCL_P2P_NET_CHUNKSIZE" not in plan(tp=4, pp=4, gpus=64, recipe="qwen3_30b_a3b")["launch_env"]
    assert "NCCL_P2P_NET_CHUNKSIZE" not in plan(tp=4, pp=1, gpus=64, recipe="llama3_70b")["launch_env"]


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(gpus=8, recipe="llama9_70b"), "neither a recipe function nor a model family"),
        (dict(recipe="llama3_70b"), "--gpus: required"),
        (dict(tp=0, gpus=8), "--tp: must be a positive integer"),
        (dict(gpus=8, gpu="a100"), "unknown GPU type"),
        (dict(gpus=8, precision="fp4"), "--precision"),
        (dict(gpus=8, bridge_version="0.4.9"), "unknown Megatron-Bridge release"),
        (dict(gpus=8, hidden_size=-1), "--hidden-size"),
    ],
)
def test_bad_layouts(kw, message):
    with pytest.raises(UsageError, match=message):
        mbridge_overlap.plan(**kw)


@pytest.mark.parametrize("kw, finding", [(dict(tp=3, gpus=8), "GPUS_NOT_DIVISIBLE"), (dict(vpp=2, gpus=8), "VPP_WITHOUT_PP")])
def test_layouts_that_fail_are_error_findings_not_bad_input(kw, finding):
    """Bridge takes them; it (or Megatron-Core at setup) fails later: the plan says where, as every rejection."""
    assert finding in {f.id for f in mbridge_overlap.plan(**kw).errors}


def test_plan_from_a_recipe_keeps_its_choices():
    d = plan(recipe="llama3_70b_pretrain_64gpu_gb200_nvfp4_config")
    assert d["layout"]["recipe"] == "llama3_70b_pretrain_64gpu_gb200_nvfp4_config" and d["gpus"] == 64 and d["gpu"] == "gb200"
    assert d["effective"]["model"]["tp_comm_overlap"] is False  # the recipe's own choice, and the only one that runs
    assert d["overrides"] == {"ddp.use_distributed_optimizer": True} or not d["overrides"]
    moved = plan(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config", tp=8)
    assert moved["overrides"]["model.tensor_model_parallel_size"] == 8 and moved["effective"]["model"]["tensor_model_parallel_size"] == 8


def test_a_choice_that_would_bring_an_error_is_left_as_the_recipe_ships_it():
    """A VLM recipe: its variable token count is what userbuffers cannot carry, so the plan leaves TP overlap as the
    recipe has it and says which error turning it on would bring; resolving with it on raises that error."""
    recipe = "qwen25_vl_32b_sft_config"
    d = plan(recipe=recipe)
    left = [n for n in d["plan_notes"] if n["id"] == "PLAN_LEAVES_KEY_AS_SHIPPED"]
    assert [n["knobs"] for n in left] == [["comm_overlap.tp_comm_overlap"]]
    assert "UB_VARIABLE_TOKEN_COUNT" in left[0]["message"]
    assert "comm_overlap.tp_comm_overlap" not in d["overrides"]
    assert not [f for f in d["findings"] if f["severity"] == "error"]
    forced = mbridge_overlap.resolve({**d["overrides"], "comm_overlap.tp_comm_overlap": True}, recipe=recipe, gpus=d["gpus"])
    assert "UB_VARIABLE_TOKEN_COUNT" in {f.id for f in forced.errors}


def test_an_error_of_the_layout_as_asked_leaves_every_choice_in():
    """TP=3 on 8 GPUs fails whatever the plan chooses: no choice is dropped for it."""
    d = plan(tp=3, gpus=8)
    assert "GPUS_NOT_DIVISIBLE" in {f["id"] for f in d["findings"] if f["severity"] == "error"}
    assert not [n for n in d["plan_notes"] if n["id"] == "PLAN_LEAVES_KEY_AS_SHIPPED"]
    assert d["overrides"]["model.sequence_parallel"] is True and d["overrides"]["comm_overlap.tp_comm_overlap"] is True


class _Resolution:
    def __init__(self, overrides: dict, raises_with: dict):
        self.errors = [type("F", (), {"id": fid})() for key, fid in raises_with.items() if key in overrides]


def _plan_choices(known_errors, raises_with: dict, overrides: dict, asked: dict):
    from mbridge_overlap.verbs.plan import _no_new_errors

    return _no_new_errors(lambda chosen: _Resolution(chosen, raises_with), dict(overrides), asked, known_errors, None)


def test_an_error_the_asked_layout_has_never_drops_a_choice_that_would_also_remove_it():
    """The plan's choice `model.sequence_parallel` would take an error away, but the layout as asked raises it too:
    the choice stays. Only an error the asked layout does not raise makes the plan leave a choice out."""
    overrides = {"model.tensor_model_parallel_size": 4, "model.sequence_parallel": True}
    asked = {"model.tensor_model_parallel_size": 4}
    raises_with = {"model.sequence_parallel": "SOME_ERROR"}
    kept, _resolution, notes = _plan_choices(lambda: {"SOME_ERROR"}, raises_with, overrides, asked)
    assert kept == overrides and notes == []
    left, _resolution, notes = _plan_choices(lambda: set(), raises_with, overrides, asked)
    assert left == asked and [n.id for n in notes] == ["PLAN_LEAVES_KEY_AS_SHIPPED"] and notes[0].knobs == ["model.sequence_parallel"]


def test_the_asked_layout_is_not_resolved_where_the_plan_has_no_error():
    def never():
        raise AssertionError("the asked layout was resolved for a plan without errors")

    overrides = {"model.sequence_parallel": True}
    assert _plan_choices(never, {}, overrides, {})[0] == overrides


def test_expert_parallelism_is_part_of_the_layout():
    """plan had no --ep: a plan could not express expert parallelism beyond a recipe's."""
    d = plan(tp=2, pp=2, ep=8, gpus=32, gpu="h100", model="qwen3_30b_a3b")
    assert d["overrides"]["model.expert_model_parallel_size"] == 8 and d["overrides"]["model.num_moe_experts"] == 128
    assert d["effective"]["model"]["expert_model_parallel_size"] == 8
    assert not [f for f in d["findings"] if f["severity"] == "error"]
    assert [n["id"] for n in d["plan_notes"] if n["id"] == "TP_OVERLAP_NOT_RECOMMENDED"]  # MoE practice with EP > 1
    with pytest.raises(UsageError, match="expert count"):  # no experts anywhere: Bridge would refuse the plan's overrides
        plan(tp=2, ep=8, gpus=32, gpu="h100")
    assert "model.expert_model_parallel_size" not in plan(tp=2, gpus=8)["overrides"]  # EP 1: nothing to set


MIXTRAL_8X7B = {"num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336, "num_attention_heads": 32,
                "num_query_groups": 8, "vocab_size": 32000, "num_moe_experts": 8, "moe_router_topk": 2}


def test_the_expert_count_a_shape_gives_is_the_plans_and_the_budgets():
    """evalAH Q1: a model no --model names (Mixtral 8x7B), its experts given with --shape num_moe_experts: plan --ep
    refused it ('neither the recipe nor --model gives one') and budget refused the layout
    (EXPERT_PARALLEL_WITHOUT_EXPERTS), though --shape wins over --model, whose expert count both take."""
    d = plan(tp=2, pp=2, ep=8, gpus=32, gpu="h100", shape=MIXTRAL_8X7B)
    assert d["overrides"]["model.num_moe_experts"] == 8 and d["effective"]["model"]["expert_model_parallel_size"] == 8
    b = api.budget({"model.tensor_model_parallel_size": 2, "model.expert_model_parallel_size": 8,
                    "model.sequence_parallel": True, "model.seq_length": 4096, "dataset.seq_length": 4096,
                    "train.global_batch_size": 256}, shape=MIXTRAL_8X7B, gpus=32, gpu="h100").to_dict()["budget"]
    assert b["layout"]["ep"] == 8 and b["dimensions"]["ep"]["ms"] > 0
    # the shape's count wins over --model's, as every other shape key does
    q = plan(ep=8, gpus=32, gpu="h100", model="qwen3_30b_a3b", shape={"num_moe_experts": 64})
    assert q["overrides"]["model.num_moe_experts"] == 64
    with pytest.raises(UsageError, match="model.num_moe_experts=N"):  # the error names every way to give it
        plan(tp=2, ep=8, gpus=32, gpu="h100")


def test_the_plan_names_its_recipe_as_the_catalog_can_find_it_again():
    """A recipe name both packages define is qualified by the package asked for (verify looks it up again); a name of
    one package stays bare."""
    from mbridge_overlap import api

    both = api.plan(recipe="perf_recipes.llama3_70b_peft_8gpu_h100_bf16_config").to_dict()["layout"]["recipe"]
    assert both == "perf_recipes.llama3_70b_peft_8gpu_h100_bf16_config"
    one = api.plan(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config").to_dict()["layout"]["recipe"]
    assert one == "llama3_70b_pretrain_64gpu_h100_bf16_config"


def test_the_model_named_gives_the_plan_its_hidden_size_and_family():
    """plan --model llama3_70b without a recipe: the preset finder knows the hidden size the budget uses (it said
    'hidden size is not known'), and Bridge's launcher rule for the family applies (NCCL_P2P_NET_CHUNKSIZE with PP > 1)."""
    from mbridge_overlap import api

    p = api.plan(tp=8, pp=4, vpp=5, cp=2, gpus=256, gpu="h100", model="llama3_70b", seq_length=16384,
                 micro_batch_size=1, global_batch_size=256).to_dict()
    assert p["layout"]["hidden_size"] == 8192 and p["layout"]["family"] == "llama3_70b"
    assert p["launch_env"]["NCCL_P2P_NET_CHUNKSIZE"]["value"] == "2097152"
    assert not any("hidden size is not known" in f["message"] for f in p["findings"])
    bare = api.plan(tp=8, pp=4, vpp=5, cp=2, gpus=256, gpu="h100").to_dict()
    assert bare["layout"]["hidden_size"] is None and bare["layout"]["family"] is None
    assert "NCCL_P2P_NET_CHUNKSIZE" not in bare["launch_env"]


def test_a_mode_the_plan_leaves_off_says_why_not_not_requested():
    """TP 16 on GB200 with NVLink domains of 72: TP overlap would put a TP group across two domains
    (UB_TP_ACROSS_NVLINK_DOMAINS), so the plan leaves it off, and the TP mode says so."""
    d = mbridge_overlap.plan(tp=16, gpus=144, gpu="gb200").to_dict()
    assert d["modes"]["tp"]["enabled"] is False
    assert "UB_TP_ACROSS_NVLINK_DOMAINS" in d["modes"]["tp"]["why"] and "not requested" not in d["modes"]["tp"]["why"]


def test_a_recipe_s_model_gives_the_hidden_size_its_preset_is_tuned_for():
    """evalF F5: the 64-GPU H100 llama3_70b recipe moved to 128 B200s at TP 2, PP 4, VPP 5 is the layout of Bridge's
    own B200 recipe; the recipe reads its model's hidden size from the checkpoint's config (not in the offline
    catalog), the published config gives it, and the plan picks the preset Bridge's B200 recipe sets."""
    from mbridge_overlap.upstream import catalog

    bridge_s = catalog.lookup("llama3_70b_pretrain_64gpu_b200_bf16_config", "0.6.2")["request"]["comm_overlap"]["tp_comm_overlap_cfg"]
    d = mbridge_overlap.plan(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config", gpus=128, gpu="b200", tp=2, pp=4, vpp=5, cp=1).to_dict()
    assert d["preset"] == bridge_s
    assert d["overrides"]["comm_overlap.tp_comm_overlap_cfg"] == bridge_s


def test_where_no_preset_name_matches_the_plan_takes_the_one_bridge_s_own_recipe_runs_on_this_shape():
    """evalG G6: the recipe's own CP 2 on 128 B200s at TP 2, PP 4, VPP 5: no preset's name has CP 2, and Bridge's B200
    recipe of the model runs TP 2, CP 2 with one preset; the plan takes it, and the answer does not then call it a
    preset for another layout (nor does resolve of Bridge's own recipe)."""
    from mbridge_overlap.upstream import catalog

    own = catalog.lookup("llama3_70b_pretrain_64gpu_b200_bf16_config", "0.6.2")
    assert own["request"]["model"]["context_parallel_size"] == 2 and own["request"]["model"]["tensor_model_parallel_size"] == 2
    bridge_s = own["request"]["comm_overlap"]["tp_comm_overlap_cfg"]
    d = mbridge_overlap.plan(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config", gpus=128, gpu="b200", tp=2, pp=4, vpp=5).to_dict()
    assert d["preset"] == bridge_s and d["overrides"]["comm_overlap.tp_comm_overlap_cfg"] == bridge_s
    assert "PRESET_NOT_FOR_LAYOUT" not in {f["id"] for f in d["findings"]}
    shipped = mbridge_overlap.resolve(recipe="llama3_70b_pretrain_64gpu_b200_bf16_config").to_dict()
    assert "PRESET_NOT_FOR_LAYOUT" not in {f["id"] for f in shipped["findings"]}
    other = mbridge_overlap.resolve(recipe="llama3_70b_pretrain_64gpu_b200_bf16_config",
                                    overrides={"model.context_parallel_size": 1}, gpus=64).to_dict()
    assert "PRESET_NOT_FOR_LAYOUT" not in {f["id"] for f in other["findings"]}  # CP 1: the name's own shape


def test_a_plan_snippet_sets_cp_and_says_what_its_preset_is_tuned_for():
    """evalH H8: the snippets never wrote CP (pasted over llama3 70B's recipe, CP 2, the plan's DP 4 ran as DP 2), nor
    that the preset they write holds for one sequence length and micro-batch size."""
    from mbridge_overlap import api
    from mbridge_overlap.output import snippets

    p = api.plan(tp=4, pp=4, vpp=2, gpus=64, gpu="h100", model="llama3_70b", seq_length=8192, micro_batch_size=1)
    assert p.to_dict()["preset"]
    for form in ("python", "yaml", "hydra"):
        text = snippets.of_plan(form, p)
        assert "context_parallel_size" in text, form
        assert "tuned for seq_length 8192 and micro_batch_size 1" in text.splitlines()[0], form


@pytest.mark.parametrize("flags", [{"tp": 2, "gpus": 8}, {"tp": 4, "pp": 4, "vpp": 2, "gpus": 64, "recipe": "llama3_70b"},
                                   {"tp": 2, "cp": 2, "pp": 2, "vpp": 2, "gpus": 64, "gpu": "b200", "model": "llama3_70b"}])
def test_the_plan_s_hydra_lines_given_back_resolve_as_its_overrides(flags):
    """fuzzH H8, recheck N2: the ++comm_overlap={...} line of plan --format hydra (a tuned preset's fields nested in
    it) was refused when given back as an override."""
    from mbridge_overlap import api
    from mbridge_overlap.output import snippets
    from mbridge_overlap.run.hydra import parse_override

    plan = api.plan(**flags)
    lines = [line for line in snippets.of_plan("hydra", plan).splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("++comm_overlap={") for line in lines)
    given = dict(parse_override(line) for line in lines)
    start = {"recipe": plan.layout["recipe"]} if plan.layout.get("recipe") else {}
    start["gpu"] = flags.get("gpu", "h100")
    back = api.resolve(given, gpus=flags["gpus"], **start).to_dict()["effective"]
    assert back == api.resolve(plan.overrides, gpus=flags["gpus"], **start).to_dict()["effective"]
    assert plan.preset is None or back["model"]["tp_comm_overlap_cfg"] == plan.preset


@pytest.mark.parametrize("kw, origin", [
    (dict(tp=1, ep=8, gpus=64, gpu="h100", model="qwen3_30b_a3b"), "the recipe baseline"),
    (dict(recipe="qwen3_vl_30b_a3b_pretrain_8gpu_b200_bf16_config"), "recipe qwen3_vl_30b_a3b_pretrain_8gpu_b200_bf16_config"),
])
def test_the_moe_overlap_asked_for_gets_the_dispatcher_it_needs(kw, origin):
    """--moe-a2a-overlap on a config whose dispatcher is allgather (Megatron-Core's default; some VL recipes') was a
    plan Bridge rejects (MOE_OVERLAP_REJECTED, recheck45 N7): the plan sets alltoall and says so; the flex backend
    asked for, or a dispatcher the overlap takes, is left alone."""
    without = plan(**kw)
    assert without["effective"]["model"]["moe_token_dispatcher_type"] == "allgather"
    assert "model.moe_token_dispatcher_type" not in without["overrides"]
    d = plan(**kw, moe_a2a_overlap=True)
    assert not [f["id"] for f in d["findings"] if f["severity"] == "error"]
    assert d["overrides"]["model.moe_token_dispatcher_type"] == "alltoall"
    assert d["effective"]["model"]["overlap_moe_expert_parallel_comm"] is True
    note = next(n for n in d["plan_notes"] if n["id"] == "PLAN_SETS_MOE_DISPATCHER")
    assert origin in note["message"] and "allgather" in note["message"]
    flex = plan(**kw, moe_a2a_overlap=True, moe_flex_dispatcher_backend="deepep")
    assert flex["effective"]["model"]["moe_token_dispatcher_type"] == "flex"
    assert "PLAN_SETS_MOE_DISPATCHER" not in {n["id"] for n in flex["plan_notes"]}
    shipped = plan(recipe="qwen3_30b_a3b_pretrain_64gpu_h100_bf16_config", moe_a2a_overlap=True)
    assert "model.moe_token_dispatcher_type" not in shipped["overrides"]
    assert "PLAN_SETS_MOE_DISPATCHER" not in {n["id"] for n in shipped["plan_notes"]}


@pytest.mark.parametrize("release", ["0.5.1", "0.5.0", "0.6.2"])
def test_a_recipe_whose_name_gives_no_gpu_keeps_its_own_preset(release):
    """evalL L1: 0.5.x's llama3_70b_pretrain_config ships userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192; its name
    gives no GPU nor precision, so plan took it for another layout and wrote tp_comm_overlap_cfg=None (TE's default
    userbuffers config, slower by the skill's own budget). On the GPU its preset is tuned for, the preset stands."""
    d = plan(bridge_version=release, recipe="recipes.llama3_70b_pretrain_config", gpus=64, gpu="h100")
    shipped = mbridge_overlap.resolve(recipe="recipes.llama3_70b_pretrain_config", gpus=64, gpu="h100", bridge_version=release)
    assert shipped.effective["model"]["tp_comm_overlap_cfg"] == "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    assert d["effective"]["model"]["tp_comm_overlap_cfg"] == shipped.effective["model"]["tp_comm_overlap_cfg"]
    assert "comm_overlap.tp_comm_overlap_cfg" not in d["overrides"]


def test_a_recipe_at_tp_1_made_no_tp_overlap_choice_for_the_plan_s_tp():
    """evalL L3: the LoRA recipe at TP 1 ships tp_comm_overlap=false (nothing to overlap there); planned at TP 4 with
    sequence parallel, that 'choice' was kept, and with it LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED (the adapters'
    gradient dropped), a warning of the plan's own making. The plan's TP rule decides instead."""
    recipe = "perf_recipes.llama3_70b_peft_8gpu_h100_bf16_config"
    shipped = mbridge_overlap.resolve(recipe=recipe)
    assert shipped.effective["model"]["tensor_model_parallel_size"] == 1
    d = plan(recipe=recipe, tp=4, pp=2, vpp=4)
    assert d["effective"]["model"]["sequence_parallel"] is True and d["effective"]["model"]["tp_comm_overlap"] is True
    assert "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" not in {f["id"] for f in d["findings"]}
    kept = plan(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config", tp=8)  # a recipe at TP > 1 chose: its choice stands
    assert kept["effective"]["model"]["tp_comm_overlap"] is mbridge_overlap.resolve(
        recipe="llama3_70b_pretrain_64gpu_h100_bf16_config").effective["model"]["tp_comm_overlap"]


RECIPE_70B = "llama3_70b_pretrain_64gpu_h100_bf16_config"


def _recipe_batch():
    from mbridge_overlap.upstream import catalog, releases

    req = catalog.lookup(RECIPE_70B, releases.get(None).version)["request"]
    return req["model"]["seq_length"], req["train"]["micro_batch_size"], req["train"]["global_batch_size"]


@pytest.mark.parametrize("flag, key", [("global_batch_size", "global_batch_size"), ("seq_length", "seq_length"),
                                       ("micro_batch_size", "micro_batch_size")])
def test_a_recipe_plan_costs_the_batch_its_flags_give(flag, key):
    """recheck46 N6: plan --recipe R --global-batch-size N costed the recipe's batch, and said nothing."""
    seq, mbs, gbs = _recipe_batch()
    theirs = {"seq_length": seq, "micro_batch_size": mbs, "global_batch_size": gbs}[key]
    value = theirs // 2 if key != "micro_batch_size" else theirs * 2
    d = plan(recipe=RECIPE_70B, **{flag: value})
    assert d["budget"]["layout"][key] == value
    assert any(str(theirs) in a and key in a for a in d["budget"]["assumptions"])
    # the same config costed the way budget takes it
    overrides = {"train.global_batch_size": value} if key == "global_batch_size" else \
        {"model.seq_length": value, "dataset.seq_length": value} if key == "seq_length" else {"train.micro_batch_size": value}
    alone = api.budget({**d["overrides"], **overrides}, recipe=RECIPE_70B).to_dict()["budget"]
    assert alone["iteration_ms"] == d["budget"]["iteration_ms"]
    assert plan(recipe=RECIPE_70B)["budget"]["iteration_ms"] != d["budget"]["iteration_ms"]


def test_a_plan_batch_bridge_rejects_is_named():
    d = plan(recipe=RECIPE_70B, global_batch_size=_recipe_batch()[2] + 1)
    assert "BATCH_NOT_DIVISIBLE_BY_DP" in d["budget"]["unavailable"] and "flags" in d["budget"]["unavailable"]


def test_plan_on_0_5_sets_expert_tp_one_where_expert_tp_at_tp_could_not_run():
    """evalM M1: Bridge 0.5.x leaves an unset expert TP size at TP; ETP 4 x EP 16 does not divide 32 GPUs, and plan
    refused with no fix. It sets expert TP 1 (0.6's default, what 0.5.x's MoE recipes set), and says why."""
    d = plan(bridge_version="0.5.1", tp=4, ep=16, gpus=32, model="qwen3_30b_a3b")
    assert d["overrides"]["model.expert_tensor_parallel_size"] == 1
    assert not [f["id"] for f in d["findings"] if f["severity"] == "error"]
    (note,) = [n for n in d["plan_notes"] if n["id"] == "PLAN_SETS_EXPERT_TP"]
    assert "EXPERT_GRID_NOT_DIVIDING_WORLD" in note["message"]
    newer = plan(bridge_version="0.6.2", tp=4, ep=16, gpus=32, model="qwen3_30b_a3b")
    assert "model.expert_tensor_parallel_size" not in newer["overrides"]
    assert newer["effective"]["model"]["expert_tensor_parallel_size"] == 1  # Bridge 0.6's own default


def test_an_expert_grid_that_does_not_divide_the_world_gets_expert_tp_one_where_that_fixes_it():
    grid = {"model.tensor_model_parallel_size": 4, "model.sequence_parallel": True, "model.expert_model_parallel_size": 16,
            "model.expert_tensor_parallel_size": 4, "model.num_moe_experts": 64, "model.add_bias_linear": False}
    (f,) = [f for f in api.resolve(grid, gpus=32).to_dict()["findings"] if f["id"] == "EXPERT_GRID_NOT_DIVIDING_WORLD"]
    assert f["fix_overrides"] == {"model.expert_tensor_parallel_size": 1}
    fixed = api.resolve({**grid, **f["fix_overrides"]}, gpus=32).to_dict()["findings"]
    assert not [x for x in fixed if x["severity"] == "error"]
    (g,) = [f for f in api.resolve({**grid, "model.expert_tensor_parallel_size": 1}, gpus=24).to_dict()["findings"]
            if f["id"] == "EXPERT_GRID_NOT_DIVIDING_WORLD"]
    assert g["fix_overrides"] == {}  # ETP is 1 already: only the GPU count or EP can change


def test_model_without_recipe_names_its_provider_s_dispatcher():
    """evalM M9: --model qwen3_30b_a3b without a recipe answered with the baseline GPTModelProvider's allgather
    dispatcher as if it were the run's; Bridge's Qwen3-MoE provider sets alltoall (tier 2 checks the recorded
    value against the installed Bridge). The answer says so, and not once the run sets the dispatcher itself."""
    from mbridge_overlap.run import layers

    value = layers.model_provider("qwen3_30b_a3b")["fields"]["model.moe_token_dispatcher_type"]
    plain = mbridge_overlap.plan(tp=2, ep=8, gpus=64, model="qwen3_30b_a3b").to_dict()
    assert plain["effective"]["model"]["moe_token_dispatcher_type"] != value
    assert any(n.startswith("model.moe_token_dispatcher_type") and f"sets {value}" in n for n in plain["notes"])
    set_it = mbridge_overlap.plan(tp=2, ep=8, gpus=64, model="qwen3_30b_a3b",
                                  overrides={"model.moe_token_dispatcher_type": value}).to_dict()
    assert not any(n.startswith("model.moe_token_dispatcher_type") for n in set_it["notes"])


def test_a_plan_takes_the_fix_of_its_own_finding_as_overrides():
    """evalT U10: plan's PIPELINE_LAYERS_UNEVEN offered a fix whose keys plan could not take (and no snippet for a
    rejected plan): the user's KEY=VALUE beside the flags is applied, kept and written with the plan's overrides."""
    layout = dict(recipe="llama3_8b_pretrain_config", pp=3, gpus=24)
    first = api.plan(**layout)
    uneven = next(f for f in first.analysis.findings if f.id == "PIPELINE_LAYERS_UNEVEN")
    assert uneven.fix_overrides
    second = api.plan(**layout, overrides=uneven.fix_overrides)
    assert not second.errors
    assert all(second.overrides[k] == v for k, v in uneven.fix_overrides.items())
    with pytest.raises(UsageError, match="--pp"):
        api.plan(**layout, overrides={"model.pipeline_model_parallel_size": 4})
    proc = subprocess.run([sys.executable, "-m", "mbridge_overlap", "plan", "--recipe", "llama3_8b_pretrain_config", "--pp",
                           "3", "--gpus", "24", "--format", "hydra", *(f"{k}={str(v).lower()}" for k, v in uneven.fix_overrides.items())],
                          capture_output=True, text=True, cwd=Path(mbridge_overlap.__file__).parent.parent)
    assert proc.returncode == 0 and all(f"{k}=" in proc.stdout for k in uneven.fix_overrides), proc.stderr


def test_a_plan_s_own_overrides_are_typed_and_written_as_bridge_takes_them():
    """recheck56 AC2, evalW W2-1/W2-4: the command line's KEY=VALUE went into the snippets as strings ('10' beside
    Megatron-Core's ints, "false" that Python reads as true), a launch variable as env_vars.NAME (Hydra's struct mode
    refuses a new name) and as an attribute of cfg.env_vars (a dict)."""
    from mbridge_overlap.output import snippets

    given = {"model.num_layers_in_first_pipeline_stage": "10", "model.num_layers_in_last_pipeline_stage": "11",
             "model.sequence_parallel": "false", "env_vars.NCCL_NVLS_ENABLE": "1"}
    plan = api.plan(recipe="llama3_8b_pretrain_config", pp=3, gpus=24, overrides=given)
    assert plan.overrides["model.num_layers_in_first_pipeline_stage"] == 10
    assert plan.overrides["model.sequence_parallel"] is False and plan.overrides["env_vars.NCCL_NVLS_ENABLE"] == 1
    hydra = snippets.of_plan("hydra", plan).splitlines()
    assert "++env_vars.NCCL_NVLS_ENABLE=1" in hydra and "model.num_layers_in_first_pipeline_stage=10" in hydra
    python = snippets.of_plan("python", plan)
    assert 'cfg.env_vars["NCCL_NVLS_ENABLE"] = 1' in python and "cfg.model.sequence_parallel = False" in python


def test_a_plan_s_own_list_and_quoted_overrides_mean_what_hydra_reads():
    """fuzzS S2-1: plan wrote [p2p,a2a] as the text '[p2p,a2a]' and a quoted 'a,b' with its quotes."""
    from mbridge_overlap.cli.options import overrides_of

    plan = api.plan(recipe="llama3_8b_pretrain_config", gpus=16, cp=2,
                    overrides=overrides_of(["model.cp_comm_type=[p2p,a2a]", "model.num_layers_in_first_pipeline_stage=null"]))
    assert plan.overrides["model.cp_comm_type"] == ["p2p", "a2a"]
    assert plan.overrides["model.num_layers_in_first_pipeline_stage"] is None


def test_a_snippet_says_the_preset_s_own_batch_not_the_run_s():
    """evalX X2-4: a recipe's kept preset (..._mbs1_seqlen2048) was said to be tuned for the run's micro-batch 2."""
    from mbridge_overlap.output import snippets

    plan = api.plan(recipe="gpt3_175b_pretrain_config", gpus=128, micro_batch_size=2)
    assert plan.preset.endswith("_mbs1_seqlen2048")  # the recipe's own, kept
    assert "micro_batch_size 1" in snippets.of_plan("python", plan).splitlines()[0]


def test_a_list_override_renders_in_every_snippet_and_nan_is_a_float():
    """recheck57 AD1, AD3: a list stopped the Python snippet (TypeError); nan and inf are Hydra's floats, not text."""
    from mbridge_overlap.cli.options import overrides_of
    from mbridge_overlap.output import snippets
    from mbridge_overlap.run.hydra import value_of as hydra_value

    plan = api.plan(recipe="llama3_8b_pretrain_config", gpus=16, cp=2, overrides=overrides_of(["model.cp_comm_type=[p2p,a2a]"]))
    assert 'cfg.model.cp_comm_type = ["p2p", "a2a"]' in snippets.of_plan("python", plan)
    assert hydra_value("optimizer.clip_grad", "inf") == float("inf") and hydra_value("k", "[nan]")[0] != hydra_value("k", "[nan]")[0]


def test_a_choice_left_out_says_where_the_run_would_fail_not_that_bridge_raises_it():
    """evalAB AB2-6: TP 8 over 4-GPU nodes: plan said "Bridge raises UB_TP_ACROSS_NVLINK_DOMAINS", which no Bridge code
    raises (runtime_config_update and validate() take it); Transformer Engine's initialize_ub fails at setup. A
    config-time error is still Bridge's to raise at its config step."""
    d = plan(tp=8, gpus=16, gpu="h100", machine_facts={"gpus_per_node": 4}, model="llama3_70b")
    (left,) = [n for n in d["plan_notes"] if n["id"] == "PLAN_LEAVES_KEY_AS_SHIPPED"]
    assert "Bridge raises" not in left["message"]
    assert "it fails at setup in Transformer Engine" in left["message"] and "initialize_ub (UB_TP_ACROSS_NVLINK_DOMAINS)" in left["message"]
    from mbridge_overlap import findings
    from mbridge_overlap.verbs.plan import failing

    config_time = findings.make("GPUS_NOT_DIVISIBLE", where="runtime_config_update", gpus=6, tp=4, pp=1, cp=1, size=4)
    assert (config_time.when or "config") == "config" and failing(config_time) == "Bridge raises GPUS_NOT_DIVISIBLE at its config step"
