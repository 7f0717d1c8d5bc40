"""CP_HIERARCHICAL_SIZES_INVALID against the installed Bridge: its validate() (_validate_cp_comm_type) rejects
exactly the requests the resolver rejects, with the same message, and takes the rest with the same effective fields."""

from __future__ import annotations

import pytest

from mbridge_overlap.bridge import adapter, conformance

CASES = [
    {"model.cp_comm_type": "a2a+p2p"},
    {"model.cp_comm_type": "a2a+p2p", "model.hierarchical_context_parallel_sizes": [4, 1]},
    {"model.cp_comm_type": "a2a+p2p", "model.hierarchical_context_parallel_sizes": [2, 1]},
    {"model.cp_comm_type": "a2a"},
    {"model.cp_comm_type": "p2p", "model.hierarchical_context_parallel_sizes": [2, 2]},
]


@pytest.mark.parametrize("extra", CASES, ids=lambda e: "-".join(f"{k.rsplit('.', 1)[1]}={v}" for k, v in e.items()))
def test_bridge_rejects_what_the_resolver_rejects(extra):
    case = conformance.Case({"model.context_parallel_size": 2, "model.seq_length": 8, "dataset.seq_length": 8,
                             "comm_overlap.tp_comm_overlap": False,
                             **extra}, gpus=8, te=True)
    outcome = conformance.check(case, adapter.bridge_version())
    assert outcome.differences == []
