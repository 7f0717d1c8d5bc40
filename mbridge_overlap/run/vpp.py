"""Whether the run's model provider refuses virtual pipeline parallelism when it builds the model (Bridge's Hybrid,
Mamba, FalconH1 and T5 providers assert virtual_pipeline_model_parallel_size is None in provide(): evalT U1), from
releases/VERSION/vpp_refused.json: the recipes that build one, and the provider classes a run config can name."""

from __future__ import annotations

import json
from functools import lru_cache

from ..upstream.releases import DATA_DIR


def data_path(version: str):
    return DATA_DIR / "releases" / version / "vpp_refused.json"


@lru_cache(maxsize=None)
def _data(version: str) -> dict:
    try:
        return json.loads(data_path(version).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def refusal(version: str, recipe: dict | None, provider_class: str = "") -> tuple[str, str] | None:
    """(provider class or recipe, the assertion's message) where the model refuses VPP, else None (or not known).
    provider_class: a run config's model._target_, module and class (two of Bridge's classes share a name)."""
    found = provider(version, recipe, provider_class)
    if found is None:
        return None
    cls, how = found
    said = {"class": cls.rsplit(".", 1)[-1], "built": f"recipe {(recipe or {}).get('name')}'s provider",
            "loaded": f"recipe {(recipe or {}).get('name')}'s model (as every recipe of its folder that builds its own)"}
    return said[how], _data(version)["classes"][cls]


def provider(version: str, recipe: dict | None, provider_class: str = "") -> tuple[str, str] | None:
    """(the refusing provider's module and class, how it is known: "class", "built", "loaded") or None."""
    data = _data(version)
    if provider_class in (data.get("classes") or {}):
        return provider_class, "class"
    ref = f"{(recipe or {}).get('package')}.{(recipe or {}).get('name')}"
    for how, key in (("built", "recipes"), ("loaded", "loaded_recipes")):  # (loaded: from a Hugging Face config)
        if ref in (data.get(key) or {}):
            return data[key][ref], how
    return None


def refusal_of(state) -> tuple[str, str] | None:
    """refusal() for a resolved state: its recipe, or the provider its run config's model._target_ names."""
    return refusal(state.request.release.version, state.scenario.recipe, _named(state))


def hybrid(state) -> bool:
    """Whether the model that refuses VPP is a hybrid (Mamba) one, whose layers Megatron-Core's hybrid layer allocation
    splits over the stages (FalconH1's and T5's do not)."""
    found = provider(state.request.release.version, state.scenario.recipe, _named(state))
    return found is not None and found[0].rsplit(".", 1)[-1] in HYBRID


HYBRID = ("HybridModelProvider", "MambaModelProvider")  # (0.6's hybrid provider; 0.5's Mamba one, 0.6's alias of it)


def _named(state) -> str:
    return state.scenario.config.provider if state.scenario.config else ""
