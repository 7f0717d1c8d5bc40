"""torch's isend / irecv on a group, seen as a traceback's code line whose `File "..."` line a paste left out
(Megatron-LM #792: `return group.send([tensor], group_dst_rank, tag)` before NCCL's DistBackendError), or as the
paste's first frame: a send or receive, which Megatron-Core's unbatched pipeline ops and Transformer Engine's CP ring
make, so the cause names PP's and CP's knobs (frames.FALLBACK, frames.TORCH_P2P_CODE)."""

import pytest

from tests.conftest import diagnose_causes

NCCL = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n")
C10D = "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py"


@pytest.mark.parametrize("code", [
    "return group.send([tensor], group_dst_rank, tag)",  # torch 1.x-2.4 isend
    "return pg.recv([tensor], group_src_rank, tag)",  # torch 1.x-2.4 irecv
    "return group.send([tensor], group_dst, tag)",  # torch 2.11.0 :2552
    "return group.recv([tensor], group_src, tag)",  # torch 2.11.0 :2597
])
def test_torch_s_p2p_code_line_without_its_frame_line(code):
    (c,) = [c for c in diagnose_causes(f"    {code}\n{NCCL}") if c["overlap_related"]]
    assert c["id"] == "NCCL_FAILURE_ON_OVERLAP_PATH"
    assert {"model.pipeline_model_parallel_size", "comm_overlap.batch_p2p_comm", "model.context_parallel_size"} <= set(c["knobs"])


def test_a_paste_that_starts_in_torch_s_isend():
    text = f'Traceback (most recent call last):\n  File "{C10D}", line 1601, in isend\n    return group.send([tensor], group_dst_rank, tag)\n{NCCL}'
    (c,) = [c for c in diagnose_causes(text) if c["overlap_related"]]
    assert c["id"] == "NCCL_FAILURE_ON_OVERLAP_PATH" and "model.pipeline_model_parallel_size" in c["knobs"]


@pytest.mark.parametrize("text", [
    f"    return default_pg.send([tensor], dst, tag)\n{NCCL}",  # the WORLD group's: no subgroup
    f"    return pg.recv([tensor], src, tag)\n{NCCL}",
    # the user's own code calls isend: below a frame off the path, torch's frame is not the path's
    f'Traceback (most recent call last):\n  File "/work/train.py", line 9, in main\n    dist.isend(t, 1)\n'
    f'  File "{C10D}", line 1601, in isend\n    return group.send([tensor], group_dst_rank, tag)\n{NCCL}',
    # the statement as a frame's own code line (a user's function of the same body)
    f'Traceback (most recent call last):\n  File "/work/comm.py", line 9, in my_send\n'
    f"    return group.send([tensor], group_dst_rank, tag)\n{NCCL}",
])
def test_no_p2p_cause(text):
    assert [c for c in diagnose_causes(text) if c["overlap_related"]] == []
