"""Multi-latent attention (MLA: DeepSeek-V2/V3, Kimi-K2, Moonlight), as Megatron-Core's MLASelfAttention builds it
with Transformer Engine's layer spec (megatron/core/transformer/multi_latent_attention.py, gpt_layer_specs.py):
its parameters, FLOPs and TP collectives, in place of the fused QKV projection's."""

from __future__ import annotations

from .collective import ACT_BYTES, GATHER_BYTES, Item, across
from .layout import fewest_local


def params(shape, tp: int, p: str) -> list[tuple[str, int, bool]]:
    """A layer's input norm and attention parameters on one rank, in registration order: the input norm (TENorm, not
    fused with MLA), then MultiLatentAttention's linear_proj, then MLASelfAttention's linear_q_down_proj (TELinear,
    duplicated: whole on every TP rank) and linear_q_up_proj, or linear_q_proj where q_lora_rank is None,
    linear_kv_down_proj (duplicated), linear_kv_up_proj (column-parallel). With qk_layernorm the q and kv norms are
    fused into the up projections (TELayerNormColumnParallelLinear: the norm's weight first, of the input's size)."""
    h, heads, s = shape.hidden_size, shape.num_attention_heads, shape
    out = [(p + "input_layernorm.weight", h, False),
           (p + "self_attention.linear_proj.weight", h * (heads * s.v_head_dim // tp), False)]
    a = p + "self_attention."

    def column(name, inputs, outputs):
        norm = [(f"{a}{name}.layer_norm_weight", inputs, False)] if s.qk_layernorm else []
        return norm + [(f"{a}{name}.weight", outputs // tp * inputs, False)]

    if s.q_lora_rank is None:
        out += column("linear_q_proj", h, heads * s.q_head_dim)
    else:
        out += [(a + "linear_q_down_proj.weight", s.q_lora_rank * h, False)]
        out += column("linear_q_up_proj", s.q_lora_rank, heads * s.q_head_dim)
    out += [(a + "linear_kv_down_proj.weight", (s.kv_lora_rank + s.qk_pos_emb_head_dim) * h, False)]
    return out + column("linear_kv_up_proj", s.kv_lora_rank, heads * (s.qk_head_dim + s.v_head_dim))


def flops(shape, tokens: int, seq: int, tp: int, cp: int, sp: bool) -> dict:
    """Forward FLOPs of MLA on one GPU: the down projections run on the rank's own tokens (its sequence shard with
    sequence parallel, all of them again on every TP rank without), the up projections and linear_proj split across
    TP, the attention core (causal) over q_head_dim-wide queries and keys and v_head_dim-wide values."""
    h, heads, s = shape.hidden_size, shape.num_attention_heads, shape
    split, local = tp * cp, cp * (tp if sp else 1)
    out = {}
    if s.q_lora_rank is None:
        out["q_proj"] = 2 * tokens * h * heads * s.q_head_dim / split
    else:
        out["q_down"] = 2 * tokens * h * s.q_lora_rank / local
        out["q_up"] = 2 * tokens * s.q_lora_rank * heads * s.q_head_dim / split
    out["kv_down"] = 2 * tokens * h * (s.kv_lora_rank + s.qk_pos_emb_head_dim) / local
    out["kv_up"] = 2 * tokens * s.kv_lora_rank * heads * (s.qk_head_dim + s.v_head_dim) / split
    out["attention"] = 2 * tokens * seq * heads * (s.q_head_dim + s.v_head_dim) * 0.5 / split
    out["proj"] = 2 * tokens * heads * s.v_head_dim * h / split
    return out


def tp_collectives(lay, shape, system, link, times: int, gemm_s: dict, runs_fwd: float, up_again: float = 0.0) -> list:
    """MLA's TP collectives in place of linear_qkv's: each column-parallel up projection (linear_q_up_proj or
    linear_q_proj, linear_kv_up_proj) all-gathers its input (q_lora_rank or hidden_size, and kv_lora_rank wide) with
    sequence parallel forward and, backward, gathers it again for wgrad beside dgrad and reduce-scatters its input
    gradient beside wgrad (async, as linear_qkv's); without sequence parallel the input gradient's all-reduce. With
    sequence parallel the rotary key part (qk_pos_emb_head_dim wide) is all-gathered forward and its gradient
    reduce-scattered backward (gather_from_sequence_parallel_region: NCCL, nothing beside it). runs_fwd: how many
    times a layer's forward runs (recompute); up_again: the up projections' share run again in the backward
    (recompute_modules mla_up_proj: their inputs gathered again, not the rotary part's, gathered before them)."""
    rows = lay.seq * lay.mbs // lay.cp
    q_in = shape.hidden_size if shape.q_lora_rank is None else shape.q_lora_rank
    up = [(q_in, gemm_s.get("q_up", gemm_s.get("q_proj", 0.0))), (shape.kv_lora_rank, gemm_s["kv_up"])]
    out = []
    local = fewest_local(lay, 1, lay.tp) if link == "network" else None

    def item(collective, what, widths, nbytes_each, count_each, hide):
        total = hidden = 0.0
        for w, beside in widths:
            one = system.seconds(collective, rows * w * nbytes_each, lay.tp, link, local)
            total += one * count_each * times
            hidden += min(one, beside) * count_each * times if hide else 0.0
        biggest = max(rows * w * nbytes_each for w, _ in widths)
        out.append(Item("tp", collective, what, int(biggest), round(len(widths) * count_each * times), lay.tp, link,
                        total, hidden, None, bytes_vary=len({w for w, _ in widths}) > 1,
                        **across(system, collective, link, local)))

    if lay.sp:
        item("all_gather", "MLA up projections' inputs (forward, no userbuffers)", up, GATHER_BYTES[lay.precision],
             runs_fwd + up_again, False)
        item("all_gather", "MLA up projections' inputs gathered again for wgrad, beside dgrad (async)", up,
             GATHER_BYTES[lay.precision], 1, True)
        item("reduce_scatter", "MLA up projections' input gradients, beside wgrad (async)", up, ACT_BYTES, 1, True)
        item("all_gather", "MLA rotary key part (gather_from_sequence_parallel_region, forward)",
             [(shape.qk_pos_emb_head_dim, 0.0)], ACT_BYTES, runs_fwd, False)
        item("reduce_scatter", "MLA rotary key part's gradient (backward)", [(shape.qk_pos_emb_head_dim, 0.0)],
             ACT_BYTES, 1, False)
    else:
        item("all_reduce", "MLA up projections' input gradients, beside wgrad (async)", up, ACT_BYTES, 1, True)
    return out


ASSUMPTION = (
    "MLA (multi_latent_attention): its parameters, FLOPs and TP collectives as MLASelfAttention builds them with "
    "Transformer Engine's spec (down projections duplicated on every TP rank, up projections and linear_proj split); "
    "TP overlap: Megatron-Core's TELinear turns config.tp_comm_overlap off for the whole model when it builds a layer "
    "whose userbuffers name is not qkv, proj, fc1 or fc2 (the first layer's q_down_proj: extensions/transformer_engine.py), "
    "so no userbuffers GEMM runs after it: the budget counts none (the first layer's linear_proj, built before, keeps "
    "them: not counted); the duplicated down projections' gradients join finalize_model_grads' TP all-reduce "
    "(budget/finalize.py); the MLA up projections' collectives are not userbuffers' and run as NCCL's")


def attention_kv(shape, tokens: int, tp: int) -> int:
    """Elements of one CP ring step's keys and values: the up projections' K (q_head_dim) and V (v_head_dim) of the
    rank's heads."""
    return tokens * shape.num_attention_heads // tp * (shape.q_head_dim + shape.v_head_dim)
