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


@pytest.mark.parametrize("extra", [{"model.seq_length": 8192}, {"model.seq_length": 8192, "dataset.seq_length": 8192},
                                   {"model.seq_length": 4096, "dataset.seq_length": 2048}],
                         ids=["model-alone", "both", "dataset-differs"])
def test_bridge_refuses_a_model_and_dataset_sequence_length_that_differ(extra):
    """validate() holds model.seq_length equal to the dataset's (the resolver's SEQ_LENGTH_DATASET_MISMATCH). The
    baseline's model is a stand-in whose sequence length the resolver does not know, so each case gives the model's."""
    case = conformance.Case({"comm_overlap.tp_comm_overlap": False, **extra}, gpus=8, te=True)
    assert conformance.check(case, adapter.bridge_version()).differences == []


def test_the_baseline_s_dataset_is_the_one_the_resolver_assumes():
    from mbridge_overlap.bridge.recipes import seq_length_checked
    from mbridge_overlap.run import schema

    cfg = adapter.baseline_config()
    assert schema.BASELINE_CONTEXT == {"dataset.seq_length": cfg.dataset.seq_length,
                                       "dataset.seq_length_checked": seq_length_checked(cfg)}
