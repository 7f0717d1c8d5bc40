"""Megatron-Core's process groups by the description it gives each (parallel_state.py's group_desc=..., 0.19.2), and
the parallel dimension whose communication runs on it: the one table that diagnose (a watchdog line's group) and trace
(a kernel's group) both read.
"""

from __future__ import annotations

import re

DIMENSIONS = ("tp", "dp", "pp", "cp", "ep")

GROUPS = {
    "tp": ("TENSOR_MODEL_PARALLEL_GROUP",),
    # the gradient reduce and parameter gather: DP x CP (dp_cp_group), its distributed-optimizer instances' parts
    # and the experts' own DP group; the _AG groups carry the parameter all-gather on a communicator of its own
    "dp": (
        "DATA_PARALLEL_GROUP",
        "DATA_PARALLEL_GROUP_WITH_CP",
        "DATA_PARALLEL_GROUP_WITH_CP_AG",
        "DATA_PARALLEL_GROUP_WITH_GTP_REMAT",
        "DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT",
        "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP",
        "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
        "EXPERT_DATA_PARALLEL_GROUP",
        "EXPERT_DATA_PARALLEL_GROUP_AG",
        "EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT",
    ),
    # the embedding groups tie the first and last pipeline stages' embedding gradients
    "pp": ("PIPELINE_MODEL_PARALLEL_GROUP", "EMBEDDING_GROUP", "POSITION_EMBEDDING_GROUP"),
    "cp": ("CONTEXT_PARALLEL_GROUP",),  # and its levels, HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L<n> (a2a+p2p)
    # the token dispatcher's all-to-all and all-gather (expert model, expert tensor and model), the expert layers'
    # own tensor-parallel collectives (expert tensor), and the MoE router's aux-loss gathers on the TP x CP group,
    # its only user in training (transformer/moe/router.py tp_cp_group)
    "ep": (
        "EXPERT_MODEL_PARALLEL_GROUP",
        "EXPERT_TENSOR_PARALLEL_GROUP",
        "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
        "TENSOR_AND_CONTEXT_PARALLEL_GROUP",
    ),
}
# Megatron-Core's other groups (MODEL_PARALLEL_GROUP and the expert one for the gradient norm,
# TENSOR_AND_DATA_PARALLEL_GROUP*, the GTP weight-remat groups, HYBRID_DP_CP_GROUP_<n>) carry no overlap's
# communication, and torch's default_pg is the whole job: none of the dimensions.
DIMENSION_OF_GROUP = {desc: dim for dim, descs in GROUPS.items() for desc in descs}
_LEVEL = re.compile(r"HIERARCHICAL_(\w+?)(?:_GLOO)?_L\d+")


def dimension_of(description: str | None) -> str | None:
    """The dimension of the group a description names, None where it names none. Exact names, a dimension's short
    name (some launchers), a hierarchical group's level, and a name a framework extends (TENSOR_MODEL_PARALLEL_GROUP_1,
    DATA_PARALLEL_GROUP_GLOO) or writes in lower case; a word that only starts like one (DATA_PARALLELISM_GROUP) is
    none."""
    if not description:
        return None
    if description in DIMENSIONS:
        return description
    name = description.upper()
    if m := _LEVEL.fullmatch(name):
        name = m[1]
    if name in DIMENSION_OF_GROUP:
        return DIMENSION_OF_GROUP[name]
    known = [d for d in DIMENSION_OF_GROUP if name.startswith(d + "_")]
    return DIMENSION_OF_GROUP[max(known, key=len)] if known else None


MAX_WORLD = 1 << 14  # the layouts whose groups are listed by their ranks (16,384 GPUs: a few MB of tuples)


def grids(tp: int, pp: int, cp: int, dp: int, ep: int = 1, etp: int | None = None, tp_pp_dp: bool = False) -> tuple:
    """Megatron-Core's rank order (RankGenerator): the dense grid's axes, fastest first (tp, cp, then dp and pp, or pp
    and dp with Bridge's dist.use_tp_pp_dp_mapping), and the expert grid's (expert tp, ep, expert dp, pp), None without
    expert parallelism or where it does not divide the world."""
    world = tp * pp * cp * dp

    def outer(data):  # the two slowest axes, in the order Bridge asks Megatron-Core for
        return (("pp", pp), ("dp", data)) if tp_pp_dp else (("dp", data), ("pp", pp))

    etp = etp or tp
    experts = None
    if ep > 1 and world % (etp * ep * pp) == 0:
        experts = (("tp", etp), ("ep", ep), *outer(world // (etp * ep * pp)))
    return (("tp", tp), ("cp", cp), *outer(dp)), experts


def place(axes: tuple, names: set, rank: int) -> tuple[tuple, int, int]:
    """A rank in the groups that vary the `names` axes: (its coordinates on the other axes, which name its group;
    its index within the group, the masked axes' mixed radix, the first the fastest, as torch numbers a group's ranks
    by their global ones; the group's size)."""
    key, index, size, rest = [], 0, 1, rank
    for name, n in axes:
        coord, rest = rest % n, rest // n
        if name in names:
            index, size = index + coord * size, size * n
        else:
            key.append(coord)
    return tuple(key), index, size


def by_ranks(tp: int, pp: int, cp: int, dp: int, ep: int = 1, etp: int | None = None,
             tp_pp_dp: bool = False) -> dict[tuple[int, ...], str]:
    """Megatron-Core's groups of a layout by their ranks (grids()) -> the dimension of the table above whose
    communication runs on it; a set of ranks that groups of two dimensions share (TP and the expert TP of one size)
    says no dimension and is left out, as is a layout over MAX_WORLD GPUs."""
    world = tp * pp * cp * dp
    if world > MAX_WORLD:
        return {}
    dense, experts = grids(tp, pp, cp, dp, ep, etp, tp_pp_dp)
    found: dict[tuple[int, ...], set] = {}

    def add(axes, names, dim):
        members: dict[tuple, list] = {}
        for rank in range(world):
            members.setdefault(place(axes, names, rank)[0], []).append(rank)
        for ranks in members.values():
            if len(ranks) > 1:
                found.setdefault(tuple(ranks), set()).add(dim)

    for names, dim in (({"tp"}, "tp"), ({"cp"}, "cp"), ({"dp"}, "dp"), ({"dp", "cp"}, "dp"), ({"pp"}, "pp")):
        add(dense, names, dim)
    if experts:
        for names, dim in (({"ep"}, "ep"), ({"tp", "ep"}, "ep"), ({"tp"}, "ep"), ({"dp"}, "dp")):
            add(experts, names, dim)
    return {ranks: next(iter(dims)) for ranks, dims in found.items() if len(dims) == 1}
