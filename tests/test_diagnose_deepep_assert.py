"""DeepEP's device-side assert (EP_DEVICE_ASSERT: `Assertion failed: <file>:<line>, condition: <cond>`) in one of its
dispatch/combine kernel files is the flex token dispatcher's failure (fresh16 F16-4); the format with any other file
is not. The texts here are written for these tests."""

import io

import pytest

from conftest import diagnose_causes as causes
from mbridge_overlap import api


def ids(text: str) -> list[str]:
    causes = api.diagnose(["-"], stdin=io.BytesIO(text.encode("utf-8"))).to_dict()["causes"]
    return [c["id"] for c in causes]


@pytest.mark.parametrize("line", [
    "Assertion failed: internode_ll.cu:250, condition: num_recv_tokens != 0",
    "Assertion failed: /opt/DeepEP/csrc/kernels/internode.cu:492, condition: ibgda_get_state()->num_rc_per_pe >= num_sms",
    "[rank5]: Assertion failed: csrc/kernels/intranode.cu:237, condition: num_topk <= 32",
    "0: [default3]:Assertion failed: ibgda_device.cuh:363, condition: num_wqes <= 32",
    "Assertion failed: deep_ep/include/deep_ep/impls/internode_ll.cu:88, condition: num_sms > 1",
])
def test_a_deepep_kernel_assert_is_the_dispatcher_s_failure(line):
    assert "MOE_DISPATCHER_COMM_FAILED" in ids(line + "\n"), line


@pytest.mark.parametrize("line", [
    "Assertion failed: fp8_gemm.cuh:120, condition: n % BLOCK_N == 0",  # the format, another library's file
    "Assertion failed: layout.cu:42, condition: num_tokens > 0",  # a name many projects use
    "Assertion failed: my_internode.cu:12, condition: x > 0",  # a file that only ends with DeepEP's name
    "the kernel in internode_ll.cu asserts num_recv_tokens != 0 when the count has not arrived",
])
def test_the_format_or_the_file_alone_is_not(line):
    assert "MOE_DISPATCHER_COMM_FAILED" not in ids(line + "\n"), line


@pytest.mark.parametrize("line", [
    # the layout kernel (get_dispatch_layout, which Megatron-Core's fused_a2a.py runs first): an EP group across nodes
    # whose size is not a multiple of 8 (DeepEP 567632d csrc/kernels/layout.cu:55; dd758ca csrc/kernels/legacy/layout.cu:56)
    "[rank3]: Assertion failed: csrc/kernels/layout.cu:55, condition: num_ranks % NUM_MAX_NVL_PEERS == 0 and "
    "num_ranks > NUM_MAX_NVL_PEERS",
    "Assertion failed: /workspace/DeepEP/csrc/kernels/legacy/layout.cu:56, condition: num_ranks % "
    "LEGACY_NUM_MAX_NVL_PEERS == 0 and num_ranks > LEGACY_NUM_MAX_NVL_PEERS",
    # barrier_block's (567632d csrc/kernels/utils.cuh:519)
    "Assertion failed: /opt/DeepEP/csrc/kernels/utils.cuh:519, condition: kNumRanks <= blockDim.x",
])
def test_the_layout_kernel_s_and_the_barrier_s_asserts_are_the_dispatcher_s(line):
    """recheck66 AM-3: the layout kernel's EP_DEVICE_ASSERT gave causes: none (a bare path) or the generic entry's
    (a /DeepEP/ path); its entry is the kernel assert's, whose note says what the condition means."""
    found = causes(line + "\n")
    assert [c["id"] for c in found] == ["MOE_DISPATCHER_COMM_FAILED"], line
    assert found[0]["evidence"][0]["message_id"] == "native.deepep_kernel_assert"


def test_the_generic_deepep_entry_claims_no_file_the_line_does_not_name():
    """recheck66 AM-3: with a /DeepEP/ path a kernel assert went to the generic entry, whose 'raised' named
    csrc/kernels/internode.cu for any line (layout.cu's, intranode.cu's)."""
    line = "[rank3]: Assertion failed: /workspace/DeepEP/csrc/kernels/intranode.cu:237, condition: num_topk <= 32\n"
    ev = causes(line)[0]["evidence"][0]
    assert ev["message_id"] == "native.deepep_kernel_assert" and "internode.cu" not in ev["file"]
    ev = causes("RuntimeError: DeepEP error: timeout (dispatch CPU)\n")[0]["evidence"][0]
    assert ev["message_id"] == "native.moe_dispatcher_failure"
    assert "the file a path on the line names" in ev["file"] and not ev["file"].startswith("csrc/kernels/internode.cu")
