"""Bridge's shipped recipe functions, built offline and resolved by real Bridge: the source of the recipe catalog.

A recipe function normally downloads its model's Hugging Face config. Offline, AutoBridge.from_hf_pretrained returns a
stand-in whose provider is a plain GPTModelProvider (the overlap path does not depend on model dimensions), and the
CUDA device queries answer as the GPU type in the recipe's name does. Where Bridge then stops on something the real
HF config would have given (a layer count a pipeline layout needs, the MoE expert count, MLA, grouped GEMM, a
dispatcher), a fixup sets it and is recorded with the recipe, so nothing is changed silently.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import functools
import importlib
import importlib.util
import io
import logging
import os
import pkgutil
import re
import warnings
from unittest import mock
from pathlib import Path

from ..upstream import catalog
from ..run import schema
from . import adapter

PACKAGES = ("megatron.bridge.recipes", "megatron.bridge.perf_recipes")
OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
# Compute capability and device name each GPU type of a recipe name reports (Bridge's flex-dispatcher check reads both).
# R100/VR200: assumed 10.x, the only reading under which Bridge 0.6.2's own VR200 recipes, which select HybridEP,
# pass its check (major 8, 9 or 10); the catalog records the assumption.
DEVICES = {
    "h100": ((9, 0), "NVIDIA H100 80GB HBM3"), "b200": ((10, 0), "NVIDIA B200"), "gb200": ((10, 0), "NVIDIA GB200"),
    "b300": ((10, 3), "NVIDIA B300"), "gb300": ((10, 3), "NVIDIA GB300"), "r100": ((10, 0), "NVIDIA R100"),
    "vr200": ((10, 0), "NVIDIA VR200"),
}
ASSUMED_DEVICES = ("r100", "vr200")
# A plain provider with the traits of the models Bridge's recipes train (a SwiGLU MLP without linear or QKV bias, as
# Llama, Qwen, DeepSeek): a check on them then sees what the real model has rather than Megatron-Core's GPT defaults.
STANDIN = dict(num_layers=96, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=32, seq_length=4104,
               vocab_size=32768, make_vocab_size_divisible_by=128, add_bias_linear=False, add_qkv_bias=False,
               gated_linear_unit=True)
MAX_FIXUPS = 8


class _StandIn:
    """What AutoBridge.from_hf_pretrained returns offline."""

    built = 0  # providers made since the count was last reset: whether a recipe's model is the stand-in
    experts: int | None = None  # its expert count, where the recipe's model turned out to be an MoE one (STANDIN_EXPERTS)

    def __init__(self, *args, **kwargs):
        pass

    def to_megatron_provider(self, *args, **kwargs):
        import torch.nn.functional as F
        from megatron.bridge.models import GPTModelProvider

        _StandIn.built += 1
        moe = {"num_moe_experts": _StandIn.experts} if _StandIn.experts else {}
        return GPTModelProvider(**STANDIN, **moe, activation_func=F.silu)

    def __getattr__(self, name):  # any other AutoBridge call a recipe makes: inert
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def offline(gpu: str | None):
    """No network, the stand-in model, CUDA device queries answered as the named GPU does; Bridge's prints muted."""
    import torch
    from megatron.bridge.models.conversion import auto_bridge

    (major, minor), name = DEVICES.get(gpu or "h100", DEVICES["h100"])
    props = mock.Mock(major=major, minor=minor, multi_processor_count=132, total_memory=80 << 30)
    props.name = name
    saved = {k: os.environ.get(k) for k in OFFLINE_ENV}
    os.environ.update({k: "1" for k in OFFLINE_ENV})
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(auto_bridge.AutoBridge, "from_hf_pretrained", classmethod(lambda cls, *a, **k: _StandIn())))
            stack.enter_context(mock.patch.object(torch.cuda, "get_device_capability", lambda *a, **k: (major, minor)))
            stack.enter_context(mock.patch.object(torch.cuda, "get_device_properties", lambda *a, **k: props))
            stack.enter_context(mock.patch.object(torch.cuda, "get_device_name", lambda *a, **k: name))
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def discover() -> list[tuple[str, str, object]]:
    """(package, public name, function) for every public *_config name of the two recipe packages whose function is
    defined in them: the recipe functions and the names that alias them (llama3_8b_pretrain_config is
    llama3_8b_pretrain_2gpu_h100_bf16_config; some B200 perf recipes are their GB200 twins)."""
    os.environ.update({k: "1" for k in OFFLINE_ENV})
    logging.disable(logging.WARNING)
    found: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for package in PACKAGES:
            if importlib.util.find_spec(package) is None:
                continue  # megatron.bridge.perf_recipes came with 0.6
            root = importlib.import_module(package)
            for info in pkgutil.walk_packages(root.__path__, prefix=package + "."):
                module = importlib.import_module(info.name)
                for name, fn in vars(module).items():
                    if name.endswith("_config") and not name.startswith("_") and callable(fn) \
                            and str(getattr(fn, "__module__", "")).startswith(package + ".") and _takes_no_arguments(fn):
                        found.setdefault((package.rsplit(".", 1)[1], name), fn)
    return sorted(((package, name, fn) for (package, name), fn in found.items()), key=lambda item: (item[1], item[0]))


def _takes_no_arguments(fn) -> bool:
    """Recipe functions build with no argument; *_config helpers that need one (dataset builders) are not recipes."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


# Fixups, each for a message Bridge gives when the stand-in lacks what the real HF config has.
def _fix_layers(cfg, m):
    return [("model.num_layers", int(m.group(1)))]


_FIXUPS = [
    (re.compile(r"num_moe_experts must be non None|'>' not supported between instances of 'NoneType' and 'int'"),
     lambda cfg, m: [("model.num_moe_experts", 64 * max(cfg.model.expert_model_parallel_size, 1))] if cfg.model.num_moe_experts is None else None),
    (re.compile(r"only supported with multi_latent_attention"), lambda cfg, m: [("model.multi_latent_attention", True)]),
    (re.compile(r"only supported with moe_grouped_gemm"), lambda cfg, m: [("model.moe_grouped_gemm", True)]),
    (re.compile(r"moe cuda graph is only supported for MoE"), lambda cfg, m: [("model.num_moe_experts", 64)]),
    (re.compile(r"Number of decoder layers (\d+)\s*must match num_layers"), _fix_layers),
    (re.compile(r"overlap_moe_expert_parallel_comm is only supported when moe_token_dispatcher_type"),
     lambda cfg, m: [("model.moe_token_dispatcher_type", "alltoall")]),
    (re.compile(r"--data-cache-path must be provided"), lambda cfg, m: [("dataset.path_to_cache", "<scratch>")]),
    (re.compile(r"Sequence length in model config: (\d+), Sequence length in dataset config: (\d+)"),
     lambda cfg, m: [("model.seq_length", int(m.group(2)))]),
]
_LAYOUT = re.compile(r"middle layers|layers at middle stage|after enable\s*account_for|num_layers.*divisible|divisible by.*pipeline", re.I)


def _set(cfg, key: str, value, scratch: Path) -> None:
    obj = cfg
    *path, name = key.split(".")
    for part in path:
        obj = getattr(obj, part)
    setattr(obj, name, str(scratch) if value == "<scratch>" else value)


STANDIN_EXPERTS = catalog.STANDIN_EXPERTS


def _build(fn, gpu, fixups, scratch: Path):
    _StandIn.built = 0
    _StandIn.experts = next((value for key, value in fixups if key == STANDIN_EXPERTS), None)
    try:
        with offline(gpu):
            cfg = fn()
    finally:
        _StandIn.experts = None
    cfg._mbridge_standin = _StandIn.built > 0  # read by shape() before the fixups below change anything
    for key, value in fixups:
        if key != STANDIN_EXPERTS:
            _set(cfg, key, value, scratch)
    return cfg


def rebuild(entry: dict, scratch: Path, gpu: str | None = None):
    """A catalog entry's recipe built again as entry() built it (its fixups, recorded KEY=VALUE, applied), before
    runtime_config_update(); with `gpu`, as on a node of that type (CUDA reported available: a build that chooses its
    dispatcher by the GPU decides so, evalS V1, recheck52 W1), else as the catalog built it."""
    import torch
    import yaml

    fn = getattr(importlib.import_module(entry["module"]), entry.get("alias_of") or entry["name"])
    fixups = [(key, yaml.safe_load(value)) for key, _, value in (f.partition("=") for f in entry.get("fixups") or [])]
    if gpu is None:
        return _build(fn, entry.get("gpu"), fixups, scratch)
    with mock.patch.object(torch.cuda, "is_available", lambda: True):  # (its own GPU type too: recheck52 W1)
        return _build(fn, gpu, fixups, scratch)


def _fixup_for(cfg, error: str) -> list | None:
    for pattern, fix in _FIXUPS:
        m = pattern.search(error)
        if m:
            return fix(cfg, m)
    return None


def _layer_count(fn, gpu, fixups, scratch, gpus) -> int | None:
    """A num_layers that satisfies the recipe's pipeline layout (the real model's count is not known offline)."""
    for n in sorted(range(1, 257), key=lambda n: abs(n - STANDIN["num_layers"])):
        cfg = _build(fn, gpu, fixups + [("model.num_layers", n)], scratch)
        error, _ = runtime(cfg, gpus, gpu)
        if not (error and _LAYOUT.search(error)):
            return n
    return None


def build(fn, gpu: str | None, gpus: int, scratch: Path):
    """Build the recipe offline with the fixups it needs; (cfg before runtime_config_update, fixups, Bridge's
    error or None, the environment runtime_config_update installed, cfg after)."""
    fixups: list = []
    for _ in range(MAX_FIXUPS):
        cfg = _build(fn, gpu, fixups, scratch)
        if getattr(cfg, "peft", None) is not None and not _exists(getattr(cfg.checkpoint, "pretrained_checkpoint", None)):
            fixups.append(("checkpoint.pretrained_checkpoint", "<scratch>"))
            continue
        after = copy.deepcopy(cfg)
        error, env = runtime(after, gpus, gpu)
        extra = _fixup_for(cfg, error) if error else None
        if error and extra is None and _LAYOUT.search(error):
            n = _layer_count(fn, gpu, fixups, scratch, gpus)
            extra = [("model.num_layers", n)] if n else None
        if extra and cfg._mbridge_standin:  # the stand-in's own experts, not a count set after the recipe decided
            extra = [(STANDIN_EXPERTS if key == "model.num_moe_experts" else key, value) for key, value in extra]
        if not extra or any(f in fixups for f in extra):
            return cfg, fixups, error, env, after
        fixups += extra
    return cfg, fixups, error, env, after


def _exists(path) -> bool:
    return bool(path) and Path(str(path)).exists()


def runtime(cfg, gpus: int, gpu: str | None) -> tuple[str | None, dict]:
    """runtime_config_update() with WORLD_SIZE=gpus and no launch variables inherited from this shell."""
    _, config_mod, _ = adapter.import_bridge()
    saved = dict(os.environ)
    for name in getattr(cfg, "env_vars", {}):
        os.environ.pop(name, None)  # setdefault: a value inherited from this shell would win over the recipe's
    os.environ["WORLD_SIZE"] = str(gpus)
    before = dict(os.environ)
    try:
        with offline(gpu):
            config_mod.runtime_config_update(cfg)
        return None, {k: v for k, v in os.environ.items() if before.get(k) != v}
    except Exception as exc:  # Bridge raises AssertionError, ValueError, TypeError, RuntimeError
        return describe(exc), {}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _json(value):
    """A config value as JSON: enums by name, dtypes and other objects by their string, lists kept."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return str(value)


def record(cfg) -> dict:
    """What a recipe requests on the overlap path: schema.RECORDED fields by section, comm_overlap with its preset
    by name, the mixed-precision recipe (name and the fields that matter) and env_vars."""
    out = {}
    for section, names in schema.RECORDED.items():
        obj = getattr(cfg, section, None)
        out[section] = {n: _json(getattr(obj, n)) for n in names if obj is not None and hasattr(obj, n)}
    for key in ("checkpoint.save", "checkpoint.load"):
        section, name = key.split(".")
        out[section][name] = None if getattr(cfg.checkpoint, name) is None else "set"  # only whether it is set matters
    out["comm_overlap"] = _comm_overlap(cfg.comm_overlap)
    out["mixed_precision"] = mixed_precision(cfg.mixed_precision)
    out["env_vars"] = {k: _json(v) for k, v in (getattr(cfg, "env_vars", None) or {}).items()}
    out["peft"] = peft(getattr(cfg, "peft", None))
    out["dataset"]["sft"] = isinstance(cfg.dataset, finetuning_dataset_classes())
    out["dataset"]["seq_length_checked"] = seq_length_checked(cfg)
    # only whether the recipe sets them matters (validate() checks packing against it); 0.5.x has no such field
    out["dataset"]["offline_packing_specs"] = getattr(cfg.dataset, "offline_packing_specs", None) is not None
    return out


@functools.lru_cache(maxsize=None)
def finetuning_dataset_classes() -> tuple:
    """The dataset config classes the installed Bridge's ConfigContainer.validate() takes as fine-tuning: those its
    CP check (calculate_per_token_loss, average_in_collective) names with isinstance, read from validate()'s source
    (0.6: GPTSFTDatasetConfig, DirectHFSFTDatasetConfig, EnergonDatasetConfig, MockVLMSFTDatasetConfig; 0.5.x:
    FinetuningDatasetConfig), and every subclass of them Bridge's data package defines (isinstance takes those too)."""
    import inspect

    from megatron.bridge.training import config as bridge_config

    source = inspect.getsource(bridge_config.ConfigContainer.validate)
    m = re.search(r"isinstance\(\s*self\.dataset,\s*\(?([\w\s,]*?)\)?\s*,?\s*\):\s*(?:#[^\n]*\n\s*)*"
                  r"assert self\.model\.calculate_per_token_loss", source)
    if m is None:
        raise RuntimeError("ConfigContainer.validate's fine-tuning CP check not found: read it again")
    return dataset_classes_under([getattr(bridge_config, n.strip()) for n in m[1].split(",") if n.strip()])


def dataset_classes_under(roots) -> tuple:
    """The classes and every subclass of them Bridge defines, with every module of megatron.bridge.data imported (a
    builder whose optional dependency is missing defines no subclass here)."""
    import megatron.bridge.data as data

    for info in pkgutil.walk_packages(data.__path__, data.__name__ + "."):
        with contextlib.suppress(Exception):
            importlib.import_module(info.name)
    seen, todo = {}, list(roots)
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen[cls] = None
            todo += cls.__subclasses__()
    return tuple(seen)


def finetuning_dataset_names() -> list[str]:
    """finetuning_dataset_classes() by module path and name, as a saved run config's dataset._target_ writes them."""
    return sorted(f"{c.__module__}.{c.__qualname__}" for c in finetuning_dataset_classes())


def seq_length_checked(cfg) -> bool:
    """Whether the installed Bridge's ConfigContainer.validate() compares this config's dataset seq_length with the
    model's: its dataset is an instance of one of the classes that check names (read from validate()'s source)."""
    import inspect

    from megatron.bridge.training import config as bridge_config

    source = inspect.getsource(bridge_config.ConfigContainer.validate)
    m = re.search(r"isinstance\(\s*self\.dataset,\s*\(([^)]*)\)\s*,?\s*\):\s*(?:#[^\n]*\n\s*)*data_seq_length", source)
    names = [n.strip() for n in m[1].split(",") if n.strip()] if m else []
    classes = tuple(c for c in (getattr(bridge_config, n, None) for n in names) if isinstance(c, type))
    return bool(classes) and isinstance(cfg.dataset, classes)


def peft(p) -> dict | None:
    """A recipe's PEFT: None without, else its scheme (the class: LoRA, DoRA, ...), the modules it adapts and its rank
    (what the budget needs: frozen base weights, the adapters' parameters)."""
    if p is None:
        return None
    dim = getattr(p, "dim", None)
    return {"scheme": type(p).__name__, "target_modules": [str(m) for m in getattr(p, "target_modules", None) or []],
            "dim": dim if isinstance(dim, int) and not isinstance(dim, bool) else None}


def shape(cfg) -> dict:
    """The model shape a userbuffers preset is tuned for, as far as the recipe itself makes it known: a dimension the
    offline stand-in model set (its Hugging Face config was not read) is None, unknown, not the stand-in's value."""
    standin = getattr(cfg, "_mbridge_standin", False)
    def own(value, standin_value=None):
        known = isinstance(value, int) and not isinstance(value, bool) and value > 0 and not (standin and value == standin_value)
        return value if known else None

    return {"hidden_size": own(cfg.model.hidden_size, STANDIN["hidden_size"]), "seq_length": own(cfg.model.seq_length, STANDIN["seq_length"]),
            "micro_batch_size": own(cfg.train.micro_batch_size)}


def _comm_overlap(co) -> dict | None:
    if co is None:
        return None
    out = {f.name: _json(getattr(co, f.name)) for f in dataclasses.fields(co) if f.name != "tp_comm_overlap_cfg"}
    out["tp_comm_overlap_cfg"] = _preset_name(co.tp_comm_overlap_cfg)
    return out


def _preset_name(value):
    name = adapter.preset_name(value)
    return name[0] if isinstance(name, list) else name


BF16_LAYER_FIELDS = ("first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")
# the fields that say which number format a mixed-precision config computes in
PRECISION_FORMAT_FIELDS = ("fp8", "fp8_recipe", "fp4")


def mixed_precision(mp) -> dict | None:
    """{"recipe": the registered recipe it equals or starts from, "fields": the fields that matter, as set}."""
    if mp is None:
        return None
    _, _, mp_mod = adapter.import_bridge()
    if isinstance(mp, str):
        return {"recipe": mp.replace("-", "_"), "fields": {}}
    values = {n: _json(getattr(mp, n)) for n in schema.MIXED_PRECISION}
    best, best_key, best_diff = None, None, None
    for name, factory in sorted(mp_mod.MIXED_PRECISION_RECIPES.items()):
        if "-" in name:
            continue
        ref = factory()
        diff = {n: v for n, v in values.items() if _json(getattr(ref, n)) != v}
        # the recipe it starts from by its number format first (a perf recipe's MXFP8 with fp8_param_gather off is still
        # MXFP8: evalM M6), then by its other fields; which layers stay BF16 (a perf recipe turns them off) breaks ties
        key = (sum(1 for n in diff if n in PRECISION_FORMAT_FIELDS), sum(1 for n in diff if n not in BF16_LAYER_FIELDS), len(diff))
        if best_key is None or key < best_key:
            best, best_key, best_diff = name, key, diff
    return {"recipe": best, "fields": best_diff}


def describe(exc: BaseException) -> str:
    """One line for the catalog, without this machine's paths (the data must not depend on where the venv lives)."""
    import megatron.bridge

    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    text = text.replace(str(Path(megatron.bridge.__file__).parent), "<site-packages>/megatron/bridge")
    text = text.replace(str(Path.home()), "~")
    return _sorted_sets(text)[:500]


def _sorted_sets(text: str) -> str:
    """A Python set of strings printed in a message ({'b', 'a'}) with its items sorted: a set's order follows the
    interpreter's string hashes, which a hash seed fixes for one build of Python, not across builds."""
    import re

    def sort(m):
        items = re.findall(r"'[^']*'", m.group(0))
        return "{" + ", ".join(sorted(items)) + "}"

    return re.sub(r"\{'[^'{}]*'(?:, '[^'{}]*')+\}", sort, text)


def outcome(cfg, error: str | None, env: dict, gpus: int) -> dict:
    """Real Bridge's answer at `gpus`: its error, or the effective fields, DP size and the environment it installed,
    and what Megatron-Core's own process-grid setup says of the layout (setup_error)."""
    if error:
        return {"gpus": gpus, "error": error}
    return {"gpus": gpus, "error": None, "data_parallel_size": cfg.data_parallel_size, "effective": adapter.effective(cfg), "env": env,
            "setup_error": grid_error(cfg, gpus)}


def grid_error(cfg, gpus: int) -> str | None:
    """Megatron-Core's initialize_model_parallel, as Bridge's _initialize_distributed calls it, run on this CPU with one
    gloo process (local_world_size=gpus, process groups not created): its grid checks at setup. None: they pass."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    m = cfg.model
    kwargs = dict(
        tensor_model_parallel_size=m.tensor_model_parallel_size, pipeline_model_parallel_size=m.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=m.virtual_pipeline_model_parallel_size, context_parallel_size=m.context_parallel_size,
        hierarchical_context_parallel_sizes=getattr(m, "hierarchical_context_parallel_sizes", None),
        expert_model_parallel_size=m.expert_model_parallel_size, expert_tensor_parallel_size=m.expert_tensor_parallel_size,
        num_distributed_optimizer_instances=cfg.ddp.num_distributed_optimizer_instances,
        order="tp-cp-ep-pp-dp" if cfg.dist.use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp", create_gloo_process_groups=False,
        local_world_size=gpus,
    )
    # one process, no network (a HashStore); torn down again, since Bridge reads the world size from an initialised
    # process group before WORLD_SIZE
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with mock.patch.object(dist, "new_group", lambda *args, **kw: object()):
            parallel_state.initialize_model_parallel(**kwargs)
        return None
    except (RuntimeError, AssertionError, ValueError) as exc:
        return describe(exc)
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def entry(package: str, name: str, fn, scratch: Path) -> dict:
    parsed, target = catalog.parse_name(name), catalog.parse_name(fn.__name__)
    parsed = {k: v if v is not None else target[k] for k, v in parsed.items()}  # an alias without them: the function's
    out = {"name": name, "package": package, "module": fn.__module__, "alias_of": fn.__name__ if fn.__name__ != name else None, **parsed}
    gpu = out.get("gpu")
    try:
        with offline(gpu):
            probe = fn()
    except Exception as exc:
        return {**out, "builds": False, "build_error": describe(exc)}
    if not hasattr(probe, "comm_overlap") or not hasattr(probe, "model"):
        return None  # a *_config helper that returns a dataset or model config, not a recipe
    from ..upstream import releases

    gpus = out.get("gpus") or catalog.smallest_world(probe.model, releases.get(adapter.bridge_version()).expert_tp_one_with_ep)
    cfg, fixups, error, env, after = build(fn, gpu, gpus, scratch)
    return {**out, "builds": True, "request": record(cfg), "shape": shape(cfg), "fixups": [f"{k}={v}" for k, v in fixups],
            "bridge": outcome(after, error, env, gpus)}


def generate(only: str | None = None, progress=None) -> dict:
    import tempfile
    import time

    from importlib.metadata import version

    if any(os.environ.get(k) != "1" for k in OFFLINE_ENV):
        raise RuntimeError(f"set {', '.join(OFFLINE_ENV)}=1 before Bridge is imported (huggingface_hub reads them once)")
    adapter.import_bridge()
    adapter.quiet()
    start = time.time()
    functions = [f for f in discover() if not only or only in f[1]]
    entries = []
    with tempfile.TemporaryDirectory(prefix="mbridge-recipes-") as scratch:
        for i, (package, name, fn) in enumerate(functions, 1):
            made = entry(package, name, fn, Path(scratch))
            if made is not None:
                entries.append(made)
            if progress and (i % 100 == 0 or i == len(functions)):
                progress(f"{i}/{len(functions)} recipes ({time.time() - start:.0f} s)")
    return {"bridge_version": version("megatron-bridge"), "megatron_core_version": version("megatron-core"),
            "generated_by": "tools/gen_recipe_catalog.py",
            "devices": {gpu: {"capability": list(cap), "name": name, "assumed": gpu in ASSUMED_DEVICES} for gpu, (cap, name) in DEVICES.items()},
            "recipes": entries}
