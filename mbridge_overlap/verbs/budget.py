"""`budget`: what communication costs per iteration and what overlap hides, for a resolved config."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BudgetResult:
    analysis: object  # findings.analysis.Analysis
    budget: object  # budget.estimate.Budget

    def to_dict(self) -> dict:
        sc = self.analysis.scenario
        from ..contract import SCHEMA_VERSION

        return {"schema_version": SCHEMA_VERSION, "bridge_version": sc.release.version,
                "recipe": (sc.recipe or {}).get("name"), "gpus": sc.gpus, "gpu": sc.gpu,
                "budget": self.budget.to_dict(sc.gpus),
                "findings": [f.id for f in self.analysis.findings if f.severity == "error"],
                "note": "times are estimates from measured bus bandwidths and GEMM rates (sources and assumptions "
                        "listed); the truth needs a GPU: compare with `trace` of a profiled run" + self._refused()
                        + self._unmodelled() + "".join(f"; {n}" for n in sc.notes)}  # (what resolve notes: recheck52 W8)

    def _unmodelled(self) -> str:
        """Overlap keys the config sets that the budget prices as something else (evalS V8: a2a CP priced as the
        ring, said only by resolve's UNMODELED_OVERLAP_KEY)."""
        keys = sorted({k for f in self.analysis.findings if f.id == "UNMODELED_OVERLAP_KEY" for k in f.knobs})
        return (f"; UNMODELED_OVERLAP_KEY: {', '.join(keys)} set, which the budget does not model (its assumptions say "
                "what it prices instead)" if keys else "")

    def _refused(self) -> str:
        """A recipe real Bridge refuses as it ships for a reason outside overlap: priced all the same, and said."""
        if any(f.id == "RECIPE_REJECTED_OUTSIDE_OVERLAP" for f in self.analysis.findings):
            return ("; real Megatron-Bridge refuses this recipe as it ships, for a reason outside overlap "
                    "(RECIPE_REJECTED_OUTSIDE_OVERLAP: `resolve` says why): this prices it as if it ran")
        return ""


def budget(overrides=None, *, model=None, shape=None, **inputs) -> BudgetResult:
    from .. import budget as budgets
    from ..budget import shape as shapes
    from ..errors import UsageError
    from ..findings.analysis import analyze
    from ..run import scenario

    analysis = analyze(scenario.with_model(scenario.build(overrides=overrides, **inputs), model, shape))
    refused = "EXPERT_PARALLEL_WITHOUT_EXPERTS" in {f.id for f in analysis.errors}
    experts = shapes.experts_of(model, shape) if refused else None
    if experts:  # --shape or --model gives the experts the config leaves out, and EP > 1 asks for them
        analysis = analyze(scenario.with_model(scenario.build(overrides={**(overrides or {}), "model.num_moe_experts": experts},
                                                          **inputs), model, shape))
    why = budgets.needs(analysis)
    if why is not None:
        raise UsageError(why)
    return BudgetResult(analysis, budgets.of(analysis, model=model, shape=shape))

