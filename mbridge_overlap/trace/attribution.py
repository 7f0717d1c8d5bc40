"""Which parallel dimension a communication kernel serves, from what the trace records, else "unattributed".

Evidence, strongest first:
1. Transformer Engine userbuffers kernels (tp_comm_overlap) are TP.
2. The process-group description on the kernel (PyTorch 2.3+ copies "Process Group Description" onto it) or on the
   CPU collective record with the same External id (record_param_comms, nccl:*).
3. The group's name or ranks looked up in distributedInfo.pg_config (pg_name, pg_desc, ranks).
The description must be one Megatron-Core gives its groups (parallel_state.py, 0.19: group_desc=...). Groups made
by HyperCommGrid (use_decentralized_pg) carry none ("undefined"), and "default_pg" is the world: both stay
unattributed, as does a point-to-point kernel with no group (P2P is typical of PP, but CP's p2p ring uses it too).
"""

from __future__ import annotations

import re

DIMENSIONS = ("tp", "dp", "pp", "cp", "ep")
UNATTRIBUTED = "unattributed"
ORDER = DIMENSIONS + (UNATTRIBUTED,)

_GROUPS = {
    "tp": ("TENSOR_MODEL_PARALLEL_GROUP", "EXPERT_TENSOR_PARALLEL_GROUP"),
    "dp": (
        "DATA_PARALLEL_GROUP",
        "DATA_PARALLEL_GROUP_WITH_CP",
        "DATA_PARALLEL_GROUP_WITH_CP_AG",
        "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP",
        "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
        "EXPERT_DATA_PARALLEL_GROUP",
        "EXPERT_DATA_PARALLEL_GROUP_AG",
    ),
    # The embedding groups tie the first and last pipeline stages' embedding gradients.
    "pp": ("PIPELINE_MODEL_PARALLEL_GROUP", "EMBEDDING_GROUP", "POSITION_EMBEDDING_GROUP"),
    "cp": ("CONTEXT_PARALLEL_GROUP",),
    # The MoE token dispatcher's all-to-all and all-gather run on the expert (tensor and) model parallel group.
    "ep": ("EXPERT_MODEL_PARALLEL_GROUP", "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP"),
}
DIMENSION_OF_GROUP = {desc: dim for dim, descs in _GROUPS.items() for desc in descs}
DIMENSION_OF_GROUP.update({dim: dim for dim in DIMENSIONS})  # short names some launchers use
_HIERARCHICAL = re.compile(r"^HIERARCHICAL_(.+?)_L\d+$")
_NO_DESCRIPTION = ("", "undefined")
P2P = ("SendRecv", "Send", "Recv")


def _ranks(value) -> tuple[int, ...] | None:
    if isinstance(value, list):
        items = value
    elif isinstance(value, str):
        items = re.findall(r"-?\d+", value)
    else:
        return None
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
        for pg in pg_config if isinstance(pg_config, list) else ():
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
        known = self.by_ranks.get(_ranks(group.get("Process Group Ranks")) or (), set()) - set(_NO_DESCRIPTION)
        if len(known) == 1:
            return next(iter(known))
        return desc if isinstance(desc, str) and desc else None


def dimension_of(description: str | None) -> str:
    if not description:
        return UNATTRIBUTED
    m = _HIERARCHICAL.match(description)
    return DIMENSION_OF_GROUP.get(m.group(1) if m else description, UNATTRIBUTED)
