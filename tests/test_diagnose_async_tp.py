"""torch.compile's async TP pass (torch 2.11.0 torch/_inductor/fx_passes/micro_pipeline_tp.py) warning that it left a TP
reduce-scatter (or every collective) unfused with its matmul is ASYNC_TP_FUSION_SKIPPED: the TP communication it would
have overlapped runs exposed. Other inductor warnings and prose about fusion are not. The texts are written for these
tests, in the form torch's logging prints them."""

import pytest

from conftest import diagnose_causes as causes


@pytest.mark.parametrize("line", [
    "W0601 10:00:00.000000 77 torch/_inductor/fx_passes/micro_pipeline_tp.py:927] [0/0] no producer matmul found for "
    "reduce scatter, skipping fuse_matmul_reduce_scatter fusion",
    "[rank3]:W0601 10:00:00.000000 77 torch/_inductor/fx_passes/micro_pipeline_tp.py:919] [1/0] matmul result has more "
    "than one user, skipping fused_matmul_reduce_scatter fusion.",
    "W0601 micro_pipeline_tp.py:936] reduce-scatter result node is an ancestor of matmul, skipping "
    "fuse_matmul_reduce_scatter fusion",
    "W0601 10:00:00.000000 77 torch/_inductor/fx_passes/micro_pipeline_tp.py:1106] [0/0] async TP found no matching "
    "all-gather/reduce-scatter patterns for fusion",
])
def test_a_skipped_async_tp_fusion_is_tp_communication_left_exposed(line):
    found = causes(line + "\n")
    assert [c["id"] for c in found] == ["ASYNC_TP_FUSION_SKIPPED"], line
    assert "model.tensor_model_parallel_size" in found[0]["knobs"]


@pytest.mark.parametrize("line", [
    "W0601 torch/_inductor/fx_passes/post_grad.py:120] skipping cudagraphs due to mutated inputs",
    "we are skipping the fusion of the reduce scatter for now",
    "I0601 torch/_inductor/fx_passes/micro_pipeline_tp.py:1001] successfully fused matmul reduce scatter",
])
def test_other_inductor_lines_are_not(line):
    assert "ASYNC_TP_FUSION_SKIPPED" not in [c["id"] for c in causes(line + "\n")], line
