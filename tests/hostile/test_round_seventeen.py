"""Hostile input, round seventeen (fuzzQ's rest and fuzzR): each case failed before its fix."""

from __future__ import annotations

from hostile_kit import assert_one_line, run_cli


def test_a_config_s_unknown_mixed_precision_field_is_refused(tmp_path):
    # Q9: the mixed_precision section's fields were read by name and any other taken silently (a typo of
    # grad_reduce_in_fp32 answered as the recipe's value); MixedPrecisionConfig has no such field
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  tensor_model_parallel_size: 2\nmixed_precision:\n  bf16: true\n  grad_reduce_in_fp33: true\n")
    proc = run_cli("lint", config, "--gpus", "8")
    assert proc.returncode == 2
    assert_one_line(proc)
    assert b"mixed_precision.grad_reduce_in_fp33" in proc.stderr and b"grad_reduce_in_fp32" in proc.stderr
    config.write_text("model:\n  tensor_model_parallel_size: 2\nmixed_precision:\n  bf16: true\n  grad_reduce_in_fp32: true\n")
    assert run_cli("lint", config, "--gpus", "8").returncode in (0, 1)
