"""Hostile input, round nine: the leftovers of round eight (fuzzF F14, F16); each case failed before its fix."""

from __future__ import annotations

import pytest
from hostile_kit import ROOT, assert_one_line, run_cli

BASELINE = ROOT / "tests" / "data" / "run_configs" / "baseline.yaml"


@pytest.mark.parametrize("line", [
    "  tensor_model_parallel_size: 4\n",  # a parallel size (was refused)
    "  hidden_size: 12288\n",  # a field the request models (was taken)
    "  ffn_hidden_size: 49152\n",  # a shape field only the budget reads (was dropped, the budget unavailable)
    "  sequence_parallel: true\n",  # a bool
])
def test_a_quoted_number_in_a_run_config_is_refused_for_every_field_alike(tmp_path, line):
    text = BASELINE.read_text()
    assert line in text
    key, _, value = line.strip().partition(": ")
    quoted = tmp_path / "run_config.yaml"
    quoted.write_text(text.replace(line, line.replace(value, f'"{value}"'), 1))
    proc = run_cli("resolve", "--config", quoted)
    assert proc.returncode == 2
    assert_one_line(proc)
    assert f"model.{key}" in proc.stderr.decode() and "without quotes" in proc.stderr.decode()
    assert run_cli("resolve", "--config", BASELINE).returncode in (0, 1)


@pytest.mark.parametrize("override, field", [
    ("model.ffn_hidden_size=28673", "ffn_hidden_size (28673) is not a multiple of TP (4)"),
    ("model.num_attention_heads=6", "num_attention_heads (6) is not a multiple of TP (4)"),  # before heads % groups
])
@pytest.mark.parametrize("verb", ["resolve", "lint"])
def test_a_shape_megatron_core_refuses_is_an_error_of_the_answer(verb, override, field):
    # fuzzF F14: exit 0 and no error, while the same answer's budget said "Megatron-Core refuses this layout"
    import json

    recipe = "llama3_70b_pretrain_64gpu_h100_bf16_config"  # TP 4
    proc = run_cli(verb, "--recipe", recipe, override, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    d = json.loads(proc.stdout)
    (refused,) = [f for f in d["findings"] if f["id"] == "SHAPE_REFUSED_BY_MEGATRON_CORE"]
    assert refused["severity"] == "error" and field in refused["message"]
    assert "cannot be costed" in d["budget"]["unavailable"]
    ok = json.loads(run_cli(verb, "--recipe", recipe, "--format", "json").stdout)
    assert "SHAPE_REFUSED_BY_MEGATRON_CORE" not in {f["id"] for f in ok["findings"]}


def test_a_run_config_another_release_wrote_is_not_answered_with_this_release_s_rules(tmp_path):
    # evalH H4: a 0.5.1 dump (no env_vars section, which 0.6.2's to_yaml always writes) was answered as 0.6.2, with
    # env_vars fixes 0.5.1 refuses
    import yaml

    raw = yaml.safe_load(BASELINE.read_text())
    assert "env_vars" in raw
    del raw["env_vars"]
    old = tmp_path / "run_config.yaml"
    old.write_text(yaml.safe_dump(raw))
    proc = run_cli("resolve", "--config", old)
    assert proc.returncode == 2
    assert_one_line(proc)
    assert "--bridge-version 0.5.1" in proc.stderr.decode() and "env_vars" in proc.stderr.decode()
    asked = run_cli("resolve", "--config", old, "--bridge-version", "0.6.2")
    assert asked.returncode in (0, 1) and b"answered with 0.6.2's rules, as asked" in asked.stdout
    assert run_cli("resolve", "--config", old, "--bridge-version", "0.5.1").returncode in (0, 1)
