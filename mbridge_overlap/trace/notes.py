"""Plain-language notes that say how far a rank's figures can be trusted and why kernels stayed unattributed.

Every count in a note is of the kernels in the totals it sits beside; kernels the totals leave out (launched in
the last step, or without a launch record, as HolisticTraceAnalysis leaves them out) are counted apart, by reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from . import kernels
from .attribution import P2P, UNATTRIBUTED
from ..safeio import esc, shown
from .kineto import NO_LAUNCH, RankTrace


class Scope:
    """Which device rows the totals count (counted(row)), and why the others are left out."""

    def __init__(self, trace: RankTrace, counted: Callable[[int], bool]):
        self.trace, self.counted = trace, counted

    def phrase(self, rows: list[int], what: str) -> str:
        """'50 communication kernels in the totals (and 14 more left out of them: ...)'."""
        counted = sum(1 for r in rows if self.counted(r))
        left = [r for r in rows if not self.counted(r)]
        if not left:
            return f"{counted} {_plural(counted, what)}"
        no_launch = sum(1 for r in left if self.trace.launch[r] == NO_LAUNCH)
        why = ", ".join(part for part in (
            f"{len(left) - no_launch} launched in the last step" if len(left) > no_launch else "",
            f"{no_launch} without a launch record" if no_launch else "",
        ) if part)
        if not counted:
            return f"{len(left)} {_plural(len(left), what)}, all left out of the totals ({why}),"
        return f"{counted} {_plural(counted, what)} in the totals (and {len(left)} more left out of them: {why})"


def _plural(count: int, what: str) -> str:
    return what.replace("kernels", "kernel").replace("copies", "copy") if count == 1 else what


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


def _no_launch(trace: RankTrace, cutoff) -> list[str]:
    """GPU rows whose launching CPU record (same correlation id) is not in the trace."""
    kinds = Counter(trace.kind[r] for r, launch in enumerate(trace.launch) if launch == NO_LAUNCH)
    if not kinds:
        return []
    total = sum(kinds.values())
    which = ", ".join(f"{kinds[k]} {name}" for k, name in enumerate(kernels.KIND_NAMES) if kinds.get(k))
    fate = (
        "as HolisticTraceAnalysis does, the totals and the steps leave them out" if cutoff is not None else
        "they count in the totals (with fewer than two ProfilerSteps HolisticTraceAnalysis keeps every kernel) "
        "but in no step"
    )
    return [
        f"{total} GPU kernels, memcpys and memsets ({which}) have no launch record: no CPU runtime event carries "
        f"their correlation id (the profiler started after they were launched, or dropped the record); {fate}"
    ]


MAX_GROUP_NOTES = 20  # groups named one note each; past them, one note for the rest


def _unattributed(trace: RankTrace, scope: Scope, comm: dict) -> list[str]:
    rows = [row for row, (dim, _collective, _group) in comm.items() if dim == UNATTRIBUTED]
    if not rows:
        return []
    notes = []
    by_group: dict[str | None, list[int]] = {}
    for row in rows:
        by_group.setdefault(comm[row][2], []).append(row)
    if list(by_group) == [None] and not trace.collectives and not any(k.group for k in trace.comm):
        notes.append(
            f"the trace records no process group for its {scope.phrase(rows, 'communication kernels')} "
            "(older PyTorch profilers do not), so none can be attributed to a dimension"
        )
    named = sorted((d for d in by_group if d not in (None, "default_pg", "undefined")), key=lambda d: (-len(by_group[d]), str(d)))
    rest = [row for d in named[MAX_GROUP_NOTES:] for row in by_group.pop(d)]  # (fuzzK: 100,000 groups, a note each)
    if rest:
        notes.append(f"{scope.phrase(rest, 'communication kernels')} ran on {len(named) - MAX_GROUP_NOTES:,} more groups, none "
                     "of them Megatron-Core's per-dimension groups (the busiest are named below)")
    for desc, group_rows in sorted(by_group.items(), key=lambda item: str(item[0])):
        count = scope.phrase(group_rows, "communication kernels")
        if desc == "default_pg":
            notes.append(
                f"{count} ran on the default (world) process group; the trace cannot tell which dimension that is"
            )
        elif desc == "undefined":
            notes.append(
                f"{count} ran on groups created without a description (Megatron-Core's HyperCommGrid, "
                "use_decentralized_pg=True, gives none), so their dimension is unknown"
            )
        elif desc:
            notes.append(f"{count} ran on group '{desc}', which is not one of Megatron-Core's per-dimension groups")
    p2p = [row for row in rows if comm[row][1] in P2P]
    if p2p:
        kinds = Counter(comm[row][1] for row in p2p if scope.counted(row))
        listed = ", ".join(f"{kind} x{n}" for kind, n in sorted(kinds.items()))
        notes.append(
            f"{scope.phrase(p2p, 'point-to-point kernels')} stay unattributed{f' ({listed})' if listed else ''}: "
            "point-to-point is typical of PP, though CP's p2p ring attention uses it too"
        )
    return notes


def _identity(trace: RankTrace) -> list[str]:
    notes = []
    info = trace.distributed
    if "rank" in info and trace.recorded_rank is None:
        notes.append(
            f"distributedInfo.rank is {shown(info['rank'], 40)}, not a rank: "
            + ("the file name's rank is used" if trace.name_rank is not None else "the rank is unknown")
        )
    named, recorded = trace.name_rank, trace.recorded_rank
    if named is not None and recorded is not None and named != recorded:
        notes.append(
            f"the file name says rank {named} but the trace's distributedInfo records rank {recorded}; "
            f"the figures are rank {recorded}'s (was the file renamed or copied?)"
        )
    if "world_size" in info and trace.world_size is None:
        notes.append(f"distributedInfo.world_size is {shown(info['world_size'], 40)}, not a world size: ignored")
    return notes


def rank_notes(trace: RankTrace, cutoff, steps, comm: dict, counted: Callable[[int], bool]) -> list[str]:
    """comm: row -> (dimension, collective, group description) of each communication kernel; counted(row): whether
    the totals count that row."""
    scope = Scope(trace, counted)
    notes = []
    if trace.partial:
        notes.append(
            f"PARTIAL: {esc(trace.path.name)} is truncated; these figures cover only the {trace.events:,} events "
            "before the cut"
        )
    notes.append(_steps_note(cutoff, steps))
    notes.extend(_identity(trace))
    if not trace.comm:
        notes.append("no communication kernels: nothing to overlap")
    userbuffers = [k.row for k in trace.comm if kernels.is_userbuffers(k.name)]
    if userbuffers:
        notes.append(
            f"{scope.phrase(userbuffers, 'Transformer Engine userbuffers kernels')} count as TP communication "
            "(HolisticTraceAnalysis would count them as computation)"
        )
    peer = list(trace.peer_copies)
    if peer:  # (evalO O2)
        counted_rows = [r for r in peer if counted(r)]
        us = f" {sum(max(0, trace.end[r] - trace.start[r]) for r in counted_rows):,} us," if counted_rows else ""  # (fuzzL L7)
        notes.append(
            f"{scope.phrase(peer, 'peer-to-peer copies (Memcpy PtoP)')}{',' * bool(us)}{us} count as memory, not as any dimension's "
            "communication: Transformer Engine's ring-exchange TP overlap sends its chunks as such copies when it uses the "
            "copy engine (use_ce, its default, which Bridge's ring-exchange presets keep), so TP's figures then leave out "
            "that traffic"
        )
    notes.extend(_unattributed(trace, scope, comm))
    notes.extend(_no_launch(trace, cutoff))
    if trace.negative:
        notes.append(f"{trace.negative:,} GPU row{'s' * (trace.negative != 1)} with a negative duration (dur) counted as "
                     "0 us: the trace's clock or its writer is broken there, and that time is in no total")
    if trace.non_finite:
        notes.append(
            f"the file holds {trace.non_finite} NaN or Infinity value{'s' if trace.non_finite != 1 else ''} (not "
            "standard JSON, though Python reads them), none in a field the analysis uses"
        )
    return notes
