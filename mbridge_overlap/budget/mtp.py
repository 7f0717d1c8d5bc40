"""Multi-token prediction (MTP: DeepSeek-V3, GLM-4.5, Nemotron-3-Super, Qwen3-Next), as Megatron-Core's
MultiTokenPredictionBlock builds it with Transformer Engine's spec (megatron/core/transformer/multi_token_prediction.py,
models/gpt/gpt_model.py, gpt_layer_specs.py get_gpt_mtp_block_spec): its parameters, where they are placed, its FLOPs
and its TP collectives."""

from __future__ import annotations

from dataclasses import replace

from .collective import ACT_BYTES, GATHER_BYTES, Item, across
from .layout import fewest_local


def moe(shape) -> bool:
    """Whether the MTP layer is a MoE layer (Shape.mtp_moe)."""
    return shape.mtp_moe


def rank(lay) -> int:
    """The pipeline rank holding the MTP layers: the last (mtp_on_this_rank without a layout), or the one whose stage
    the layout's 'm' is in (stage k on rank k mod PP)."""
    return lay.mtp_stage % lay.pp if lay.mtp_stage is not None else lay.pp - 1


def flops(shape, tokens: int, tp: int, cp: int) -> dict:
    """Forward FLOPs of one MTP layer on one GPU besides its transformer layer: eh_proj (2h to h, split over TP) and
    its logits through the shared output layer (process_mtp_loss: the output layer again, vocabulary split over TP);
    the embedding lookup, the norms and the cross entropy are not counted."""
    split = tp * cp
    return {"eh_proj": 2 * tokens * 2 * shape.hidden_size * shape.hidden_size / split,
            "mtp_logits": 2 * tokens * shape.hidden_size * shape.vocab_size / split}


def tp_collectives(lay, shape, system, link, layers: int, m: int, tokens: int, gemm_s: float, layer_items: list) -> list:
    """The MTP layers' TP collectives: their transformer layer's as a decoder layer's of its kind, but never through
    userbuffers (layer_items, built with tp_comm_overlap off: TELinear turns the model's tp_comm_overlap off as it
    builds eh_proj, before that layer: extensions/transformer_engine.py TELinear.__init__), with no setting to hide them; and eh_proj's: with
    sequence parallel its input (2 x hidden wide) all-gathered forward (NCCL), gathered again for wgrad beside dgrad
    and its gradient reduce-scattered beside wgrad (async); its output all-gathered over the hidden dimension
    (gather_from_tensor_model_parallel_region) and, backward, the gradient of the sequence split after it
    (scatter_to_sequence_parallel_region) all-gathered; without sequence parallel the input gradient's all-reduce
    beside wgrad and the output's all-gather. gemm_s: eh_proj's forward GEMM time."""
    if lay.tp < 2 or not layers:
        return []
    out = [replace(i, what="MTP layers: " + i.what, setting=None) for i in layer_items if "LoRA" not in i.what]
    rows = tokens // lay.cp
    h, times = shape.hidden_size, layers * m
    local = fewest_local(lay, 1, lay.tp) if link == "network" else None

    def item(collective, what, width, nbytes, count, beside):
        size = int(rows * width * nbytes)
        one = system.seconds(collective, size, lay.tp, link, local)
        out.append(Item("tp", collective, "MTP eh_proj: " + what, size, count * times, lay.tp, link, one * count * times,
                        min(one, beside) * count * times, None, **across(system, collective, link, local)))

    if lay.sp:
        item("all_gather", "input (forward, no userbuffers)", 2 * h, GATHER_BYTES[lay.precision], 1, 0.0)
        item("all_gather", "input gathered again for wgrad, beside dgrad (async)", 2 * h, GATHER_BYTES[lay.precision], 1, gemm_s)
        item("reduce_scatter", "input gradient, beside wgrad (async)", 2 * h, ACT_BYTES, 1, gemm_s)
        item("all_gather", "output over the hidden dimension (forward) and the sequence-split gradient (backward)", h,
             ACT_BYTES, 2, 0.0)
    else:
        item("all_reduce", "input gradient, beside wgrad (async)", 2 * h, ACT_BYTES, 1, gemm_s)
        item("all_gather", "output over the hidden dimension (forward)", h, ACT_BYTES, 1, 0.0)
    return out


ASSUMPTION = (
    "MTP (mtp_num_layers): MultiTokenPredictionBlock's layers on the pipeline rank Megatron-Core places them (the last, "
    "or where the layout's 'm' is), each an enorm, an hnorm, eh_proj (column-parallel, 2 x hidden to hidden), a "
    "transformer layer of the model's last layer's kind and a final norm, with the model's embedding and output layer "
    "(built again on that rank where it is not the first, and then tied to the first stage's: its embedding a DP bucket "
    "of its own there); its compute (the layer, eh_proj, its logits) counted on its rank, which is costed where it is "
    "the busiest; TP overlap: Megatron-Core's TELinear turns config.tp_comm_overlap off for the modules built after "
    "eh_proj (its userbuffers name mtp_eh_proj is not qkv, proj, fc1 or fc2: TP_OVERLAP_OFF_MTP), so the MTP layers "
    "run their TP collectives without userbuffers whatever the setting (the decoder layers, built before, keep them); "
    "the embedding and output layer's own TP collectives (the decoder's too), the roll of the tokens over CP and "
    "mtp_use_repeated_layer are not counted (the embedding copies' gradient all-reduce is: budget/embgrad.py)")
