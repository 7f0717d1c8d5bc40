"""A DeepEP kernel assert's cause says what its condition means; a low-latency kernel's (internode_ll.cu) is no
dispatcher of Megatron-Core's; a config whose dispatcher runs no DeepEP is said to contradict the log (evalAE AE2-4,
AE2-5). The log lines here are written for these tests."""

import io

from mbridge_overlap import api

RC = ("Assertion failed: /opt/DeepEP/csrc/kernels/legacy/internode.cu:497, condition: ibgda_get_state()->num_rc_per_pe "
      "== num_channels or ibgda_get_state()->num_rc_per_pe >= num_sms\n")
LL = "Assertion failed: csrc/kernels/legacy/internode_ll.cu:250, condition: num_recv_tokens != 0\n"


def cause(text: str, **kw) -> dict:
    (c,) = [c for c in api.diagnose(["-"], stdin=io.BytesIO(text.encode()), **kw).to_dict()["causes"]
            if c["id"] == "MOE_DISPATCHER_COMM_FAILED"]
    return c


def test_the_condition_s_meaning_reaches_the_cause():
    c = cause(RC)
    assert "num_qps_per_rank" in c["message"] and "moe_deepep_num_sms" in c["message"]


def test_a_low_latency_kernel_assert_is_not_the_flex_dispatcher_s():
    c = cause(LL)
    assert "another component" in c["message"] and "flex token dispatcher's expert-parallel" not in c["message"]
    assert "alltoall" not in c["fix"]


def test_a_config_without_deepep_contradicts_the_log_and_offers_no_value_it_has():
    c = cause(RC, recipe="qwen3_30b_a3b_pretrain_config", overrides={"model.moe_token_dispatcher_type": "alltoall"})
    assert "contradicts the config" in c["analysis"] and "moe_token_dispatcher_type=alltoall" not in c["fix"]


def test_cp_comm_type_read_by_the_error_is_not_unmodelled():
    """evalAE AE2-6: CP_HIERARCHICAL_SIZES_INVALID reads model.cp_comm_type, so no UNMODELED_OVERLAP_KEY names it."""
    res = api.resolve({"model.context_parallel_size": 1, "model.cp_comm_type": "a2a+p2p"},
                      recipe="llama3_70b_pretrain_config", gpus=64, gpu="h100").to_dict()
    ids = [f["id"] for f in res["findings"]]
    assert "CP_HIERARCHICAL_SIZES_INVALID" in ids
    assert not [f for f in res["findings"] if f["id"] == "UNMODELED_OVERLAP_KEY" and "model.cp_comm_type" in f["knobs"]]
