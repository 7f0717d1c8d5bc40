"""The flex token dispatcher's backend against the GPU it runs on (Bridge's training/flex_dispatcher_backend.py): the
check at setup (validate_flex_dispatcher_backend), and a recipe's build that picks it by the GPU
(apply_flex_dispatcher_backend) replayed for the GPU type asked for, as on a node of that type (recorded per recipe in
releases/VERSION/flex_builders.json; the catalog was built without CUDA, for one GPU type)."""

from __future__ import annotations

import copy
import json
from functools import lru_cache

from ..upstream.releases import DATA_DIR, gpu as gpu_info

def refusal(backend: str | None, gpu: str) -> str | None:
    """validate_flex_dispatcher_backend's message for a flex backend this GPU cannot run, None where it can (or the
    GPU's compute capability is not in our data: no check made)."""
    device = gpu_info(gpu)
    if device.get("capability") is None:
        return None
    major, name = device["capability"][0], device["device_name"]
    if backend == "deepep" and not (major in (8, 9) or name.startswith(("NVIDIA B200", "NVIDIA B300"))):
        return "DeepEP is supported for Ampere, Hopper, and Blackwell (B200/B300) GPUs."
    if backend == "hybridep" and major not in (8, 9, 10):
        return "HybridEP is supported for GB200, GB300 with NVL72 and for Ampere, Hopper, B200 and B300 GPUs"
    if backend == "ncclep" and major not in (9, 10):
        return "NCCL EP is supported for Hopper and Blackwell GPUs."
    return None


def data_path(version: str):
    return DATA_DIR / "releases" / version / "flex_builders.json"


@lru_cache(maxsize=None)
def _builders(version: str) -> dict:
    try:
        return json.loads(data_path(version).read_text(encoding="utf-8"))["recipes"]
    except (OSError, ValueError, KeyError):
        return {}


def for_gpu(entry: dict | None, gpu: str, version: str) -> tuple[dict | None, str | None]:
    """The catalog entry as its recipe builds on `gpu` (version: the catalog's release), and what changed, where its
    build calls apply_flex_dispatcher_backend and ends with another token dispatcher on that GPU than on the one the
    catalog built it for."""
    if not entry:
        return entry, None
    built_on = entry.get("gpu") or "h100"  # (a recipe without a GPU in its name is built as on an H100)
    ends = _builders(version).get(f"{entry.get('package')}.{entry.get('name')}", {}).get(gpu)
    model = (entry.get("request") or {}).get("model") or {}
    was = [model.get("moe_token_dispatcher_type"), model.get("moe_flex_dispatcher_backend")]
    if ends is None or ends == was:
        return entry, None
    out = copy.deepcopy(entry)
    out["request"]["model"].update(moe_token_dispatcher_type=ends[0], moe_flex_dispatcher_backend=ends[1])
    # on its own GPU type too: 0.6.2's function sets flex whatever the GPU where CUDA is not available, as when the
    # catalog was built (recheck52 W1: Qwen3-Next's GB200 perf recipes run alltoall on a GB200 node)
    than = f"it has on {built_on}" if gpu != built_on else "the catalog's build without CUDA recorded"
    unused = (f"; its moe_flex_dispatcher_backend {ends[1]} is not used: the alltoall dispatcher runs"
              if ends[0] != "flex" and ends[1] else "")
    note = (f"recipe {entry['name']} chooses its token dispatcher by the GPU it builds on (its build calls Bridge's "
            f"apply_flex_dispatcher_backend, which falls back or skips a backend the GPU cannot run): on a {gpu} node "
            f"it builds with {_said(ends)}, not the {_said(was)} {than}{unused}")
    return out, note


def _said(dispatcher: list) -> str:
    kind, backend = dispatcher
    return f"{kind} dispatcher" + (f" (moe_flex_dispatcher_backend {backend})" if backend else "")


def on_a_gpu_node(entry: dict, version: str) -> dict:
    """A catalog entry's Bridge result (built without CUDA) as a build on a node of its GPU type gives it: with the
    token dispatcher that build chooses (for_gpu), where it chooses it by the GPU. What the resolver is held to."""
    ends = _builders(version).get(f"{entry['package']}.{entry['name']}", {}).get(entry.get("gpu") or "h100")
    if not ends or "effective" not in entry["bridge"]:  # (a recipe Bridge refused records no effective config)
        return entry["bridge"]
    bridge = copy.deepcopy(entry["bridge"])
    bridge["effective"]["model"].update(moe_token_dispatcher_type=ends[0], moe_flex_dispatcher_backend=ends[1])
    return bridge
