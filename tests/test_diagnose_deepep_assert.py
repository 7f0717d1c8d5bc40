"""DeepEP's device-side assert (EP_DEVICE_ASSERT: `Assertion failed: <file>:<line>, condition: <cond>`) in one of its
dispatch/combine kernel files is the flex token dispatcher's failure (fresh16 F16-4); the format with any other file
is not. The texts here are written for these tests."""

import io

import pytest

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
