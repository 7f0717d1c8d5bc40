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
          "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n, "send_recv": lambda n: 1.0,
          "broadcast": lambda n: 1.0}


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
        measured shape scaled to the system's large-message value; across it one GPU's NICs less a fixed cost per
        message (overhead())."""
        if link == "network":
            peak = self.nic_gbps
            moved = size * FACTOR["all_reduce"](_shape_group())
            return moved / (moved / (peak * 1e9) + overhead(size)) / 1e9
        return self.record["nvlink"]["all_reduce" if collective == "all_reduce" else "other"]["value"] * _fraction(size)

    @property
    def nic_gbps(self) -> float:
        """One GPU's own network bandwidth: its NICs (nics_per_gpu) at one NIC's measured bus bandwidth (network)."""
        return self.record["network"]["value"] * self.record["nics_per_gpu"]["value"]

    def network_gbps(self, collective: str, local: int | None = 1) -> float:
        """The large-message bus bandwidth of a collective across the network whose group has (at fewest) `local` ranks
        in one NVLink domain. NCCL runs a ring collective as one ring per channel and each channel through a NIC of
        its own: the group's `local` ranks of a domain drive `local` GPUs' NICs at once, so the ring moves up to
        local x one GPU's NICs, capped by the NVLink ring it also runs through (nvlink.other); with one rank in a
        domain, one GPU's NICs. A send/recv crosses one GPU's NICs; an all-to-all cannot aggregate NICs (each rank
        sends its own parts: seconds() prices it apart). Every rank of the node runs its own group's collective at
        the same time (SPMD), so a group's ranks have their own GPUs' NICs, not their neighbours' idle ones."""
        if collective in ("all_to_all", "send_recv") or not local or local < 2:
            return self.nic_gbps
        return min(self.record["nvlink"]["other"]["value"], local * self.nic_gbps)

    def seconds(self, collective: str, size: int, group: int, link: str, local: int | None = None,
                parts: tuple | None = None) -> float:
        """One collective of a `size`-byte buffer over `group` ranks; local: across the network, the fewest of a
        group's ranks that share an NVLink domain with one of them (layout.fewest_local: the slowest rank, or the
        domain with the fewest NICs on the ring, sets its time). Not given: an all-to-all takes min(domain, group), a
        ring collective one rank (one GPU's NICs). parts: an all-to-all across the network, the shares of the buffer
        that go to the rest of the sender's NVLink domain and across the network (routing.split), else (local - 1) /
        group and (group - local) / group: every rank's part alike."""
        if group < 2 or size <= 0:
            return 0.0
        if collective == "all_to_all" and link == "network":
            # each rank sends to every other: the part for ranks in its own NVLink domain does not cross the network
            domain = min(self.domain, group) if local is None else local
            inside, across = parts or ((domain - 1) / group, (group - domain) / group)
            nvlink = size * inside / (self.busbw(collective, size, "nvlink") * 1e9)
            return max(nvlink, size * across / (self.nic_gbps * 1e9) + overhead(size))
        moved = size * FACTOR[collective](group)
        if link == "network":  # the NICs' rate the group's ranks drive, plus what a message of this size costs above it (evalK K5)
            return moved / (self.network_gbps(collective, local) * 1e9) + overhead(size)
        return moved / (self.busbw(collective, size, link) * 1e9)

    def sources(self) -> dict:
        """Each number this system's budget rests on: value, kind and source."""
        r = self.record
        out = {f"gemm_tflops.{k}": v for k, v in r["gemm_tflops"].items()}
        out.update({f"nvlink.{k}": v for k, v in r["nvlink"].items()})
        out["network"] = r["network"]
        out["nics_per_gpu"] = r["nics_per_gpu"]
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
