"""Regenerate mbridge_overlap/data/releases/VERSION/bridge_fields.yaml, .../mcore_defaults.yaml, .../model_providers.json
(the model provider class of each shipped recipe whose model is not a GPTModelProvider, and that class's fields
against GPTModelProvider's, and every provider class's default seq_length: mbridge_overlap/bridge/providers.py) and
mbridge_overlap/data/tp_overlap_presets.yaml from the installed megatron-bridge and megatron-core (names, preset values
and dataclass defaults only; no Bridge code is copied). Run with the Python of the release's venv:

    $(scripts/bridge_env.sh [--release VERSION] --print-python) tools/gen_bridge_data.py [--check]

tests/bridge/test_release_data.py fails when the shipped files and the installed package disagree.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

# Read once when huggingface_hub is imported: set before anything imports Bridge, or each hub call a recipe makes while
# model_providers.json is collected waits on the network.
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import generated  # noqa: E402  (standard library only: Bridge is imported where it is needed)


def field_names(obj) -> list[str]:
    return sorted(f.name for f in dataclasses.fields(obj) if not f.name.startswith("_"))


def dataset_fields(baseline: list[str]) -> list[str]:
    """cfg.dataset is one of several dataset config classes (pretraining, fine-tuning, ...): the fields of any of them."""
    import megatron.bridge.training.config as config_mod

    names = set(baseline)
    for cls in vars(config_mod).values():
        if isinstance(cls, type) and cls.__name__.endswith("DatasetConfig") and dataclasses.is_dataclass(cls):
            names.update(field_names(cls))
    return sorted(names)


def dataset_classes() -> dict:
    """Every dataset config class a ConfigContainer's dataset may be, by module path and name (as a saved run config's
    dataset._target_ writes it) with its fields: the members of ConfigContainer.dataset's annotation and every subclass
    of them megatron.bridge defines, dataclasses only (a field is a dataclass field). fuzzW W2-7: a field one class has
    is not every class's."""
    import typing

    import megatron.bridge.training.config as config_mod

    from mbridge_overlap.bridge.recipes import dataset_classes_under

    hint = typing.get_type_hints(config_mod.ConfigContainer)["dataset"]
    roots = [c for c in (typing.get_args(hint) or (hint,)) if isinstance(c, type)]
    return {f"{c.__module__}.{c.__qualname__}": field_names(c) for c in dataset_classes_under(roots)
            if dataclasses.is_dataclass(c) and c.__module__.startswith("megatron.bridge.")}


def settable_properties(classes: dict) -> dict:
    """Each dataset class's properties with a setter, where it has any (0.5.x GPTDatasetConfig.seq_length, an alias of
    Megatron-Core's sequence_length): a config file's value of one is set by apply_overrides' setattr, though Hydra's
    command line cannot name it (the OmegaConf dict holds dataclass fields only)."""
    import importlib
    import inspect

    out = {}
    for path in classes:
        module, _, name = path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except Exception:  # (a nested qualname or a module that no longer imports: no properties recorded)
            continue
        names = sorted(n for n in dir(cls) if not n.startswith("_") and isinstance(inspect.getattr_static(cls, n), property)
                       and inspect.getattr_static(cls, n).fset is not None)
        if names:
            out[path] = names
    return out


def class_name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def collect() -> tuple[dict, dict]:
    from mbridge_overlap.bridge import adapter

    comm_overlap, _, mixed_precision = adapter.import_bridge()
    cfg = adapter.baseline_config()
    sections = {
        "model": field_names(cfg.model),
        "ddp": field_names(cfg.ddp),
        "optimizer": field_names(cfg.optimizer),
        "comm_overlap": field_names(comm_overlap.CommOverlapConfig),
        "mixed_precision": field_names(mixed_precision.MixedPrecisionConfig),
    }
    for name in field_names(cfg):
        if name in sections:
            continue
        value = getattr(cfg, name)
        sections[name] = field_names(value) if dataclasses.is_dataclass(value) else []
    sections["dataset"] = dataset_fields(sections.get("dataset", []))
    presets = {
        n: dataclasses.asdict(getattr(comm_overlap, n)) for n in sorted(dir(comm_overlap)) if n.startswith("userbuffers_")
    }
    from mbridge_overlap.bridge import recipes

    return {"bridge_version": adapter.bridge_version(), "sections": sections,
            "finetuning_datasets": recipes.finetuning_dataset_names(), "dataset_classes": dataset_classes(),
            "baseline_dataset": class_name(type(cfg.dataset))}, presets


def mcore_defaults() -> dict:
    """The Megatron-Core classes Bridge's start-up configuration summary (ConfigContainer.log_non_default_values)
    compares model, ddp and optimizer against, taken from Bridge's config module by the names it imports them under,
    with the dataclass default of every field mbridge_overlap.diagnose.summary reads: a field the summary does not
    list has that value. A field the class lacks, or that has no default, is never listed (its own list). printable:
    every field name the summary can list under that class's header (the fields with a default)."""
    from importlib.metadata import version

    from mbridge_overlap.bridge import adapter
    from mbridge_overlap.diagnose.summary import FIELDS

    _, config_mod, _ = adapter.import_bridge()
    sections = {"optimizer": ["MCoreOptimizerConfig"], "ddp": ["MCoreDistributedDataParallelConfig"],
                "model": ["MCoreTransformerConfig", "MCoreMLATransformerConfig"]}
    classes = {}
    for section, names in sections.items():
        for alias in names:
            cls = getattr(config_mod, alias)
            own = {f.name: f for f in dataclasses.fields(cls) if not f.name.startswith("_")}
            defaults, not_fields, no_default = {}, [], []
            for name in FIELDS[section]:
                f = own.get(name)
                if f is None:
                    not_fields.append(name)
                elif f.default is not dataclasses.MISSING:
                    defaults[name] = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    defaults[name] = f.default_factory()
                else:
                    no_default.append(name)
            for name, value in defaults.items():
                if not _plain_value(value):
                    raise SystemExit(f"{cls.__name__}.{name}: default {value!r} is not a YAML scalar or list; the summary "
                                     "reader cannot compare it")
            printable = sorted(n for n, f in own.items()
                               if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)
            classes[cls.__name__] = {"section": section, "module": cls.__module__, "defaults": defaults,
                                     "not_fields": not_fields, "no_default": no_default, "printable": printable}
    return {"bridge_version": adapter.bridge_version(), "megatron_core": version("megatron-core"), "classes": classes}


def _plain_value(value) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, list) and all(_plain_value(v) for v in value)


def dump(data, header: str) -> str:
    import yaml

    return header + yaml.safe_dump(data, sort_keys=True, width=120)


def outputs() -> dict:
    """{path: text} for the installed release: its field names under data/releases/VERSION/, and the presets, which
    every verified release shares (one file; a release whose presets differ stops the script)."""
    from mbridge_overlap.bridge import adapter
    from mbridge_overlap.upstream import releases

    fields, presets = collect()
    defaults = mcore_defaults()
    version = releases.get(fields["bridge_version"]).data_version
    if version != fields["bridge_version"]:  # releases.yaml's data_of: another release's files hold this one's data,
        # held here to what the installed package gives (the version labels aside)
        fields = {**fields, "bridge_version": version}
        defaults = {**defaults, "bridge_version": version, "megatron_core": releases.get(version).megatron_core}
    providers_path = ROOT / f"mbridge_overlap/data/releases/{version}/model_providers.json"
    datasets: dict = {}
    out_providers = model_providers(version, providers_path, datasets)
    # each shipped recipe's dataset class where it is not the baseline's (a recipe that does not build offline: none)
    recipes_of: dict = {}
    for ref, cls in sorted(datasets.items()):
        if class_name(cls) != fields["baseline_dataset"]:
            recipes_of.setdefault(class_name(cls), []).append(ref)
        if class_name(cls) not in fields["dataset_classes"] and dataclasses.is_dataclass(cls):
            fields["dataset_classes"][class_name(cls)] = field_names(cls)
    fields["dataset_recipes"] = recipes_of
    fields["dataset_class_properties"] = settable_properties(fields["dataset_classes"])
    from mbridge_overlap.upstream import catalog

    fields["dataset_recipes_unbuilt"] = sorted(r for r in (catalog.reference(e, adapter.bridge_version())
                                                           for e in catalog.entries(adapter.bridge_version())) if r not in datasets)
    shared = ROOT / "mbridge_overlap/data/tp_overlap_presets.yaml"
    out = {ROOT / f"mbridge_overlap/data/releases/{version}/bridge_fields.yaml":
           dump(fields, f"# Field names of each ConfigContainer section in megatron-bridge {version}, generated by tools/gen_bridge_data.py.\n")}
    out[ROOT / f"mbridge_overlap/data/releases/{version}/mcore_defaults.yaml"] = dump(defaults, (
        f"# The Megatron-Core {defaults['megatron_core']} classes that megatron-bridge {version}'s start-up configuration summary\n"
        "# (ConfigContainer.log_non_default_values) compares model, ddp and optimizer against, with the dataclass default of\n"
        "# each field mbridge_overlap/diagnose/summary.py reads (FIELDS): a field the summary does not list has that value.\n"
        "# not_fields / no_default: fields the class lacks or that have no default, which the summary never lists.\n"
        "# printable: every field name the summary can list under the class's header (a name outside it is a damaged line).\n"
        "# Generated by tools/gen_bridge_data.py from the installed packages.\n"))
    out[providers_path] = out_providers
    text = dump(presets, "# The userbuffers presets of megatron-bridge (dataclasses.asdict), the same in every verified release, to\n"
                "# recognise them in a dumped run config. Generated by tools/gen_bridge_data.py.\n")
    if shared.is_file() and shared.read_text(encoding="utf-8") != text:
        import yaml

        if yaml.safe_load(shared.read_text(encoding="utf-8")) != yaml.safe_load(text):
            raise SystemExit(f"megatron-bridge {version} has other userbuffers presets than {shared.name}: presets must become "
                             "per-release data before this release can be added")
    out[shared] = text
    return out


def model_providers(version: str, path: Path, datasets: dict | None = None) -> str:
    """model_providers.json of the installed release, from its own recipe catalog. Where another release's files stand
    for it (data_of), the committed file is kept when it says the same of every recipe this release ships."""
    import json

    from mbridge_overlap.bridge import adapter, providers
    from mbridge_overlap.upstream import catalog

    installed = adapter.bridge_version()
    data = providers.collect(catalog.entries(installed), lambda e: catalog.reference(e, installed), datasets)
    text = _json_lines({"bridge_version": version, "generated_by": "tools/gen_bridge_data.py", **data})
    if installed != version and path.is_file():
        shipped = json.loads(path.read_text(encoding="utf-8"))
        mine = {r: c for c, refs in data["recipes"].items() for r in refs}
        theirs = {r: c for c, refs in shipped["recipes"].items() for r in refs}
        if all(theirs.get(r) == c for r, c in mine.items()) and all(
                shipped["classes"].get(c) == data["classes"][c]
                and (shipped.get("decoder_rebuilt") or {}).get(c) == data["decoder_rebuilt"].get(c)
                and (shipped.get("mtp_unbuilt") or {}).get(c) == data["mtp_unbuilt"].get(c) for c in set(mine.values())) \
                and all((shipped.get("seq_length") or {}).get(c, v) == v for c, v in data["seq_length"].items()):
            return path.read_text(encoding="utf-8")
    return text


def _json_lines(data: dict) -> str:
    """JSON with one line per class and per class's recipe list (compact, and a regeneration diffs class by class)."""
    import json

    def block(d: dict) -> str:
        return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(d.items())) + "\n }"

    blocks = ("classes", "recipes", "decoder_rebuilt", "mtp_unbuilt", "seq_length")
    parts = [f"{json.dumps(k)}: {block(v) if k in blocks else json.dumps(v)}" for k, v in sorted(data.items())]
    return "{" + ",\n".join(parts) + "}\n"


def _write_compiled(path) -> None:
    """The JSON twin the skill loads (tools/gen_compiled_data.py writes them all; --check there covers this one)."""
    from mbridge_overlap.upstream import releases

    twin = releases.write_compiled(path)
    if twin is not None:
        print(f"wrote {twin.relative_to(ROOT)}")


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing them")
    args = ap.parse_args(argv)
    from mbridge_overlap.bridge import adapter
    from mbridge_overlap.upstream import releases

    installed = adapter.bridge_version()
    stands_in = releases.get(installed).data_version
    if not args.check and stands_in != installed:
        print(f"megatron-bridge {installed}'s data is {stands_in}'s (releases.yaml data_of): --check holds it "
              "to the installed package; remove data_of to give the release files of its own")
        return 1
    stale = generated.check_or_write_all(outputs().items(), args.check, mkdir=True, wrote=lambda path: f"wrote {path.relative_to(ROOT)}",
                                         then=lambda path: _write_compiled(path) if path.suffix == ".yaml" else None)
    return generated.verdict(stale, f"out of date: {', '.join(str(path.relative_to(ROOT)) for path in stale)} "
                                    "(run tools/gen_bridge_data.py with that release's Python)",
                             "bridge data matches the installed megatron-bridge" if args.check else None)


if __name__ == "__main__":
    sys.exit(main())
