"""A recipe whose build chooses its token dispatcher by the GPU (apply_flex_dispatcher_backend), asked for on another
GPU type than the catalog built it for, resolves with the dispatcher its build gives there (evalS V1: Qwen3-30B-A3B's
library recipes on GB200 were said to fail at validate_flex_dispatcher_backend; real Bridge 0.6.2 falls back to
alltoall while it builds, 0.5.1 keeps the recipe's alltoall; the shipped record is held to the installed Bridge in
tier 2 and tier 3)."""

from __future__ import annotations

import pytest

from mbridge_overlap import api


@pytest.mark.parametrize("release, backend", [("0.6.2", None), ("0.5.1", "deepep")])
def test_a_deepep_recipe_on_gb200_builds_with_alltoall(release, backend):
    recipe = "qwen3_30b_a3b_peft_config" if release == "0.6.2" else "qwen3_30b_a3b_pretrain_config"
    r = api.resolve(recipe=recipe, gpu="gb200", gpus=8, bridge_version=release)
    assert "FLEX_DISPATCHER_NOT_ON_THIS_GPU" not in {f.id for f in r.findings}
    assert (r.state.model["moe_token_dispatcher_type"], r.state.model["moe_flex_dispatcher_backend"]) == ("alltoall", backend)
    assert any("apply_flex_dispatcher_backend" in n for n in r.scenario.notes)


def test_on_the_gpu_it_was_built_for_the_recipe_is_as_the_catalog_has_it():
    r = api.resolve(recipe="qwen3_30b_a3b_peft_config", gpu="h100", gpus=8)
    assert r.state.model["moe_token_dispatcher_type"] == "flex"
    assert not any("apply_flex_dispatcher_backend" in n for n in r.scenario.notes)


def test_a_dispatcher_the_user_sets_still_meets_bridge_s_check():
    over = {"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "deepep"}
    r = api.resolve(recipe="qwen3_30b_a3b_peft_config", gpu="gb200", gpus=8, overrides=over)
    assert "FLEX_DISPATCHER_NOT_ON_THIS_GPU" in {f.id for f in r.findings}


def test_a_deepep_override_on_a_hybridep_recipe_is_fixed_with_the_recipe_s_backend():
    """evalS V7: the only fix was alltoall, which gives up the recipe's HybridEP (real Bridge accepts it on GB200)."""
    r = api.resolve(recipe="qwen3_30b_a3b_pretrain_32gpu_gb200_bf16_config",
                    overrides={"model.moe_flex_dispatcher_backend": "deepep"})
    f = next(f for f in r.findings if f.id == "FLEX_DISPATCHER_NOT_ON_THIS_GPU")
    assert f.fix_overrides == {"model.moe_flex_dispatcher_backend": "hybridep"}


def test_every_release_with_a_catalog_has_its_record():
    """recheck52 W2: 0.5.0 had a catalog and no record, and its Qwen3 MoE recipes kept the false error on GB200."""
    from mbridge_overlap.run import flex
    from mbridge_overlap.upstream import catalog

    for version in catalog.versions():
        assert flex.data_path(version).is_file(), version
        assert flex._builders(version), version


def test_every_verb_says_the_dispatcher_a_gpu_node_builds():
    """recheck53 X5: `recipes` listed the catalog's build without CUDA (flex/hybridep for Qwen3-Next's GB300 perf
    recipes, which build with alltoall on a GB300 node, as resolve says); plan's text and diagnose left out the note."""
    import subprocess
    import sys

    from conftest import ROOT

    from mbridge_overlap import api

    name = "qwen3_next_80b_a3b_pretrain_64gpu_gb300_bf16_config"
    (row,) = [r for r in api.recipes(name=name).to_dict()["recipes"] if r["name"] == name]
    resolved = api.resolve(recipe=name).effective["model"]
    assert row["moe_dispatcher"]["token_dispatcher_type"] == resolved["moe_token_dispatcher_type"] == "alltoall"
    assert "chooses its token dispatcher by the GPU" in row["note"]
    cli = [sys.executable, str(ROOT / "scripts" / "mbridge-overlap")]
    text = subprocess.run(cli + ["plan", "--recipe", "qwen3_30b_a3b_peft_config", "--gpu", "gb200", "--gpus", "8"],
                          capture_output=True, text=True).stdout
    assert "note: recipe qwen3_30b_a3b_peft_config chooses its token dispatcher" in text
