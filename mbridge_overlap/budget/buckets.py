"""Gradient buckets as Megatron-Core 0.19 lays them out (distributed/param_and_grad_buffer.py
_compute_default_per_buffer_param_layout; optimizer/distrib_optimizer.py _compute_per_buffer_param_layout with
optimizer/param_layout.py's padding): parameters in reverse registration order (the order backward makes their
gradients), a bucket closed once it holds `bucket_size` elements or more; with the distributed optimizer each
parameter starts on a 64-element boundary and each bucket ends on a multiple of lcm(DP, 128) (and 2**16 with
pad_buckets_for_high_nccl_busbw). tests/bridge/test_budget_buckets.py holds these to Megatron-Core's own functions."""

from __future__ import annotations

import math


def default_bucket_size(bucket_size: int | None, overlap_grad_reduce: bool, dp_size: int, pp_rank: int = 0) -> int | None:
    """DistributedDataParallel.__init__: unset is max(40,000,000, 1,000,000 x DP); None (one bucket) without
    overlap_grad_reduce, and on every pipeline stage but the first."""
    if not overlap_grad_reduce or pp_rank > 0:
        return None
    return bucket_size if bucket_size is not None else max(40_000_000, 1_000_000 * dp_size)


def layout(numels: list[int], bucket_size: int | None, *, distributed_optimizer: bool, dp_size: int,
           pad_for_high_nccl_busbw: bool = False, alone: frozenset = frozenset()) -> list[tuple[int, int, int]]:
    """(start, end, unpadded elements) of each bucket, in the order backward fills them. alone: the indices of
    parameters the distributed optimizer gives a bucket of their own (a shared embedding: distrib_optimizer.py
    _compute_per_buffer_param_layout's _does_param_require_new_bucket)."""
    divisor = math.lcm(dp_size, 128, 2 ** 16) if pad_for_high_nccl_busbw else math.lcm(dp_size, 128)
    pad = (lambda n: -(-n // divisor) * divisor) if distributed_optimizer else (lambda n: n)
    out: list[tuple[int, int, int]] = []
    start = bucket_start = 0
    end = 0
    open_bucket = False
    for i in reversed(range(len(numels))):
        own = distributed_optimizer and i in alone
        if distributed_optimizer:
            start = -(-start // 64) * 64
        if own and open_bucket:  # close the bucket before it
            out.append((bucket_start, pad(start), start - bucket_start))
            bucket_start = start = pad(start)
        end = start + numels[i]
        open_bucket = True
        if bucket_size is not None and end - bucket_start >= bucket_size or own:
            out.append((bucket_start, pad(end), end - bucket_start))
            bucket_start = start = pad(end)
            open_bucket = False
        else:
            start = end
    if open_bucket:
        out.append((bucket_start, pad(end), end - bucket_start))
    return out
