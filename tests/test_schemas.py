"""Every command's JSON against its JSON Schema in references/schemas (draft 2020-12), over several argument sets
each: errors, recipes, saved run configs, releases, real and synthetic traces. The schemas close every fixed record
(additionalProperties / unevaluatedProperties false), so a renamed or missing key fails here.

Payloads that do not carry schema_version yet (PENDING) are validated against their schema without that one
requirement, and a strict xfail per payload checks the full schema: adding schema_version flips it to a failure
that asks for the marker to go."""

from __future__ import annotations

import copy
import re
import json
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from mbridge_overlap.contract import SCHEMA_VERSION
from mbridge_overlap import cli, findings
from test_anchors import CONFIG, make_checkout
from trace_fixtures import TraceBuilder, overlap_case, real_traces

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "references" / "schemas"
RUN_CONFIGS = ROOT / "tests" / "data" / "run_configs"
PENDING: dict = {}  # payloads without schema_version yet: none


@lru_cache(maxsize=None)
def documents() -> dict:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(SCHEMAS.glob("*.schema.json"))}


@lru_cache(maxsize=None)
def registry() -> Registry:
    return Registry().with_resources([(name, Resource.from_contents(doc)) for name, doc in documents().items()])


def validator(name: str, schema: dict | None = None) -> Draft202012Validator:
    return Draft202012Validator(schema if schema is not None else documents()[name], registry=registry())


def errors(name: str, payload, schema: dict | None = None) -> list[str]:
    found = validator(name, schema).iter_errors(payload)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}" for e in found]


def run(capsys, *argv, exit=0):
    """The command in this process, as the command line runs it; exit None: 0 or 1 (1: error findings)."""
    code = cli.main([str(a) for a in argv] + ["--format", "json"])
    out, err = capsys.readouterr()
    assert code in ((0, 1) if exit is None else (exit,)), f"{argv}: exit {code}: {err}"
    return json.loads(out)


def check(schema: str, payload) -> None:
    """Validate; a PENDING payload without the schema_version requirement (or, for presets, item by item)."""
    name = f"{schema}.schema.json"
    if schema in PENDING:
        relaxed = copy.deepcopy(documents()[name])
        relaxed["required"] = [k for k in relaxed["required"] if k != "schema_version"]
        problems = errors(name, payload, relaxed)
    else:
        problems = errors(name, payload)
    assert problems == [], problems[:5]


def test_every_schema_is_valid_draft_2020_12_and_indexed():
    readme = (SCHEMAS / "README.md").read_text(encoding="utf-8")
    for name, doc in documents().items():
        Draft202012Validator.check_schema(doc)
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema" and doc["$id"] == name
        assert f"]({name})" in readme, f"{name} is not in references/schemas/README.md"


def test_every_command_has_a_schema():
    assert {c for c in cli.VERBS if f"{c}.schema.json" not in documents()} == set()


# ------------------------------------------------------------------------------------------------ resolve
RESOLVE = {
    "baseline": (["--gpus", 8], 0),
    "tp4_sp_pp4_vpp2": (["--gpus", 64, "model.tensor_model_parallel_size=4", "model.sequence_parallel=true",
                         "model.pipeline_model_parallel_size=4", "model.virtual_pipeline_model_parallel_size=2",
                         "comm_overlap.tp_comm_overlap=true"], 0),
    "fsdp_one_connection": (["--gpus", 8, "ddp.use_megatron_fsdp=true", "checkpoint.ckpt_format=fsdp_dtensor",
                             "++env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1"], 1),
    "vpp_without_pp": (["--gpus", 8, "model.virtual_pipeline_model_parallel_size=2"], 1),
    "gpus_not_divisible": (["--gpus", 8, "model.tensor_model_parallel_size=3"], 1),
    "launch_env_as_field": (["--gpus", 8, "comm_overlap.cuda_device_max_connections=1"], 1),
    "no_te": (["--gpus", 8, "--no-te", "model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
               "comm_overlap.tp_comm_overlap=true"], 0),
    "nvfp4_tp_overlap": (["--gpus", 8, "--gpu", "gb200", "model.tensor_model_parallel_size=2",
                          "model.sequence_parallel=true", "mixed_precision=bf16_with_nvfp4_mixed",
                          "comm_overlap.tp_comm_overlap=true"], 1),
    "recipe": (["--recipe", "llama3_70b_pretrain_64gpu_gb200_nvfp4_config"], 0),
    "recipe_bridge_rejected": (["--recipe", "qwen35_vl_35b_a3b_sft_2gpu_h100_bf16_fsdp_config"], 1),
    "recipe_with_overrides": (["--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config",
                               "model.virtual_pipeline_model_parallel_size=null"], 0),
    "saved_run_config": (["--config", RUN_CONFIGS / "baseline.yaml", "--gpus", 64], 0),
    "release_0_5_1": (["--gpus", 8, "--bridge-version", "0.5.1"], 0),
}


@pytest.mark.parametrize("case", RESOLVE)
def test_resolve(capsys, case):
    argv, code = RESOLVE[case]
    check("resolve", run(capsys, "resolve", *argv, exit=code))


def test_resolve_with_the_launcher_environment(capsys, monkeypatch):
    d = run(capsys, "resolve", "--gpus", 8, "--launcher-env", "CUDA_DEVICE_MAX_CONNECTIONS=8", "++env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1")
    check("resolve", d)
    assert "LAUNCHER_ENV_WINS" in {f["id"] for f in d["findings"]}


# ------------------------------------------------------------------------------------------------ plan
PLAN = {
    "tp4_pp4_vpp2_64_h100": (["--tp", 4, "--pp", 4, "--vpp", 2, "--gpus", 64, "--gpu", "h100"], 0),
    "nvfp4_gb200": (["--tp", 2, "--gpus", 8, "--gpu", "gb200", "--precision", "nvfp4"], 0),
    "preset_match": (["--tp", 4, "--gpus", 64, "--hidden-size", 8192, "--seq-length", 8192, "--micro-batch-size", 1], 0),
    "lora_fp8": (["--tp", 2, "--gpus", 8, "--precision", "fp8", "--lora", "--hidden-size", 8192, "--seq-length", 4096,
                  "--micro-batch-size", 1], 0),
    "gpus_not_divisible": (["--tp", 3, "--gpus", 8], 1),
    "recipe": (["--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config"], 0),
    "recipe_relayout": (["--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "--pp", 8], 0),
    "family": (["--recipe", "llama3_70b", "--tp", 4, "--pp", 4, "--gpus", 64, "--task", "sft"], 0),
    "megatron_fsdp": (["--tp", 2, "--gpus", 16, "--megatron-fsdp"], 0),
    "moe_flex": (["--gpus", 16, "--gpu", "gb200", "--moe", "--moe-flex-backend", "hybridep"], 0),
    "moe_a2a_overlap": (["--recipe", "deepseek_v2_lite_pretrain_8gpu_h100_bf16_config", "--moe-a2a-overlap"], 1),  # full recompute
    "no_te": (["--tp", 2, "--gpus", 8, "--no-te"], 0),
    "release_0_5_1": (["--tp", 2, "--gpus", 8, "--bridge-version", "0.5.1"], 0),
}


@pytest.mark.parametrize("case", PLAN)
def test_plan(capsys, case):
    argv, code = PLAN[case]
    check("plan", run(capsys, "plan", *argv, exit=code))


# ------------------------------------------------------------------------------------------------ lint and diff
CONFIGS = sorted(p.stem for p in RUN_CONFIGS.glob("*.yaml"))
NEEDS_GPUS = {"no_comm_overlap"}  # no comm_overlap section: nothing records the DP size


def gpus(stem: str) -> list:
    return ["--gpus", 64] if stem in NEEDS_GPUS else []


@pytest.mark.parametrize("stem", CONFIGS)
def test_lint_saved_run_configs(capsys, stem):
    check("lint", run(capsys, "lint", RUN_CONFIGS / f"{stem}.yaml", "--gpu", "h100", *gpus(stem), exit=None))


@pytest.mark.parametrize("argv", [
    ["--recipe", "llama3_70b_pretrain_64gpu_gb200_nvfp4_config"],
    ["--recipe", "qwen35_vl_35b_a3b_sft_2gpu_h100_bf16_fsdp_config"],
    [RUN_CONFIGS / "tp1.yaml"],
    [RUN_CONFIGS / "baseline.yaml", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "--gpu", "h100"],
], ids=["recipe", "recipe_rejected", "no_gpu_type", "config_and_recipe"])
def test_lint_recipes_and_flags(capsys, argv):
    check("lint", run(capsys, "lint", *argv, exit=None))


@pytest.mark.parametrize("stem", [s for s in CONFIGS if s != "baseline"])
def test_diff_saved_run_configs(capsys, stem):
    d = run(capsys, "diff", RUN_CONFIGS / "baseline.yaml", RUN_CONFIGS / f"{stem}.yaml", *gpus(stem), exit=None)
    check("diff", d)


# ------------------------------------------------------------------------------------------------ the catalogs
@pytest.mark.parametrize("argv", [[], ["--model", "llama3_70b"], ["--precision", "nvfp4"],
                                  ["--package", "perf_recipes", "--gpu", "gb200", "--task", "pretrain", "--gpus", 64],
                                  ["--name", "no_such_recipe"]], ids=["all", "model", "precision", "filters", "none"])
def test_recipes(capsys, argv):
    d = run(capsys, "recipes", *argv)
    check("recipes", d)
    assert d["count"] == len(d["recipes"])


def test_the_recipe_listing_covers_every_status(capsys):
    d = run(capsys, "recipes")
    assert {r["status"] for r in d["recipes"]} == {"resolves", "rejected", "fails_at_setup", "not_built"}


@pytest.mark.parametrize("finding_id", sorted(findings.records()))
def test_explain(capsys, finding_id):
    check("explain", run(capsys, "explain", finding_id))


@pytest.mark.parametrize("argv", [[], ["--bridge-version", "0.5.1"]], ids=["default", "0.5.1"])
def test_presets(capsys, argv):
    check("presets", run(capsys, "presets", *argv))


@pytest.mark.parametrize("argv", [["--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "--model", "llama3_70b"],
                                  ["--recipe", "llama3_8b_pretrain_config", "--model", "llama3_8b", "--gpus", "16",
                                   "train.global_batch_size=128"],
                                  ["--model", "qwen3_30b_a3b", "--gpus", "16", "model.expert_model_parallel_size=8",
                                   "model.num_moe_experts=128", "model.seq_length=4096", "train.global_batch_size=64",
                                   "train.micro_batch_size=1"]], ids=["70b", "8b", "moe"])
def test_budget(capsys, argv):
    check("budget", run(capsys, "budget", *argv))


def test_releases(capsys):
    check("releases", run(capsys, "releases"))


def test_suites(capsys):
    check("suites", run(capsys, "suites"))


@pytest.mark.parametrize("version,files", [
    ((0, 6, 2), {}),
    ((0, 7, 0), {"training/config.py": CONFIG}),
    ((0, 6, 1), {"training/config.py": CONFIG}),
    ((0, 5, 1), {"training/config.py": CONFIG}),
], ids=["nothing_found", "new_release", "yanked", "old_release"])
def test_anchors_over_a_checkout(capsys, tmp_path, version, files):
    check("anchors", run(capsys, "anchors", "--mbridge-src", make_checkout(tmp_path, version, files), exit=None))


# ------------------------------------------------------------------------------------------------ check-manifest
def test_check_manifest(capsys, tmp_path):
    check("check-manifest", run(capsys, "check-manifest"))
    bad = tmp_path / "SKILL.md"
    bad.write_text("---\nname: Not A Valid Name\n---\n\nbody\n", encoding="utf-8")
    d = run(capsys, "check-manifest", bad, exit=1)
    check("check-manifest", d)
    assert d["problems"]


# ------------------------------------------------------------------------------------------------ trace
def two_ranks(folder: Path) -> Path:
    folder.mkdir()
    overlap_case().write(folder / "rank-0.json")
    b = TraceBuilder(rank=1, world_size=2).step(1, 0, 400).step(2, 400, 800)
    b.kernel("volta_sgemm_128x64_nn", 10, 300, stream=7).kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 200, 350, stream=20)
    b.write(folder / "rank-1.json.gz")
    return folder


REAL = real_traces()


def test_trace_synthetic(capsys, tmp_path):
    check("trace", run(capsys, "trace", two_ranks(tmp_path / "job")))
    check("trace", run(capsys, "trace", tmp_path / "job" / "rank-0.json", "--rank", "0"))


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_trace_real(capsys, path):
    check("trace", run(capsys, "trace", path))


def test_trace_compare(capsys, tmp_path):
    job = two_ranks(tmp_path / "job")
    check("trace-compare", run(capsys, "trace", "--compare", job, job / "rank-0.json"))
    if len(REAL) >= 2:
        check("trace-compare", run(capsys, "trace", "--compare", REAL[0], REAL[1]))


LOGS = ROOT / "tests" / "data" / "logs"
DIAGNOSE = sorted((LOGS / "upstream").glob("*.log"))[:12] + sorted((LOGS / "bridge-0.6.2").glob("*.log"))[:12]


@pytest.mark.parametrize("path", DIAGNOSE, ids=[f"{p.parent.name}/{p.stem}" for p in DIAGNOSE])
def test_diagnose(capsys, path):
    check("diagnose", run(capsys, "diagnose", path, exit=None))


def test_diagnose_with_a_config_and_compare(capsys, tmp_path):
    log = LOGS / "bridge-0.6.2" / "tp_overlap_no_sequence_parallel.log"
    check("diagnose", run(capsys, "diagnose", log, "--config", RUN_CONFIGS / "baseline.yaml", exit=None))
    check("diagnose", run(capsys, "diagnose", "--compare", log, log, exit=None))


@pytest.mark.parametrize("form", ["python", "yaml", "hydra"])
def test_trace_snippet(capsys, form):
    check("trace-snippet", run(capsys, "trace", "--snippet", form, "--steps", "5-9", "--rank", "0,8"))


# ------------------------------------------------------------------------------------------------ pending payloads
def sample(name: str, capsys, tmp_path):
    if name == "diff":
        return run(capsys, "diff", RUN_CONFIGS / "baseline.yaml", RUN_CONFIGS / "sequence_parallel_off.yaml")
    if name == "presets":
        return run(capsys, "presets")
    if name == "check-manifest":
        return run(capsys, "check-manifest")
    if name == "trace":
        return run(capsys, "trace", two_ranks(tmp_path / "job"))
    if name == "trace-compare":
        job = two_ranks(tmp_path / "job")
        return run(capsys, "trace", "--compare", job, job)
    return run(capsys, "trace", "--snippet", "python")


@pytest.mark.parametrize("name", ["diff", "presets", "check-manifest", "trace", "trace-compare", "trace-snippet"])
def test_payload_carries_schema_version(capsys, tmp_path, name):
    payload = sample(name, capsys, tmp_path)
    assert payload["schema_version"] == SCHEMA_VERSION and errors(f"{name}.schema.json", payload) == []


# ------------------------------------------------------------------------------------------------ strictness
def renamed(payload: dict, path: list, key: str) -> dict:
    out = copy.deepcopy(payload)
    node = out
    for part in path:
        node = node[part]
    node[f"{key}_renamed"] = node.pop(key)
    return out


def test_a_renamed_or_missing_key_fails(capsys):
    d = run(capsys, "plan", "--tp", 4, "--pp", 4, "--vpp", 2, "--gpus", 64)
    targets = [[], ["findings", 0], ["effective", "model"], ["effective", "ddp"], ["modes", "dp"], ["layout"],
               ["launch_env", "CUDA_DEVICE_MAX_CONNECTIONS"]]
    for path in targets:
        node = d
        for part in path:
            node = node[part]
        for key in node:
            assert errors("plan.schema.json", renamed(d, path, key)), f"renaming {path + [key]} went unnoticed"
    assert errors("plan.schema.json", {**d, "env": d["env_vars"]}), "an extra top-level key went unnoticed"


def test_findings_keep_their_exact_keys(capsys):
    d = run(capsys, "resolve", "--gpus", 8, "comm_overlap.cuda_device_max_connections=1", exit=1)
    f = next(f for f in d["findings"] if f.get("remove_keys"))
    for key in f:
        assert errors("resolve.schema.json", renamed(d, ["findings", d["findings"].index(f)], key)), key
    no_when = copy.deepcopy(d)
    del next(x for x in no_when["findings"] if x["severity"] == "error")["when"]
    assert errors("resolve.schema.json", no_when), "an error finding without `when` went unnoticed"


def test_every_finding_id_and_diff_rule_is_explainable(capsys):
    """The ids agents match on: each one an emitted payload carries must be a registry record."""
    seen = set()
    for argv, code in RESOLVE.values():
        seen |= {f["id"] for f in run(capsys, "resolve", *argv, exit=code)["findings"]}
    for stem in CONFIGS:
        if stem != "baseline":
            d = run(capsys, "diff", RUN_CONFIGS / "baseline.yaml", RUN_CONFIGS / f"{stem}.yaml", *gpus(stem), exit=None)
            seen |= {c["finding_id"] for c in d["overlap_changes"]}
    assert seen and seen <= set(findings.records()), seen - set(findings.records())


def test_run_configs_are_yaml_bridge_wrote():
    # the lint/diff cases above read these; a broken file would make those tests vacuous
    for stem in CONFIGS:
        assert yaml.safe_load((RUN_CONFIGS / f"{stem}.yaml").read_text())["_target_"].endswith("ConfigContainer")


def test_the_schema_index_lists_every_schema_with_the_command_it_describes():
    # references/schemas/README.md: each row links a schema file of the folder, once, and names the command whose
    # output it is, as the schema's own title does (a command's first word is one of the CLI's verbs); the recipes row
    # names every status the schema has a record for.
    from mbridge_overlap.cli import VERBS

    index = (SCHEMAS / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[([^\]]+)\]\(([^)]+)\) \| (.+) \|$", index, re.M)
    assert [name for name, _, _ in rows] == [target for _, target, _ in rows]
    listed = [name for name, _, _ in rows]
    assert sorted(listed) == sorted(p.name for p in SCHEMAS.glob("*.schema.json")) and len(set(listed)) == len(listed)
    for name, _, described in rows:
        title = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))["title"]
        if title.endswith("--format json"):  # a command's output: the row names that command
            command = title.removesuffix("--format json").split()[0]
            assert command in VERBS and described.startswith(f"`{command}"), (name, described)
        elif name == "verify.schema.json":
            assert title.startswith("scripts/verify.sh") and "`scripts/verify.sh --json`" in described
        else:  # the shared definitions, or one of the skill package's own files (card.yaml, evals/evals.json)
            assert name == "common.schema.json" or title.split()[0] in described, (name, described)
    recipes = next(d for n, _, d in rows if n == "recipes.schema.json")
    statuses = json.loads((SCHEMAS / "recipes.schema.json").read_text(encoding="utf-8"))["$defs"]
    assert sorted(re.findall(r"`([a-z_]+)`", recipes.partition("status:")[2])) == sorted(statuses)
