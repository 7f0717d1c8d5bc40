"""Findings about worth: what the budget says an overlap setting buys, or cannot, on this layout (data/findings.yaml
holds their records; the budget lists them under `findings`)."""

from __future__ import annotations

from .. import findings
from ..findings.registry import declare

declare("budget.worth", ["WORTH_TP_ACROSS_NETWORK", "WORTH_LAST_BUCKET_EXPOSED", "WORTH_FIRST_CHUNK_EXPOSED",
                         "WORTH_OVERLAP_CANNOT_PAY", "WORTH_OVERLAP_PARTLY_HIDDEN", "WORTH_OVERLAP_COSTS_MORE",
                         "WORTH_TURNING_ON_COSTS_MORE", "WORTH_FP32_ACCUMULATION_WAITS"])

SHARE = 0.005  # of the iteration: exposed time below half a percent is not worth a finding
HALF = 0.5  # an overlap setting that hides less than this share of its collectives cannot pay for itself
LARGE = 0.05  # of the iteration: what an overlap setting that pays leaves exposed beyond this is worth a finding too
# What stays exposed of model chunk 0, by collective: what it is, when it runs, and what else can start it earlier
_FIRST_CHUNK = {
    "reduce": ("gradient reduction", "after the backward has ended", ""),
    "all_gather": ("parameter all-gather", "before the first forward",
                   "; comm_overlap.overlap_param_gather_with_optimizer_step=true starts the all-gather of chunk 0 in the "
                   "optimizer step, behind the update of the other chunks"),
}


# What gives a collective more compute beside it, in the budget's own numbers: DP's buckets are the model's whatever
# the split (a smaller split grows both); TP's, PP's and CP's messages are a layer's activations (a smaller split grows
# only the compute); EP's all-to-all hides behind the other micro-batch's attention or MLP, which a longer sequence
# grows beside it, and which fewer micro-batches leave less of (recheck49 Q3)
_MORE_COMPUTE = {
    "dp": "a larger micro-batch or sequence (the backward and forward beside the buckets grow, the buckets do not)",
    "ep": "a longer sequence (the attention beside each all-to-all grows faster than the tokens it sends), or an EP group "
          "inside the NVLink domain",
    "split": "a larger micro-batch or sequence, or a smaller split of that dimension (more of each layer's work on each GPU)",
}


def check(budget) -> list:
    it = budget.iteration_s
    if it <= 0:
        return []
    out = []
    tp = [i for i in budget.items if i.dimension == "tp"]
    if tp and tp[0].link == "network":
        total = sum(i.seconds for i in tp)
        # against the same collectives inside one domain (recheck60 AG3: with the NICs aggregated the network is not
        # always slower; what is lost for sure is userbuffers, which cannot run across domains)
        inside = sum(budget.system.seconds(i.collective, i.bytes, i.group, "nvlink") * i.count for i in tp)
        out.append(findings.make("WORTH_TP_ACROSS_NETWORK", tp=budget.layout.tp, domain=budget.layout.domain,
                                 ms=_ms(total), pct=_pct(total, it), exposed=_ms(sum(i.seconds - i.hidden for i in tp)),
                                 extra=_ms(max(0.0, total - inside))))
    settings = budget.layout.settings
    for item in budget.items:
        if item.waits >= SHARE * it:
            out.append(findings.make("WORTH_FP32_ACCUMULATION_WAITS", ms=_ms(item.waits), pct=_pct(item.waits, it),
                                     buckets=item.count, what=item.collective.replace("_", "-"),
                                     way=_ACCUMULATION[bool(budget.layout.ddp.get("grad_reduce_in_fp32"))]))
        exposed = item.seconds - item.hidden
        if item.setting is None or not settings.get(item.setting) or exposed < SHARE * it:
            continue
        if item.first_chunk and item.last >= HALF * exposed:  # chunk 0's is most of what stays exposed
            what, when, remedy = _FIRST_CHUNK["all_gather" if item.collective == "all_gather" else "reduce"]
            out.append(findings.make("WORTH_FIRST_CHUNK_EXPOSED", ms=_ms(exposed), pct=_pct(exposed, it), what=what,
                                     when=when, setting=item.setting, size=_mib(item.last_bytes), vp=budget.layout.vp,
                                     remedy=findings.Shell(remedy)))
        elif item.last and not item.first_chunk and abs(exposed - item.last) <= 1e-9 * max(1.0, exposed):
            out.append(findings.make("WORTH_LAST_BUCKET_EXPOSED", ms=_ms(exposed), pct=_pct(exposed, it), buckets=item.count,
                                     bucket=_mib(item.last_bytes)))
        elif item.hidden < HALF * (item.seconds - (item.last if item.first_chunk else 0.0)):
            out.append(findings.make("WORTH_OVERLAP_CANNOT_PAY", setting=item.setting, what=f"{item.dimension.upper()} {item.collective}",
                                     hidden=_ms(item.hidden), ms=_ms(item.seconds), pct=_pct(exposed, it),
                                     remedy=findings.Shell(_MORE_COMPUTE.get(item.dimension, _MORE_COMPUTE["split"]))))
        elif item.dimension == "dp" and exposed >= LARGE * it:  # it pays, but buckets queue past the compute beside them
            part = f"; {_ms(item.last)} of it {'model chunk 0' if item.first_chunk else 'the last bucket'}'s" if item.last else ""
            out.append(findings.make("WORTH_OVERLAP_PARTLY_HIDDEN", setting=item.setting, what=f"{item.dimension.upper()} {item.collective}",
                                     hidden=_ms(item.hidden), ms=_ms(item.seconds), exposed=_ms(exposed), pct=_pct(exposed, it),
                                     part=part))
    for setting, (exposed, cost, bubble) in budget.flipped.items():
        net = -(exposed + cost + bubble)  # what turning it off saves (the bubble carries the stages' exposed time)
        flip = budget.flips.get(setting) or {}
        if not settings.get(setting) and -net >= SHARE * it and flip.get("holds"):  # (evalR S4: MODE_LEFT_OFF's on)
            out.append(findings.make("WORTH_TURNING_ON_COSTS_MORE", setting=setting, hidden=_ms(-exposed), cost=_ms(cost),
                                     net=_ms(-net), pct=_pct(-net, it), on=findings.overrides_text(flip["overrides"]),
                                     knobs=list(flip["overrides"])))
        if settings.get(setting) and net >= SHARE * it:
            out.append(findings.make("WORTH_OVERLAP_COSTS_MORE", setting=setting, hidden=_ms(exposed), cost=_ms(-cost),
                                     net=_ms(net), pct=_pct(net, it), way=_way(budget.layout.ub_preset, budget.flips.get(setting))))
    return out


# What turning fp32 accumulation off costs, by whether the gradient buffer is FP32 already (grad_reduce_in_fp32)
_ACCUMULATION = {
    True: findings.Shell("with grad_reduce_in_fp32 on the gradient buffer is FP32 already: its all-to-all moves FP32 "
                         "and NCCL's reduce-scatter sums FP32 in FP32, so ddp.reduce_scatter_with_fp32_accumulation=false "
                         "gives up no precision and lets the buckets queue behind the backward without holding it"),
    False: findings.Shell("it is a choice of precision: off (ddp.reduce_scatter_with_fp32_accumulation=false), the buckets "
                          "queue behind the backward without holding it; mixed_precision.grad_reduce_in_fp32=true (Bridge "
                          "copies it onto ddp's) sums in FP32 too, with twice the bytes on the wire (budget with each shows the trade)"),
}


def _way(preset: str | None, flip: dict | None) -> findings.Shell:
    """A tuned preset's smaller margins, or off; where the run has a preset set (the margins priced are its own), off
    (evalR S4: "a tuned preset" was suggested to a run that had the matching one)."""
    if preset is None:
        return findings.shell("a tuned userbuffers preset with smaller SM margins (comm_overlap.tp_comm_overlap_cfg: plan "
                              "suggests one where a preset matches){off}", off=_off(flip, ", or "))
    return findings.shell("the margins priced are its preset's ({preset}): TP overlap off is the faster way here{off}",
                          preset=preset, off=_off(flip, ", "))


def _off(flip: dict | None, lead: str) -> findings.Shell:
    """Turning the setting off, where the config can (budget/flips.py); where it cannot, what says so."""
    if flip is None:
        return findings.Shell("")
    asked = findings.overrides_text(flip["overrides"])
    if flip["holds"]:
        return findings.shell("{lead}{asked}", lead=findings.Shell(lead), asked=asked)
    said = findings.shell("; not {asked} alone here: it brings {because}", asked=asked,
                          because=findings.Shell(", ".join(flip["because"])))
    if "LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED" in flip["because"]:  # its remedy, which no override sets (evalR S4)
        said = findings.shell("{said}, which peft.sequence_parallel_input_regather=true set in the recipe's Python "
                              "clears (Bridge 0.6 and later: Hydra overrides leave peft out)", said=said)
    return said


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def _pct(seconds: float, of: float) -> str:
    return f"{seconds / of * 100:.1f}%"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"



def reconcile(analysis, shown: dict) -> None:
    """One answer: MODE_LEFT_OFF's fix that turns on a setting the same answer's budget says costs more than it hides is
    not offered, and so not in all_fixes either (recheck52 W4); its text keeps the way to turn it on. Every verb that
    shows a budget calls it (budget.shown), so resolve, lint, plan and diff's sides say the same."""
    from dataclasses import replace

    costly = {k for f in shown.get("findings") or () if f["id"] == "WORTH_TURNING_ON_COSTS_MORE" for k in f["knobs"]}
    for i, f in enumerate(analysis.findings):
        if f.id == "MODE_LEFT_OFF" and any(f.fix_overrides.get(k) is True for k in costly):
            fix = findings.shell("none offered: turned on it costs more than it hides here by the budget's estimate "
                                 "(WORTH_TURNING_ON_COSTS_MORE); {on} turns it on", on=findings.overrides_text(f.fix_overrides))
            analysis.findings[i] = replace(f, fix_overrides={}, fix=fix)
