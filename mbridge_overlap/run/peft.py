"""What a run fine-tunes with PEFT: Bridge's PEFT freezes every base weight (peft/base.py PEFT.freeze_model) and
trains adapters on the modules it targets. Read from a saved run config's `peft` section or the recipe's record
(bridge/recipes.py peft); a run without either trains every weight."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..safeio import shown

# Megatron-Bridge's LoRA dataclass defaults (peft/lora.py; tests/bridge/test_budget_peft.py holds them to the release)
DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
DEFAULT_DIM = 32
MAX_DIM = 1 << 16  # a LoRA rank beyond any layer's width
MAX_TARGETS = 1024
# A target module's name -> the layer GEMM it adapts (canonical LoRA's split names adapt a part of the fused one)
GEMMS = {"linear_qkv": "qkv", "linear_q": "qkv", "linear_k": "qkv", "linear_v": "qkv", "linear_proj": "proj",
         "linear_fc1": "fc1", "linear_fc1_up": "fc1", "linear_fc1_gate": "fc1", "linear_fc2": "fc2"}


@dataclass(frozen=True)
class Peft:
    scheme: str
    target_modules: tuple
    dim: int
    regather: bool = False  # sequence_parallel_input_regather: LoRA-A gathers its sequence-parallel input itself

    @property
    def gemms(self) -> frozenset:
        """The layer GEMMs (qkv, proj, fc1, fc2) an adapter sits on: a target's last dotted part names the module
        (a pattern such as '*.layers.0.*.linear_qkv' is taken for every layer)."""
        return frozenset(GEMMS[t.rsplit(".", 1)[-1]] for t in self.target_modules if t.rsplit(".", 1)[-1] in GEMMS)

    @property
    def layernorm_fused(self) -> tuple:
        """The adapted GEMMs of Transformer Engine's LayerNorm-fused column-parallel linears (qkv, fc1): the ones
        Bridge's LoRA asks for the LayerNorm output (return_layernorm_output)."""
        return tuple(g for g in ("qkv", "fc1") if g in self.gemms)


LORA = Peft("LoRA", DEFAULT_TARGETS, DEFAULT_DIM)
REGATHER = "peft.sequence_parallel_input_regather"


def of(state) -> Peft | None:
    """The run's PEFT, None when it trains every weight."""
    raw = state.scenario.config.raw if state.scenario.config else {}
    recorded = (state.request.recipe or {}).get("request") or {}
    section = raw.get("peft") if raw.get("peft") is not None else recorded.get("peft")
    if not section:
        return None
    if not isinstance(section, dict):  # a record that says only that there is one
        return LORA
    scheme = str(section.get("scheme") or str(section.get("_target_") or "LoRA").rsplit(".", 1)[-1])
    targets, dim = section.get("target_modules"), section.get("dim")
    if targets is not None and not (isinstance(targets, list) and len(targets) <= MAX_TARGETS
                                    and all(isinstance(t, str) for t in targets)):
        raise UsageError(f"peft.target_modules: must be a list of up to {MAX_TARGETS} module names, got {shown(targets)}")
    if dim is not None and not (isinstance(dim, int) and not isinstance(dim, bool) and 1 <= dim <= MAX_DIM):
        raise UsageError(f"peft.dim: must be a whole number from 1 to {MAX_DIM:,}, got {shown(dim)}")
    regather = section.get("sequence_parallel_input_regather") is True
    if REGATHER in state.request.context:  # an override of the run's, kept as given: typed as Bridge's field is
        from . import schema
        from .request import convert

        regather = convert(REGATHER, schema.Field(schema.OPT_BOOL), state.request.context[REGATHER], state.request.release) is True
    return Peft(scheme, DEFAULT_TARGETS if targets is None else tuple(targets), DEFAULT_DIM if dim is None else dim, regather)
