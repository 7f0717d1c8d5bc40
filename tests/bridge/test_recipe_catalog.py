"""The shipped recipe catalog is what real Bridge gives today: regenerate it and compare, byte for byte."""

import subprocess
import sys

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
