"""Where a logged line came from, where that is not the catalog's file of its words (evalD 9): NeMo 2's logger prints
Bridge's words from its own callback, an older Megatron-Core raises them from a file since renamed; and torch's
companion line of a watchdog timeout goes with that timeout's cause."""

from __future__ import annotations

import io
import json

import pytest

from mbridge_overlap import api


def _diagnose(text: str) -> dict:
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode())).to_dict()


def test_nemo_s_logger_is_where_a_nemo_line_came_from():
    d = _diagnose("[NeMo W 2025-06-02 11:04:13 megatron_comm_overlap:166] Disabling tensor parallel communication overlap "
                  "due to sequence_parallel=False.\n")
    (e,) = d["causes"][0]["evidence"]
    assert e["printed_by"] == "megatron_comm_overlap:166 (NeMo's logger)" and e["file"].endswith("comm_overlap.py")


def test_a_traceback_frame_of_another_file_is_where_the_line_came_from():
    d = _diagnose("""Traceback (most recent call last):
  File "/opt/megatron-lm/megatron/core/distributed/grad_buffer.py", line 111, in finish_grad_sync
    assert self.communication_handle is not None and self.communication_issued, (
AssertionError: Communication call has not been issued for this bucket (126/128 params have grad available)
""")
    (e,) = d["causes"][0]["evidence"]
    assert e["printed_by"].startswith("/opt/megatron-lm/megatron/core/distributed/grad_buffer.py:111")
    assert e["file"].endswith("param_and_grad_buffer.py")


def test_a_line_from_the_catalog_s_own_file_says_nothing_more():
    d = _diagnose("AssertionError: Communication call has not been issued for this bucket (126/128 params have grad available)\n")
    assert all("printed_by" not in e for c in d["causes"] for e in c["evidence"])


def test_the_watchdog_s_companion_line_goes_with_its_timeout():
    timeout = ("[rank4]:[E602 11:34:20.123456789 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation "
               "timeout: WorkNCCL(SeqNum=2045, OpType=_ALLGATHER_BASE, NumelIn=16777216, NumelOut=67108864, "
               "Timeout(ms)=1800000) ran for 1800409 milliseconds before timing out.\n")
    companion = ("[rank4]:[E602 11:34:20.223456789 ProcessGroupNCCL.cpp:1785] [PG 3 Rank 2] Exception (either an error or "
                 "timeout) detected by watchdog at work: {n}, last enqueued NCCL work: 2046, last completed NCCL work: 2044.\n")
    d = _diagnose(timeout + companion.format(n=2045))
    assert [c["id"] for c in d["causes"]] == ["DP_COLLECTIVE_TIMEOUT"] and len(d["causes"][0]["evidence"]) == 2
    assert not d["other"]
    assert _diagnose(timeout + companion.format(n=9999))["other"]  # another work's: another failure


def test_another_release_s_wording_is_not_called_a_gap_in_the_rules(tmp_path):
    """evalV Z3: Megatron-Core 0.14-0.18.2's "MTP layernum only supports 1" assert, from a run on an older core, was
    called a gap in the rules of the 0.6.2 analysis (whose core accepts mtp_num_layers=0); it is the other release's."""
    log = tmp_path / "rank0.log"
    log.write_text('[rank0]:   File "/opt/Megatron-LM/megatron/core/transformer/transformer_config.py", line 1921, in '
                   "__post_init__\n[rank0]:     assert self.mtp_num_layers is None or self.mtp_num_layers == 1, (\n"
                   "[rank0]: AssertionError: MTP layernum only supports 1 when enabling overlap_moe_expert_parallel_comm.\n")
    d = api.diagnose([log], recipe="gpt_oss_120b_pretrain_64gpu_gb200_bf16_config").to_dict()
    (cause,) = [c for c in d["causes"] if any("MTP layernum" in e["logged"] for e in c["evidence"])]
    assert "gap in the rules" not in cause["analysis"] and "megatron-core 0.19.2" in cause["analysis"]


_VERL = """Traceback (most recent call last):
  File "/opt/verl/verl/workers/actor/megatron_actor.py", line 533, in forward_backward_batch
    losses_reduced = forward_backward_func(
{bridge}  File "/usr/local/lib/python3.10/dist-packages/megatron/core/pipeline_parallel/schedules.py", line 466, in backward_step
    custom_backward(output_tensor[0], output_tensor_grad[0])
  File "/usr/local/lib/python3.10/dist-packages/megatron/core/distributed/distributed_data_parallel.py", line 489, in hook
    assert (
AssertionError: param.grad being None is not safe when overlap_grad_reduce is True
"""
_BRIDGE_FRAME = """  File "/opt/Megatron-Bridge/src/megatron/bridge/training/train.py", line 310, in train_step
    losses_reduced = forward_backward_func(
"""


@pytest.mark.parametrize("bridge, said", [("", True), (_BRIDGE_FRAME, False)])
def test_a_run_another_framework_drives_is_said_not_to_be_bridge_s(tmp_path, bridge, said):
    """evalY Y3-1: a verl run's DDP assert got Bridge's comm_overlap.overlap_grad_reduce=false as its fix with nothing
    said; its knob is Megatron-Core's DistributedDataParallelConfig.overlap_grad_reduce, which verl sets. A traceback
    through Bridge's training loop is Bridge's."""
    log = tmp_path / "worker.log"
    log.write_text(_VERL.format(bridge=bridge))
    d = api.diagnose(str(log)).to_dict()
    assert "GRAD_NONE_WITH_OVERLAP_GRAD_REDUCE" in {c["id"] for c in d["causes"]}
    notes = [n for n in d["notes"] if n.startswith("not a Bridge run")]
    assert bool(notes) is said
    if said:
        assert "verl/workers/actor/megatron_actor.py" in notes[0] and "DistributedDataParallelConfig" in notes[0]


@pytest.mark.parametrize("version, ends", [("0.6.2", "Falling back to alltoall."), ("0.5.1", "Skipping DeepEP configuration.")])
def test_a_flex_backend_fallback_is_its_finding_in_the_release_that_says_it(version, ends):
    """batch 14's F14-1 (Megatron-Bridge #5992): apply_flex_dispatcher_backend's warning that DeepEP does not run on
    the GPU (a GB200) had no cause, and its cut line was called 'wording of megatron-bridge 0.4.0 to 0.5.1' though
    0.6.2 prints the same words: a cut line both releases print is this release's."""
    head = "DeepEP is only applicable to Ampere, Hopper, and Blackwell (B200/B300) GPUs"
    for line in (head, f"{head}. Current GPU: NVIDIA GB200. {ends}"):
        d = api.diagnose(["-"], stdin=io.BytesIO((line + "\n").encode()), bridge_version=version).to_dict()
        (cause,) = d["causes"]
        assert cause["id"] == "FLEX_DISPATCHER_FELL_BACK" and "model.moe_flex_dispatcher_backend" in cause["knobs"]
        (e,) = cause["evidence"]
        assert e["package_version"] == version and "wording of" not in json.dumps(cause)


def test_a_removed_argument_s_check_in_validate_args_is_no_overlap_cause():
    """batch 14's F14-2 (Megatron-LM #66): '--batch-size argument is no longer valid, use --micro-batch-size instead'
    was an overlap-path error 'on the pipeline path' (the flag's 'micro-batch' read as a schedule's micro-batches)."""
    d = _diagnose("AssertionError: --batch-size argument is no longer valid, use --micro-batch-size instead\n")
    assert not d["causes"]
