"""The shipped recipe catalog is what real Bridge gives today: regenerate it and compare, byte for byte."""

import subprocess
import sys

import pytest
from conftest import ROOT


def test_regenerated_catalog_matches_the_shipped_one():
    proc = subprocess.run([sys.executable, "-W", "ignore", str(ROOT / "tools" / "gen_recipe_catalog.py"), "--check"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith("catalog matches")


def test_a_recipe_that_reads_its_checkpoint_s_experts_while_it_builds_decides_as_with_them():
    """evalH H3: Qwen3-30B-A3B's H100 recipe takes its model from AutoBridge and then picks the flex dispatcher only
    for a model with experts (apply_flex_dispatcher_backend: "Model config does not use MoE ... Skipping"); the offline
    stand-in had none then, and the catalog said alltoall where Bridge runs flex. With the stand-in's experts from the
    start the recipe decides as with the real config (128 experts, Qwen/Qwen3-30B-A3B's config.json), whatever the
    stand-in's count; without any it keeps alltoall."""
    import tempfile
    from pathlib import Path

    from megatron.bridge.recipes.qwen.h100.qwen3_moe import qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config as recipe

    from mbridge_overlap.bridge import recipes
    from mbridge_overlap.upstream import catalog

    scratch = Path(tempfile.mkdtemp())
    dispatcher = {n: recipes._build(recipe, "h100", [(recipes.STANDIN_EXPERTS, n)] if n else [], scratch)
                  .model.moe_token_dispatcher_type for n in (None, 128, 1024)}
    assert dispatcher == {None: "alltoall", 128: "flex", 1024: "flex"}
    entry = catalog.lookup("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config", "0.6.2")
    assert entry["request"]["model"]["moe_token_dispatcher_type"] == "flex"


@pytest.mark.parametrize("overrides", [
    # (in-batch packing on this recipe's GPTSFTDatasetConfig, which lacks the field, is refused before the resolver as
    # Bridge's overrides refuse it: tests/bridge/test_finetuning_packing.py, fuzzW W2-7)
    {"dataset.enable_offline_packing": False},
])
def test_packing_flags_bridge_refuses_are_refused_with_its_message_and_the_fix_resolves(tmp_path, overrides):
    """evalI D2: the SFT recipe packs offline with its specs; in-batch packing on top of it, or offline packing off
    under its specs, makes validate() raise first. The resolver says so with Bridge's own message, and its fix runs."""
    from mbridge_overlap import api
    from mbridge_overlap.bridge import adapter, recipes
    from mbridge_overlap.upstream import catalog

    name = "perf_recipes.llama3_70b_sft_32gpu_h100_bf16_config"
    entry = catalog.lookup(name, adapter.bridge_version())

    def real(over: dict) -> str | None:
        cfg = recipes.rebuild(entry, tmp_path)
        adapter.apply_overrides(cfg, over)
        return recipes.runtime(cfg, entry["gpus"], entry.get("gpu"))[0]

    mine = api.resolve(overrides, recipe=name)
    (rejection,) = [r for r in mine.state.rejections if r.id == "DATASET_PACKING_REJECTED"]
    error = real(overrides)
    assert error and rejection.message in error, (rejection.message, error)
    (f,) = [f for f in mine.findings if f.id == "DATASET_PACKING_REJECTED"]
    assert f.fix_overrides and real({**overrides, **f.fix_overrides}) is None
    assert not api.resolve({**overrides, **f.fix_overrides}, recipe=name).state.rejections
