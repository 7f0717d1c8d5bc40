"""Bridge's shipped recipes: the catalog generated from real Bridge (scripts/gen_recipe_catalog.py), by release.

Each entry holds what the recipe function requests on the overlap path (`request`: the fields of schema.RECORDED by
section, comm_overlap with its preset by name, the mixed-precision recipe and env_vars), the fixups the offline build
needed, and what real Bridge's runtime_config_update() made of it at the GPU count in the name (`bridge`).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from .errors import UsageError
from .releases import DATA_DIR, precision, version_key
from .suggest import closest

# A recipe name's precision as the name writes it (fp8cs): the release data's spellings of each canonical precision.
NAME_PRECISIONS = ("bf16", "fp8cs", "fp8mx", "fp8sc", "nvfp4")


@lru_cache(maxsize=None)
def _name_patterns() -> tuple:
    """The two shapes of a recipe function name, with the GPU count, type and precision first, so a dataset or
    variant word never swallows them; the words are the release data's vocabulary."""
    from .releases import data, gpu_types

    head = r"^(?P<model>[a-z0-9_]+?)_(?P<task>" + "|".join(data()["tasks"]) + ")"
    return (
        re.compile(head + r"(?:_(?P<dataset>[a-z0-9_]+?))?_(?P<gpus>[0-9]+)gpu_(?P<gpu>" + "|".join(gpu_types()) + r")_(?P<precision>"
                   + "|".join(NAME_PRECISIONS) + r")(?:_(?P<variant>[a-z0-9_]+?))?_config\Z"),
        re.compile(head + r"(?:_(?P<variant>[a-z0-9_]+?))?_config\Z"),
    )


# A recipe reference as a user types it: a function name, optionally with its package or full import path.
_REFERENCE = re.compile(r"^(?:megatron\.bridge\.)?(?:(?P<package>recipes|perf_recipes)\.(?:[a-z0-9_]+\.)*)?(?P<name>[A-Za-z0-9_]+)\Z")


def parse_name(name: str) -> dict:
    """What a recipe function's name says: model, task, GPU count and type, precision, variant (None where absent)."""
    m = next((m for m in (rx.match(name) for rx in _name_patterns()) if m), None)
    if not m:
        return {"model": None, "task": None, "gpus": None, "gpu": None, "precision": None, "variant": None}
    g = {"dataset": None, "gpus": None, "gpu": None, "precision": None, **m.groupdict()}
    return {
        "model": g["model"], "task": g["task"], "gpus": int(g["gpus"]) if g["gpus"] else None, "gpu": g["gpu"],
        "precision": precision(g["precision"]) if g["precision"] else None,
        "variant": "_".join(p for p in (g["dataset"], g["variant"]) if p) or None,
    }


def catalog_path(version: str) -> Path:
    return DATA_DIR / "releases" / version / "recipes.json"


@lru_cache(maxsize=None)
def catalog(version: str) -> dict:
    path = catalog_path(version)
    if not path.is_file():
        raise UsageError(f"Megatron-Bridge {version} has no recipe catalog here (catalogs: {', '.join(versions())}); "
                         "pass --bridge-version with one of them")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def versions() -> list[str]:
    root = DATA_DIR / "releases"
    found = [p.parent.name for p in root.glob("*/recipes.json")] if root.is_dir() else []
    return sorted(found, key=version_key)


def entries(version: str) -> list[dict]:
    return catalog(version)["recipes"]


def lookup(reference: str, version: str) -> dict:
    """The catalog entry a user's recipe reference names; UsageError with the closest names otherwise."""
    m = _REFERENCE.match(reference.strip()) if isinstance(reference, str) else None
    if not m:
        raise UsageError("--recipe: expected a recipe function name such as llama3_70b_pretrain_64gpu_gb200_bf16_config")
    name, package = m.group("name"), m.group("package")
    found = [e for e in entries(version) if e["name"] == name and (package is None or e["package"] == package)]
    if len(found) == 1:
        return found[0]
    if found:
        where = " or ".join(f"{e['package']}.{e['name']}" for e in found)
        raise UsageError(f"--recipe: {name} is defined in both recipe packages; say which: {where}")
    names = sorted({e["name"] for e in entries(version)})
    near = _closest(name, names)
    hint = f"; closest: {', '.join(near)}" if near else ""
    raise UsageError(f"--recipe: no recipe named {name} in Megatron-Bridge {version}{hint} (list them with: recipes)")


def require_built(entry: dict) -> dict:
    """The entry of a recipe that built offline when the catalog was generated; a UsageError naming why otherwise."""
    if not entry.get("builds"):
        from .safeio import shown

        raise UsageError(f"--recipe: {entry['name']} could not be built offline when the catalog was generated "
                         f"({shown(entry.get('build_error'), 160)}); start from another recipe")
    return entry


def _closest(name: str, names: list[str], n: int = 3) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, names, n=n, cutoff=0.5) or ([closest(name, names, 0.3)] if closest(name, names, 0.3) else [])


def smallest_world(model, expert_tp_one_with_ep: bool = True) -> int:
    """The fewest GPUs a layout runs on (a model config, mapping or object): a multiple of TP x PP x CP (Bridge's
    data-parallel size) and of ETP x EP x PP (Megatron-Core's expert grid; an unset ETP is 1 with EP > 1 where the
    release says so, else TP)."""
    import math

    get = model.get if isinstance(model, dict) else lambda k, d=None: getattr(model, k, d)
    tp, pp, cp = (get(k) or 1 for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"))
    ep = get("expert_model_parallel_size") or 1
    etp = get("expert_tensor_parallel_size") or (1 if ep > 1 and expert_tp_one_with_ep else tp)
    return math.lcm(tp * pp * cp, etp * ep * pp)


def families(version: str) -> list[str]:
    """The model families the recipe names carry (llama3_70b, qwen3_235b_a22b, ...)."""
    return sorted({e["model"] for e in entries(version) if e.get("model")})


def same_layout(version: str, shape, gpu: str, precision: str, moe: bool) -> list[dict]:
    """The perf recipes that resolve at this TP, PP, VPP, CP and GPU count on this GPU type and precision."""
    out = []
    for e in entries(version):
        if e["package"] != "perf_recipes" or not e["builds"] or e["bridge"]["error"] is not None or e["bridge"].get("setup_error"):
            continue
        m = e["request"]["model"]
        layout_of = (m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"], m["virtual_pipeline_model_parallel_size"],
                     m["context_parallel_size"], e["gpus"], e["gpu"], e["precision"], m.get("expert_model_parallel_size", 1) > 1)
        if layout_of == (shape.tp, shape.pp, shape.vpp, shape.cp, shape.gpus, gpu, precision, moe):
            out.append(e)
    return out
