"""What validate() reads of the dataset, against real Bridge (evalAA AA-1, AA-2): a saved fine-tuning run config with
CP 2 (Bridge's own to_yaml) is refused as validate() refuses it and its fix runs; null packing specs from the command
line are no specs, and the packing fix offered then runs."""

import copy

import pytest

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter, recipes
from mbridge_overlap.errors import UsageError
from mbridge_overlap.upstream import catalog, releases

SFT = "perf_recipes.llama3_70b_sft_32gpu_h100_fp8cs_config"
PRETRAIN = "perf_recipes.llama3_70b_pretrain_64gpu_h100_bf16_config"
# 0.5.x has no perf recipe functions: its library recipes (FinetuningDatasetConfig, GPTDatasetConfig)
OLDER = {SFT: "recipes.llama3_8b_sft_config", PRETRAIN: "recipes.llama3_8b_pretrain_config"}
CP2 = {"model.context_parallel_size": 2, "model.seq_length": 8192, "dataset.seq_length": 8192, "train.global_batch_size": 64}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("recipes")
    version = adapter.bridge_version()
    out = {}
    for name in (SFT, PRETRAIN):
        try:
            entry = catalog.lookup(name, version)
        except UsageError:  # (a perf recipe function of 0.6 on)
            entry = catalog.lookup(OLDER[name], version)
        out[name] = (entry, recipes.rebuild(entry, scratch))
    return out


def _real(built, name, over: dict) -> str | None:
    entry, cfg = built[name]
    cfg = copy.deepcopy(cfg)
    adapter.apply_overrides(cfg, over)
    return recipes.runtime(cfg, 64, "h100")[0]


def test_the_shipped_class_list_is_what_validate_reads():
    assert releases.finetuning_dataset(adapter.bridge_version(), None) is None
    names = recipes.finetuning_dataset_names()
    for name in names:
        assert releases.finetuning_dataset(adapter.bridge_version(), name) is True
    from megatron.bridge.training.config import GPTDatasetConfig

    assert releases.finetuning_dataset(adapter.bridge_version(), f"{GPTDatasetConfig.__module__}.GPTDatasetConfig") is False


@pytest.mark.parametrize("name", [SFT, PRETRAIN])
def test_a_saved_run_config_with_cp_2_is_refused_where_validate_refuses_it(built, tmp_path, name):
    entry, cfg = built[name]
    cfg = copy.deepcopy(cfg)
    adapter.apply_overrides(cfg, CP2)
    path = tmp_path / "run_config.yaml"
    cfg.to_yaml(str(path))
    error = _real(built, name, CP2)
    mine = api.resolve(config=str(path), gpus=64, gpu="h100", bridge_version=adapter.bridge_version())
    rejected = [r for r in mine.state.rejections if r.id == "CP_FINETUNE_AVERAGE_IN_COLLECTIVE"]
    if name == PRETRAIN:
        assert not rejected and (error is None or "finetuning" not in error), error
        return
    (r,) = rejected
    assert error and r.message in error, (r.message, error)
    (f,) = [f for f in mine.findings if f.id == "CP_FINETUNE_AVERAGE_IN_COLLECTIVE"]
    assert _real(built, name, {**CP2, **f.fix_overrides}) is None
    assert not api.resolve(f.fix_overrides, config=str(path), gpus=64, gpu="h100",
                       bridge_version=adapter.bridge_version()).state.rejections


@pytest.mark.parametrize("over, refused", [
    # (in-batch packing is no field of GPTSFTDatasetConfig: Bridge's override refuses it, as the skill does, fuzzW W2-7)
    ({"dataset.enable_offline_packing": False, "dataset.offline_packing_specs": None, "train.micro_batch_size": 2}, False),
    ({"dataset.offline_packing_specs": None}, True),
])
def test_null_packing_specs_are_read_as_validate_reads_them(built, over, refused):
    if not hasattr(built[SFT][1].dataset, "offline_packing_specs"):
        pytest.skip("this release has no offline packing specs (0.6 on)")
    error = _real(built, SFT, over)
    words = {k: "null" if v is None else str(v).lower() for k, v in over.items()}  # as the command line gives them
    mine = api.resolve(words, recipe=f"{built[SFT][0]['package']}.{built[SFT][0]['name']}")
    packing = [r for r in mine.state.rejections if r.id == "DATASET_PACKING_REJECTED"]
    if not refused:
        assert error is None and not packing, error
        return
    (r,) = packing
    assert error and r.message in error, (r.message, error)
    (f,) = [f for f in mine.findings if f.id == "DATASET_PACKING_REJECTED"]
    assert f.fix_overrides and _real(built, SFT, {**over, **f.fix_overrides}) is None
    every = mine.to_dict()["all_fixes"]["overrides"]
    assert _real(built, SFT, {**over, **every}) is None


# fuzzW W2-6: offline_packing_specs is set wherever it is not None, as validate() reads it; held to Bridge's own load
# path (process_config_with_overrides: a YAML file OmegaConf loads, then Hydra's words) and its validate()
YAML_VALUES = ["null", "~", "'null'", "none", "false", "0", "''", "'x'"]
WORDS = ["null", "'null'", "none", "false", "0", "x"]


def _through_bridge(built, path=None, words=()) -> str | None:
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    cfg = copy.deepcopy(built[SFT][1])
    process_config_with_overrides(cfg, str(path) if path else None, list(words))
    return recipes.runtime(cfg, 64, "h100")[0]


def _skill_packing(mine):
    return [r for r in mine.state.rejections if r.id == "DATASET_PACKING_REJECTED"]


@pytest.mark.parametrize("enable", ["false", "true"])
@pytest.mark.parametrize("text", YAML_VALUES)
def test_specs_in_a_yaml_file_are_read_as_bridge_loads_them(built, tmp_path, enable, text):
    if not hasattr(built[SFT][1].dataset, "offline_packing_specs"):
        pytest.skip("this release has no offline packing specs (0.6 on)")
    path = tmp_path / "over.yaml"
    path.write_text(f"dataset:\n  enable_offline_packing: {enable}\n  offline_packing_specs: {text}\n")
    error = _through_bridge(built, path)
    ref = f"{built[SFT][0]['package']}.{built[SFT][0]['name']}"
    mine = api.resolve(config=str(path), recipe=ref, gpus=64, gpu="h100", bridge_version=adapter.bridge_version())
    packing = _skill_packing(mine)
    if error is None or "packing" not in error and "pad_cu_seqlens" not in error:
        assert not packing, (text, error, [r.message for r in packing])
        return
    (r,) = packing
    assert r.message in error, (r.message, error)
    (f,) = [f for f in mine.findings if f.id == "DATASET_PACKING_REJECTED"]
    words = [f"{k}={'null' if v is None else str(v).lower()}" for k, v in f.fix_overrides.items()]
    assert _through_bridge(built, path, words) is None, (words, text)


@pytest.mark.parametrize("enable", ["false", "true"])
@pytest.mark.parametrize("word", WORDS)
def test_specs_as_command_line_words_are_read_as_hydra_reads_them(built, enable, word):
    if not hasattr(built[SFT][1].dataset, "offline_packing_specs"):
        pytest.skip("this release has no offline packing specs (0.6 on)")
    words = {"dataset.enable_offline_packing": enable, "dataset.offline_packing_specs": word}
    error = _through_bridge(built, None, [f"{k}={v}" for k, v in words.items()])
    ref = f"{built[SFT][0]['package']}.{built[SFT][0]['name']}"
    mine = api.resolve(words, recipe=ref, gpus=64, gpu="h100", bridge_version=adapter.bridge_version())
    packing = _skill_packing(mine)
    if error is None:
        assert not packing, (word, [r.message for r in packing])
        return
    (r,) = packing
    assert r.message in error, (r.message, error)
    (f,) = [f for f in mine.findings if f.id == "DATASET_PACKING_REJECTED"]
    fixed = {**words, **{k: "null" if v is None else str(v).lower() for k, v in f.fix_overrides.items()}}
    assert _through_bridge(built, None, [f"{k}={v}" for k, v in fixed.items()]) is None, fixed


# fuzzW W2-7: a dataset field is the run's dataset class's, per release, from data generated from the real classes
def test_the_dataset_classes_fields_are_the_installed_classes():
    import dataclasses
    import importlib

    version = adapter.bridge_version()
    data = releases._bridge_data(releases.get(version).data_version)
    for name, fields in data["dataset_classes"].items():
        module, _, cls = name.rpartition(".")
        try:
            real = getattr(importlib.import_module(module), cls)
        except Exception:  # (a module whose optional dependency this venv lacks)
            continue
        assert sorted(f.name for f in dataclasses.fields(real) if not f.name.startswith("_")) == fields, name
    assert data["baseline_dataset"] == f"{type(adapter.baseline_config().dataset).__module__}.GPTDatasetConfig"


def _hydra_refuses(cfg, key: str) -> bool:
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    try:
        process_config_with_overrides(copy.deepcopy(cfg), None, [f"{key}=null"])
    except Exception as exc:
        return "Could not override" in str(exc)
    return False


@pytest.mark.parametrize("which", ["baseline", SFT])
def test_a_dataset_field_is_refused_where_bridge_s_override_is(built, which):
    version = adapter.bridge_version()
    if which == "baseline":
        cfg, kwargs = adapter.baseline_config(), {"gpus": 8}
    else:
        entry, cfg = built[SFT]
        kwargs = {"recipe": f"{entry['package']}.{entry['name']}", "gpus": 64, "gpu": "h100"}
    checked = 0
    for name in sorted(releases.bridge_fields(version)["dataset"]):
        key = f"dataset.{name}"
        try:
            api.resolve({key: "null"}, bridge_version=version, **kwargs)
            refused = False
        except UsageError as exc:
            refused = "Could not override" in str(exc)
        assert refused == _hydra_refuses(cfg, key), (which, key)
        checked += refused
    assert checked > 0  # some field of another class is refused


# fuzzW W2-8: validate()'s isinstance takes a user's subclass of a fine-tuning class; the skill cannot import it:
# it says so, and --task sft makes it fine-tuning, which is then refused as validate() refuses it
def test_a_users_subclass_of_a_fine_tuning_class_is_said_and_task_sft_holds_to_validate(built, tmp_path):
    import dataclasses

    entry, cfg = built[SFT]
    cfg = copy.deepcopy(cfg)
    base = type(cfg.dataset)
    mine = dataclasses.make_dataclass("MySFTDatasetConfig", [], bases=(base,))
    mine.__module__ = "myproj.data"
    cfg.dataset = mine(**{f.name: getattr(cfg.dataset, f.name) for f in dataclasses.fields(base) if f.init})
    adapter.apply_overrides(cfg, CP2)
    error = recipes.runtime(copy.deepcopy(cfg), 64, "h100")[0]
    assert error and "finetuning" in error  # isinstance took the subclass
    import yaml

    path = tmp_path / "run_config.yaml"
    cfg.to_yaml(str(path))
    saved = yaml.safe_load(path.read_text())
    assert saved["dataset"]["_target_"] == "myproj.data.MySFTDatasetConfig"
    version = adapter.bridge_version()
    plain = api.resolve(config=str(path), gpus=64, gpu="h100", bridge_version=version)
    assert not [r for r in plain.state.rejections if r.id == "CP_FINETUNE_AVERAGE_IN_COLLECTIVE"]
    assert "myproj.data.MySFTDatasetConfig" in plain.scenario.assumed["task"] and "--task sft" in plain.scenario.assumed["task"]
    told = api.resolve(config=str(path), gpus=64, gpu="h100", bridge_version=version, task="sft")
    (r,) = [r for r in told.state.rejections if r.id == "CP_FINETUNE_AVERAGE_IN_COLLECTIVE"]
    assert r.message in error
