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


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of [start, end) intervals, sorted; touching intervals join (hta merge_kernel_intervals)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue  # shorter than HTA's microsecond grid; HTA would count it as negative time
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def merge_rows(rows: list[int], starts, ends) -> list[tuple[int, int]]:
    """merge() of the rows' [starts[i], ends[i]) without building a tuple per row first."""
    out: list[tuple[int, int]] = []
    last_start = last_end = None
    for i in sorted(rows, key=starts.__getitem__):
        start, end = starts[i], ends[i]
        if end <= start:
            continue
        if last_end is not None and start <= last_end:
            if end > last_end:
                last_end = end
        else:
            if last_end is not None:
                out.append((last_start, last_end))
            last_start, last_end = start, end
    if last_end is not None:
        out.append((last_start, last_end))
    return out


def total(merged: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in merged)


def overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Time covered by both merged lists: HTA's running status 3 (communication and computation at once)."""
    i = j = covered = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        a0, a1 = a[i]
        b0, b1 = b[j]
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
