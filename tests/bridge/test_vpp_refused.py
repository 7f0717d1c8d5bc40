"""A model whose provider refuses virtual pipeline parallelism (evalT U1: VPP was offered as the PP-overlap fix to
hybrid models, whose provide() asserts it is None): the shipped record is the installed Bridge's, and a recipe it
names, built with VPP as the skill says it fails, raises Bridge's own assertion when the model is built."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT

from mbridge_overlap import api
from mbridge_overlap.run import vpp
from mbridge_overlap.upstream import catalog


def test_the_shipped_record_is_the_installed_bridge_s():
    proc = subprocess.run([sys.executable, "-W", "ignore", str(ROOT / "tools" / "gen_vpp_refused.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def _version() -> str:
    from mbridge_overlap.bridge import adapter

    return adapter.bridge_version()


def _sample() -> list[str]:
    names = sorted(vpp._data(_version()).get("recipes") or [])
    return names[::max(1, len(names) // 6)]


@pytest.mark.parametrize("ref", _sample())
def test_a_named_recipe_with_vpp_fails_at_the_model_build_as_said(ref):
    from mbridge_overlap.bridge import adapter, recipes

    entry = catalog.lookup(ref, _version())
    over = {"model.pipeline_model_parallel_size": 2, "model.virtual_pipeline_model_parallel_size": 2}
    said = next(f for f in api.resolve(over, recipe=ref, gpus=64).findings if f.id == "VPP_REFUSED_BY_MODEL")
    cfg = recipes.rebuild(entry, Path(tempfile.mkdtemp()))
    cfg.model.pipeline_model_parallel_size, cfg.model.virtual_pipeline_model_parallel_size = 2, 2
    adapter.quiet()
    with pytest.raises(AssertionError) as raised:
        cfg.model.provide(vp_stage=0)
    assert str(raised.value) in said.message


def test_a_gpt_model_does_not_refuse_vpp():
    from mbridge_overlap.bridge import vpp_refused
    from megatron.bridge.models import GPTModelProvider

    assert vpp_refused.refused(GPTModelProvider) is None
    found = api.resolve({"model.virtual_pipeline_model_parallel_size": 5}, recipe="llama3_70b_pretrain_64gpu_h100_bf16_config")
    assert "VPP_REFUSED_BY_MODEL" not in {f.id for f in found.findings}


def test_a_hybrid_model_s_uneven_split_is_fixed_as_its_layer_allocation_takes_it():
    """recheck54 Y1: a hybrid model's layers are split by Megatron-Core's select_pipeline_segment, which ignores
    account_for_* (offered, and passing here, where Bridge failed): the first and last stages' counts are the fix, and
    every pipeline rank then gets its layers."""
    import torch
    from unittest import mock

    from megatron.core.models.hybrid import hybrid_layer_allocation as allocation

    from mbridge_overlap.bridge import adapter, recipes

    name, pp = "nemotronh_56b_pretrain_config", 4
    over = {"model.tensor_model_parallel_size": 2, "model.pipeline_model_parallel_size": pp}
    (f,) = [f for f in api.resolve(over, recipe=name, gpus=64).findings if f.id == "PIPELINE_LAYERS_UNEVEN"]
    assert set(f.fix_overrides) == {"model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage"}
    cfg = recipes.rebuild(catalog.lookup(name, _version()), Path(tempfile.mkdtemp()))
    for key, value in {**over, **f.fix_overrides}.items():
        setattr(cfg.model, key.partition(".")[2], value)
    error, _ = recipes.runtime(cfg, 64, "h100")
    assert error is None, error
    pattern = getattr(cfg.model, "hybrid_layer_pattern", None) or getattr(cfg.model, "hybrid_override_pattern", None)
    main = allocation.parse_hybrid_pattern(pattern).main_pattern
    counts = []
    adapter.quiet()
    with mock.patch.object(allocation, "log_on_each_pipeline_stage", lambda *a, **k: None), \
            mock.patch.object(allocation, "log_single_rank", lambda *a, **k: None):
        for rank in range(pp):
            with mock.patch.object(torch.distributed, "get_rank", lambda g=None, r=rank: r), \
                    mock.patch.object(torch.distributed, "get_world_size", lambda g=None: pp):
                counts.append(len(allocation.select_pipeline_segment(
                    main, object(), None, cfg.model.num_layers_in_first_pipeline_stage,
                    cfg.model.num_layers_in_last_pipeline_stage)[0]))
    assert sum(counts) == cfg.model.num_layers and min(counts) > 0
