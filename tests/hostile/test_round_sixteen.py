"""Hostile input, round sixteen (fuzzN's rest): each case failed before its fix."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from hostile_kit import ROOT, assert_one_line, run_cli

from mbridge_overlap import api

LOG = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2" / "baseline_no_gpu.log"


@pytest.mark.parametrize("layout", ["[a, b]", "[[decoder], decoder]", "[{a: 1}]", "[null, null]", "[]"])
def test_a_list_layout_that_is_not_stages_is_refused(tmp_path, layout):
    # N3: read as no layout, exit 0; Megatron-Core refuses each at config time (held to it in tier 2)
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  num_layers: 61\n  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 16\n"
                      f"  pipeline_model_parallel_layout: {layout}\nddp:\n  use_distributed_optimizer: true\n")
    proc = run_cli("resolve", "--config", config, "--gpus", "1024", "--format", "json")
    found = {f["id"] for f in json.loads(proc.stdout)["findings"]}
    assert proc.returncode == 1 and "PIPELINE_LAYOUT_REJECTED" in found


def test_install_skill_prints_its_whole_path_and_a_try_line_that_runs(tmp_path):
    # N4: a skills folder of ordinary length was cut ("nem...") and the try line opened a quote it never closed
    skills = tmp_path / "home" / "engineer" / "projects" / "megatron-training-runs" / ".claude" / "skills"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "install-skill"), str(skills)], capture_output=True,
                          text=True, check=True)
    dest = skills / "nemo-mbridge-perf-tp-dp-comm-overlap"
    assert repr(str(dest)) in proc.stdout
    argv = shlex.split(proc.stdout.split("try: ", 1)[1])
    assert argv[1] == str(dest / "scripts" / "mbridge-overlap") and os.path.isfile(argv[1])
    assert subprocess.run(argv, capture_output=True, cwd=tmp_path).returncode == 0


def test_diagnose_compare_names_files_both_sides_share(tmp_path):
    # N6: only the same set of files was noted; a side holding one of the other's files said nothing
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir(), after.mkdir()
    (before / "rank0.log").write_bytes(LOG.read_bytes())
    (before / "rank1.log").write_bytes(LOG.read_bytes())
    os.link(before / "rank0.log", after / "rank0.log")
    notes = api.diagnose([before, after], compare=True).notes
    assert any("share 1 of their log files" in n for n in notes), notes
    assert not any("share" in n for n in api.diagnose([before / "rank1.log", after], compare=True).notes)


def test_trace_compare_names_files_both_sides_share(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 7,
               "ts": 5, "dur": 20, "args": {"stream": 7, "correlation": 1}}]
    before = tmp_path / "before"
    before.mkdir()
    for rank in (0, 1):
        (before / f"rank{rank}.json").write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2},
                                                             "traceEvents": events}))
    notes = api.compare_traces(before, before / "rank0.json").notes
    assert any("share 1 of their trace files" in n for n in notes), notes


def test_a_log_of_unicode_spaces_is_empty(tmp_path):
    # recheck51 T11: a log of no-break, ideographic and line-separator spaces was read, "causes: none", exit 0
    log = tmp_path / "spaces.log"
    log.write_text("\u00a0\u3000\n\u2028\n\u00a0\n" * 100, encoding="utf-8")
    proc = run_cli("diagnose", log)
    assert proc.returncode == 2 and b"empty" in proc.stderr


def test_a_blank_rank_s_log_gives_no_rank(tmp_path):
    # recheck51 T11: the header counted the rank of a log of blank lines as a rank read
    (tmp_path / "rank0.log").write_bytes(LOG.read_bytes())
    (tmp_path / "rank1.log").write_text("\n \n\n")
    sources = {s["path"].rsplit("/", 1)[-1]: s for s in api.diagnose([tmp_path]).to_dict()["sources"]}
    assert sources["rank1.log"]["ranks"] == [] and sources["rank0.log"]["ranks"]


def test_a_deeply_nested_list_layout_text_is_one_line():
    # fuzzO F3: 500 nested brackets (a 1 KB argument) overflowed the stack: a RecursionError traceback, exit 1
    proc = run_cli("resolve", "--gpus", "16", "model.pipeline_model_parallel_size=2",
                   "model.pipeline_model_parallel_layout=" + "[" * 500 + "]" * 500)
    assert_one_line(proc)
    assert b"pipeline_model_parallel_layout" in proc.stderr


def test_a_launch_variable_saved_as_none_or_quoted_text_is_text(tmp_path):
    # fuzzO F1: NCCL_NET_PLUGIN: none (as Bridge saves it) made lint refuse the config ("must be scalars"), and a quoted
    # 'true' was read as a bool; Hydra's override grammar has null as its only null, so env_vars.X=none is text too
    config = tmp_path / "c.yaml"
    config.write_text("env_vars:\n  NCCL_NET_PLUGIN: none\n  NCCL_X: 'null'\n  NCCL_Y: 'true'\n")
    env = api.resolve(config=config, gpus=8).state.request.env_vars
    assert env["NCCL_NET_PLUGIN"] == "none" and env["NCCL_X"] == "null" and env["NCCL_Y"] == "true"
    over = api.resolve(overrides={"env_vars.NCCL_NET_PLUGIN": "none", "env_vars.NCCL_Y": "'true'",
                                  "env_vars.NCCL_Z": "true"}, gpus=8).state.request.env_vars
    assert over["NCCL_NET_PLUGIN"] == "none" and over["NCCL_Y"] == "true" and over["NCCL_Z"] is True


@pytest.mark.parametrize("before", ["Ring\\Tree", "true", "8", "it's", "a\\"])
def test_diff_s_restore_of_a_launch_variable_restores_it(before):
    # fuzzO F2: every backslash was doubled (Hydra halves only those before a quote) and a text like true went out
    # bare (Hydra types it): the restore, pasted, did not restore; its "1 of 1 back" was computed on values
    from mbridge_overlap.safeio import hydra_quote

    d = api.diff(recipe="llama3_8b_pretrain_config", before_overrides={"env_vars.NCCL_ALGO": hydra_quote(before)},
                 overrides={"env_vars.NCCL_ALGO": "Tree"}).to_dict()
    change = next(c for c in d["overlap_changes"] if c["key"] == "env_vars.NCCL_ALGO")
    assert change["before"] == before
    key, _, value = shlex.split(change["fix"])[0].lstrip("+").partition("=")
    restored = api.resolve(recipe="llama3_8b_pretrain_config", overrides={"env_vars.NCCL_ALGO": "Tree", key: value})
    assert restored.state.request.env_vars["NCCL_ALGO"] == before
    assert d["restore_all"]["holds"]


@pytest.mark.parametrize("magic, name", [(b"\xfd7zXZ\x00\x00", "xz"), (b"BZh91AY&SY", "bzip2"), (b"\x28\xb5\x2f\xfd\x00", "zstd")])
def test_a_log_compressed_otherwise_than_gzip_is_refused(tmp_path, magic, name):
    # fuzzO F6: its compressed bytes were read as text: "causes: none on the overlap path", exit 0
    log = tmp_path / "rank0.log"
    log.write_bytes(magic + bytes(range(256)) * 4)
    proc = run_cli("diagnose", log)
    assert_one_line(proc)
    assert f"{name} data".encode() in proc.stderr


def test_a_folder_s_unreadable_subfolder_and_packed_logs_are_noted(tmp_path, monkeypatch):
    # fuzzO F6, F7: a lost+found the account cannot list stopped the whole read; .log.xz files were skipped unsaid
    (tmp_path / "rank0.log").write_bytes(LOG.read_bytes())
    (tmp_path / "rank1.log.xz").write_bytes(b"\xfd7zXZ\x00")
    (tmp_path / "lost+found").mkdir()
    real = os.scandir

    def scandir(path):
        if str(path).endswith("lost+found"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    notes = api.diagnose([tmp_path]).notes
    assert any("could not be listed" in n and "lost+found" in n for n in notes), notes
    assert any("compressed otherwise than gzip" in n for n in notes), notes


def test_a_budget_s_assumed_micro_batch_must_split_the_global_batch():
    # fuzzO F4: with no micro-batch given the budget took 1 and priced GBS 3 over DP 8 as "1 micro-batches"
    over = {"model.tensor_model_parallel_size": 2, "train.global_batch_size": 3, "model.seq_length": 4096,
            "dataset.seq_length": 4096}
    assert "does not split" in api.resolve(overrides=over, gpus=16, model="llama3_8b").budget["unavailable"]
    assert "unavailable" not in api.resolve(overrides={**over, "train.global_batch_size": 16}, gpus=16, model="llama3_8b").budget


@pytest.mark.parametrize("exported, said", [("8", True), ("1", False)])
def test_a_launch_variable_the_launcher_exports_is_the_one_that_runs(exported, said):
    # fuzzO F5: the launcher's 8 was never named, and the fix env_vars.X=1 cannot take effect (setdefault keeps 8)
    over = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True}
    found = [f for f in api.lint(overrides=over, gpus=8, launcher_env={"CUDA_DEVICE_MAX_CONNECTIONS": exported}).findings
             if f.id in ("LAUNCH_ENV_NOT_SET", "LAUNCHER_ENV_DIFFERS_FROM_BRIDGE") and "CUDA_DEVICE_MAX_CONNECTIONS" in f.message]
    assert bool(found) == said
    if said:  # a warning, as the same 8 from env_vars is (recheck53 X4)
        assert found[0].id == "LAUNCHER_ENV_DIFFERS_FROM_BRIDGE" and found[0].severity == "warning"
        assert "exports CUDA_DEVICE_MAX_CONNECTIONS='8'" in found[0].message and "env_vars." not in found[0].fix
        assert "in the launcher" in found[0].fix


def test_shell_env_takes_no_name_launcher_env_refuses():
    # fuzzO F5 (rest): --shell-env took a shell variable named `NCCL_A B`, a name --launcher-env refuses
    env = {**os.environ, "NCCL_A B": "1", "NCCL_DEBUG": "WARN"}
    proc = run_cli("resolve", "--gpus", "8", "--shell-env", "--format", "json", env=env)
    assert proc.returncode in (0, 1), proc.stderr
    assert b"NCCL_A B" not in proc.stdout and b"NCCL_DEBUG" in proc.stdout


@pytest.mark.parametrize("text", ["int(1)", "str(1)", "glob(x)", "${oc.decode:'1'}", "a${b}", "${oc.env:HOME}",
                                  "'${oc.env:HOME}'", "'a${b}'"])  # (quoted too: recheck54 Y3)
def test_a_hydra_function_or_interpolation_launch_variable_is_refused(text):
    # fuzzP P2: read as its text, where Bridge evaluates it before export (a false LAUNCH_ENV_DIFFERS for int(1))
    proc = run_cli("resolve", "--gpus", "8", f"++env_vars.CUDA_DEVICE_MAX_CONNECTIONS={text}")
    assert proc.returncode == 2 and (b"a Hydra function call" in proc.stderr or b"OmegaConf interpolation" in proc.stderr)
    assert_one_line(proc)


@pytest.mark.parametrize("value, kind", [("7", "int"), ("true", "bool"), ("1.5", "float")])
def test_a_command_line_scalar_layout_is_typed_as_hydra_types_it(value, kind):
    # recheck53 X8: =7 on the command line was read as a one-stage layout string ("must be divisible"); Hydra gives
    # the int 7, on which Megatron-Core raises AttributeError
    proc = run_cli("resolve", "--gpus", "16", "model.num_layers=4", "model.pipeline_model_parallel_size=2",
                   f"model.pipeline_model_parallel_layout={value}", "--format", "json")
    (f,) = [f for f in json.loads(proc.stdout)["findings"] if f["id"] == "PIPELINE_LAYOUT_REJECTED"]
    assert f"'{kind}' object has no attribute" in f["message"]


def test_a_run_of_escapes_before_a_refused_character_is_refused_at_once():
    # fuzzQ Q1: 24 escaped blanks then `~` ran for minutes (each pair doubled the time: an ambiguous pattern)
    import time

    started = time.monotonic()
    proc = run_cli("resolve", "--gpus", "8", "++env_vars.NCCL_ALGO=" + "\\ " * 200 + "~")
    assert proc.returncode == 2 and time.monotonic() - started < 20
    assert_one_line(proc)


def test_an_escaped_trailing_blank_is_kept_and_a_huge_layout_number_is_an_int():
    # fuzzQ Q3: `Ring\ ` was read as `Ring\` (trimmed before the escape was undone); Q2: a layout of 5,000 digits
    # ended in int()'s digit-limit traceback
    from mbridge_overlap.run import hydra

    assert hydra.env_value("env_vars.X", hydra.parse_override("env_vars.X=Ring\\ ")[1]) == "Ring "
    proc = run_cli("resolve", "--gpus", "16", "model.pipeline_model_parallel_size=2",
                   "model.pipeline_model_parallel_layout=" + "9" * 4000, "--format", "json")
    assert proc.returncode == 1 and b"'int' object has no attribute" in proc.stdout
    # (recheck55 AB9: past 4,300 digits Hydra's parser refuses the override itself)
    proc = run_cli("resolve", "--gpus", "16", "model.pipeline_model_parallel_size=2",
                   "model.pipeline_model_parallel_layout=" + "9" * 5000)
    assert proc.returncode == 2 and b"4,300" in proc.stderr


@pytest.mark.parametrize("text, said", [(".inf", "inf"), ("1e999", "inf"), (".nan", "nan"), ('"a\\0b"', None)])
def test_a_config_launch_variable_is_what_bridge_exports_or_refused_as_bridge_fails(tmp_path, text, said):
    # fuzzQ Q7, Q8: a NUL byte was taken (Bridge: embedded null byte); .inf and 1e999 were refused (Bridge exports inf)
    config = tmp_path / "c.yaml"
    config.write_text(f"env_vars:\n  NCCL_A: {text}\n")
    proc = run_cli("resolve", "--config", config, "--gpus", "8", "--format", "json")
    if said is None:
        assert proc.returncode == 2 and b"NUL byte" in proc.stderr
        assert_one_line(proc)
    else:
        assert json.loads(proc.stdout)["env_vars"]["NCCL_A"] == said


def test_a_config_interpolation_in_a_typed_field_is_named_as_one(tmp_path):
    # fuzzQ Q5: "write it without quotes" was said of an interpolation with none
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  seq_length: ${oc.decode:'8'}\n")
    proc = run_cli("resolve", "--config", config, "--gpus", "8")
    assert proc.returncode == 2 and b"OmegaConf interpolation" in proc.stderr and b"without quotes" not in proc.stderr
