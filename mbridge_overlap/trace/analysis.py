"""One rank's figures: compute, communication, hidden and exposed time, per dimension and per ProfilerStep.

Which kernels count follows HolisticTraceAnalysis (Trace._filter_irrelevant_gpu_kernels, 0.5.0): when the trace
marks two or more ProfilerSteps, the totals keep only the kernels whose launching CPU record starts before the
last step does (the profiler may stop before the last step's kernels finish); otherwise every kernel counts.
A kernel belongs to the step whose CPU span holds its launch (HTA add_iteration).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter, defaultdict

from . import attribution, kernels
from .kineto import NO_LAUNCH, RankTrace
from .notes import rank_notes
from .report import DimensionFigures, Figures, RankReport, StepReport, sort_dimensions

_STEP = re.compile(r"ProfilerStep\s*#\s*(\d{1,18})(?!\d)")  # a longer number is no step a profiler counts


class _Bucket:
    """The device rows of one scope (the totals or one step)."""

    def __init__(self):
        self.compute: list[int] = []
        self.comm: dict[str, list[int]] = defaultdict(list)
        self.counts = [0, 0, 0, 0]


def _cpu_steps(trace: RankTrace) -> list[tuple[int, int, int]]:
    """(start, end, number) of the CPU-side ProfilerStep#N spans, by start."""
    seen: dict[int, tuple[int, int, int]] = {}
    for name, start, end, gpu in trace.steps:
        m = _STEP.search(name)
        if m and not gpu and int(m.group(1)) not in seen:
            seen[int(m.group(1))] = (start, end, int(m.group(1)))
    return sorted(seen.values())


def _cutoff(trace: RankTrace) -> int | None:
    if len({name for name, *_ in trace.steps}) < 2:
        return None
    starts = [start for _name, start, _end, gpu in trace.steps if not gpu]
    return max(starts) if starts else None


def _in_totals(launch: int, cutoff: int | None) -> bool:
    return cutoff is None or (launch != NO_LAUNCH and launch < cutoff)


def _fill(trace: RankTrace, cutoff: int | None, steps: list[tuple[int, int, int]], dims: dict[int, str]):
    totals, per_step = _Bucket(), defaultdict(_Bucket)
    starts = [s[0] for s in steps]
    for i, (kind, launch) in enumerate(zip(trace.kind, trace.launch)):
        scopes = []
        if _in_totals(launch, cutoff):
            scopes.append(totals)
        if launch != NO_LAUNCH and steps:
            k = bisect_right(starts, launch) - 1
            if k >= 0 and launch < steps[k][1]:
                scopes.append(per_step[steps[k][2]])
        for scope in scopes:
            scope.counts[kind] += 1
            if kind == kernels.COMPUTATION:
                scope.compute.append(i)
            elif kind == kernels.COMMUNICATION:
                scope.comm[dims[i]].append(i)
    return totals, per_step


def _figures(trace: RankTrace, bucket: _Bucket, details: dict[int, tuple[str, str | None]]):
    def merged(rows):
        return kernels.merge_rows(rows, trace.start, trace.end)

    compute = merged(bucket.compute)
    dims = []
    for dim, rows in bucket.comm.items():
        comm = merged(rows)
        groups = sorted({details[r][1] for r in rows if details[r][1]})
        dims.append(
            DimensionFigures(
                dim, len(rows), kernels.total(comm), kernels.overlap(comm, compute),
                dict(Counter(details[r][0] for r in rows)), groups,
            )
        )
    everything = merged([r for rows in bucket.comm.values() for r in rows])
    return Figures.of(everything, compute), sort_dimensions(dims)


def analyze(trace: RankTrace) -> RankReport:
    table = attribution.GroupTable(trace.distributed.get("pg_config"))
    details: dict[int, tuple[str, str | None]] = {}  # row -> (collective, group description)
    dims: dict[int, str] = {}
    for k in trace.comm:
        group = {**trace.collectives.get(k.external_id, {}), **k.group}
        desc = table.description(group)
        collective = kernels.collective_of(k.name)
        if collective == "unknown" and isinstance(group.get("Collective name"), str):
            collective = group["Collective name"]
        details[k.row] = (collective, desc)
        dims[k.row] = "tp" if kernels.is_userbuffers(k.name) else attribution.dimension_of(desc)
    cutoff, steps = _cutoff(trace), _cpu_steps(trace)
    totals, per_step = _fill(trace, cutoff, steps, dims)
    figures, dimensions = _figures(trace, totals, details)
    step_reports = []
    for start, _end, number in steps:  # a step without kernels still shows, with zeros
        f, d = _figures(trace, per_step[number], details)
        step_reports.append(StepReport(number, cutoff is None or start < cutoff, f, d))
    launch = trace.launch
    notes = rank_notes(trace, cutoff, steps, details, dims, lambda row: _in_totals(launch[row], cutoff))
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
