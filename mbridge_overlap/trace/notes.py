"""Plain-language notes that say how far a rank's figures can be trusted and why kernels stayed unattributed."""

from __future__ import annotations

from collections import Counter

from . import kernels
from .attribution import P2P, UNATTRIBUTED
from .kineto import RankTrace


def _steps_note(cutoff, steps) -> str:
    if cutoff is not None:
        last = [number for start, _end, number in steps if start >= cutoff]
        which = f"ProfilerStep#{last[0]}" if last else "the last ProfilerStep"
        return (
            f"totals leave out {which}, the last step, as HolisticTraceAnalysis does: "
            "the profiler may stop before its kernels finish"
        )
    if steps:
        return "only one ProfilerStep is marked: totals cover the whole trace, as HolisticTraceAnalysis does"
    return "no ProfilerStep marks: totals cover the whole trace and there are no per-step figures"


def _unattributed(trace: RankTrace, details, dims) -> list[str]:
    rows = [row for row, dim in dims.items() if dim == UNATTRIBUTED]
    if not rows:
        return []
    notes = []
    groups = Counter(details[row][1] for row in rows)
    if groups.get(None) == len(rows) and not trace.collectives and not any(k.group for k in trace.comm):
        notes.append(
            f"the trace records no process group for its {len(rows)} communication kernels "
            "(older PyTorch profilers do not), so none can be attributed to a dimension"
        )
    for desc, n in sorted(groups.items(), key=lambda item: str(item[0])):
        if desc == "default_pg":
            notes.append(
                f"{n} of the trace's communication kernels ran on the default (world) process group; "
                "the trace cannot tell which dimension that is"
            )
        elif desc == "undefined":
            notes.append(
                f"{n} of the trace's communication kernels ran on groups created without a description "
                "(Megatron-Core's HyperCommGrid, use_decentralized_pg=True, gives none), so their dimension is unknown"
            )
        elif desc:
            notes.append(
                f"{n} of the trace's communication kernels ran on group '{desc}', "
                "which is not one of Megatron-Core's per-dimension groups"
            )
    p2p = Counter(details[row][0] for row in rows if details[row][0] in P2P)
    if p2p:
        kinds = ", ".join(f"{kind} x{n}" for kind, n in sorted(p2p.items()))
        notes.append(
            f"unattributed point-to-point kernels ({kinds}): point-to-point is typical of PP, "
            "though CP's p2p ring attention uses it too"
        )
    return notes


def rank_notes(trace: RankTrace, cutoff, steps, details, dims) -> list[str]:
    notes = []
    if trace.partial:
        notes.append(
            f"PARTIAL: {trace.path.name} is truncated; these figures cover only the {trace.events:,} events before the cut"
        )
    notes.append(_steps_note(cutoff, steps))
    if not trace.comm:
        notes.append("no communication kernels: nothing to overlap")
    userbuffers = sum(1 for k in trace.comm if kernels.is_userbuffers(k.name))
    if userbuffers:
        notes.append(
            f"{userbuffers} Transformer Engine userbuffers kernels count as TP communication "
            "(HolisticTraceAnalysis would count them as computation)"
        )
    notes.extend(_unattributed(trace, details, dims))
    return notes
