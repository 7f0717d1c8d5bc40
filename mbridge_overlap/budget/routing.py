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
Monte Carlo of Megatron-Core's group_limited_topk itself.

Where the copies go (split): a sender's NVLink domain holds a run of consecutive EP ranks (layout.fewest_local: the
expert grid's order), so the expected copies that stay inside it are the sum of those ranks' chances of being reached
(reach: from the same sample, a run of experts missed by each chosen group's uniform subset), the rest cross the
network. Under uniform routing every expert is as likely chosen, groups or not (the groups are exchangeable, and so
are a group's experts), so where the groups align with the ranks each rank is as likely reached and the network's
share is the EP group's (ep - local) / ep either way: the groups cut the copies (ranks_per_token) and bound the
remote NVLink domains a token reaches (at most group_topk where a group is a domain: DeepSeek-V3's node-limited
routing), not the share of the copies that crosses the network."""

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
    per_rank = experts // ep
    return sum(reach(experts, k, tuple((r * per_rank, (r + 1) * per_rank) for r in range(ep)), groups, pick))


def reach(experts: int, k: int, spans: tuple, groups: int | None = None, pick: int | None = None) -> tuple:
    """Each span's (a run of experts, (first, end)) chance of holding one of a token's top-k under uniform routing:
    without groups 1 - C(E - s, k) / C(E, k); with groups the mean over routing.py's sample of 1 less the chance
    that every chosen group's uniform subset misses the span's experts in it."""
    if not groups or not pick or pick >= groups:
        return tuple(1 - math.comb(experts - (end - first), k) / math.comb(experts, k) for first, end in spans)
    return _reach(experts, k, tuple(spans), groups, pick)


@lru_cache(maxsize=64)
def _reach(experts: int, k: int, spans: tuple, groups: int, pick: int) -> tuple:
    """The groups are exchangeable, so each sampled token counts once for each of the `groups` rotations of its
    groups' labels (a span's chance then depends on how it meets the groups, not on which: no rank drawn luckier
    than another), each pattern of overlaps computed once."""
    per_group = experts // groups
    vectors = []
    for counts in _counts(experts, k, groups, pick):
        v = [0] * groups
        for j, n in counts:
            v[j] = n
        vectors.append(v)

    @lru_cache(maxsize=None)
    def missed(held: int, n: int) -> float:  # a span holding `held` of a group's experts gets none of n chosen there
        return math.comb(per_group - held, n) / math.comb(per_group, n)

    @lru_cache(maxsize=None)
    def chance(pattern: tuple) -> float:  # pattern: (groups after the first met, experts of the span in it)
        miss = 0.0
        for v in vectors:
            for g in range(groups):
                m = 1.0
                for dj, held in pattern:
                    m *= missed(held, v[(g + dj) % groups])
                miss += m
        return 1 - miss / (len(vectors) * groups)

    out = []
    for first, end in spans:
        j0 = first // per_group
        out.append(chance(tuple((j - j0, min(end, (j + 1) * per_group) - max(first, j * per_group))
                                for j in range(j0, -(-end // per_group)))))
    return tuple(out)


def split(experts: int, k: int, ep: int, local: int, flex: bool, groups: int | None = None,
          pick: int | None = None) -> dict:
    """Where a token's dispatched copies go from the sender that sends the most across the network, whose NVLink
    domain holds `local` consecutive EP ranks of the `ep` (where local divides ep, one of the runs that tile them;
    moe_layer.py local_expert_indices: rank r holds experts r x E/ep onward): expected copies kept by the sender
    (`own`), sent to the rest of its domain (`nvlink`) and across the network (`network`), per token; the flex
    dispatcher sends one per rank reached, the alltoall one one per chosen expert (each expert k/E likely: k/ep a
    rank). Where ep is a multiple of local, also the NVLink domains a token reaches besides the sender's
    (`remote_domains`, of `domains` - 1) and the copies for the ranks at the sender's place in each domain, its own
    kept copy among them (`landing`: where a dispatcher that crosses the network once per domain lands a token)."""
    per_rank = experts // ep
    ranks = tuple((r * per_rank, (r + 1) * per_rank) for r in range(ep))
    chance = reach(experts, k, ranks, groups, pick) if flex else (k / ep,) * ep
    local = max(1, min(local, ep))
    # its domain's ranks, reached least: domains of local ranks in a row where they tile the group, else any run
    starts = range(0, ep, local) if ep % local == 0 else range(ep - local + 1)
    start = min(starts, key=lambda i: sum(chance[i:i + local]))
    inside = chance[start:start + local]
    out = {"copies": sum(chance), "own": min(inside), "nvlink": sum(inside) - min(inside),
           "network": sum(chance) - sum(inside)}
    if ep % local == 0 and ep > local:
        domains = tuple((d * local * per_rank, (d + 1) * local * per_rank) for d in range(ep // local))
        own = (start * per_rank, (start + local) * per_rank)
        place = inside.index(min(inside))
        out.update(domains=ep // local, landing=sum(chance[d * local + place] for d in range(ep // local)),
                   remote_domains=sum(reach(experts, k, domains, groups, pick))
                   - reach(experts, k, (own,), groups, pick)[0])
    return out


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
