"""BEFORE vs AFTER: which dimension's exposed communication grew or shrank, in total and per step, ranked.

Each side may hold several ranks; its figures are the mean over its ranks (a rank without a dimension counts 0).
Steps are matched by position among the steps in the totals (the first step of BEFORE with the first of AFTER),
since two runs rarely profile the same step numbers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from .attribution import ORDER
from ..contract import SCHEMA_VERSION
from ..errors import UsageError
from ..safeio import same_files
from .job import analyze, trace_files
from .report import DEFINITION, TraceReport, percent, ranks_said


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0


def _change(delta: float) -> str:
    return "grew" if delta > 0 else "shrank" if delta < 0 else "same"


def _by_dimension(items) -> dict[str, tuple[int, int]]:
    return {d.dimension: (d.exposed_us, d.hidden_us) for d in items}


@dataclass
class Side:
    report: TraceReport

    @cached_property
    def in_totals(self) -> list[list]:
        """Per rank, its steps in the totals, in order (made once: step() reads it per position, fuzzR R3)."""
        return [[s for s in r.steps if s.in_totals] for r in self.report.ranks]


    def dimension_means(self, per_rank: list[dict[str, tuple[int, int]]]) -> dict[str, tuple[float, float]]:
        dims = {d for rank in per_rank for d in rank}
        return {
            d: (_mean([r.get(d, (0, 0))[0] for r in per_rank]), _mean([r.get(d, (0, 0))[1] for r in per_rank]))
            for d in dims
        }

    def totals(self) -> dict[str, tuple[float, float]]:
        return self.dimension_means([_by_dimension(r.dimensions) for r in self.report.ranks])

    def step(self, position: int) -> tuple[list[int], dict[str, tuple[float, float]]]:
        chosen = [steps[position] for steps in self.in_totals if len(steps) > position]
        return sorted({s.step for s in chosen}), self.dimension_means([_by_dimension(s.dimensions) for s in chosen])

    def summary(self) -> dict:
        ranks = self.report.ranks
        comm = _mean([r.figures.communication_us for r in ranks])
        hidden = _mean([r.figures.hidden_us for r in ranks])
        pct = percent(sum(r.figures.hidden_us for r in ranks), sum(r.figures.communication_us for r in ranks))
        return {
            "files": [r.file for r in ranks],
            "ranks": [r.rank for r in ranks],
            "world_size": self.report.world_size,
            "partial": self.report.partial,
            "communication_us": comm,
            "exposed_us": round(comm - hidden, 1),
            "hidden_pct": pct,
            "steps_in_totals": [[s.step for s in steps] for steps in self.in_totals],
        }


def _rows(before: dict, after: dict) -> list[dict]:
    rows = []
    for dim in sorted(set(before) | set(after), key=ORDER.index):
        b, a = before.get(dim, (0.0, 0.0)), after.get(dim, (0.0, 0.0))
        delta = round(a[0] - b[0], 1)
        rows.append({
            "dimension": dim,
            "exposed_before_us": b[0],
            "exposed_after_us": a[0],
            "exposed_delta_us": delta,
            "hidden_before_us": b[1],
            "hidden_after_us": a[1],
            "change": _change(delta),
        })
    return rows


def _ranked(rows: list[dict]) -> list[dict]:
    """Biggest change of exposed time first; ties keep step order, then dimension order (a stable sort)."""
    return sorted(rows, key=lambda r: -abs(r["exposed_delta_us"]))


@dataclass
class TraceComparison:
    before: TraceReport
    after: TraceReport
    notes: list[str] = field(default_factory=list)

    def dimensions(self) -> list[dict]:
        return _ranked(_rows(Side(self.before).totals(), Side(self.after).totals()))

    def steps(self) -> list[dict]:
        b, a = Side(self.before), Side(self.after)
        count = min(max(map(len, b.in_totals), default=0), max(map(len, a.in_totals), default=0))
        rows = []
        for position in range(count):
            (b_steps, b_dims), (a_steps, a_dims) = b.step(position), a.step(position)
            for row in _rows(b_dims, a_dims):
                rows.append({"position": position + 1, "steps_before": b_steps, "steps_after": a_steps, **row})
        return _ranked(rows)

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "trace_comparison",
            "definition": DEFINITION,
            "time_unit": "us",
            "aggregation": "mean over each side's ranks; steps matched by position among the steps in the totals",
            "before": Side(self.before).summary(),
            "after": Side(self.after).summary(),
            "dimensions": self.dimensions(),
            "steps": self.steps(),
            "notes": self.notes,
        }


def _notes(before: TraceReport, after: TraceReport) -> list[str]:
    notes = []
    b_ranks, a_ranks = [r.rank for r in before.ranks], [r.rank for r in after.ranks]
    if sorted(map(str, b_ranks)) != sorted(map(str, a_ranks)):
        notes.append(f"BEFORE has ranks {ranks_said(b_ranks)} and AFTER ranks {ranks_said(a_ranks)}: each side is the "
                     "mean over its own ranks")
    if before.world_size != after.world_size:
        notes.append(f"world sizes differ: {before.world_size} before, {after.world_size} after")
    b_steps = max((len(s) for s in Side(before).in_totals), default=0)
    a_steps = max((len(s) for s in Side(after).in_totals), default=0)
    if b_steps != a_steps:
        notes.append(f"{b_steps} steps before and {a_steps} after: per-step rows cover the first {min(b_steps, a_steps)}")
    if before.partial or after.partial:
        notes.append("PARTIAL: a truncated trace is compared; its figures cover only what was read")
    return notes


def _side(label: str, path, **options):
    """One capture analysed; an error about it names the side (fuzzG G6: '--rank 3: not in the traces given' did
    not say which of the two lacked it)."""
    try:
        return analyze(path, **options)
    except UsageError as exc:
        if str(exc).startswith("--rank"):
            raise UsageError(f"{label}: {exc}") from None
        raise


def compare(before, after, ranks: Iterable[int] | None = None, allow_partial: bool = False, jobs: int | None = None) -> TraceComparison:
    """Compare two captures (a file or a directory of one job's rank files each)."""
    b, a = (_side(label, path, ranks=ranks, allow_partial=allow_partial, jobs=jobs)
            for label, path in (("BEFORE", before), ("AFTER", after)))
    same = same_files(*(trace_files([side] if isinstance(side, (str, os.PathLike)) else side) for side in (before, after)))
    same = [same.format(kind="trace")] if same else []
    return TraceComparison(b, a, same + _notes(b, a))  # (fuzzM M6, as diagnose --compare says: fuzzH H12)
