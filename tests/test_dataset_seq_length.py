"""The dataset's sequence length by the word each release's dataset class takes (stop 55, left): Bridge 0.5.x's
GPTDatasetConfig holds seq_length as a property over Megatron-Core's sequence_length field (training/config.py:409-416
of 0.5.1), which Hydra's command line cannot set; 0.6.x's has a seq_length field of its own, and every fine-tuning
class has one. Real Bridge's side: tests/bridge/test_second_release.py (0.5.x, tier 3) and
tests/bridge/test_dataset_seq_length_bridge.py (the default release, tier 2)."""

import subprocess
import sys

import pytest

from mbridge_overlap import UsageError, api
from mbridge_overlap.upstream.releases import dataset_seq_length_key

LONGER = {"model.seq_length": 8192}
SFT = "megatron.bridge.training.config.FinetuningDatasetConfig"


def _mismatch(res):
    return [f for f in res.findings if f.id == "SEQ_LENGTH_DATASET_MISMATCH"]


@pytest.mark.parametrize("version, word", [("0.5.0", "dataset.sequence_length"), ("0.5.1", "dataset.sequence_length"),
                                           ("0.6.0", "dataset.seq_length"), ("0.6.2", "dataset.seq_length")])
def test_each_release_s_baseline_dataset_takes_its_own_word(version, word):
    assert dataset_seq_length_key(version) == word
    assert dataset_seq_length_key(version, target=SFT) == "dataset.seq_length"  # a field of every release's


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
def test_the_mismatch_fix_writes_the_release_s_word_and_clears_it(version):
    (f,) = _mismatch(api.resolve(LONGER, gpus=8, bridge_version=version))
    assert f.fix_overrides == {dataset_seq_length_key(version): 8192}
    assert not _mismatch(api.resolve({**LONGER, **f.fix_overrides}, gpus=8, bridge_version=version))


def test_sequence_length_is_the_length_validate_compares_on_0_5():
    assert not _mismatch(api.resolve({**LONGER, "dataset.sequence_length": 8192}, gpus=8, bridge_version="0.5.1"))
    (f,) = _mismatch(api.resolve({**LONGER, "dataset.sequence_length": 2048}, gpus=8, bridge_version="0.5.1"))
    assert "dataset config: 2048" in f.message


def test_0_6_s_sequence_length_is_not_the_one_validate_compares():
    """0.6.x's finalize() copies seq_length over sequence_length: the mismatch stands."""
    assert _mismatch(api.resolve({**LONGER, "dataset.sequence_length": 8192}, gpus=8, bridge_version="0.6.2"))


def test_the_property_is_refused_on_the_command_line_with_the_field_to_write():
    with pytest.raises(UsageError) as exc:
        api.resolve({**LONGER, "dataset.seq_length": 8192}, gpus=8, bridge_version="0.5.1")
    assert "Could not override 'dataset.seq_length'" in str(exc.value)
    assert "write dataset.sequence_length=VALUE" in str(exc.value)
    proc = subprocess.run([sys.executable, "-m", "mbridge_overlap", "resolve", "--gpus", "8", "--bridge-version", "0.5.1",
                           "model.seq_length=8192", "dataset.seq_length=8192"], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_config_file_sets_the_property_as_apply_overrides_does(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("model:\n  seq_length: 8192\ndataset:\n  seq_length: 8192\n")
    assert not _mismatch(api.resolve(config=str(cfg), gpus=8, bridge_version="0.5.1"))


def test_plan_s_budget_at_a_longer_sequence_on_0_5():
    res = api.plan(tp=2, gpus=16, model="llama3_8b", seq_length=8192, global_batch_size=64, bridge_version="0.5.1")
    budget = res.to_dict()["budget"]
    assert budget.get("iteration_ms") and "unavailable" not in budget, budget


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def test_a_config_file_s_sequence_length_is_the_length_on_0_5(tmp_path):
    """recheck65 AL1: a config file's dataset.sequence_length was dropped (the dataset section kept seq_length only), so
    a run real 0.5.1 validates was refused with SEQ_LENGTH_DATASET_MISMATCH; AL2: and a mismatch it sets was missed."""
    both = _config(tmp_path, "model:\n  seq_length: 16384\ndataset:\n  sequence_length: 16384\n")
    for version in ("0.5.1", "0.5.0"):
        res = api.resolve(config=both, recipe="llama3_8b_pretrain_config", gpus=8, bridge_version=version)
        assert not _mismatch(res), version
    only = _config(tmp_path, "dataset:\n  sequence_length: 16384\n")
    (f,) = _mismatch(api.resolve(config=only, recipe="llama3_8b_pretrain_config", gpus=8, bridge_version="0.5.1"))
    assert "dataset config: 16384" in f.message


def test_a_config_file_s_sequence_length_leaves_0_6_s_seq_length_as_it_was(tmp_path):
    """recheck65 AL2: on 0.6.x finalize() copies seq_length over sequence_length; a config file that sets only
    sequence_length keeps the baseline's seq_length (4096), which validate() compares: the mismatch stands."""
    both = _config(tmp_path, "model:\n  seq_length: 16384\ndataset:\n  sequence_length: 16384\n")
    (f,) = _mismatch(api.resolve(config=both, gpus=8, bridge_version="0.6.2"))
    assert "dataset config: 4096" in f.message


GPT = "megatron.bridge.models.gpt_provider.GPTModelProvider"
MAMBA = "megatron.bridge.models.mamba.mamba_provider.MambaModelProvider"


@pytest.mark.parametrize("version", ["0.6.2", "0.6.0", "0.5.1", "0.5.0"])
def test_a_config_s_provider_class_gives_model_seq_length_its_default(version, tmp_path):
    """stop 56 left: without a recipe model.seq_length was unknown, so a config file naming its model's class and
    setting only the dataset's length was never checked; Bridge's model is an instance of that class, whose
    seq_length default (GPTModelProvider 1024, MambaModelProvider 8192 in every release: model_providers.json
    seq_length) validate() compares with the dataset's."""
    word = dataset_seq_length_key(version).partition(".")[2]
    for target, default in ((GPT, 1024), (MAMBA, 8192)):
        path = _config(tmp_path, f"model:\n  _target_: {target}\ndataset:\n  {word}: 2048\n")
        res = api.resolve(config=path, gpus=8, bridge_version=version)
        (f,) = _mismatch(res)
        assert f"model config: {default}, " in f.message and "dataset config: 2048" in f.message
        assert any(f"model.seq_length {default}: the default of {target.rsplit('.', 1)[-1]}" in n for n in res.to_dict()["notes"])
        path = _config(tmp_path, f"model:\n  _target_: {target}\ndataset:\n  {word}: {default}\n")
        assert not _mismatch(api.resolve(config=path, gpus=8, bridge_version=version))
    path = _config(tmp_path, f"model:\n  _target_: {GPT}\n  seq_length: 2048\ndataset:\n  {word}: 2048\n")
    assert not _mismatch(api.resolve(config=path, gpus=8, bridge_version=version))  # (its own: as before)


def test_an_unknown_model_class_says_the_dataset_s_length_is_not_checked(tmp_path):
    """stop 56 left: where no class is named (the baseline has no model) or the class is not the release's, the
    answer says model.seq_length is unknown and the dataset's length is checked against nothing."""
    res = api.resolve({"dataset.seq_length": 8192}, gpus=8)
    (note,) = [n for n in res.to_dict()["notes"] if "model.seq_length is unknown" in n]
    assert "no model provider class" in note and "dataset.seq_length is not checked" in note
    path = _config(tmp_path, "model:\n  _target_: my.own.ModelProvider\ndataset:\n  seq_length: 8192\n")
    res = api.resolve(config=path, gpus=8)
    assert not _mismatch(res)
    assert any("'my.own.ModelProvider' is no model provider class" in n for n in res.to_dict()["notes"])
    assert not [n for n in api.resolve(gpus=8).to_dict()["notes"] if "seq_length" in n]  # (nothing given: nothing said)


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
def test_a_dataset_length_set_to_null_is_the_mismatch_validate_raises(version, tmp_path):
    """fuzzY Y2-4: null is a value validate() compares (no None exemption), not "unset"; a config file's null too."""
    word = dataset_seq_length_key(version)
    (f,) = _mismatch(api.resolve({"model.seq_length": 4096, word: "null"}, gpus=8, bridge_version=version))
    assert "dataset config: None" in f.message and f.fix_overrides == {word: 4096}
    (typed,) = _mismatch(api.resolve({"model.seq_length": 4096, word: None}, gpus=8, bridge_version=version))
    assert typed.message == f.message
    (upper,) = _mismatch(api.resolve({"model.seq_length": 4096, word: "NULL"}, gpus=8, bridge_version=version))
    assert upper.message == f.message  # (Hydra's null in any case, as for the model's length)
    config = tmp_path / "run.yaml"
    config.write_text(f"model:\n  seq_length: 4096\ndataset:\n  {word.partition('.')[2]}: ~\n")
    assert _mismatch(api.resolve({}, gpus=8, bridge_version=version, config=str(config)))
    assert not _mismatch(api.resolve({"model.seq_length": 4096}, gpus=8, bridge_version=version))


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
def test_a_model_length_set_to_null_is_the_mismatch_validate_raises(version, tmp_path):
    """recheck66 AM-4: model.seq_length=null (an override, or a config file's null) makes the provider's field None
    whatever its class's default, and validate() compares None with the dataset's (no None exemption): the mismatch,
    fixed by the model's set to the dataset's; not "unknown ... no model provider class"."""
    gpt = "megatron.bridge.models.gpt_provider.GPTModelProvider"
    (f,) = _mismatch(api.resolve({"model.seq_length": "null"}, gpus=8, bridge_version=version))
    assert "model config: None, Sequence length in dataset config: 4096" in f.message
    assert f.fix_overrides == {"model.seq_length": 4096}
    assert not _mismatch(api.resolve(f.fix_overrides, gpus=8, bridge_version=version))
    (typed,) = _mismatch(api.resolve({"model.seq_length": None}, gpus=8, bridge_version=version))
    assert typed.message == f.message
    word = dataset_seq_length_key(version)
    for text, over in ((f"model:\n  _target_: {gpt}\n  seq_length: 4096\n", {"model.seq_length": "null"}),
                       (f"model:\n  _target_: {gpt}\n  seq_length: null\n", {}),
                       (f"model:\n  _target_: {gpt}\n  seq_length: ~\n", {})):
        config = tmp_path / "run.yaml"
        config.write_text(text + f"dataset:\n  {word.partition('.')[2]}: 4096\n")
        res = api.resolve(over, gpus=8, bridge_version=version, config=str(config))
        (m,) = _mismatch(res)
        assert "model config: None" in m.message and m.fix_overrides == {"model.seq_length": 4096}, text
        assert not [n for n in res.to_dict()["notes"] if "seq_length is unknown" in n], text
    # both null: validate()'s None == None holds
    assert not _mismatch(api.resolve({"model.seq_length": "null", word: "null"}, gpus=8, bridge_version=version))
    # a recipe's dataset length
    (r,) = _mismatch(api.resolve({"model.seq_length": "null"}, recipe="llama3_8b_pretrain_config", bridge_version=version))
    assert r.fix_overrides == {"model.seq_length": 8192}


# (the model's length set in the file too: both sides the user's, so the fix is the dataset's word; with the model's
# left to its class's default the fix is ++model.seq_length, test_the_fix_moves_the_side_the_user_did_not_set)
_TP_FILE = ("model:\n  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  tensor_model_parallel_size: 2\n"
            "  sequence_parallel: true\n  seq_length: 1024\ndataset:\n  seq_length: 8192\n")


@pytest.mark.parametrize("extra", ["", "  sequence_length: 1024\n"])
def test_a_file_s_seq_length_property_is_written_last_and_its_word_is_the_fix(tmp_path, extra):
    """evalAE AE2-1: on 0.5.x a config file's dataset.seq_length (the property over sequence_length) puts that key in
    Bridge's merged dict after the base's sequence_length: apply_overrides writes it last, so neither a sequence_length
    beside it in the file nor dataset.sequence_length= on the command line changes the length, and Hydra takes
    dataset.seq_length= (the key exists). Real 0.5.1: only dataset.seq_length=1024 clears the mismatch."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(_TP_FILE + extra)
    (f,) = _mismatch(api.resolve(config=str(cfg), gpus=16, bridge_version="0.5.1"))
    assert "dataset config: 8192" in f.message
    assert f.fix_overrides == {"dataset.seq_length": 1024}
    assert not _mismatch(api.resolve(f.fix_overrides, config=str(cfg), gpus=16, bridge_version="0.5.1"))
    (still,) = _mismatch(api.resolve({"dataset.sequence_length": 1024}, config=str(cfg), gpus=16, bridge_version="0.5.1"))
    assert "dataset config: 8192" in still.message


def test_without_the_file_s_key_the_property_stays_refused_on_0_5(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(_TP_FILE.replace("seq_length: 8192", "sequence_length: 8192"))
    (f,) = _mismatch(api.resolve(config=str(cfg), gpus=16, bridge_version="0.5.1"))
    assert f.fix_overrides == {"dataset.sequence_length": 1024}
    with pytest.raises(UsageError, match="Could not override 'dataset.seq_length'"):
        api.resolve({"dataset.seq_length": 1024}, config=str(cfg), gpus=16, bridge_version="0.5.1")


_Q4 = ("model:\n  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  num_layers: 32\n  hidden_size: 4096\n"
       "  num_attention_heads: 32\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\n")


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
def test_the_fix_moves_the_side_the_user_did_not_set(version, tmp_path):
    """evalAE AE2-2: where the user set only the dataset's length (the model's is its class's default or the recipe's),
    the fix sets the model's to it (the run trains at the length asked for), not the user's change reverted; for a
    model a config file's model._target_ builds the word is ++model.seq_length (real 0.6.2: the bare word is refused,
    Could not override 'model.seq_length'). Where the user set the model's (or both, or neither): the dataset's moves."""
    word = dataset_seq_length_key(version)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(_Q4 + f"dataset:\n  {word.partition('.')[2]}: 8192\n")
    res = api.resolve(config=str(cfg), gpus=16, gpu="h100", bridge_version=version)
    (f,) = _mismatch(res)
    assert f.fix_overrides == {"model.seq_length": 8192}
    assert f.fix.startswith("++model.seq_length=8192"), f.fix
    assert not _mismatch(api.resolve(f.fix_overrides, config=str(cfg), gpus=16, gpu="h100", bridge_version=version))
    (r,) = _mismatch(api.resolve({word: 4096}, recipe="llama3_8b_pretrain_config", bridge_version=version))
    assert r.fix_overrides == {"model.seq_length": 4096} and r.fix.startswith("model.seq_length=4096"), r.fix
    # the model's set by the user (the file or the command line), or both: the dataset's moves, as before
    cfg.write_text(_Q4 + "  seq_length: 2048\n" + f"dataset:\n  {word.partition('.')[2]}: 8192\n")
    (m,) = _mismatch(api.resolve(config=str(cfg), gpus=16, gpu="h100", bridge_version=version))
    assert m.fix_overrides == {word: 2048}
    (b,) = _mismatch(api.resolve({"model.seq_length": 8192, word: 4096}, recipe="llama3_8b_pretrain_config",
                                 bridge_version=version))
    assert b.fix_overrides == {word: 8192}
    (o,) = _mismatch(api.resolve(LONGER, gpus=8, bridge_version=version))
    assert o.fix_overrides == {word: 8192}


@pytest.mark.parametrize("version", ["0.5.1", "0.6.2"])
def test_a_file_without_a_dataset_section_keeps_the_base_s_dataset(version, tmp_path):
    """recheck67 AN-1: Bridge merges a config file over _pretrain_common(), whose GPTDatasetConfig (seq_length=4096,
    recipes/common.py:95 in 0.5.0 to 0.6.2) a file without a dataset section keeps: the file's GPTModelProvider (1024)
    fails validate() against it, and against a command-line dataset length (real 0.6.2 and 0.5.1: 'Sequence length in
    model config: 1024, Sequence length in dataset config: 8192'; tier 2 test_dataset_seq_length_bridge.py). The skill
    dropped that dataset and compared nothing. The fix is the word Bridge takes for a file-built model,
    ++model.seq_length=N (the model's is its class's default, never the user's), and the budget is not given."""
    word = dataset_seq_length_key(version)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(_Q4)
    for words, data in (({}, 4096), ({word: 8192}, 8192)):
        res = api.resolve(words, config=str(cfg), gpus=16, gpu="h100", bridge_version=version)
        (f,) = _mismatch(res)
        assert f"Sequence length in model config: 1024, Sequence length in dataset config: {data}" in f.message
        assert f.fix_overrides == {"model.seq_length": data} and f.fix.startswith(f"++model.seq_length={data} "), f.fix
        assert not _mismatch(api.resolve({**words, **f.fix_overrides}, config=str(cfg), gpus=16, gpu="h100",
                                         bridge_version=version))
    assert not _mismatch(api.resolve({word: 1024}, config=str(cfg), gpus=16, gpu="h100", bridge_version=version))
    out = subprocess.run([sys.executable, "-m", "mbridge_overlap", "budget", "--config", str(cfg), "--gpus", "16",
                          "--gpu", "h100", "--model", "llama3_8b", "--bridge-version", version, f"{word}=8192",
                          "train.global_batch_size=64"], capture_output=True, text=True)
    assert "the config does not run (SEQ_LENGTH_DATASET_MISMATCH)" in out.stderr + out.stdout and "iteration" not in out.stdout


def test_a_log_summary_without_a_dataset_holds_no_dataset_length():
    """A log's configuration summary (a ConfigContainer dump, _target_ at the top) that prints no dataset section says
    nothing of the run's dataset: its length is not the base's 4096 (no mismatch said), unlike an override file's."""
    raw = {"_target_": "megatron.bridge.training.config.ConfigContainer", "comm_overlap": None,
           "model": {"seq_length": 2048, "tensor_model_parallel_size": 2}}
    assert not _mismatch(api.resolve(config=raw, gpus=16, gpu="h100"))


def test_every_fix_at_once_writes_the_words_each_finding_writes(tmp_path):
    """evalAF AF-6: resolve's "every fix at once" line wrote the bare model.seq_length=8192 for a file-built model
    (real 0.6.2: Could not override 'model.seq_length') beside the finding's ++model.seq_length=8192. all_fixes.fix
    (JSON) and the line are the words written for the request, by the rule of each finding's fix."""
    from mbridge_overlap.output import text

    cfg = tmp_path / "run.yaml"
    cfg.write_text(_Q4 + "dataset:\n  seq_length: 8192\n")
    res = api.resolve(config=str(cfg), gpus=16, gpu="h100")
    (f,) = _mismatch(res)
    every = res.to_dict()["all_fixes"]
    assert "++model.seq_length=8192" in f.fix and "++model.seq_length=8192" in every["fix"].split(), every
    assert "model.seq_length=8192" not in every["fix"].split()
    line = next(li for li in text.resolution(res.to_dict()).splitlines() if li.startswith("every fix at once: "))
    assert line == f"every fix at once: {every['fix']}"
    recipe = api.resolve({"model.seq_length": 2048}, recipe="llama3_8b_pretrain_config").to_dict()["all_fixes"]
    assert "dataset.seq_length=2048" in recipe["fix"].split(), recipe  # (a recipe's model holds every field: bare)
