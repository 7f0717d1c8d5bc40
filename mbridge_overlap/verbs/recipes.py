"""`recipes`: Bridge's shipped recipes, filtered, with each one's effective overlap state.

The state is what real Bridge's runtime_config_update() left for the recipe at the GPU count in its name (recorded
in the catalog); for a recipe real Bridge rejected, the row says so with Bridge's message.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from functools import lru_cache

from ..upstream import catalog, releases
from ..run import layout
from ..errors import UsageError
from ..contract import SCHEMA_VERSION
from dataclasses import dataclass, field
from ..safeio import shown

_ENV_SHOWN = ("CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_FWD_LAYERNORM_SM_MARGIN", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_NVLS_ENABLE")


@dataclass
class RecipeListing:
    """The recipes a listing found; its rows are shared by every listing of this process (read them, do not change
    them)."""

    bridge_version: str
    filters: dict
    rows: list
    closest: list = field(default_factory=list)  # model families near a --model that matched nothing
    catalog_version: str = ""  # the release whose catalog answered (catalog.release_of): 0.6.1's recipes are 0.6.0's

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "bridge_version": self.bridge_version,
                "catalog_version": self.catalog_version or self.bridge_version, "filters": self.filters,
                "count": len(self.rows), "closest": self.closest, "about": ABOUT, "recipes": self.rows}


ABOUT = {
    "env_vars": f"a subset: of the variables the recipe sets in cfg.env_vars, only the launch variables on the overlap path "
                f"({', '.join(_ENV_SHOWN)}); env_vars_not_shown counts the others, resolve --recipe NAME shows all of them",
    "fixups": "stand-in values the offline catalog build set where the recipe needs what only a download gives (its model's "
              "Hugging Face config: layer and expert counts, attention type; a pretrained checkpoint or dataset cache); never part "
              "of an answer about the shipped recipe",
    "status": "resolves: real Bridge's runtime_config_update() accepted it at the GPU count in its name and Megatron-Core's "
              "process-grid setup (initialize_model_parallel, run on the CPU) accepts its layout there; rejected: Bridge raised "
              "(bridge_error); fails_at_setup: Bridge accepted it but Megatron-Core's setup raises (setup_error), so it cannot "
              "run at that GPU count; not_built: the recipe could not be built offline",
}


def list_recipes(*, model: str | None = None, gpu: str | None = None, gpus: int | None = None, task: str | None = None,
                 precision: str | None = None, name: str | None = None, package: str | None = None,
                 bridge_version: str | None = None) -> RecipeListing:
    release = releases.get(bridge_version)
    version = catalog.release_of(release)
    filters = _filters(model=model, gpu=gpu, gpus=gpus, task=task, precision=precision, name=name, package=package)
    rows = _listed(version, [r for r in catalog.index(version) if _match(r, filters)])
    closest = []
    if not rows and "model" in filters:
        import difflib

        families = catalog.families(version)
        if not any(filters["model"] in f for f in families):
            closest = difflib.get_close_matches(filters["model"], families, n=5, cutoff=0.6)
    return RecipeListing(release.version, filters, rows, closest, version)


_LISTED: dict = {}  # (version, the recipe's offset in recipes.json) -> its row, built once per process
LISTING_BY = "tools/gen_recipe_catalog.py --index"
# rows past which the listing file is read (about 12 ms for 0.6.2's) rather than each entry (about 70 us a row)
FROM_LISTING = 150


def _listed(version: str, index_rows: list) -> list[dict]:
    missing = [r for r in index_rows if (version, r[9]) not in _LISTED]
    if missing:
        twice = _twice(version)
        committed = _committed(version) if len(missing) > FROM_LISTING else None
        if committed is not None:
            rows = [committed[r[9]] for r in missing]
        else:
            rows = [row(e, version) for e in catalog.entries_of(version, missing)]
        for r, listed in zip(missing, rows):
            _LISTED[version, r[9]] = {**listed, "reference": f"{r.package}.{r.name}" if r.name in twice else r.name}
    return [_LISTED[version, r[9]] for r in index_rows]


def listing_path(version: str):
    return catalog.catalog_path(version).with_name("recipes.listing.json")


def listing_text(version: str) -> str:
    """recipes.listing.json: every recipe's row as row() lists it, one a line in catalog order, for the catalog file
    of this size (a listing of all 1,000 recipes then decodes this instead of every recipe's whole entry)."""
    index = catalog.index(version)
    head = json.dumps({"catalog_bytes": os.stat(catalog.catalog_path(version)).st_size, "generated_by": LISTING_BY})
    rows = ",\n".join(json.dumps(row(e, version), separators=(",", ":")) for e in catalog.entries_of(version, list(index)))
    return head[:-1] + ', "rows": [\n' + rows + "\n]}\n"


@lru_cache(maxsize=None)
def _committed(version: str) -> dict | None:
    """The committed listing's rows by the recipe's offset in recipes.json, where it fits the catalog; else None
    (the rows are then built from the entries)."""
    index = catalog.index(version)
    try:
        with open(listing_path(version), "rb") as fh:
            data = json.loads(fh.read())
        if data["catalog_bytes"] != os.stat(catalog.catalog_path(version)).st_size or len(data["rows"]) != len(index):
            return None
        return {r[9]: listed for r, listed in zip(index, data["rows"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


@lru_cache(maxsize=None)
def _twice(version: str) -> frozenset:
    """The recipe names that both packages ship: a listing names those by package."""
    return frozenset(n for n, c in Counter(r.name for r in catalog.index(version)).items() if c > 1)


def _filters(**given) -> dict:
    out = {k: releases.given(f"--{k}", v) for k, v in given.items() if v is not None}
    if "gpu" in out:
        out["gpu"] = releases.gpu(out["gpu"])["name"]
    if "task" in out:
        out["task"] = releases.task(out["task"])
    if "precision" in out:
        out["precision"] = releases.precision(out["precision"])
    if "package" in out and out["package"] not in ("recipes", "perf_recipes"):
        raise UsageError(f"--package: expected recipes or perf_recipes, got {shown(out['package'])}")
    if "gpus" in out and (isinstance(out["gpus"], bool) or not isinstance(out["gpus"], int) or out["gpus"] < 1):
        raise UsageError(f"--gpus: must be a positive integer, got {shown(out['gpus'])}")
    return out


def _match(r: catalog.Row, f: dict) -> bool:
    """A recipe's index row against the filters."""
    return (
        ("model" not in f or f["model"] in (r.model or ""))
        and all(getattr(r, k) == f[k] for k in ("gpu", "gpus", "task", "precision", "package") if k in f)
        and ("name" not in f or f["name"] in r.name)
    )


def row(entry: dict, version: str) -> dict:
    """One recipe: what its name says, its layout, the overlap modes real Bridge left on or off and why, its preset,
    the launch variables it sets, and whether real Bridge accepted it; as built on a node of its GPU type, whose token
    dispatcher a build may choose by the GPU (recheck53 X5: the catalog's build without CUDA was listed)."""
    from ..run import flex

    out = {k: entry.get(k) for k in ("name", "package", "model", "task", "gpus", "gpu", "precision", "variant")}
    if not entry["builds"]:
        return {**out, "status": "not_built", "build_error": entry["build_error"]}
    bridge = flex.on_a_gpu_node(entry, version)
    entry, note = flex.for_gpu(entry, entry.get("gpu") or "h100", version)
    request = entry["request"]
    if note:
        out["note"] = note
    m = request["model"]
    co = request["comm_overlap"]
    mp = request["mixed_precision"]
    out.update(
        layout={"tp": m["tensor_model_parallel_size"], "pp": m["pipeline_model_parallel_size"], "vpp": m["virtual_pipeline_model_parallel_size"],
                "cp": m["context_parallel_size"], "ep": m.get("expert_model_parallel_size", 1), "gpus_resolved": bridge["gpus"],
                "dp": bridge.get("data_parallel_size")},
        comm_overlap=co is not None,
        preset=(co or {}).get("tp_comm_overlap_cfg"),
        mixed_precision=(mp or {}).get("recipe"),
        mixed_precision_fields=(mp or {}).get("fields") or {},  # what the recipe sets otherwise than that registered recipe
        moe_dispatcher=({"token_dispatcher_type": m.get("moe_token_dispatcher_type"), "flex_dispatcher_backend": m.get("moe_flex_dispatcher_backend")}
                        if m.get("num_moe_experts") else None),
        megatron_fsdp=bool(request["ddp"].get("use_megatron_fsdp") or request["dist"].get("use_megatron_fsdp")),
        env_vars={k: str(v) for k, v in request["env_vars"].items() if k in _ENV_SHOWN},
        env_vars_not_shown=sum(1 for k in request["env_vars"] if k not in _ENV_SHOWN),
        fixups=entry["fixups"],
    )
    if bridge["error"] is not None:
        return {**out, "status": "rejected", "bridge_error": bridge["error"]}
    if bridge.get("setup_error"):
        return {**out, "status": "fails_at_setup", "setup_error": bridge["setup_error"]}
    shape = layout.Layout.of(bridge["effective"]["model"], bridge["gpus"])
    return {**out, "status": "resolves", "modes": layout.modes(bridge["effective"], shape)}
