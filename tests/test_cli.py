"""The command line: the JSON contract, exit statuses, one-line errors, --output/--force, no torch at start."""

import importlib.util
import json
import subprocess
import sys

import pytest

import mbridge_overlap
from conftest import ROOT, cli_json, run_cli
from mbridge_overlap.run import schema
from mbridge_overlap.findings import records as catalog

RESOLVE_KEYS = {"schema_version", "bridge_version", "verified", "recipe", "gpus", "gpu", "data_parallel_size", "batch", "effective", "modes",
                "requested", "env_vars", "launch_env", "inputs", "notes", "findings", "all_fixes", "budget"}


def test_resolve_json_contract_and_api_parity():
    args = ["model.tensor_model_parallel_size=4", "model.sequence_parallel=true", "comm_overlap.tp_comm_overlap=true"]
    d = cli_json("resolve", "--gpus", "16", *args)
    assert set(d) == RESOLVE_KEYS
    assert set(d["effective"]) == set(schema.EFFECTIVE_FIELDS)
    assert {"tp_comm_overlap", "overlap_p2p_comm", "batch_p2p_comm", "tp_comm_bootstrap_backend", "sequence_parallel"} <= set(d["effective"]["model"])
    assert {"use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather", "bucket_size", "align_param_gather",
            "grad_reduce_in_fp32", "fp8_param_gather"} <= set(d["effective"]["ddp"])
    assert {"use_distributed_optimizer", "overlap_param_gather_with_optimizer_step"} <= set(d["effective"]["optimizer"])
    assert all({"id", "severity", "message", "fix", "fix_overrides", "knobs"} <= set(f) for f in d["findings"])
    assert d["env_vars"] == {} and d["launch_env"]["CUDA_DEVICE_MAX_CONNECTIONS"]["value"] == "1"  # H100, TP=4
    api = mbridge_overlap.resolve(dict(a.split("=") for a in args), gpus=16).to_dict()
    assert api == d


def test_plan_json_contract_and_api_parity():
    d = cli_json("plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64")
    assert RESOLVE_KEYS | {"layout", "overrides", "preset"} <= set(d)
    assert d == mbridge_overlap.plan(tp=4, pp=4, vpp=2, gpus=64).to_dict()


def test_resolve_exits_1_when_bridge_would_raise():
    proc = run_cli("resolve", "--gpus", "8", "mixed_precision.fp8_param_gather=true")
    assert proc.returncode == 1 and "FP8_PARAM_GATHER_WITHOUT_FP8" in proc.stdout


@pytest.mark.parametrize("args, finding", [
    (["--gpus", "6", "model.tensor_model_parallel_size=4"], "GPUS_NOT_DIVISIBLE"),
    (["--gpus", "8", "model.virtual_pipeline_model_parallel_size=2"], "VPP_WITHOUT_PP"),
])
def test_layouts_bridge_or_megatron_core_reject_are_error_findings(args, finding):
    """Not bad input: Bridge accepts the request and fails (at config time or at setup); exit 1 with the finding."""
    proc = run_cli("resolve", *args, "--format", "json")
    assert proc.returncode == 1 and proc.stderr == ""
    assert finding in {f["id"] for f in json.loads(proc.stdout)["findings"] if f["severity"] == "error"}


@pytest.mark.parametrize(
    "args, needle",
    [
        (["resolve", "--gpus", "8", "ddp.overlap_grad_reduct=true"], "did you mean 'ddp.overlap_grad_reduce'"),
        (["resolve", "--gpus", "0"], "--gpus: must be a positive integer"),
        (["resolve", "model.tensor_model_parallel_size=2"], "--gpus: required"),
        (["resolve", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf17_config"], "closest: llama3_70b_pretrain_64gpu_h100_bf16_config"),
        (["resolve", "--gpus", "8", "--bridge-version", "9.9"], "unknown Megatron-Bridge release"),
        (["resolve", "--gpus", "8", "comm_overlap.tp_comm_overlap_cfg=userbuffers_nope"], "unknown preset"),
        (["resolve", "--gpus", "8", "model.tensor_model_parallel_size"], "expected KEY=VALUE"),
        (["plan", "--gpus", "8", "--gpu", "a100"], "unknown GPU type"),
        (["plan", "--gpus", "8", "--tp", "-2"], "--tp"),
        (["plan", "--gpus", "8", "--precision", "int8"], "--precision"),
        (["explain", "TP_OVERLAP_OFF"], "did you mean"),
        (["presets", "--bridge-version", "0.4.0"], "unknown Megatron-Bridge release"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle):
    proc = run_cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_malformed_yaml_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  tensor_model_parallel_size: [4\n")
    proc = run_cli("resolve", "--gpus", "8", "--config", bad)
    assert proc.returncode == 2 and "malformed YAML at line" in proc.stderr and len(proc.stderr.splitlines()) == 1
    notmap = tmp_path / "list.yaml"
    notmap.write_text("- a\n- b\n")
    proc = run_cli("resolve", "--gpus", "8", "--config", notmap)
    assert proc.returncode == 2 and "expected a mapping" in proc.stderr
    proc = run_cli("resolve", "--gpus", "8", "--config", tmp_path / "missing.yaml")
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_output_is_written_only_when_asked_and_never_overwritten_without_force(tmp_path):
    target = tmp_path / "snippet.py"
    proc = run_cli("plan", "--tp", "2", "--gpus", "8", "--format", "python", "--output", target)
    assert proc.returncode == 0 and proc.stdout == "" and target.read_text().startswith("# ")
    target.write_text("mine")
    proc = run_cli("plan", "--tp", "2", "--gpus", "8", "--format", "python", "--output", target)
    assert proc.returncode == 2 and "exists; pass --force" in proc.stderr and target.read_text() == "mine"
    proc = run_cli("plan", "--tp", "2", "--gpus", "8", "--format", "python", "--output", target, "--force")
    assert proc.returncode == 0 and target.read_text() != "mine"


@pytest.mark.parametrize("finding_id", list(catalog()))
def test_explain_every_finding(finding_id):
    proc = run_cli("explain", finding_id.lower())
    rec = catalog()[finding_id]
    assert proc.returncode == 0 and proc.stdout.startswith(finding_id)
    decided = [line for line in proc.stdout.splitlines() if line.startswith("decided by: ")]
    if rec.get("anchor"):
        assert len(decided) == 1 and f"anchor {rec['anchor']}" in decided[0]
    else:
        assert decided == [] and "source: " in proc.stdout


@pytest.mark.skipif(importlib.util.find_spec("megatron") is not None, reason="megatron is importable here")
def test_explain_without_bridge_says_where_the_code_is_in_one_quiet_line():
    from mbridge_overlap.upstream import anchors

    anchored = {fid: rec["anchor"] for fid, rec in catalog().items() if rec.get("anchor")}
    fid = "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL"
    spec = anchors.specs()[anchored[fid]]
    proc = run_cli("explain", fid)
    assert proc.returncode == 0 and proc.stderr == ""
    head = proc.stdout.split("\n\n")[0].splitlines()  # the record's lines, before the explanation
    code = [line for line in head if spec["file"] in line]
    assert len(code) == 1 and spec["scope"] in code[0] and f"anchor {anchored[fid]}" in code[0]
    assert not any(word in proc.stdout for word in ("not installed", "--mbridge-src", "bridge_env.sh", "venv"))
    loc = cli_json("explain", fid)["location"]  # the JSON keeps how to get the line numbers
    assert loc["status"] == "needs_bridge" and loc["file"].endswith(spec["file"]) and loc["scope"] == spec["scope"]
    assert "--mbridge-src" in loc["note"]


def test_presets_and_releases():
    presets = cli_json("presets")
    assert presets["schema_version"] == 2 and len(presets["presets"]) == 19
    table = cli_json("releases")["releases"]
    assert table["0.6.2"]["verified"] is True and table["0.5.1"]["env_vars_field"] is False
    assert table["0.6.1"]["yanked"] and table["0.6.1"]["same_as"] == "0.6.0"


def test_text_output_for_people():
    out = run_cli("plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64").stdout
    assert "TP: on" in out and "CUDA_DEVICE_MAX_CONNECTIONS=1" in out
    out = run_cli("resolve", "--gpus", "8", "model.tensor_model_parallel_size=2", "comm_overlap.tp_comm_overlap=true").stdout
    assert "WARNING TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL" in out and "fix: model.sequence_parallel=true" in out


def test_no_command_and_help():
    assert run_cli().returncode == 2
    assert run_cli("--help").returncode == 0
    assert run_cli("plan", "--help").returncode == 0


def test_launcher_env_is_given_as_name_value_or_read_from_the_shell_for_launch_variables_only():
    given = run_cli("resolve", "--gpus", "8", "++env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1", "--launcher-env", "CUDA_DEVICE_MAX_CONNECTIONS=32",
                    "--format", "json")
    assert "LAUNCHER_ENV_WINS" in {f["id"] for f in json.loads(given.stdout)["findings"]}
    shell = run_cli("resolve", "--gpus", "8", "++env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1", "--shell-env", "--format", "json",
                    env={"CUDA_DEVICE_MAX_CONNECTIONS": "32", "MY_SECRET_TOKEN": "x"})
    d = json.loads(shell.stdout)
    assert "LAUNCHER_ENV_WINS" in {f["id"] for f in d["findings"]}
    assert "CUDA_DEVICE_MAX_CONNECTIONS" in d["inputs"]["launcher_env"] and "MY_SECRET_TOKEN" not in d["inputs"]["launcher_env"]
    assert "PATH" not in d["inputs"]["launcher_env"]


def test_start_imports_neither_torch_nor_megatron():
    code = (
        "import sys, mbridge_overlap.cli; mbridge_overlap.cli.main(['plan','--tp','4','--pp','4','--vpp','2','--gpus','64','--format','python']);"
        "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','megatron','transformer_engine')]; sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_runs_in_place_from_a_copied_skill_folder(tmp_path):
    import shutil

    dest = tmp_path / "nemo-mbridge-perf-tp-dp-comm-overlap"
    for part in ("mbridge_overlap", "SKILL.md"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / part)
    proc = run_cli("plan", "--tp", "2", "--gpus", "8", "--format", "yaml", cwd=dest)
    assert proc.returncode == 0 and "comm_overlap:" in proc.stdout
    assert run_cli("check-manifest", "--check-dir", cwd=dest).returncode == 0


def test_nemo_run_form_only_where_perf_env_plugin_exists():
    refused = run_cli("plan", "--tp", "4", "--gpus", "64", "--format", "nemo_run")
    assert refused.returncode == 2 and "no PerfEnvPlugin" in refused.stderr and refused.stderr.count("\n") == 1
    proc = run_cli("plan", "--tp", "4", "--pp", "2", "--gpus", "64", "--gpu", "h100", "--bridge-version", "0.5.1",
                   "--recipe", "llama3_70b", "--format", "nemo_run")
    assert proc.returncode == 0, proc.stderr
    made, plugins, executor = [], [], type("Executor", (), {"env_vars": {}})()

    class PerfEnvPlugin:  # stands in for megatron.bridge.recipes.run_plugins.PerfEnvPlugin (tier 3 runs the real one)
        def __init__(self, **kwargs):
            made.append(kwargs)

    code = proc.stdout.replace("from megatron.bridge.recipes.run_plugins import PerfEnvPlugin", "")
    exec(compile(code, "snippet", "exec"), {"PerfEnvPlugin": PerfEnvPlugin, "plugins": plugins, "executor": executor})
    plan = json.loads(run_cli("plan", "--tp", "4", "--pp", "2", "--gpus", "64", "--gpu", "h100", "--bridge-version", "0.5.1",
                              "--recipe", "llama3_70b", "--format", "json").stdout)
    assert executor.env_vars == {k: v["value"] for k, v in plan["launch_env"].items()}
    assert made[0]["tp_size"] == 4 and made[0]["pp_size"] == 2 and made[0]["num_gpus"] == 64
    assert made[0]["nccl_pp_comm_chunksize"] == int(plan["launch_env"]["NCCL_P2P_NET_CHUNKSIZE"]["value"])


def test_a_python_without_the_packages_gets_one_line(tmp_path):
    """-S hides site-packages: pyyaml and jinja2 are missing, as in a bare system Python."""
    proc = subprocess.run([sys.executable, "-S", str(ROOT / "scripts" / "mbridge-overlap"), "plan", "--tp", "2", "--gpus", "8"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "pip install pyyaml jinja2" in proc.stderr


def test_a_large_json_payload_is_one_line_and_the_same_data():
    import json as _json

    from mbridge_overlap.cli import options

    small = {"a": [1, 2]}
    assert options.to_json(small).count("\n") > 1 and _json.loads(options.to_json(small)) == small
    big = {"rows": ["x" * 100] * 5000}
    text = options.to_json(big)
    assert text.count("\n") == 1 and _json.loads(text) == big


def test_positionals_may_stand_after_options(capsys):
    """KEY=VALUE overrides (and logs) are taken wherever they stand among a verb's options, as its help shows them;
    an unknown option is still one line naming the verb, status 2."""
    from mbridge_overlap import cli

    recipe = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    together = ["resolve", "--recipe", recipe, "--gpu", "h100", "model.sequence_parallel=true", "model.tensor_model_parallel_size=2",
                "--format", "json"]
    apart = ["resolve", "--recipe", recipe, "model.sequence_parallel=true", "--gpu", "h100", "model.tensor_model_parallel_size=2",
             "--format", "json"]
    assert cli.main(together) == 0
    first = capsys.readouterr().out
    assert cli.main(apart) == 0
    assert capsys.readouterr().out == first and '"tensor_model_parallel_size": 2' in first
    assert cli.main(["resolve", "model.sequence_parallel=true", "--bogus"]) == 2
    assert "mbridge-overlap resolve: error: unrecognized arguments: --bogus" in capsys.readouterr().err
