"""FastMoE's NCCL_SAFE_CALL line in its expert-parallel exchange (laekov/fastmoe cuda/stream_manager.h:9-15, its
callers in cuda/global_exchange.cpp / .h) is FASTMOE_EXCHANGE_NCCL_FAILED, an EP failure; the same macro's line from
any other file (other projects copy it) is not."""

import pytest

from tests.conftest import diagnose_causes


@pytest.mark.parametrize("line", [
    "NCCL Error at /home/xxx/fastmoe/cuda/global_exchange.cpp:127 value 5",  # fastmoe#126
    "NCCL Error at /home/aghinassi/Desktop/fastmoe/cuda/global_exchange.cpp:16 value 4",  # fastmoe#149
    "NCCL Error at cuda/global_exchange.h:40 value 2",  # global_scatter's token sends
])
def test_the_expert_exchange_s_nccl_error(line):
    (c,) = diagnose_causes(line + "\n")
    assert c["id"] == "FASTMOE_EXCHANGE_NCCL_FAILED" and c["overlap_related"] is True
    assert c["knobs"] == ["model.expert_model_parallel_size"]
    assert "fastmoe#149" in c["message"] and "fastmoe#126" in c["message"]


@pytest.mark.parametrize("line", [
    "NCCL Error at /work/project/csrc/comm.cpp:127 value 5",  # the macro copied elsewhere
    "NCCL Error at /home/xxx/fastmoe/cuda/fastermoe/smart_schedule.h:160 value 5",  # FastMoE's, not the exchange
    "NCCL Error at /home/x/my_global_exchange.cpp:12 value 4",
])
def test_the_same_macro_elsewhere_is_no_fastmoe_cause(line):
    assert all(c["id"] != "FASTMOE_EXCHANGE_NCCL_FAILED" for c in diagnose_causes(line + "\n"))
