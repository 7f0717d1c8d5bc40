"""The model provider class each shipped recipe's `cfg.model` really is, and the fields of each such class and of every
other provider class of the package (a saved config's model._target_ may name any), read from the installed
megatron-bridge (tools/gen_bridge_data.py writes them to data/releases/VERSION/model_providers.json).

A recipe that builds its provider itself (HybridModelProvider(...), a Moonlight helper) is built offline and its
model's class read. A recipe that asks AutoBridge.from_hf_pretrained(HF_ID) gets the provider of the model bridge
Bridge registers for that checkpoint's architecture (register_bridge(source=..., provider=...); none named:
GPTModelProvider, as MegatronModelBridge.provider_bridge builds): the offline build records HF_ID, and HF_ARCHITECTURES
below says which architecture the checkpoint's config.json names (the one thing not in the package); an HF id it does
not list stops the generator rather than guessing.

decoder_rebuilt: the provider classes whose provide() builds a model that hands GPTModel.__init__ an MTP block spec
and then builds its decoder again from the same config (Qwen3VLGPTModel, Exaone45GPTModel), read from the sources:
the MTP block's eh_proj has turned the shared tp_comm_overlap off by then, so the rebuilt decoder gets no
userbuffers (TP_OVERLAP_OFF_MTP).
"""

from __future__ import annotations

import contextlib
import dataclasses
from unittest import mock

from . import adapter

BASE = "GPTModelProvider"

# architectures[0] of the config.json of each checkpoint a shipped recipe asks AutoBridge for, on the Hugging Face Hub
# (AutoBridge dispatches on it). The one input not read from the package: an HF id missing here stops the generator.
_ARCH = {
    "DeepseekV2ForCausalLM": ["deepseek-ai/DeepSeek-V2", "deepseek-ai/DeepSeek-V2-Lite"],
    "DeepseekV3ForCausalLM": ["deepseek-ai/DeepSeek-V3", "moonshotai/Kimi-K2-Instruct", "moonshotai/Moonlight-16B-A3B"],
    "DeepseekV4ForCausalLM": ["deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"],
    "KimiK25ForConditionalGeneration": ["moonshotai/Kimi-K2.5"],
    "GlmMoeDsaForCausalLM": ["zai-org/GLM-5.1", "zai-org/GLM-5.2"],
    "Glm4MoeForCausalLM": ["zai-org/GLM-4.5", "zai-org/GLM-4.5-Air"],
    "Glm4vMoeForConditionalGeneration": ["zai-org/GLM-4.5V"],
    "NemotronHForCausalLM": ["nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16",
                             "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"],
    "NemotronH_Nano_VL_V2": ["nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL-BF16"],
    "NemotronH_Nano_Omni_Reasoning_V3": ["nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16"],
    "Exaone4ForCausalLM": ["LGAI-EXAONE/EXAONE-4.0-1.2B"],
    "Exaone4_5_ForConditionalGeneration": ["LGAI-EXAONE/EXAONE-4.5-33B"],
    "ExaoneMoeForCausalLM": ["LGAI-EXAONE/K-EXAONE-236B-A23B"],
    "MiniMaxM3SparseForConditionalGeneration": ["MiniMaxAI/MiniMax-M3"],
    "Gemma2ForCausalLM": ["google/gemma-2-2b", "google/gemma-2-9b", "google/gemma-2-27b"],
    "Gemma3ForCausalLM": ["google/gemma-3-1b-pt"],
    "Gemma3ForConditionalGeneration": ["google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it"],
    "Gemma4ForConditionalGeneration": ["google/gemma-4-26B-A4B-it", "google/gemma-4-E4B-it"],
    "LlamaForCausalLM": ["meta-llama/Llama-2-7b-hf", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B",
                         "meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-70B", "meta-llama/Meta-Llama-3.1-8B",
                         "meta-llama/Meta-Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-405B"],
    "Mistral3ForConditionalGeneration": ["mistralai/Ministral-3-3B-Instruct-2512", "mistralai/Ministral-3-8B-Instruct-2512",
                                         "mistralai/Ministral-3-14B-Instruct-2512"],
    "GptOssForCausalLM": ["openai/gpt-oss-20b", "openai/gpt-oss-120b"],
    "Step3p5ForCausalLM": ["stepfun-ai/Step-3.5-Flash"],
    "Step3p7ForConditionalGeneration": ["stepfun-ai/Step-3.7-Flash"],
    "Qwen2ForCausalLM": [f"Qwen/Qwen2-{s}" for s in ("0.5B", "1.5B", "7B", "72B")]
                        + [f"Qwen/Qwen2.5-{s}" for s in ("0.5B", "1.5B", "7B", "14B", "32B", "72B")],
    "Qwen2AudioForConditionalGeneration": ["Qwen/Qwen2-Audio-7B-Instruct"],
    "Qwen2_5_VLForConditionalGeneration": [f"Qwen/Qwen2.5-VL-{s}-Instruct" for s in ("3B", "7B", "32B", "72B")],
    "Qwen3ForCausalLM": [f"Qwen/Qwen3-{s}" for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")],
    "Qwen3MoeForCausalLM": ["Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B"],
    "Qwen3NextForCausalLM": ["Qwen/Qwen3-Next-80B-A3B-Instruct"],
    "Qwen3OmniMoeForConditionalGeneration": ["Qwen/Qwen3-Omni-30B-A3B-Instruct"],
    "Qwen3VLForConditionalGeneration": ["Qwen/Qwen3-VL-8B-Instruct"],
    "Qwen3VLMoeForConditionalGeneration": ["Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-235B-A22B-Instruct"],
    "Qwen3_5ForConditionalGeneration": [f"Qwen/Qwen3.5-{s}" for s in ("0.8B", "2B", "4B", "9B", "27B")],
    "Qwen3_5MoeForConditionalGeneration": ["Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-397B-A17B"],
}
HF_ARCHITECTURES = {hf_id: arch for arch, ids in _ARCH.items() for hf_id in ids}


def field_names(cls) -> list[str]:
    return sorted(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))


class _Recorder:
    """AutoBridge.from_hf_pretrained offline: records the checkpoint asked for, gives the catalog's stand-in."""

    def __init__(self, asked: list):
        self.asked = asked

    def __call__(self, cls, path=None, *args, **kwargs):
        from .recipes import _StandIn

        self.asked.append(str(path))
        return _StandIn()


def recipe_class(entry: dict, datasets: dict | None = None) -> tuple[type | None, str | None]:
    """(provider class, HF id asked for) of one catalog entry's recipe, built offline as the catalog built it;
    the class is None where it comes from AutoBridge (the HF id says which). datasets: {entry name: its cfg.dataset's
    class}, filled where the recipe builds (fuzzW W2-7: a dataset field is the recipe's class's or refused)."""
    import importlib

    from megatron.bridge.models.conversion import auto_bridge

    from .recipes import offline

    fn = getattr(importlib.import_module(entry["module"]), entry.get("alias_of") or entry["name"])
    asked: list = []
    cfg = None
    with offline(entry.get("gpu")), mock.patch.object(auto_bridge.AutoBridge, "from_hf_pretrained", classmethod(_Recorder(asked))):
        with contextlib.suppress(Exception):
            cfg = fn()
    if datasets is not None and cfg is not None and getattr(cfg, "dataset", None) is not None:
        datasets[entry["name"]] = type(cfg.dataset)
    if asked:
        return None, asked[-1]
    if cfg is None or not hasattr(cfg, "model"):
        return None, None
    return type(cfg.model), None


def bridge_provider(architecture: str) -> list:
    """The provider classes Bridge's model bridge for an HF architecture builds: its registered provider
    (register_bridge(provider=...)), else what its provider_bridge is annotated to return (a union: each of them, as
    Gemma 4's dense or MoE class), else GPTModelProvider, which MegatronModelBridge.provider_bridge builds."""
    import inspect
    import typing

    from megatron.bridge.models import GPTModelProvider
    from megatron.bridge.models.conversion import model_bridge

    for cls in _subclasses(model_bridge.MegatronModelBridge):
        if vars(cls).get("SOURCE_NAME") != architecture:
            continue
        if cls.PROVIDER_CLASS is not None:
            return [cls.PROVIDER_CLASS]
        try:
            ann = inspect.signature(cls.provider_bridge, eval_str=True).return_annotation
        except Exception:  # an annotation that does not evaluate: the default provider
            ann = inspect.Signature.empty
        members = [a for a in (typing.get_args(ann) or (ann,)) if isinstance(a, type) and dataclasses.is_dataclass(a)]
        return members or [GPTModelProvider]
    raise SystemExit(f"no model bridge of megatron-bridge {adapter.bridge_version()} is registered for {architecture}")


def _subclasses(c):
    for s in c.__subclasses__():
        yield s
        yield from _subclasses(s)



def collect(entries, reference, datasets: dict | None = None) -> dict:
    """{"base": GPTModelProvider, "classes": {name: {"adds": [...], "lacks": [...]}} (fields against the base's), "recipes":
    {name: [recipe references]}} for the catalog entries whose model is not a GPTModelProvider; a recipe whose class
    cannot be known offline (it does not build, and asks AutoBridge for nothing) is left out: the base's fields."""
    from megatron.bridge.models import GPTModelProvider

    base = set(field_names(GPTModelProvider))
    classes, recipes, members = {}, {}, {}
    for entry in entries:
        name, hf_id = recipe_class(entry, datasets)
        if datasets is not None and entry["name"] in datasets:
            datasets[reference(entry)] = datasets.pop(entry["name"])
        if hf_id is not None:
            if hf_id not in HF_ARCHITECTURES:
                raise SystemExit(f"{entry['name']} asks AutoBridge for {hf_id}: add its config.json's architecture to "
                                 "mbridge_overlap/bridge/providers.py HF_ARCHITECTURES")
            found = bridge_provider(HF_ARCHITECTURES[hf_id])
        elif name is not None:
            found = [name]
        else:
            continue
        label = " | ".join(c.__name__ for c in found)
        if label == BASE:
            continue
        if label not in classes:
            own = set().union(*(field_names(c) for c in found))
            classes[label] = {"adds": sorted(own - base), "lacks": sorted(base - own)}
            members[label] = found
        recipes.setdefault(label, []).append(reference(entry))
    for cls in every_class():  # (a saved config's model._target_ may name any: recheck61 AH4, fuzzV V2-11)
        own = set(field_names(cls))
        fields = {"adds": sorted(own - base), "lacks": sorted(base - own)}
        label = cls.__name__
        if label == BASE or classes.get(label) == fields:
            continue
        if label in classes:  # two classes of one name (NemotronVLModelProvider): the other by its module's path
            label = f"{cls.__module__}.{cls.__qualname__}"
        classes[label] = fields
        members[label] = [cls]
    rebuilders = decoder_rebuilders()
    rebuilt = {label: hit for label, found in members.items()
               for hit in [next(filter(None, (decoder_rebuilt(c, rebuilders) for c in found)), None)] if hit}
    unbuilt = {label: hit for label, found in members.items()
               for hit in [next(filter(None, (mtp_unbuilt(c) for c in found)), None)] if hit}
    return {"base": BASE, "classes": classes, "recipes": {k: sorted(v) for k, v in sorted(recipes.items())},
            "decoder_rebuilt": rebuilt, "mtp_unbuilt": unbuilt, "seq_length": seq_length_defaults()}


def seq_length_defaults() -> dict:
    """{provider class: its dataclass default of seq_length} for GPTModelProvider and every provider class of the
    installed Bridge that has the field with a default: what a config naming the class in model._target_ runs with
    where it sets no seq_length (validate() compares it with the dataset's). A class name two modules define is
    keyed by each module's path."""
    from megatron.bridge.models import GPTModelProvider

    found = [c for c in dict.fromkeys([GPTModelProvider, *every_class()])]
    twice = {n for n in (c.__name__ for c in found) if sum(c.__name__ == n for c in found) > 1}
    out = {}
    for cls in found:
        field = next((f for f in dataclasses.fields(cls) if f.name == "seq_length"), None)
        if field is not None and isinstance(field.default, int):
            out[f"{cls.__module__}.{cls.__qualname__}" if cls.__name__ in twice else cls.__name__] = field.default
    return out


def every_class() -> list:
    """Every model provider dataclass of the installed Bridge: the subclasses of ModelProviderMixin defined in
    megatron.bridge, with every module under megatron.bridge.models imported (one that does not import is skipped),
    in a fixed order (by module, then name)."""
    import importlib
    import pkgutil

    import megatron.bridge.models as models
    from megatron.bridge.models.model_provider import ModelProviderMixin

    for info in pkgutil.walk_packages(models.__path__, models.__name__ + "."):
        with contextlib.suppress(Exception):
            importlib.import_module(info.name)
    found = {c for c in _subclasses(ModelProviderMixin) if dataclasses.is_dataclass(c) and c.__module__.startswith("megatron.bridge.")}
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))



def decoder_rebuilders() -> dict:
    """{model class: (file, line of its GPTModel.__init__ call, line of the rebuild)} for each GPTModel subclass of the
    installed Bridge whose __init__ hands GPTModel.__init__ an mtp_block_spec (GPTModel builds its decoder, then the
    MTP block, whose eh_proj sets the shared config.tp_comm_overlap to False: TP_OVERLAP_OFF_MTP) and then assigns
    self.decoder again, a second decoder built from that config (Qwen3VLGPTModel, text_model.py)."""
    import ast
    import inspect

    from megatron.core.models.gpt import GPTModel

    every_class()  # (imports every module under megatron.bridge.models)
    found = {}
    for cls in sorted(_subclasses(GPTModel), key=lambda c: (c.__module__, c.__qualname__)):
        init = vars(cls).get("__init__")
        if not cls.__module__.startswith("megatron.bridge.") or init is None:
            continue
        lines, first = inspect.getsourcelines(init)
        body = ast.parse(inspect.cleandoc("\n" + "".join(lines)) if lines[0][:1].isspace() else "".join(lines)).body[0].body
        built = None
        for stmt in body:
            for node in ast.walk(stmt):
                if built is None and isinstance(node, ast.Call) and _is_super_init(node) \
                        and any(k.arg == "mtp_block_spec" or k.arg is None for k in node.keywords):
                    built = first + node.lineno - 1
                elif built is not None and isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Attribute) and t.attr == "decoder" and isinstance(t.value, ast.Name)
                        and t.value.id == "self" for t in node.targets):
                    found[cls] = (_package_path(inspect.getsourcefile(cls)), built, first + node.lineno - 1)
    return found


def _is_super_init(node) -> bool:
    """super().__init__(...) or GPTModel.__init__(self, ...)."""
    import ast

    f = node.func
    return isinstance(f, ast.Attribute) and f.attr == "__init__" and (
        (isinstance(f.value, ast.Call) and getattr(f.value.func, "id", None) == "super")
        or getattr(f.value, "id", None) == "GPTModel")


def _package_path(path: str) -> str:
    """A source file's path from its package root (megatron/bridge/...)."""
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[parts.index("megatron"):]) if "megatron" in parts else path


def _passes_mtp(call, target) -> bool:
    """Whether a call passes its callee an MTP block spec: not where the callee takes an mtp_block_spec parameter and
    the call leaves it out or passes None (a **kwargs may carry one)."""
    import ast
    import inspect

    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return True
    if "mtp_block_spec" not in params:
        return True
    for k in call.keywords:
        if k.arg is None:
            return True
        if k.arg == "mtp_block_spec":
            return not (isinstance(k.value, ast.Constant) and k.value.value is None)
    return False


def _calls(fn, cls) -> list:
    """(call node, the object it calls, its source line) of each call in fn's source that names a module-level object,
    a method of cls (self.X), an attribute of a class (C.X) or the next class's method (super().X)."""
    import ast
    import importlib
    import inspect

    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return []
    text = "".join(lines)
    tree = ast.parse(inspect.cleandoc("\n" + text) if text[:1].isspace() else text)
    local = dict(getattr(fn, "__globals__", {}))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                with contextlib.suppress(Exception):
                    local[a.asname or a.name] = getattr(importlib.import_module(node.module), a.name)
    owner = fn.__qualname__.rsplit(".", 1)[0]
    at = lambda node: first + node.lineno - 1  # noqa: E731  (cleandoc drops the leading blank line)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in local:
            out.append((node, local[f.id], at(node)))
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            out.append((node, getattr(cls, f.attr, None), at(node)))
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and isinstance(local.get(f.value.id), type):
            out.append((node, getattr(local[f.value.id], f.attr, None), at(node)))
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and getattr(f.value.func, "id", None) == "super":
            mro = cls.__mro__
            idx = next((i for i, c in enumerate(mro) if c.__qualname__ == owner), None)
            nxt = None if idx is None else next((vars(c)[f.attr] for c in mro[idx + 1:] if f.attr in vars(c)), None)
            out.append((node, nxt, at(node)))
    return out


def decoder_rebuilt(cls, rebuilders: dict) -> dict | None:
    """Where a provider class's provide() builds a model of `rebuilders` (decoder_rebuilders()) with an MTP block, or
    None. Read from the sources: each call its provide() makes of a Bridge class or function (the provider's own
    methods too), followed a few levels deep into their constructors and bodies. A call into a callee that takes an
    mtp_block_spec parameter counts only where it passes one (not None): Qwen3VLModelProvider builds Qwen3VLModel with
    none, so no MTP block is built and its decoder is not affected; a callee without one builds its own
    (Exaone45Model from config.mtp_num_layers)."""
    import inspect

    seen: set = set()

    def reach(fn, depth: int):
        for call, obj, _line in _calls(fn, cls):
            target = vars(obj).get("__init__") if isinstance(obj, type) else obj
            if isinstance(obj, type):
                for model, where in rebuilders.items():
                    if issubclass(obj, model) and _passes_mtp(call, obj.__init__):
                        return model, where
            if depth == 0 or id(obj) in seen or not str(getattr(obj, "__module__", "")).startswith("megatron.bridge."):
                continue
            if not (inspect.isfunction(target) or inspect.ismethod(target)) or not _passes_mtp(call, target):
                continue
            seen.add(id(obj))
            hit = reach(target, depth - 1)
            if hit:
                return hit
        return None

    hit = reach(cls.provide, 3)
    if hit is None:
        return None
    model, (path, built, rebuilt) = hit
    return {"model": model.__name__, "file": path, "gpt_init_line": built, "decoder_line": rebuilt}


def _builds_no_mtp(model) -> bool:
    """A model class that builds no MTP block whatever its config says (recheck66 AM-5): a language model (Megatron-Core's
    LanguageModule, as GPTModel is) whose __init__ takes no mtp_block_spec, whose own module's source names no MTP
    ("mtp", MultiTokenPrediction) and none of whose bases builds a MultiTokenPredictionBlock (GPTModel and HybridModel
    do: MambaModel is a HybridModel).
    FalconH1Model (falcon_h1/modeling_falconh1/falconh1_model.py, a LanguageModule) is one: FalconH1ModelProvider
    builds it and no eh_proj is ever built. mtp_unbuilt counts it only where the walk reaches no construction that
    takes an mtp_block_spec."""
    import inspect
    import re
    import sys

    module = sys.modules.get("megatron.core.models.common.language_module.language_module")
    if module is None or not isinstance(model, type) or not issubclass(model, module.LanguageModule):
        return False
    try:
        if "mtp_block_spec" in inspect.signature(model.__init__).parameters:
            return False
        own = inspect.getsource(sys.modules[model.__module__])
        bases = [inspect.getsource(c) for c in model.__mro__[1:] if c.__module__.startswith("megatron.")]
    except (OSError, TypeError, KeyError, ValueError):
        return False
    return not re.search(r"mtp|MultiTokenPrediction", own, re.I) and not any("MultiTokenPredictionBlock(" in b
                                                                                for b in bases)


def mtp_unbuilt(cls) -> dict | None:
    """Where a provider class's provide() builds its model without an MTP block whatever model.mtp_num_layers says, or
    None: every model construction its provide() reaches (a class whose __init__ takes an mtp_block_spec: GPTModel,
    Qwen3VLModel, ...) passes none, and at least one is reached. Read from the sources as decoder_rebuilt reads them
    (super().provide() followed too: GPTModelProvider.provide passes mtp_block_spec(self)). Qwen3VLModelProvider builds
    Qwen3VLModel(...) with no mtp_block_spec (qwen3_vl_provider.py), so GPTModel's mtp_process is False and no eh_proj
    is built: TP_OVERLAP_OFF_MTP does not happen there; nor where it builds a model that builds none whatever it is given
    (_builds_no_mtp: FalconH1ModelProvider's FalconH1Model). None where the walk reaches no construction (not known)."""
    import inspect

    seen: set = set()
    built: list = []
    plain: list = []

    def reach(fn, depth: int):
        for call, obj, line in _calls(fn, cls):
            if isinstance(obj, type):
                try:
                    params = inspect.signature(obj.__init__).parameters
                except (TypeError, ValueError):
                    params = {}
                if "mtp_block_spec" in params:
                    built.append((obj, _passes_mtp(call, obj.__init__), fn, line))
                    continue
                if _builds_no_mtp(obj):  # (recheck66 AM-5: FalconH1Model; counted where nothing else is reached)
                    plain.append((obj, False, fn, line))
                    continue
            target = vars(obj).get("__init__") if isinstance(obj, type) else obj
            if depth == 0 or id(obj) in seen or not str(getattr(obj, "__module__", "")).startswith("megatron.bridge."):
                continue
            if not (inspect.isfunction(target) or inspect.ismethod(target)) or not _passes_mtp(call, target):
                continue
            seen.add(id(obj))
            reach(target, depth - 1)

    reach(cls.provide, 3)
    built = built or plain
    if not built or any(passes for _, passes, _, _ in built):
        return None
    model, _, fn, line = built[0]
    return {"model": model.__name__, "file": _package_path(inspect.getsourcefile(fn)), "line": line}
