"""verify end to end (in-process, Bridge already imported): verdicts and exit statuses."""

import json
import os
import subprocess
import sys
import time

import pytest

import fixture_checkout as fx
from mbridge_overlap.bridge import verify

ROOT = fx.Path(__file__).resolve().parents[2]


def run(*argv):
    return verify.run(verify.parser().parse_args(list(map(str, argv))))


def statuses(report):
    return {c["check"]: c["status"] for c in report["checks"]}


def test_all_checks_pass_over_a_fixture_checkout(tmp_path):
    report = run("--mbridge-src", fx.make(tmp_path))
    assert report["verdict"] == "PASS" and report["exit_code"] == 0, report["checks"]
    s = statuses(report)
    assert s["apply python over baseline"] == s["apply hydra over a recipe with comm_overlap"] == "PASS"
    assert s["suite test_comm_overlap.py"] == s["anchors"] == "PASS"
    assert report["layout"]["tp"] == 4 and report["layout"]["vpp"] == 2 and report["layout"]["gpus"] == 64


def test_wrong_expected_count_fails(tmp_path):
    report = run("--mbridge-src", fx.make(tmp_path), "--expect-passed", "36")
    assert report["exit_code"] == 1
    check = next(c for c in report["checks"] if c["check"] == "suite test_comm_overlap.py")
    assert check["status"] == "FAIL" and "3 passed, expected 36" in check["detail"]


def test_tampered_snippet_files_fail_with_the_field(tmp_path):
    folder = tmp_path / "snippets"
    run("--skip-suites", "--save-snippets", folder)
    path = folder / "python.py"
    path.write_text(path.read_text().replace("virtual_pipeline_model_parallel_size = 2", "virtual_pipeline_model_parallel_size = 4"))
    report = run("--skip-suites", "--snippets", folder)
    assert report["exit_code"] == 1
    check = next(c for c in report["checks"] if c["check"] == "apply python over baseline")
    assert check["status"] == "FAIL" and "model.virtual_pipeline_model_parallel_size: predicted 2, Bridge 4" in check["detail"]


def test_a_recipe_is_verified_in_its_own_layout_and_config(tmp_path):
    """--recipe verified the default TP4 PP4 VPP2 on 64 GPUs over the baseline, never the recipe: now the recipe's
    layout where a flag is not given, and every snippet pasted into the recipe itself (built as the catalog built it)."""
    recipe = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    report = run("--skip-suites", "--recipe", recipe, "--tp", "8", "--cp", "1")
    assert report["exit_code"] == 0, report["checks"]
    assert (report["layout"]["tp"], report["layout"]["pp"], report["layout"]["vpp"], report["layout"]["gpus"]) == (8, 4, 5, 64)
    s = statuses(report)
    assert all(s[f"apply {form} over recipe {recipe}"] == "PASS" for form in ("python", "yaml", "hydra", "env_vars"))
    folder = tmp_path / "snippets"
    run("--skip-suites", "--recipe", recipe, "--tp", "8", "--cp", "1", "--save-snippets", folder)
    path = folder / "overrides.yaml"
    assert "tensor_model_parallel_size: 8" in path.read_text()
    path.write_text(path.read_text().replace("tensor_model_parallel_size: 8", "tensor_model_parallel_size: 2"))
    report = run("--skip-suites", "--recipe", recipe, "--tp", "8", "--cp", "1", "--snippets", folder)
    check = next(c for c in report["checks"] if c["check"] == f"apply yaml over recipe {recipe}")
    assert report["exit_code"] == 1 and check["status"] == "FAIL" and "tensor_model_parallel_size" in check["detail"]


def test_a_moe_recipe_of_another_gpu_type_is_verified_with_its_device_stand_in():
    """A GB200 MoE recipe runs runtime_config_update under the GPU type's device stand-in, as the catalog built it
    (without it Bridge's flex-dispatcher check asked torch for a GPU), with a planned EP of its own."""
    recipe = "qwen3_30b_a3b_pretrain_16gpu_gb200_bf16_dev_config"
    report = run("--skip-suites", "--recipe", recipe, "--ep", "8")
    assert report["exit_code"] == 0, report["checks"]
    assert report["layout"]["ep"] == 8 and "EP=8" in verify.human(report)


def test_a_recipe_name_both_packages_have_is_verified_by_its_qualified_reference():
    """llama3_70b_peft_8gpu_h100_bf16_config is in recipes and perf_recipes: the reference the user gave (one package)
    goes through the plan to the snippets' check (it was dropped to the bare name, which the catalog refuses)."""
    report = run("--skip-suites", "--recipe", "perf_recipes.llama3_70b_peft_8gpu_h100_bf16_config")
    assert report["exit_code"] == 0, report["checks"]
    assert report["layout"]["recipe"] == "perf_recipes.llama3_70b_peft_8gpu_h100_bf16_config"


def test_save_snippets_never_overwrites_without_force(tmp_path):
    folder = tmp_path / "s"
    run("--skip-suites", "--save-snippets", folder)
    with pytest.raises(verify.UsageError, match="exists; pass --force"):
        run("--skip-suites", "--save-snippets", folder)
    run("--skip-suites", "--save-snippets", folder, "--force")


def test_without_checkout_the_verdict_is_incomplete(monkeypatch):
    monkeypatch.setattr(verify.suites, "find_checkout", lambda explicit=None: None)
    report = run()
    assert report["verdict"] == "INCOMPLETE" and report["exit_code"] == 3
    assert all(c["status"] == "NOT RUN" for c in report["checks"] if c["check"].startswith("suite"))
    assert statuses(report)["apply yaml over baseline"] == "PASS"


def test_other_layouts_and_bad_input():
    report = run("--skip-suites", "--tp", "2", "--pp", "2", "--vpp", "0", "--gpus", "8", "--precision", "fp8", "--gpu", "b200")
    assert report["exit_code"] == 0, report["checks"]
    with pytest.raises(verify.UsageError, match="not divisible"):
        run("--skip-suites", "--tp", "3", "--gpus", "8")


def test_verify_sh_json_and_exit_status(tmp_path):
    phases = tmp_path / "phases.json"
    proc = subprocess.run(
        [str(ROOT / "scripts" / "verify.sh"), "--mbridge-src", str(fx.make(tmp_path, comm_overlap=fx.FAILING)), "--json"],
        capture_output=True, text=True, timeout=600, env={**os.environ, verify.PHASES_ENV: str(phases)},
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["verdict"] == "FAIL"
    assert statuses(report)["suite test_comm_overlap.py"] == "FAIL"
    assert statuses(report)["suite test_run_plugins.py"] == "PASS"
    marks = json.loads(phases.read_text())  # what benchmarks/bench_verify.py splits a run by
    order = ["main", "plan", "import", "apply", "anchors", "suites", "report"]
    assert [marks[m][0] for m in order] == sorted(marks[m][0] for m in order)
    assert marks["suites_launched"][0] <= marks["suites_pytest_done"][0] <= marks["suites_exited"][0]


def test_an_early_stop_leaves_no_pytest_running(tmp_path):
    folder = tmp_path / "s"
    run("--skip-suites", "--save-snippets", folder)
    slow = "import time\n\n\ndef test_a():\n    time.sleep(120)\n"
    started = time.monotonic()
    with pytest.raises(verify.UsageError, match="exists; pass --force"):
        run("--mbridge-src", fx.make(tmp_path / "checkout", comm_overlap=slow), "--save-snippets", folder)
    assert time.monotonic() - started < 60  # the suites' pytest was stopped, not waited for
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # and reaped: no child of this process is left


def test_verify_sh_asks_bridge_env_again_only_when_what_it_reads_changed(tmp_path):
    if subprocess.run(["python3", "-c", "import megatron.bridge"], capture_output=True).returncode == 0:
        pytest.skip("python3 imports megatron.bridge here: verify.sh uses it and no venv")
    venv = os.path.dirname(os.path.dirname(sys.executable))
    env = {k: v for k, v in os.environ.items() if k not in ("MBRIDGE_VERIFY_PYTHON", "MBRIDGE_PYTHON")}
    env.update(XDG_CACHE_HOME=str(tmp_path), MBRIDGE_VENV=venv)

    def ask(**more):
        proc = subprocess.run([str(ROOT / "scripts" / "verify.sh"), "--which-python"], capture_output=True, text=True, timeout=300,
                              env={**env, **more})
        assert proc.returncode == 0 and proc.stdout.strip().endswith("python"), proc.stderr
        return "[bridge-env] venv ready" in proc.stderr

    stamp = tmp_path / "nemo-mbridge-perf-tp-dp-comm-overlap" / "verify-python.stamp"
    assert ask()
    key, python = stamp.read_text().split(" ", 1)
    assert python.strip() == os.path.join(venv, "bin", "python")
    assert not ask()  # the stamp: nothing bridge_env.sh reads has changed
    stamp.write_text(f"{key} {tmp_path / 'gone' / 'python'}\n")
    assert ask()  # today's key, but an interpreter that is not there
    assert not ask()
    assert ask(MBRIDGE_PYTHON=sys.executable)  # a variable it reads
    stamp.write_text(f"{'0' * 32} {python}")
    assert ask()  # a key that is not today's


def test_a_hostile_snippet_is_reported_escaped_and_a_non_utf8_one_refused(tmp_path, capsys):
    """fuzzK K5: a snippet's exception text reached the terminal raw (an OSC retitles it, ESC[2J clears it), and a
    snippet file that is not UTF-8 was a traceback with exit 1."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "python.py").write_text('raise ValueError("\\x1b]0;PWN\\x07\\x1b[2J boom")\n')
    report = run("--skip-suites", "--snippets", raw)
    assert "\x1b" in next(c["detail"] for c in report["checks"] if c["check"].startswith("apply python"))  # the JSON keeps it
    text = verify.human(report)
    assert "boom" in text and "\x1b" not in text and "\x07" not in text
    assert "\x1b" not in capsys.readouterr().err
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "python.py").write_bytes(b'x = "\xff\xfe"\n')
    with pytest.raises(verify.UsageError, match="not UTF-8"):
        run("--skip-suites", "--snippets", binary)


def test_a_plan_with_its_own_overrides_is_verified_as_applied():
    """recheck56 AC2/AC6, evalW W2-1/W2-4: plan's KEY=VALUE words (pipeline counts, a bool, a launch variable the recipe
    lacks) go into every snippet typed and written as Bridge takes them; applied to the real recipe, each matches."""
    report = run("--skip-suites", "--recipe", "llama3_8b_pretrain_config", "--pp", "3", "--gpus", "24",
                 "model.num_layers_in_first_pipeline_stage=10", "model.num_layers_in_last_pipeline_stage=11",
                 "model.sequence_parallel=false", "++env_vars.NCCL_NVLS_ENABLE=1")
    assert report["exit_code"] == 0, report["checks"]
    applied = {name: s for name, s in statuses(report).items() if name.startswith("apply ")}
    assert len(applied) >= 4 and set(applied.values()) == {"PASS"}, report["checks"]
