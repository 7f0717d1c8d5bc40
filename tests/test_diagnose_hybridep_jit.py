"""HybridEP's run-time kernel build (DeepEP hybrid-ep 94a9f8f csrc/hybrid_ep/jit/compiler.cu:151, NVCCCompiler::build:
`throw std::runtime_error("Failed to compile the code, compile command: " + compile_command)`) failing is the flex
token dispatcher's HybridEP backend failing (MOE_DISPATCHER_COMM_FAILED, model.moe_flex_dispatcher_backend); the words
without the command, or prose about a compile, are not. The texts here are written for these tests."""

import pytest

from conftest import diagnose_causes as causes


@pytest.mark.parametrize("line", [
    "RuntimeError: Failed to compile the code, compile command: /usr/local/cuda/bin/nvcc -std=c++17 -O3 "
    "/root/.cache/hybrid_ep/jit/dispatch-rank-0-node-1.cu -o /root/.cache/hybrid_ep/jit/dispatch-rank-0-node-1.so",
    "[rank7]: RuntimeError: Failed to compile the code, compile command: nvcc -lnixl -lnixl_build x.cu -o x.so",
    "0: [default3]:terminate called after throwing an instance of 'std::runtime_error'\n"
    "0: [default3]:  what():  Failed to compile the code, compile command: /usr/local/cuda/bin/nvcc -arch=sm_100a y.cu",
])
def test_hybridep_s_kernel_build_failing_is_the_dispatcher_backend_s(line):
    found = causes(line + "\n")
    ids = [c["id"] for c in found]
    assert "MOE_DISPATCHER_COMM_FAILED" in ids, line
    cause = found[ids.index("MOE_DISPATCHER_COMM_FAILED")]
    assert "model.moe_flex_dispatcher_backend" in cause["knobs"]
    assert any(e.get("message_id") == "native.hybridep_jit_compile_failed" for e in cause["evidence"])


@pytest.mark.parametrize("line", [
    "RuntimeError: Failed to compile the code",  # the words without HybridEP's command
    "the compile command failed to compile the code for the custom kernel",
    "torch._inductor.exc.CppCompileError: C++ compile error",
])
def test_other_compile_failures_are_not(line):
    assert "MOE_DISPATCHER_COMM_FAILED" not in [c["id"] for c in causes(line + "\n")], line
