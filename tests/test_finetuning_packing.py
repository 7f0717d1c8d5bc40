"""What ConfigContainer.validate() reads of the dataset, read the same way from every input (evalAA AA-1, AA-2): a
saved run config's dataset class decides fine-tuning as the recipe catalog's record does, and offline_packing_specs
counts as set or not (null from the command line is not set), with no fix made moot by another fix of the answer."""

import pytest
import yaml
from conftest import ROOT

from mbridge_overlap import api
from mbridge_overlap.upstream import releases

BASELINE = ROOT / "tests" / "data" / "run_configs" / "baseline.yaml"
SFT_RECIPE = "llama3_70b_sft_32gpu_h100_fp8cs_config"


def _saved(tmp_path, dataset_class: str, cp: int = 2):
    """The saved baseline run config (Bridge 0.6.2's own to_yaml) with CP and the dataset class changed."""
    cfg = yaml.safe_load(BASELINE.read_text())
    cfg["model"]["context_parallel_size"] = cp
    cfg["dataset"]["_target_"] = dataset_class
    _, fields = releases.dataset_class("0.6.2", None, dataset_class)  # the fields that class has (fuzzW W2-7)
    cfg["dataset"] = {k: v for k, v in cfg["dataset"].items() if k == "_target_" or fields is None or k in fields}
    path = tmp_path / "run_config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_the_release_data_names_the_classes_validate_takes_as_fine_tuning():
    assert releases.finetuning_dataset("0.6.2", "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig") is True
    assert releases.finetuning_dataset("0.6.2", "megatron.bridge.data.builders.gpt_sft.FinetuningDatasetConfig") is True
    assert releases.finetuning_dataset("0.6.2", "megatron.bridge.training.config.GPTDatasetConfig") is False
    assert releases.finetuning_dataset("0.5.1", "megatron.bridge.training.config.FinetuningDatasetConfig") is True
    assert releases.finetuning_dataset("0.5.1", "megatron.bridge.data.builders.hf_dataset.HFDatasetConfig") is True
    assert releases.finetuning_dataset("0.6.2", None) is None


def test_a_saved_fine_tuning_config_with_cp_is_refused_as_validate_refuses_it(tmp_path):
    """AA-1: only the recipe catalog set the fine-tuning flag; a saved SFT run config with CP 2 resolved clean."""
    path = _saved(tmp_path, "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig")
    r = api.resolve(config=path, gpus=64)
    (f,) = [f for f in r.findings if f.id == "CP_FINETUNE_AVERAGE_IN_COLLECTIVE"]
    assert f.severity == "error" and "calculate_per_token_loss must be True" in f.message
    assert f.fix_overrides == {"model.calculate_per_token_loss": True, "ddp.average_in_collective": False}
    assert r.scenario.task == "sft" and r.scenario.assumed["task"] == "the config's dataset class"
    fixed = api.resolve(f.fix_overrides, config=path, gpus=64)
    assert not fixed.state.rejections


def test_a_saved_pretraining_config_with_cp_is_not_fine_tuning(tmp_path):
    r = api.resolve(config=_saved(tmp_path, "megatron.bridge.training.config.GPTDatasetConfig"), gpus=64)
    assert "CP_FINETUNE_AVERAGE_IN_COLLECTIVE" not in {f.id for f in r.findings}
    assert r.scenario.task == "pretrain"


def test_null_specs_from_the_command_line_are_no_specs():
    """AA-2: the text "null" was taken as set specs: a packing error Bridge does not raise, and a fix it rejects."""
    over = {"dataset.enable_offline_packing": "false", "dataset.offline_packing_specs": "null"}
    r = api.resolve(over, recipe=SFT_RECIPE)
    assert "DATASET_PACKING_REJECTED" not in {f.id for f in r.findings} and not r.state.rejections
    assert not any("offline_packing_specs" in f.message for f in r.findings if f.id == "UNMODELED_KEY")


def test_offline_packing_without_its_specs_is_refused_and_the_fix_keeps_them_off():
    r = api.resolve({"dataset.offline_packing_specs": "null"}, recipe=SFT_RECIPE)
    (f,) = [f for f in r.findings if f.id == "DATASET_PACKING_REJECTED"]
    assert "offline_packing_specs must be set when enable_offline_packing=True." in f.message
    assert f.fix_overrides == {"dataset.enable_offline_packing": False}


def test_in_batch_packing_is_refused_where_the_dataset_class_lacks_it():
    """fuzzW W2-7: GPTSFTDatasetConfig (the SFT recipe's) and GPTDatasetConfig (the baseline's) have no
    enable_in_batch_packing: Bridge's override fails (Could not override), as it does here; DirectHFSFTDatasetConfig's
    recipes take it (variable token counts per micro-batch: UB_VARIABLE_TOKEN_COUNT under TP overlap)."""
    import re

    from mbridge_overlap.errors import UsageError

    for recipe in (SFT_RECIPE, "llama3_8b_pretrain_config"):
        with pytest.raises(UsageError, match=re.escape("Could not override 'dataset.enable_in_batch_packing'")):
            api.resolve({"dataset.enable_in_batch_packing": "true"}, recipe=recipe)
    r = api.resolve({"dataset.enable_in_batch_packing": "true", "model.tensor_model_parallel_size": 2,
                     "model.sequence_parallel": "true", "comm_overlap.tp_comm_overlap": "true"},
                    recipe="gemma3_vl_12b_sft_config", gpus=8)
    assert "UB_VARIABLE_TOKEN_COUNT" in {f.id for f in r.findings}


# fuzzW W2-6: validate() reads offline_packing_specs as set unless it is None (training/config.py:1152-1163), then reads
# its .pad_cu_seqlens. What Bridge 0.6.2 answered for each value on llama3_8b_sft_config (a YAML file, then command-line
# words, through process_config_with_overrides, then runtime_config_update; tests/bridge/ holds this to it):
MUST_BE_TRUE = "enable_offline_packing must be True when offline_packing_specs is set."
MUST_BE_SET = "offline_packing_specs must be set when enable_offline_packing=True."
NO_ATTRIBUTE = "AttributeError: '{}' object has no attribute 'pad_cu_seqlens'"
YAML_VALUES = [("null", None, None), ("~", None, None), ("'null'", MUST_BE_TRUE, "str"), ("none", MUST_BE_TRUE, "str"),
               ("false", MUST_BE_TRUE, "bool"), ("0", MUST_BE_TRUE, "int"), ("''", MUST_BE_TRUE, "str"),
               ("'x'", MUST_BE_TRUE, "str")]
WORDS = [("null", None, None), ("'null'", MUST_BE_TRUE, "str"), ("none", MUST_BE_TRUE, "str"), ("false", MUST_BE_TRUE, "bool"),
         ("0", MUST_BE_TRUE, "int"), ("x", MUST_BE_TRUE, "str")]


def _packing(r):
    return [f for f in r.findings if f.id == "DATASET_PACKING_REJECTED"]


def _expected(enable: bool, refused, kind):
    if not enable:
        return refused
    return MUST_BE_SET if kind is None and refused is None else NO_ATTRIBUTE.format(kind)


@pytest.mark.parametrize("enable", [False, True])
@pytest.mark.parametrize("text, refused, kind", YAML_VALUES)
def test_specs_in_a_config_file_are_set_unless_yaml_reads_null(tmp_path, enable, text, refused, kind):
    path = tmp_path / "over.yaml"
    path.write_text(f"dataset:\n  enable_offline_packing: {str(enable).lower()}\n  offline_packing_specs: {text}\n")
    r = api.resolve(config=str(path), recipe=SFT_RECIPE)
    want = _expected(enable, refused, kind)
    if want is None:
        assert not _packing(r)
        return
    (f,) = _packing(r)
    assert want in f.message
    fixed = api.resolve(f.fix_overrides, config=str(path), recipe=SFT_RECIPE)
    assert not fixed.state.rejections, (f.fix_overrides, [x.message for x in fixed.state.rejections])
    if want != MUST_BE_SET:  # a value that is no specs: null unsets it (enable_offline_packing=true fails on it)
        assert f.fix_overrides.get("dataset.offline_packing_specs", "kept") is None


@pytest.mark.parametrize("enable", [False, True])
@pytest.mark.parametrize("word, refused, kind", WORDS)
def test_specs_on_the_command_line_are_set_unless_hydra_reads_null(enable, word, refused, kind):
    over = {"dataset.enable_offline_packing": str(enable).lower(), "dataset.offline_packing_specs": word}
    r = api.resolve(over, recipe=SFT_RECIPE)
    want = _expected(enable, refused, kind)
    if want is None:
        assert not _packing(r)
        return
    (f,) = _packing(r)
    assert want in f.message
    assert not api.resolve({**over, **f.fix_overrides}, recipe=SFT_RECIPE).state.rejections


def test_typed_specs_from_python_are_set_unless_none():
    for value, kind in ((False, "bool"), (0, "int"), ("", None), ([1], "list")):
        if kind is None:
            with pytest.raises(Exception, match="an empty value"):
                api.resolve({"dataset.offline_packing_specs": value}, recipe=SFT_RECIPE)
            continue
        (f,) = _packing(api.resolve({"dataset.offline_packing_specs": value}, recipe=SFT_RECIPE))
        assert NO_ATTRIBUTE.format(kind) in f.message
    assert not _packing(api.resolve({"dataset.offline_packing_specs": {"packed_sequence_size": 4096}}, recipe=SFT_RECIPE))


# fuzzW W2-7: a dataset field is the run's dataset class's (bridge_fields.yaml dataset_classes, generated per release)
BRIDGE_GPT = "megatron.bridge.training.config.GPTDatasetConfig"
BRIDGE_SFT = "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig"


def test_the_release_data_has_each_dataset_class_s_own_fields():
    for version in ("0.5.0", "0.5.1", "0.6.0", "0.6.2"):
        cls, fields = releases.dataset_class(version)
        assert cls == BRIDGE_GPT and "offline_packing_specs" not in fields and "enable_offline_packing" not in fields, version
    _, sft = releases.dataset_class("0.6.2", None, BRIDGE_SFT)
    assert {"offline_packing_specs", "enable_offline_packing"} <= sft and "enable_in_batch_packing" not in sft
    assert releases.dataset_class("0.6.2", None, "myproj.data.MySFTDatasetConfig") == ("myproj.data.MySFTDatasetConfig", None)


@pytest.mark.parametrize("word", ["dataset.enable_offline_packing=true", "dataset.offline_packing_specs=null",
                                  "dataset.enable_in_batch_packing=true", "dataset.pad_to_max_length=true"])
def test_a_field_the_baseline_dataset_class_lacks_is_refused_as_bridge_refuses_the_override(word):
    import re

    from mbridge_overlap.errors import UsageError

    key, _, value = word.partition("=")
    with pytest.raises(UsageError, match=re.escape(f"is not a field of GPTDatasetConfig (the dataset of Bridge's baseline) "
                                                   f"in Megatron-Bridge 0.6.2: Bridge's override fails (Could not override '{key}')")):
        api.resolve({key: value}, gpus=8)


def test_a_config_file_carrying_a_field_its_class_lacks_is_refused_as_apply_overrides_refuses_it(tmp_path):
    """The saved baseline (GPTDatasetConfig) with the SFT class's packing fields: Bridge raises AttributeError; the
    skill answered with DATASET_PACKING_REJECTED and a fix (enable_offline_packing=...) Bridge refuses too."""
    import re

    from mbridge_overlap.errors import UsageError

    cfg = yaml.safe_load(BASELINE.read_text())
    cfg["dataset"].update(enable_offline_packing=False, offline_packing_specs=True)
    path = tmp_path / "run_config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(UsageError, match=re.escape("'GPTDatasetConfig' object has no attribute 'enable_offline_packing'")):
        api.lint(str(path), gpus=16)
    over = tmp_path / "over.yaml"
    over.write_text("dataset:\n  offline_packing_specs: null\n")
    with pytest.raises(UsageError, match=re.escape("'GPTDatasetConfig' object has no attribute 'offline_packing_specs'")):
        api.resolve(config=str(over), gpus=8)
    (f,) = _packing(api.resolve(config=str(over), recipe=SFT_RECIPE))  # the SFT recipe's class has it: validate() reads it
    assert MUST_BE_SET in f.message


# fuzzW W2-8: the fine-tuning class list is matched by full path; a class the release does not define is said
def test_a_dataset_class_is_fine_tuning_by_its_full_path_only():
    assert releases.finetuning_dataset("0.6.2", "evil.GPTSFTDatasetConfig") is None
    assert releases.finetuning_dataset("0.6.2", "myproj.data.MySFTDatasetConfig") is None
    assert releases.finetuning_dataset("0.6.2", BRIDGE_SFT) is True
    assert releases.finetuning_dataset("0.6.2", BRIDGE_GPT) is False
    assert releases.finetuning_dataset("0.5.1", "megatron.bridge.data.builders.hf_dataset.HFDatasetConfig") is True


@pytest.mark.parametrize("target", ["myproj.data.MySFTDatasetConfig", "evil.GPTSFTDatasetConfig"])
def test_a_dataset_class_the_skill_cannot_import_is_said_and_task_decides(tmp_path, target):
    path = _saved(tmp_path, target)
    r = api.resolve(config=path, gpus=64)
    assert "CP_FINETUNE_AVERAGE_IN_COLLECTIVE" not in {f.id for f in r.findings}
    said = r.scenario.assumed["task"]
    assert said.startswith("default: the dataset class") and target in said and "pass --task sft" in said
    assert "GPTSFTDatasetConfig" in said
    for task in ("sft", "peft"):
        r = api.resolve(config=path, gpus=64, task=task)
        (f,) = [f for f in r.findings if f.id == "CP_FINETUNE_AVERAGE_IN_COLLECTIVE"]
        assert any("taken as fine-tuning, as --task" in n for n in r.scenario.notes)
    assert "CP_FINETUNE_AVERAGE_IN_COLLECTIVE" not in {f.id for f in api.resolve(config=path, gpus=64, task="pretrain").findings}
