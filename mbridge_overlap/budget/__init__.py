"""The communication budget of one iteration on one GPU: per parallel dimension (TP, CP, PP, DP, EP) the collectives
the effective config makes, their message sizes, the time they take on the system's links, what each overlap setting
hides, and what flipping it would change (estimate.py); the model's shape and FLOPs (shape.py); Megatron-Core's
gradient buckets (buckets.py); the systems' measured rates with their sources (system.py, data/budget_systems.yaml)."""

from __future__ import annotations


def of(analysis, model: str | None = None, shape: dict | None = None, efficiency: float | None = None):
    """The budget of an analysed scenario (findings.analysis.Analysis) for a model's shape: a known model's name
    and/or shape keys; the config's own hidden size where it gives one. efficiency: instead of
    the system's fitted one."""
    from . import estimate, shape as shapes, system

    state = analysis.state
    given = dict(shape or {})
    # the only shape key a config carries (the request models no other); a recipe's is its offline stand-in's
    hidden = state.model.get("hidden_size")
    if "hidden_size" not in given and hidden is not None and analysis.scenario.request.origin.get("model.hidden_size") not in (None, "recipe"):
        given["hidden_size"] = hidden
    sh, origin = shapes.of(model, given)
    lay = estimate.layout_of(state, analysis.scenario.machine)
    _fits(sh, lay)
    sysinfo = system.get(analysis.scenario.gpu, domain=lay.domain)
    if efficiency is not None:  # tools/check_budget.py fits it
        sysinfo = system.System(sysinfo.name, {**sysinfo.record, "efficiency": {"value": efficiency}}, lay.domain)
    return estimate.estimate(lay, sh, sysinfo, origin)


def _fits(sh, lay) -> None:
    """The splits Megatron-Core requires of a shape on a layout (TransformerConfig.__post_init__ and the layers'
    constructors refuse the rest): one line naming the first that fails."""
    from ..errors import UsageError

    # (layers need not divide by PP x VP: Bridge's recipes split 126 layers over PP 8 x VP 8 by counting the embedding
    # and the loss as layers, account_for_embedding/loss_in_pipeline_split; the budget costs the largest stage)
    checks = [("num_attention_heads", sh.num_attention_heads, lay.tp, "TP"), ("num_query_groups", sh.groups, lay.tp, "TP"),
              ("ffn_hidden_size", sh.ffn_hidden_size, lay.tp, "TP")]
    if sh.moe:
        checks.append(("num_moe_experts", sh.num_moe_experts, lay.ep, "EP"))
    for name, value, by, what in checks:
        if value % by:
            raise UsageError(f"{name} ({value}) is not a multiple of {what} ({by}): Megatron-Core refuses this layout")
