"""One rank's figures: compute, communication, hidden and exposed time, per dimension and per ProfilerStep.

Which kernels count follows HolisticTraceAnalysis (Trace._filter_irrelevant_gpu_kernels, 0.5.0): when the trace
marks two or more ProfilerSteps, the totals keep only the kernels whose launching CPU record starts before the
last step does (the profiler may stop before the last step's kernels finish); otherwise every kernel counts.
A kernel belongs to the step whose CPU span holds its launch (HTA add_iteration).
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections import Counter, defaultdict

from . import attribution, kernels
from .kineto import NO_LAUNCH, RankTrace
from .notes import rank_notes
from .report import DimensionFigures, Figures, RankReport, StepReport, sort_dimensions

_STEP = re.compile(r"ProfilerStep\s*#\s*(\d{1,18})(?!\d)")  # a longer number is no step a profiler counts


class _Dimension:
    __slots__ = ("merged", "kernels", "collectives", "groups")

    def __init__(self):
        self.merged, self.kernels, self.collectives, self.groups = kernels.Merged(), 0, Counter(), set()


class _Scope:
    """The device rows of the totals or of one step, added in order of start: counts by kind, and the merged
    intervals of compute, of all communication and of each dimension's."""

    def __init__(self):
        self.counts = [0, 0, 0, 0]
        self.compute, self.comm = kernels.Merged(), kernels.Merged()
        self.dims: dict[str, _Dimension] = {}

    def add(self, kind: int, start: int, end: int, comm: tuple[str, str, str | None] | None) -> None:
        self.counts[kind] += 1
        if kind == kernels.COMPUTATION:
            self.compute.add(start, end)
        elif kind == kernels.COMMUNICATION:
            self.comm.add(start, end)
            dim, collective, group = comm
            d = self.dims.get(dim)
            if d is None:
                d = self.dims[dim] = _Dimension()
            d.merged.add(start, end)
            d.kernels += 1
            d.collectives[collective] += 1
            if group:
                d.groups.add(group)

    def figures(self) -> tuple[Figures, list[DimensionFigures]]:
        dims = [
            DimensionFigures(name, d.kernels, d.merged.total(), kernels.overlap(d.merged, self.compute),
                             dict(d.collectives), sorted(d.groups))
            for name, d in self.dims.items()
        ]
        return Figures.of(self.comm, self.compute), sort_dimensions(dims)


def _cpu_steps(trace: RankTrace) -> list[tuple[int, int, int]]:
    """(start, end, number) of the CPU-side ProfilerStep#N spans, by start."""
    seen: dict[int, tuple[int, int, int]] = {}
    for (name, gpu), (start, end, _latest) in trace.steps.items():
        m = _STEP.search(name)
        if m and not gpu and int(m.group(1)) not in seen:
            seen[int(m.group(1))] = (start, end, int(m.group(1)))
    return sorted(seen.values())


def _cutoff(trace: RankTrace) -> int | None:
    if len({name for name, _gpu in trace.steps}) < 2:
        return None
    starts = [latest for (_name, gpu), (_start, _end, latest) in trace.steps.items() if not gpu]
    return max(starts) if starts else None


def _in_totals(launch: int, cutoff: int | None) -> bool:
    return cutoff is None or (launch != NO_LAUNCH and launch < cutoff)


def _by_start(trace: RankTrace) -> array:
    """The device rows in order of start. Each (start, row) is packed into one int where it fits, which halves
    the sort's transient memory (a list of Python ints) against sorting row numbers by a key."""
    starts = trace.start
    if not starts:
        return array("q")
    low, rows = min(starts), len(starts)
    if rows < 1 << 24 and max(starts) - low < 1 << 38:
        packed = sorted(((start - low) << 24) | row for row, start in enumerate(starts))
        mask = (1 << 24) - 1
        return array("q", (p & mask for p in packed))
    return array("q", sorted(range(rows), key=starts.__getitem__))


def _fill(trace: RankTrace, cutoff: int | None, steps: list[tuple[int, int, int]], comm: dict):
    totals, per_step = _Scope(), defaultdict(_Scope)
    step_starts = [s[0] for s in steps]
    starts, ends, kinds, launches = trace.start, trace.end, trace.kind, trace.launch
    for row in _by_start(trace):
        kind, launch = kinds[row], launches[row]
        detail = comm[row] if kind == kernels.COMMUNICATION else None
        if _in_totals(launch, cutoff):
            totals.add(kind, starts[row], ends[row], detail)
        if launch != NO_LAUNCH and steps:
            k = bisect_right(step_starts, launch) - 1
            if k >= 0 and launch < steps[k][1]:
                per_step[steps[k][2]].add(kind, starts[row], ends[row], detail)
    return totals, per_step


def analyze(trace: RankTrace, layout: dict | None = None) -> RankReport:
    """layout: the run's groups by their ranks (upstream.groups.by_ranks), for groups the trace describes by no
    dimension's name (evalH H6)."""
    table = attribution.GroupTable(trace.distributed.get("pg_config"))
    comm: dict[int, tuple[str, str, str | None]] = {}  # row -> (dimension, collective, group description)
    placed: Counter = Counter()  # (dimension, ranks) of the groups the layout attributed, kernels in the totals
    cutoff, steps = _cutoff(trace), _cpu_steps(trace)
    for k in trace.comm:
        group = {**trace.collectives.get(k.external_id, {}), **k.group}
        desc = table.description(group)
        collective = kernels.collective_of(k.name)
        if collective == "unknown" and isinstance(group.get("Collective name"), str):
            collective = group["Collective name"]
        dim = "tp" if kernels.is_userbuffers(k.name) else attribution.dimension_of(desc)
        # a group without a description only: Megatron-Core runs no dimension's traffic on default_pg, and a group
        # that names itself is what it names
        if dim == attribution.UNATTRIBUTED and desc in (None, "", "undefined") and \
                (found := attribution.by_layout(group, table, layout)):
            dim, ranks = found
            desc = f"ranks {list(ranks)[:8]}{' ...' if len(ranks) > 8 else ''}"
            if _in_totals(trace.launch[k.row], cutoff):  # the note counts what the totals count (evalO O6)
                placed[dim, ranks] += 1
        comm[k.row] = (dim, collective, desc)
    totals, per_step = _fill(trace, cutoff, steps, comm)
    figures, dimensions = totals.figures()
    step_reports, empty = [], _Scope()
    for start, _end, number in steps:  # a step without kernels still shows, with zeros (one empty scope for all)
        f, d = per_step.get(number, empty).figures()
        step_reports.append(StepReport(number, cutoff is None or start < cutoff, f, d))
    launch = trace.launch
    notes = rank_notes(trace, cutoff, steps, comm, lambda row: _in_totals(launch[row], cutoff))
    if placed:
        shown = ", ".join(f"{dim.upper()} {list(r)[:8]}" for dim, r in sorted(placed)[:4])
        notes.append(f"{sum(placed.values()):,} communication kernels ran on groups the trace names by no dimension and "
                     f"whose ranks are one dimension's group in the config's layout ({shown}"
                     f"{', ...' if len(placed) > 4 else ''}): counted as that dimension's")
    if sum(d.exposed_us for d in dimensions) > figures.exposed_us:
        notes.append(
            "some dimensions' kernels ran at the same time, so their exposed times overlap and add up to more "
            f"than the rank's {figures.exposed_us:,} us"
        )
    return RankReport(
        rank=trace.rank,
        world_size=trace.world_size,
        file=str(trace.path),
        partial=trace.partial,
        figures=figures,
        kernel_counts=dict(zip(kernels.KIND_NAMES, totals.counts)),
        dimensions=dimensions,
        steps=step_reports,
        notes=notes,
    )
