"""Whether the config can make the flip the budget prices: each overlap setting flipped through the key a user sets
(comm_overlap's, or ddp's where the request has no comm_overlap section), re-resolved through the path every verb
takes. A flip that Bridge turns back, or that brings an error or warning the config did not have, is priced but
marked: the budget never offers a change that another finding of the same answer says fails."""

from __future__ import annotations

from ..findings import overrides_text
from ..findings.proof import BLOCKING, probe, rerun
from ..findings.rules.common import owner_key
from ..run.layout import fsdp_forced

SECTION = {"tp_comm_overlap": "model", "overlap_p2p_comm": "model", "overlap_moe_expert_parallel_comm": "model",
           "overlap_grad_reduce": "ddp", "overlap_param_gather": "ddp"}


def override(state, setting: str, value: bool) -> dict:
    """The override that asks for `setting`=value: TP, P2P and MoE overlap through comm_overlap (set on the model
    they skip Bridge's checks), DP overlap where the request asks for it."""
    key = f"comm_overlap.{setting}" if SECTION[setting] == "model" else owner_key(state, setting, "ddp")
    out = {key: value}
    if key == "ddp.overlap_param_gather" and "overlap_param_gather" in state.request.optimizer:
        out["optimizer.overlap_param_gather"] = value  # validate() turns it on where either asks
    return out


def check(state, settings: dict) -> dict:
    """setting -> {"overrides", "fix", "holds", "because"} for each setting the budget flips: whether the flip takes
    effect with no warning or error that was not there, and the findings that say why not; fix: the overrides as the
    command line takes them for this config (findings.overrides_text)."""
    before = {f.id for f in probe(state) if f.severity in BLOCKING}  # (a finding that stays, about fewer knobs, is not new)
    out = {}
    for setting, on in settings.items():
        overrides = override(state, setting, not on)
        after = rerun(state, overrides)
        if after is None:
            out[setting] = {"overrides": overrides, "fix": str(overrides_text(overrides)), "holds": False,
                            "because": ["refused: resolve with it says why"]}
            continue
        found = probe(after)
        brought = [f.id for f in found if f.severity in BLOCKING and f.id not in before]
        took = bool(after.value(f"{SECTION[setting]}.{setting}")) == (not on) and setting not in fsdp_forced(after.ddp)
        if setting in fsdp_forced(after.ddp):  # Megatron-FSDP turns it back on at model wrap (evalS V2)
            brought = ["MEGATRON_FSDP_DP_OVERLAP"]
        if not took:  # Bridge turned it back: the findings of the re-resolved config say why
            brought = brought or [f.id for f in found if setting in " ".join(f.knobs)]
        out[setting] = {"overrides": overrides, "fix": str(overrides_text(overrides)), "holds": took and not brought,
                        "because": list(dict.fromkeys(brought)) or ([] if took else ["Bridge leaves it as it was"])}
    return out
