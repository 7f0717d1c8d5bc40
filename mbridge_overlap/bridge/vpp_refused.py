"""The model providers whose provide() refuses virtual pipeline parallelism (Bridge's Hybrid, Mamba, FalconH1 and T5
providers assert virtual_pipeline_model_parallel_size is None when the model is built: evalT U1), and the recipes
that build one. Imports Bridge; run by tools/gen_vpp_refused.py, read by run/vpp.py."""

from __future__ import annotations

import inspect
import sys
import tempfile
from pathlib import Path

from . import adapter, recipes
from ..upstream import catalog

MARK = "Virtual pipeline model parallelism is temporarily unsupported"


def generate() -> dict:
    adapter.import_bridge()
    adapter.quiet()
    version = adapter.bridge_version()
    functions = recipes.discover()  # (imports every recipe module, and so the providers they use)
    classes = {}
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("megatron.bridge.models")]:
        for name, cls in list(vars(module).items()):
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and refused(cls):
                classes[f"{module.__name__}.{name}"] = refused(cls)  # (two classes share a name: recheck54 Y2)
    names, stand_ins = {}, {}
    scratch = Path(tempfile.mkdtemp(prefix="mbridge-vpp-"))
    for package, name, _ in functions:
        try:
            entry = catalog.lookup(f"{package}.{name}", version)
        except Exception:  # noqa: BLE001 - not in the committed catalog
            continue
        if not entry.get("builds"):
            continue
        recipes._StandIn.built = 0
        try:
            cfg = recipes.rebuild(entry, scratch)
        except Exception:  # noqa: BLE001 - as the catalog says, it does not build offline
            continue
        built = f"{type(cfg.model).__module__}.{type(cfg.model).__name__}"
        if built in classes:
            names[f"{package}.{name}"] = built
        elif recipes._StandIn.built:
            stand_ins[f"{package}.{name}"] = folder(entry["module"])
    # a recipe whose model is loaded from a Hugging Face config is built here with a GPT stand-in: it refuses VPP
    # where every recipe of its folder that builds its own provider does (Bridge's nemotronh folders: NemotronH's)
    refusing = {folder(catalog.lookup(n, version)["module"]): c for n, c in sorted(names.items())}
    loaded = {n: refusing[f] for n, f in stand_ins.items() if f in refusing}
    return {"bridge_version": version, "generated_by": "tools/gen_vpp_refused.py (do not edit)",
            "classes": dict(sorted(classes.items())), "recipes": dict(sorted(names.items())),
            "loaded_recipes": dict(sorted(loaded.items()))}


def folder(module: str) -> str:
    """A recipe module's model folder: megatron.bridge.recipes.nemotronh of megatron.bridge.recipes.nemotronh.h100.x."""
    return ".".join(module.split(".")[:4])


def refused(cls) -> str | None:
    """The assertion's message where the class's provide() (its own or inherited) refuses VPP, else None."""
    provide = getattr(cls, "provide", None)
    try:
        source = inspect.getsource(provide) if provide is not None else ""
    except (OSError, TypeError):
        return None
    at = source.find(MARK)
    if at < 0:
        return None
    end = source.find(")", at)
    return " ".join("".join(p.strip().strip('"') for p in source[at:end].splitlines()).split())
