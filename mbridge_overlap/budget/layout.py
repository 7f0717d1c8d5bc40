"""The budget's view of a resolved run (Layout, layout_of), and where its groups' ranks lie: inside one NVLink domain or
across the network (ranks placed as Megatron-Core orders them)."""

from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, field

from .. import safeio
from ..errors import UsageError
from ..run import given
from ..run.layout import fsdp_forced
from ..run.peft import Peft, of as peft_of
from .userbuffers import userbuffers


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
    ub_preset: str | None = None  # model.tp_comm_overlap_cfg where it names a preset: the margins priced are its own
    peft: Peft | None = None  # frozen base weights and the adapters trained (run.peft), None: every weight trains
    recompute: tuple = ()  # (granularity, method, num_layers, modules) as Megatron-Core reads them; () none
    cp_comm_type: str | None = None  # model.cp_comm_type (Megatron-Core's default: p2p)
    param_gather_with_step: bool = False  # optimizer.overlap_param_gather_with_optimizer_step: no chunk is bucketed
    etp: int = 1  # expert_tensor_parallel_size (Megatron-Core's default: the TP size)
    dispatcher: str | None = None  # model.moe_token_dispatcher_type
    flex_backend: str | None = None  # model.moe_flex_dispatcher_backend (the flex dispatcher's: deepep, hybridep)
    fsdp: bool = False  # ddp.use_megatron_fsdp
    quantized: tuple | None = None  # (what, bytes an element the all-gather moves) of quantized weights (quantized_params)
    bf16_layers: tuple = (0, 0)  # first_last_layers_bf16's layers at the start and the end, built unquantized
    num_layers: int = 0  # the model's Transformer layers (0: not known here), for the end's BF16 layers
    vp_group: int = 1  # microbatch_group_size_per_vp_stage (Megatron-Core's default: PP)
    align_grad_reduce: bool = True  # dist.align_grad_reduce: the grad_sync_func of each chunk (Bridge's default)
    fp32_accumulation: bool = False  # ddp.reduce_scatter_with_fp32_accumulation (DDP's; Bridge leaves it False)
    layer_slots: tuple = (False, False)  # account_for_embedding / account_for_loss_in_pipeline_split
    chunk_offset: int = 0  # layer slots before the first stage's first layer (the embedding counted as one)
    stages: tuple = ()  # a pipeline_model_parallel_layout's decoder layers per stage (stage k on rank k mod PP); ()
    mtp_stage: int | None = None  # the layout's stage holding the MTP layers ('m'); None: the last stage's (no layout)
    first_last: tuple = (None, None)  # num_layers_in_first/last_pipeline_stage (None: not set): first_last_stages
    embedding_ranks: str = "first_tied_last_mtp"  # the release's word-embedding group (Release.embedding_ranks)
    per_token_loss: bool = False  # model.calculate_per_token_loss: finalize_model_grads' num_tokens (finalize.py)
    # model.moe_router_load_balancing_type="quantile_balancing" where the release's Megatron-Core has it (0.19: Bridge
    # 0.6.x): finalize_model_grads' _update_router_qb_beta (finalize.py)
    router_qb: bool = False
    # the release's Megatron-Core has gtp_weight_remat_size and finalize_model_grads' reduction over the gtp_remat
    # groups (0.19: Bridge 0.6.x; 0.18, Bridge 0.5.x, has neither): what finalize.said names as not run
    gtp_remat: bool = True
    # the provider's model builds its decoder again after GPTModel.__init__ built the MTP block (model_providers.json
    # decoder_rebuilt): on the MTP's rank that chunk's decoder layers get no userbuffers (TP_OVERLAP_OFF_MTP_DECODER)
    mtp_decoder_rebuilt: bool = False
    # where `domain` (the GPUs of consecutive ranks that share an NVLink domain) came from: (given | perf_launcher |
    # assumed, what to say); placed() sets it
    placement: tuple = ("assumed", "")

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


_FP32_ACCUMULATION = "ddp.reduce_scatter_with_fp32_accumulation"  # (read as given: no rule resolves it)


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
                  "overlap_grad_reduce": bool(d.get("overlap_grad_reduce")) or "overlap_grad_reduce" in fsdp_forced(d),
                  "overlap_param_gather": bool(d.get("overlap_param_gather")) or "overlap_param_gather" in fsdp_forced(d),
                  "overlap_moe_expert_parallel_comm": bool(m.get("overlap_moe_expert_parallel_comm"))},
        ddp=dict(d),
        userbuffers=userbuffers(m.get("tp_comm_overlap_cfg"), tp),
        ub_preset=m.get("tp_comm_overlap_cfg") if isinstance(m.get("tp_comm_overlap_cfg"), str) else None,
        peft=peft_of(state) or peft,
        recompute=_recompute_of(m),
        cp_comm_type=state.request.context.get("model.cp_comm_type"),
        param_gather_with_step=bool(state.optimizer.get("overlap_param_gather_with_optimizer_step")),
        etp=m.get("expert_tensor_parallel_size") or tp,
        dispatcher=m.get("moe_token_dispatcher_type"), flex_backend=m.get("moe_flex_dispatcher_backend"), fsdp=bool(d.get("use_megatron_fsdp")),
        quantized=quantized_params(m), bf16_layers=_bf16_layers(m), vp_group=m.get("microbatch_group_size_per_vp_stage") or pp,
        align_grad_reduce=given.flag("dist.align_grad_reduce", state.request.context.get("dist.align_grad_reduce")) is not False,
        fp32_accumulation=given.flag(_FP32_ACCUMULATION, state.request.context.get(_FP32_ACCUMULATION)) is True,
        stages=_layout_stages(state.request.context.get("model.pipeline_model_parallel_layout"), pp),
        mtp_stage=_layout_mtp(state.request.context.get("model.pipeline_model_parallel_layout"), pp),
        embedding_ranks=state.request.release.embedding_ranks,
        first_last=_first_last(state.request),
        per_token_loss=bool(m.get("calculate_per_token_loss")),
        router_qb=_router_qb(state.request),
        gtp_remat=_gtp_remat(state.request),
        mtp_decoder_rebuilt=_decoder_rebuilt(state.request),
        layer_slots=tuple(bool(given.flag(f"model.account_for_{k}_in_pipeline_split",
                                          state.request.context.get(f"model.account_for_{k}_in_pipeline_split")))
                          for k in ("embedding", "loss")),
    )


def placed(lay: Layout, sc) -> Layout:
    """The layout with the NVLink domain its consecutive ranks share, and where that came from: --nvlink-domain as
    given; a perf recipe on nodes of the launcher's GPUs per node: the Slurm segments Bridge's perf launcher asks for
    (releases.yaml perf_launcher_segment), each in one domain; else the GPU type's domain from rank 0 on (assumed)."""
    from dataclasses import replace

    from ..upstream import releases

    machine = sc.machine
    if machine.sources.get("nvlink_domain") == "given":
        return replace(lay, placement=("given", f"--nvlink-domain: consecutive ranks share NVLink domains of {lay.domain} GPUs"))
    rule, per_node = releases.data()["perf_launcher_segment"], machine.gpus_per_node
    if (sc.recipe or {}).get("package") == "perf_recipes" and per_node == rule["gpus_per_node"]:
        nodes, most = -(-sc.gpus // per_node), rule["max_nodes"]
        segment = nodes if nodes <= most else next(s for s in range(most, 0, -1) if nodes % s == 0)
        domain = min(lay.domain, segment * per_node)
        return replace(lay, domain=domain, placement=("perf_launcher", (
            f"Bridge's perf launcher (scripts/performance/setup_experiment.py on Slurm) asks for --segment={segment} for "
            f"{nodes} node{'s' * (nodes != 1)} of {per_node} GPUs (all the nodes up to {most}, else their largest divisor up to "
            f"{most}: utils/executors.py slurm_executor), each segment's nodes in one NVLink domain: consecutive ranks "
            f"share domains of {domain} GPUs (Slurm numbering the tasks node by node); scripts/training/train.sh leaves "
            "segments to the user (--nvlink-domain for another placement)")))
    return replace(lay, placement=("assumed", (
        f"not known: consecutive ranks taken to share NVLink domains of {lay.domain} GPUs from rank 0 on (Bridge's perf "
        f"launcher sizes Slurm segments only for its perf recipes on nodes of {rule['gpus_per_node']} GPUs, "
        f"utils/executors.py slurm_executor, and these nodes have {per_node}; other launchers leave placement to the "
        "user: --nvlink-domain with the GPUs a segment holds)")))


def _router_qb(req) -> bool:
    """Whether the run sets model.moe_router_load_balancing_type to quantile_balancing (a config's or an override's
    text; finalize_model_grads compares the string) on a release whose Megatron-Core has it: its model config has
    moe_router_quantile_balancing_ema (Bridge 0.6.x's Megatron-Core 0.19; 0.5.x's 0.18 has neither)."""
    from ..upstream.releases import bridge_fields

    value = req.context.get("model.moe_router_load_balancing_type")
    if not isinstance(value, str) or value.strip().strip("'\"") != "quantile_balancing":
        return False
    return "moe_router_quantile_balancing_ema" in bridge_fields(req.release.version).get("model", ())


def _gtp_remat(req) -> bool:
    """Whether the release's Megatron-Core has the gtp_remat groups (its model config has gtp_weight_remat_size:
    0.19, Bridge 0.6.x; 0.18's finalize_model_grads has no gtp_remat code, recheck66 AM-9)."""
    from ..upstream.releases import bridge_fields

    return "gtp_weight_remat_size" in bridge_fields(req.release.version).get("model", ())


def _decoder_rebuilt(req) -> bool:
    """Whether the run's provider builds a model that builds its decoder again after the MTP block
    (releases.decoder_rebuilt: TP_OVERLAP_OFF_MTP_DECODER's data)."""
    from ..upstream import releases

    return releases.decoder_rebuilt(req.release.version, req.recipe, req.model_target) is not None


def _first_last(req) -> tuple:
    from ..run.layers import split_fields

    return split_fields(req)[:2]


def first_last_stages(lay: "Layout", num_layers: int) -> tuple:
    """The decoder layers per stage (stage k x PP + rank, as a layout's) where the config sets the first or the last
    pipeline stage's count, as Megatron-Core builds them (transformer_block.py get_num_layers_to_build: those ranks
    their counts, the middle ranks the rest evenly, each rank's over its VPP chunks; get_transformer_layer_offset
    numbers them in that order: recheck64 AK2, an even split was costed); () where neither is set or Megatron-Core
    refuses the split (the resolver and _uneven_split say so)."""
    first, last = lay.first_last
    if lay.pp < 2 or first is None and last is None or any(n is not None and n < 1 for n in (first, last)):
        return ()
    middle = lay.pp - (first is not None) - (last is not None)
    rest = num_layers - (first or 0) - (last or 0)
    if rest < 0 or (rest % middle if middle else rest) or not middle and lay.vp > 1:
        return ()  # (no middle stage with VPP: get_transformer_layer_offset divides by their count, transformer_layer.py)
    per = [rest // middle if middle else 0] * lay.pp
    per[0] = per[0] if first is None else first
    per[-1] = per[-1] if last is None else last
    if any(n % lay.vp for n in per):
        return ()
    return tuple(per[r] // lay.vp for _k in range(lay.vp) for r in range(lay.pp))


def over_counted(lay: "Layout", num_layers: int) -> tuple[tuple, str] | None:
    """(the stages as Megatron-Core builds them, what to say) where the first and last pipeline stages' counts sum past
    num_layers and Megatron-Core still takes the split (fuzzY Y2-5): TransformerConfig checks only that the middle
    stages' count (negative) divides over them, and get_num_layers_to_build (transformer_block.py) gives each middle
    rank that negative count and the first and last ranks their own counts. What a rank builds then depends on the
    provider's transformer_layer_spec (recheck67 AN-2): one layer's ModuleSpec (Bridge's GPTModelProvider
    default_layer_spec, gpt_provider.py: get_gpt_layer_with_transformer_engine_spec) becomes [spec] x that count
    (_get_block_submodules, transformer_block.py): the first and last ranks' whole counts, past num_layers, the
    middle ranks none; Megatron-Core's get_gpt_decoder_block_spec (DeepSeek-V2/V3's and other MoE bridges) slices the
    model's num_layers layer specs at get_transformer_layer_offset (gpt_layer_specs.py), so no rank builds past them.
    Costed: the former (Bridge's default), the latter said; None where the counts do not sum past num_layers or
    Megatron-Core refuses them (first_last_stages and the resolver's rules)."""
    first, last = lay.first_last
    if lay.pp < 2 or first is None and last is None or any(n is not None and n < 1 for n in (first, last)):
        return None
    middle = lay.pp - (first is not None) - (last is not None)
    rest = num_layers - (first or 0) - (last or 0)
    if rest >= 0 or not middle or rest % middle or (lay.vp > 1 and any(n is not None and n % lay.vp for n in (first, last))):
        return None
    vp = max(1, lay.vp)
    stages = tuple(max(0, n) for n in _built(lay, first, last, rest // middle, vp))
    block = _block_built(lay, first, last, rest, middle, vp, num_layers)
    per = ", ".join(str(sum(stages[k * lay.pp + r] for k in range(vp))) for r in range(lay.pp))
    sliced = ", ".join(str(sum(block[k * lay.pp + r] for k in range(vp))) for r in range(lay.pp))
    said = (f"num_layers_in_first/last_pipeline_stage ({first if first is not None else 'unset'}, "
            f"{last if last is not None else 'unset'}) take more than the model's {num_layers} layers over PP {lay.pp}: "
            f"Megatron-Core's TransformerConfig takes it, and get_num_layers_to_build gives "
            f"{f'each of the {middle} middle pipeline ranks' if middle > 1 else 'the middle pipeline rank'} "
            f"{rest // middle} layers (none built) and the first and last ranks their own counts: with one layer's spec "
            f"(Bridge's GPTModelProvider default: [spec] x that count) the ranks build {per} decoder layers, "
            f"{sum(stages)} in all where the model has {num_layers}"
            f"{' (get_transformer_layer_offset numbers the last rank' + chr(39) + 's again)' if first and last else ''}: "
            "the budget costs those; a provider whose transformer_layer_spec is Megatron-Core's "
            f"get_gpt_decoder_block_spec slices the model's {num_layers} layer specs at each rank's offset instead: "
            f"{sliced}, not an even split either way")
    return stages, said


def _built(lay: "Layout", first, last, middle_count: int, vp: int) -> list:
    """get_num_layers_to_build of each stage (stage k x PP + rank) where the first or last count is set."""
    per = [middle_count] * lay.pp
    if first is not None:
        per[0] = first
    if last is not None:
        per[-1] = last
    return [per[r] // vp for _k in range(vp) for r in range(lay.pp)]


def _block_built(lay: "Layout", first, last, rest: int, middle: int, vp: int, num_layers: int) -> list:
    """The layer specs get_gpt_decoder_block_spec keeps on each stage: layer_specs[offset : offset + n] of num_layers
    (get_transformer_layer_offset's first/last branch, Python's slice of a list)."""
    f, l_ = (first or 0), (last or 0)
    built = _built(lay, first, last, rest // middle, vp)
    out = []
    for k in range(vp):
        for r in range(lay.pp):
            mid_rank = r if first is None else r - 1
            if vp > 1:
                total = f // vp + rest // vp + l_ // vp
                offset = k * total + (0 if r == 0 else f // vp + mid_rank * (rest // vp // middle))
            else:
                offset = 0 if r == 0 else mid_rank * (rest // middle) + f
            n = built[k * lay.pp + r]
            out.append(len(range(num_layers)[offset:offset + n]))
    return out


def _layout_stages(layout, pp: int) -> tuple:
    """A layout's decoder layers per stage where its stages split over PP (evalZ Z3-2: DeepSeek-V3's recipes set one)."""
    from ..run.layers import stage_decoders

    stages = stage_decoders(layout) if layout is not None else None
    return stages if stages and len(stages) % max(1, pp) == 0 else ()


def _layout_mtp(layout, pp: int) -> int | None:
    """The layout's stage holding its MTP layers (Megatron-Core builds them all in one: get_mtp_num_layers_to_build),
    where the budget reads the layout (_layout_stages); None: none there (the last stage's without a layout)."""
    from ..run.layers import layout_names

    if layout is None or not _layout_stages(layout, pp):
        return None
    stages = layout_names(layout) or []
    return next((k for k, stage in enumerate(stages) if "mtp" in stage), None)


def rank_layers(lay: "Layout", rank: int) -> int:
    """The decoder layers pipeline rank `rank` holds under the config's layout (its virtual stages' together)."""
    return sum(lay.stages[rank::lay.pp])


def chunk_layers(lay: "Layout", rank: int) -> tuple:
    """The decoder layers of each of pipeline rank `rank`'s model chunks under the config's layout, chunk 0 first
    (PipelineParallelLayerLayout.get_num_layers_to_build(vp_stage=k, pp_rank=rank): stage k x PP + rank); () without
    a layout. A chunk can hold none (DeepSeek-V3's Et|(tt|)*30mL: rank 0's chunk 0 the embedding and one layer)."""
    if not lay.stages:
        return ()
    return tuple(lay.stages[k * lay.pp + rank] for k in range(len(lay.stages) // lay.pp))


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
    (full), and of the attention core, the MLP (selective: mlp for a dense layer, moe for an MoE layer) and a MoE
    layer's shared expert (moe or shared_experts):
    Megatron-Core's checkpointed_forward (recompute.py), the layer's recompute_mlp and MoE checkpoint, the
    attention's checkpoint_core_attention."""
    none = {"layer": 0.0, "core_attn": 0.0, "mlp": 0.0, "shared": 0.0, "mla_up": 0.0}
    if not lay.recompute:
        return none
    granularity, method, num_layers, modules = lay.recompute
    if granularity == "full":
        chunk = max(1, -(-layers // lay.vp))  # a virtual stage's layers: each is a TransformerBlock of its own
        share = 1.0 if method == "uniform" else min(num_layers or 0, chunk) / chunk
        return {**none, "layer": share}
    # a MoE layer's shared expert: inside the moe checkpoint (MoELayer.forward's custom_forward), or its own
    # (shared_experts: MoELayer.shared_experts_compute); MLA's up projections and rope (mla_up_proj:
    # MLASelfAttention's qkv_up_checkpoint, multi_latent_attention.py; recheck59 AF4)
    return {**none, "core_attn": float("core_attn" in modules), "mlp": float(("moe" if moe else "mlp") in modules),
            "shared": float(moe and ("moe" in modules or "shared_experts" in modules)),
            "mla_up": float("mla_up_proj" in modules)}


def stage_numbers(lay: Layout, num_layers: int, rank: int) -> list[int]:
    """The global numbers of pipeline rank `rank`'s layers, its model chunks in order (get_transformer_layer_offset:
    virtual stage k of rank r starts (k x PP + r) layer slots in, the embedding and the loss each a slot where
    account_for_*_in_pipeline_split counts them); a split Megatron-Core refuses is taken as ceil(layers / PP) each."""
    if lay.stages:  # the config's layout: its stages' decoders numbered in order, rank r's stages r, r + PP, ...
        first = _stage_starts(tuple(lay.stages))
        return [first[k] + i for k in range(rank, len(lay.stages), lay.pp) for i in range(lay.stages[k])]
    slots = lay.layer_slots if lay.pp > 1 else (False, False)
    total, chunks = num_layers + sum(slots), lay.pp * max(1, lay.vp)
    if total % chunks:
        per = -(-num_layers // lay.pp)
        return list(range(rank * per, min(num_layers, (rank + 1) * per)))
    per = total // chunks
    return [s - slots[0] for k in range(max(1, lay.vp)) for s in range((k * lay.pp + rank) * per, (k * lay.pp + rank + 1) * per)
            if 0 <= s - slots[0] < num_layers]


def chunk_numbers(lay: Layout, num_layers: int, rank: int) -> list[list[int]]:
    """stage_numbers(...) by model chunk, chunk 0 first (a layout's stages k x PP + rank, else the even split's
    virtual stages); a split Megatron-Core refuses is one chunk."""
    nums = stage_numbers(lay, num_layers, rank)
    if lay.stages:
        sizes = chunk_layers(lay, rank)
    else:
        total, chunks = num_layers + sum(lay.layer_slots if lay.pp > 1 else (False, False)), lay.pp * max(1, lay.vp)
        if total % chunks:
            return [nums]
        per, first = total // chunks, lay.layer_slots[0] if lay.pp > 1 else False
        sizes = [sum(1 for s in range((k * lay.pp + rank) * per, (k * lay.pp + rank + 1) * per) if 0 <= s - first < num_layers)
                 for k in range(max(1, lay.vp))]
    out, at = [], 0
    for n in sizes:
        out.append(nums[at:at + n])
        at += n
    return out


@functools.lru_cache(maxsize=4)
def _stage_starts(stages: tuple) -> tuple:
    """The global number of each stage's first decoder layer: the layers of the stages before it (prefix sums, once per
    layout: a budget numbers its ranks' layers some fifty times; fuzzX X2-2, sum() of each prefix was quadratic)."""
    return (0, *itertools.accumulate(stages))[:len(stages)]


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


def link_of(lay: Layout, stride: int, size: int) -> str:
    """nvlink when every group of the dimension lies inside one NVLink domain, else the network (the slowest group
    sets the collective's time)."""
    return "network" if spans_domains(lay, stride, size) else "nvlink"

