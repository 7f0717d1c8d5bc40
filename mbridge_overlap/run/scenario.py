"""One scenario: every input of an answer in one object, with one defaulting rule.

A scenario is what a verb is asked about: a release, a starting point (Bridge's recipe baseline or a shipped recipe),
a saved run config or override file, dotted overrides, the GPU count and type, Transformer Engine, the machine facts
and the launcher's environment. `build()` is the only place where a default is chosen: None means "not given" and
takes the default below, an empty text is an error, and `assumed` says where each value came from.

    gpus   given, else the saved run config's (comm_overlap.data_parallel_size x TP x PP x CP), else the count in the
           recipe's name, else the recipe's smallest layout (the least common multiple of TP x PP x CP and of the expert
           grid ETP x EP x PP, as the catalog resolved it)
    gpu    given, else the recipe's, else h100
    task   given, else the recipe's, else pretrain
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

from ..upstream import catalog, releases
from . import flex, layers, machine, request, resolver, runconfig
from ..errors import UsageError
from dataclasses import dataclass, field, replace
from .request import Request
from ..safeio import MAX_GPUS, shown

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs a cold start about 2 ms
    from typing import Any


LAUNCHER = "launcher:"  # a fix's key that changes the launcher's environment, not the config


@dataclass
class Scenario:
    release: releases.Release
    recipe: dict | None  # the catalog entry it starts from; None: Bridge's _pretrain_common baseline
    config: runconfig.RunConfig | None  # a saved run config or an override file, applied before the overrides
    overrides: dict  # dotted key -> value, as given
    gpus: int
    gpu: str
    te: bool
    machine: machine.Machine
    launcher_env: dict  # what the launcher exports before runtime_config_update(); {}: nothing known
    task: str
    family: str | None  # the model family (llama3_70b): chooses NCCL_P2P_NET_CHUNKSIZE
    request: Request
    shape: dict = field(default_factory=dict)  # hidden_size, seq_length, micro_batch_size: what presets are tuned for (None: unknown)
    assumed: dict = field(default_factory=dict)  # input -> where its value came from
    notes: list = field(default_factory=list)  # what the inputs left out (fields another release has)

    def derive(self, overrides: Mapping[str, Any], remove=()) -> "Scenario":
        """The same scenario with `overrides` on top (and `remove`d keys of the request dropped): what a fix proves.
        A key `launcher:NAME` changes the launcher's environment instead: NAME exported with the value, or unset (None)."""
        config = {k: v for k, v in overrides.items() if not k.startswith(LAUNCHER)}
        launcher = dict(self.launcher_env)
        for key, value in overrides.items():
            if key.startswith(LAUNCHER):
                if value is None:
                    launcher.pop(key[len(LAUNCHER):], None)
                else:
                    launcher[key[len(LAUNCHER):]] = str(value)
        return replace(self, request=self.request.derive(config, remove), overrides={**self.overrides, **config}, launcher_env=launcher)

    def resolve(self) -> resolver.State:
        """The resolver's state after runtime_config_update() for this scenario: the one path every verb and every
        fix proof takes (analysis.state_of)."""
        state = resolver.run(self.request, self.gpus, self.te, self.gpu, self.launcher_env, self.machine.te_version)
        state.scenario = self
        return state

    def to_dict(self) -> dict:
        typed = self.request.explicit
        return {
            "recipe": self.recipe["name"] if self.recipe else None,
            "config": str(self.config.path) if self.config else None,
            "overrides": {k: _plain(typed.get(k, v)) for k, v in self.overrides.items()},
            "gpus": self.gpus, "gpu": self.gpu, "te": self.te, "task": self.task, "family": self.family,
            "launcher_env": sorted(self.launcher_env), "assumed": dict(self.assumed), "machine": self.machine.to_dict(),
        }


def _plain(value):
    return value if isinstance(value, (bool, int, float, str)) or value is None else shown(value)


def _section_made(entry, rc, overrides) -> list[str]:
    """A comm_overlap.NAME override on a recipe or config without a comm_overlap section: answered as the section made
    with those fields, which the override as written does not do in Bridge (evalT U5)."""
    keys = sorted(k for k in overrides or {} if k.startswith("comm_overlap."))
    base = rc.raw if rc else ((entry or {}).get("request") if entry else None)
    if not keys or base is None or base.get("comm_overlap") is not None or "comm_overlap" in (overrides or {}):
        return []
    what = f"recipe {entry['name']}" if entry and not rc else "the config"
    return [f"{what} has no comm_overlap section: Bridge's Hydra overrides refuse {keys[0]}=... as written (the "
            "section is null; in Python cfg.comm_overlap is None), and this answer is that of a CommOverlapConfig "
            "section made with the fields given (in Python cfg.comm_overlap = CommOverlapConfig(...); plan --format "
            "hydra writes ++comm_overlap={...}), which also sets the DP knobs explain COMM_OVERLAP_ABSENT lists"]


def build(*, recipe: str | None = None, config: str | os.PathLike | Mapping | runconfig.RunConfig | None = None,
          overrides: Mapping[str, Any] | None = None, gpus: int | None = None, gpu: str | None = None, te: bool = True,
          bridge_version: str | None = None, launcher_env: Mapping[str, str] | None = None, task: str | None = None,
          family: str | None = None, machine_facts: Mapping[str, Any] | None = None,
          shape: Mapping | None = None, side: str | None = None, catalog_entry: dict | None = None) -> Scenario:
    """The scenario of a question. recipe: a recipe reference (catalog_entry: its catalog entry, passed within the
    package, never by the API: fuzzW W2-3, a mapping given as the recipe passed the API's check); config: a run config path, a
    RunConfig or a ConfigContainer-shaped mapping; machine_facts: machine.describe's keywords (nvlink_domain, ...);
    shape: the model's hidden_size, seq_length and micro_batch_size where the config does not give them; side: which
    of diff's two scenarios this is ("before", "after"), for messages that name its flags."""
    release = releases.get(bridge_version)
    entry = catalog.require_built(catalog_entry) if catalog_entry is not None else _recipe(recipe, release)
    rc = _config(config)
    notes = _written_by_another_release(rc, release, bridge_version)
    assumed: dict = {}
    written = runconfig.written_by_bridge(rc) if rc else frozenset()
    gpu_name = _pick(assumed, "gpu", gpu, (entry or {}).get("gpu"), "the recipe's", "h100", "default (pass --gpu)")
    gpu_name = releases.gpu(gpu_name)["name"]
    entry, built = flex.for_gpu(entry, gpu_name, catalog.release_of(release))  # (evalS V1)
    notes += [built] if built else []
    try:
        req = request.build(release, dict(overrides or {}), rc.raw if rc else None, strict=not (rc and rc.saved), base=entry,
                            written=written, model_target=_family_provider(family, release) if entry is None else None)
    except UsageError as exc:
        raise UsageError(f"{rc.path}: {exc}" if rc and str(rc.path) not in str(exc) else str(exc)) from None
    notes += [_skipped_note(rc, release, req.skipped)] if req.skipped else []
    notes += _section_made(entry, rc, overrides)
    if entry is not None and catalog.release_of(release) != release.version:
        notes.append(f"recipe {entry['name']} as Megatron-Bridge {catalog.release_of(release)} ships it: this skill has no "
                     f"catalog of {release.version}'s recipes")
    if entry is None and releases.given("--task", task) is None and req.context.get("dataset.sft"):
        task, assumed["task"] = ("peft" if rc and rc.raw.get("peft") else "sft"), "the config's dataset class"
    task = releases.task(_pick(assumed, "task", task, (entry or {}).get("task"), "the recipe's", "pretrain", "default")
                         if assumed.get("task") is None else task)
    notes += _unknown_dataset_class(req, release, task, assumed)
    notes += _model_seq_length(req, release) if entry is None else []
    family = family if family is not None else (entry or {}).get("model")
    return Scenario(
        release=release, recipe=entry, config=rc, overrides=dict(overrides or {}),
        gpus=_gpus(gpus, rc, entry, assumed, f"--gpus-{side}" if side else "--gpus", release),
        gpu=gpu_name, te=bool(te), machine=machine.describe(gpu_name, release, **dict(machine_facts or {})),
        launcher_env=dict(launcher_env or {}), task=task, family=family, request=req, shape=_shape(shape, req, entry),
        assumed=assumed, notes=notes,
    )


def check(release, *, gpus: int | None = None, gpu: str | None = None, task: str | None = None,
          machine_facts: Mapping[str, Any] | None = None, **_others) -> None:
    """The scenario's inputs checked as build checks them, for a verb that may build no scenario (diagnose of a log
    without a config to analyse: fuzzX X2-3, --gpu a100, --task nonsense and --te-version zzz were taken silently):
    one UsageError line for the first wrong one. The recipe, config and overrides are build's own to check."""
    if gpus is not None:
        _gpus(gpus, None, None, {}, "--gpus", release)
    gpu_name = releases.gpu(gpu)["name"] if gpu is not None else "h100"
    if task is not None:
        releases.task(task)
    machine.describe(gpu_name, release, **dict(machine_facts or {}))


def _family_provider(family: str | None, release) -> tuple[str, str] | None:
    """The provider class every shipped recipe of a model family builds (MLAModelProvider for deepseek_v3), where it is
    one class other than GPTModelProvider: the model fields of a question that names the family without a recipe."""
    return None if family is None else _provider_of(family, release.version)


@functools.lru_cache(maxsize=None)
def _provider_of(family: str, version: str) -> tuple[str, str] | None:
    classes = {releases.model_provider(version, e)[0] for e in catalog.entries(catalog.release_of(releases.get(version)))
               if e.get("model") == family}
    return (classes.pop(), f"{family}'s recipes") if len(classes) == 1 and "GPTModelProvider" not in classes else None


def written_by(rc) -> list[str]:
    """The releases whose ConfigContainer has exactly the sections of a saved run config ([] for none, or not saved)."""
    if rc is None or not rc.saved:
        return []
    sections = set(rc.raw) - {"_target_"}
    return [v for v in releases.versions() if set(releases.bridge_fields(v)) == sections]


def _written_by_another_release(rc, release, asked: str | None) -> list[str]:
    """A saved ConfigContainer holds every section of the release that wrote it (to_yaml writes each field): where its
    sections are exactly another known release's and not this one's (0.5.x has no env_vars), it was written by that
    release. Refused where the release was not asked for (the answer would follow another release's rules: evalH H4),
    said in a note where it was."""
    fits = written_by(rc)
    if not fits or release.version in fits:
        return []
    sections = set(rc.raw) - {"_target_"}
    lacks = ", ".join(sorted(set(releases.bridge_fields(release.version)) - sections)) or "none"
    what = (f"{rc.path}: its sections are Megatron-Bridge {' or '.join(fits)}'s, not {release.version}'s (it lacks "
            f"{lacks}, which {release.version} always writes)")
    if asked is None:
        raise UsageError(f"{what}: pass --bridge-version {fits[-1]} for the release that wrote it, or --bridge-version "
                         f"{release.version} to read it as {release.version} (the default release is not assumed for a "
                         "file another release wrote)")
    return [f"{what}: answered with {release.version}'s rules, as asked"]


def with_model(sc: Scenario, model: str | None, shape: dict | None) -> Scenario:
    """The scenario, with what --model or --shape make known of the model where neither a recipe nor the config
    does, for every verb that takes them: the layer count for the pipeline-layout check (PIPELINE_LAYERS_UNEVEN;
    evalI D3: plan checked it, resolve and budget costed a layout Megatron-Core refuses), the hidden size for the
    userbuffers preset match (evalI D5)."""
    known = layers.model_shape(model)
    if sc.shape.get("hidden_size") is None:
        sc.shape["hidden_size"] = _positive("hidden_size", (shape or {}).get("hidden_size") or known.get("hidden_size"))
    req = sc.request
    sc.notes += _provider_differs(req, model)
    if req.origin.get("model.num_layers") in ("override", "config") or req.recipe is not None and layers.known(req):
        return sc  # (a recipe whose layer count is not known takes --shape's or --model's: evalU V1)
    n = (shape or {}).get("num_layers") or known.get("num_layers")
    if isinstance(n, int) and not isinstance(n, bool):
        req.context["model.num_layers"] = n
        req.origin["model.num_layers"] = "--shape" if (shape or {}).get("num_layers") else f"{model}'s published config"
    return sc


def provider_fields(req: Request, model: str | None) -> dict:
    """The fields --model's Bridge provider sets (a run from its checkpoint gets them) that the answer's model does not
    have: no recipe (a recipe's model is its own), neither the config nor an override sets them, and the recipe
    baseline's GPTModelProvider has another value (evalM M9: Qwen3-MoE's alltoall dispatcher against allgather)."""
    if req.recipe is not None:
        return {}
    out = {}
    for key, value in layers.model_provider(model).get("fields", {}).items():
        section, _, name = key.partition(".")
        if req.origin.get(key) not in ("override", "config") and req.section(section).get(name) != value:
            out[key] = value
    return out


def _provider_differs(req: Request, model: str | None) -> list[str]:
    """provider_fields, as the answer's notes say them."""
    source = layers.model_provider(model).get("source")
    return [f"{key}: the answer's is {req.section(key.partition('.')[0]).get(key.partition('.')[2])}, the recipe baseline's "
            f"GPTModelProvider's; Bridge's provider for {model}, which a run from its checkpoint gets, sets {value} ({source}): "
            f"pass {key}={value} to see that run" for key, value in provider_fields(req, model).items()]


SHAPE = {"hidden_size": "model.hidden_size", "seq_length": "model.seq_length", "micro_batch_size": "train.micro_batch_size"}


def _shape(given: Mapping | None, req: Request, entry: dict | None) -> dict:
    """Each dimension: given, else what the config or an override set, else what the recipe itself makes known
    (the catalog's shape: a dimension its offline stand-in model set is unknown), else None."""
    out = {}
    for name, key in SHAPE.items():
        value = (given or {}).get(name)
        if value is None and key in req.origin and req.origin[key] != "recipe":
            section, _, field_name = key.partition(".")
            value = req.section(section).get(field_name)
        if value is None and key == "model.seq_length" and req.model_seq_length_of is not None:
            value = req.model["seq_length"]  # the config's model._target_'s default, the length it runs at (said in a note)
        _positive(name, value)
        if value is None and entry is not None:
            recorded = (entry.get("shape") or {}).get(name)
            value = recorded if isinstance(recorded, int) and recorded > 0 else None  # vanilla_gpt's 0: not a shape
        if value is None and entry is not None and name == "hidden_size":
            value = layers.published_shape(entry).get(name)  # a recipe that reads its model's config: the published one's
        out[name] = value
    return out


def _positive(name: str, value):
    """A preset dimension as given: None, or a positive whole number (else the one line naming it)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise UsageError(f"--{name.replace('_', '-')}: must be a positive integer, got {shown(value)}")
    return value


def _unknown_dataset_class(req, release, task: str, assumed: dict) -> list[str]:
    """A config's dataset._target_ that is no class of the release (a project's own, which may subclass a fine-tuning
    dataset config: validate()'s isinstance takes a subclass, fuzzW W2-8). The skill cannot import it: it says what it
    took the class for, and --task sft or peft makes it fine-tuning (the CP check validate() makes of fine-tuning)."""
    target = req.dataset_target
    if (not (isinstance(target, str) and target.strip()) or target == releases.UNNAMED_DATASET
            or releases.finetuning_dataset(release.version, target) is not None):
        return []
    fine = [n.rsplit(".", 1)[-1] for n in releases.finetuning_dataset_names(release.version)]
    said = (f"the dataset class {shown(target.strip())} is not one of Megatron-Bridge {release.version}'s, and this skill "
            "cannot import it")
    if assumed.get("task") == "given" and task in ("sft", "peft"):
        req.context["dataset.sft"] = True
        return [f"{said}: taken as fine-tuning, as --task {task} says (validate()'s fine-tuning checks apply)"]
    assumed["task"] = (f"default: {said}; taken as pretraining (validate()'s fine-tuning checks off): pass --task sft "
                       f"(or peft) if it subclasses {', '.join(fine)}")
    return []


def _model_seq_length(req, release) -> list[str]:
    """Without a recipe the model's sequence length is its provider class's default where a config names the class
    (model._target_; request.build takes it from model_providers.json seq_length): said, as validate() compares it with
    the dataset's. Where no class is named (Bridge's baseline, _pretrain_common(), has no model) or the release has no
    such class, it is unknown: said where the dataset's length is given, which then is checked against nothing."""
    if req.model_seq_length_of is not None and req.origin.get("model.seq_length") not in ("config", "override"):
        return [f"model.seq_length {req.model['seq_length']}: the default of {req.model_seq_length_of} (the config's "
                f"model._target_), which the config does not set; validate() compares it with the dataset's"]
    given = [k for k in ("dataset.seq_length", "dataset.sequence_length") if req.origin.get(k) in ("config", "override")]
    if req.model["seq_length"] is not None or not given or not req.context.get("dataset.seq_length_checked"):
        return []
    if req.origin.get("model.seq_length") in ("config", "override"):
        return []  # (set to null: None, compared by validate(), resolver.validate_seq_length; recheck66 AM-4)
    target = req.model_target if req.model_target_of == "the config" else None
    why = (f"the config's model._target_ {shown(target.strip())} is no model provider class of Megatron-Bridge "
           f"{release.version} with a seq_length default" if isinstance(target, str) and target.strip() else
           "no recipe, and the config names no model provider class (model._target_) whose default is known (Bridge's "
           "baseline, _pretrain_common(), has no model)")
    return [f"model.seq_length is unknown: {why}, so {given[0]} is not checked against the model's (validate()'s "
            "SEQ_LENGTH_DATASET_MISMATCH): pass model.seq_length, or --recipe"]


def _pick(assumed: dict, name: str, given, from_recipe, recipe_says: str, default, default_says: str):
    if releases.given(f"--{name}", given) is not None:
        assumed[name] = "given"
        return given
    if from_recipe is not None:
        assumed[name] = recipe_says
        return from_recipe
    assumed[name] = default_says
    return default


def _recipe(recipe, release) -> dict | None:
    if recipe is None:
        return None
    if not isinstance(releases.given("--recipe", recipe), str):
        raise UsageError(f"--recipe: expected a recipe function name, got {shown(recipe)}")
    return catalog.require_built(catalog.lookup(recipe, catalog.release_of(release)))


def _config(config) -> runconfig.RunConfig | None:
    if config is None or isinstance(config, runconfig.RunConfig):
        return config
    if isinstance(config, Mapping):
        return runconfig.from_mapping(config)
    if isinstance(config, (str, os.PathLike)):
        return runconfig.load(releases.given("--config", config) if isinstance(config, str) else config)
    raise UsageError(f"config: expected a file path or a mapping of sections, got {type(config).__name__}")


def _gpus(gpus, rc, entry, assumed: dict, flag: str, release) -> int:
    if gpus is not None:
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise UsageError(f"{flag}: must be a positive integer, got {shown(gpus)}")
        if gpus > MAX_GPUS:
            raise UsageError(f"{flag}: {gpus:,} GPUs is more than any machine has (at most {MAX_GPUS:,})")
        assumed["gpus"] = "given"
        return gpus
    recorded = rc.recorded_gpus if rc else None
    if recorded is not None:
        assumed["gpus"] = f"the run config: comm_overlap.data_parallel_size x TP x PP x CP = {recorded}"
        return recorded
    if entry is not None and entry.get("gpus") is not None:
        assumed["gpus"] = "the recipe's name"
        return entry["gpus"]
    if entry is not None:
        smallest = catalog.smallest_world(entry["request"]["model"], release.expert_tp_one_with_ep)
        assumed["gpus"] = (f"the recipe's smallest layout, {smallest} GPUs (a multiple of TP x PP x CP and of the expert grid "
                           "ETP x EP x PP): its name gives no GPU count")
        return smallest
    if rc is not None:
        why = ("its comm_overlap.data_parallel_size is not set: runtime_config_update() fills it" if isinstance(rc.raw.get("comm_overlap"), dict)
               else "it has no comm_overlap section, whose data_parallel_size would")  # (evalQ Q4)
        raise UsageError(f"{flag}: {rc.path} does not record the GPU count ({why}); pass {flag} N")
    raise UsageError(f"{flag}: required (the world size) unless --recipe names a recipe or the run config records it")


def _skipped_note(rc, release, skipped: list) -> str:
    shown_keys = ", ".join(skipped[:6]) + (f" and {len(skipped) - 6} more" if len(skipped) > 6 else "")
    return f"{rc.path}: not in Megatron-Bridge {release.version}'s config, ignored: {shown_keys} (saved by another release?)"
