"""The budget of PEFT (LoRA) runs: frozen base weights have no wgrad GEMM, DP moves only the adapters, TP's input
gradients have nothing to hide behind, and LoRA on a LayerNorm-fused linear loses its userbuffers all-gather; checked
against Megatron-Bridge's published LoRA rows where the git mirror is available."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from mbridge_overlap import UsageError, api
from mbridge_overlap.budget import layout, shape as shapes

BASELINE = ROOT / "tests" / "data" / "run_configs" / "baseline.yaml"  # TP 4, PP 4, SP, TP overlap on; GPT-3 175B shape
LORA_RECIPE = "llama3_70b_peft_8gpu_gb300_fp8cs_config"  # Bridge's perf LoRA recipe: linear_qkv, rank 16
LAYOUT = {"model.tensor_model_parallel_size": 1, "model.pipeline_model_parallel_size": 2,
          "model.virtual_pipeline_model_parallel_size": 20, "train.global_batch_size": 32, "train.micro_batch_size": 1,
          "model.seq_length": 4096}


def _with_peft(tmp_path: Path, targets: list[str], dim: int = 16) -> Path:
    text = BASELINE.read_text(encoding="utf-8")
    assert "\npeft: null\n" in text
    section = f"\npeft:\n  _target_: megatron.bridge.peft.lora.LoRA\n  target_modules: {targets}\n  dim: {dim}\n"
    path = tmp_path / "run_config.yaml"
    path.write_text(text.replace("\npeft: null\n", section), encoding="utf-8")
    return path


def _budget(config, **kw):
    return api.budget(config=str(config), gpus=32, gpu="h100", **kw).to_dict()["budget"]


def _tp(b):
    """The layers' own TP collectives (the LoRA adapters' are apart: see the last test)."""
    return {(c["collective"], c["setting"]): c for c in b["collectives"]
            if c["dimension"] == "tp" and not c["what"].startswith("LoRA adapters' own")}


def test_frozen_weights_drop_the_wgrad_gemms(tmp_path):
    """Full training runs forward, dgrad and wgrad GEMMs (3x the forward's GEMM FLOPs); with frozen weights the wgrad
    GEMMs go (2x), the attention's backward stays, and the adapters (rank 16 on QKV) add their own three passes."""
    full, lora = _budget(BASELINE), _budget(_with_peft(tmp_path, ["linear_qkv"]))
    assert lora["compute_ms"] < full["compute_ms"]
    shape = shapes.Shape(num_layers=96, hidden_size=12288, ffn_hidden_size=49152, num_attention_heads=96,
                         vocab_size=51200, gated_linear_unit=False)  # the baseline's shape (GPT-3 175B)
    per_layer = shapes.layer_flops(shape, 2048, 2048, 4, 1)
    gemm = sum(v for k, v in per_layer.items() if k != "attention")
    # the compute the wgrad GEMMs take: a third of the GEMMs' (at the same rate), less the adapters' small additions
    dropped = 1 - lora["compute_ms"] / full["compute_ms"]
    share = gemm / (gemm + per_layer["attention"] * 2)  # the attention core runs at the BF16 rate, half of FP8's
    assert dropped == pytest.approx(share / 3, rel=0.08)


def test_dp_moves_only_the_adapters(tmp_path):
    lora = _budget(_with_peft(tmp_path, ["linear_qkv", "linear_proj"], dim=8))
    (grads,) = [c for c in lora["collectives"] if c["dimension"] == "dp" and c["collective"] == "reduce_scatter"]
    # ParallelLinearAdapter: linear_in (in x dim) and linear_out (dim x out), each split across TP 4; 24 layers a stage;
    # QKV 12288 -> 3 x 12288 (no GQA), proj 12288 -> 12288; gradients in FP32 (the baseline's grad_reduce_in_fp32)
    elements = 24 * 8 * ((12288 + 3 * 12288) + (12288 + 12288)) // 4
    assert elements * 4 <= grads["bytes"] * grads["count"] <= elements * 4 * 1.01
    assert _budget(BASELINE)["dimensions"]["dp"]["ms"] > 100 * lora["dimensions"]["dp"]["ms"]


def test_input_gradients_of_frozen_column_layers_have_nothing_to_hide_behind(tmp_path):
    off = {"comm_overlap.tp_comm_overlap": False}
    full, lora = _tp(_budget(BASELINE, overrides=off)), _tp(_budget(_with_peft(tmp_path, ["linear_proj"]), overrides=off))
    assert full[("reduce_scatter", None)]["exposed_ms"] == 0.0
    assert lora[("reduce_scatter", None)]["exposed_ms"] == lora[("reduce_scatter", None)]["ms"] > 0
    assert ("all_gather", None) in full and ("all_gather", None) not in lora  # no re-gather for a wgrad that never runs


def test_lora_on_qkv_loses_its_userbuffers_all_gather(tmp_path):
    proj = _tp(_budget(_with_peft(tmp_path, ["linear_proj"])))
    qkv = _tp(_budget(_with_peft(tmp_path, ["linear_qkv"])))
    both = _tp(_budget(_with_peft(tmp_path, ["linear_qkv", "linear_fc1"])))
    ag = ("all_gather", "tp_comm_overlap")
    one = proj[ag]["ms"] / proj[ag]["count"]  # all the forward and dgrad all-gathers move the same message
    assert qkv[ag]["exposed_ms"] - proj[ag]["exposed_ms"] == pytest.approx(one * proj[ag]["count"] / 4, rel=0.02)
    assert both[ag]["exposed_ms"] - proj[ag]["exposed_ms"] == pytest.approx(one * proj[ag]["count"] / 2, rel=0.02)


def test_the_lora_finding_names_the_modules_that_lose_the_overlap(tmp_path):
    def found(targets):
        r = api.resolve(config=str(_with_peft(tmp_path, targets)), gpus=32, gpu="h100").to_dict()
        return [f["message"] for f in r["findings"] if f["id"] == "UB_LORA_AG_OVERLAP_DROPPED"]

    assert found(["linear_proj", "linear_fc2"]) == []
    (message,) = found(["linear_qkv"])
    assert "linear_qkv" in message and "linear_fc1" not in message
    (message,) = found(["*.layers.0.*.linear_fc1", "linear_qkv"])
    assert "linear_qkv and linear_fc1" in message


def test_a_recipes_peft_comes_from_the_catalog_and_plan_lora_supplies_the_default():
    recipe = api.budget(LAYOUT, recipe=LORA_RECIPE, gpus=8, gpu="gb300", model="llama3_70b").to_dict()["budget"]
    assert any(a.startswith("PEFT:") for a in recipe["assumptions"])
    planned = [api.plan(tp=1, pp=2, vpp=20, gpus=8, gpu="gb300", model="llama3_70b", seq_length=4096, micro_batch_size=1,
                        global_batch_size=32, lora=lora).to_dict()["budget"] for lora in (False, True)]
    assert not any(a.startswith("PEFT:") for a in planned[0]["assumptions"])
    assert any(a.startswith("PEFT:") for a in planned[1]["assumptions"])
    assert planned[1]["compute_ms"] < 0.75 * planned[0]["compute_ms"]


MIRROR = os.environ.get("MBRIDGE_SKILL_MIRROR")


@pytest.mark.skipif(not MIRROR, reason="needs a Megatron-Bridge git mirror (MBRIDGE_SKILL_MIRROR) for the published tables")
def test_published_lora_rows_are_predicted_within_15_percent_and_were_not_without_the_peft_model(monkeypatch):
    sys.path.insert(0, str(ROOT))
    from tools import check_budget, perf_tables

    rows, _ = check_budget.selected(perf_tables.rows(MIRROR, tasks=("peft",)))
    assert len(rows) >= 5
    _lines, errors = check_budget.report_finetune(rows)
    assert errors["peft"][0] <= 0.15
    check_budget._RESOLVED.clear()
    monkeypatch.setattr(layout, "peft_of", lambda state: None)  # every weight trains, as before the model
    _lines, errors = check_budget.report_finetune(rows)
    check_budget._RESOLVED.clear()
    assert errors["peft"][0] > 0.15


def test_the_layout_line_says_what_trains_with_the_configs_words_escaped(tmp_path):
    import subprocess

    text = BASELINE.read_text(encoding="utf-8").replace(
        "\npeft: null\n", '\npeft:\n  _target_: "evil\\x1b]0;title\\x07"\n  target_modules: ["\\x1b[31mred\\u202e'
        + "x" * 300 + '", ' + ", ".join(f"m{i}" for i in range(50)) + "]\n  dim: 8\n")
    path = tmp_path / "run_config.yaml"
    path.write_text(text, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "mbridge_overlap", "budget", "--config", str(path), "--gpus", "32",
                          "--gpu", "h100"], capture_output=True, text=True, cwd=ROOT)
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("layout:")]
    assert out.returncode == 0 and "\x1b" not in out.stdout and "\u202e" not in out.stdout
    assert "\\x1b[31mred" in line and "(+45 more) (rank 8), base weights frozen" in line and len(line) < 400
    lay = api.budget(config=str(path), gpus=32, gpu="h100").to_dict()["budget"]["layout"]
    assert lay["peft"]["dim"] == 8 and len(lay["peft"]["target_modules"]) == 51 and lay["recompute"] is None


@pytest.mark.parametrize("dim, word", [("1000000000", "peft.dim"), ('"abc"', "peft.dim"), ("0", "peft.dim")])
def test_a_peft_section_no_lora_can_have_is_one_line_and_status_2(tmp_path, dim, word):
    import subprocess

    path = tmp_path / "run_config.yaml"
    path.write_text(BASELINE.read_text(encoding="utf-8").replace(
        "\npeft: null\n", f"\npeft:\n  target_modules: [linear_qkv]\n  dim: {dim}\n"), encoding="utf-8")
    for verb in ("budget", "resolve"):
        out = subprocess.run([sys.executable, "-m", "mbridge_overlap", verb, "--config", str(path), "--gpus", "32",
                              "--gpu", "h100"], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 2 and word in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_adapters_own_sequence_parallel_collectives_are_counted(tmp_path):
    """Bridge's ParallelLinearAdapter with sequence parallel: an adapted linear_qkv gathers its input and
    reduce-scatters that gradient where TP overlap is on, nothing where it is off; an adapted linear_proj gathers its
    output and its gradient either way. Each moves the full [s/CP, b, h] activation in BF16, once a layer and
    micro-batch, in the autograd graph: exposed."""
    def own(targets, **kw):
        b = _budget(_with_peft(tmp_path, targets), **kw)
        return {c["collective"]: c for c in b["collectives"] if c["what"].startswith("LoRA adapters' own")}, b["layout"]

    qkv, lay = own(["linear_qkv"])
    per = lay["micro_batches"] * -(-96 // lay["pp"])  # layers of a stage x micro-batches
    full = lay["seq_length"] * lay["micro_batch_size"] * 12288 * 2
    assert {k: (c["count"], c["bytes"]) for k, c in qkv.items()} == {"all_gather": (per, full), "reduce_scatter": (per, full)}
    assert all(c["exposed_ms"] == c["ms"] > 0 for c in qkv.values())
    assert own(["linear_qkv"], overrides={"comm_overlap.tp_comm_overlap": False})[0] == {}
    proj, _ = own(["linear_proj"], overrides={"comm_overlap.tp_comm_overlap": False})
    assert {k: c["count"] for k, c in proj.items()} == {"all_gather": 2 * per}


def test_lora_on_the_gathered_layernorm_output_is_flagged_where_bridge_takes_it(tmp_path):
    """LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED: sequence parallel, no userbuffers all-gather (TP overlap off), an adapted
    LayerNorm-fused linear, sequence_parallel_input_regather off, Transformer Engine 2.4 or later."""
    def ids(targets, overrides=None, extra="", **kw):
        path = _with_peft(tmp_path, targets)
        if extra:
            path.write_text(path.read_text(encoding="utf-8").replace("  dim: 16\n", "  dim: 16\n" + extra), encoding="utf-8")
        r = api.resolve(overrides or {}, config=str(path), gpus=32, gpu="h100", **kw).to_dict()
        return {f["id"]: f for f in r["findings"]}

    off = {"comm_overlap.tp_comm_overlap": False}
    flagged = ids(["linear_qkv"], off)["LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED"]
    assert flagged["severity"] == "warning" and "linear_qkv" in flagged["message"]
    assert flagged["fix_overrides"] == {} and "sequence_parallel_input_regather=true" in flagged["fix"]
    assert "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" not in ids(["linear_qkv"])  # the baseline keeps TP overlap on
    assert "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" not in ids(["linear_proj"], off)  # no LayerNorm output returned
    assert "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" not in ids(["linear_qkv"], off, "  sequence_parallel_input_regather: true\n")
    # the fix as an override of the run's clears it too (it was read past, and the finding stayed)
    assert "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" not in ids(["linear_qkv"], {**off, "peft.sequence_parallel_input_regather": True})
    assert "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" in ids(["linear_qkv"], {**off, "peft.sequence_parallel_input_regather": "false"})
    with pytest.raises(UsageError, match="expected true or false"):  # typed as Bridge's field: no silent false
        ids(["linear_qkv"], {**off, "peft.sequence_parallel_input_regather": "maybe"})
    assert "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" not in ids(["linear_qkv"], off, machine_facts={"te_version": "2.3.0"})


def test_peft_with_tp_overlap_on_bulk_wgrad_is_flagged_for_the_frozen_linears(tmp_path):
    """PEFT_BULK_WGRAD_ON_FROZEN_WEIGHTS (info): every frozen linear_qkv/linear_fc1 whose dgrad method is bulk (TE's
    default, or the preset's) under TP overlap with sequence parallel."""
    def found(**kw):
        r = api.resolve(**kw).to_dict()
        return {f["id"]: f for f in r["findings"]}.get("PEFT_BULK_WGRAD_ON_FROZEN_WEIGHTS")

    shipped = found(recipe="llama3_70b_peft_8gpu_h100_fp8cs_config", gpus=8)  # TP 2, TP overlap on, no preset
    assert shipped["severity"] == "info" and "linear_qkv and linear_fc1" in shipped["message"]
    assert "default userbuffers config" in shipped["message"] and shipped["fix_overrides"] == {}
    # Bridge's H100 LoRA preset keeps qkv_dgrad bulk and makes fc1_dgrad a pipelined reduce-scatter
    lora_preset = found(overrides={"comm_overlap.tp_comm_overlap_cfg": "userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora"},
                        recipe="llama3_70b_peft_8gpu_h100_fp8cs_config", gpus=8)
    assert "the frozen linear_qkv run" in lora_preset["message"] and "linear_fc1" not in lora_preset["message"]
    assert found(overrides={"comm_overlap.tp_comm_overlap": False}, recipe="llama3_70b_peft_8gpu_h100_fp8cs_config", gpus=8) is None
    assert found(config=str(BASELINE), gpus=32, gpu="h100") is None  # no PEFT: every weight trains
    assert found(config=str(_with_peft(tmp_path, ["linear_proj"])), gpus=32, gpu="h100") is not None  # adapted or not


def test_tp_overlap_that_costs_more_on_a_lora_run_names_the_regather_remedy():
    """evalR S4: 'not tp_comm_overlap=false here: it brings LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED' left out that
    warning's own remedy, so the answer read as a circle."""
    from mbridge_overlap import api

    d = api.resolve(recipe="llama3_70b_peft_8gpu_h100_fp8cs_config").to_dict()
    (worth,) = [f for f in d["budget"]["findings"] if f["id"] == "WORTH_OVERLAP_COSTS_MORE"]
    assert "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" in worth["fix"] and "peft.sequence_parallel_input_regather=true" in worth["fix"]


def test_a_run_with_a_preset_set_is_not_told_to_set_one():
    """evalR S4: with the matching LoRA preset set, WORTH_OVERLAP_COSTS_MORE still suggested "a tuned userbuffers
    preset"; the margins it prices are that preset's, and off is the other way."""
    preset = "userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora"
    fixes = {}
    for cfg in (None, preset):
        over = {"comm_overlap.tp_comm_overlap_cfg": cfg} if cfg else {}
        budget = api.resolve(recipe="llama3_70b_peft_8gpu_h100_fp8cs_config", overrides=over).budget
        fixes[cfg] = next(f["fix"] for f in budget["findings"] if f["id"] == "WORTH_OVERLAP_COSTS_MORE")
    assert "a tuned userbuffers preset" in fixes[None]
    assert "a tuned userbuffers preset" not in fixes[preset] and preset in fixes[preset]



def test_mode_left_off_offers_no_fix_the_budget_says_costs_more_in_any_verb():
    """recheck52 W4: MODE_LEFT_OFF's fix and "every fix at once" turned on the TP overlap the same answer's
    WORTH_TURNING_ON_COSTS_MORE said to leave off. Every verb that shows the budget says it once: resolve, lint and
    diff's AFTER side."""
    recipe = "llama3_70b_peft_8gpu_h100_fp8cs_config"
    over = {"comm_overlap.tp_comm_overlap": False, "peft.sequence_parallel_input_regather": True}
    r = api.resolve(recipe=recipe, overrides=over)
    assert any(f["id"] == "WORTH_TURNING_ON_COSTS_MORE" for f in r.budget["findings"])
    left = next(f for f in r.findings if f.id == "MODE_LEFT_OFF" and "TP" in f.message)
    assert left.fix_overrides == {} and "WORTH_TURNING_ON_COSTS_MORE" in left.fix
    assert "comm_overlap.tp_comm_overlap" not in ((r.all_fixes() or {}).get("overrides") or {})
    li = api.lint(recipe=recipe, overrides=over)
    assert [f.to_dict() for f in li.findings if f.id == "MODE_LEFT_OFF"] == [f.to_dict() for f in r.findings if f.id == "MODE_LEFT_OFF"]
    # without the budget's finding (TP overlap on as shipped), MODE_LEFT_OFF is not about TP: nothing taken away
    shipped = api.resolve(recipe=recipe)
    assert not any(f.id == "MODE_LEFT_OFF" and "TP" in f.message for f in shipped.findings)
