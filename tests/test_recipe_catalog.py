"""The recipe catalog against the resolver: every shipped recipe that real Bridge resolved (recorded by
tools/gen_recipe_catalog.py; the Bridge tier regenerates it and compares) must come out the same from the resolver,
field by field, and every rejection on the overlap path must be predicted."""

import json
import re

import pytest

import mbridge_overlap
from conftest import run_cli
from mbridge_overlap import UsageError
from mbridge_overlap.run import flex
from mbridge_overlap.upstream import catalog, releases

VERSION = "0.6.2"
ENTRIES = catalog.entries(VERSION)
BUILT = [e for e in ENTRIES if e["builds"]]
# What real Bridge rejected in a shipped recipe for a reason off the overlap path (the resolver does not model these):
# a recompute module Megatron-Core 0.19 does not know, in-batch packing with micro batch 1, dataset paths the offline
# build has no data for, deprecated SM-count knobs, and vanilla_gpt's divide by zero; in 0.5.x also its in-batch
# packing message and the deterministic recipes' NCCL_ALGO check of the process environment.
OUTSIDE_OVERLAP = re.compile(
    r"Invalid choices for recompute_modules|enable_in_batch_packing|EnergonDatasetConfig.path|data_files must contain|"
    r"Conflicting deprecated SM-count knobs|ZeroDivisionError|when using pack_sequences_in_batch|NCCL_ALGO must be one of"
)
VERSIONS = catalog.versions()


def resolve(entry, version=VERSION):
    return mbridge_overlap.resolve(recipe=f"{entry['package']}.{entry['name']}", gpus=entry["bridge"]["gpus"], gpu=entry.get("gpu"),
                                   bridge_version=version)


def built(version):
    return [e for e in catalog.entries(version) if e["builds"]]


def differences(mine, bridge: dict) -> list:
    out = []
    for section, values in mine.effective.items():
        for name, value in values.items():
            theirs = bridge["effective"][section][name]
            if not (isinstance(theirs, list) and value in theirs) and theirs != value:  # identical presets: a list
                out.append((f"{section}.{name}", value, theirs))
    if mine.data_parallel_size != bridge["data_parallel_size"]:
        out.append(("data_parallel_size", mine.data_parallel_size, bridge["data_parallel_size"]))
    if mine.state.environ != bridge["env"]:
        out.append(("environment", mine.state.environ, bridge["env"]))
    return out


def test_the_catalog_covers_both_packages():
    assert len(ENTRIES) > 700 and len(BUILT) > 700
    assert {e["package"] for e in BUILT} == {"recipes", "perf_recipes"}
    assert sum(1 for e in BUILT if e["bridge"]["error"] is None) > 650


def test_every_release_with_a_catalog_is_listed():
    assert set(VERSIONS) >= {"0.5.0", "0.5.1", "0.6.2"} and set(VERSIONS) <= set(mbridge_overlap.upstream.releases.versions())


@pytest.mark.parametrize("version", VERSIONS)
def test_every_recipe_real_bridge_resolved_agrees_on_every_field(version):
    done = [e for e in built(version) if e["bridge"]["error"] is None]
    assert len(done) > 190
    failures = [(e["name"], d) for e in done if (d := differences(resolve(e, version), flex.on_a_gpu_node(e, version)))]
    assert failures == [], failures[:3]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rejection_is_predicted_or_off_the_overlap_path(version):
    rejected = [e for e in built(version) if e["bridge"]["error"] is not None]
    predicted, outside = [], []
    for e in rejected:
        first = resolve(e, version).state.rejections[:1]
        if first and " ".join(first[0].message.split()) in e["bridge"]["error"]:  # the catalog's text is one line
            predicted.append(e["name"])
        else:
            assert OUTSIDE_OVERLAP.search(e["bridge"]["error"]), (e["name"], e["bridge"]["error"], first)
            outside.append(e["name"])
    assert predicted
    if version == VERSION:
        assert len(predicted) >= 9  # FSDP checkpoint format, MoE shared-expert overlap, eval batch divisibility, ...
        assert "qwen35_vl_35b_a3b_sft_2gpu_h100_bf16_fsdp_config" in predicted


def test_a_recipe_rejected_off_the_overlap_path_is_said_so():
    e = next(e for e in BUILT if e["bridge"]["error"] and "SM-count knobs" in e["bridge"]["error"])
    f = next(f for f in resolve(e).findings if f.id == "RECIPE_REJECTED_OUTSIDE_OVERLAP")
    assert f.severity == "warning" and "SM-count knobs" in f.message


def test_a_recipe_with_a_recompute_module_megatron_core_does_not_know_is_that_error():
    """deepseek_v4 recipes name 'mhc', which Megatron-Core 0.19.2 refuses: once a warning off the overlap path, now
    RECOMPUTE_MODULES_REJECTED with real Bridge's own message."""
    e = next(e for e in BUILT if e["bridge"]["error"] and "recompute_modules" in e["bridge"]["error"])
    f = next(f for f in resolve(e).findings if f.id == "RECOMPUTE_MODULES_REJECTED")
    assert f.severity == "error" and e["bridge"]["error"].split(": ", 1)[1] in f.message
    assert "RECIPE_REJECTED_OUTSIDE_OVERLAP" not in {x.id for x in resolve(e).findings}


def test_overrides_apply_on_top_of_the_recipe_and_gpus_default_to_the_name():
    name = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    base = mbridge_overlap.resolve(recipe=name)
    assert base.gpus == 64 and base.gpu == "h100" and base.recipe == name
    moved = mbridge_overlap.resolve({"model.virtual_pipeline_model_parallel_size": None}, recipe=name)
    assert moved.effective["model"]["overlap_p2p_comm"] is False and base.effective["model"]["overlap_p2p_comm"] is True
    assert "PP_OVERLAP_NOT_SELECTED" in {f.id for f in moved.findings}


def test_names_are_looked_up_with_help():
    with pytest.raises(UsageError, match="closest: llama3_70b_pretrain_64gpu_h100_bf16_config"):
        catalog.lookup("llama3_70b_pretrain_64gpu_h100_bf61_config", VERSION)
    both = next(e["name"] for e in BUILT if sum(1 for o in ENTRIES if o["name"] == e["name"]) == 2)
    with pytest.raises(UsageError, match="defined in both recipe packages"):
        catalog.lookup(both, VERSION)
    assert catalog.lookup(f"perf_recipes.{both}", VERSION)["package"] == "perf_recipes"
    assert catalog.lookup(f"megatron.bridge.recipes.{both}", VERSION)["package"] == "recipes"
    smallest = mbridge_overlap.resolve(recipe="nemotron_3_super_pretrain_config")  # no count in the name: its smallest layout
    assert smallest.gpus == catalog.smallest_world(catalog.lookup("nemotron_3_super_pretrain_config", VERSION)["request"]["model"])
    assert "smallest layout" in smallest.to_dict()["inputs"]["assumed"]["gpus"]


@pytest.mark.parametrize("name, parsed", [
    ("llama3_70b_pretrain_64gpu_gb200_nvfp4_config",
     dict(model="llama3_70b", task="pretrain", gpus=64, gpu="gb200", precision="nvfp4", variant=None)),
    ("qwen3_vl_30b_a3b_pretrain_8gpu_h100_bf16_mock_config", dict(model="qwen3_vl_30b_a3b", gpus=8, precision="bf16", variant="mock")),
    ("llama3_8b_sft_openmathinstruct2_packed_8gpu_h100_bf16_config", dict(model="llama3_8b", task="sft", gpus=8, variant="openmathinstruct2_packed")),
    ("deepseek_v3_pretrain_256gpu_gb300_fp8mx_large_scale_config", dict(gpu="gb300", precision="fp8_mx", variant="large_scale")),
    ("nemotron_3_5_lightning_pretrain_8k_fsdp_config", dict(model="nemotron_3_5_lightning", gpus=None, variant="8k_fsdp")),
])
def test_recipe_names_are_parsed(name, parsed):
    got = catalog.parse_name(name)
    assert {k: got[k] for k in parsed} == parsed


def test_recipes_command_filters_and_reports_real_bridges_state():
    proc = run_cli("recipes", "--model", "llama3_70b", "--gpu", "gb200", "--precision", "nvfp4", "--format", "json")
    d = json.loads(proc.stdout)
    assert proc.returncode == 0 and d["count"] >= 1
    row = next(r for r in d["recipes"] if r["name"] == "llama3_70b_pretrain_64gpu_gb200_nvfp4_config")
    assert row["status"] == "resolves" and row["modes"]["tp"]["enabled"] is False and row["modes"]["pp"]["enabled"] is True
    assert row["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    bad = run_cli("recipes", "--gpu", "a100")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1
    text = run_cli("recipes", "--name", "qwen35_vl_35b_a3b_sft_2gpu_h100_bf16_fsdp").stdout
    assert "REJECTED by Bridge: AssertionError: Megatron-FSDP requires the fsdp_dtensor checkpointing format!" in text


def test_recipes_says_its_env_vars_are_a_subset_and_what_the_fixups_are():
    d = mbridge_overlap.recipes().to_dict()
    entries = {(e["package"], e["name"]): e for e in catalog.entries(d["bridge_version"])}
    built = [r for r in d["recipes"] if r["status"] != "not_built"]
    assert len(built) == sum(1 for e in entries.values() if e["builds"])
    for r in built:
        sets = {k: str(v) for k, v in entries[(r["package"], r["name"])]["request"]["env_vars"].items()}
        assert r["env_vars"].items() <= sets.items() and r["env_vars_not_shown"] == len(sets) - len(r["env_vars"])
        assert r["fixups"] == entries[(r["package"], r["name"])]["fixups"]
    assert sum(r["env_vars_not_shown"] > 0 for r in built) > len(built) / 2  # a subset for most recipes, so it is said
    assert "subset" in d["about"]["env_vars"] and "resolve --recipe NAME" in d["about"]["env_vars"]
    assert "never part of an answer about the shipped recipe" in d["about"]["fixups"]
    # the text says it too: the count beside each row's variables, the stand-ins beside the row that needed them
    name = next(r["name"] for r in built if r["fixups"] and r["env_vars_not_shown"] and r["reference"] == r["name"])
    row = next(r for r in built if r["name"] == name)
    text = run_cli("recipes", "--name", name).stdout
    line = next(x for x in text.splitlines() if x.startswith(f"  {name} "))
    assert f"(+{row['env_vars_not_shown']} more env_vars)" in line and all(f in line for f in row["fixups"])
    assert "offline stand-ins" in line and "never part of an answer about the shipped recipe" in text and "subset" in text


def test_no_shipped_recipe_runs_tp_overlap_with_nvfp4_or_blockwise_fp8():
    """What TP_OVERLAP_UNSUPPORTED_PRECISION's explanation says of Bridge's own recipes (11 and 4 functions)."""
    from mbridge_overlap.findings import records as registry

    resolved = [e for e in catalog.entries("0.6.2") if e["builds"] and e["bridge"]["error"] is None and not e.get("alias_of")]
    model = [e["bridge"]["effective"]["model"] for e in resolved]
    fp4 = [m for m in model if m["fp4"] and m["tensor_model_parallel_size"] > 1]
    blockwise = [m for m in model if m["fp8"] and m["fp8_recipe"] == "blockwise" and m["tensor_model_parallel_size"] > 1]
    assert not any(m["tp_comm_overlap"] for m in fp4 + blockwise)
    text = " ".join(registry()["TP_OVERLAP_UNSUPPORTED_PRECISION"]["explain"].split())
    assert f"NVFP4 recipe function ({len(fp4)})" in text and f"blockwise-FP8 one ({len(blockwise)})" in text


GRID = ("EXPERT_GRID_NOT_DIVIDING_WORLD", "DISTOPT_INSTANCES_NOT_DIVIDING")


def test_setup_rules_agree_with_megatron_core_on_every_recipe():
    """The catalog ran Megatron-Core's own initialize_model_parallel for every recipe Bridge accepts, at the GPU count
    it was resolved at (on the CPU, one process, groups not created): the grid rules say the same, in its words."""
    checked = 0
    for e in BUILT:
        bridge = e["bridge"]
        if bridge["error"] is not None:
            continue
        found = [f for f in mbridge_overlap.resolve(recipe=f"{e['package']}.{e['name']}", gpus=bridge["gpus"], gpu=e["gpu"]).findings
                 if f.id in GRID]
        assert bool(found) == bool(bridge["setup_error"]), (e["name"], bridge["setup_error"], [f.message for f in found])
        if found:
            assert bridge["setup_error"].split(": ", 1)[1] in found[0].message
        checked += 1
    assert checked > 900


def test_a_release_without_its_own_catalog_lists_the_recipes_resolve_answers_it_with():
    """0.6.1 is 0.6.0's code (releases.yaml same_as) and a newer release is answered with the newest: the listing
    takes the catalog resolve --recipe takes for it, and says whose it is (recheck45 N5: it refused 0.6.1)."""
    for version in ("0.6.1", "9.0.0"):
        stands_for = catalog.release_of(releases.get(version))
        assert stands_for != version and stands_for in VERSIONS
        d = json.loads(run_cli("recipes", "--bridge-version", version, "--model", "llama3_70b", "--format", "json").stdout)
        own = json.loads(run_cli("recipes", "--bridge-version", stands_for, "--model", "llama3_70b", "--format", "json").stdout)
        assert d["bridge_version"] == version and d["catalog_version"] == stands_for
        assert d["recipes"] == own["recipes"] and own["catalog_version"] == stands_for
        row = d["recipes"][0]
        answered = json.loads(run_cli("resolve", "--bridge-version", version, "--recipe", row["reference"], "--format", "json").stdout)
        assert any(f"as Megatron-Bridge {stands_for} ships it" in n for n in answered["notes"])
        text = run_cli("recipes", "--bridge-version", version, "--model", "llama3_70b").stdout
        assert f"as Megatron-Bridge {stands_for} ships them" in text.splitlines()[1]
    assert json.loads(run_cli("recipes", "--model", "llama3_70b", "--format", "json").stdout)["catalog_version"] == VERSION
