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
    data = _data(version)
    classes = data.get("classes") or {}
    if provider_class in classes:
        return provider_class.rsplit(".", 1)[-1], classes[provider_class]
    ref = f"{(recipe or {}).get('package')}.{(recipe or {}).get('name')}"
    if ref in set(data.get("recipes") or ()):
        return f"recipe {recipe['name']}'s provider", _message(classes)
    if ref in set(data.get("loaded_recipes") or ()):  # its model from a Hugging Face config: its folder's hybrid one
        return f"recipe {recipe['name']}'s model (a hybrid one, as every recipe of its folder that builds its own)", _message(classes)
    return None


def _message(classes: dict) -> str:
    """The message of the recipe's provider: the Hybrid (0.6) or Mamba (0.5) one, which every such recipe builds."""
    for name in ("HybridModelProvider", "MambaModelProvider"):
        for key, message in classes.items():
            if key.endswith("." + name):
                return message
    return next(iter(classes.values()), "")


def refusal_of(state) -> tuple[str, str] | None:
    """refusal() for a resolved state: its recipe, or the provider class its run config's model._target_ names."""
    rc = state.scenario.config
    model = rc.raw.get("model") if rc else None
    target = model.get("_target_") if isinstance(model, dict) else None
    return refusal(state.request.release.version, state.scenario.recipe, target if isinstance(target, str) else "")


def hybrid(state) -> bool:
    """Whether the model that refuses VPP is a hybrid (Mamba) one, whose layers Megatron-Core's hybrid layer allocation
    splits over the stages (FalconH1's and T5's do not)."""
    found = refusal_of(state)
    return found is not None and ("Hybrid" in found[1] or "Mamaba" in found[1] or "Mamba" in found[1])
