"""What a GPU system computes and moves (data/budget_systems.yaml): GEMM rate per precision, bus bandwidth per link
and collective at a message size, and the time of one collective."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache

from ..errors import NotKnown
from ..upstream.releases import DATA_DIR, load_yaml

# bytes a collective moves through each rank's link, per byte of its buffer, for a group of n (nccl-tests' busbw)
FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n, "send_recv": lambda n: 1.0}


@lru_cache(maxsize=None)
def data() -> dict:
    return load_yaml(DATA_DIR / "budget_systems.yaml")


@dataclass(frozen=True)
class System:
    name: str
    record: dict
    domain: int = 8  # GPUs per NVLink domain of the machine asked about

    def gemm_tflops(self, precision: str) -> float:
        rates = self.record["gemm_tflops"]
        return rates["fp8" if precision in ("fp8", "fp4") else "bf16"]["value"]

    @property
    def efficiency(self) -> float:
        return self.record["efficiency"]["value"]

    @property
    def sms(self) -> int:
        return self.record["sms"]["value"]

    def busbw(self, collective: str, size: int, link: str) -> float:
        """GB/s for one message of `size` bytes (the buffer) on `link` (nvlink or network): inside the NVLink domain the
        measured shape scaled to the system's large-message value; across it the NIC's rate less a fixed cost per
        message (overhead())."""
        if link == "network":
            peak = self.record["network"]["value"]
            moved = size * FACTOR["all_reduce"](_shape_group())
            return moved / (moved / (peak * 1e9) + overhead(size)) / 1e9
        return self.record["nvlink"]["all_reduce" if collective == "all_reduce" else "other"]["value"] * _fraction(size)

    def seconds(self, collective: str, size: int, group: int, link: str, local: int | None = None) -> float:
        """One collective of a `size`-byte buffer over `group` ranks; local: for an all-to-all across the network, the
        fewest of a group's ranks that share an NVLink domain with one of them (the slowest rank sets its time)."""
        if group < 2 or size <= 0:
            return 0.0
        if collective == "all_to_all" and link == "network":
            # each rank sends to every other: the part for ranks in its own NVLink domain does not cross the network
            domain = min(self.domain, group) if local is None else local
            nvlink = size * (domain - 1) / group / (self.busbw(collective, size, "nvlink") * 1e9)
            return max(nvlink, size * (group - domain) / group / (self.record["network"]["value"] * 1e9) + overhead(size))
        moved = size * FACTOR[collective](group)
        if link == "network":  # the NIC's line rate, plus what a message of this size costs above it (evalK K5)
            return moved / (self.record["network"]["value"] * 1e9) + overhead(size)
        return moved / (self.busbw(collective, size, link) * 1e9)

    def sources(self) -> dict:
        """Each number this system's budget rests on: value, kind and source."""
        r = self.record
        out = {f"gemm_tflops.{k}": v for k, v in r["gemm_tflops"].items()}
        out.update({f"nvlink.{k}": v for k, v in r["nvlink"].items()})
        out["network"] = r["network"]
        out["sms"] = r["sms"]
        out["efficiency"] = r["efficiency"]
        return out


def get(gpu: str, domain: int = 8) -> System:
    systems = data()["systems"]
    key = gpu.lower()
    if key not in systems:
        raise NotKnown(f"no budget data for GPU type {gpu!r}; known: {', '.join(sorted(systems))}")
    return System(key, systems[key], domain)


def overhead(size: int) -> float:
    """Seconds a message of `size` bytes takes above its line-rate time: the measured shape's (its time at the size
    less the same bytes at its large-message rate), taken to hold for any link. Scaling the shape down to a NIC's rate
    instead would price a 2 MiB message across the network at a fifth of the NIC's (evalK K5): a message's fixed cost
    does not grow as the link gets slower."""
    peak = data()["shape"]["peak_gbps"] * 1e9
    moved = size * FACTOR["all_reduce"](_shape_group())
    return moved / (peak * _fraction(size)) - moved / peak


def _shape_group() -> int:
    return data()["shape"]["group"]


def _fraction(size: int) -> float:
    """The measured busbw-by-size shape, interpolated on log2 of the size; clamped at its ends (smaller messages:
    proportionally slower, as latency-bound messages are)."""
    points = _shape()
    sizes = [s for s, _ in points]
    if size >= sizes[-1]:
        return points[-1][1]
    if size <= sizes[0]:
        return points[0][1] * size / sizes[0]
    i = bisect.bisect_right(sizes, size)
    (s0, f0), (s1, f1) = points[i - 1], points[i]
    t = (math.log2(size) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
    return f0 + t * (f1 - f0)


@lru_cache(maxsize=None)
def _shape() -> tuple:
    return tuple(sorted((int(size), float(f)) for size, f in data()["shape"]["fraction"]))
