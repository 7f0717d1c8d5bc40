"""Whether the config can make the flip the budget prices: each overlap setting flipped through the key a user sets
(comm_overlap's, or ddp's where the request has no comm_overlap section), re-resolved through the path every verb
takes. A flip that Bridge turns back, or that brings an error the config did not have, is priced but marked: the
budget never offers a change that another finding of the same answer says fails; a warning it brings goes with it."""

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
    """setting -> {"overrides", "fix", "holds", "because", "with"} for each setting the budget flips: whether the flip
    takes effect with no error that was not there, and the findings that say why not; with: the warnings it brings
    (each with the overrides its finding asks for, a launch variable), which go into fix; fix: the overrides and
    theirs as the command line takes them for this config (findings.overrides_text)."""
    before = {f.id for f in probe(state) if f.severity in BLOCKING}  # (a finding that stays, about fewer knobs, is not new)
    out = {}
    for setting, on in settings.items():
        overrides = override(state, setting, not on)
        after = rerun(state, overrides)
        if after is None:
            out[setting] = {"overrides": overrides, "fix": str(overrides_text(overrides)), "holds": False,
                            "because": ["refused: resolve with it says why"], "with": []}
            continue
        found = probe(after)
        new = [f for f in found if f.severity in BLOCKING and f.id not in before]
        # an error (config, setup or step) stops the flip; a warning does not (evalAB AB2-5: the launch variable
        # LAUNCH_ENV_DIFFERS_FROM_BRIDGE asks for made MoE overlap's flip "not hold", which real Bridge 0.6.2's
        # runtime_config_update and validate() accept): it goes with the flip, its launch variable in the fix
        # A warning whose finding asks for no override (LoRA's dropped gradient: a Python remedy) still stops it.
        brought = [f.id for f in new if f.severity == "error" or not f.fix_overrides]
        warned = [f for f in new if f.severity == "warning" and f.fix_overrides]
        took = bool(after.value(f"{SECTION[setting]}.{setting}")) == (not on) and setting not in fsdp_forced(after.ddp)
        if setting in fsdp_forced(after.ddp):  # Megatron-FSDP turns it back on at model wrap (evalS V2)
            brought = ["MEGATRON_FSDP_DP_OVERLAP"]
        if not took:  # Bridge turned it back: the findings of the re-resolved config say why
            brought = brought or [f.id for f in new] or [f.id for f in found if setting in " ".join(f.knobs)]
        holds = took and not brought
        along = [{"id": f.id, "overrides": dict(f.fix_overrides or {})} for f in warned] if holds else []
        fix = {**overrides, **{k: v for w in along for k, v in w["overrides"].items()}}
        if along:  # the flip with what its warnings ask for: proven to bring nothing new, else it does not hold
            whole = rerun(state, fix)
            left = None if whole is None else [f.id for f in probe(whole) if f.severity in BLOCKING and f.id not in before]
            if left is None or left:
                holds, brought, along, fix = False, left or [w["id"] for w in along], [], overrides
        out[setting] = {"overrides": overrides, "fix": str(overrides_text(fix)), "holds": holds,
                        "because": list(dict.fromkeys(brought)) or ([] if took else ["Bridge leaves it as it was"]),
                        "with": along}
    return out
