"""Which pipeline sends and receives a config runs unbatched, against real Megatron-Bridge and Megatron-Core: it is
batch_p2p_comm as Bridge resolves it that decides, whatever overlap_p2p_comm is (evalAF AF-4)."""

import inspect
import io

import pytest

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter, conformance

RECV_TIMEOUT = ("[rank3]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=12, OpType=RECV, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) ran "
                "for 600008 milliseconds before timing out.\n")


def test_megatron_core_batches_only_with_batch_p2p_comm():
    """p2p_communication.py (0.19.2 :367-377): _batched_p2p_ops where config.batch_p2p_comm, else _p2p_ops (separate
    isend/irecv); overlap_p2p_comm takes no part in the choice."""
    from megatron.core.pipeline_parallel import p2p_communication as p2p

    source = inspect.getsource(p2p)
    chooser = source[source.index("elif config.batch_p2p_comm:"):]
    chooser = chooser[:chooser.index("pp_group")]
    assert "p2p_func = _batched_p2p_ops" in chooser and "p2p_func = _p2p_ops" in chooser
    assert "overlap_p2p_comm" not in chooser


@pytest.mark.parametrize("vpp, overlap", [(None, None), (2, False)])
def test_a_pipeline_hang_with_batch_p2p_comm_false_is_offered_batching_bridge_takes(vpp, overlap):
    over = {"model.pipeline_model_parallel_size": 4, "model.num_layers": 8, "comm_overlap.tp_comm_overlap": False,
            "comm_overlap.batch_p2p_comm": False, "model.virtual_pipeline_model_parallel_size": vpp}
    if overlap is not None:
        over["comm_overlap.overlap_p2p_comm"] = overlap
    version = adapter.bridge_version()
    case = conformance.Case(over, 32, True)
    assert not conformance.check(case, version).differences
    model = api.resolve(over, gpus=32, bridge_version=version).effective["model"]
    assert (model["overlap_p2p_comm"], model["batch_p2p_comm"]) == (False, False)  # so Megatron-Core runs _p2p_ops
    d = api.diagnose(["-"], stdin=io.BytesIO(RECV_TIMEOUT.encode()), overrides=over, gpus=32).to_dict()
    (cause,) = [c for c in d["causes"] if c["evidence"]]
    assert cause["id"] == "PIPELINE_P2P_TIMEOUT" and "does not apply" not in cause["fix"], cause["fix"]
    fixed = conformance.Case({**over, **cause["fix_overrides"]}, 32, True)
    assert not conformance.check(fixed, version).differences
    assert api.resolve(fixed.overrides, gpus=32, bridge_version=version).effective["model"]["batch_p2p_comm"] is True
