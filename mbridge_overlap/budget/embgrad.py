"""The word embedding's gradient all-reduce between pipeline stages (Megatron-Core's finalize_model_grads,
distributed/finalize_model_grads.py _allreduce_word_embedding_grads): where the pipeline holds a second copy of the
embedding (the last stage's output layer where input and output weights are tied, the MTP layers' rank's own
embedding), each copy's gradient is all-reduced over the embedding group once an iteration, after the backward."""

from __future__ import annotations

import math

from . import mtp as mtps
from .collective import Item, across


def ranks(lay, shape) -> tuple[int, ...]:
    """The pipeline ranks of the word-embedding group (one group per position in the TP x CP x DP grid), as the
    release builds it: Megatron-Core's default_embedding_ranks, the first and the last (Bridge 0.5.x passes no
    get_embedding_ranks: parallel_state.py), or Bridge's _get_embedding_ranks (0.6.x training/setup.py): the first,
    the last where the embedding is tied, and get_mtp_ranks' (the last without a layout, else the layout's 'm' rank)."""
    if lay.pp < 2:
        return (0,)
    if lay.embedding_ranks == "first_last":
        return (0, lay.pp - 1)
    out = {0}
    if shape.share_embeddings_and_output_weights:
        out.add(lay.pp - 1)
    if shape.mtp_num_layers:
        out.add(mtps.rank(lay))
    return tuple(sorted(out))


def runs(lay, shape) -> bool:
    """Whether the all-reduce runs: an embedding group of more than one rank (get_pg_size(embd_group) > 1), a weight
    to reduce (_get_shared_word_embedding_weight: tied, or mtp_num_layers set; else None and it returns), a gradient
    (a frozen embedding's is None: PEFT freezes it), and DDP's buffers (Megatron-FSDP reduces a DTensor's local shard,
    not priced here: `said`)."""
    tied = bool(shape.share_embeddings_and_output_weights or shape.mtp_num_layers)
    return len(ranks(lay, shape)) > 1 and tied and not lay.peft and not lay.fsdp


def placed(lay, members: tuple[int, ...]) -> tuple[str, int | None]:
    """(link, fewest of a group's ranks in one NVLink domain, across the network) of the groups whose pipeline ranks
    are `members`: global rank base + k x TP x CP x DP for pipeline rank k (Megatron-Core's order tp-cp-dp-pp), one group
    per base below that stride. The pattern of domains repeats every domain's width of bases."""
    stride = lay.tp * lay.cp * lay.dp
    fewest, link = len(members), "nvlink"
    for base in range(min(stride, lay.domain)):
        domains = [(base + k * stride) // lay.domain for k in members]
        if len(set(domains)) > 1:
            link = "network"
            fewest = min(fewest, min(domains.count(d) for d in domains))
    return link, (fewest if link == "network" else None)


def collectives(lay, shape, system) -> list:
    """The all-reduce as an Item: the shared weight's main_grad (vocabulary / TP x hidden elements: the embedding's,
    or the tied output layer's of the same shape) in DDP's gradient dtype (group_params_for_buffers: FP32 with
    grad_reduce_in_fp32, else the BF16 parameter's), over the group's ranks. Nothing hides it: a blocking
    torch.distributed.all_reduce on the current stream, after finish_grad_sync has waited for every DP bucket (the
    first stage's last backward ends last), before the optimizer step; no overlap setting moves it."""
    if not runs(lay, shape):
        return []
    members = ranks(lay, shape)
    elements = math.ceil(shape.vocab_size / lay.tp) * shape.hidden_size
    grad_bytes = 4 if lay.ddp.get("grad_reduce_in_fp32") else 2
    link, local = placed(lay, members)
    t = system.seconds("all_reduce", elements * grad_bytes, len(members), link, local)
    stages = ", ".join(map(str, members))
    return [Item("pp", "all_reduce", f"word-embedding gradient over pipeline ranks {stages} "
                 f"({'FP32' if grad_bytes == 4 else 'BF16'}, finalize_model_grads: not overlapped)",
                 elements * grad_bytes, 1, len(members), link, t, 0.0, None, last=t, last_bytes=elements * grad_bytes,
                 **across(system, "all_reduce", link, local))]


def said(lay, shape) -> tuple:
    """The assumption line, where the pipeline holds a second copy of the embedding."""
    if lay.pp < 2 or not (shape.share_embeddings_and_output_weights or shape.mtp_num_layers):
        return ()
    group = ("Megatron-Core's default embedding group, the first and last pipeline ranks (Bridge 0.5.x passes no "
             "get_embedding_ranks)" if lay.embedding_ranks == "first_last" else
             "Bridge 0.6's embedding group (training/setup.py _get_embedding_ranks: the first pipeline rank, the last "
             "where the embedding is tied, the MTP layers' rank)")
    apart = mtps.rank(lay) if shape.mtp_num_layers and lay.embedding_ranks == "first_last" else 0
    outside = (f"; the MTP layers' rank {apart} is outside that group, its embedding's gradient reduced with no other"
               if 0 < apart < lay.pp - 1 else "")
    why = outside + ("" if runs(lay, shape) else
           ": not run here (" + ("PEFT freezes the embedding: its gradient is None" if lay.peft else
                                 "Megatron-FSDP reduces its local shard, not priced" if lay.fsdp else
                                 "the group is one rank") + ")")
    return (f"PP: the word embedding's gradient all-reduce over {group}, once an iteration in finalize_model_grads "
            "after every DP bucket is reduced: the whole main_grad (vocabulary / TP x hidden, FP32 with "
            "grad_reduce_in_fp32, else BF16), exposed (a blocking all-reduce before the optimizer step, no overlap "
            "setting hides it); the position-embedding group is the first rank alone (default_position_embedding_ranks): "
            "no all-reduce" + why,)
