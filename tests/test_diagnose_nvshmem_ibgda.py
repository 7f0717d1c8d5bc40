"""NVSHMEM's "init failed for transport: IBGDA" (fresh20 F20-3) is a symptom whose weight depends on what follows
and on the run: NVSHMEM v3.4.5 src/host/transport/transport.cpp:281-286 prints it and goes on (status 0), only
:293-296's "Unable to initialize any transports. returning error." fails; Megatron-Core's DeepEP dispatcher starts
NVSHMEM only for flex/deepep on an ETP x EP group of more than 8 ranks (DeepEP 567632d deep_ep/buffer.py:105,
csrc/config.hpp:79-80), whose internode kernels need IBGDA (csrc/kernels/internode.cu:134-138, :492). The line's
file:function:line prefix (NVSHMEMI_ERROR_PRINT) is optional: notes shorten it. The texts are the held-back batch's
(/work/scratch/corpus_fresh20) and vllm-project/vllm#27676's."""

import io

import pytest

from mbridge_overlap import api

FULL = "/tmp/nvshmem_src/src/host/transport/transport.cpp:nvshmemi_transport_init:282: init failed for transport: IBGDA"
NONE = "/tmp/nvshmem_src/src/host/transport/transport.cpp:nvshmemi_transport_init:294: Unable to initialize any transports. returning error."


def diagnose(text: str, **kw) -> list:
    return api.diagnose(["-"], stdin=io.BytesIO((text + "\n").encode()), **kw).to_dict()["causes"]


@pytest.mark.parametrize("line", [FULL, "nvshmemi_transport_init:282 init failed for transport: IBGDA",
                                  "init failed for transport: IBGDA", "[rank3]: " + FULL])
def test_the_ibgda_line_alone_is_a_warning_with_its_conditions_any_prefix(line):
    (c,) = diagnose(line)
    assert (c["id"], c["severity"]) == ("NVSHMEM_IBGDA_INIT_FAILED", "warning")
    assert "Unable to initialize any transports" in c["message"] and "more than 8 ranks" in c["message"]
    assert "model.expert_model_parallel_size" in c["knobs"]


@pytest.mark.parametrize("after", [NONE, "Unable to initialize any transports. returning error.",
                                   "/tmp/nvshmem_src/src/modules/transport/ibgda/ibgda.cpp 3888 no active IB device "
                                   "that supports GPU-initiated communication is found, exiting...",
                                   "RuntimeError: DeepEP error: timeout (dispatch CPU)"])
def test_with_the_failure_it_is_that_failure_s_reason(after):
    (c,) = diagnose(f"{FULL}\n{after}")
    assert (c["id"], c["severity"]) == ("MOE_DISPATCHER_COMM_FAILED", "error")
    assert "IBGDA transport did not start before it" in c["message"]


def test_the_config_decides_its_weight():
    flex = {"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "deepep"}
    kw = {"recipe": "qwen3_30b_a3b_pretrain_config", "gpus": 128}
    (c,) = diagnose(FULL, overrides={**flex, "model.expert_model_parallel_size": 16}, **kw)
    assert c["severity"] == "error" and "16 ranks (> 8)" in c["message"]
    (c,) = diagnose(FULL, overrides={**flex, "model.expert_model_parallel_size": 8}, **kw)
    assert c["severity"] == "info" and "starts no NVSHMEM" in c["message"]
    (c,) = diagnose(FULL, overrides={"model.moe_token_dispatcher_type": "alltoall"}, **kw)
    assert c["severity"] == "info" and "moe_token_dispatcher_type=alltoall" in c["message"]


def test_a_started_ibgda_transport_is_nothing():
    assert diagnose("Successfully initialized the transport: IBGDA. It will be used for device-side APIs over IB.") == []
