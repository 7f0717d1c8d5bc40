"""The results of `trace`: plain dataclasses whose to_dict() is the JSON output (times in microseconds)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import kernels
from ..contract import SCHEMA_VERSION
from .attribution import ORDER

DEFINITION = ("HolisticTraceAnalysis get_comm_comp_overlap: hidden_pct = hidden_us (communication while compute ran) "
              "/ communication_us (merged communication time)")


def percent(part: int, whole: int) -> float | None:
    return round(100 * (part / whole), 2) if whole else None


@dataclass
class Figures:
    compute_us: int
    communication_us: int
    hidden_us: int

    @classmethod
    def of(cls, communication: kernels.Merged, compute: kernels.Merged) -> "Figures":
        return cls(compute.total(), communication.total(), kernels.overlap(communication, compute))

    @property
    def exposed_us(self) -> int:
        return self.communication_us - self.hidden_us

    @property
    def hidden_pct(self) -> float | None:
        return percent(self.hidden_us, self.communication_us)

    def to_dict(self) -> dict:
        return {
            "compute_us": self.compute_us,
            "communication_us": self.communication_us,
            "hidden_us": self.hidden_us,
            "exposed_us": self.exposed_us,
            "hidden_pct": self.hidden_pct,
        }


@dataclass
class DimensionFigures:
    dimension: str
    kernels: int
    communication_us: int
    hidden_us: int
    collectives: dict[str, int] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)

    @property
    def exposed_us(self) -> int:
        return self.communication_us - self.hidden_us

    def to_dict(self) -> dict:
        return {
            "dimension": self.dimension,
            "kernels": self.kernels,
            "communication_us": self.communication_us,
            "hidden_us": self.hidden_us,
            "exposed_us": self.exposed_us,
            "hidden_pct": percent(self.hidden_us, self.communication_us),
            "collectives": dict(sorted(self.collectives.items())),
            "groups": self.groups,
        }


def sort_dimensions(items: list[DimensionFigures]) -> list[DimensionFigures]:
    return sorted(items, key=lambda d: ORDER.index(d.dimension))


@dataclass
class StepReport:
    step: int
    in_totals: bool
    figures: Figures
    dimensions: list[DimensionFigures]

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "in_totals": self.in_totals,
            **self.figures.to_dict(),
            "dimensions": [d.to_dict() for d in self.dimensions],
        }


@dataclass
class RankReport:
    rank: int | None
    world_size: int | None
    file: str
    partial: bool
    figures: Figures
    kernel_counts: dict[str, int]
    dimensions: list[DimensionFigures]
    steps: list[StepReport]
    notes: list[str]

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "file": self.file,
            "partial": self.partial,
            **self.figures.to_dict(),
            "kernel_counts": self.kernel_counts,
            "dimensions": [d.to_dict() for d in self.dimensions],
            "steps": [s.to_dict() for s in self.steps],
            "notes": self.notes,
        }


@dataclass
class TraceReport:
    ranks: list[RankReport]
    notes: list[str] = field(default_factory=list)
    predicted: dict | None = None  # trace with the run's config: predicted.beside()

    @property
    def partial(self) -> bool:
        return any(r.partial for r in self.ranks)

    @property
    def world_size(self) -> int | None:
        sizes = {r.world_size for r in self.ranks} - {None}
        return sizes.pop() if len(sizes) == 1 else None

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "trace_report",
            "definition": DEFINITION,
            "time_unit": "us",
            "world_size": self.world_size,
            "partial": self.partial,
            "ranks": [r.to_dict() for r in self.ranks],
            "notes": self.notes,
            **({"predicted": self.predicted} if self.predicted is not None else {}),
        }


SHOWN_RANKS = 8


def ranks_said(ranks: list) -> str:
    """A side's ranks in a bounded line (fuzzR R1: 3,000 ranks printed whole, unknown ones as None): the first few, the
    count, '?' for a rank the trace does not give."""
    said = ", ".join("?" if r is None else str(r) for r in ranks[:SHOWN_RANKS])
    return f"[{said}{f', ... {len(ranks):,} in all' if len(ranks) > SHOWN_RANKS else ''}]"
