"""Generate the recipe catalog of the installed megatron-bridge: every public *_config() function of
megatron.bridge.recipes and megatron.bridge.perf_recipes, what it requests on the overlap path, and what real
Bridge's runtime_config_update() makes of it at the GPU count in its name (mbridge_overlap/bridge/recipes.py says how
a recipe is built offline). Run with the Bridge venv's python:

    $(scripts/bridge_env.sh --print-python) tools/gen_recipe_catalog.py [--check] [--only SUBSTRING]

Writes mbridge_overlap/data/releases/<version>/recipes.json and its index, recipes.index.json (what each recipe's
name says, its layout, and where its line is: what resolve --recipe, plan and recipes read instead of the whole
catalog; mbridge_overlap/upstream/catalog.py), and recipes.listing.json (each recipe's row as `recipes` lists it:
what a listing of all of them decodes instead of every entry; verbs/recipes.py). --check regenerates the catalog and
its index in memory and compares them with the shipped files (exit 1 on a difference); the Bridge test tier runs that.
--index rewrites (with --check: compares) only the indexes and listings of the committed catalogs, with any Python and
no Bridge; tier 1 runs --index --check. The files hold names and values only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

# Read once when huggingface_hub is imported: set before anything imports Bridge, or each hub call waits on the network.
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"
# Bridge's messages can print a set (recompute module names): with a fixed hash seed they print the same every run,
# so a regeneration compares byte for byte.
if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import generated  # noqa: E402


def dumps(data: dict) -> str:
    """One recipe per line (small, and a regeneration diffs recipe by recipe)."""
    head = {k: v for k, v in data.items() if k != "recipes"}
    lines = [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in data["recipes"]]
    return json.dumps(head, sort_keys=True)[:-1] + ',\n"recipes": [\n' + ",\n".join(lines) + "\n]}\n"


def summary(data: dict) -> str:
    recipes = data["recipes"]
    built = [r for r in recipes if r["builds"]]
    done = [r for r in built if r["bridge"]["error"] is None]
    return f"{len(recipes)} recipe functions, {len(built)} build offline, {len(done)} complete runtime_config_update()"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped catalog instead of writing it")
    ap.add_argument("--only", help="only recipes whose name contains this; prints them (for debugging)")
    ap.add_argument("--index", action="store_true", help="only the indexes of the committed catalogs (no Bridge needed)")
    args = ap.parse_args(argv)

    from mbridge_overlap.upstream import catalog

    if args.index:
        return _indexes(catalog, args.check)
    from mbridge_overlap.bridge import recipes as bridge_recipes

    with contextlib.redirect_stdout(sys.stderr):  # Bridge's import-time log lines: stdout carries only our verdict
        data = bridge_recipes.generate(args.only, progress=lambda m: print(f"[catalog] {m}", file=sys.stderr))
    if args.only:
        sys.stdout.write(dumps(data))
        return 0
    path = catalog.catalog_path(data["bridge_version"])
    rel = path.relative_to(ROOT)
    text = dumps(data)
    index = catalog.index_text(text.encode("utf-8"))
    index_path = catalog.index_path(data["bridge_version"])
    status = max(generated.check_or_write(path, text, args.check, mkdir=True, wrote=None,
                                          verdict=lambda same: f"{'catalog matches' if same else 'catalog DIFFERS from'} {rel}: {summary(data)}"),
                 generated.check_or_write(index_path, index, args.check, wrote=f"wrote {rel} and {index_path.name}: {summary(data)}",
                                          verdict=lambda same: f"{'index matches' if same else 'index DIFFERS from'} {index_path.relative_to(ROOT)}"))
    return status if args.check else _indexes(catalog, check=False)  # and the listing, read from what was written


def _indexes(catalog, check: bool) -> int:
    """Each committed catalog's index and listing (verbs/recipes.listing_text), written or compared."""
    from mbridge_overlap.verbs import recipes

    def files():
        for version in catalog.versions():
            catalog.index.cache_clear()  # (an index written here is read back for the listing)
            yield catalog.index_path(version), catalog.index_text(catalog.catalog_path(version).read_bytes())
            yield recipes.listing_path(version), recipes.listing_text(version)

    stale = generated.check_or_write_all(files(), check, changed_only=True, wrote=lambda path: f"wrote {path.relative_to(ROOT)}")
    return generated.verdict(stale, f"index DIFFERS from its catalog: {', '.join(str(p.relative_to(ROOT)) for p in stale)} "
                                    "(run tools/gen_recipe_catalog.py --index)",
                             f"indexes match their catalogs: {', '.join(catalog.versions())} (and the listings)" if check else None)


if __name__ == "__main__":
    sys.exit(main())
