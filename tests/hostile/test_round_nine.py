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
