"""Tier 2 of a recipe's provider-class fields (recheck59 AF5, recheck55 AB6): for a sample of recipes of each provider
class model_providers.json records, the recipe's config built offline with its model made an instance of that class
(the catalog's stand-in shape; a recipe that builds its provider itself keeps its own), then each model field the
class adds to GPTModelProvider's (and one it lacks, and one of another class) set by Bridge's own
create_omegaconf_dict_config + parse_hydra_overrides + apply_overrides: a word the skill takes, Bridge takes and sets;
a word the skill refuses, Bridge refuses."""

import json
import sys

import pytest

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter, recipes as bridge_recipes
from mbridge_overlap.errors import UsageError
from mbridge_overlap.upstream import catalog, releases

SAMPLE = ("MLAModelProvider", "HybridModelProvider", "MambaModelProvider", "Gemma2ModelProvider", "Qwen3VLModelProvider")
PER_CLASS = 2


def _version():
    return releases.get(adapter.bridge_version()).data_version


def _data():
    return json.loads((releases.DATA_DIR / "releases" / _version() / "model_providers.json").read_text(encoding="utf-8"))


def _cases():
    try:
        data = _data()
    except (FileNotFoundError, adapter.BridgeUnavailable, Exception):  # collected without Bridge: the tier is skipped
        return []
    out = []
    for cls in SAMPLE:
        refs = data["recipes"].get(cls, [])
        step = max(len(refs) // PER_CLASS, 1)
        out += [(cls, ref) for ref in refs[::step][:PER_CLASS]]
    return out


def _class_named(name):
    import megatron.bridge.models  # noqa: F401

    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("megatron.bridge.") and mod is not None and isinstance(getattr(mod, name, None), type):
            return getattr(mod, name)
    raise AssertionError(f"no class {name} in Bridge")


def _entry(ref):
    version = adapter.bridge_version()
    for e in catalog.entries(version):
        if catalog.reference(e, version) == ref or e["name"] == ref:
            return e
    pytest.skip(f"{ref} is not a recipe of {version}'s catalog")


def _config(entry, cls, tmp_path):
    """The recipe's config, its model an instance of `cls` where the offline build gave the stand-in."""
    import torch.nn.functional as F

    real = _class_named(cls)

    def provider(self, *a, **k):
        bridge_recipes._StandIn.built += 1
        return real(**bridge_recipes.STANDIN, activation_func=F.silu)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bridge_recipes._StandIn, "to_megatron_provider", provider)
        try:
            cfg = bridge_recipes.rebuild(entry, tmp_path)
        except Exception as exc:  # a class the stand-in shape cannot build (a vision model's own configs)
            pytest.skip(f"{entry['name']}: {type(exc).__name__} {str(exc)[:120]}")
    assert type(cfg.model).__name__ == cls, (entry["name"], type(cfg.model).__name__)
    return cfg


def _bridge_sets(cfg, word):
    """Bridge's override path (training/utils/omegaconf_utils.py): the value set, or the exception it raises."""
    from omegaconf import OmegaConf
    from megatron.bridge.training.utils.omegaconf_utils import apply_overrides, create_omegaconf_dict_config, parse_hydra_overrides

    omega, excluded = create_omegaconf_dict_config(cfg)
    omega = parse_hydra_overrides(omega, [word])
    apply_overrides(cfg, OmegaConf.to_container(omega, resolve=True), excluded)
    return getattr(cfg.model, word.partition("=")[0].partition(".")[2])


def _word(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value + 1)
    return None


def _skill_takes(ref, word):
    key, _, value = word.partition("=")
    try:
        api.resolve({key: value}, recipe=ref)
    except UsageError as exc:
        return str(exc)
    return True


@pytest.mark.parametrize("cls,ref", _cases())
def test_the_skill_takes_what_bridge_takes_on_the_recipe_s_class(cls, ref, tmp_path):
    data = _data()["classes"][cls]
    entry = _entry(ref)
    cfg = _config(entry, cls, tmp_path)
    tried = 0
    for name in data["adds"]:
        word = _word(getattr(cfg.model, name, None))
        if word is None:
            continue  # a list, mapping or object: not a command-line word
        assert _skill_takes(ref, f"model.{name}={word}") is True, (ref, name)
        cfg = _config(entry, cls, tmp_path)
        _bridge_sets(cfg, f"model.{name}={word}")  # raises where Bridge refuses
        tried += 1
    assert tried
    other = "hybrid_layer_pattern" if "hybrid_layer_pattern" not in data["adds"] else "q_lora_rank"
    refused = [other] + [n for n in data["lacks"] if _word(getattr(_class_named("GPTModelProvider"), n, None)) is not None][:3]
    for name in refused:
        assert _skill_takes(ref, f"model.{name}=1") is not True, (ref, name)
        with pytest.raises(Exception, match=name):
            _bridge_sets(_config(entry, cls, tmp_path), f"model.{name}=1")


def test_a_llama_recipe_s_model_is_gpt_s_and_refuses_mla_fields(tmp_path):
    ref = "llama3_8b_pretrain_config"
    entry = _entry(ref)
    cfg = bridge_recipes.rebuild(entry, tmp_path)
    assert type(cfg.model).__name__ == "GPTModelProvider"
    assert "not a field of model" in _skill_takes(ref, "model.q_lora_rank=8")
    with pytest.raises(Exception, match="q_lora_rank"):
        _bridge_sets(cfg, "model.q_lora_rank=8")


@pytest.mark.parametrize("cls, field, value", [("MambaModelProvider", "hybrid_layer_pattern", "M-M-"),
                                               ("SarvamMLAModelProvider", "q_lora_rank", 512)])
def test_a_saved_config_s_provider_class_that_no_recipe_builds_is_read(cls, field, value, tmp_path):
    """recheck61 AH4, fuzzV V2-11: a config Bridge saved (cfg.to_yaml) whose model is a provider class no shipped
    recipe builds had its class's own fields called another release's and their overrides refused: the skill takes
    what Bridge's ConfigContainer.from_yaml and its override path take."""
    import torch.nn.functional as F
    from megatron.bridge.training.config import ConfigContainer

    data = _data()
    assert cls in data["classes"] and not any(cls in label.split(" | ") for label in data["recipes"])
    real = _class_named(cls)
    assert field in {f.name for f in __import__("dataclasses").fields(real)}
    cfg = bridge_recipes.rebuild(_entry("llama32_1b_pretrain_config"), tmp_path)
    cfg.model = real(**bridge_recipes.STANDIN, activation_func=F.silu)
    saved = tmp_path / "run_config.yaml"
    cfg.to_yaml(str(saved))
    word = f"model.{field}={value}"
    assert _bridge_sets(ConfigContainer.from_yaml(str(saved)), word) == value  # Bridge takes it
    out = api.resolve({f"model.{field}": str(value)}, config=str(saved), gpus=8).to_dict()
    assert not [n for n in out.get("notes", []) if "ignored" in n], out.get("notes")
