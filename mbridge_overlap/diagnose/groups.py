"""Which process group a watchdog's collective ran on: the group's description where torch prints it (2.4+:
`[PG ID 5 PG GUID 9(CONTEXT_PARALLEL_GROUP) Rank 1]`, Megatron-Core's `group_desc`), else its size, which an
all-gather's or a reduce-scatter's element counts give (`NumelOut / NumelIn` or the inverse), matched against the
sizes of the run's groups where the config is known.
"""

from __future__ import annotations

import re

from ..safeio import MAX_GPUS
from ..upstream.groups import dimension_of, grids, place
from . import frames
from .frames import NAMES

# ProcessGroupNCCL's logPrefix with the group's description: torch 2.5+ "[PG ID 5 PG GUID 9(DESC) Rank 1]", torch 2.4
# "[PG 9 (DESC) Rank 1]" (createLogPrefix; without a description, or with "undefined", neither has the parentheses)
_DESCRIBED = re.compile(r"PG GUID \w{1,80}\((\w{1,80})\)|\[PG \w{1,80} \((\w{1,80})\) Rank \d")
SIZED = frozenset({"native.pg_watchdog_timeout_dp"})  # the messages whose lines give the group's size
# The rank within its group that the watchdog prints with ProcessGroupNCCL's own rank_ (the libtorch_cuda.so strings
# of each release): 2.5+ createLogPrefix "[PG ID n PG GUID g(DESC) Rank r]", 2.4 "[PG name (DESC) Rank r]" or
# "[PG name Rank r]", 2.3 "[PG uid Rank r]", 2.2 ncclCommWatchdog's own "[Rank r] NCCL watchdog thread terminated with
# exception: ". Not WorkNCCL's "[Rank r] Watchdog caught ...": its logPrefix is a static, the first work's rank_ in the
# process, whichever group that work ran on.
_IN_GROUP = re.compile(r"\[PG (?:ID \d{1,9} PG GUID \w{1,80}(?:\(\w{0,80}\))?|\w{1,80}(?: \(\w{1,80}\))?) Rank (\d{1,7})\]"
                       r"|\[Rank (\d{1,7})\] NCCL watchdog thread terminated with exception")
_PG_ID = re.compile(r"\[PG (?:ID )?(\d{1,9})\b")
_WORK = re.compile(r"OpType=(_?(?:REDUCE_?SCATTER|ALL_?GATHER)\w*), NumelIn=(\d{1,15}), NumelOut=(\d{1,15})")

# torch's watchdog lines about one work: the timed-out work itself, printed with the rank alone (WorkNCCL::logPrefix),
# and its next lines, printed with the group's logPrefix (its description, where it has one)
WATCHDOG_TIMEOUTS = ("native.pg_watchdog_timeout", "native.pg_watchdog_timeout_dp", "native.pg_watchdog_timeout_p2p")
COMPANIONS = ("native.pg_watchdog_exception", "native.pg_watchdog_terminated", "native.pg_watchdog_failure")
SEQ = re.compile(r"WorkNCCL\(SeqNum=(\d{1,15}),")
WORK_SEQ = re.compile(r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work): (\d{1,15})")


def work_seq(entry_id: str, text: str) -> str | None:
    """The SeqNum of the work a watchdog line is about (its own line's WorkNCCL(SeqNum=N, ...), a companion's 'work: N'),
    None for another line."""
    m = (SEQ if entry_id in WATCHDOG_TIMEOUTS else WORK_SEQ if entry_id in COMPANIONS else None)
    found = m.search(text) if m else None
    return found[1] if found else None


def described(text: str) -> str | None:
    """The dimension a watchdog line's group description names (upstream/groups.py; "other" for a group of none),
    None where the line describes no group (torch 2.4+ prints `undefined` for a group made without a description:
    distributed_c10d.py, group_desc = "undefined" if group_desc is None)."""
    desc = description(text)
    if desc is None or desc == "undefined":  # torch's own word for a group created without a description
        return None
    return dimension_of(desc) or "other"


def description(text: str) -> str | None:
    """The group description a watchdog line's prefix prints (_DESCRIBED), None where it prints none."""
    m = _DESCRIBED.search(text)
    return (m[1] or m[2]) if m else None


def tag(text: str) -> str | None:
    """The part of a watchdog line's prefix that describes its group ("PG GUID 37(DESC)", "[PG 9 (DESC) Rank 1"), for
    another line of the same work that prints none; None where the line describes none."""
    m = _DESCRIBED.search(text)
    return m[0] if m and described(text) is not None else None


def pg_id(text: str) -> int | None:
    """The process group's number a watchdog line prints ("[PG 1 Rank 6]", "[PG ID 1 PG GUID ..."): torch numbers its
    default group (the whole job) 0 and every group created after it from 1 (distributed_c10d.py)."""
    m = _PG_ID.search(text)
    return int(m[1]) if m else None


def size(text: str) -> int | None:
    """The group's size an all-gather's or reduce-scatter's element counts give (an all-gather's output is its input
    once per rank; a reduce-scatter's the other way round), None where the line gives no whole ratio of 2 or more."""
    m = _WORK.search(text)
    if m is None:
        return None
    numel_in, numel_out = int(m[2]), int(m[3])
    small, large = sorted((numel_in, numel_out))
    gathered = "GATHER" in m[1]
    if small == 0 or large % small or (numel_out > numel_in) != gathered:
        return None
    ratio = large // small
    return ratio if 2 <= ratio <= MAX_GPUS else None


def of_config(model: dict, dp: int, ddp: dict | None = None) -> dict:
    """dimension -> the sizes of the run's groups that all-gather or reduce-scatter (Megatron-Core 0.19.2):
    dp: the gradient reduce-scatter and parameter all-gather on the DP x CP group (dp_cp_group), the expert
    parameters' on the expert-DP group, each split across distributed-optimizer instances where there are several;
    tp: sequence parallel's activations (without sequence parallel TP all-reduces); cp: the all_gather exchange of
    keys and values; ep: the token dispatcher's all-gather on the expert tensor x expert groups; pp: the pipeline
    group (no overlap's collective, but a group of that size all the same); world: the whole job (torch's default
    group). dp None (a GPU count no TP x PP x CP divides: Bridge's get_data_parallel_size raises) leaves DP's sizes,
    the expert-DP group's and the whole job's unknown: "dp" is None, which no size rules out (matching)."""
    if dp is None:
        known = of_config(model, 1, ddp)
        return {**known, "dp": None, "world": set()}
    tp, pp, cp, ep, etp, edp, world = _grid(model, dp)
    instances = _instances(ddp)
    dps = {dp, dp * cp}
    if edp:
        dps.add(edp)
    dps |= {d // instances for d in dps if instances > 1 and d % instances == 0}
    out = {"dp": dps, "cp": {cp}, "tp": {tp} if model.get("sequence_parallel") else set(),
           "ep": {etp * ep, etp} if ep > 1 else set(), "pp": {pp}, "world": {world}}
    return {dim: {s for s in sizes if s > 1} for dim, sizes in out.items()}


def dp_names(model: dict, dp: int, ddp: dict | None = None) -> dict:
    """size -> what each of of_config's DP sizes is, as resolve names them: DP (data_parallel_size), the gradients'
    DP x CP group, the expert-DP group, each per distributed-optimizer instance where there are several."""
    tp, pp, cp, ep, etp, edp, world = _grid(model, dp)
    instances = _instances(ddp)
    named = [(dp, "DP")] + ([(dp * cp, "DP x CP")] if cp > 1 else []) + ([(edp, "expert DP")] if edp else [])
    named += [(n // instances, f"{what} per distributed-optimizer instance") for n, what in named
              if instances > 1 and n % instances == 0]
    out: dict = {}
    for n, what in named:
        out.setdefault(n, []).append(what)
    return {n: " and ".join(dict.fromkeys(whats)) for n, whats in out.items()}


def _grid(model: dict, dp: int) -> tuple:
    """(tp, pp, cp, ep, expert tp, expert dp, world) of a config: expert dp is 0 without expert parallelism (or where
    the expert grid does not divide the world)."""
    tp, pp, cp = (model.get(k) or 1 for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                               "context_parallel_size"))
    ep = model.get("expert_model_parallel_size") or 1
    etp = model.get("expert_tensor_parallel_size") or tp
    experts = grids(tp, pp, cp, dp, ep, etp)[1]
    return tp, pp, cp, ep, etp, dict(experts)["dp"] if experts else 0, dp * tp * pp * cp


def _instances(ddp: dict | None) -> int:
    return (ddp or {}).get("num_distributed_optimizer_instances") or 1


def in_group_rank(text: str) -> int | None:
    """The rank within its process group that torch's watchdog line prints in its tag (ProcessGroupNCCL's rank_)."""
    m = _IN_GROUP.search(text)
    return int(m[1] or m[2]) if m else None


def positions(model: dict, dp: int, rank: int, tp_pp_dp: bool = False, ddp: dict | None = None) -> dict:
    """dimension -> {group size: the ranks within a group of that size that global `rank` can have}, in Megatron-Core's
    rank order (upstream.groups.grids and place), for the groups of_config names. The groups split across
    distributed-optimizer instances are left out (their order is not modelled)."""
    tp, pp, cp, ep, etp, edp, world = _grid(model, dp)
    out: dict = {}
    if not 0 <= rank < world:
        return out

    def put(dim, axes, names):
        _key, index, size = place(axes, names, rank)
        if size > 1:
            out.setdefault(dim, {}).setdefault(size, set()).add(index)

    dense, experts = grids(tp, pp, cp, dp, ep, etp, tp_pp_dp)
    whole_dp = _instances(ddp) == 1
    if whole_dp:
        put("dp", dense, {"dp"})
        put("dp", dense, {"dp", "cp"})
    put("cp", dense, {"cp"})
    put("pp", dense, {"pp"})
    if model.get("sequence_parallel"):
        put("tp", dense, {"tp"})
    if experts:
        if whole_dp:
            put("dp", experts, {"dp"})
        put("ep", experts, {"tp", "ep"})
        put("ep", experts, {"tp"})
    if world > 1:
        out["world"] = {world: {rank}}
    return out


def matching(sizes: dict, n: int) -> list[str]:
    """The dimensions whose groups have n ranks, or whose sizes are unknown (None)."""
    return [dim for dim, s in sizes.items() if s is None or n in s]


def describe(sizes: dict, dp_named: dict | None = None) -> str:
    """of_config's sizes in words; dp_named (dp_names) says what each DP size is (DP x CP 8 where DP is 1); a
    dimension whose sizes are unknown (None) is said so."""
    def said(d, s):
        if s is None:
            return f"{NAMES.get(d, 'the whole job')} unknown"
        if d == "dp" and dp_named:
            return ", ".join(f"{dp_named.get(n, NAMES['dp'])} {n}" for n in sorted(s))
        return f"{NAMES.get(d, 'the whole job')} {'/'.join(map(str, sorted(s)))}"
    return ", ".join(said(d, s) for d, s in sizes.items() if s or s is None) or "no group of 2 or more"


# The config fields of a dimension's communication (as frames.py gives them for its code), for an NCCL failure whose
# line names the process group but shows no traceback
_FIELDS = {"dp": frames.DP_FIELDS, "pp": frames.PP_FIELDS, "tp": frames.TP_FIELDS, "cp": frames.CP_FIELDS,
           "ep": frames.EP_FIELDS}


# NCCL's own failure, not a CUDA error the watchdog's event query surfaced (any kernel's: "might be asynchronously
# reported")
_NCCL_ERROR = re.compile(r"NCCL error|nccl(?:Internal|System|Remote)Error|ncclInvalidUsage", re.I)


def failed_on(text: str) -> tuple | None:
    """(place, None, what, dimension, fields, None), the form of a traceback's overlap-path frame, for an NCCL failure's
    line that names a process group of a dimension (torch 2.4+'s tag, Megatron-Core's group_desc): the watchdog
    ending on an NCCL error (`[PG ID 3 PG GUID 7(EXPERT_MODEL_PARALLEL_GROUP) Rank 1] Process group watchdog thread
    terminated with exception: NCCL error: ...`). None for a timeout (the dimension's timeout finding says it, by the
    group too) and for a group of none of the dimensions."""
    desc = description(text)
    if desc is None or "collective operation timeout" in text or not _NCCL_ERROR.search(text):
        return None  # (recheck56 AC3: a sticky CUDA error the watchdog caught is any kernel's, not NCCL's)
    dim = dimension_of(desc)
    if dim not in _FIELDS:
        return None
    return "the process group the line names", None, f"a collective or send on {desc}", dim, list(_FIELDS[dim]), None
