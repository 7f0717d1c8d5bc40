"""Kernel kinds and interval arithmetic, as HolisticTraceAnalysis defines them for get_comm_comp_overlap.

Mirrors hta/utils/utils.py (HolisticTraceAnalysis 0.5.0): get_kernel_type() tests, in this order,
  is_comm_kernel:    re.match(r"^nccl.*Kernel", name)                           -> communication
  is_memory_kernel:  re.match(r"(^Memcpy)|(^Memset)|(^dma)", name)              -> memory
  is_compute_kernel: not re.match(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)", name) -> computation
and anything else is "other". Memory and other kernels count as neither communication nor computation.
One addition: Transformer Engine userbuffers kernels (tp_comm_overlap) are TP communication here; HTA's rule would
call them computation, so on traces that have them the report says how many there were.
"""

from __future__ import annotations

import re
from array import array

COMMUNICATION, MEMORY, COMPUTATION, OTHER = 0, 1, 2, 3
KIND_NAMES = ("communication", "memory", "computation", "other")

_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_NCCL_OP = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


def is_userbuffers(name: str) -> bool:
    return "userbuffers" in name.lower()


def kind_of(name: str) -> int:
    if _COMM.match(name) or is_userbuffers(name):
        return COMMUNICATION
    if _MEMORY.match(name):
        return MEMORY
    if not _NOT_COMPUTE.match(name):
        return COMPUTATION
    return OTHER


def collective_of(name: str) -> str:
    """The collective an NCCL kernel runs, from its name: ncclKernel_AllReduce_RING_LL_Sum_float -> AllReduce."""
    if is_userbuffers(name):
        return "userbuffers"
    m = _NCCL_OP.match(name)
    return m.group(1) if m else "unknown"


def reduced(name: str) -> str:
    """A long kernel name as what the analysis reads of it (kind, collective, userbuffers): one string for many."""
    if is_userbuffers(name):
        return "userbuffers"
    m = _NCCL_OP.match(name)
    return f"ncclDevKernel_{m.group(1)}" if m else name[:64]


class Merged:
    """The union of [start, end) intervals added in order of start (hta merge_kernel_intervals: touching intervals
    join), kept as two int64 arrays: 16 bytes an interval."""

    __slots__ = ("starts", "ends")

    def __init__(self):
        self.starts, self.ends = array("q"), array("q")

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return  # shorter than HTA's microsecond grid; HTA would count it as negative time
        ends = self.ends
        if ends and start <= ends[-1]:
            if end > ends[-1]:
                ends[-1] = end
        else:
            self.starts.append(start)
            ends.append(end)

    def total(self) -> int:
        return sum(self.ends) - sum(self.starts)

    def __iter__(self):
        return zip(self.starts, self.ends)


def merge(intervals) -> Merged:
    merged = Merged()
    for start, end in sorted(intervals):
        merged.add(start, end)
    return merged


def overlap(a: Merged, b: Merged) -> int:
    """Time covered by both: HTA's running status 3 (communication and computation at once)."""
    i = j = covered = 0
    a_starts, a_ends, b_starts, b_ends = a.starts, a.ends, b.starts, b.ends
    na, nb = len(a_starts), len(b_starts)
    while i < na and j < nb:
        a0, a1, b0, b1 = a_starts[i], a_ends[i], b_starts[j], b_ends[j]
        low = a0 if a0 > b0 else b0
        if a1 < b1:
            high = a1
            i += 1
        else:
            high = b1
            j += 1
        if high > low:
            covered += high - low
    return covered
