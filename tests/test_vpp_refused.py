"""evalT U1: a hybrid model (Bridge's Hybrid / Mamba provider) gets no VPP from the skill: VPP is an error at setup
(VPP_REFUSED_BY_MODEL) and PP_OVERLAP_NOT_SELECTED offers none, for the recipes that build such a provider and for
those whose model is loaded from a Hugging Face config in a folder of them (tier 2 holds the record to Bridge)."""

from __future__ import annotations

import pytest

from mbridge_overlap import api
from mbridge_overlap.run import vpp
from mbridge_overlap.upstream import releases

VERSION = releases.get(None).version
DATA = vpp._data(VERSION)


def _pp_fix(result) -> dict | None:
    f = next((f for f in result.findings if f.id == "PP_OVERLAP_NOT_SELECTED"), None)
    return None if f is None else f.fix_overrides


@pytest.mark.parametrize("ref", [sorted(DATA["recipes"])[0], sorted(DATA["recipes"])[-1], sorted(DATA["loaded_recipes"])[0]])
def test_no_vpp_is_offered_to_a_model_that_refuses_it(ref):
    pp = api.resolve({"model.pipeline_model_parallel_size": 2, "model.virtual_pipeline_model_parallel_size": None},
                     recipe=ref, gpus=64)
    assert "model.virtual_pipeline_model_parallel_size" not in (_pp_fix(pp) or {})
    assert "model.virtual_pipeline_model_parallel_size" not in ((pp.all_fixes() or {}).get("overrides") or {})
    with_vpp = api.resolve({"model.pipeline_model_parallel_size": 2, "model.virtual_pipeline_model_parallel_size": 2},
                           recipe=ref, gpus=64)
    refused = next(f for f in with_vpp.findings if f.id == "VPP_REFUSED_BY_MODEL")
    assert refused.fix_overrides == {"model.virtual_pipeline_model_parallel_size": None}


def test_a_run_config_names_its_provider():
    over = {"model.pipeline_model_parallel_size": 2, "model.virtual_pipeline_model_parallel_size": 2}
    assert vpp.refusal(VERSION, None, "megatron.bridge.models.hybrid.hybrid_provider.HybridModelProvider") is not None
    assert vpp.refusal(VERSION, None, "megatron.bridge.models.gpt_provider.GPTModelProvider") is None
    # two of Bridge's classes are named NemotronVLModelProvider: only the abstract Omni base inherits the assertion
    # (recheck54 Y2: the VL one, which builds a LLaVA model without it, was said to raise it)
    assert vpp.refusal(VERSION, None, "megatron.bridge.models.nemotron_vl.nemotron_vl_provider.NemotronVLModelProvider") is None
    assert vpp.refusal(VERSION, None, "HybridModelProvider") is None  # a bare name is no module's class
    plain = api.resolve(over, gpus=8)
    assert "VPP_REFUSED_BY_MODEL" not in {f.id for f in plain.findings}


def test_every_release_with_a_catalog_has_its_record():
    from mbridge_overlap.upstream import catalog

    for version in catalog.versions():
        assert vpp._data(version).get("recipes"), version
