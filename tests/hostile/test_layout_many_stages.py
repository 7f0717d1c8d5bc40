"""Hostile input (fuzzX X2-2): a pipeline layout of many empty stages. Megatron-Core takes them
(PipelineParallelLayerLayout('(|)*999000Et*8|t*8|t*8|t*8L', 4) builds VPP 249,751 in about 4 s); the skill read the
layout some thirty times a request (resolve: 129 s) and numbered a budget's layers by quadratic prefix sums (budget of
16,380 stages: 82 s; 32,760 at PP 8: past 300 s). Each case failed before its fix."""

from __future__ import annotations

import json
import time

from hostile_kit import run_cli

from mbridge_overlap import api
from mbridge_overlap.run import layers

RECIPE = ("--recipe", "llama3_8b_pretrain_config", "--gpus", "16")


def test_a_layout_of_a_million_empty_stages_is_resolved_within_seconds():
    word = "model.pipeline_model_parallel_layout='(|)*999000Et*8|t*8|t*8|t*8L'"
    start = time.monotonic()
    proc = run_cli("resolve", *RECIPE, "model.pipeline_model_parallel_size=4", word, "--format", "json", timeout=60)
    assert time.monotonic() - start < 40
    assert proc.returncode in (0, 1), proc.stderr[-400:]
    assert json.loads(proc.stdout)["effective"]["model"]["virtual_pipeline_model_parallel_size"] == 249751


def test_a_budget_of_thousands_of_virtual_stages_is_answered_within_seconds():
    for pp, count, tail in ((4, 16380, "Et*8|t*8|t*8|t*8L"), (8, 32760, "Et*4|" + "t*4|" * 6 + "t*4L")):
        start = time.monotonic()
        proc = run_cli("budget", *RECIPE, f"model.pipeline_model_parallel_size={pp}",
                       f"model.pipeline_model_parallel_layout='(|)*{count}{tail}'", timeout=60)
        assert time.monotonic() - start < 30, pp
        assert proc.returncode in (0, 1) and b"iteration  about" in proc.stdout, proc.stderr[-400:]


def test_a_list_layout_of_a_million_stages_through_the_api_is_resolved_within_seconds():
    layout = [[] for _ in range(10 ** 6)] + [["embedding"] + ["decoder"] * 8, ["decoder"] * 8, ["decoder"] * 8,
                                             ["decoder"] * 8 + ["loss"]]
    start = time.monotonic()
    d = api.resolve({"model.pipeline_model_parallel_size": 4, "model.pipeline_model_parallel_layout": layout},
                    recipe="llama3_8b_pretrain_config", gpus=16).to_dict()
    assert time.monotonic() - start < 40
    assert d["effective"]["model"]["virtual_pipeline_model_parallel_size"] == 250001


def test_a_layout_read_once_still_answers_each_pp_and_each_value():
    """The reading kept per layout value: a name Megatron-Core refuses is found pipeline rank by rank at each PP (stage
    k on rank k mod PP), and a list changed in place is read again."""
    layout = [["embedding"], ["bad1"], ["bad2"], ["decoder", "loss"]]
    assert layers.parsed(layout, 1) == (None, "bad1 is not a valid LayerType")
    assert layers.parsed(layout, 2) == (None, "bad2 is not a valid LayerType")  # rank 0's stages 0, 2 first
    assert layers.parsed(layout, 3)[1].startswith("pipeline_model_parallel_layout must be divisible")
    layout[1][0] = layout[2][0] = "decoder"
    assert layers.parsed(layout, 2) == ([["embedding"], ["decoder"], ["decoder"], ["decoder", "loss"]], None)
    assert layers.parsed([[1]], 1) == (None, "elements in pipeline_model_parallel_layout must be LayerType or str, but got int")
    assert layers.parsed([[True]], 1) == (None, "elements in pipeline_model_parallel_layout must be LayerType or str, but got bool")
    assert layers.parsed("Et|tX|L", 1) == (None, "Invalid layer character: X, known layer characters: ['E', 'L', 't', 'm']")
    assert layers.parsed("Et|tt|L", 2)[1].startswith("pipeline_model_parallel_layout must be divisible")
