"""Bridge's shipped recipes: the catalog generated from real Bridge (tools/gen_recipe_catalog.py), by release.

Each entry holds what the recipe function requests on the overlap path (`request`: the fields of schema.RECORDED by
section, comm_overlap with its preset by name, the mixed-precision recipe and env_vars), the fixups the offline build
needed, and what real Bridge's runtime_config_update() made of it at the GPU count in the name (`bridge`).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path

from ..errors import UsageError
from .releases import DATA_DIR, precision, version_key
from ..suggest import closest

# A fixup that gives the stand-in model itself experts, from the start: a recipe that reads the model's expert count
# while it builds (apply_flex_dispatcher_backend keeps alltoall for a model without experts, "Model config does not use
# MoE") then decides as with the real checkpoint's config (evalH H3); a count set after the build comes too late.
STANDIN_EXPERTS = "standin.num_moe_experts"

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
_REFERENCE = r"^(?:megatron\.bridge\.)?(?:(?P<package>recipes|perf_recipes)\.(?:[a-z0-9_]+\.)*)?(?P<name>[A-Za-z0-9_]+)\Z"  # re caches it


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
    return list(_versions())


@lru_cache(maxsize=None)
def _versions() -> tuple[str, ...]:
    """The releases with a catalog, found once (as each catalog is read once)."""
    root = DATA_DIR / "releases"
    found = [p.parent.name for p in root.glob("*/recipes.json")] if root.is_dir() else []
    return tuple(sorted(found, key=version_key))


def release_of(release) -> str:
    """The release whose recipe catalog stands for `release`: its own; else the release its code is (releases.yaml
    same_as: 0.6.1 is 0.6.0); else the one whose data it is answered with (a newer release: the newest)."""
    from .releases import data

    same_as = (data()["releases"].get(release.version) or {}).get("same_as")
    return next((v for v in (release.version, same_as) if v in versions()), release.data_version)


def entries(version: str) -> list[dict]:
    return catalog(version)["recipes"]


# --- the index: what a question about one recipe or one layout reads instead of the whole catalog ----------------------
#
# data/releases/VERSION/recipes.index.json, written with the catalog by tools/gen_recipe_catalog.py (--index rewrites
# it from the committed catalog; tier 1 holds it to what index_text() makes of the catalog): for each recipe, in catalog
# order, what its name says (the fields `recipes` filters on), its layout where same_layout() can match it, and where
# its line is in recipes.json. A recipe is read from its line alone. An index that does not fit the catalog (missing,
# another size) is never used: the catalog itself is indexed in memory instead.

INDEX_FIELDS = ("name", "package", "model", "task", "gpus", "gpu", "precision", "variant", "layout", "offset", "length")
INDEX_BY = "tools/gen_recipe_catalog.py"


def index_path(version: str) -> Path:
    return DATA_DIR / "releases" / version / "recipes.index.json"


def _layout_of(e: dict) -> list | None:
    """The layout same_layout() compares: only for a perf recipe that built and resolved, and set up."""
    if e["package"] != "perf_recipes" or not e["builds"] or e["bridge"]["error"] is not None or e["bridge"].get("setup_error"):
        return None
    m = e["request"]["model"]
    return [m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"], m["virtual_pipeline_model_parallel_size"],
            m["context_parallel_size"], e["gpus"], e["gpu"], e["precision"], m.get("expert_model_parallel_size", 1) > 1]


def _index_rows(text: bytes) -> list[list]:
    """The index rows of a catalog file as gen_recipe_catalog.dumps writes it: a header, then one recipe a line
    between the lines `"recipes": [` and `]}` (ValueError for a file of another shape)."""
    lines = text.split(b"\n")
    try:
        start, end = lines.index(b'"recipes": ['), lines.index(b"]}")
    except ValueError:
        raise ValueError("not a recipe catalog as tools/gen_recipe_catalog.py writes it") from None
    rows, offset = [], sum(len(line) + 1 for line in lines[:start + 1])
    for line in lines[start + 1:end]:
        body = line[:-1] if line.endswith(b",") else line
        e = json.loads(body)
        rows.append([e["name"], e["package"], e.get("model"), e.get("task"), e.get("gpus"), e.get("gpu"), e.get("precision"),
                     e.get("variant"), _layout_of(e), offset, len(body)])
        offset += len(line) + 1
    return rows


def index_text(text: bytes) -> str:
    """recipes.index.json for a catalog file's bytes: one recipe a line."""
    head = json.dumps({"catalog_bytes": len(text), "fields": list(INDEX_FIELDS), "generated_by": INDEX_BY})
    rows = ",\n".join(json.dumps(r, separators=(",", ":")) for r in _index_rows(text))
    return head[:-1] + ', "recipes": [\n' + rows + "\n]}\n"


class Row(tuple):
    """One recipe's index row (INDEX_FIELDS), its fields by name."""

    __slots__ = ()
    name, package, model, task, gpus, gpu, precision, variant, layout = (property(lambda r, i=i: r[i]) for i in range(9))


@lru_cache(maxsize=None)
def index(version: str) -> tuple:
    """The index rows of a release's catalog, in catalog order: the committed index where it fits the catalog, else
    the catalog's own (UsageError for a release without a catalog)."""
    path = catalog_path(version)
    try:
        size = os.stat(path).st_size
    except OSError:
        catalog(version)  # the UsageError that names the catalogs there are
        raise
    try:
        with open(index_path(version), "rb") as fh:
            table = json.loads(fh.read())
        rows = table["recipes"] if table.get("catalog_bytes") == size and table.get("fields") == list(INDEX_FIELDS) else None
    except (OSError, ValueError, KeyError, AttributeError):
        rows = None
    if rows is None:
        with open(path, "rb") as fh:
            rows = _index_rows(fh.read())
    return tuple(Row(r) for r in rows)


_READ: dict = {}  # (version, offset) -> entry: each recipe read once per process


def entries_where(version: str, keep) -> list[dict]:
    """The catalog entries whose index rows `keep` accepts, in catalog order, each read from its own line."""
    return entries_of(version, [r for r in index(version) if keep(r)])


def entries_of(version: str, rows: list) -> list[dict]:
    """The catalog entries of these index rows, each read from its own line."""
    missing = [r for r in rows if (version, r[9]) not in _READ]
    if missing:
        with open(catalog_path(version), "rb") as fh:
            for r in missing:
                fh.seek(r[9])
                e = json.loads(fh.read(r[10]))
                if not isinstance(e, dict) or e.get("name") != r.name:
                    raise RuntimeError(f"{index_path(version)} does not fit its recipes.json: run tools/gen_recipe_catalog.py --index")
                _READ[version, r[9]] = e
    return [_READ[version, r[9]] for r in rows]


def lookup(reference: str, version: str) -> dict:
    """The catalog entry a user's recipe reference names; UsageError with the closest names otherwise."""
    m = re.match(_REFERENCE, reference.strip()) if isinstance(reference, str) else None
    if not m:
        raise UsageError("--recipe: expected a recipe function name such as llama3_70b_pretrain_64gpu_gb200_bf16_config")
    name, package = m.group("name"), m.group("package")
    found = [r for r in index(version) if r.name == name and (package is None or r.package == package)]
    if len(found) == 1:
        return entries_where(version, lambda r: r is found[0])[0]
    if found:
        where = " or ".join(f"{r.package}.{r.name}" for r in found)
        raise UsageError(f"--recipe: {name} is defined in both recipe packages; say which: {where}")
    elsewhere = [(v, r.package) for v in versions() if v != version for r in index(v) if r.name == name]
    if elsewhere:  # (evalS V6: a 0.6 perf recipe asked for with 0.5.1 got the closest library names, another layout)
        where = ", ".join(dict.fromkeys(v for v, _ in elsewhere))
        perf = any(package == "perf_recipes" for _, package in elsewhere)
        raise UsageError(f"--recipe: {name} is a recipe of Megatron-Bridge {where}, not of {version}"
                         + (" (perf recipes are functions from 0.6; 0.5.x keeps its perf configs in the repository's "
                            "scripts/performance)" if perf and version_key(version) < version_key("0.6.0") else "")
                         + f": resolve it with --bridge-version {elsewhere[-1][0]}, or plan --bridge-version {version} "
                         "with its layout's flags")
    names = sorted({r.name for r in index(version)})
    near = _closest(name, names)
    hint = f"; closest: {', '.join(near)}" if near else ""
    raise UsageError(f"--recipe: no recipe named {name} in Megatron-Bridge {version}{hint} (list them with: recipes)")


def reference(entry: dict, version: str) -> str:
    """The reference that names a catalog entry: its name, qualified by its package where both packages have it."""
    twins = [r for r in index(version) if r.name == entry["name"]]
    return f"{entry['package']}.{entry['name']}" if len(twins) > 1 else entry["name"]


def require_built(entry: dict) -> dict:
    """The entry of a recipe that built offline when the catalog was generated; a UsageError naming why otherwise."""
    if not entry.get("builds"):
        from ..safeio import shown

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
    return list(_families(version))


@lru_cache(maxsize=None)
def _families(version: str) -> tuple[str, ...]:
    return tuple(sorted({r.model for r in index(version) if r.model}))


def same_layout(version: str, shape, gpu: str, precision: str, moe: bool) -> list[dict]:
    """The perf recipes that resolve at this TP, PP, VPP, CP and GPU count on this GPU type and precision."""
    return entries_of(version, _by_layout(version).get((shape.tp, shape.pp, shape.vpp, shape.cp, shape.gpus, gpu, precision, moe), []))


@lru_cache(maxsize=None)
def _by_layout(version: str) -> dict:
    """{layout: index rows in catalog order}: a plan asks for the recipes of one layout."""
    out: dict = {}
    for r in index(version):
        if r.layout is not None:
            out.setdefault(tuple(r.layout), []).append(r)
    return out


@lru_cache(maxsize=256)  # asked by the preset check of every re-resolution that proves a fix
def shipped_preset(version: str, model: str | None, tp: int, cp: int, gpu: str, precision: str) -> tuple | None:
    """(preset, recipe) where Bridge's perf recipes of this model run this TP and CP on this GPU type and precision
    class (bf16, fp8) with one tuned preset (all of them the same one); None otherwise."""
    if not model or version not in versions():
        return None
    found = {}
    kind = lambda name: "fp8" if str(name).startswith("fp8") else str(name)  # noqa: E731 (fp8_cs, fp8_mx: one preset class)
    for row in index(version):
        if row.model == model and row.gpu == gpu and kind(row.precision) == kind(precision) and row.layout \
                and (row.layout[0], row.layout[3]) == (tp, cp):
            cfg = ((lookup(f"{row.package}.{row.name}", version) or {}).get("request") or {}).get("comm_overlap") or {}
            found.setdefault(cfg.get("tp_comm_overlap_cfg"), row.name)
    return (next(iter(found)), found[next(iter(found))]) if len(found) == 1 and None not in found else None
