"""NCCL's InfiniBand memory registration failing (NCCL 2.26.5 src/misc/ibvwrap.cc:162, :178: "Call to ibv_reg_mr[_iova2]
failed with error <strerror(errno)>", from ncclIbRegMrDmaBufInternal, transport/net_ib.cc:1772-1799) is
NCCL_IB_REGISTRATION_FAILED: NCCL registers its own network buffers (transport/net.cc:847, :991) and buffers registered
with it (:1672, :1706), which Megatron-Core's ddp.nccl_ub makes the param and grad buffers. The DMA-BUF call
(ibv_reg_dmabuf_mr), other verbs, and other programs' registration lines are not it. Texts: Megatron-LM#1656's and
torchtitan#633's lines, the others written for these tests."""

import io

import pytest

from mbridge_overlap import api

BAD_ADDRESS = ("[2025-06-23 17:44:58] fs-mbz-gpu-870:4006504:4008256 [6] misc/ibvwrap.cc:178 NCCL WARN Call to "
               "ibv_reg_mr_iova2 failed with error Bad address")
NO_MEMORY = "[0] misc/ibvwrap.cc:169 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory"


def diagnose(text: str, **kw) -> list:
    return api.diagnose(["-"], stdin=io.BytesIO((text + "\n").encode()), **kw).to_dict()["causes"]


@pytest.mark.parametrize("line", [
    BAD_ADDRESS, NO_MEMORY,
    "node1:123:456 [3] misc/ibvwrap.cc:162 NCCL WARN Call to ibv_reg_mr failed with error Bad address",
    "[rank5]: host:1:2 [5] NCCL WARN Call to ibv_reg_mr_iova2 failed with error Invalid argument",
])
def test_an_ib_registration_failure_names_nccl_ub_and_the_ib_transport(line):
    found = diagnose(line)
    ids = [c["id"] for c in found]
    assert "NCCL_IB_REGISTRATION_FAILED" in ids, (line, ids)
    cause = found[ids.index("NCCL_IB_REGISTRATION_FAILED")]
    assert "ddp.nccl_ub" in cause["knobs"] and "NCCL_IB_DISABLE" in cause["fix"]
    assert any(e.get("message_id") == "native.nccl_ib_reg_mr_failed" for e in cause["evidence"])


@pytest.mark.parametrize("line", [
    "misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported",
    "misc/ibvwrap.cc:291 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1",
    "RDMA buffer MR registration failed: Bad address",  # UCCL-EP's own registration (uccl#839), not NCCL's
    "[1700000000.1] ib_md.c:293 UCX ERROR ibv_reg_mr(address=0x7f00, length=4096, access=0xf) failed: Cannot allocate memory",
])
def test_other_registration_lines_are_not(line):
    assert "NCCL_IB_REGISTRATION_FAILED" not in [c["id"] for c in diagnose(line)], line


def test_the_config_says_whether_megatron_registered_its_buffers():
    kw = {"recipe": "llama3_8b_pretrain_config", "gpus": 16}
    (on,) = [c for c in diagnose(BAD_ADDRESS, overrides={"ddp.nccl_ub": True}, **kw)
             if c["id"] == "NCCL_IB_REGISTRATION_FAILED"]
    assert "this config sets ddp.nccl_ub=true" in on["message"] and "ddp.nccl_ub=false" in on["fix"]
    (off,) = [c for c in diagnose(BAD_ADDRESS, overrides={"ddp.nccl_ub": False}, **kw)
              if c["id"] == "NCCL_IB_REGISTRATION_FAILED"]
    assert "this config has ddp.nccl_ub=false" in off["message"] and "ddp.nccl_ub=false" not in off["fix"]
