"""The budget where users decide: resolve, plan, lint, diff and diagnose --compare show the same numbers the budget
verb computes for the same config, say why when there is none, and never turn a missing shape into an error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT
from mbridge_overlap import api, cli
from tools.examples import iteration_line

RECIPE = "llama3_70b_pretrain_64gpu_h100_bf16_config"  # a recipe whose model the budget knows (llama3_70b)
RUN_CONFIGS = ROOT / "tests" / "data" / "run_configs"
LOG = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2" / "baseline_no_gpu.log"


def _budget(overrides=None, **kw) -> dict:
    return api.budget(overrides or {}, **kw).to_dict()["budget"]


def test_resolve_gives_the_budget_verbs_numbers_for_a_recipe_whose_model_it_knows():
    d = api.resolve(recipe=RECIPE).to_dict()
    assert d["budget"] == _budget(recipe=RECIPE)
    assert d["budget"]["shape_from"].startswith("llama3_70b ")


def test_resolve_without_a_shape_says_why_and_still_answers():
    d = api.resolve({"model.tensor_model_parallel_size": 2}, gpus=8).to_dict()
    assert set(d["budget"]) == {"unavailable"} and "train.global_batch_size" in d["budget"]["unavailable"]
    batch = {"model.tensor_model_parallel_size": 2, "model.seq_length": 4096, "train.global_batch_size": 64}
    assert "--model NAME" in api.resolve(batch, gpus=8).to_dict()["budget"]["unavailable"]
    known = api.resolve(batch, gpus=8, model="llama3_8b").to_dict()["budget"]
    assert known == _budget(batch, gpus=8, model="llama3_8b")


def test_a_gpu_without_budget_data_leaves_the_budget_out_but_a_wrong_model_is_an_error():
    from mbridge_overlap.budget import system

    other = next(g for g in ("vr200", "r100") if g not in system.data()["systems"])
    d = api.resolve(recipe=RECIPE, gpu=other).to_dict()
    assert "no budget data for GPU type" in d["budget"]["unavailable"]
    out = subprocess.run([sys.executable, "-m", "mbridge_overlap", "resolve", "--recipe", RECIPE, "--model", "no_such_model"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "unknown model" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_saved_run_config_gives_its_own_shape_and_a_given_key_wins():
    config = RUN_CONFIGS / "baseline.yaml"
    b = api.lint(config).to_dict()["budget"]
    assert "baseline.yaml's model section" in b["shape_from"]
    hidden = __import__("yaml").safe_load(config.read_text())["model"]["hidden_size"]
    ag = next(c for c in b["collectives"] if c["dimension"] == "tp" and c["collective"] == "all_gather")
    wider = api.lint(config, shape={"hidden_size": 2 * hidden}).to_dict()["budget"]
    ag2 = next(c for c in wider["collectives"] if c["dimension"] == "tp" and c["collective"] == "all_gather")
    assert ag2["bytes"] == 2 * ag["bytes"] and "given: hidden_size" in wider["shape_from"]


def test_diff_quantifies_a_change_with_the_budgets_of_both_sides():
    change = {"comm_overlap.tp_comm_overlap": False}
    d = api.diff(recipe=RECIPE, overrides=change).to_dict()["budget"]
    before, after = _budget(recipe=RECIPE), _budget(change, recipe=RECIPE)
    assert d["iteration_ms_before"] == before["iteration_ms"] and d["iteration_ms_after"] == after["iteration_ms"]
    assert d["iteration_change_ms"] == pytest.approx(after["iteration_ms"] - before["iteration_ms"], abs=0.01)
    (flip,) = d["settings_flipped"]
    assert flip["setting"] == "tp_comm_overlap" and (flip["before"], flip["after"]) == (True, False)
    assert flip["exposed_change_ms"] == before["settings"]["tp_comm_overlap"]["exposed_change_ms_if_flipped"] > 0
    tp_before, tp_after = before["dimensions"]["tp"]["exposed_ms"], after["dimensions"]["tp"]["exposed_ms"]
    assert d["dimensions"]["tp"]["change_ms"] == pytest.approx(tp_after - tp_before, abs=0.01) == flip["exposed_change_ms"]


def test_diff_text_says_what_the_change_exposes(capsys):
    assert cli.main(["diff", "--recipe", RECIPE, "ddp.overlap_grad_reduce=false", "comm_overlap.overlap_grad_reduce=false"]) == 0
    out = capsys.readouterr().out
    assert "what the change does to the communication budget" in out
    assert "overlap_grad_reduce on -> off: alone, on BEFORE, exposes about" in out


def test_plan_budget_is_the_budget_of_its_overrides_at_the_given_batch():
    p = api.plan(tp=4, pp=2, vpp=2, gpus=16, model="llama3_8b", seq_length=8192, global_batch_size=128)
    batch = {"model.seq_length": 8192, "dataset.seq_length": 8192, "train.global_batch_size": 128}
    assert p.to_dict()["budget"] == _budget({**p.overrides, **batch}, gpus=16, model="llama3_8b")
    assert "overrides" in p.to_dict() and "train.global_batch_size" not in p.overrides  # the batch is the question's, not a choice


def _logs(tmp_path, after_edit, before_ms=1000.0, after_ms=1200.0):
    text = LOG.read_text()
    before, after = tmp_path / "before.log", tmp_path / "after.log"
    before.write_text(text + "".join(iteration_line(i, 100, before_ms) + "\n" for i in range(1, 12)))
    after.write_text(after_edit(text) + "".join(iteration_line(i, 100, after_ms) + "\n" for i in range(1, 12)))
    return [str(before), str(after)]


def test_diagnose_compare_puts_the_predicted_change_beside_the_observed_one(tmp_path, capsys):
    grad = "  overlap_grad_reduce: True  (Mcore default: False)\n"
    assert grad in LOG.read_text()
    logs = _logs(tmp_path, lambda t: t.replace(grad, ""))
    d = api.diagnose(logs, compare=True, gpus=8).to_dict()["compare"]
    assert [c["key"] for c in d["config_changes"]] == ["ddp.overlap_grad_reduce"]
    assert [s["setting"] for s in d["budget"]["settings_flipped"]] == ["overlap_grad_reduce"]
    assert d["budget"]["iteration_change_ms"] >= 0 and d["change"] == pytest.approx(0.2)
    assert cli.main(["diagnose", "--compare", *logs, "--gpus", "8"]) == 1
    assert "the config change predicts" in capsys.readouterr().out


def test_diagnose_compare_does_not_predict_across_two_models(tmp_path):
    logs = _logs(tmp_path, lambda t: t.replace("  num_layers: 4  (Mcore default: 0)", "  num_layers: 8  (Mcore default: 0)"))
    d = api.diagnose(logs, compare=True, gpus=8).to_dict()["compare"]
    assert "different model shapes" in d["budget"]["unavailable"]


def test_a_saved_shape_megatron_core_refuses_leaves_the_budget_out_and_the_lint_standing(tmp_path):
    import yaml

    raw = yaml.safe_load((RUN_CONFIGS / "baseline.yaml").read_text())
    tp = raw["model"]["tensor_model_parallel_size"]
    raw["model"]["num_attention_heads"] = raw["model"]["num_query_groups"] + tp  # a multiple of TP, not of the groups
    config = tmp_path / "run_config.yaml"
    config.write_text(yaml.safe_dump(raw))
    d = api.lint(config).to_dict()
    assert "cannot be costed" in d["budget"]["unavailable"] and "num_query_groups" in d["budget"]["unavailable"]
    with pytest.raises(Exception, match="num_query_groups"):  # the same shape given on the budget's flags is the user's error
        api.lint(config, shape={"num_attention_heads": raw["model"]["num_query_groups"] + tp})
    raw["model"]["num_attention_heads"] += 1  # not a multiple of TP either: Megatron-Core's TP check comes first
    config.write_text(yaml.safe_dump(raw))
    d = api.lint(config).to_dict()
    assert "num_attention_heads" in d["budget"]["unavailable"] and "TP" in d["budget"]["unavailable"]
    assert "SHAPE_REFUSED_BY_MEGATRON_CORE" in {f["id"] for f in d["findings"]}


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_diagnose_compare_says_the_userbuffers_preset_is_assumed_and_gives_the_range(tmp_path):
    """Bridge's summary does not print tp_comm_overlap_cfg: where TP overlap is on, the prediction costs TE's
    default userbuffers config; the answer says so and gives the range down to the change without TP overlap's own
    cost (the bubble, compute and exposed communication stay: evalH H2), where that cost changes at all."""
    log = LOG.parent / "tp_overlap_default_ub_cfg.log"
    on = "  tp_comm_overlap: True  (Mcore default: False)\n"
    assert on in log.read_text()
    before, after = tmp_path / "before.log", tmp_path / "after.log"
    def lines(ms):
        return "".join(iteration_line(i, 100, ms) + "\n" for i in range(1, 12))

    text = log.read_text()
    tiny = api.diagnose([_write(before, text + lines(1000.0)), _write(after, text.replace(on, "") + lines(1100.0))],
                        compare=True, gpus=8).to_dict()["compare"]
    assert tiny["budget"]["parts"]["overlap_cost"]["change_ms"] == 0  # a 64-wide model: no GEMM cost to move
    assert "predicted_range_ms" not in tiny and "assumption" not in tiny  # no preset changes the prediction
    for small, large in (("  hidden_size: 64 ", "  hidden_size: 8192 "), ("  ffn_hidden_size: 128 ", "  ffn_hidden_size: 28672 ")):
        assert small in text
        text = text.replace(small, large)
    d = api.diagnose([_write(before, text + lines(1000.0)), _write(after, text.replace(on, "") + lines(1100.0))],
                     compare=True, gpus=8).to_dict()["compare"]
    b = d["budget"]
    assert "tp_comm_overlap_cfg" in d["assumption"]
    cost = b["parts"]["overlap_cost"]["change_ms"]
    assert cost  # TP overlap's own cost goes with it: the one part a preset changes
    assert d["predicted_range_ms"] == sorted((b["iteration_change_ms"], round(b["iteration_change_ms"] - cost, 3)))
    # the text's headline is the range, not one end of it (evalT U9: its sign was the opposite of diff's)
    from mbridge_overlap.output import text as text_out

    low, high = d["predicted_range_ms"]
    said = text_out.diagnosis(api.diagnose([_write(before, text + lines(1000.0)), _write(after, text.replace(on, "") + lines(1100.0))],
                                          compare=True, gpus=8).to_dict())
    assert f"the config change predicts between {low:+,.1f} and {high:+,.1f} ms per iteration" in said
    plain = api.diagnose([str(LOG), str(LOG)], compare=True, gpus=8).to_dict()["compare"]
    assert "assumption" not in plain  # TP overlap off on both sides: nothing assumed


def test_diff_s_parts_add_up_to_its_change_and_name_a_setting_only_after_applies():
    """evalH H1: removing VPP changed the iteration mostly through the pipeline bubble, which diff never named; a
    setting BEFORE does not apply (TP overlap without sequence parallel) was missing from settings_flipped."""
    runs = ROOT / "tests" / "data" / "run_configs"
    b = api.diff(str(runs / "baseline.yaml"), str(runs / "vpp_removed.yaml")).to_dict()["budget"]
    parts = b["parts"]
    assert sum(p["change_ms"] for p in parts.values()) == pytest.approx(b["iteration_change_ms"], abs=0.01)
    assert parts["pipeline_bubble"]["change_ms"] > 0
    b = api.diff(str(runs / "sequence_parallel_off.yaml"), str(runs / "baseline.yaml")).to_dict()["budget"]
    (tp,) = [s for s in b["settings_flipped"] if s["setting"] == "tp_comm_overlap"]
    assert (tp["before"], tp["after"], tp["estimated_on"]) == (False, True, "after") and tp["exposed_change_ms"] < 0
    assert sum(p["change_ms"] for p in b["parts"].values()) == pytest.approx(b["iteration_change_ms"], abs=0.01)


def test_diagnose_compare_names_the_key_bridge_s_own_line_blames_not_the_setting_it_wrote(tmp_path):
    """evalI D1: AFTER turned sequence parallel off, Bridge turned TP overlap off and said so. The summaries print the
    model.tp_comm_overlap Bridge wrote, so diff read its change as asked for and offered comm_overlap.tp_comm_overlap=true,
    which Bridge turns off again; the change is the log's TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL, restored through
    sequence parallel, with resolve's fix for that finding."""
    text = (LOG.parent / "tp_overlap_default_ub_cfg.log").read_text()
    sp, on = "  sequence_parallel: True  (Mcore default: False)\n", "  tp_comm_overlap: True  (Mcore default: False)\n"
    assert sp in text and on in text
    said = "WARNING:root:Disabling tensor parallel communication overlap due to sequence_parallel=False.\n"
    after = said + text.replace(sp, "").replace(on, "")
    d = api.diagnose([_write(tmp_path / "before.log", text), _write(tmp_path / "after.log", after)], compare=True, gpus=8).to_dict()
    (change,) = [c for c in d["compare"]["config_changes"] if c["key"] == "model.tp_comm_overlap"]
    assert change["finding_id"] == "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL" and change["cause_keys"] == ["model.sequence_parallel"]
    fix = api.resolve({"model.tensor_model_parallel_size": 2, "model.sequence_parallel": False,
                       "comm_overlap.tp_comm_overlap": True}, gpus=8).to_dict()
    (finding,) = [f for f in fix["findings"] if f["id"] == "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL"]
    assert change["fix_overrides"] == finding["fix_overrides"] == {"model.sequence_parallel": True}
    # without Bridge's line nothing says which changed first; the restore still has to hold (evalM M2: it offered
    # comm_overlap.tp_comm_overlap=true alone, which Bridge turns off again while sequence parallel stays off)
    d = api.diagnose([_write(tmp_path / "before.log", text), _write(tmp_path / "after.log", text.replace(sp, "").replace(on, ""))],
                     compare=True, gpus=8).to_dict()
    (change,) = [c for c in d["compare"]["config_changes"] if c["key"] == "model.tp_comm_overlap"]
    assert change["finding_id"] == "REQUESTED_CHANGE" and "model.sequence_parallel" in change["cause_keys"]
    assert change["fix_overrides"] == {"comm_overlap.tp_comm_overlap": True, "model.sequence_parallel": True}
    after = api.resolve({"model.tensor_model_parallel_size": 2, "model.sequence_parallel": False, **change["fix_overrides"]},
                        gpus=8).to_dict()
    assert after["effective"]["model"]["tp_comm_overlap"] is True and not [f for f in after["findings"] if f["severity"] == "error"]


def test_diagnose_compare_says_one_gpus_costs_both_runs(tmp_path, capsys):
    """evalL L7: Bridge's summary prints no world size, so --gpus costs both runs alike and a change of GPU count is
    not seen; the answer said nothing of it."""
    grad = "  overlap_grad_reduce: True  (Mcore default: False)\n"
    logs = _logs(tmp_path, lambda t: t.replace(grad, ""))
    d = api.diagnose(logs, compare=True, gpus=8).to_dict()["compare"]
    assert d["gpus"] == {"before": 8, "after": 8, "from": "--gpus, for both runs"}
    assert cli.main(["diagnose", "--compare", *logs, "--gpus", "8"]) == 1
    assert "both runs costed at 8 GPUs (--gpus: a log does not print its world size" in capsys.readouterr().out


def test_compare_says_where_a_derived_setting_is_named_a_cause(tmp_path):
    """evalO O5: a VPP removal between two runs: the summaries print batch_p2p_comm (what Bridge derived) as they
    print the inputs, so compare named it a cause of align_param_gather and restored through it, where diff of the
    run configs names VPP alone. The answer says so."""
    pp = "  pipeline_dtype: torch.bfloat16  (Mcore default: None)\n"
    staged = lambda t: t.replace(pp, pp + "  pipeline_model_parallel_size: 2  (Mcore default: 1)\n")  # noqa: E731
    adds = [("  average_in_collective: True", "  align_param_gather: True  (Mcore default: False)\n"),  # (sorted, as Bridge prints)
            ("  bf16: True  (Mcore default: False)\n  cross_entropy", "  batch_p2p_comm: False  (Mcore default: True)\n"),
            ("  params_dtype: torch.bfloat16  (Mcore default: torch.float32)\n  pipeline_dtype",
             "  overlap_p2p_comm: True  (Mcore default: False)\n")]
    text = staged(LOG.read_text())
    for at, line in adds:
        assert text.count(at) == 1
        text = text.replace(at, line + at)
    last = "  recompute_modules: ['core_attn']  (Mcore default: None)\n"
    text = text.replace(last, last + "  virtual_pipeline_model_parallel_size: 2  (Mcore default: None)\n")
    before, after = tmp_path / "before.log", tmp_path / "after.log"
    line = " [2026-12-01 12:00:00] iteration {:8d}/     100 | elapsed time per iteration (ms): {} |\n"  # (no batch: the config's)
    before.write_text(text + "".join(line.format(i, 1000.0) for i in range(1, 12)))
    after.write_text(staged(LOG.read_text()) + "".join(line.format(i, 1100.0) for i in range(1, 12)))
    d = api.diagnose([str(before), str(after)], compare=True, gpus=8).to_dict()
    changes = {c["key"]: c["cause_keys"] for c in d["compare"]["config_changes"]}
    assert "model.virtual_pipeline_model_parallel_size" in changes["ddp.align_param_gather"]
    assert any("model.batch_p2p_comm, which moved with the other changes" in n for n in d["notes"])


def test_the_iteration_range_says_it_spreads_communication_only():
    """evalR S5: "range 17,157 to 17,242" read as an error bar of 0.25 %; the model's error on published runs is larger."""
    from mbridge_overlap import api
    from mbridge_overlap.output import text

    d = api.budget(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config", model="llama3_70b").to_dict()
    (line,) = [x for x in text.budget(d).splitlines() if x.startswith("iteration")]
    low, high = d["budget"]["range_ms"]
    assert f"communication's range {low:,.1f} to {high:,.1f}" in line and "docs/budget.md" in line


def test_the_budget_verb_says_an_overlap_key_it_does_not_model():
    """evalS V8: budget priced a2a CP as the ring with no word but an assumption string; resolve's
    UNMODELED_OVERLAP_KEY is now in the budget's note too."""
    over = {"model.context_parallel_size": 4}
    plain = api.budget(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config", overrides=over).to_dict()["note"]
    a2a = api.budget(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config",
                     overrides={**over, "model.cp_comm_type": "a2a"}).to_dict()["note"]
    assert "UNMODELED_OVERLAP_KEY" not in plain and "model.cp_comm_type" in a2a


def test_diagnose_compare_gives_the_range_where_the_unseen_preset_may_be_all_that_changed(tmp_path):
    """evalAA AA-3: both summaries with TP overlap on and the same costed overlap cost: a preset dropped between the
    runs (the summary does not print it) was costed 0 and one number given, with no assumption; and the settings that
    changed between the summaries (TP, here) went unlisted where no overlap setting moved."""
    log = LOG.parent / "tp_overlap_default_ub_cfg.log"
    text = log.read_text()
    for small, large in (("  hidden_size: 64 ", "  hidden_size: 8192 "), ("  ffn_hidden_size: 128 ", "  ffn_hidden_size: 28672 ")):
        text = text.replace(small, large)
    tp4 = text.replace("  tensor_model_parallel_size: 2  (Mcore", "  tensor_model_parallel_size: 4  (Mcore")
    assert tp4 != text

    def lines(ms):
        return "".join(iteration_line(i, 100, ms) + "\n" for i in range(1, 12))

    logs = [_write(tmp_path / "before.log", text + lines(1000.0)), _write(tmp_path / "after.log", tp4 + lines(1100.0))]
    d = api.diagnose(logs, compare=True, gpus=8).to_dict()
    c, b = d["compare"], d["compare"]["budget"]
    changed = {o["key"]: (o["before"], o["after"]) for o in c["settings_changed"]}
    assert changed["model.tensor_model_parallel_size"] == (2, 4) and changed["data_parallel_size"] == (4, 2)
    cost = b["parts"]["overlap_cost"]
    assert cost["before"] > 0 and cost["after"] > 0
    low, high = c["predicted_range_ms"]
    rest = b["iteration_change_ms"] - cost["change_ms"]
    assert (low, high) == (round(rest - cost["before"], 3), round(rest + cost["after"], 3))
    assert "cannot see which userbuffers preset" in c["assumption"]
    from mbridge_overlap.output import text as text_out

    said = text_out.diagnosis(d)
    assert "settings that changed between the summaries: " in said and "model.tensor_model_parallel_size 2 -> 4" in said
    assert f"between {low:+,.1f} and {high:+,.1f} ms per iteration" in said


SUMMARY = ROOT / "tests" / "data" / "summaries" / "llama3_70b_pretrain_64gpu_h100_bf16_config.txt"


def test_diagnose_compare_leads_with_one_preset_and_costs_the_recipe_as_budget_does(tmp_path):
    """evalAB AB2-2: Bridge 0.6.2's own summaries of llama3_70b_pretrain_64gpu_h100_bf16_config with and without
    overlap_param_gather (TP and TP overlap the same in both): the compare said "between -2,239.6 and +2,349.8 ms ...
    from none to about 109 %" where diff says +55.1 ms, costed BEFORE 35,861.9 ms where budget says 34,125.7 (TE's
    default preset, not the recipe's), and THROUGHPUT_DROP said "no config rule decides this"."""
    from mbridge_overlap.output import text as text_out

    lines = "  overlap_param_gather: True  (Mcore default: False)\n"
    body = SUMMARY.read_text()
    assert body.count(lines) == 2 and "  tp_comm_overlap: True  (Mcore default: False)\n" in body
    logs = []
    for name, text, ms in (("before.log", body, 1000.0), ("after.log", body.replace(lines, ""), 1060.0)):
        (tmp_path / name).write_text(text + "".join(iteration_line(i, 100, ms) + "\n" for i in range(1, 12)))
        logs.append(str(tmp_path / name))
    d = api.diagnose(logs, compare=True, gpus=64, gpu="h100").to_dict()
    c, b = d["compare"], d["compare"]["budget"]
    recipe = _budget(recipe=RECIPE)
    by_diff = api.diff(recipe=RECIPE, overrides={"comm_overlap.overlap_param_gather": False}).to_dict()["budget"]
    assert c["preset"]["costed"] == "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192" and RECIPE in c["preset"]["recipes"]
    assert b["iteration_ms_before"] == recipe["iteration_ms"] == by_diff["iteration_ms_before"]
    assert b["iteration_change_ms"] == by_diff["iteration_change_ms"] > 0
    assert c["preset_same_both_sides"] is True
    said = text_out.diagnosis(d)
    change = b["iteration_change_ms"]
    assert (f"the config change predicts {change:+,.1f} ms per iteration" in said
            and f"it explains about {change / b['iteration_ms_before'] / c['change'] * 100:.0f}% of it" in said)
    low, high = c["predicted_range_ms"]
    assert low < change < high and "caveat: if the userbuffers preset also changed between the runs" in said
    assert f"between {low:+,.1f} and {high:+,.1f} ms" in said.split("caveat:")[1]
    # the range reaches TE's default on either side (the costlier preset), not only the recipe's
    default = b["overlap_cost_at_te_default"]
    assert default["before"] > b["parts"]["overlap_cost"]["before"] and low == pytest.approx(
        change - b["parts"]["overlap_cost"]["change_ms"] - default["before"], abs=0.01)
    (drop,) = [x for x in d["causes"] if x["id"] == "THROUGHPUT_DROP"]
    assert "ddp.overlap_param_gather true -> false" in drop["analysis"] and "known from the log only" not in drop["analysis"]
    assert f"{change:+,.1f} ms" in drop["analysis"]
    # the GPU type given is the one costed (it was H100 whatever --gpu said)
    b200 = api.diagnose(logs, compare=True, gpus=64, gpu="b200").to_dict()["compare"]["budget"]
    assert b200["system"] == ["b200", "b200"]


def test_diagnose_compare_finds_the_recipe_s_preset_where_the_layout_changed(tmp_path):
    """evalAC AC2-2: Bridge 0.6.2's own summaries of llama3_70b_pretrain_64gpu_h100_bf16_config as shipped and with
    model.virtual_pipeline_model_parallel_size=null (the second: tests/data/summaries/..._vpp_null.txt, Bridge's
    log_non_default_values output of that run): the compare found no recipe at "this model and layout" (the layouts
    differ in VPP, which no preset is tuned for) and costed TE's default, 35,861.9 ms where budget said 34,125.7."""
    after = SUMMARY.with_name(SUMMARY.stem + "_vpp_null.txt").read_text()
    assert "virtual_pipeline_model_parallel_size: 5" in SUMMARY.read_text() and "virtual_pipeline_model_parallel" not in after
    logs = []
    for name, text, ms in (("before.log", SUMMARY.read_text(), 1000.0), ("after.log", after, 1060.0)):
        (tmp_path / name).write_text(text + "".join(iteration_line(i, 100, ms) + "\n" for i in range(1, 12)))
        logs.append(str(tmp_path / name))
    c = api.diagnose(logs, compare=True, gpus=64, gpu="h100").to_dict()["compare"]
    by_diff = api.diff(recipe=RECIPE, overrides={"model.virtual_pipeline_model_parallel_size": None}).to_dict()["budget"]
    assert c["preset"]["costed"] == "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192" and RECIPE in c["preset"]["recipes"]
    assert c["budget"]["iteration_ms_before"] == _budget(recipe=RECIPE)["iteration_ms"] == by_diff["iteration_ms_before"]
    assert c["budget"]["iteration_change_ms"] == by_diff["iteration_change_ms"]
    # a side whose TP differs is no longer at one preset: none is named
    tp8 = after.replace("  tensor_model_parallel_size: 4  (Mcore default: 1)", "  tensor_model_parallel_size: 8  (Mcore default: 1)")
    assert tp8 != after
    (tmp_path / "after.log").write_text(tp8 + "".join(iteration_line(i, 100, 1060.0) + "\n" for i in range(1, 12)))
    assert not (api.diagnose(logs, compare=True, gpus=64, gpu="h100").to_dict()["compare"].get("preset") or {}).get("costed")
