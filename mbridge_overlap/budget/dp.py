"""DP's collectives per iteration: each DDP buffer's buckets (Megatron-Core's layout, per model chunk), their gradient
reduce and parameter all-gather, and what overlap_grad_reduce and overlap_param_gather hide of them."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import re

from . import buckets, shape as shapes
from .collective import Item, across
from .layout import QUANTIZED_WEIGHT, Layout, chunk_layers, fewest_local, link_of, rank_layers, stage_numbers


def collectives(lay, shape, system, layers, stage_fwd, stage_bwd, rank: int = 0, mtp: int = 0) -> list:
    """The DP buckets' gradient reduce and parameter gather of pipeline rank `rank` (the rank the budget costs, with
    `layers` decoder layers and `mtp` MTP layers): the dense parameters' on the DP x CP group, the experts' (a buffer
    of their own, DistributedDataParallel's expert_parallel_buffers) on the expert-DP group, both dispatched by one
    start_grad_sync (start_param_sync) of each model chunk, in turn. A rank after the first reduces (gathers) with
    the pipeline's cooldown (warm-up) still running on the ranks before it: `rank` stage backwards (forwards) of one
    micro-batch hide it; the step ends with the later of its exposed part and rank 0's (costed too)."""
    bufs = _buffers(lay, shape, system, layers, rank, mtp)
    zero = _buffers(lay, shape, system, layers, 0, 0) if rank else None
    out: dict = {}
    for kind, setting, budget in (("reduce", "overlap_grad_reduce", stage_bwd), ("gather", "overlap_param_gather", stage_fwd)):
        if kind == "gather" and (not lay.ddp.get("use_distributed_optimizer") or unsharded(lay)):
            break  # (Megatron-FSDP's no_shard: start_param_sync returns at once, evalL L2)
        slack = rank * budget / lay.vp
        sides = [_side(lay, bufs, zero, kind, setting, budget, slack, chain) for chain in (False, True)]
        before = [0.0, 0.0]
        whole = 0.0
        for i, b in enumerate(bufs):  # a buffer's part: what the buffers before it leave exposed, and what it adds
            total = sum(map(sum, b[kind]))
            whole += total
            exposed = [min(whole, s[i]) for s in sides]
            hidden = min(total, max(0.0, total - (exposed[1] - before[1])))
            waits = max(0.0, (exposed[1] - before[1]) - (exposed[0] - before[0]))
            before = exposed
            out[i, kind] = _item(lay, b, kind, total, hidden, setting, slack, waits)
    return [out[key] for key in sorted(out, key=lambda k: (k[0], k[1] != "reduce"))]


def _side(lay, bufs, zero, kind, setting, budget, slack, chain) -> list:
    """What stays exposed of the first i + 1 buffers' `kind` collectives: the costed rank's, or rank 0's where that is
    later. chain: with fp32 accumulation's wait between bucket groups (chained()), else without."""
    mine = _cumulative(lay, bufs, kind, setting, budget, slack, chain)
    if not zero:
        return mine
    theirs = _cumulative(lay, zero, kind, setting, budget, 0.0, chain)
    return [max(m, theirs[min(i, len(theirs) - 1)]) for i, m in enumerate(mine)]


def _cumulative(lay, bufs, kind, setting, budget, slack, chain=True) -> list:
    """What stays exposed of the first i + 1 buffers' `kind` collectives on the rank's own timeline (all of them
    without the overlap setting), less the pipeline's `slack` beside them."""
    out, whole = [], 0.0
    chain = chain and kind == "reduce" and chained(lay)
    for i, b in enumerate(bufs):
        whole += sum(map(sum, b[kind]))
        own = _exposed(lay, [x[kind] for x in bufs[:i + 1]], kind, budget, chain) if lay.settings[setting] else whole
        out.append(max(0.0, own - slack))
    return out


def fp32_accumulation(lay) -> bool:
    """ddp.reduce_scatter_with_fp32_accumulation where DDP reads it (Megatron-FSDP does not: megatron/core/distributed/
    fsdp never reads the field)."""
    return lay.fp32_accumulation and not lay.fsdp


def chained(lay) -> bool:
    """Whether each bucket group's start_grad_sync first waits for the one before it (previous_grad_reduce_bucket_group:
    Megatron-Core 0.19.2 distributed_data_parallel.py:317-332, param_and_grad_buffer.py:608-622): with overlap_grad_reduce
    and fp32 accumulation, the all-reduce's too (the link does not ask for the distributed optimizer). Its
    finish_grad_sync's wait() holds the compute stream until that group's collective has ended (and, for the all-to-all,
    runs its FP32 sum there: reduce_scatter_with_fp32_accumulation.py wait())."""
    return fp32_accumulation(lay) and bool(lay.settings.get("overlap_grad_reduce"))


def _buffers(lay, shape, system, layers, rank, mtp) -> list:
    """The dense and the experts' DDP buffers of pipeline rank `rank` (_buffer), those it has."""
    if lay.peft:  # only what trains has a gradient buffer (DistributedDataParallel skips frozen parameters)
        params = [(f"decoder.layers.{i}.{g}.adapter", n, False) for i in range(layers)
                  for g, n in shapes.adapter_params(shape, lay.peft.gemms, lay.peft.dim, lay.tp).items()]
        nums, alone = list(range(layers)), None
    else:
        lay, params, nums, layers, alone = rank_params(lay, shape, layers, rank, mtp)
    split = chunk_layers(lay, rank)  # a layout's own chunks (evalAB AB2-1), else an even split (_chunks)
    split = split if sum(split) == layers else ()
    final = _final_norm_chunk(split, nums, shape) if split else None
    dense = [p for p in params if not p[2]]
    experts = [p for p in params if p[2]]
    world = lay.dp * lay.cp * lay.tp * lay.pp
    expert_dp = world // (lay.etp * lay.ep * lay.pp) if experts else 1
    # one bucket size for every buffer: the DP group's default (DistributedDataParallel.__init__), none past rank 0
    size = buckets.default_bucket_size(_bucket_size(lay, shape, layers, params), lay.settings["overlap_grad_reduce"],
                                       lay.dp * lay.cp, pp_rank=rank)
    chunking = {"first": not rank, "split": split, "final": final}
    bufs = [_buffer(lay, system, dense, lay.dp * lay.cp, _placed(lay, lay.tp, lay.cp * lay.dp), "", layers, size, nums,
                    alone=alone, **chunking),
            _buffer(lay, system, experts, expert_dp, _placed(lay, lay.etp * lay.ep, expert_dp),
                    f"expert ({expert_dp}-rank expert-DP group) ", layers, size, nums, **chunking)]
    return [b for b in bufs if b]


def _final_norm_chunk(split: tuple, nums: list, shape) -> int | None:
    """The model chunk that builds the decoder's final norm where the rank builds it (stage_params): with MTP layers
    the chunk of the model's last decoder layer (TransformerBlock.has_final_layernorm_in_this_stage), else the last;
    None: the last."""
    if not shape.mtp_num_layers or not nums or nums[-1] != shape.num_layers - 1:
        return None
    return next(k for k in reversed(range(len(split))) if split[k])


def shared_copy(shape, last: bool, mtp: int) -> str | None:
    """The parameter of a rank after the first that LanguageModule.setup_embeddings_and_output_layer marks
    shared_embedding (a DP bucket of its own with the distributed optimizer): shared_embedding_or_output_weight, the
    MTP layers' embedding where the rank holds them, else the last stage's tied output layer."""
    if mtp:
        return "embedding.word_embeddings.weight"
    return "output_layer.weight" if last and shape.share_embeddings_and_output_weights else None


def rank_params(lay, shape, layers, rank, mtp) -> tuple:
    """Pipeline rank `rank`'s parameters (shapes.stage_params, every model chunk's) as DDP's buffers hold them: (the
    layout as that rank reads it, the parameters, its layers' global numbers, its layer count, the shared embedding
    copy a bucket of its own or None)."""
    if rank:  # its own stage: no embedding but the MTP layers' (GPTModel: pre_process or mtp_process)
        lay = Layout(**{**lay.__dict__, "num_layers": shape.num_layers or 0, "chunk_offset": 0})
        nums = stage_numbers(lay, shape.num_layers, rank)
        last = rank == lay.pp - 1
        params = shapes.stage_params(shape, lay.tp, lay.ep, len(nums), first=False, last=last, numbers=nums, etp=lay.etp,
                                     mtp=mtp, final_norm=shapes.final_norm_here(shape, last, nums))
        layers = len(nums)
        alone = shared_copy(shape, last, mtp)
    else:
        layers, lay = _first_stage(shape, lay, layers)
        lay = Layout(**{**lay.__dict__, "num_layers": shape.num_layers or 0})
        nums = numbers(lay, layers)
        params = shapes.stage_params(shape, lay.tp, lay.ep, layers, first=True, last=lay.pp == 1, numbers=nums, etp=lay.etp,
                                     mtp=mtp or None, final_norm=shapes.final_norm_here(shape, lay.pp == 1, nums))
        alone = ("embedding.word_embeddings.weight" if lay.pp > 1 and (shape.share_embeddings_and_output_weights
                                                                      or shape.mtp_num_layers) else None)
    return lay, params, nums, layers, alone


def _placed(lay, stride: int, size: int) -> tuple[str, int | None]:
    """(link, local) of a DP group of `size` ranks `stride` apart: local, across the network, the fewest of its ranks
    in one NVLink domain (the NICs its rings run over: a group of whole nodes moves over all of their NICs)."""
    link = link_of(lay, stride, size)
    return link, fewest_local(lay, stride, size) if link == "network" else None


def _bucket_size(lay, shape, layers: int, params: list) -> int | None:
    """ddp.bucket_size, or with ddp.num_buckets what Megatron's DDP wrapper makes of it: every parameter of this rank's
    model chunks (frozen ones too) over num_buckets (megatron/training/models/dist_utils.py; evalN N1)."""
    d = lay.ddp
    if not d.get("num_buckets") or d.get("bucket_size") is not None:
        return d.get("bucket_size")
    whole = params
    if lay.peft:  # the adapters train; the frozen base's parameters count too
        first, at = _first_stage(shape, lay, layers)
        whole = params + shapes.stage_params(shape, lay.tp, lay.ep, first, first=True, last=lay.pp == 1,
                                             numbers=numbers(at, first), etp=lay.etp)
    return sum(n for _, n, _ in whole) // d["num_buckets"]


def unsharded(lay) -> bool:
    """Megatron-FSDP with no_shard: every rank keeps whole gradients and parameters (an all-reduce, no gather)."""
    return lay.fsdp and lay.ddp.get("data_parallel_sharding_strategy") == "no_shard"


def _first_stage(shape, lay, layers: int) -> tuple:
    """The first pipeline stage's layers, where the split counts the embedding as a layer
    (account_for_embedding_in_pipeline_split: TransformerBlock gives the first virtual stage one layer fewer); and the
    layout with where its first chunk starts."""
    if lay.stages:  # the config's layout: its first rank's (evalZ Z3-2)
        return rank_layers(lay, 0), lay
    if lay.pp < 2 or not lay.layer_slots[0]:
        return layers, lay
    slots = shape.num_layers + sum(lay.layer_slots)
    if slots % (lay.pp * lay.vp):
        return layers, lay  # (not a split Megatron-Core takes: _uneven_split says so)
    return slots // lay.pp - 1, Layout(**{**lay.__dict__, "chunk_offset": 1})


def _buffer(lay, system, params, group, placed, whose, layers, size, nums, alone=None, first=True, split=(),
            final=None) -> dict | None:
    """One kind of DDP buffer: its bucket groups per model chunk (chunk 0 first; a chunk without this kind of
    parameter none: its DDP has no such buffer) and each group's time to reduce (`reduce`) and, with the distributed
    optimizer, to gather (`gather`). split, final: _chunks'."""
    if group < 2 or not params:
        return None
    link, local = placed
    d = lay.ddp
    distopt = bool(d.get("use_distributed_optimizer"))
    grad_bytes = 4 if d.get("grad_reduce_in_fp32") else 2
    reduce = "reduce_scatter" if distopt and not unsharded(lay) else "all_reduce"
    if reduce == "reduce_scatter" and fp32_accumulation(lay):  # (param_and_grad_buffer.py:248-254: all_to_all_single of
        reduce = "all_to_all"  # the whole bucket in the gradient buffer's dtype, then the FP32 sum of the rank's shard)
    chunks, quantized = [], False
    for k, chunk in enumerate(_chunks(params, layers, lay.vp, lay.chunk_offset, first, split, final)):
        bucketed = k == 0 and not lay.param_gather_with_step  # Megatron's wrapper: disable_bucketing for the rest
        weight = functools.partial(_quantized, lay, nums=nums, layers=layers)
        quantized = quantized or any(weight(p[0]) for p in chunk)
        chunks.append(_bucket_groups(lay, chunk, size if bucketed else None, distopt, group, alone, weight))
    sizes = [n for groups in chunks for g in groups for n, _ in g]
    return {"whose": whose, "group": group, "link": link, "local": local, "distopt": distopt, "grad_bytes": grad_bytes, "quantized": quantized,
            "reduce_collective": reduce, "chunks": chunks, "sizes": sizes,
            "reduce": [[sum(system.seconds(reduce, n * grad_bytes, group, link, local) for n, _ in g) for g in groups]
                       for groups in chunks],
            "gather": [[sum(system.seconds("all_gather", math.ceil(n * b), group, link, local) for n, b in g) for g in groups]
                       for groups in chunks],
            "across": {c: across(system, c, link, local) for c in (reduce, "all_gather")}}


def _quantized(lay, name: str, nums: list, layers: int) -> bool:
    """Whether a parameter of the costed stage is a quantized TE GEMM weight: not in a layer first_last_layers_bf16
    keeps in BF16, by Megatron-Core's global layer number (nums: the stage's layers', numbers())."""
    if not (lay.quantized and QUANTIZED_WEIGHT.search(name)):
        return False
    start, end = lay.bf16_layers
    m = _LAYER.match(name)
    if m is None or not (start or end):
        return True
    number = nums[int(m[1])]
    total = lay.num_layers or (layers if lay.pp == 1 else None)
    return not (number < start or total is not None and number >= total - end)


def _bucket_groups(lay, chunk, size, distopt, group, alone, quantized) -> list[list[tuple[int, float]]]:
    """A model chunk's bucket groups in the order backward fills them, each a list of (elements, bytes an element
    its all-gather moves) of its buckets. With quantized weights they are a buffer of their own, each of its buckets a
    group, and every other bucket joins the last group (param_and_grad_buffer.partition_buckets). quantized(name):
    whether a parameter's storage is quantized (_quantized: TE's GEMM weights, not the layers kept in BF16). alone: the
    parameter marked shared_embedding (a bucket of its own), or None."""
    d = lay.ddp

    def spans(ps):
        own = frozenset(i for i, (name, _, _) in enumerate(ps) if name == alone)
        return [e - s for s, e, _ in buckets.layout([n for _, n, _ in ps], size, distributed_optimizer=distopt, dp_size=group,
                                                     pad_for_high_nccl_busbw=bool(d.get("pad_buckets_for_high_nccl_busbw")),
                                                     alone=own)] if ps else []

    weights = spans([p for p in chunk if quantized(p[0])])
    rest = spans([p for p in chunk if not quantized(p[0])])
    if not weights:
        return [[(n, 2)] for n in rest]
    each = lay.quantized[1]
    if fp32_accumulation(lay):  # one bucket a group: the others are not merged in (partition_buckets, :1748-1774)
        return [[(n, each)] for n in weights] + [[(n, 2)] for n in rest]
    return [[(n, each)] for n in weights[:-1]] + [[(weights[-1], each)] + [(n, 2) for n in rest]]


def numbers(lay, layers: int) -> list[int]:
    """The global layer number of each of the first stage's `layers` layers (get_transformer_layer_offset at pipeline
    rank 0: model chunk k, as _chunks places a layer, starts k x PP x the layers of a chunk in, each earlier chunk of
    the other stages between; recheck47 R3: with VPP or a short last stage the model's last layers can sit on the
    first stage): which of them are MoE (moe_layer_freq), which in BF16 (first_last_layers_bf16)."""
    if lay.stages:
        return stage_numbers(lay, layers, 0)
    return [_number(lay, layers, i) for i in range(layers)]


def _number(lay, layers: int, i: int) -> int:
    per = -(-(layers + lay.chunk_offset) // lay.vp) if lay.vp > 1 else 0
    return i + min((i + lay.chunk_offset) // per, lay.vp - 1) * (lay.pp - 1) * per if per else i


def _lead(chunks: list) -> list:
    """A buffer's first model chunk that has some of it (a layout's chunk 0 can hold none of a kind: its DDP then has
    no such buffer), its bucket groups (or their times) in backward order: the last of them is dispatched last."""
    return next((c for c in chunks if c), [0.0])


def _interleaved(lay) -> bool:
    return lay.pp > 1 and lay.vp > 1


def _chunk0_exposed(lay, kind: str) -> bool:
    """Whether the interleaved schedule leaves all of model chunk 0's reduce (`kind` "reduce") or gather exposed: its
    reduce with align_grad_reduce (after the last backward), its gather with align_param_gather (at the step's start)
    unless overlap_param_gather_with_optimizer_step starts it in the optimizer step."""
    if not _interleaved(lay):
        return False
    if kind == "reduce":
        return lay.align_grad_reduce
    return bool(lay.ddp.get("align_param_gather")) and not lay.param_gather_with_step


def _exposed(lay, times: list, kind: str, budget: float, chain: bool = False) -> float:
    """What stays exposed of the buffers' collectives (`times`: per buffer, per chunk, per bucket group; the buffers
    of one chunk dispatched together, in turn on one stream), `budget` one micro-batch's stage compute it runs beside.
    chain: each bucket group's dispatch waits for the one before it (chained())."""
    total = sum(t for buf in times for chunk in buf for t in chunk)
    if kind == "gather" and lay.ddp.get("align_param_gather") and not _interleaved(lay):
        return total  # the forward pre-hook skips the next bucket's dispatch: each gather waits where its layer runs
    if not _interleaved(lay) or kind == "gather" and not lay.ddp.get("align_param_gather"):
        # each buffer's last bucket group in backward order (chunk 0's, the embedding's) is dispatched last, with
        # nothing left to run behind it; the others load behind one micro-batch's compute
        queued = total - max(0.0, min(total - sum(_lead(buf)[-1] for buf in times), budget))
        return max(queued, sum(_waits(_lead(buf), budget) for buf in times)) if chain else queued
    chunks = [[t for buf in times for t in (buf[k] if k < len(buf) else [])] for k in range(max(len(b) for b in times))]
    per = budget / lay.vp  # one micro-batch of one model chunk
    steps = min(lay.vp_group, lay.micro_batches) * per  # a chunk runs a group of micro-batches before the next
    if kind == "reduce":
        return _reduce_exposed(lay, chunks, per, steps, chain)
    if lay.param_gather_with_step:  # chunk 0's all-gather starts in the optimizer step, behind the other chunks' step
        chunks = [[0.0] * len(chunks[0])] + chunks[1:]  # (the step is not counted, nor what it hides)
    return _gather_exposed(chunks, steps)


def _reduce_exposed(lay, chunks, per, steps, chain: bool = False) -> float:
    """The interleaved schedule's cooldown, backward's end at 0: chunk k's last micro-batch ends k groups of
    micro-batches before it (schedules.py backward_step_helper_postprocess); chunk 0's groups with align_grad_reduce
    all at the end, without it as its last micro-batch's backward fills them. chain: each group of a chunk (one DDP:
    the link is within its bucket groups) waits before its dispatch for the one before it, holding the compute."""
    dispatch = []
    for k in reversed(range(len(chunks))):
        if k or _chunk0_exposed(lay, "reduce"):
            dispatch += [(-k * steps, t, j > 0) for j, t in enumerate(chunks[k])]
        else:
            n = len(chunks[0])
            dispatch += [(-per + per * (j + 1) / n, t, j > 0) for j, t in enumerate(chunks[0])]
    return _run(dispatch, chain)


def _run(dispatch: list, chain: bool) -> float:
    """What a run of dispatches leaves exposed past the compute's end at 0: each (at, seconds, linked) queues on one
    stream; with `chain` a linked one first holds the compute until the collective before it has ended (the stall
    pushes every later dispatch and the compute's end back)."""
    end, stall = -math.inf, 0.0
    for at, seconds, linked in dispatch:
        at += stall
        if chain and linked and end > at:
            stall += end - at
            at = end
        end = max(end, at) + seconds
    return max(0.0, stall, end)


def _waits(groups: list, budget: float) -> float:
    """One buffer's bucket groups (in backward order) without the interleaved schedule, each dispatched when the
    backward has made its gradients and waiting for the one before it (chained()): the first at the backward's start,
    the others spread over the micro-batch's `budget` by their share of the groups' time after the first (a group's
    time stands for its size), the last at the end."""
    rest = sum(groups[1:])
    if not rest:
        return sum(groups)
    at, dispatch = -budget, []
    for j, t in enumerate(groups):
        at += budget * t / rest if j else 0.0
        dispatch.append((at, t, j > 0))
    return _run(dispatch, True)


def _gather_exposed(chunks, steps) -> float:
    """The interleaved schedule's warm-up: chunks 0 and 1 gathered at the step's start, chunk k+1 when chunk k's first
    micro-batch starts (schedules.py forward_step_helper_preprocess); a chunk's forward waits for its gather."""
    need = [sum(c) for c in chunks]
    done = [0.0] * len(need)
    done[0] = need[0]
    if len(need) > 1:
        done[1] = done[0] + need[1]
    clock = 0.0
    for k in range(len(need)):
        start = max(clock, done[k])
        if 1 <= k < len(need) - 1:
            done[k + 1] = max(start, done[k]) + need[k + 1]
        clock = start + steps
    return clock - len(need) * steps


def _item(lay, b: dict, kind: str, total: float, hidden: float, setting: str, slack: float = 0.0, waits: float = 0.0) -> Item:
    sizes, groups = b["sizes"], [g for groups in b["chunks"] for g in groups]
    vary = len(set(sizes)) > 1
    # what no overlap hides: the last bucket group; with the interleaved schedule's sync funcs all of chunk 0's (less
    # the pipeline's slack beside a later rank's)
    chunk0 = _chunk0_exposed(lay, kind)
    last = max(0.0, (sum(b[kind][0]) if chunk0 else _lead(b[kind])[-1]) - slack)
    last_bytes = sum(n for g in (b["chunks"][0] if chunk0 else _lead(b["chunks"])[-1:]) for n, _ in g)
    if kind == "reduce":
        gb = b["grad_bytes"]
        return Item("dp", b["reduce_collective"], f"{b['whose']}gradients ({len(sizes)} bucket{'s' if len(sizes) != 1 else ''}, "
                    f"{'FP32' if gb == 4 else 'BF16'}{_accumulation(lay, b)})", max(sizes) * gb, len(sizes), b["group"],
                    b["link"], total, hidden, setting, last=last, last_bytes=last_bytes * gb, bytes_vary=vary,
                    first_chunk=chunk0, waits=waits, **b["across"][b["reduce_collective"]])
    what = f"{lay.quantized[0]}, BF16 others" if b["quantized"] else "BF16"
    biggest = max(math.ceil(n * e) for g in groups for n, e in g)
    gathered = sum(math.ceil(n * e) for g in (b["chunks"][0] if chunk0 else _lead(b["chunks"])[-1:]) for n, e in g)
    return Item("dp", "all_gather", f"{b['whose']}parameters ({what})", biggest, len(sizes), b["group"], b["link"], total,
                hidden, setting, last=last if chunk0 else 0.0, last_bytes=gathered, bytes_vary=vary or "," in what,
                first_chunk=chunk0, **b["across"]["all_gather"])


def _accumulation(lay, b: dict) -> str:
    """What ddp.reduce_scatter_with_fp32_accumulation changes of a buffer's gradient reduction, for its Item's text."""
    if not fp32_accumulation(lay):
        return ""
    how = ("; reduce_scatter_with_fp32_accumulation: an all-to-all of each bucket, summed in FP32 on the compute stream"
           if b["reduce_collective"] == "all_to_all" else "")
    return how + ("; each bucket group waits for the one before it" if chained(lay) else "")


def _chunks(params: list, layers: int, vp: int, offset: int = 0, first: bool = True, split: tuple = (),
            final: int | None = None) -> list[list]:
    """A stage's parameters by virtual-pipeline model chunk, in order (each chunk a model of its own, wrapped in a
    DistributedDataParallel of its own: megatron/training/models/dist_utils.py), every chunk kept, an empty one
    too (the chunk's index decides its bucketing: disable_bucketing for model_chunk_idx > 0). split: a layout's
    decoder layers per chunk (chunk_layers), layer i in the chunk the layout places it; without one layer i in chunk
    (i + offset) // ceil((layers + offset) / vp) (offset: the embedding counted as a layer). The first stage's
    embedding in chunk 0; the output layer and the MTP layers with their embedding in the last (the layout's 'L' and
    'm' are in their rank's last virtual stage: validate_layer_layout); the final norm in the last, or in `final`."""
    if vp <= 1 and len(split) <= 1:
        return [params]
    chunks = len(split) or vp
    ends = list(itertools.accumulate(split))  # (each chunk's end: prefix sums, fuzzX X2-2)
    per = -(-(layers + offset) // vp)
    out: list[list] = [[] for _ in range(chunks)]
    for p in params:
        m = _LAYER.match(p[0])
        if m:
            i = int(m[1])
            k = min(bisect.bisect_right(ends, i), chunks - 1) if split else min((i + offset) // per, chunks - 1)
        elif first and p[0].startswith("embedding"):
            k = 0
        elif p[0].startswith("decoder.final_layernorm") and final is not None:
            k = final
        else:
            k = chunks - 1
        out[k].append(p)
    return out


_LAYER = re.compile(r"decoder\.layers\.(\d+)\.")

