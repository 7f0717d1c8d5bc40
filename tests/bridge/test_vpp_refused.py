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
