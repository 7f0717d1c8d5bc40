"""Hostile input, round twelve (fuzzI): each case failed before its fix."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import pytest

from hostile_kit import ROOT, assert_one_line, cli_env, run_cli

BATCH = ["model.seq_length=8192", "dataset.seq_length=8192", "train.global_batch_size=128", "model.tensor_model_parallel_size=4"]
BASELINE = ROOT / "tests" / "data" / "run_configs" / "baseline.yaml"


def test_a_budget_of_thousands_of_experts_in_thousands_of_layers_is_refused_at_once():
    # I1: every expert's parameters were listed into buckets: 4,096 experts in 4,096 layers grew past 19 GB
    proc = run_cli("budget", "--model", "llama3_70b", "--gpus", "64", *BATCH, "--shape", "num_moe_experts=4096",
                   "--shape", "num_layers=4096", timeout=60)
    assert proc.returncode == 2 and b"expert-layers" in proc.stderr
    assert_one_line(proc)


def test_the_same_shape_in_a_run_config_leaves_the_answer_without_a_budget(tmp_path):
    config = tmp_path / "moe.yaml"
    config.write_text("model:\n  tensor_model_parallel_size: 4\n  sequence_parallel: true\n  seq_length: 8192\n"
                      "  num_layers: 4096\n  hidden_size: 8192\n  ffn_hidden_size: 28672\n  num_attention_heads: 64\n  num_query_groups: 8\n"
                      "  vocab_size: 128256\n  num_moe_experts: 4096\n  add_bias_linear: false\ndataset:\n  seq_length: 8192\n"
                      "train:\n  global_batch_size: 128\n  micro_batch_size: 1\n")
    proc = run_cli("resolve", "--config", config, "--gpus", "64", "--format", "json", timeout=60)
    assert proc.returncode in (0, 1) and b"expert-layers" in proc.stdout and not proc.stderr


def test_a_short_pipeline_layout_that_unrolls_to_gigabytes_is_not_built():
    # I2: "t*9999" six hundred times inside "(...)*250" is 4 KB; its second unrolling built 1.7 G characters
    from mbridge_overlap.run import layers

    layout = "(" + "t*9999" * 680 + ")*250"
    assert len(layout) <= layers.MAX_LAYOUT
    tracemalloc.start()
    try:
        assert layers.layout_stages(layout) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    assert layers.layout_stages("Et|(tt|)*3,L") == 5  # a real one still counted (Megatron-Core's own example's form)


def test_diff_of_many_launch_variables_resolves_a_bounded_number_of_times(tmp_path, monkeypatch):
    # I3: each changed variable was tried against every changed setting, a full resolve each: 1,000 ran past 120 s
    from mbridge_overlap import api
    from mbridge_overlap.verbs import diff as diff_verb

    calls = []
    real = diff_verb.state_of
    monkeypatch.setattr(diff_verb, "state_of", lambda sc: calls.append(1) or real(sc))
    resolves = {}
    for n in (40, 300):
        before = tmp_path / f"env{n}.yaml"
        before.write_text("env_vars:\n" + "".join(f"  NCCL_X{i}: '{i}'\n" for i in range(n)))
        calls.clear()
        d = api.diff(str(before), str(BASELINE), gpus=64).to_dict()
        resolves[n] = len(calls)
    assert resolves[300] <= resolves[40] + 4, resolves  # not one more resolve per variable past the first 32
    env = [c for c in d["overlap_changes"] + d["other_changes"] if c["key"].startswith("env_vars.NCCL_X")]
    assert len(env) == 300 and all(c["cause_keys"] == [c["key"]] and c["after"] is None for c in env)
    assert 0 < sum(1 for c in env if c["fix_overrides"]) <= diff_verb.MAX_ENV_EXPLAINED  # the rest: listed, said so
    assert any("more launch variables changed" in w for w in d["warnings"])


@pytest.mark.parametrize("value", ['""', "''", '" "'])
@pytest.mark.parametrize("key", ["model.recompute_modules", "model.cuda_graph_scope",
                                 "model.num_layers_in_first_pipeline_stage", "model.pipeline_model_parallel_layout"])
def test_a_quoted_empty_value_is_an_empty_value(key, value):
    # I4: '' and "" passed the empty-value rule (fuzzH H9): recompute_modules became ['']
    proc = run_cli("resolve", "--gpus", "8", f"{key}={value}")
    assert proc.returncode == 2 and b"an empty value" in proc.stderr
    assert_one_line(proc)


def test_an_unmatched_quote_is_not_taken_as_the_number_inside():
    proc = run_cli("resolve", "--gpus", "8", "model.tensor_model_parallel_size=\"2'")
    assert proc.returncode == 2
    assert_one_line(proc)


@pytest.mark.parametrize("stderr", ["closed", "full", "broken_pipe"])
def test_a_usage_error_is_status_2_whatever_stderr_is(stderr):
    # I5: a closed or full stderr made it 1, a broken pipe 0 (taken for --help into a closed pipe)
    argv = [sys.executable, "-m", "mbridge_overlap", "plan", "--tp", "x"]
    if stderr == "closed":
        proc = subprocess.run(argv, cwd=ROOT, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              preexec_fn=lambda: os.close(2), timeout=60)
    elif stderr == "full":
        with open("/dev/full", "w") as full:
            proc = subprocess.run(argv, cwd=ROOT, env=cli_env(), stdout=subprocess.DEVNULL, stderr=full, timeout=60)
    else:
        r, w = os.pipe()
        os.close(r)
        try:
            proc = subprocess.run(argv, cwd=ROOT, env=cli_env(), stdout=subprocess.DEVNULL, stderr=w, timeout=60)
        finally:
            os.close(w)
    assert proc.returncode == 2


@pytest.mark.parametrize("argv", [["model.num_layers=12345678901"], ["--shape", "num_layers=12345678901"],
                                  ["model.vocab_size=-1"]])
def test_a_shape_value_past_its_bound_is_told_its_bound(argv):
    # I6: ten digits were "not a whole number"; a negative got another wording than the other fields
    proc = run_cli("budget", "--model", "llama3_70b", "--gpus", "64", *BATCH, *argv)
    assert proc.returncode == 2 and b"must be a whole number from 1 to" in proc.stderr
    assert_one_line(proc)


def test_a_global_batch_no_run_has_is_refused():
    # I7: 2**40 sequences an iteration was costed (about 146 trillion ms)
    proc = run_cli("budget", "--model", "llama3_70b", "--gpus", "64", *BATCH[:2], "model.tensor_model_parallel_size=4",
                   "train.global_batch_size=1099511627776")
    assert proc.returncode == 2 and b"train.global_batch_size" in proc.stderr
    assert_one_line(proc)
