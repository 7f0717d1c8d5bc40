"""A watchdog timeout whose line names no process group, known from the log only (report.unnamed_group): its OpType is
a collective more than one dimension runs, so the cause names every candidate and the knobs of each; a line that
names its group, and a log with its config, keep the one dimension they show."""

from __future__ import annotations

import pytest

from conftest import diagnose_causes

_WORK = ("[rank1]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] {prefix} Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=910, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)=600000) ran "
         "for 600021 milliseconds before timing out.")

DP = {"ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.use_distributed_optimizer"}
TP = {"model.sequence_parallel", "model.tensor_model_parallel_size"}
CP = {"model.context_parallel_size", "model.cp_comm_type"}
EP = {"model.moe_token_dispatcher_type", "model.expert_model_parallel_size"}
PP = {"comm_overlap.overlap_p2p_comm", "comm_overlap.batch_p2p_comm", "model.pipeline_model_parallel_size"}


def _line(op: str, prefix: str = "[Rank 1]", numel_in: int = 16777216, numel_out: int = 33554432) -> str:
    return _WORK.format(prefix=prefix, op=op, numel_in=numel_in, numel_out=numel_out)


def _one(text: str) -> dict:
    causes = diagnose_causes(text)
    assert len(causes) == 1, [c["id"] for c in causes]
    return causes[0]


@pytest.mark.parametrize("op, numel_in, numel_out, fid, wanted, said", [
    ("_ALLGATHER_BASE", 16777216, 33554432, "DP_COLLECTIVE_TIMEOUT", (DP, TP, CP, EP), ("DP", "TP", "CP", "EP")),
    ("_REDUCE_SCATTER_BASE", 33554432, 16777216, "DP_COLLECTIVE_TIMEOUT", (DP, TP, CP, EP), ("DP", "TP", "CP", "EP")),
    ("ALLTOALL_BASE", 1621248, 1572864, "EP_COLLECTIVE_TIMEOUT", (EP, CP), ("EP", "CP")),
    ("RECV", 4194304, 4194304, "PIPELINE_P2P_TIMEOUT", (PP, CP), ("PP", "CP")),
    ("SEND", 4194304, 4194304, "PIPELINE_P2P_TIMEOUT", (PP, CP), ("PP", "CP")),
])
def test_an_unnamed_group_s_collective_names_every_dimension_that_runs_it(op, numel_in, numel_out, fid, wanted, said):
    cause = _one(_line(op, numel_in=numel_in, numel_out=numel_out))
    assert cause["id"] == fid
    for knobs in wanted:
        assert knobs <= set(cause["knobs"]), (knobs, cause["knobs"])
    assert "dist.distributed_timeout_minutes" in cause["knobs"]
    assert "does not name" in cause["message"] and "does not name" in cause["title"]
    for name in said:
        assert f"{name}" in cause["title"]
    assert "--config" in cause["fix"]


def test_the_group_size_the_counts_give_is_said():
    assert "its group has 2 ranks" in _one(_line("_ALLGATHER_BASE"))["message"]
    assert "ranks (NumelOut" not in _one(_line("ALLTOALL_BASE", numel_in=1621248, numel_out=1572864))["message"]


def test_the_all_to_all_names_no_dp_or_tp():
    knobs = set(_one(_line("ALLTOALL_BASE", numel_in=1621248, numel_out=1572864))["knobs"])
    assert not knobs & (DP | TP | PP)


@pytest.mark.parametrize("prefix, fid, other", [
    ("[PG ID 5 PG GUID 9(CONTEXT_PARALLEL_GROUP) Rank 1]", "CP_COLLECTIVE_TIMEOUT", DP | EP),
    ("[PG ID 2 PG GUID 3(TENSOR_MODEL_PARALLEL_GROUP) Rank 1]", "TP_COLLECTIVE_TIMEOUT", DP | CP | EP),
    ("[PG ID 7 PG GUID 11(DATA_PARALLEL_GROUP_WITH_CP) Rank 1]", "DP_COLLECTIVE_TIMEOUT", TP | CP | EP),
])
def test_a_line_that_names_its_group_keeps_that_dimension_alone(prefix, fid, other):
    cause = _one(_line("_ALLGATHER_BASE", prefix=prefix))
    assert cause["id"] == fid
    assert not set(cause["knobs"]) & other
    assert "does not name" not in cause["message"]


def test_a_batched_pipeline_op_is_left_to_its_own_reading():
    """COALESCED is torch's batch_isend_irecv (report.p2p_op_type), not one of the unnamed candidates here."""
    cause = _one(_line("COALESCED", numel_in=4194304, numel_out=4194304))
    assert "does not name" not in cause["message"]
    assert not set(cause["knobs"]) & CP


def test_a_one_element_gather_is_still_no_overlap_cause():
    causes = diagnose_causes(_line("_ALLGATHER_BASE", numel_in=1, numel_out=16))
    assert not any(c["overlap_related"] and "does not name" in c["message"] for c in causes)


def test_a_work_whose_group_another_watchdog_line_names_is_that_group_s():
    """torch prints the work with the rank alone and the group's description on its next line about the same work
    (report._watchdog_pairs): the pair names the group, so no candidates are said."""
    companion = ("[rank1]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:1664] [PG ID 7 PG GUID 11(DATA_PARALLEL_GROUP_WITH_CP) "
                 "Rank 1] Timeout at NCCL work: 910, last enqueued NCCL work: 910, last completed NCCL work: 909.")
    causes = diagnose_causes(_line("_ALLGATHER_BASE") + "\n" + companion + "\n")
    (cause,) = [c for c in causes if c["overlap_related"]]
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT" and "does not name" not in cause["message"]
    assert not set(cause["knobs"]) & (TP | CP | EP)


# -- with the config: an all-to-all on a group the line does not name, where the run has EP and CP's a2a -------------

MOE = "qwen3_30b_a3b_pretrain_config"


def _moe(cp_comm_type: str, cp: int = 2) -> dict:
    import io

    from mbridge_overlap import api

    text = _line("ALLTOALL_BASE", numel_in=1621248, numel_out=1572864) + "\n"
    overrides = {"model.context_parallel_size": cp, "model.cp_comm_type": cp_comm_type}
    (cause,) = api.diagnose(["-"], stdin=io.BytesIO(text.encode()), recipe=MOE, overrides=overrides,
                            gpus=32).to_dict()["causes"]
    return cause


def test_with_ep_and_cp_a2a_the_config_names_both_all_to_alls():
    cause = _moe("a2a")
    assert cause["id"] == "EP_COLLECTIVE_TIMEOUT"
    assert EP <= set(cause["knobs"]) and CP <= set(cause["knobs"])
    assert "the MoE dispatcher's or CP's" in cause["analysis"]


@pytest.mark.parametrize("cp_comm_type, cp", [("p2p", 2), ("a2a", 1)])
def test_with_no_cp_all_to_all_the_config_keeps_the_dispatcher_alone(cp_comm_type, cp):
    cause = _moe(cp_comm_type, cp)
    assert cause["id"] == "EP_COLLECTIVE_TIMEOUT"
    assert not CP & set(cause["knobs"]) and "CP's" not in cause["analysis"]


LLAMA = "llama3_8b_pretrain_config"


def _dense(tp: int, cp: int, gpus: int) -> dict:
    (cause,) = _dense_causes(tp, cp, gpus)
    return cause


def _dense_causes(tp: int, cp: int, gpus: int) -> list:
    import io

    from mbridge_overlap import api

    overrides = {"model.tensor_model_parallel_size": tp, "model.context_parallel_size": cp,
                 "model.pipeline_model_parallel_size": 1, "model.sequence_parallel": tp > 1,
                 "comm_overlap.tp_comm_overlap": False}
    text = _line("_ALLGATHER_BASE", numel_in=1 << 20, numel_out=1 << 21) + "\n"  # a group of 2
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode()), recipe=LLAMA, overrides=overrides,
                        gpus=gpus).to_dict()["causes"]


def test_with_the_config_a_size_dp_and_tp_share_keeps_tp_s_knobs_beside_dp_s():
    cause = _dense(2, 1, 4)  # DP 2 and TP 2
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT" and "DP's and TP's too" in cause["analysis"]
    assert cause["title"].endswith("does not name: DP or TP")
    assert DP <= set(cause["knobs"]) and TP <= set(cause["knobs"]) and not CP & set(cause["knobs"])


def test_with_the_config_a_size_tp_and_cp_share_keeps_the_knobs_of_both():
    cause = _dense(2, 2, 16)  # TP 2, CP 2, DP 4 (DP x CP 8): the cause is the first of them (_by_size), with both's knobs
    assert cause["id"] in ("TP_COLLECTIVE_TIMEOUT", "CP_COLLECTIVE_TIMEOUT") and "CP and TP's, no DP group's" in cause["analysis"]
    assert TP <= set(cause["knobs"]) and CP <= set(cause["knobs"]) and not DP & set(cause["knobs"])


def test_with_the_config_a_size_one_group_has_names_that_group_alone():
    cause = _dense(2, 1, 16)  # TP 2, DP 8
    assert cause["id"] == "TP_COLLECTIVE_TIMEOUT" and not (DP | CP) & set(cause["knobs"])


def test_cp_s_ring_batching_is_said_with_its_gpu_condition():
    """Transformer Engine 2.20.2 context_parallel.py:1642-1644 batches the ring's sends and receives with
    NVTE_BATCH_MHA_P2P_COMM set, or with CP = 2 on a GPU of compute capability below 10.0 only (not on Blackwell)."""
    message = _one(_line("SEND", numel_in=4194304, numel_out=4194304))["message"]
    assert "CP = 2 on a GPU of compute capability below 10.0" in message


# -- with a config that gives no DP size (a GPU count no TP x PP x CP divides: GPUS_NOT_DIVISIBLE) ---------------------


def _undivided(tp: int, gpus: int) -> dict:
    causes = _dense_causes(tp, 1, gpus)
    assert sorted(c["id"] for c in causes) == ["DP_COLLECTIVE_TIMEOUT", "GPUS_NOT_DIVISIBLE"], causes
    return next(c for c in causes if c["id"] == "DP_COLLECTIVE_TIMEOUT")


def test_a_config_without_a_dp_size_keeps_every_candidate_it_cannot_rule_out():
    cause = _undivided(2, 3)  # TP 2 with sequence parallel, CP 1, 3 GPUs: no DP size
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT"
    assert DP <= set(cause["knobs"]) and TP <= set(cause["knobs"])  # DP's size unknown, TP's 2 fits the line's 2
    assert not CP & set(cause["knobs"])  # CP 1: no CP group
    assert "no DP size" in cause["analysis"]
    assert "DP" in cause["title"] and "TP" in cause["title"] and "CP" not in cause["title"]


def test_a_config_without_a_dp_size_still_rules_out_a_group_of_another_size():
    cause = _undivided(4, 6)  # TP 4 (the line's group has 2 ranks), 6 GPUs: DP's size alone is unknown
    assert DP <= set(cause["knobs"]) and not (TP | CP) & set(cause["knobs"])
    assert "no DP size" in cause["analysis"] and "TP" not in cause["title"]
