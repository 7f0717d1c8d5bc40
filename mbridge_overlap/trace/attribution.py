"""Which parallel dimension a communication kernel serves, from what the trace records, else "unattributed".

Evidence, strongest first:
1. Transformer Engine userbuffers kernels (tp_comm_overlap) are TP.
2. The process-group description on the kernel (PyTorch 2.3+ copies "Process Group Description" onto it) or on the
   CPU collective record with the same External id (record_param_comms, nccl:*).
3. The group's name or ranks looked up in distributedInfo.pg_config (pg_name, pg_desc, ranks).
4. With the run's config (trace --config), a group recorded without a description whose ranks are one dimension's
   group in the config's layout (upstream.groups.by_ranks, Megatron-Core's rank order).
The description must be one Megatron-Core gives its groups (upstream/groups.py, the table diagnose reads). Groups made
by HyperCommGrid (use_decentralized_pg) carry none ("undefined"), and "default_pg" is the world: both stay
unattributed, as does a point-to-point kernel with no group (P2P is typical of PP, but CP's p2p ring uses it too).
"""

from __future__ import annotations

import re

from ..upstream.groups import DIMENSIONS, dimension_of as _dimension_of

UNATTRIBUTED = "unattributed"
ORDER = DIMENSIONS + (UNATTRIBUTED,)

_NO_DESCRIPTION = ("", "undefined")
P2P = ("SendRecv", "Send", "Recv")


def _ranks(value, memo: dict | None = None) -> tuple[int, ...] | None:
    """A group's ranks (a list, or the text a kernel records); a text is read once per distinct text where `memo`
    (one trace's) is given: fuzzJ J1, every kernel of a group carries the same string, re-read for each it cost
    kernels x its length; fuzzK K3, a cache of 1,024 texts was defeated by 1,025 groups. The trace bounds it."""
    if isinstance(value, list):
        return _rank_tuple(value)
    if not isinstance(value, str):
        return None
    if memo is None:
        return _rank_tuple(re.findall(r"-?\d+", value))
    if value not in memo:
        memo[value] = _rank_tuple(re.findall(r"-?\d+", value))
    return memo[value]


def _rank_tuple(items) -> tuple[int, ...] | None:
    try:
        ranks = tuple(int(r) for r in items)
    except (TypeError, ValueError, OverflowError):  # a rank of 1e999 is valid JSON, and no rank
        return None
    return ranks or None


class GroupTable:
    """distributedInfo.pg_config: a group's description by its name or by its ranks."""

    def __init__(self, pg_config):
        self.by_name: dict[str, str] = {}
        self.by_ranks: dict[tuple[int, ...], set[str]] = {}
        self.ranks_by_name: dict[str, tuple[int, ...]] = {}
        self.memo: dict[str, tuple[int, ...] | None] = {}  # a kernel's ranks text, read once per distinct text
        for pg in pg_config if isinstance(pg_config, list) else ():
            if isinstance(pg, dict) and (named := _ranks(pg.get("ranks"))):
                self.ranks_by_name[str(pg.get("pg_name"))] = named
            if not isinstance(pg, dict) or not isinstance(pg.get("pg_desc"), str):
                continue
            self.by_name[str(pg.get("pg_name"))] = pg["pg_desc"]
            ranks = _ranks(pg.get("ranks"))
            if ranks:
                self.by_ranks.setdefault(ranks, set()).add(pg["pg_desc"])

    def description(self, group: dict) -> str | None:
        desc = group.get("Process Group Description")
        if isinstance(desc, str) and desc not in _NO_DESCRIPTION:
            return desc
        name = group.get("Process Group Name")
        if name is not None and self.by_name.get(str(name), "") not in _NO_DESCRIPTION:
            return self.by_name[str(name)]
        known = self.by_ranks.get(_ranks(group.get("Process Group Ranks"), self.memo) or (), set()) - set(_NO_DESCRIPTION)
        if len(known) == 1:
            return next(iter(known))
        return desc if isinstance(desc, str) and desc else None


def by_layout(group: dict, table: "GroupTable", layout: dict | None) -> tuple[str, tuple[int, ...]] | None:
    """(dimension, ranks) of a group that records its ranks (on the kernel, or pg_config by its name) and whose ranks
    are one dimension's group in the run's layout (upstream.groups.by_ranks), None otherwise."""
    if not layout:
        return None
    ranks = _ranks(group.get("Process Group Ranks"), table.memo)
    if ranks is None and group.get("Process Group Name") is not None:
        ranks = table.ranks_by_name.get(str(group.get("Process Group Name")))
    dim = layout.get(ranks) if ranks else None
    return (dim, ranks) if dim else None


def dimension_of(description: str | None) -> str:
    return _dimension_of(description) or UNATTRIBUTED
