"""Hostile input, round seven: the fields the layer-split, CP and sequence-length checks read (each case failed before
its fix): a superscript or 4,300-digit count raised a traceback, odd truthy text flipped a verdict, a bad value was
dropped without a word, and a saved run config's own layer fields were never read."""

from __future__ import annotations

import json
import sys

import pytest

from hostile_kit import ROOT, assert_one_line, run_cli

sys.path.insert(0, str(ROOT))

from mbridge_overlap import api  # noqa: E402

RECIPE = "llama3_70b_pretrain_64gpu_h100_bf16_config"


@pytest.mark.parametrize("override", [
    "model.num_layers=\u00b2", "model.num_layers=" + "9" * 4400, "model.num_layers=-4",
    "model.hierarchical_context_parallel_sizes=[\u00b2,2]", "model.hierarchical_context_parallel_sizes=[" + "9" * 4000 + ",2]",
    "model.hierarchical_context_parallel_sizes=[[1,2]]", "model.account_for_loss_in_pipeline_split=yes",
    "model.account_for_embedding_in_pipeline_split=1.0", "model.num_layers_in_first_pipeline_stage=1.5",
    "model.num_layers_in_last_pipeline_stage=abc", "dataset.seq_length=abc", "dataset.seq_length=" + "9" * 20,
])
def test_a_value_no_field_takes_is_one_line(override):
    proc = run_cli("resolve", "--recipe", RECIPE, override)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc)


def test_a_stage_of_no_layers_is_megatron_core_s_refusal_not_dropped():
    ids = {f.id for f in api.resolve(recipe=RECIPE, overrides={"model.num_layers_in_first_pipeline_stage": -1}).findings}
    assert "PIPELINE_LAYOUT_REJECTED" in ids


def test_a_saved_run_config_s_own_layer_fields_are_read():
    config = str(ROOT / "tests" / "data" / "run_configs" / "baseline.yaml")  # 96 layers, PP 4, VPP 2
    ids = {f.id for f in api.resolve(config=config, overrides={"model.num_layers_in_first_pipeline_stage": 7}).findings}
    assert "PIPELINE_LAYOUT_REJECTED" in ids
    ids = {f.id for f in api.resolve(config=config, overrides={"model.virtual_pipeline_model_parallel_size": 5}).findings}
    assert "PIPELINE_LAYERS_UNEVEN" in ids
    plain = api.resolve(config=config).findings
    assert not {"PIPELINE_LAYERS_UNEVEN", "PIPELINE_LAYOUT_REJECTED", "UNMODELED_KEY"} & {f.id for f in plain}


def test_a_negative_hierarchical_size_is_a_product_that_does_not_hold():
    over = {"model.context_parallel_size": 2, "model.seq_length": 8, "dataset.seq_length": 8,
            "model.hierarchical_context_parallel_sizes": "[-1, 2]"}
    assert "CP_HIERARCHICAL_SIZES_INVALID" in {f.id for f in api.resolve(overrides=over, gpus=8).findings}


def test_restore_all_brings_only_what_neither_side_has(tmp_path):
    d = api.diff(recipe=RECIPE, overrides={"model.virtual_pipeline_model_parallel_size": None,
                                           "ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False}).to_dict()
    after = {f["id"] for f in api.resolve(recipe=RECIPE, overrides={"model.virtual_pipeline_model_parallel_size": None,
                                                                    "ddp.use_distributed_optimizer": False,
                                                                    "optimizer.use_distributed_optimizer": False}).to_dict()["findings"]}
    assert not set(d["restore_all"]["brings"]) & after
    json.dumps(d)
