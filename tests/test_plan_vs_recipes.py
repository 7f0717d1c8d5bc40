"""plan never contradicts a shipped Bridge recipe silently: for the layout, GPU and precision of every perf recipe
real Bridge resolves, plan's settings agree with the recipe's, or plan names the difference (SHIPPED_RECIPES_DIFFER).
TP overlap and CUDA_DEVICE_MAX_CONNECTIONS follow rules the recipes all obey; a difference there must be named too."""

import pytest

import mbridge_overlap
from mbridge_overlap.upstream import catalog

COMPARED = ("model.tp_comm_overlap", "model.overlap_p2p_comm", "ddp.overlap_grad_reduce", "ddp.overlap_param_gather")
PERF = [e for e in catalog.entries("0.6.2") if e["package"] == "perf_recipes" and e["builds"] and not e.get("alias_of")
        and e["bridge"]["error"] is None and not e["bridge"]["setup_error"] and e["gpus"]]  # the ones that run as shipped


def plan_for(entry):
    m = entry["request"]["model"]
    fsdp = bool(entry["request"]["ddp"]["use_megatron_fsdp"] or entry["request"]["dist"]["use_megatron_fsdp"])
    return mbridge_overlap.plan(
        tp=m["tensor_model_parallel_size"], pp=m["pipeline_model_parallel_size"], vpp=m["virtual_pipeline_model_parallel_size"],
        cp=m["context_parallel_size"], gpus=entry["gpus"], gpu=entry["gpu"], precision=entry["precision"],
        moe=m["expert_model_parallel_size"] > 1, megatron_fsdp=fsdp,
    ).to_dict()


def test_there_are_perf_recipes_to_compare():
    assert len(PERF) > 300


@pytest.mark.parametrize("entry", PERF, ids=[e["name"] for e in PERF])
def test_plan_agrees_with_the_recipe_or_says_where_it_differs(entry):
    d = plan_for(entry)
    assert not [f for f in d["findings"] if f["severity"] == "error"], "plan recommends a config that fails"
    named = " ".join(f["message"] for f in d["plan_notes"] if f["id"] == "SHIPPED_RECIPES_DIFFER")
    theirs = entry["bridge"]["effective"]
    for key in COMPARED:
        section, _, name = key.partition(".")
        value = theirs[section][name]
        if d["effective"][section][name] != value:
            assert f"{key}={value}" in named, f"{key}: plan {d['effective'][section][name]}, recipe {value}, not named"
    cdmc = entry["bridge"]["env"].get("CUDA_DEVICE_MAX_CONNECTIONS")
    if cdmc is not None and cdmc != d["launch_env"]["CUDA_DEVICE_MAX_CONNECTIONS"]["value"]:
        assert f"CUDA_DEVICE_MAX_CONNECTIONS={cdmc}" in named
