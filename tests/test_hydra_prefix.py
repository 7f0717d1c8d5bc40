"""A command-line word's + / ++ prefix, kept through the request and judged as Bridge's Hydra overrides judge it
(process_config_with_overrides: the start config as a dict, the file merged, then the words in struct mode). A model
a config file's model._target_ builds holds only the file's keys, and so does a comm_overlap section only the file
makes: a bare word on a key they lack is refused (Could not override), +KEY= on a key holding a value other than null
is refused (Could not append), ++ is always taken. Each rule is held to the real Bridge in
tests/bridge/test_hydra_prefix_bridge.py (0.6.2 and 0.5.1)."""

import shlex

import pytest

from conftest import run_cli
from mbridge_overlap import UsageError, api
from mbridge_overlap.cli import options
from mbridge_overlap.findings import records
from mbridge_overlap.findings.example_command import command
from mbridge_overlap.upstream.releases import dataset_seq_length_key

MODEL = ("model:\n  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  num_layers: 32\n  hidden_size: 4096\n"
         "  num_attention_heads: 32\n  tensor_model_parallel_size: 2\n")


def _file(tmp_path, version, extra="", seq=8192):
    path = tmp_path / "run.yaml"
    path.write_text(MODEL + extra + f"dataset:\n  {dataset_seq_length_key(version).partition('.')[2]}: {seq}\n")
    return str(path)


def _resolve(path, version, *words):
    return api.resolve(options.overrides_of(list(words)), config=path, gpus=16, gpu="h100", bridge_version=version)


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
def test_a_bare_word_on_a_key_the_file_s_model_lacks_is_refused(version, tmp_path):
    path = _file(tmp_path, version)
    with pytest.raises(UsageError, match=r"Could not override 'model.seq_length'\. To append to your config use "
                                         r"\+model.seq_length=8192.*write \+\+model.seq_length=8192"):
        _resolve(path, version, "model.seq_length=8192")
    for word in ("++model.seq_length=8192", "+model.seq_length=8192"):
        res = _resolve(path, version, word)
        assert res.state.model["seq_length"] == 8192 and not res.errors, word
    # a key the file holds: bare and ++ taken, + refused (its value is not null)
    assert _resolve(path, version, "model.tensor_model_parallel_size=4").state.model["tensor_model_parallel_size"] == 4
    assert _resolve(path, version, "++model.tensor_model_parallel_size=4").state.model["tensor_model_parallel_size"] == 4
    with pytest.raises(UsageError, match="Could not append to config. An item is already at "
                                         "'model.tensor_model_parallel_size'"):
        _resolve(path, version, "+model.tensor_model_parallel_size=4")
    # a word makes the key: a bare word after it is taken, as Hydra applies them in order
    assert _resolve(path, version, "++model.seq_length=4096", "model.seq_length=8192").state.model["seq_length"] == 8192


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
def test_sections_whose_every_field_is_held(version, tmp_path):
    """dataset and ddp start as Bridge's dataclasses: every field held, + refused where its value is not null."""
    path, word = _file(tmp_path, version), dataset_seq_length_key(version)
    with pytest.raises(UsageError, match=f"An item is already at '{word}'"):
        _resolve(path, version, f"+{word}=4096")
    with pytest.raises(UsageError, match="An item is already at 'ddp.overlap_grad_reduce'"):
        _resolve(path, version, "+ddp.overlap_grad_reduce=true")
    assert _resolve(path, version, "+ddp.bucket_size=1000000").state.ddp["bucket_size"] == 1000000  # (null: taken)
    assert _resolve(path, version, f"++{word}=1024", "ddp.overlap_grad_reduce=true").state.ddp["overlap_grad_reduce"]


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
def test_a_comm_overlap_section_the_file_makes_holds_only_its_keys(version, tmp_path):
    path = _file(tmp_path, version, "comm_overlap:\n  tp_comm_overlap: false\n")
    with pytest.raises(UsageError, match="Could not override 'comm_overlap.overlap_p2p_comm'"):
        _resolve(path, version, "comm_overlap.overlap_p2p_comm=true")
    assert _resolve(path, version, "+comm_overlap.overlap_p2p_comm=true").state.request.comm_overlap["overlap_p2p_comm"]
    assert _resolve(path, version, "comm_overlap.tp_comm_overlap=true").state.request.comm_overlap["tp_comm_overlap"]
    with pytest.raises(UsageError, match="An item is already at 'comm_overlap.tp_comm_overlap'"):
        _resolve(path, version, "+comm_overlap.tp_comm_overlap=true")


def test_a_recipe_s_model_holds_every_field(tmp_path):
    """A recipe's model is its provider dataclass: every field held (bare taken, + refused on a set value)."""
    res = api.resolve(options.overrides_of(["model.seq_length=8192", "dataset.seq_length=8192"]),
                      recipe="llama3_8b_pretrain_config", bridge_version="0.6.2")
    assert res.state.model["seq_length"] == 8192
    with pytest.raises(UsageError, match="An item is already at 'model.seq_length'"):
        api.resolve(options.overrides_of(["+model.seq_length=8192"]), recipe="llama3_8b_pretrain_config",
                    bridge_version="0.6.2")


def test_the_api_s_plain_keys_set_the_field(tmp_path):
    """A plain key (the API's, a finding's fix_overrides) says what to set, not how a word is written: taken."""
    res = api.resolve({"model.seq_length": 8192}, config=_file(tmp_path, "0.6.2"), gpus=16, bridge_version="0.6.2")
    assert res.state.model["seq_length"] == 8192 and not res.errors
    assert api.resolve({"++model.seq_length": 8192}, config=_file(tmp_path, "0.6.2"), gpus=16,
                       bridge_version="0.6.2").state.model["seq_length"] == 8192
    with pytest.raises(UsageError, match="Could not append"):
        api.resolve({"+model.tensor_model_parallel_size": 4}, config=_file(tmp_path, "0.6.2"), gpus=16,
                    bridge_version="0.6.2")


def test_the_cli_refuses_the_bare_word_and_says_no_default_for_a_set_length(tmp_path):
    path = _file(tmp_path, "0.6.2")
    proc = run_cli("resolve", "--config", path, "--gpus", "16", "model.seq_length=8192")
    assert proc.returncode == 2 and "Could not override 'model.seq_length'" in proc.stderr, proc.stderr
    proc = run_cli("resolve", "--config", path, "--gpus", "16", "++model.seq_length=8192")
    assert proc.returncode == 0, proc.stderr
    assert "the default of GPTModelProvider" not in proc.stdout  # (the word set it: no class default to say)


def test_diff_s_restore_is_the_word_after_s_file_takes(tmp_path):
    """AFTER's file-built model lacks sequence_parallel: the restore is ++model.sequence_parallel=true."""
    body = MODEL + "  seq_length: 4096\n{sp}dataset:\n  seq_length: 4096\ncomm_overlap:\n  tp_comm_overlap: true\n"
    before, after = tmp_path / "before.yaml", tmp_path / "after.yaml"
    before.write_text(body.format(sp="  sequence_parallel: true\n"))
    after.write_text(body.format(sp=""))
    res = api.diff(str(before), str(after), gpus=16, bridge_version="0.6.2")
    (c,) = [c for c in res.changes if c.fix_overrides == {"model.sequence_parallel": True}]
    assert c.fix == "++model.sequence_parallel=true", c.fix


def test_the_preset_finding_knows_the_provider_s_default_length(tmp_path):
    """TP_OVERLAP_DEFAULT_UB_CFG: the length is the class default the note names (1024), not 'not known'; a hint for a
    key the file's model lacks is the ++ word."""
    path = tmp_path / "run.yaml"
    path.write_text(MODEL.replace("  hidden_size: 4096\n", "") + "  sequence_parallel: true\ndataset:\n  seq_length: 1024\n"
                    "comm_overlap:\n  tp_comm_overlap: true\n")
    res = api.resolve(config=str(path), gpus=16, gpu="h100", bridge_version="0.6.2")
    (f,) = [f for f in res.findings if f.id == "TP_OVERLAP_DEFAULT_UB_CFG"]
    assert "sequence length" not in f.message.partition("presets for")[0], f.message
    assert "(++model.hidden_size=N, plan --hidden-size N" in f.message, f.message


# A perf recipe whose cfg.env_vars holds COMMON_RECIPE_ENV_VARS (recipes/utils/environment_utils.py), NCCL_NVLS_ENABLE
# among them, and not CUDA_DEVICE_MAX_CONNECTIONS; Bridge's baseline (_pretrain_common) has an empty env_vars.
ENV_RECIPE = "llama3_8b_pretrain_2gpu_h100_bf16_config"


def _env(version, *words, recipe=None, config=None):
    return api.resolve(options.overrides_of(list(words)), recipe=recipe, config=config, gpus=8,
                       bridge_version=version).state.request.env_vars


@pytest.mark.parametrize("version", ["0.6.0", "0.6.2"])
def test_a_bare_word_on_a_name_the_start_config_s_env_vars_lacks_is_refused(version):
    """env_vars is a dict in Bridge's struct config: a bare word adds no name to it (Could not override); ++ and +
    add it."""
    for recipe in (None, ENV_RECIPE):
        with pytest.raises(UsageError, match=r"Could not override 'env_vars.CUDA_DEVICE_MAX_CONNECTIONS'\. To append to "
                                             r"your config use \+env_vars.CUDA_DEVICE_MAX_CONNECTIONS=32.*"
                                             r"write \+\+env_vars.CUDA_DEVICE_MAX_CONNECTIONS=32"):
            _env(version, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=32", recipe=recipe)
        for word in ("++env_vars.CUDA_DEVICE_MAX_CONNECTIONS=32", "+env_vars.CUDA_DEVICE_MAX_CONNECTIONS=32"):
            assert _env(version, word, recipe=recipe)["CUDA_DEVICE_MAX_CONNECTIONS"] == 32, (recipe, word)
    # a word makes the name: a bare word after it is taken, as Hydra applies them in order
    assert _env(version, "++env_vars.NCCL_DEBUG=WARN", "env_vars.NCCL_DEBUG=INFO")["NCCL_DEBUG"] == "INFO"


def test_a_name_the_recipe_s_env_vars_holds_takes_the_bare_word_and_refuses_the_plus_word():
    assert _env("0.6.2", "env_vars.NCCL_NVLS_ENABLE=1", recipe=ENV_RECIPE)["NCCL_NVLS_ENABLE"] == 1
    assert _env("0.6.2", "++env_vars.NCCL_NVLS_ENABLE=1", recipe=ENV_RECIPE)["NCCL_NVLS_ENABLE"] == 1
    with pytest.raises(UsageError, match="Could not append to config. An item is already at 'env_vars.NCCL_NVLS_ENABLE'"):
        _env("0.6.2", "+env_vars.NCCL_NVLS_ENABLE=1", recipe=ENV_RECIPE)


def test_a_name_the_config_file_s_env_vars_holds_takes_the_bare_word(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("env_vars:\n  NCCL_DEBUG: WARN\n")
    assert _env("0.6.2", "env_vars.NCCL_DEBUG=INFO", config=str(path))["NCCL_DEBUG"] == "INFO"
    with pytest.raises(UsageError, match="An item is already at 'env_vars.NCCL_DEBUG'"):
        _env("0.6.2", "+env_vars.NCCL_DEBUG=INFO", config=str(path))
    with pytest.raises(UsageError, match="Could not override 'env_vars.NCCL_ALGO'"):
        _env("0.6.2", "env_vars.NCCL_ALGO=Tree", config=str(path))


def test_the_cli_refuses_a_bare_launch_variable_word_in_one_line():
    proc = run_cli("resolve", "--gpus", "8", "env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "write ++env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1" in proc.stderr, proc.stderr


def test_a_release_without_env_vars_says_so_for_every_prefix():
    """0.5.x's ConfigContainer has no env_vars: the release's reason, whatever the prefix (not Hydra's struct rule)."""
    for word in ("env_vars.NCCL_DEBUG=INFO", "+env_vars.NCCL_DEBUG=INFO", "++env_vars.NCCL_DEBUG=INFO"):
        with pytest.raises(UsageError, match="ConfigContainer has no env_vars in Megatron-Bridge 0.5.1"):
            _env("0.5.1", word)


LAUNCH_EXAMPLES = [(fid, side) for fid, rec in records().items() for side in ("example", "counter_example")
                   if (rec.get(side) or {}).get("verb") in ("resolve", "lint")
                   and any(k.startswith("env_vars.") for k in rec[side].get("overrides") or {})]


@pytest.mark.parametrize("finding_id, side", LAUNCH_EXAMPLES)
def test_explain_s_command_line_for_a_launch_variable_is_one_bridge_takes(finding_id, side):
    """explain shows a finding's example as a command line; its launch variables are ++ words, which the baseline's
    empty env_vars takes (a bare word is refused), and the launcher's values --launcher-env NAME=VALUE words."""
    words = shlex.split(command(records()[finding_id][side]), comments=True)
    assert words[0] == "mbridge-overlap", words
    proc = run_cli(*words[1:], "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
