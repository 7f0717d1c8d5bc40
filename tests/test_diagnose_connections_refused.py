"""Megatron-LM's argument check refusing CUDA_DEVICE_MAX_CONNECTIONS other than 1 (fix21 B). validate_args raises
RuntimeError "Using sequence parallelism requires ..." with sequence parallelism on, else "Using async gradient all
reduce requires ..." with args.async_tensor_model_parallel_allreduce (its default) in Megatron-LM 23.04
(megatron/arguments.py:355) to core_v0.11.0 (megatron/training/arguments.py:656-664); from core_v0.12.0 an assert
"Using tensor model parallelism or context parallelism require ...". Those are the run refused (an error); Megatron-Core's
and Transformer Engine's "it is recommended" warnings stay warnings."""

import pytest

from tests.conftest import diagnose_causes

REFUSED = [
    "RuntimeError: Using async gradient all reduce requires setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1",
    '  File "/workspace/Megatron-LM/megatron/training/arguments.py", line 515, in validate_args\n'
    "    raise RuntimeError(\n"
    "RuntimeError: Using async gradient all reduce requires setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1",
    "[rank0]: RuntimeError: Using sequence parallelism requires setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1",
    "AssertionError: Using tensor model parallelism or context parallelism require setting the environment variable "
    "CUDA_DEVICE_MAX_CONNECTIONS to 1",
]


@pytest.mark.parametrize("text", REFUSED)
def test_megatron_lm_refusing_is_an_error_naming_the_variable(text):
    (c,) = diagnose_causes(text + "\n")
    assert (c["id"], c["severity"]) == ("CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE", "error")
    assert "refused to start" in c["message"] and "CUDA_DEVICE_MAX_CONNECTIONS=1" in c["fix"]


def test_the_recommendation_stays_a_warning():
    (c,) = diagnose_causes("UserWarning: When using async grad allreduce it is recommended to set the environment "
                           "variable CUDA_DEVICE_MAX_CONNECTIONS to 1 for maximum speedup\n")
    assert (c["id"], c["severity"]) == ("CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE", "warning")
