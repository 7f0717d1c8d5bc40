"""Each command-line word's prefix judged as Bridge's own override path judges it: process_config_with_overrides over
_pretrain_common() (the start config as a dict, the config file merged, then Hydra's words in struct mode) on real
config files, bare / + / ++ x key held or not x model / dataset / ddp / comm_overlap. The skill refuses exactly the
words Bridge refuses, with Hydra's own text (tests/test_hydra_prefix.py holds the rules offline)."""

import pytest

from mbridge_overlap import UsageError, api
from mbridge_overlap.bridge import adapter
from mbridge_overlap.cli import options
from mbridge_overlap.upstream.releases import dataset_seq_length_key

MODEL = ("model:\n  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  num_layers: 4\n  hidden_size: 256\n"
         "  num_attention_heads: 4\n  seq_length: 2048\n  tensor_model_parallel_size: 2\n")


def _bridge(path: str, word: str) -> str | None:
    """None where Bridge's override path takes the word, else Hydra's reason."""
    from megatron.bridge.recipes.common import _pretrain_common
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    try:
        process_config_with_overrides(_pretrain_common(), config_filepath=path, cli_overrides=[word])
    except Exception as exc:  # OverridesError: Failed to parse Hydra overrides: ...
        return str(exc)
    return None


def _skill(path: str, word: str, version: str) -> str | None:
    try:
        api.resolve(options.overrides_of([word]), config=path, gpus=16, gpu="h100", bridge_version=version)
    except UsageError as exc:
        return str(exc)
    return None


def test_each_prefix_on_each_section_as_bridge_takes_it(tmp_path):
    version = adapter.bridge_version()
    seq = dataset_seq_length_key(version)
    files = {"co": MODEL + f"dataset:\n  {seq.partition('.')[2]}: 2048\ncomm_overlap:\n  tp_comm_overlap: true\n",
             "none": MODEL + f"dataset:\n  {seq.partition('.')[2]}: 2048\n"}
    cases = [("co", "model.seq_length", "2048"),  # held by the file
             ("co", "model.sequence_parallel", "true"),  # not held: the file's model holds only its keys
             ("co", seq, "2048"),  # a dataclass field set
             ("co", "dataset.blend", "null"),  # a dataclass field that is null
             ("co", "ddp.overlap_grad_reduce", "true"),
             ("co", "ddp.bucket_size", "1000000"),  # null in the start config
             ("co", "comm_overlap.tp_comm_overlap", "true"),  # held by the file's section
             ("co", "comm_overlap.overlap_p2p_comm", "false"),  # not held by it
             ("none", "model.seq_length", "2048")]
    seen = []
    for name, key, value in cases:
        path = tmp_path / f"{name}.yaml"
        path.write_text(files[name])
        for prefix in ("", "+", "++"):
            word = f"{prefix}{key}={value}"
            theirs, ours = _bridge(str(path), word), _skill(str(path), word, version)
            assert (theirs is None) == (ours is None), (version, word, theirs, ours)
            if theirs is not None:  # Hydra's own reason, said
                reason = "Could not override" if "Could not override" in theirs else "Could not append"
                assert reason in theirs and reason in ours, (word, theirs, ours)
            seen.append((word, theirs is None))
    refused = sorted(w for w, taken in seen if not taken)
    assert refused == sorted(["model.sequence_parallel=true", f"+{seq}=2048", "+model.seq_length=2048",
                              "+ddp.overlap_grad_reduce=true", "+comm_overlap.tp_comm_overlap=true",
                              "comm_overlap.overlap_p2p_comm=false", "+model.seq_length=2048"]), refused


def test_the_skill_s_fix_for_a_file_built_model_is_a_word_bridge_takes(tmp_path):
    """diff's restore for a key AFTER's file-built model lacks: ++model.sequence_parallel=true, which Bridge takes
    (the bare word it refuses)."""
    body = MODEL + "{sp}dataset:\n  {seq}: 2048\ncomm_overlap:\n  tp_comm_overlap: true\n"
    version = adapter.bridge_version()
    seq = dataset_seq_length_key(version).partition(".")[2]
    before, after = tmp_path / "before.yaml", tmp_path / "after.yaml"
    before.write_text(body.format(sp="  sequence_parallel: true\n", seq=seq))
    after.write_text(body.format(sp="", seq=seq))
    res = api.diff(str(before), str(after), gpus=16, bridge_version=version)
    (c,) = [c for c in res.changes if c.fix_overrides == {"model.sequence_parallel": True}]
    assert _bridge(str(after), c.fix) is None, c.fix
    assert "Could not override" in _bridge(str(after), c.fix.lstrip("+"))


@pytest.mark.parametrize("word", ["++comm_overlap.tp_comm_overlap=true"])
def test_a_word_on_a_null_comm_overlap_is_taken_by_hydra(tmp_path, word):
    """No comm_overlap section: Hydra takes + and ++ (the section becomes a dict, as scenario's note says of a
    section made), refuses the bare word; the skill answers the made section and says so (_section_made)."""
    version = adapter.bridge_version()
    path = tmp_path / "run.yaml"
    path.write_text(MODEL + f"dataset:\n  {dataset_seq_length_key(version).partition('.')[2]}: 2048\n")
    assert _bridge(str(path), word) is None
    assert "Could not override" in _bridge(str(path), word.lstrip("+"))


@pytest.mark.parametrize("section", ["co", "none"])
def test_the_comm_overlap_key_itself_as_bridge_takes_it(tmp_path, section):
    """fuzzA2: the section's own key, bare / + / ++, null or a mapping, over a section the file makes and over none."""
    version = adapter.bridge_version()
    seq = dataset_seq_length_key(version).partition(".")[2]
    path = tmp_path / "run.yaml"
    path.write_text(MODEL + f"dataset:\n  {seq}: 2048\n" + ("comm_overlap:\n  tp_comm_overlap: true\n" if section == "co" else ""))
    for value in ("null", "{tp_comm_overlap:false}"):
        for prefix in ("", "+", "++"):
            word = f"{prefix}comm_overlap={value}"
            theirs, ours = _bridge(str(path), word), _skill(str(path), word, version)
            assert (theirs is None) == (ours is None), (version, word, theirs, ours)
            if theirs is not None:
                assert "Could not append" in theirs and "Could not append" in ours, (word, theirs, ours)


@pytest.mark.parametrize("words", [["++ddp.overlap_grad_reduce=true", "+ddp.overlap_grad_reduce=false"],
                                   ["+ddp.bucket_size=4", "+ddp.bucket_size=8"], ["ddp.bucket_size=4", "+ddp.bucket_size=8"],
                                   ["ddp.bucket_size=null", "+ddp.bucket_size=4"],
                                   ["ddp.bucket_size=4", "ddp.bucket_size=null", "+ddp.bucket_size=8"]])
def test_words_on_one_key_in_turn_as_bridge_takes_them(tmp_path, words):
    """fuzzA2: Hydra applies the words in turn; a + word meets the value an earlier word set."""
    from megatron.bridge.recipes.common import _pretrain_common
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    version = adapter.bridge_version()
    path = tmp_path / "run.yaml"
    path.write_text(MODEL + f"dataset:\n  {dataset_seq_length_key(version).partition('.')[2]}: 2048\n")
    try:
        process_config_with_overrides(_pretrain_common(), config_filepath=str(path), cli_overrides=words)
        theirs = None
    except Exception as exc:
        theirs = str(exc)
    try:
        api.resolve(options.overrides_of(words), config=str(path), gpus=16, gpu="h100", bridge_version=version)
        ours = None
    except UsageError as exc:
        ours = str(exc)
    assert (theirs is None) == (ours is None), (words, theirs, ours)
    if theirs is not None:
        assert "Could not append" in theirs and "Could not append" in ours, (theirs, ours)


# A perf recipe whose cfg.env_vars holds COMMON_RECIPE_ENV_VARS (NCCL_NVLS_ENABLE among them); _pretrain_common's is {}
ENV_RECIPE = "llama3_8b_pretrain_2gpu_h100_bf16_config"


def _bridge_env(recipe: str | None, path: str | None, word: str) -> str | None:
    """None where Bridge's override path takes the word over the start config (the recipe built offline, or
    _pretrain_common), else Hydra's reason."""
    import importlib

    from megatron.bridge.recipes.common import _pretrain_common
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    from mbridge_overlap.bridge.recipes import offline

    start = getattr(importlib.import_module("megatron.bridge.recipes.llama.h100.llama3"), recipe) if recipe else _pretrain_common
    with offline("h100"):
        try:
            process_config_with_overrides(start(), config_filepath=path, cli_overrides=[word])
        except Exception as exc:  # OverridesError: Failed to parse Hydra overrides: ...
            return str(exc)
    return None


def test_each_prefix_on_a_launch_variable_as_bridge_takes_it(tmp_path):
    """env_vars, a dict in Bridge's struct config, holds the start config's names and the file's: bare / + / ++ on a
    name the recipe holds, one the file holds and one neither holds, judged alike by the skill and by Bridge."""
    from mbridge_overlap.upstream.releases import get

    version = adapter.bridge_version()
    if not get(version).env_vars:
        pytest.skip(f"ConfigContainer has no env_vars in Megatron-Bridge {version}")
    path = tmp_path / "env.yaml"
    path.write_text("env_vars:\n  NCCL_DEBUG: WARN\n")
    seen = []
    for recipe, config in ((None, None), (ENV_RECIPE, None), (None, str(path))):
        for name in ("NCCL_NVLS_ENABLE", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_DEBUG"):
            for prefix in ("", "+", "++"):
                word = f"{prefix}env_vars.{name}=4"
                theirs = _bridge_env(recipe, config, word)
                try:
                    api.resolve(options.overrides_of([word]), recipe=recipe, config=config, gpus=8, bridge_version=version)
                    ours = None
                except UsageError as exc:
                    ours = str(exc)
                assert (theirs is None) == (ours is None), (recipe, config, word, theirs, ours)
                if theirs is not None:
                    reason = "Could not override" if "Could not override" in theirs else "Could not append"
                    assert reason in theirs and reason in ours, (word, theirs, ours)
                seen.append((recipe, bool(config), word, theirs is None))
    refused = sorted((r or "", f, w) for r, f, w, taken in seen if not taken)
    bare = [f"env_vars.{n}=4" for n in ("NCCL_NVLS_ENABLE", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_DEBUG")]
    assert refused == sorted([("", False, bare[0]), ("", False, bare[1]), ("", False, bare[2]),
                              (ENV_RECIPE, False, "+" + bare[0]), (ENV_RECIPE, False, bare[1]), (ENV_RECIPE, False, bare[2]),
                              ("", True, bare[0]), ("", True, bare[1]), ("", True, "+" + bare[2])]), refused
