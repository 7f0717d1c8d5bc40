"""NCCL's failure (torch's DistBackendError) ending a traceback through overlap-path code: the communication that
failed is the one the frames name (NCCL_FAILURE_ON_OVERLAP_PATH), not a failure of no dimension."""

import io

import pytest

from mbridge_overlap import api

NCCL = ("[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
        "4409, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5")
C10D = "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py"


def _frame(path: str, line: int, function: str, code: str) -> str:
    return f'[rank3]:   File "{path}", line {line}, in {function}\n[rank3]:     {code}\n'


def _diagnose(*frames: str) -> dict:
    text = "[rank3]: Traceback (most recent call last):\n" + "".join(frames) + NCCL + "\n"
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode())).to_dict()


BATCHED = _frame(C10D, 2370, "batch_isend_irecv", "with _coalescing_manager(group, device, async_ops=True) as cm:")
COALESCING = _frame(C10D, 2317, "_coalescing_manager", "work = group._end_coalescing(device)")


@pytest.mark.parametrize("frames, function, knob", [
    ((_frame("/opt/megatron-lm/megatron/core/pipeline_parallel/p2p_communication.py", 300, "_batched_p2p_ops",
             "reqs = torch.distributed.batch_isend_irecv(ops)"), BATCHED, COALESCING),
     "_batched_p2p_ops", "comm_overlap.batch_p2p_comm"),
    ((_frame("/opt/megatron-lm/megatron/core/distributed/param_and_grad_buffer.py", 410, "start_grad_sync",
             "with stream_context, _coalescing_manager(communication_group, async_ops=async_op) as cm:"), COALESCING),
     "start_grad_sync", "ddp.overlap_grad_reduce"),
    # a paste that starts inside torch: batch_isend_irecv is the pipeline's, though it enters _coalescing_manager too
    ((BATCHED, COALESCING), "batch_isend_irecv", "comm_overlap.batch_p2p_comm"),
])
def test_nccl_failing_in_overlap_code_is_that_communication_s(frames, function, knob):
    (cause,) = _diagnose(*frames)["causes"]
    assert cause["id"] == "NCCL_FAILURE_ON_OVERLAP_PATH" and knob in cause["knobs"]
    assert function in cause["message"] and "NCCL_DEBUG=INFO" in cause["fix"]


def test_nccl_failing_elsewhere_is_no_overlap_cause():
    d = _diagnose(_frame("/opt/train.py", 12, "<module>", "dist.barrier()"))
    assert d["causes"] == [] and d["other"]
