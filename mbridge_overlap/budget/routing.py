"""How many EP ranks one token's dispatch reaches under uniform routing (every expert's score independent and equally
distributed), with and without Megatron-Core's group-limited routing (moe_utils.group_limited_topk, 0.19.2: the
experts split into moe_router_num_groups contiguous groups; each token picks the moe_router_group_topk groups whose
top-(topk // group_topk) scores sum highest, then its top-k experts inside them). An EP rank holds the experts
ep_rank x E/ep onward (moe_layer.py local_expert_indices_offset), so a group is a run of whole ranks (E/G a multiple
of E/ep) or a rank holds whole groups.

Without groups the top-k of exchangeable scores is a uniform k-subset: ep x (1 - C(E - E/ep, k) / C(E, k)). With
groups how many of the k experts land in each chosen group depends on the scores (a chosen group won on its top
experts, so the k spread more evenly than a uniform k-subset of the chosen groups' experts: 7.49 ranks for
DeepSeek-V3 at EP 64, not 7.36), and has no closed form; inside a group the chosen ones are a uniform subset (its
experts are exchangeable). So the counts per group are drawn by a fixed-seed sample of the router's own rule and
the ranks they reach are computed exactly from them. tests/bridge/test_budget_routing.py holds the result against a
Monte Carlo of Megatron-Core's group_limited_topk itself."""

from __future__ import annotations

import math
import random
from functools import lru_cache

SAMPLE_SCORES = 1_000_000  # experts x tokens drawn (DeepSeek-V3's 256 experts: 3,906 tokens, about 0.3 s, once)


def grouping(shape) -> tuple[int, int] | None:
    """(num_groups, group_topk) where the router limits a token to some of the groups, else None (no groups set,
    or every group chosen: plain top-k). Megatron-Core's own refusals are the shape's (shape._check)."""
    groups, pick = shape.moe_router_num_groups, shape.moe_router_group_topk
    if not pick or not groups or pick >= groups:
        return None
    return groups, pick


def unmodelled(shape) -> str | None:
    """Why the grouping is not priced where group_limited_topk does something the budget does not follow: fewer
    top-k than chosen groups (topk // group_topk is 0: every group scores 0, ties picked by torch.topk), or fewer
    experts in the chosen groups than top-k (the rest are masked experts at -inf)."""
    found = grouping(shape)
    if found is None:
        return None
    groups, pick = found
    k, experts = shape.moe_router_topk, shape.num_moe_experts
    if k < pick:
        return (f"moe_router_topk {k} < moe_router_group_topk {pick}: group_limited_topk ranks the groups by the sum of "
                "their top 0 scores (all equal), which the budget does not model")
    if pick * (experts // groups) < k:
        return (f"the {pick} chosen groups hold {pick * (experts // groups)} experts, fewer than moe_router_topk {k}: "
                "group_limited_topk then picks masked experts, which the budget does not model")
    return None


def ranks_per_token(experts: int, k: int, ep: int, groups: int | None = None, pick: int | None = None) -> float:
    """Expected distinct EP ranks among a token's top-k experts under uniform routing (module doc)."""
    if not groups or not pick or pick >= groups:
        return ep * (1 - math.comb(experts - experts // ep, k) / math.comb(experts, k))
    return _grouped(experts, k, ep, groups, pick)


@lru_cache(maxsize=32)
def _grouped(experts: int, k: int, ep: int, groups: int, pick: int) -> float:
    per_group, per_rank = experts // groups, experts // ep
    # each group's overlap with each rank: (rank, experts of the group it holds)
    overlaps = [[(r, min((j + 1) * per_group, (r + 1) * per_rank) - max(j * per_group, r * per_rank))
                 for r in range((j * per_group) // per_rank, -(-(j + 1) * per_group // per_rank))]
                for j in range(groups)]

    @lru_cache(maxsize=None)
    def missed(held: int, n: int) -> float:  # a rank holding `held` of a group's experts gets none of n chosen there
        return math.comb(per_group - held, n) / math.comb(per_group, n)

    samples = _counts(experts, k, groups, pick)
    total = 0.0
    for counts in samples:
        miss: dict = {}
        for j, n in counts:
            for r, held in overlaps[j]:
                miss[r] = miss.get(r, 1.0) * missed(held, n)
        total += len(miss) - sum(miss.values())
    return total / len(samples)


@lru_cache(maxsize=32)
def _counts(experts: int, k: int, groups: int, pick: int) -> tuple:
    """A fixed-seed sample of tokens routed by group_limited_topk's rule on independent uniform scores: per token,
    (group, how many of its top-k experts lie there) for each chosen group that holds one."""
    rng = random.Random(0)
    per_group, best = experts // groups, k // pick
    tokens = max(500, SAMPLE_SCORES // experts)
    out = []
    for _ in range(tokens):
        tops = [sorted((rng.random() for _ in range(per_group)), reverse=True)[:k] for _ in range(groups)]
        chosen = sorted(range(groups), key=lambda j: sum(tops[j][:best]), reverse=True)[:pick]
        counts: dict = {}
        for _, group in sorted(((v, j) for j in chosen for v in tops[j]), reverse=True)[:k]:
            counts[group] = counts.get(group, 0) + 1
        out.append(tuple(counts.items()))
    return tuple(out)
