"""One iteration on one GPU: the collectives of each parallel dimension (message sizes exact, from the effective
config and the model's shape), their time at the system's bus bandwidth, the compute each can hide behind, and what
stays exposed with each overlap setting as Bridge leaves it and with it flipped. Times are estimates: RANGE gives the
spread the sources allow; the assumptions are listed with the result."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

from . import buckets, shape as shapes
from ..run import given
from ..run.peft import Peft, of as peft_of
from .system import System
from .. import safeio
from ..errors import UsageError

ACT_BYTES = 2  # BF16: P2P tensors, CP's keys and values, EP's tokens, TP's reduce-scatters and all-reduces
# TP all-gathers move what the GEMM reads: Transformer Engine quantizes the input (and the output gradient) first and
# gathers the quantized data (pytorch/distributed.py gather_along_first_dim; userbuffers' all-gather buffers likewise).
# FP8's scales are under 3 % of it (one per tensor, or per 32 values in MXFP8); NVFP4: 4 bits and an FP8 scale per 16.
GATHER_BYTES = {"bf16": 2, "fp8": 1, "fp4": 0.5625}
RANGE = (0.8, 1.25)  # communication time: the spread of the bus bandwidths the sources give for one system
ASSUMPTIONS = (
    "activations and PP/CP/EP messages in BF16 (2 bytes), TP reduce-scatters too; TP all-gathers in the GEMM's "
    "precision (FP8: 1 byte, NVFP4: 0.5625, scales included where they are more than 3 %)",
    "ranks placed as Megatron-Core orders them (TP innermost, then CP, DP, PP; experts: expert TP, EP, DP, PP): a "
    "dimension's collectives cross the network when any of its groups has ranks in two NVLink domains",
    "TP: per layer with sequence parallel, 6 all-gathers and 4 reduce-scatters (Transformer Engine's 10 userbuffers GEMMs); "
    "the column-parallel layers' backward ones run async beside their dgrad/wgrad GEMMs with or without TP overlap; "
    "TP overlap hides the others by the userbuffers method of the preset in effect (bulk, pipeline, ring_exchange), "
    "behind their own GEMM only, never across the network; a GEMM whose userbuffers config sets an SM margin runs on "
    "the SMs the communication kernels leave it (its time scaled by SMs / (SMs - num_sm)): TP overlap's own cost",
    "DP, on the first pipeline stage (Megatron-Core buckets only there, and with VPP only model chunk 0: each other "
    "chunk is a DDP of its own with one bucket, as Megatron's DDP wrapper sets disable_bucketing): without VPP the grad "
    "reduce-scatter runs in the last micro-batch's backward and the param all-gather in the first one's forward, the "
    "bucket that holds the embedding exposed; with VPP (Bridge's grad_sync_func and param_sync_func, "
    "align_grad_reduce and align_param_gather) a chunk's whole reduce-scatter starts after its last micro-batch's "
    "backward and hides behind the other chunks' backward still to run, chunk 0's exposed, and chunk k+1's all-gather "
    "starts with chunk k's first forward (chunks 0 and 1 at the step's start: chunk 0's exposed, unless "
    "overlap_param_gather_with_optimizer_step starts it in the optimizer step, which is not counted), each on one "
    "stream in turn; with account_for_embedding_in_pipeline_split the first chunk holds one layer fewer; with FP8, "
    "MXFP8 or NVFP4 parameters the TE GEMM weights are a buffer of their own (1, 2: MXFP8 is gathered in BF16, 0.5 "
    "bytes an element) and every other parameter's bucket joins its last bucket group, the weights of the layers "
    "first_last_layers_bf16 keeps in BF16 among those others (their TP all-gathers and GEMMs are costed in the run's "
    "precision)",
    "the optimizer step, data loading and kernel launch gaps are not counted",
    "the vocabulary as the model's config sets it; Bridge's setup replaces it by the tokenizer's, padded to a multiple "
    "of make_vocab_size_divisible_by x TP, where the model sets none or tokenizer.use_tokenizer_vocab_size is on "
    "(training/setup.py _validate_and_set_vocab_size; Bridge 0.6's library pretrain recipes turn it on in "
    "_pretrain_common, so their shipped runs, with a stand-in tokenizer, have that tokenizer's vocabulary, not this one)",
)
PEFT_ASSUMPTION = (
    "PEFT: the base weights are frozen (Bridge's freeze_model), so Transformer Engine runs no wgrad GEMM for them "
    "(dgrad only: the backward is about the forward's size), skips the input's re-gather for wgrad with TP overlap "
    "off, and the input gradient's reduce-scatter of linear_qkv and linear_fc1 has no wgrad GEMM beside it: counted "
    "exposed (with userbuffers' bulk overlap TE issues it from the wgrad GEMM call, which frozen weights skip: what "
    "runs then needs a GPU to see, PEFT_BULK_WGRAD_ON_FROZEN_WEIGHTS); with TP overlap the adapted linear_qkv/linear_fc1 all-gather with NCCL "
    "(return_layernorm_output); DP reduces and gathers the adapters only; the adapters' GEMMs are counted, and with "
    "sequence parallel their own full-size collectives (an adapted column-parallel linear's input all-gather and "
    "gradient reduce-scatter where TP overlap is on, a row-parallel one's output and gradient all-gathers), exposed; "
    "their rank-sized ones are not")
RECOMPUTE_ASSUMPTION = (
    "recompute (Megatron-Core's activation checkpointing): a recomputed layer's forward runs again in its backward, "
    "its forward collectives (TP, CP, EP) again too; full with method uniform recomputes every layer, block the first "
    "recompute_num_layers of each virtual stage's layers; selective recomputes the modules named (core_attn, the default: "
    "the attention core; mlp: a dense layer's MLP); layernorm and activation recompute are not counted")
MOE_ASSUMPTION = ("MoE: every layer a MoE layer; each token's top-k experts' GEMMs at the dense rate; the router, token "
                  "permutation and small grouped GEMMs are not counted, so where the all-to-all stays inside an NVLink domain the "
                  "iteration time is a lower bound: on Bridge's "
                  "published Qwen3 MoE rows the predicted throughput is 2x the published or more where the all-to-all stays "
                  "inside the NVLink domain (docs/budget.md); TP: only the attention's collectives (the experts' grouped "
                  "GEMMs take no userbuffers, and the alltoall dispatcher sends each TP rank's own tokens), a shared "
                  "expert's and the expert-TP group's gathers (expert_tensor_parallel_size > 1) not counted; DP: the dense "
                  "and the experts' buffers (two communicators, which can run side by side) priced one after the other, an "
                  "upper bound on their exposed time")


@dataclass
class Layout:
    tp: int
    pp: int
    vp: int
    cp: int
    ep: int
    dp: int
    sp: bool
    seq: int
    mbs: int
    gbs: int
    precision: str
    domain: int  # GPUs per NVLink domain
    settings: dict  # the overlap settings as Bridge leaves them (effective)
    ddp: dict
    userbuffers: dict = field(default_factory=dict)  # TE userbuffers GEMM -> (method, splits, SM margin) in effect
    peft: Peft | None = None  # frozen base weights and the adapters trained (run.peft), None: every weight trains
    recompute: tuple = ()  # (granularity, method, num_layers, modules) as Megatron-Core reads them; () none
    cp_comm_type: str | None = None  # model.cp_comm_type (Megatron-Core's default: p2p)
    param_gather_with_step: bool = False  # optimizer.overlap_param_gather_with_optimizer_step: no chunk is bucketed
    etp: int = 1  # expert_tensor_parallel_size (Megatron-Core's default: the TP size)
    dispatcher: str | None = None  # model.moe_token_dispatcher_type
    fsdp: bool = False  # ddp.use_megatron_fsdp
    quantized: tuple | None = None  # (what, bytes an element the all-gather moves) of quantized weights (quantized_params)
    bf16_layers: tuple = (0, 0)  # first_last_layers_bf16's layers at the start and the end, built unquantized
    num_layers: int = 0  # the model's Transformer layers (0: not known here), for the end's BF16 layers
    vp_group: int = 1  # microbatch_group_size_per_vp_stage (Megatron-Core's default: PP)
    align_grad_reduce: bool = True  # dist.align_grad_reduce: the grad_sync_func of each chunk (Bridge's default)
    layer_slots: tuple = (False, False)  # account_for_embedding / account_for_loss_in_pipeline_split
    chunk_offset: int = 0  # layer slots before the first stage's first layer (the embedding counted as one)

    @property
    def micro_batches(self) -> int:
        return max(1, self.gbs // (self.mbs * self.dp))


# Plausibility bounds of the run sizes the budget multiplies (well above any run): past them a float overflows.
RUN_BOUNDS = {"model.seq_length": 1 << 24, "train.micro_batch_size": 1 << 20, "train.global_batch_size": 1 << 24,
              "model.virtual_pipeline_model_parallel_size": 1 << 12}


def _check_run_sizes(state) -> None:
    for key, bound in RUN_BOUNDS.items():
        section, _, name = key.partition(".")
        value = (state.model if section == "model" else state.train).get(name)
        if value is not None and not (isinstance(value, int) and 0 <= value <= bound):
            raise UsageError(f"{key}: the budget takes up to {bound:,}, got {safeio.shown(value)}")


def layout_of(state, machine, peft: Peft | None = None) -> Layout:
    """The budget's view of a resolved run; peft: where the run's config says nothing of it (plan --lora)."""
    _check_run_sizes(state)
    m, d = state.model, state.ddp
    tp, pp, cp = m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"], m["context_parallel_size"]
    fp8 = m.get("fp8") or state.precision.get("fp8")
    fp4 = m.get("fp4") or state.precision.get("fp4")
    return Layout(
        tp=tp, pp=pp, vp=m.get("virtual_pipeline_model_parallel_size") or 1, cp=cp, ep=m.get("expert_model_parallel_size") or 1,
        dp=state.data_parallel_size or 1, sp=bool(m.get("sequence_parallel")), seq=m.get("seq_length") or 0,
        mbs=state.train.get("micro_batch_size") or 1, gbs=state.train.get("global_batch_size") or 0,
        precision="fp4" if fp4 else "fp8" if fp8 else "bf16", domain=machine.nvlink_domain,
        settings={"tp_comm_overlap": bool(m.get("tp_comm_overlap")), "overlap_p2p_comm": bool(m.get("overlap_p2p_comm")),
                  "overlap_grad_reduce": bool(d.get("overlap_grad_reduce")),
                  "overlap_param_gather": bool(d.get("overlap_param_gather")),
                  "overlap_moe_expert_parallel_comm": bool(m.get("overlap_moe_expert_parallel_comm"))},
        ddp=dict(d),
        userbuffers=userbuffers(m.get("tp_comm_overlap_cfg"), tp),
        peft=peft_of(state) or peft,
        recompute=_recompute_of(m),
        cp_comm_type=state.request.context.get("model.cp_comm_type"),
        param_gather_with_step=bool(state.optimizer.get("overlap_param_gather_with_optimizer_step")),
        etp=m.get("expert_tensor_parallel_size") or tp,
        dispatcher=m.get("moe_token_dispatcher_type"), fsdp=bool(d.get("use_megatron_fsdp")),
        quantized=quantized_params(m), bf16_layers=_bf16_layers(m), vp_group=m.get("microbatch_group_size_per_vp_stage") or pp,
        align_grad_reduce=given.flag("dist.align_grad_reduce", state.request.context.get("dist.align_grad_reduce")) is not False,
        layer_slots=tuple(bool(given.flag(f"model.account_for_{k}_in_pipeline_split",
                                          state.request.context.get(f"model.account_for_{k}_in_pipeline_split")))
                          for k in ("embedding", "loss")),
    )


# Transformer Engine's GEMM weights (grouped experts' weight0..N too): what fp8_param / fp4_param builds quantized
QUANTIZED_WEIGHT = re.compile(r"\.(linear_proj|linear_qkv|linear_fc1|linear_fc2)\.weight\d*$")


def quantized_params(m: dict) -> tuple | None:
    """(what, bytes an element) of the parameter all-gather of the quantized weights, or None: with fp8_param (fp4_param)
    Megatron-Core builds Transformer Engine's layers under a quantized init (fp8_utils.get_fp8_context(is_init=True)),
    and its DDP puts those weights in a uint8 buffer of their own (param_and_grad_buffer.group_params_for_buffers):
    FP8 gathers 1 byte an element; MXFP8 with the distributed optimizer gathers BF16 through the gradient buffer
    (the shared_buffer), 2; NVFP4 two to a byte (nvfp4_packed_numel), 0.5."""
    if m.get("fp4") and m.get("fp4_param"):
        return ("NVFP4 weights", 0.5)
    if m.get("fp8") and m.get("fp8_param"):
        return ("MXFP8 weights gathered in BF16", 2) if m.get("fp8_recipe") == "mxfp8" else ("FP8 weights", 1)
    return None


def _bf16_layers(m: dict) -> tuple:
    """(at the start, at the end): the Transformer layers Megatron-Core builds outside the quantized init
    (fp8_utils.is_first_last_bf16_layer, fp4_utils.get_fp4_context: global layer numbers)."""
    if not m.get("first_last_layers_bf16"):
        return (0, 0)
    return (max(0, m.get("num_layers_at_start_in_bf16") or 0), max(0, m.get("num_layers_at_end_in_bf16") or 0))


def _recompute_of(m: dict) -> tuple:
    """(granularity, method, num_layers, modules): TransformerConfig's, with its default modules (["core_attn"])."""
    granularity = m.get("recompute_granularity")
    if granularity not in ("full", "selective"):
        return ()
    modules = m.get("recompute_modules")
    return (granularity, m.get("recompute_method"), m.get("recompute_num_layers"),
            tuple(modules) if modules is not None else ("core_attn",))


def recomputed(lay: Layout, layers: int, moe: bool) -> dict:
    """What of a layer's forward runs again in its backward, averaged over a stage's layers: the share of whole layers
    (full), and of the attention core and the MLP (selective: mlp for a dense layer, moe for an MoE layer):
    Megatron-Core's checkpointed_forward (recompute.py), the layer's recompute_mlp and MoE checkpoint, the
    attention's checkpoint_core_attention."""
    if not lay.recompute:
        return {"layer": 0.0, "core_attn": 0.0, "mlp": 0.0}
    granularity, method, num_layers, modules = lay.recompute
    if granularity == "full":
        chunk = max(1, -(-layers // lay.vp))  # a virtual stage's layers: each is a TransformerBlock of its own
        share = 1.0 if method == "uniform" else min(num_layers or 0, chunk) / chunk
        return {"layer": share, "core_attn": 0.0, "mlp": 0.0}
    return {"layer": 0.0, "core_attn": float("core_attn" in modules), "mlp": float(("moe" if moe else "mlp") in modules)}


# Transformer Engine's userbuffers GEMMs of a layer whose collective runs in the GEMM's stream of work
# (transformer_engine/pytorch/module/base.py initialize_ub): GEMM -> (collective, the layer it computes). Backward
# GEMMs take the forward's FLOPs.
UB_GEMMS = {
    "qkv_fprop": ("all_gather", "qkv"), "proj_fprop": ("reduce_scatter", "proj"),
    "fc1_fprop": ("all_gather", "fc1"), "fc2_fprop": ("reduce_scatter", "fc2"),
    "proj_dgrad": ("all_gather", "proj"), "fc2_dgrad": ("all_gather", "fc2"),
}
# The column-parallel layers' backward collectives: the input all-gathered again for wgrad, beside the dgrad GEMM,
# and the input gradient's reduce-scatter (all-reduce without sequence parallel), beside the wgrad GEMM. TE issues
# them async (module/linear.py and layernorm_linear.py, async_op=True) with TP overlap off, and userbuffers' bulk
# overlap (qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad) runs them beside the same GEMMs: no setting decides them.
ASYNC_GEMMS = {"qkv_dgrad": ("all_gather", "qkv"), "qkv_wgrad": ("reduce_scatter", "qkv"),
               "fc1_dgrad": ("all_gather", "fc1"), "fc1_wgrad": ("reduce_scatter", "fc1")}
PIPELINE_SPLITS = 4  # TE's default num_splits for the pipeline method (ring_exchange: the TP size)
COMM_SMS = 16  # TE's default num_sm for the pipeline and bulk methods (ring_exchange: 1), with set_sm_margin on for them


def userbuffers(preset: str | None, tp: int) -> dict:
    """Each userbuffers GEMM's (method, splits, SM margin): the preset's where it names them (Bridge's presets, which TE
    lays over its defaults: base.py get_default_config), else TE's default. The margin is the SMs the GEMM gives up to
    the communication kernels (num_sm where set_sm_margin, else 0)."""
    from ..upstream.presets import ub_config

    out = {}
    for gemm in (*UB_GEMMS, *ASYNC_GEMMS):
        mine = ub_config(preset, gemm)
        method = mine["method"]
        ring = method == "ring_exchange"
        margin = mine.get("set_sm_margin", not ring) and mine.get("num_sm", 1 if ring else COMM_SMS)
        out[gemm] = (method, mine.get("num_splits") or (tp if ring else PIPELINE_SPLITS), int(margin or 0))
    return out


def ub_exposed(comm: float, gemm: float, method: str, splits: int) -> float:
    """What one collective leaves exposed beside its GEMM under a userbuffers method (TE's comm_gemm_overlap): bulk
    runs it beside the whole GEMM; pipeline cuts the GEMM in `splits` chunks, each chunk's reduce-scatter beside the
    next chunk's GEMM, the last one's alone; ring_exchange cuts it in `splits` (TP) chunks, the first computed on
    the local shard, each of the other exchange steps beside a chunk."""
    if method == "bulk" or splits < 2:
        return max(0.0, comm - gemm)
    if method == "pipeline":
        return comm / splits + (splits - 1) * max(0.0, (comm - gemm) / splits)
    steps = splits - 1
    return steps * max(0.0, comm / steps - gemm / splits)


@dataclass
class Item:
    """A kind of collective of one dimension: one message's size, how many per iteration, the link, its time."""

    dimension: str
    collective: str
    what: str
    bytes: int
    count: int
    group: int
    link: str
    seconds: float  # all of them, per iteration
    hidden: float  # of that, hidden behind compute with the settings as given
    setting: str | None  # the overlap setting that hides it (None: always overlapped by design, or never)
    last: float = 0.0  # of `seconds`, the part no overlap can hide (the last gradient bucket: the backward has ended)
    last_bytes: int = 0  # that last bucket's message
    bytes_vary: bool = False  # the messages differ in size (DP's buckets): `bytes` is the largest
    first_chunk: bool = False  # `last` is model chunk 0's whole reduce or gather (the interleaved schedule's)

    def to_dict(self) -> dict:
        return {"dimension": self.dimension, "collective": self.collective, "what": self.what, "bytes": self.bytes,
                "count": self.count, "group": self.group, "link": self.link, "ms": _ms(self.seconds),
                "hidden_ms": _ms(self.hidden), "exposed_ms": _ms(self.seconds - self.hidden), "setting": self.setting,
                **({"bytes_vary": True} if self.bytes_vary else {})}


@dataclass
class Budget:
    layout: Layout
    shape_from: str
    system: System
    compute_s: float
    bubble_s: float
    items: list = field(default_factory=list)
    flipped: dict = field(default_factory=dict)  # setting -> (exposed seconds, overlap cost seconds) change flipped
    flips: dict = field(default_factory=dict)  # setting -> whether the config can make that flip (flips.check)
    findings: list = field(default_factory=list)  # worth.check(): what the budget says about worth (Finding)
    assumptions: tuple = ASSUMPTIONS
    overlap_cost: dict = field(default_factory=dict)  # setting -> seconds it adds to compute (GEMMs on fewer SMs)

    @property
    def exposed_s(self) -> float:
        return sum(i.seconds - i.hidden for i in self.items)

    @property
    def iteration_s(self) -> float:
        return self.compute_s + self.bubble_s + self.exposed_s + sum(self.overlap_cost.values())

    def tokens_per_gpu(self, gpus: int) -> float:
        return self.layout.gbs * self.layout.seq / self.iteration_s / gpus if self.iteration_s else 0.0

    def dimensions(self) -> dict:
        out: dict = {}
        for i in self.items:
            d = out.setdefault(i.dimension, {"ms": 0.0, "hidden_ms": 0.0, "exposed_ms": 0.0})
            d["ms"] += i.seconds * 1e3
            d["hidden_ms"] += i.hidden * 1e3
            d["exposed_ms"] += (i.seconds - i.hidden) * 1e3
        return {k: {n: round(v, 3) for n, v in d.items()} for k, d in out.items()}

    def to_dict(self, gpus: int) -> dict:
        lay = self.layout
        return {
            "iteration_ms": _ms(self.iteration_s), "range_ms": [_ms(self.iteration_s - self.exposed_s * (1 - RANGE[0])),
                                                                _ms(self.iteration_s + self.exposed_s * (RANGE[1] - 1))],
            "compute_ms": _ms(self.compute_s), "bubble_ms": _ms(self.bubble_s), "exposed_ms": _ms(self.exposed_s),
            "overlap_cost_ms": _ms(sum(self.overlap_cost.values())),
            "tokens_per_sec_per_gpu": round(self.tokens_per_gpu(gpus), 1),
            "dimensions": self.dimensions(),
            "settings": {k: {"effective": v, "overlap_cost_ms": _ms(self.overlap_cost.get(k, 0.0)),
                             "exposed_change_ms_if_flipped": _ms(self.flipped[k][0]),
                             "iteration_change_ms_if_flipped": _ms(sum(self.flipped[k])),
                             **({"flip": self.flips[k]} if k in self.flips else {})}
                         for k, v in lay.settings.items() if k in self.flipped},
            "collectives": [i.to_dict() for i in self.items],
            "layout": {"tp": lay.tp, "pp": lay.pp, "vp": lay.vp, "cp": lay.cp, "ep": lay.ep, "dp": lay.dp,
                       "sequence_parallel": lay.sp, "seq_length": lay.seq, "micro_batch_size": lay.mbs,
                       "global_batch_size": lay.gbs, "micro_batches": lay.micro_batches, "precision": lay.precision,
                       "nvlink_domain": lay.domain,
                       "peft": {"scheme": lay.peft.scheme, "target_modules": list(lay.peft.target_modules),
                                "dim": lay.peft.dim} if lay.peft else None,
                       "recompute": dict(zip(("granularity", "method", "num_layers", "modules"),
                                             (*lay.recompute[:3], list(lay.recompute[3])))) if lay.recompute else None},
            "shape_from": self.shape_from, "system": self.system.name, "sources": self.system.sources(),
            "assumptions": list(self.assumptions), "range": list(RANGE),
            "findings": [f.to_dict() for f in self.findings],
        }


def _uneven_split(layers: int, lay: Layout) -> tuple:
    """The assumption where the layers split unevenly over PP x VPP: Megatron-Core's TransformerBlock asserts an even
    split (transformer_block.py: layers over PP, each stage's over VPP) unless the config counts the embedding and
    the loss as layers (account_for_*_in_pipeline_split) or sets uneven first and last stages, which the budget does
    not read; no such count makes this split even, so say so."""
    if lay.pp < 2:
        return ()
    vp = lay.vp if lay.vp > 1 else 1
    if any((layers + extra) % lay.pp == 0 and (layers + extra) // lay.pp % vp == 0 for extra in (0, 1, 2)):
        return ()
    return (f"the {layers} layers do not split evenly over PP {lay.pp}" + (f" x VPP {vp}" if vp > 1 else "")
            + ": Megatron-Core's TransformerBlock refuses it at model build unless the config sets uneven first and "
            "last pipeline stages (num_layers_in_first/last_pipeline_stage, pipeline_model_parallel_layout), which the "
            "budget does not read; it costs the largest stage as if the split were even",)


def _cp_exchange(lay: Layout) -> tuple:
    """CP is costed as Megatron-Core's default exchange, the p2p ring of keys and values; say where the config
    chose another (a2a's all-to-alls of Q, K, V and the output; all_gather's key/value all-gather; a2a+p2p)."""
    kind = lay.cp_comm_type if isinstance(lay.cp_comm_type, str) else "p2p" if lay.cp_comm_type is None else "per-layer types"
    kind = kind.strip().strip("'\"")
    if lay.cp < 2 or kind == "p2p":
        return ()
    kind = safeio.shown(kind) if kind not in ("a2a", "all_gather", "a2a+p2p", "per-layer types") else kind
    return (f"CP is costed as the p2p ring of keys and values (Megatron-Core's default cp_comm_type); this config's "
            f"cp_comm_type {kind} exchanges otherwise, which the budget does not model: its CP times are the ring's",)


def copies_per_token(lay: Layout, shape) -> float:
    """How many copies of a token the dispatch sends: the alltoall dispatcher one per routed expert (top-k); the flex
    dispatcher (DeepEP, HybridEP: fused_a2a.py's is_token_in_rank) one per EP rank that holds one of its experts, under
    uniform routing ep x (1 - C(E - E/ep, k) / C(E, k))."""
    k, experts = shape.moe_router_topk, shape.num_moe_experts
    if lay.dispatcher != "flex" or lay.ep < 2 or experts % lay.ep:
        return k
    return lay.ep * (1 - math.comb(experts - experts // lay.ep, k) / math.comb(experts, k))


def _not_modelled(lay: Layout, shape) -> tuple:
    """What the budget leaves out or prices as another path does: the QKV all-gather of fewer KV groups than TP; the
    flex dispatcher at the all-to-all's bandwidth (with its copies per token); the allgather token dispatcher (its
    all-gather and reduce-scatter over the expert-TP x EP group, token_dispatcher.py MoEAllGatherTokenDispatcher) as
    the alltoall one's all-to-all; Megatron-FSDP (its reduce-scatter every micro-batch, its all-gathers per unit in
    forward and backward) as the distributed optimizer's once-an-iteration collectives."""
    out = ()
    if shape.groups < lay.tp:
        out += (f"TP: with fewer KV groups ({shape.groups}) than TP ({lay.tp}) Megatron-Core all-gathers each layer's fused "
                "QKV output over TP to pick its heads (attention.py); that all-gather is not counted",)
    if shape.moe and lay.ep > 1 and lay.dispatcher == "flex":
        out += (f"EP: the flex dispatcher (DeepEP, HybridEP) sends a token once to each EP rank that holds one of its "
                f"experts: {copies_per_token(lay, shape):.2f} ranks of its top-{shape.moe_router_topk} under uniform routing "
                "(a skewed router sends more or fewer); priced at the all-to-all's bus bandwidth, not DeepEP's own kernels'",)
    if shape.moe and lay.ep > 1 and spans_domains(lay, lay.etp, lay.ep):
        local = fewest_local(lay, lay.etp, lay.ep)
        if local < min(lay.domain, lay.ep):
            out += (f"EP: with ranks placed in Megatron-Core's order, an EP group of {lay.ep} has as few as {local} rank{'s' * (local != 1)} in one "
                    f"NVLink domain of {lay.domain} GPUs: that rank's all-to-all sends {lay.ep - local} of {lay.ep} parts over the "
                    "network, which sets the time (and the iteration time is no lower bound then); where the job is placed so "
                    "that each EP group lies in one domain (the Slurm segments are the user's to size), --nvlink-domain with "
                    "the GPUs a segment holds prices that",)
    if shape.moe and lay.ep > 1 and lay.dispatcher == "allgather":
        out += ("EP: the allgather token dispatcher (all-gather and reduce-scatter over the expert-TP x EP group) is "
                "priced as the alltoall dispatcher's all-to-all, which it is not: its EP times are the alltoall's",)
    if lay.fsdp and _unsharded(lay):
        out += ("DP: Megatron-FSDP with no_shard all-reduces whole gradients on the last micro-batch and gathers no "
                "parameters: priced as DDP's all-reduce (its bucketing is Megatron-FSDP's own, not DDP's)",)
    elif lay.fsdp:
        out += ("DP: Megatron-FSDP reduce-scatters every micro-batch and all-gathers per unit in forward and backward; "
                "the budget prices the distributed optimizer's once-an-iteration reduce-scatter and all-gather: its DP "
                "times are those, not FSDP's",)
    return out


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


# -- the estimate ------------------------------------------------------------------------------------------------------


def estimate(lay: Layout, shape: shapes.Shape, system: System, shape_from: str = "") -> Budget:
    budget = _estimate(lay, shape, system, shape_from)
    for setting, on in lay.settings.items():
        other = Layout(**{**lay.__dict__, "settings": {**lay.settings, setting: not on}})
        flip = _estimate(other, shape, system, shape_from)
        delta = (flip.exposed_s - budget.exposed_s,
                 sum(flip.overlap_cost.values()) - sum(budget.overlap_cost.values()))
        if any(delta) or on:
            budget.flipped[setting] = delta
    return budget


# Experts x layers on one stage the budget lists parameter by parameter into buckets (Kimi K2 with EP 1 and PP 1 is
# 23,424; fuzzI I1: 4,096 experts in 4,096 layers grew past 19 GB)
MAX_EXPERT_LAYERS = 1 << 15


def _estimate(lay: Layout, shape: shapes.Shape, system: System, shape_from: str) -> Budget:
    tokens = lay.seq * lay.mbs  # one micro-batch of one DP rank
    layers = -(-shape.num_layers // lay.pp)  # the largest stage
    if shape.moe and shape.num_moe_experts // lay.ep * layers > MAX_EXPERT_LAYERS:
        raise UsageError(f"{shape.num_moe_experts // lay.ep:,} experts on each of a stage's {layers:,} layers: past the "
                         f"{MAX_EXPERT_LAYERS:,} expert-layers a budget costs one by one (expert parallelism or more "
                         "pipeline stages put fewer on a GPU)")
    rate = system.gemm_tflops(lay.precision) * 1e12 * system.efficiency
    attn_rate = system.gemm_tflops("bf16") * 1e12 * system.efficiency
    per_layer = shapes.layer_flops(shape, tokens, lay.seq, lay.tp, lay.cp)
    gemm_s = {k: v / rate for k, v in per_layer.items() if k != "attention"}
    attn_s = per_layer["attention"] / attn_rate
    # LoRA's adapters run in BF16 (Megatron-Core's own parallel linears, not Transformer Engine's)
    adapter_s = shapes.adapter_flops(shape, lay.peft.gemms, lay.peft.dim, tokens, lay.tp, lay.cp) / attn_rate if lay.peft else 0.0
    layer_fwd = sum(gemm_s.values()) + attn_s + adapter_s
    logits_s = shapes.logits_flops(shape, tokens, lay.tp, lay.cp) / rate / max(1, lay.pp)  # spread: no stage is apart
    stage_fwd = layers * layer_fwd + logits_s
    if lay.peft:  # frozen weights: dgrad only (the attention's backward and the trained adapters' stay twice)
        stage_bwd = layers * (sum(gemm_s.values()) + 2 * attn_s + 2 * adapter_s) + logits_s
    else:
        stage_bwd = 2 * stage_fwd  # dgrad and wgrad
    again = recomputed(lay, layers, shape.moe)
    stage_bwd += layers * (again["layer"] * layer_fwd + again["core_attn"] * attn_s
                           + again["mlp"] * (gemm_s["fc1"] + gemm_s["fc2"] + gemm_s.get("router", 0.0)))
    mb_s = stage_fwd + stage_bwd
    m = lay.micro_batches
    b = Budget(lay, shape_from, system, compute_s=m * mb_s, bubble_s=(lay.pp - 1) / lay.vp * mb_s if lay.pp > 1 else 0.0,
               assumptions=ASSUMPTIONS + ((MOE_ASSUMPTION,) if shape.moe else ()) + ((PEFT_ASSUMPTION,) if lay.peft else ())
               + ((RECOMPUTE_ASSUMPTION,) if lay.recompute else ()) + _uneven_split(shape.num_layers, lay)
               + _cp_exchange(lay) + _not_modelled(lay, shape))
    b.items += _tp(lay, shape, system, layers, m, tokens, gemm_s, again)
    if _userbuffers_run(lay):
        b.overlap_cost["tp_comm_overlap"] = layers * m * _sm_margin_s(lay, shape, system, gemm_s)
    b.items += _cp(lay, shape, system, layers, m, tokens, attn_s, again)
    b.items += _pp(lay, shape, system, m, tokens, stage_fwd)
    b.items += _dp(lay, shape, system, layers, stage_fwd, stage_bwd)
    b.items += _ep(lay, shape, system, layers, m, tokens, layer_fwd, again)
    return b


def spans_domains(lay: Layout, stride: int, size: int) -> bool:
    """Whether some group of `size` ranks `stride` apart (Megatron-Core's order tp-cp-ep-dp-pp: TP stride 1, CP stride
    TP, DP x CP stride TP, PP stride TP x CP x DP) has ranks in two NVLink domains: its first and last rank then lie in
    different ones. The groups repeat with the least common multiple of the domain and the group's extent."""
    if size < 2:
        return False
    world, extent = lay.tp * lay.cp * lay.dp * lay.pp, stride * size
    if extent > lay.domain:
        return True
    period = min(world, math.lcm(lay.domain, extent))
    for base in range(0, period, extent):
        for first in range(base, base + stride):
            if first // lay.domain != (first + (size - 1) * stride) // lay.domain:
                return True
    return False


def fewest_local(lay: Layout, stride: int, size: int) -> int:
    """The fewest ranks of one group (`size` ranks `stride` apart, as spans_domains places them) that lie in the NVLink
    domain of one of its ranks: an all-to-all sends the rest of that rank's bytes over the network (evalO O1: a 32-rank
    EP group with 8 ranks in one 72-GPU domain and 24 in the next was priced as if all 32 shared one)."""
    return _fewest_local(lay.tp * lay.cp * lay.dp * lay.pp, lay.domain, stride, size)


@functools.lru_cache(maxsize=64)
def _fewest_local(world: int, domain: int, stride: int, size: int) -> int:
    """fewest_local's count, once per placement (a budget asks for it a dozen times: fuzzL L1), a group's members per
    domain counted by arithmetic: from a member, those before its domain's end."""
    extent, fewest = stride * size, size
    for base in range(0, min(world, math.lcm(domain, extent)), extent):
        for first in range(base, base + stride):
            j = 0
            while j < size:
                end = (first + j * stride) // domain * domain + domain
                here = min(size, -(-(end - first) // stride)) - j
                fewest, j = min(fewest, here), j + here
            if fewest == 1:
                return 1
    return fewest


def _link(lay: Layout, stride: int, size: int) -> str:
    """nvlink when every group of the dimension lies inside one NVLink domain, else the network (the slowest group
    sets the collective's time)."""
    return "network" if spans_domains(lay, stride, size) else "nvlink"


def _tp(lay, shape, system, layers, m, tokens, gemm_s, again) -> list:
    if lay.tp < 2:
        return []
    elements = tokens // lay.cp * shape.hidden_size
    size = {"all_gather": int(elements * GATHER_BYTES[lay.precision])}
    link = _link(lay, 1, lay.tp)
    times = layers * m
    if lay.sp:
        ub = {g: c for g, (c, _) in UB_GEMMS.items()}
        gemms = {g: gemm_s[layer] for g, (_, layer) in UB_GEMMS.items()}
        backward = {g: (c, gemm_s[layer]) for g, (c, layer) in ASYNC_GEMMS.items()}
        what = {"all_gather": "sequence-parallel inputs (forward) and output gradients (backward)",
                "reduce_scatter": "row-parallel outputs (forward)"}
    else:  # the row-parallel outputs' all-reduce forward; the input gradients' beside wgrad, async
        ub = {"proj_fprop": "all_reduce", "fc2_fprop": "all_reduce"}
        gemms = {g: gemm_s[UB_GEMMS[g][1]] for g in ub}
        backward = {"qkv_wgrad": ("all_reduce", gemm_s["qkv"]), "fc1_wgrad": ("all_reduce", gemm_s["fc1"])}
        what = {"all_reduce": "row-parallel partial sums (forward)"}
    experts = _expert_mlp(shape)  # a MoE layer's MLP: experts, no TP collectives of the dense MLP's
    ub = {g: c for g, c in ub.items() if g not in experts}
    backward = {g: v for g, v in backward.items() if g not in experts}
    on = _userbuffers_run(lay)
    frozen = lay.peft is not None
    if frozen:  # no wgrad GEMM: the input gradient's collective has nothing beside it; the re-gather for wgrad is
        # skipped (TE: ln_out_needs_gather needs weight.requires_grad) unless userbuffers' bulk dgrad runs it anyway
        backward = {g: (c, t if c == "all_gather" else 0.0) for g, (c, t) in backward.items() if c != "all_gather" or on}
    plain = _plain_gemms(lay)
    # a recomputed forward makes its collectives again: the whole layer's (full), or the MLP's (selective mlp)
    runs = dict.fromkeys((*UB_GEMMS, *ASYNC_GEMMS), 1.0)
    for g in [g for g in runs if g.endswith("_fprop")]:
        runs[g] += again["layer"] + (again["mlp"] if g in ("fc1_fprop", "fc2_fprop") else 0.0)

    def item(collective, mine, hide, what_it_is, setting):
        nbytes = size.get(collective, elements * ACT_BYTES)
        one = system.seconds(collective, nbytes, lay.tp, link)
        n = sum(runs[g] for g in mine)
        return Item("tp", collective, what_it_is, nbytes, round(n * times), lay.tp, link, one * n * times,
                    sum(hide(one, g) * runs[g] for g in mine) * times, setting)

    def by_userbuffers(one, g):
        return one - ub_exposed(one, gemms[g], *lay.userbuffers[g][:2]) if on and g not in plain else 0.0

    out = []
    for c in dict.fromkeys(ub.values()):
        out.append(item(c, [g for g, x in ub.items() if x == c], by_userbuffers, what[c], "tp_comm_overlap"))
    for c in dict.fromkeys(x for x, _ in backward.values()):
        if c == "all_gather":
            what_it_is = ("userbuffers' bulk all-gather beside dgrad (frozen weights: no wgrad reads it)" if frozen
                          else "inputs gathered again for wgrad, beside dgrad (async)")
        else:
            what_it_is = ("input gradients (frozen weights: no wgrad GEMM beside them)" if frozen
                          else "input gradients, beside wgrad (async)")
        out.append(item(c, [g for g, (x, _) in backward.items() if x == c], lambda one, g: min(one, backward[g][1]),
                        what_it_is, None))
    return out + _adapter_collectives(lay, system, link, elements * ACT_BYTES, times)


def _adapter_collectives(lay, system, link, nbytes: int, times: int) -> list:
    """Bridge's LoRA adapters' own sequence-parallel collectives (peft/utils.py ParallelLinearAdapter, BF16, in the
    autograd graph: exposed): on a column-parallel linear (linear_qkv, linear_fc1) it all-gathers its input and
    reduce-scatters that gradient where TP overlap is on (with it off TE returns the gathered input and the adapter
    gathers nothing: get_adapter_attributes_from_linear); on a row-parallel one (linear_proj, linear_fc2) it
    all-gathers its output's hidden dimension (gather_output) and, in the backward, the scattered sequence. The
    rank-sized ones (the rank-dim activations) are left out."""
    if not (lay.peft and lay.sp and lay.tp > 1):
        return []
    column = lay.peft.layernorm_fused if lay.settings["tp_comm_overlap"] else ()
    row = [g for g in ("proj", "fc2") if g in lay.peft.gemms]
    out = []
    for collective, n in (("all_gather", len(column) + 2 * len(row)), ("reduce_scatter", len(column))):
        if n:
            one = system.seconds(collective, nbytes, lay.tp, link)
            out.append(Item("tp", collective, "LoRA adapters' own sequence-parallel collectives (BF16)", nbytes, n * times,
                            lay.tp, link, one * n * times, 0.0, None))
    return out


def _plain_gemms(lay) -> frozenset:
    """The userbuffers GEMMs that run without them: LoRA on a LayerNorm-fused linear (linear_qkv, linear_fc1) sets
    return_layernorm_output, and TE's LayerNormLinear then all-gathers its input with NCCL (anchor
    te_lora_ag_overlap_dropped)."""
    return frozenset(f"{g}_fprop" for g in lay.peft.layernorm_fused) if lay.peft else frozenset()


def _userbuffers_run(lay) -> bool:
    """TP overlap on, with sequence parallel and the TP group inside one NVLink domain: what userbuffers need."""
    return lay.tp > 1 and lay.settings["tp_comm_overlap"] and lay.sp and _link(lay, 1, lay.tp) == "nvlink"


def _expert_mlp(shape) -> frozenset:
    """The dense MLP's TP GEMMs that a MoE layer does not run: its experts are grouped GEMMs (Transformer Engine's
    GroupedLinear takes no userbuffers), and the alltoall dispatcher sends each TP rank's own sequence shard to the
    experts, gathering on the expert-TP group only where expert_tensor_parallel_size > 1
    (megatron/core/transformer/moe/token_dispatcher.py)."""
    return frozenset(g for g in (*UB_GEMMS, *ASYNC_GEMMS) if g.startswith(("fc1", "fc2"))) if shape.moe else frozenset()


def _sm_margin_s(lay, shape, system, gemm_s) -> float:
    """What TP overlap adds to one layer's compute: a userbuffers GEMM with an SM margin runs on the SMs the
    communication kernels leave it (Transformer Engine comm_gemm_overlap.cpp: _math_sms = sm_count - num_comm_sm)."""
    layer_of = {g: layer for g, (_, layer) in {**UB_GEMMS, **ASYNC_GEMMS}.items()}
    idle = _plain_gemms(lay) | _expert_mlp(shape) | ({"qkv_wgrad", "fc1_wgrad"} if lay.peft else set())  # not run with userbuffers, or not run
    return sum(gemm_s[layer_of[g]] * margin / max(1, system.sms - margin)
               for g, (_, _, margin) in lay.userbuffers.items() if margin and g not in idle)


def _cp(lay, shape, system, layers, m, tokens, attn_s, again) -> list:
    if lay.cp < 2:
        return []
    # p2p ring (TE's default cp_comm_type): cp-1 exchanges of the local K and V chunk forward, of K, V, dK and dV backward
    kv = 2 * tokens // lay.cp * max(shape.groups // lay.tp, 1) * shape.head_dim * ACT_BYTES  # fewer groups than TP: one each
    link = _link(lay, lay.tp, lay.cp)
    step_fwd = system.seconds("send_recv", kv, 2, link)
    step_bwd = system.seconds("send_recv", 2 * kv, 2, link)
    steps = (lay.cp - 1) * layers * m
    fwd_runs = 1 + again["layer"] + again["core_attn"]  # a recomputed attention exchanges its chunks again
    compute_step = attn_s / lay.cp  # one block of the causal attention per exchange
    # the backward's messages are twice the forward's (TE's context_parallel.py: K and V with dK and dV): two rows
    return [Item("cp", "send_recv", "K/V chunks of the attention ring (forward)", kv, round(fwd_runs * steps), 2, link,
                 steps * fwd_runs * step_fwd, steps * fwd_runs * min(step_fwd, compute_step), None),
            Item("cp", "send_recv", "K/V and dK/dV chunks of the attention ring (backward)", 2 * kv, round(steps), 2, link,
                 steps * step_bwd, steps * min(step_bwd, 2 * compute_step), None)]


def _pp(lay, shape, system, m, tokens, stage_fwd) -> list:
    if lay.pp < 2:
        return []
    size = tokens // lay.cp // (lay.tp if lay.sp else 1) * shape.hidden_size * ACT_BYTES
    link = _link(lay, lay.tp * lay.cp * lay.dp, lay.pp)
    one = system.seconds("send_recv", size, 2, link)
    count = 2 * m * lay.vp  # activations forward, their gradients backward, at each of the stage's chunk boundaries
    total = one * count
    chunk_fwd = stage_fwd / lay.vp
    on = lay.settings["overlap_p2p_comm"] and lay.vp > 1
    hidden = count * min(one, chunk_fwd) if on else 0.0
    return [Item("pp", "send_recv", "activations and their gradients between stages", size, count, 2, link, total, hidden,
                 "overlap_p2p_comm")]


def _dp(lay, shape, system, layers, stage_fwd, stage_bwd) -> list:
    """The DP buckets' gradient reduce and parameter gather: the dense parameters' on the DP x CP group, the experts'
    (a buffer of their own, DistributedDataParallel's expert_parallel_buffers) on the expert-DP group, both dispatched
    by one start_grad_sync (start_param_sync) of each model chunk, in turn."""
    d = lay.ddp
    if lay.peft:  # only what trains has a gradient buffer (DistributedDataParallel skips frozen parameters)
        params = [(f"decoder.layers.{i}.{g}.adapter", n, False) for i in range(layers)
                  for g, n in shapes.adapter_params(shape, lay.peft.gemms, lay.peft.dim, lay.tp).items()]
    else:
        layers, lay = _first_stage(shape, lay, layers)
        lay = Layout(**{**lay.__dict__, "num_layers": shape.num_layers or 0})
        params = shapes.stage_params(shape, lay.tp, lay.ep, layers, first=True, last=lay.pp == 1)
    dense = [p for p in params if not p[2]]
    experts = [(n, e // lay.etp, x) for n, e, x in params if x]  # expert TP splits each expert's weights
    world = lay.dp * lay.cp * lay.tp * lay.pp
    expert_dp = world // (lay.etp * lay.ep * lay.pp) if experts else 1
    # one bucket size for every buffer: the DP group's default (DistributedDataParallel.__init__)
    size = buckets.default_bucket_size(_bucket_size(lay, shape, layers, params), lay.settings["overlap_grad_reduce"], lay.dp * lay.cp)
    bufs = [_buffer(lay, system, dense, lay.dp * lay.cp, _link(lay, lay.tp, lay.cp * lay.dp), "", layers, size,
                    tied=lay.pp > 1 and bool(shape.share_embeddings_and_output_weights)),
            _buffer(lay, system, experts, expert_dp, _link(lay, lay.etp * lay.ep, expert_dp),
                    f"expert ({expert_dp}-rank expert-DP group) ", layers, size)]
    bufs = [b for b in bufs if b]
    out: dict = {}
    for kind, setting, budget in (("reduce", "overlap_grad_reduce", stage_bwd), ("gather", "overlap_param_gather", stage_fwd)):
        if kind == "gather" and (not d.get("use_distributed_optimizer") or _unsharded(lay)):
            break  # (Megatron-FSDP's no_shard: start_param_sync returns at once, evalL L2)
        exposed_before = 0.0
        for i, b in enumerate(bufs):  # a buffer's part: what the buffers before it leave exposed, and what it adds
            total = sum(map(sum, b[kind]))
            exposed = _exposed(lay, [x[kind] for x in bufs[:i + 1]], kind, budget) if lay.settings[setting] else None
            hidden = 0.0 if exposed is None else min(total, max(0.0, total - (exposed - exposed_before)))
            exposed_before = exposed or 0.0
            out[i, kind] = _item(lay, b, kind, total, hidden, setting)
    return [out[key] for key in sorted(out, key=lambda k: (k[0], k[1] != "reduce"))]


def _bucket_size(lay, shape, layers: int, params: list) -> int | None:
    """ddp.bucket_size, or with ddp.num_buckets what Megatron's DDP wrapper makes of it: every parameter of this rank's
    model chunks (frozen ones too) over num_buckets (megatron/training/models/dist_utils.py; evalN N1)."""
    d = lay.ddp
    if not d.get("num_buckets") or d.get("bucket_size") is not None:
        return d.get("bucket_size")
    whole = params
    if lay.peft:  # the adapters train; the frozen base's parameters count too
        first, _ = _first_stage(shape, lay, layers)
        whole = params + shapes.stage_params(shape, lay.tp, lay.ep, first, first=True, last=lay.pp == 1)
    return sum(n // lay.etp if expert else n for _, n, expert in whole) // d["num_buckets"]


def _unsharded(lay) -> bool:
    """Megatron-FSDP with no_shard: every rank keeps whole gradients and parameters (an all-reduce, no gather)."""
    return lay.fsdp and lay.ddp.get("data_parallel_sharding_strategy") == "no_shard"


def _first_stage(shape, lay, layers: int) -> tuple:
    """The first pipeline stage's layers, where the split counts the embedding as a layer
    (account_for_embedding_in_pipeline_split: TransformerBlock gives the first virtual stage one layer fewer); and the
    layout with where its first chunk starts."""
    if lay.pp < 2 or not lay.layer_slots[0]:
        return layers, lay
    slots = shape.num_layers + sum(lay.layer_slots)
    if slots % (lay.pp * lay.vp):
        return layers, lay  # (not a split Megatron-Core takes: _uneven_split says so)
    return slots // lay.pp - 1, Layout(**{**lay.__dict__, "chunk_offset": 1})


def _buffer(lay, system, params, group, link, whose, layers, size, tied=False) -> dict | None:
    """One kind of DDP buffer: its bucket groups per model chunk (chunk 0 first) and each group's time to reduce
    (`reduce`) and, with the distributed optimizer, to gather (`gather`)."""
    if group < 2 or not params:
        return None
    d = lay.ddp
    distopt = bool(d.get("use_distributed_optimizer"))
    grad_bytes = 4 if d.get("grad_reduce_in_fp32") else 2
    reduce = "reduce_scatter" if distopt and not _unsharded(lay) else "all_reduce"
    chunks, quantized = [], False
    for k, chunk in enumerate(_chunks(params, layers, lay.vp, lay.chunk_offset)):
        bucketed = k == 0 and not lay.param_gather_with_step  # Megatron's wrapper: disable_bucketing for the rest
        weight = functools.partial(_quantized, lay, chunk=k, layers=layers)
        quantized = quantized or any(weight(p[0]) for p in chunk)
        chunks.append(_bucket_groups(lay, chunk, size if bucketed else None, distopt, group, tied, weight))
    sizes = [n for groups in chunks for g in groups for n, _ in g]
    return {"whose": whose, "group": group, "link": link, "distopt": distopt, "grad_bytes": grad_bytes, "quantized": quantized,
            "reduce_collective": reduce, "chunks": chunks, "sizes": sizes,
            "reduce": [[sum(system.seconds(reduce, n * grad_bytes, group, link) for n, _ in g) for g in groups]
                       for groups in chunks],
            "gather": [[sum(system.seconds("all_gather", math.ceil(n * b), group, link) for n, b in g) for g in groups]
                       for groups in chunks]}


def _quantized(lay, name: str, chunk: int, layers: int) -> bool:
    """Whether a parameter of the first stage's model chunk `chunk` is a quantized TE GEMM weight: not in a layer
    first_last_layers_bf16 keeps in BF16, by Megatron-Core's global layer number (get_transformer_layer_offset at
    pipeline rank 0: chunk k starts k x PP x the layers of a chunk in, each earlier chunk of the other stages between;
    recheck47 R3: with VPP or a short last stage the model's last layers can sit on the first stage)."""
    if not (lay.quantized and QUANTIZED_WEIGHT.search(name)):
        return False
    start, end = lay.bf16_layers
    m = _LAYER.match(name)
    if m is None or not (start or end):
        return True
    per = -(-(layers + lay.chunk_offset) // lay.vp) if lay.vp > 1 else 0
    number = int(m[1]) + chunk * (lay.pp - 1) * per
    total = lay.num_layers or (layers if lay.pp == 1 else None)
    return not (number < start or total is not None and number >= total - end)


def _bucket_groups(lay, chunk, size, distopt, group, tied, quantized) -> list[list[tuple[int, float]]]:
    """A model chunk's bucket groups in the order backward fills them, each a list of (elements, bytes an element
    its all-gather moves) of its buckets. With quantized weights they are a buffer of their own, each of its buckets a
    group, and every other bucket joins the last group (param_and_grad_buffer.partition_buckets). quantized(name):
    whether a parameter's storage is quantized (_quantized: TE's GEMM weights, not the layers kept in BF16)."""
    d = lay.ddp

    def spans(ps):
        alone = frozenset(i for i, (name, _, _) in enumerate(ps) if tied and name == "embedding.word_embeddings.weight")
        return [e - s for s, e, _ in buckets.layout([n for _, n, _ in ps], size, distributed_optimizer=distopt, dp_size=group,
                                                     pad_for_high_nccl_busbw=bool(d.get("pad_buckets_for_high_nccl_busbw")),
                                                     alone=alone)] if ps else []

    weights = spans([p for p in chunk if quantized(p[0])])
    rest = spans([p for p in chunk if not quantized(p[0])])
    if not weights:
        return [[(n, 2)] for n in rest]
    each = lay.quantized[1]
    return [[(n, each)] for n in weights[:-1]] + [[(weights[-1], each)] + [(n, 2) for n in rest]]


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


def _exposed(lay, times: list, kind: str, budget: float) -> float:
    """What stays exposed of the buffers' collectives (`times`: per buffer, per chunk, per bucket group; the buffers
    of one chunk dispatched together, in turn on one stream), `budget` one micro-batch's stage compute it runs beside."""
    total = sum(t for buf in times for chunk in buf for t in chunk)
    if kind == "gather" and lay.ddp.get("align_param_gather") and not _interleaved(lay):
        return total  # the forward pre-hook skips the next bucket's dispatch: each gather waits where its layer runs
    if not _interleaved(lay) or kind == "gather" and not lay.ddp.get("align_param_gather"):
        # each buffer's last bucket group in backward order (chunk 0's, the embedding's) is dispatched last, with
        # nothing left to run behind it; the others load behind one micro-batch's compute
        return total - max(0.0, min(total - sum(buf[0][-1] for buf in times), budget))
    chunks = [[t for buf in times for t in (buf[k] if k < len(buf) else [])] for k in range(max(len(b) for b in times))]
    per = budget / lay.vp  # one micro-batch of one model chunk
    steps = min(lay.vp_group, lay.micro_batches) * per  # a chunk runs a group of micro-batches before the next
    if kind == "reduce":
        return _reduce_exposed(lay, chunks, per, steps)
    if lay.param_gather_with_step:  # chunk 0's all-gather starts in the optimizer step, behind the other chunks' step
        chunks = [[0.0] * len(chunks[0])] + chunks[1:]  # (the step is not counted, nor what it hides)
    return _gather_exposed(chunks, steps)


def _reduce_exposed(lay, chunks, per, steps) -> float:
    """The interleaved schedule's cooldown, backward's end at 0: chunk k's last micro-batch ends k groups of
    micro-batches before it (schedules.py backward_step_helper_postprocess); chunk 0's groups with align_grad_reduce
    all at the end, without it as its last micro-batch's backward fills them."""
    dispatch = []
    for k in reversed(range(len(chunks))):
        if k or _chunk0_exposed(lay, "reduce"):
            dispatch.append((-k * steps, sum(chunks[k])))
        else:
            n = len(chunks[0])
            dispatch += [(-per + per * (j + 1) / n, t) for j, t in enumerate(chunks[0])]
    end = -math.inf
    for at, seconds in dispatch:
        end = max(end, at) + seconds
    return max(0.0, end)


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


def _item(lay, b: dict, kind: str, total: float, hidden: float, setting: str) -> Item:
    sizes, groups = b["sizes"], [g for groups in b["chunks"] for g in groups]
    vary = len(set(sizes)) > 1
    # what no overlap hides: the last bucket group; with the interleaved schedule's sync funcs all of chunk 0's
    chunk0 = _chunk0_exposed(lay, kind)
    last = sum(b[kind][0]) if chunk0 else b[kind][0][-1]
    last_bytes = sum(n for g in (b["chunks"][0] if chunk0 else b["chunks"][0][-1:]) for n, _ in g)
    if kind == "reduce":
        gb = b["grad_bytes"]
        return Item("dp", b["reduce_collective"], f"{b['whose']}gradients ({len(sizes)} bucket{'s' if len(sizes) != 1 else ''}, "
                    f"{'FP32' if gb == 4 else 'BF16'})", max(sizes) * gb, len(sizes), b["group"], b["link"], total, hidden,
                    setting, last=last, last_bytes=last_bytes * gb, bytes_vary=vary, first_chunk=chunk0)
    what = f"{lay.quantized[0]}, BF16 others" if b["quantized"] else "BF16"
    biggest = max(math.ceil(n * e) for g in groups for n, e in g)
    gathered = sum(math.ceil(n * e) for g in (b["chunks"][0] if chunk0 else b["chunks"][0][-1:]) for n, e in g)
    return Item("dp", "all_gather", f"{b['whose']}parameters ({what})", biggest, len(sizes), b["group"], b["link"], total,
                hidden, setting, last=last if chunk0 else 0.0, last_bytes=gathered, bytes_vary=vary or "," in what,
                first_chunk=chunk0)


def _chunks(params: list, layers: int, vp: int, offset: int = 0) -> list[list]:
    """A stage's parameters by virtual-pipeline model chunk, in order (each chunk a model of its own, wrapped in a
    DistributedDataParallel of its own: megatron/training/models/dist_utils.py): layer i in chunk
    (i + offset) // ceil((layers + offset) / vp) (offset: the embedding counted as a layer), the embedding in chunk 0,
    the final norm and output layer in the last."""
    if vp <= 1:
        return [params]
    per = -(-(layers + offset) // vp)
    out: list[list] = [[] for _ in range(vp)]
    for p in params:
        m = _LAYER.match(p[0])
        out[min((int(m[1]) + offset) // per, vp - 1) if m else 0 if p[0].startswith("embedding") else vp - 1].append(p)
    return [c for c in out if c]


_LAYER = re.compile(r"decoder\.layers\.(\d+)\.")


def _ep(lay, shape, system, layers, m, tokens, layer_fwd, again) -> list:
    if lay.ep < 2 or not shape.moe:
        return []
    local = tokens // lay.cp // (lay.tp if lay.sp else 1)
    size = round(local * copies_per_token(lay, shape) * shape.hidden_size * ACT_BYTES)
    link = _link(lay, lay.etp, lay.ep)  # the expert grid's order: tp-ep-dp-pp, TP the expert TP
    one = system.seconds("all_to_all", size, lay.ep, link, fewest_local(lay, lay.etp, lay.ep) if link == "network" else None)
    count = round((4 + 2 * (again["layer"] + again["mlp"])) * layers * m)  # dispatch and combine, forward (again where recomputed) and backward
    total = one * count
    on = lay.settings["overlap_moe_expert_parallel_comm"]
    # hidden behind the other micro-batch's attention or MLP; combined 1F1B runs the first micro-batch's forward and
    # the last one's backward alone (pipeline_parallel/combined_1f1b.py): their dispatch and combine stay exposed
    hidden = max(0, count - 4 * layers) * min(one, layer_fwd / 2) if on else 0.0
    return [Item("ep", "all_to_all", "routed tokens (dispatch and combine)", size, count, lay.ep, link, total, hidden,
                 "overlap_moe_expert_parallel_comm")]
