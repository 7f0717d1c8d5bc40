"""NVSHMEM's init lines (fix21 A): what NVSHMEM v3.4.5 does after each. Its unique-ID bootstrap's errors
(src/modules/bootstrap/uid/bootstrap_uid.cpp:95-101 bootstrap_net_recv, :220, :234, :240 bootstrap_root, printed by
BOOTSTRAP_ERROR_PRINT, bootstrap_util.h:56-61, "FILE:FUNCTION:LINE: ") fail init (bootstrap_net_recv returns an error)
or leave the PEs waiting (bootstrap_root, the root's thread, stops); an NVSHMEM
call before init completed exits (nvshmem_internal.h:45-50, NVSHMEMI_ERROR_EXIT exit(-1)): both are the dispatcher's
failure, said conditionally (Megatron-Core 0.19.2 reaches NVSHMEM only through DeepEP: token_dispatcher.py:1769-1772,
fused_a2a.py:67). The remote transport's failure (transport.cpp:220-228, "non-fatal", status 0) and a NIC skipped
(ibgda.cpp:3792-3853, ibdevx.cpp:1874-1912, "WARN: ... Skipping...") are warnings NVSHMEM goes on from. NCCL prints
"Message truncated : received" from its own bootstrap: not NVSHMEM's."""

import pytest

from tests.conftest import diagnose_causes

BOOTSTRAP = [
    "/opt/nvshmem/src/modules/bootstrap/uid/bootstrap_uid.cpp:bootstrap_net_recv:99: Message truncated : received 16 bytes instead of 4",
    "bootstrap_root:234: mismatch in rank count from procs 16 : 8",
    "[rank9]: bootstrap_root:240: rank 3 of 16 ranks has already checked in",
    "bootstrap_net_init:148: No usable listening interface found",
    "UID Bootstrap versions not compatible between PEs",
]
BEFORE_INIT = "/opt/nvshmem/src/host/coll/barrier/barrier.cpp:nvshmem_barrier:28: NVSHMEM API called before NVSHMEM initialization has completed"
SKIPPED = [
    "WARN: init failed for remote transport: ucx",
    "WARN: device mlx5_bond_0 does not support all necessary atomic operations. You may want to check the "
    "PCI_ATOMIC_MODE value in the NIC firmware. Skipping...",
    "WARN: device eth1 is not supported (expected HCA interface: mlx5 or ibp). Skipping...",
    "WARN: device rocep1s0 cannot allocate buffer on the specified memory type. Skipping...",
]


def one(text):
    (c,) = diagnose_causes(text + "\n")
    return c


@pytest.mark.parametrize("line", BOOTSTRAP)
def test_a_bootstrap_error_is_the_dispatcher_failure_said_conditionally(line):
    c = one(line)
    assert (c["id"], c["severity"]) == ("MOE_DISPATCHER_COMM_FAILED", "error")
    assert "unique-ID bootstrap" in c["message"] and "If this is a Megatron-Core run" in c["message"]
    assert "model.moe_flex_dispatcher_backend" in c["knobs"]


def test_nvshmem_used_before_init_is_the_same_failure():
    c = one(BEFORE_INIT)
    assert (c["id"], c["severity"]) == ("MOE_DISPATCHER_COMM_FAILED", "error")
    assert "found it not initialized" in c["message"] and "If this is a Megatron-Core run" in c["message"]


@pytest.mark.parametrize("line", SKIPPED)
def test_a_skipped_nic_or_remote_transport_alone_is_a_warning(line):
    c = one(line)
    assert (c["id"], c["severity"]) == ("NVSHMEM_TRANSPORT_SKIPPED", "warning")
    assert "If this is Megatron-Core's NVSHMEM" in c["message"]


@pytest.mark.parametrize("failure", [BOOTSTRAP[0], BEFORE_INIT, "Unable to initialize any transports. returning error.",
                                     "RuntimeError: DeepEP error: timeout (dispatch CPU)"])
def test_with_a_failure_the_warning_is_its_reason(failure):
    c = one(f"{SKIPPED[1]}\n{failure}")
    assert (c["id"], c["severity"]) == ("MOE_DISPATCHER_COMM_FAILED", "error")
    assert "left out a NIC or its remote (proxy) transport before it" in c["message"]


def test_nccl_s_own_message_truncated_is_not_nvshmem_s():
    assert diagnose_causes("node1:2231:2290 [3] NCCL WARN Message truncated : received 40 bytes instead of 8\n") == []


@pytest.mark.parametrize("line", BOOTSTRAP[1:3])
def test_the_root_s_thread_stopping_is_not_said_to_return_an_error(line):
    """bootstrap_root is the root PE's thread (NVSHMEM v3.4.5 bootstrap_uid.cpp:191): on these errors it goes to `out`
    and returns NULL (:283), no error code; the other PEs wait for the ring peer it never sends (:741)."""
    c = one(line)
    assert "returned from bootstrap_net_recv, bootstrap_root" not in c["message"]
    assert "bootstrap_root, the root PE's thread, stops" in c["message"]


def test_a_receive_or_interface_error_is_said_to_fail_init():
    for line in (BOOTSTRAP[0], BOOTSTRAP[3]):
        assert "returns an error and NVSHMEM's init fails" in one(line)["message"]


@pytest.mark.parametrize("line", [SKIPPED[0], SKIPPED[1]])
def test_the_config_decides_whose_nvshmem_skipped_it(line):
    """As NVSHMEM_IBGDA_INIT_FAILED's (report._nvshmem_against_config): Megatron-Core's DeepEP starts NVSHMEM only for
    flex with the deepep backend on an ETP x EP group of more than 8 ranks (DeepEP buffer.py:105); under any other
    config the training starts none, and the line is another process's."""
    import io

    from mbridge_overlap import api

    def causes(**overrides):
        return api.diagnose(["-"], stdin=io.BytesIO((line + "\n").encode()), recipe="qwen3_30b_a3b_pretrain_config",
                            gpus=128, overrides=overrides).to_dict()["causes"]

    flex = {"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "deepep"}
    (c,) = causes(**flex, **{"model.expert_model_parallel_size": 16})
    assert (c["id"], c["severity"]) == ("NVSHMEM_TRANSPORT_SKIPPED", "warning")
    assert "16 ranks (> 8)" in c["message"] and "If this is Megatron-Core's NVSHMEM" not in c["message"]
    (c,) = causes(**flex, **{"model.expert_model_parallel_size": 8})
    assert c["severity"] == "info" and "starts no NVSHMEM" in c["message"] and "another process's" in c["message"]
    (c,) = causes(**{"model.moe_token_dispatcher_type": "alltoall"})
    assert c["severity"] == "info" and "moe_token_dispatcher_type=alltoall" in c["message"]
    assert c["fix_overrides"] == {}
