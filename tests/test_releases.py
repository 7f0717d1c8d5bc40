"""Release handling: per-release field names, Megatron-Core checks by the paired version, newer releases answered
with the newest verified rules and marked, yanked releases named."""

import json

import pytest

from conftest import cli_json, run_cli
from mbridge_overlap.upstream import releases
from mbridge_overlap.run import schema
from mbridge_overlap.errors import UsageError

LAYOUT = ["--gpus", "16", "model.tensor_model_parallel_size=4", "model.sequence_parallel=true", "comm_overlap.tp_comm_overlap=true"]


def resolve(*args):
    proc = run_cli("resolve", *args, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def finding_ids(d):
    return [f["id"] for f in d["findings"]]


def test_a_newer_release_gets_the_newest_rules_marked_unverified():
    newest = max(releases.versions(), key=releases.version_key)
    base = resolve(*LAYOUT, "--bridge-version", newest)
    newer = resolve(*LAYOUT, "--bridge-version", "0.7.0")
    assert newer["bridge_version"] == "0.7.0" and newer["verified"] is False and base["verified"] is True
    assert newer["effective"] == base["effective"]
    warning = next(f for f in newer["findings"] if f["id"] == "RELEASE_NOT_VERIFIED")
    assert warning["severity"] == "warning" and f"{newest}'s rules" in warning["message"]
    assert "runtime_config_update_order" in warning["message"] and "_disable_native_energon_packing_moe_overlap" in warning["message"]
    unseen = resolve(*LAYOUT, "--bridge-version", "0.9.3")
    assert "Nobody has compared" in next(f["message"] for f in unseen["findings"] if f["id"] == "RELEASE_NOT_VERIFIED")
    assert "RELEASE_NOT_VERIFIED" not in finding_ids(base)


@pytest.mark.parametrize("version", ["0.4.9", "0.6", "v0.7.0", "0.7.0\n", "99999.0.0"])
def test_older_or_malformed_versions_are_refused(version):
    proc = run_cli("resolve", *LAYOUT, "--bridge-version", version)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown Megatron-Bridge release" in proc.stderr


def test_releases_read_from_source_say_so_and_yanked_is_named():
    d = resolve(*LAYOUT, "--bridge-version", "0.6.1")
    assert d["verified"] is False and "RELEASE_READ_FROM_SOURCE" in finding_ids(d)
    table = cli_json("releases")["releases"]
    assert table["0.6.1"]["yanked"] and table["0.6.1"]["same_as"] == "0.6.0"
    assert table["0.5.1"]["verified"] and table["0.5.1"]["megatron_core"] == "0.18.2"
    assert not any(f.startswith("RELEASE_") for f in finding_ids(resolve(*LAYOUT, "--bridge-version", "0.5.1")))


def test_field_names_are_the_releases_own():
    """ddp.megatron_fsdp_max_pool_double_buffer came with 0.6: Bridge 0.5.1's DistributedDataParallelConfig has no such field."""
    key = "ddp.megatron_fsdp_max_pool_double_buffer=true"
    assert "megatron_fsdp_max_pool_double_buffer" in releases.bridge_fields("0.6.2")["ddp"]
    assert "megatron_fsdp_max_pool_double_buffer" not in releases.bridge_fields("0.5.1")["ddp"]
    refused = run_cli("resolve", "--gpus", "8", "--bridge-version", "0.5.1", key)
    assert refused.returncode == 2 and "not a field of ddp in Megatron-Bridge 0.5.1" in refused.stderr
    assert run_cli("resolve", "--gpus", "8", "--bridge-version", "0.6.2", key).returncode == 0


@pytest.mark.parametrize("version", releases.versions())
def test_every_modelled_field_exists_in_every_release(version):
    fields = releases.bridge_fields(version)
    for section, modelled in {**schema.SECTIONS, "comm_overlap": schema.COMM_OVERLAP}.items():
        present = {n for n, f in modelled.items() if not f.since or releases.version_key(version) >= releases.version_key(f.since)}
        assert present <= fields[section], (version, section, present - fields[section])
        later = set(modelled) - present
        assert not later & fields[section], (version, section, "a field says since a later release, but this one has it")


def test_megatron_core_checks_follow_the_paired_version():
    """OptimizerConfig refuses MXFP8 grad-buffer reuse with the param gather in the optimizer step from Megatron-Core
    0.19 on; Bridge 0.5.x ran with 0.18 (tier 3 proves both sides against the installed packages)."""
    pair = ["--gpus", "16", "mixed_precision=bf16_with_mxfp8_mixed", "model.pipeline_model_parallel_size=2",
            "model.virtual_pipeline_model_parallel_size=2", "comm_overlap.tp_comm_overlap=false",
            "comm_overlap.overlap_param_gather_with_optimizer_step=true"]
    assert "MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP" in finding_ids(resolve(*pair, "--bridge-version", "0.6.2"))
    assert "MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP" not in finding_ids(resolve(*pair, "--bridge-version", "0.5.1"))


def test_api_refuses_a_non_string_version():
    with pytest.raises(UsageError, match="expected a version"):
        releases.get(["0.6.2"])


def test_a_release_without_a_catalog_takes_its_recipes_from_the_release_it_is_answered_with():
    """0.6.1 is 0.6.0's code (same_as): its recipes are 0.6.0's; a newer release is answered with 0.6.2's rules,
    unverified, and its recipes are 0.6.2's. Each says so; a release with a catalog of its own says nothing."""
    from mbridge_overlap import api

    def notes(version):
        return api.resolve(recipe="perf_recipes.llama3_70b_sft_32gpu_h100_bf16_config", bridge_version=version).to_dict()["notes"]

    for version, stands_in in (("0.6.1", "0.6.0"), ("9.9.9", "0.6.2")):
        assert any(f"as Megatron-Bridge {stands_in} ships it" in n for n in notes(version)), notes(version)
    assert not any("ships it" in n for n in notes("0.6.0"))


def test_evali_d7_a_recipe_of_0_6_0_is_the_one_0_6_0_ships():
    """evalI D7: 0.6.0's perf recipes call _enable_overlap_param_gather_with_optimizer_step (perf_recipes/_common.py
    at tag v0.6.0), which 0.6.2 no longer has: resolve --bridge-version 0.6.0 answered with 0.6.2's recipe. The
    recipe's request now comes from 0.6.0's own catalog, and 0.6.1 (0.6.0's code) gets the same."""
    from mbridge_overlap import api

    def asked(version):
        r = api.resolve(recipe="perf_recipes.llama3_70b_sft_32gpu_h100_bf16_config", bridge_version=version).to_dict()
        return r["requested"]["comm_overlap"].get("overlap_param_gather_with_optimizer_step"), r["verified"]

    assert asked("0.6.0") == (True, True)
    assert asked("0.6.1") == (True, False)
    assert asked("0.6.2")[0] is not True
