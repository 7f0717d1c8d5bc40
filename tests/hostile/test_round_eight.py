"""Hostile input, round eight, and the leftovers of round seven (each case failed before its fix)."""

from __future__ import annotations

import sys

from hostile_kit import ROOT

sys.path.insert(0, str(ROOT))

from mbridge_overlap import api  # noqa: E402


def _errors(overrides):
    return {(f.id, f.message) for f in api.resolve(overrides=overrides, gpus=8).findings if f.severity == "error"}


def test_no_fix_leaves_a_refused_layout_refused_for_another_reason():
    # fuzzE E9: the VPP fix of PP_OVERLAP_NOT_SELECTED turned "25 middle layers over 3 stages" into "7 first-stage layers
    # not divisible by VPP 2": the same finding id, a new reason
    given = {"model.pipeline_model_parallel_size": 4, "model.num_layers": 32, "model.num_layers_in_first_pipeline_stage": 7}
    before = _errors(given)
    assert {i for i, _ in before} == {"PIPELINE_LAYOUT_REJECTED"}
    offered = [f for f in api.resolve(overrides=given, gpus=8).findings if f.fix_overrides]
    assert offered
    for f in offered:
        assert _errors({**given, **f.fix_overrides}) <= before, f.id


def test_a_group_description_in_lower_case_is_still_megatron_core_s_group():
    # fuzzE E11: a framework that writes the group's name in lower case got "none of the DP, TP, CP or EP groups"
    from mbridge_overlap.diagnose import groups

    line = "[PG ID 6 PG GUID 90({}) Rank 1] Watchdog caught collective operation timeout"
    assert groups.described(line.format("tensor_model_parallel_group")) == "tp"
    assert groups.described(line.format("context_parallel_group")) == "cp"
    assert groups.described(line.format("DATA_PARALLELISM_GROUP")) == "other"  # a word that only starts like one
