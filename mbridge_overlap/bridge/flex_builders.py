"""The token dispatcher each recipe that calls Bridge's apply_flex_dispatcher_backend while it builds ends with on
each GPU type: that function decides by the GPU (a backend the GPU cannot run falls back to alltoall in 0.6, is skipped
in 0.5), and a recipe may set the dispatcher again after it, so the catalog's build for one GPU type does not say what
another gives (evalS V1: a library MoE recipe on GB200 was said to fail at DeepEP's check, where its build falls back
to alltoall). Built as on a GPU node (CUDA reported available: 0.6.2's function takes a shortcut without it), with the
catalog's stand-in experts. Imports Bridge; run by tools/gen_flex_builders.py, read by run/flex.py."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from unittest import mock

from . import adapter, recipes
from ..upstream import catalog


def generate() -> dict:
    adapter.import_bridge()
    adapter.quiet()
    import torch
    import megatron.bridge.training.flex_dispatcher_backend as flex

    version = adapter.bridge_version()
    functions = recipes.discover()  # (imports every recipe module: their own names of the function are patched below)
    original, calls = flex.apply_flex_dispatcher_backend, []

    def recorded(model_config, moe_flex_dispatcher_backend=None):
        calls.append(moe_flex_dispatcher_backend)
        return original(model_config, moe_flex_dispatcher_backend)

    modules = [m for name, m in list(sys.modules.items())
               if name.startswith("megatron.bridge") and getattr(m, "apply_flex_dispatcher_backend", None) is original]
    out = {}
    scratch = Path(tempfile.mkdtemp(prefix="mbridge-flex-"))
    with mock.patch.object(torch.cuda, "is_available", lambda: True):
        try:
            for m in modules:
                m.apply_flex_dispatcher_backend = recorded
            for package, name, fn in functions:
                by_gpu = _by_gpu(fn, _experts(package, name, version), calls, scratch)
                if by_gpu:
                    out[f"{package}.{name}"] = by_gpu
        finally:
            for m in modules:
                m.apply_flex_dispatcher_backend = original
    return {"bridge_version": version, "generated_by": "tools/gen_flex_builders.py (do not edit)",
            "recipes": dict(sorted(out.items()))}


def _by_gpu(fn, experts, calls: list, scratch: Path) -> dict | None:
    """GPU type -> [dispatcher type, flex backend] the build ends with, for a recipe that calls the function."""
    fixups = [(recipes.STANDIN_EXPERTS, experts)] if experts else []
    by_gpu = {}
    for gpu in recipes.DEVICES:
        calls.clear()
        try:
            cfg = recipes._build(fn, gpu, fixups, scratch)
        except Exception:  # noqa: BLE001 - a recipe that does not build offline: the catalog says so
            return None
        if not calls:
            return None
        by_gpu[gpu] = [cfg.model.moe_token_dispatcher_type, cfg.model.moe_flex_dispatcher_backend]
    return by_gpu


def _experts(package: str, name: str, version: str):
    """The stand-in's expert count the catalog built the recipe with (a recipe that reads its model's experts from
    the checkpoint while it builds decides with them)."""
    try:
        entry = catalog.lookup(f"{package}.{name}", version)
    except Exception:  # noqa: BLE001 - not in the committed catalog
        return None
    return next((int(v) for k, _, v in (f.partition("=") for f in entry.get("fixups") or []) if k == recipes.STANDIN_EXPERTS), None)
