"""Hostile input, round eighteen (fuzzT, recheck58's command-line words): each case failed before its fix. What
Hydra makes of each word is its grammar's (Hydra 1.3: a bare true/null/08 is a bool, null and text; a backslash
escapes a blank or a comma; a double-quoted string undoes no \\\\ or \\u); tier 2 holds the snippets' words to Hydra's
own parser (tests/bridge/test_plan_words.py)."""

from __future__ import annotations

import json

import pytest

from hostile_kit import assert_one_line, run_cli

PLAN = ("plan", "--tp", "2", "--gpus", "8")


def _lines(*words, fmt="hydra") -> list[str]:
    proc = run_cli(*PLAN, *words, "--format", fmt)
    assert proc.returncode in (0, 1), proc.stderr
    return [line for line in proc.stdout.decode().splitlines() if not line.startswith("#")]


@pytest.mark.parametrize("word, line", [
    ("++env_vars.FOO='true'", "++env_vars.FOO='true'"),  # Bridge exported True
    ("logger.wandb_exp_name='null'", "logger.wandb_exp_name='null'"),  # bare, the field was unset
    ("logger.wandb_exp_name='False'", "logger.wandb_exp_name='False'"),
])
def test_a_quoted_text_hydra_would_type_stays_quoted_in_the_hydra_snippet(word, line):
    # T3-1, recheck58 AE5
    assert line in _lines(word)


def test_a_path_s_escapes_and_quotes_are_hydra_s():
    # T3-2, AE6: checkpoint.save=a\ b is "a b" to Hydra; the snippets gave Bridge a\ b (and x\'y for 'x\'y')
    assert "checkpoint.save='a b'" in _lines("checkpoint.save=a\\ b")
    assert '  save: "a b"' in _lines("checkpoint.save=a\\ b", fmt="yaml")
    assert 'cfg.checkpoint.save = "x\'y"' in _lines("checkpoint.save='x\\'y'", fmt="python")
    assert "checkpoint.save='~'" in _lines("checkpoint.save='~'")  # quoted: the text, not null


@pytest.mark.parametrize("word, what", [
    ("checkpoint.save=[a,b]", b"a list"), ("checkpoint.save=1_000", b"a number"), ("checkpoint.save=true", b"a bool"),
    ("checkpoint.save=\u00e9", b"unquoted"), ("model.recompute_modules=[1,mlp]", b"number, bool or null"),
    ("model.recompute_modules=#x", b"unquoted"),
])
def test_a_path_or_list_hydra_gives_another_type_or_refuses_is_refused(word, what):
    # T3-2, T3-3: a list or number for a path went out as its text; a word Hydra's lexer refuses was taken
    proc = run_cli(*PLAN, word)
    assert proc.returncode == 2 and what in proc.stderr, proc.stderr
    assert_one_line(proc)


def test_a_list_is_written_as_hydra_and_yaml_read_it():
    # T3-3, T3-7: ["\\${x}"] (JSON's escapes) is a backslash and a live interpolation to Hydra + OmegaConf, and the
    # blank after the comma split the line in a shell
    assert "model.recompute_modules=[core_attn,mlp]" in _lines("model.recompute_modules=[core_attn,mlp]")
    assert "model.recompute_modules=['\\${x}']" in _lines("model.recompute_modules=[\\${x}]")
    assert '  recompute_modules: ["\\\\${x}"]' in _lines("model.recompute_modules=[\\${x}]", fmt="yaml")


def test_the_env_snippets_export_the_user_s_own_launch_variables():
    # T3-4: the launcher rule's NCCL_NVLS_ENABLE=0 was exported over the user's 1 (an export wins over cfg.env_vars)
    # and NCCL_DEBUG left out
    words = ("++env_vars.NCCL_NVLS_ENABLE=1", "++env_vars.NCCL_DEBUG=INFO")
    env = [line.split("  #")[0] for line in _lines(*words, fmt="env")]
    assert "export NCCL_NVLS_ENABLE=1" in env and "export NCCL_DEBUG=INFO" in env
    assert "export NCCL_NVLS_ENABLE=0" not in env
    env_vars = [line.split("  #")[0] for line in _lines(*words, fmt="env_vars")]
    assert 'cfg.env_vars["NCCL_NVLS_ENABLE"] = 1' in env_vars and 'cfg.env_vars["NCCL_DEBUG"] = "INFO"' in env_vars


@pytest.mark.parametrize("word, line", [
    ("++env_vars.FOO='a,b'", "++env_vars.FOO='a,b'"), ("++env_vars.FOO=a\\,b", "++env_vars.FOO='a,b'"),
    ("++env_vars.FOO='null'", "++env_vars.FOO='null'"), ('++env_vars.FOO="it\'s"', "++env_vars.FOO='it\\'s'"),
])
def test_a_quoted_launch_variable_is_read_once(word, line):
    # T3-5: plan read the unquoted value again as a bare word (a sweep, null, a quote inside) and refused it
    assert line in _lines(word)


def test_the_fix_word_that_creates_comm_overlap_is_taken_by_lint_and_plan():
    # T3-6: lint took '++comm_overlap={...}' (a fix it prints) for a file; plan said Hydra refuses it
    recipe = "exaone_moe_236b_a23b_pretrain_64gpu_h100_bf16_config"
    word = "++comm_overlap={_target_:megatron.bridge.training.comm_overlap.CommOverlapConfig,tp_comm_overlap:false}"
    lint = run_cli("lint", "--recipe", recipe, word, "--format", "json")
    assert lint.returncode in (0, 1), lint.stderr
    assert "COMM_OVERLAP_ABSENT" not in {f["id"] for f in json.loads(lint.stdout)["findings"]}
    plan = run_cli("plan", "--recipe", recipe, word, "--format", "json")
    assert plan.returncode in (0, 1), plan.stderr
    assert json.loads(plan.stdout)["overrides"]["comm_overlap.tp_comm_overlap"] is False


@pytest.mark.parametrize("word, what", [("model.tensor_model_parallel_size=08", b"text to Hydra"),
                                        ("model.tensor_model_parallel_size=0x8", b"expected an integer")])
def test_an_integer_field_s_word_is_read_as_hydra_types_it(word, what):
    # recheck58 AE2: 08 was answered as TP 8 (Hydra hands Bridge the text '08': a TypeError in runtime_config_update)
    proc = run_cli("resolve", "--gpus", "16", word)
    assert proc.returncode == 2 and what in proc.stderr
    assert_one_line(proc)


def test_an_integer_with_underscores_is_hydra_s_number():
    # recheck58 AE2: 1_6 is 16 to Hydra (Bridge runs TP 16); it was refused
    proc = run_cli("resolve", "--gpus", "16", "model.tensor_model_parallel_size=1_6", "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["effective"]["model"]["tensor_model_parallel_size"] == 16


def test_a_value_that_is_not_finite_reaches_every_snippet_as_itself():
    # recheck58 AE4: `= inf` (a NameError in Python), `inf` (text to YAML) and null in JSON
    word = "optimizer.clip_grad=inf"
    assert 'cfg.optimizer.clip_grad = float("inf")' in _lines(word, fmt="python")
    assert "  clip_grad: .inf" in _lines(word, fmt="yaml")
    assert "optimizer.clip_grad=inf" in _lines(word)
    proc = run_cli(*PLAN, word, "--format", "json")
    assert json.loads(proc.stdout)["overrides"]["optimizer.clip_grad"] == "inf"


def test_one_text_for_recompute_modules_is_refused_with_the_list_that_works():
    # tier 2 of this round: model.recompute_modules=mlp hands Bridge the text 'mlp', which Megatron-Core's check
    # reads as the modules m, l and p (ValueError: Invalid choices); plan wrote [mlp]. cuda_graph_scope takes one name.
    proc = run_cli(*PLAN, "model.recompute_modules=mlp")
    assert proc.returncode == 2 and b"[mlp]" in proc.stderr
    assert_one_line(proc)
    assert "model.cuda_graph_scope=[attn]" in _lines("model.cuda_graph_scope=attn")


def test_a_list_item_s_quoted_comma_is_no_separator():
    # recheck57 AD5: ['x,y'] is one item to Hydra; it was split in two (and refused)
    assert "model.recompute_modules=['x,y']" in _lines("model.recompute_modules=['x,y']")
