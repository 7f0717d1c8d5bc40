"""One iteration on one GPU: the collectives of each parallel dimension (message sizes exact, from the effective
config and the model's shape), their time at the system's bus bandwidth, the compute each can hide behind, and what
stays exposed with each overlap setting as Bridge leaves it and with it flipped. Times are estimates: RANGE gives the
spread the sources allow; the assumptions are listed with the result."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from . import dp, embgrad, finalize, kinds as layer_kinds, mla, mtp as mtps, pipeline, routing, shape as shapes, tp
from .collective import ACT_BYTES, Item, across, ms
from .layout import (Layout, chunk_numbers, fewest_local, first_last_stages, link_of, over_counted, rank_layers, spans_domains,
                     stage_numbers)
from .system import System
from .. import safeio
from ..errors import UsageError


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
    "DP, on the pipeline rank the budget costs (rank 0 unless a layout's busiest rank or the MTP layers' rank is "
    "another: that rank's own buffers, its shared embedding copy a bucket of its own; it reduces beside the "
    "cooldown of the stages before it and gathers beside their warm-up, one stage's micro-batch each, and the step "
    "ends with the later of what it leaves exposed and what rank 0 does) (Megatron-Core buckets only on the first "
    "stage, and with VPP only model chunk 0: each other "
    "chunk is a DDP of its own with one bucket, as Megatron's DDP wrapper sets disable_bucketing): without VPP the grad "
    "reduce-scatter runs in the last micro-batch's backward and the param all-gather in the first one's forward, the "
    "bucket that holds the embedding exposed; with VPP (Bridge's grad_sync_func and param_sync_func, "
    "align_grad_reduce and align_param_gather) a chunk's whole reduce-scatter starts after its last micro-batch's "
    "backward and hides behind the other chunks' backward still to run, chunk 0's exposed, and chunk k+1's all-gather "
    "starts with chunk k's first forward (chunks 0 and 1 at the step's start: chunk 0's exposed, unless "
    "overlap_param_gather_with_optimizer_step starts it in the optimizer step, which is not counted), each on one "
    "stream in turn; a config's pipeline layout gives each chunk its own layers (a chunk without experts has no expert "
    "buffer, and is bucketed by its index all the same), else with account_for_embedding_in_pipeline_split the first "
    "chunk holds one layer fewer; with FP8, "
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
    "the attention core; mlp: a dense layer's MLP; moe and shared_experts: a MoE layer's; mla_up_proj: MLA's up "
    "projections, their sequence-parallel input all-gathers again); layernorm and activation recompute are not counted")


MOE_ASSUMPTION = ("MoE: the MoE layers moe_layer_freq makes (get_gpt_decoder_layer_specs), a shared expert in each where "
                  "moe_shared_expert_intermediate_size is set (every token through a dense MLP split across TP, its TP "
                  "collectives as a dense MLP's, moe_shared_expert_overlap not read); each token's top-k experts' "
                  "GEMMs at the dense rate; the router, token "
                  "permutation and small grouped GEMMs are not counted, so where the all-to-all stays inside an NVLink domain the "
                  "iteration time is a lower bound: on Bridge's "
                  "published Qwen3 MoE rows the predicted throughput is 2x the published or more where the all-to-all stays "
                  "inside the NVLink domain (docs/budget.md); TP: a MoE layer's routed experts run none of TP's collectives (their grouped "
                  "GEMMs take no userbuffers, and the alltoall dispatcher sends each TP rank's own tokens), the "
                  "expert-TP group's gathers (expert_tensor_parallel_size > 1) not counted; DP: the dense "
                  "and the experts' buffers (two communicators, which can run side by side) priced one after the other, an "
                  "upper bound on their exposed time")


@dataclass
class Budget:
    layout: Layout
    shape_from: str
    system: System
    compute_s: float
    bubble_s: float
    items: list = field(default_factory=list)
    flipped: dict = field(default_factory=dict)  # setting -> (exposed, overlap cost, bubble) seconds change flipped
    flips: dict = field(default_factory=dict)  # setting -> whether the config can make that flip (flips.check)
    findings: list = field(default_factory=list)  # worth.check(): what the budget says about worth (Finding)
    assumptions: tuple = ASSUMPTIONS
    overlap_cost: dict = field(default_factory=dict)  # setting -> seconds it adds to compute (GEMMs on fewer SMs)
    costed_rank: int = 0
    pipeline: "pipeline.Bubble | None" = None  # each rank's wait under the schedule (PP > 1)
    straddling: dict = field(default_factory=dict)  # an assumed placement's EP groups across domains: what it decides

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
            "iteration_ms": ms(self.iteration_s), "range_ms": [ms(self.iteration_s - self.exposed_s * (1 - RANGE[0])),
                                                                ms(self.iteration_s + self.exposed_s * (RANGE[1] - 1))],
            "compute_ms": ms(self.compute_s), "bubble_ms": ms(self.bubble_s), "exposed_ms": ms(self.exposed_s),
            "overlap_cost_ms": ms(sum(self.overlap_cost.values())),
            "tokens_per_sec_per_gpu": round(self.tokens_per_gpu(gpus), 1),
            "dimensions": self.dimensions(),
            "settings": {k: {"effective": v, "overlap_cost_ms": ms(self.overlap_cost.get(k, 0.0)),
                             "exposed_change_ms_if_flipped": ms(self.flipped[k][0]),
                             "overlap_cost_change_ms_if_flipped": ms(self.flipped[k][1]),
                             "bubble_change_ms_if_flipped": ms(self.flipped[k][2]),
                             "iteration_change_ms_if_flipped": ms(sum(self.flipped[k])),
                             **({"flip": self.flips[k]} if k in self.flips else {})}
                         for k, v in lay.settings.items() if k in self.flipped},
            "collectives": [i.to_dict() for i in self.items],
            "layout": {"tp": lay.tp, "pp": lay.pp, "vp": lay.vp, "cp": lay.cp, "ep": lay.ep, "dp": lay.dp,
                       "sequence_parallel": lay.sp, "seq_length": lay.seq, "micro_batch_size": lay.mbs,
                       "global_batch_size": lay.gbs, "micro_batches": lay.micro_batches, "precision": lay.precision,
                       "nvlink_domain": lay.domain,
                       "placement": {"from": lay.placement[0], "said": lay.placement[1], **self.straddling},
                       "peft": {"scheme": lay.peft.scheme, "target_modules": list(lay.peft.target_modules),
                                "dim": lay.peft.dim} if lay.peft else None,
                       "recompute": dict(zip(("granularity", "method", "num_layers", "modules"),
                                             (*lay.recompute[:3], list(lay.recompute[3])))) if lay.recompute else None},
            "shape_from": self.shape_from, "system": self.system.name, "sources": self.system.sources(),
            "assumptions": list(self.assumptions), "range": list(RANGE),
            "findings": [f.to_dict() for f in self.findings],
            **({"pipeline": self.pipeline.to_dict(self.costed_rank)} if self.pipeline is not None else {}),
        }


def _bubble_said(lay: Layout, costed: "Costed", b: Budget) -> tuple:
    """The bubble's assumption (pipeline.ASSUMPTION), and what it is here where the stages are uneven."""
    if lay.pp < 2 or b.pipeline is None:
        return ()
    return (pipeline.ASSUMPTION + b.pipeline.said(costed.rank, lay.vp, lay.pp, lay.micro_batches),)


def _stage_times(lay: Layout, shape, n_mtp: int, built: list) -> tuple:
    """Each pipeline rank's micro-batch forward and backward, and the same with its exposed communication of one
    micro-batch (pipeline.per_microbatch) spread over them: a layout's from the candidate that holds alike (_alike),
    else every rank the one candidate's."""
    def both(b: Budget, c: "Costed") -> tuple:
        comm = pipeline.per_microbatch(b.items, b.overlap_cost, lay.micro_batches)
        if c.fwd + c.bwd <= 0:  # a stage that builds no layer (first/last counts past num_layers): its traffic, split
            return (0.0, 0.0), (comm / 2, comm / 2)
        grow = 1 + comm / (c.fwd + c.bwd)
        return (c.fwd, c.bwd), (c.fwd * grow, c.bwd * grow)
    if not lay.stages:
        return tuple(zip(*[both(*built[0])] * lay.pp))
    by = {_alike(lay, shape, n_mtp, c.rank): both(b, c) for b, c in built}
    return tuple(zip(*[by[_alike(lay, shape, n_mtp, r)] for r in range(lay.pp)]))


def _uneven_split(layers: int, lay: Layout) -> tuple:
    """The assumption where the layers split unevenly over PP x VPP: Megatron-Core's TransformerBlock asserts an even
    split (transformer_block.py: layers over PP, each stage's over VPP) unless the config counts the embedding and
    the loss as layers (account_for_*_in_pipeline_split) or sets uneven first and last stages, which the budget does
    not read; no such count makes this split even, so say so."""
    if lay.stages:  # (_rank_said says where the layout puts the layers, and which rank is costed)
        return ()
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
    uniform routing (routing.py: ep x (1 - C(E - E/ep, k) / C(E, k)), or with group-limited routing the ranks of the
    chosen groups its top-k reach)."""
    k, experts = shape.moe_router_topk, shape.num_moe_experts
    if lay.dispatcher != "flex" or lay.ep < 2 or experts % lay.ep:
        return k
    groups = None if routing.unmodelled(shape) else routing.grouping(shape)
    return routing.ranks_per_token(experts, k, lay.ep, *(groups or ()))


def ep_split(lay: Layout, shape, local: int) -> dict:
    """Where the EP dispatch's copies of a token go from the sender whose NVLink domain holds `local` of its EP group's
    ranks: kept, over NVLink, across the network (routing.split, with the groups where the budget follows them)."""
    flex = lay.dispatcher == "flex" and shape.num_moe_experts % lay.ep == 0
    groups = None if routing.unmodelled(shape) else routing.grouping(shape)
    return routing.split(shape.num_moe_experts, shape.moe_router_topk, lay.ep, local, flex, *(groups or ()))


DEEPEP_NVL_PEERS = 8  # DeepEP's legacy internode kernels: an RDMA rank is 8 NVLink peers (compiled.cuh LEGACY_NUM_MAX_NVL_PEERS)


def deepep_forwards(lay: Layout, shape, local: int | None) -> bool:
    """Whether the EP dispatch is DeepEP's normal internode one: the flex dispatcher with backend deepep (Megatron-Core
    0.19.2 fused_a2a.py:67 deep_ep.Buffer(group, num_nvl_bytes, num_rdma_bytes), normal mode; buffer.dispatch :115)
    over an EP group that crosses the network with DeepEP's 8 NVLink peers of an RDMA rank in each domain. Its RDMA
    sender sends a token once to each destination RDMA rank whose 8 NVL peers hold one of its experts (DeepEP
    csrc/kernels/legacy/internode.cu (dd758ca) :634-638, is_token_in_rank of the 8 peers read as one uint64_t) and
    the kRDMAAndNVLForwarder warps (:487, :849-978) forward it over NVLink to the peers that need it: the network
    carries one copy per other domain reached, NVLink the forwarded ones. Other placements, and hybridep, stay priced
    as one copy per rank."""
    return (bool(local) and lay.dispatcher == "flex" and lay.flex_backend == "deepep" and shape.moe
            and local == DEEPEP_NVL_PEERS and lay.ep > local and lay.ep % local == 0
            and shape.num_moe_experts % lay.ep == 0)


def ep_parts(lay: Layout, shape, local: int) -> tuple:
    """The shares of the EP dispatch's buffer (its copies per token) sent over NVLink and across the network from the
    sender that sends the most across it: one copy per rank reached, or DeepEP's once per domain (deepep_forwards)."""
    sp = ep_split(lay, shape, local)
    if deepep_forwards(lay, shape, local):
        return (sp["copies"] - sp["landing"]) / sp["copies"], sp["remote_domains"] / sp["copies"]
    return sp["nvlink"] / sp["copies"], sp["network"] / sp["copies"]


def _deepep_path(lay: Layout, shape) -> tuple:
    """The assumption that prices the EP dispatch as DeepEP's internode kernels run it, with its copies per link."""
    if not shape.moe or lay.ep < 2 or not spans_domains(lay, lay.etp, lay.ep):
        return ()
    local = fewest_local(lay, lay.etp, lay.ep)
    if lay.dispatcher != "flex" or lay.flex_backend != "deepep":
        return ()
    if not deepep_forwards(lay, shape, local):
        return (f"EP: the flex dispatcher's deepep backend with {local} of the {lay.ep} EP ranks in an NVLink domain "
                f"(DeepEP's internode kernels group {DEEPEP_NVL_PEERS} NVLink peers to an RDMA rank): priced as one copy "
                "per rank reached across the network, not DeepEP's once-per-domain path",)
    sp = ep_split(lay, shape, local)
    return (f"EP: the flex dispatcher's deepep backend runs DeepEP's normal internode kernels (Megatron-Core fused_a2a.py "
            "deep_ep.Buffer, normal mode): the RDMA sender sends a token once to each other node (RDMA rank) whose "
            f"{DEEPEP_NVL_PEERS} NVLink peers hold one of its experts and the node's forwarder warps pass it on over "
            "NVLink (DeepEP csrc/kernels/legacy/internode.cu: is_token_in_rank of the peers read as one uint64_t, "
            f"kRDMAAndNVLForwarder); of a token's {sp['copies']:.2f} copies {sp['remote_domains']:.2f} cross the network "
            f"(one per other domain reached, of {sp['domains'] - 1}) and {sp['copies'] - sp['landing']:.2f} are forwarded "
            "over NVLink, each part priced on its link; the combine returns the same way",)


def _grouped_routing(lay: Layout, shape) -> tuple:
    """What group-limited routing does to the EP all-to-all: which ranks a token can reach (and, where the groups
    are whole NVLink domains, which domains), or why the budget does not follow it."""
    if not shape.moe or lay.ep < 2 or routing.grouping(shape) is None:
        return ()
    why = routing.unmodelled(shape)
    if why:
        return (f"EP: group-limited routing not modelled: {why}; a token's ranks are priced as if it routed over all "
                f"{shape.num_moe_experts} experts",)
    groups, pick = routing.grouping(shape)
    per_group, per_rank = shape.num_moe_experts // groups, shape.num_moe_experts // lay.ep
    where = (f"a group is {per_group // per_rank} EP rank{'s' * (per_group != per_rank)}, so a token reaches at most "
             f"{pick * per_group // per_rank} of the {lay.ep}" if per_group % per_rank == 0 else
             f"an EP rank holds {per_rank // per_group} group{'s' * (per_rank != per_group)}" if per_rank % per_group == 0 else
             "groups and EP ranks do not align")
    said = (f"EP: group-limited routing (moe_router_num_groups {groups}, moe_router_group_topk {pick}: Megatron-Core's "
            f"group_limited_topk picks each token's top-{shape.moe_router_topk} inside its {pick} best of {groups} "
            f"groups of {per_group} experts): {where}")
    if lay.dispatcher == "flex" and shape.num_moe_experts % lay.ep == 0:
        plain = routing.ranks_per_token(shape.num_moe_experts, shape.moe_router_topk, lay.ep)
        said += (f"; the flex dispatcher's copies per token {copies_per_token(lay, shape):.2f} (a fixed-seed sample of "
                 f"the router's rule on uniform scores), {plain:.2f} without the groups")
    if spans_domains(lay, lay.etp, lay.ep):
        local = fewest_local(lay, lay.etp, lay.ep)
        sp, free = ep_split(lay, shape, local), routing.split(shape.num_moe_experts, shape.moe_router_topk, lay.ep, local,
                                                              lay.dispatcher == "flex" and shape.num_moe_experts % lay.ep == 0)
        said += (f"; of a token's {sp['copies']:.2f} copies the sender with {local} of the {lay.ep} EP ranks in its NVLink "
                 f"domain keeps {sp['own']:.2f}, sends {sp['nvlink']:.2f} over NVLink and {sp['network']:.2f} across the "
                 f"network ({sp['network'] / sp['copies']:.1%}; without the groups {free['network']:.2f} of "
                 f"{free['copies']:.2f}, {free['network'] / free['copies']:.1%}), each part priced on its link: under "
                 "uniform routing every expert is as likely chosen with the groups as without, so the groups cut the "
                 "copies, not the share that crosses the network")
        if "remote_domains" in sp:
            said += (f"; they bound the other NVLink domains a token reaches: {sp['remote_domains']:.2f} of "
                     f"{sp['domains'] - 1} ({free['remote_domains']:.2f} without the groups), which a dispatcher that "
                     "crosses the network once per domain and forwards inside it over NVLink sends" +
                     ("" if deepep_forwards(lay, shape, local) else
                      "; the budget prices one copy per rank (or expert) across the network"))
    return (said,)


def _not_modelled(lay: Layout, shape) -> tuple:
    """What the budget leaves out or prices as another path does: the QKV all-gather of fewer KV groups than TP; the
    flex dispatcher at the all-to-all's bandwidth (with its copies per token); the allgather token dispatcher (its
    all-gather and reduce-scatter over the expert-TP x EP group, token_dispatcher.py MoEAllGatherTokenDispatcher) as
    the alltoall one's all-to-all; Megatron-FSDP (its reduce-scatter every micro-batch, its all-gathers per unit in
    forward and backward) as the distributed optimizer's once-an-iteration collectives."""
    out = ()
    if shape.groups < lay.tp and not shape.multi_latent_attention:
        out += (f"TP: with fewer KV groups ({shape.groups}) than TP ({lay.tp}) Megatron-Core all-gathers each layer's fused "
                "QKV output over TP to pick its heads (attention.py); that all-gather is not counted",)
    if shape.moe and lay.ep > 1 and lay.dispatcher == "flex":
        out += (f"EP: the flex dispatcher (DeepEP, HybridEP) sends a token once to each EP rank that holds one of its "
                f"experts: {copies_per_token(lay, shape):.2f} ranks of its top-{shape.moe_router_topk} under uniform routing "
                "(a skewed router sends more or fewer); priced at the all-to-all's bus bandwidth, not DeepEP's own kernels'",)
    out += _grouped_routing(lay, shape)
    out += _deepep_path(lay, shape)
    if shape.moe and lay.ep > 1 and spans_domains(lay, lay.etp, lay.ep):
        local = fewest_local(lay, lay.etp, lay.ep)
        if local < min(lay.domain, lay.ep):
            out += (f"EP: with ranks placed in Megatron-Core's order, an EP group of {lay.ep} has as few as {local} rank{'s' * (local != 1)} in one "
                    f"NVLink domain of {lay.domain} GPUs: that rank's all-to-all sends {lay.ep - local} of {lay.ep} parts over the "
                    "network, which sets the time (and the iteration time is no lower bound then); the layout's placement "
                    "says where that domain comes from",)
    if shape.moe and lay.ep > 1 and lay.dispatcher == "allgather":
        out += ("EP: the allgather token dispatcher (all-gather and reduce-scatter over the expert-TP x EP group) is "
                "priced as the alltoall dispatcher's all-to-all, which it is not: its EP times are the alltoall's",)
    if lay.fsdp and dp.unsharded(lay):
        out += ("DP: Megatron-FSDP with no_shard all-reduces whole gradients on the last micro-batch and gathers no "
                "parameters: priced as DDP's all-reduce (its bucketing is Megatron-FSDP's own, not DDP's)",)
    elif lay.fsdp:
        out += ("DP: Megatron-FSDP reduce-scatters every micro-batch and all-gathers per unit in forward and backward; "
                "the budget prices the distributed optimizer's once-an-iteration reduce-scatter and all-gather: its DP "
                "times are those, not FSDP's",)
    if dp.fp32_accumulation(lay):
        out += (FP32_ACCUMULATION,)
    return out


FP32_ACCUMULATION = (
    "DP: ddp.reduce_scatter_with_fp32_accumulation (Megatron-Core 0.19.2): with the distributed optimizer each bucket "
    "is reduced by an all-to-all of the whole bucket in the gradient buffer's precision (priced as an all-to-all: "
    "across the network it cannot aggregate NICs) and the rank's shard summed in FP32 on the compute stream, which is "
    "not priced (param_and_grad_buffer.py:248-254, reduce_scatter_with_fp32_accumulation.py); every bucket is a group "
    "of its own, FP8 parameters' other buckets too (partition_buckets); with overlap_grad_reduce each group waits "
    "before its dispatch for the one before it in the same buffer and model chunk (distributed_data_parallel.py:317-332, "
    "param_and_grad_buffer.py:608-622), holding the compute: without VPP the groups are dispatched through the last "
    "micro-batch's backward by their share of the reduction time, the larger of that and the queue's exposed time "
    "counted; with VPP a chunk's groups, dispatched together, hold the compute until all but the last have ended")


# -- the estimate ------------------------------------------------------------------------------------------------------


def estimate(lay: Layout, shape: shapes.Shape, system: System, shape_from: str = "") -> Budget:
    dropped = ()
    over = over_counted(lay, shape.num_layers) if not lay.stages else None
    if over is not None:  # (fuzzY Y2-5: first and last stages summing past num_layers, which Megatron-Core takes)
        most = max(rank_layers(Layout(**{**lay.__dict__, "stages": over[0]}), r) for r in range(lay.pp))
        if most > shapes.BOUNDS["num_layers"]:  # (recheck67 AN-2: built as counted, not capped at num_layers)
            raise UsageError(f"num_layers_in_first/last_pipeline_stage: a pipeline rank builds {most:,} decoder layers "
                             f"(Megatron-Core's get_num_layers_to_build, one layer's spec), past the "
                             f"{shapes.BOUNDS['num_layers']:,} layers a budget costs")
        lay = Layout(**{**lay.__dict__, "stages": over[0]})
        dropped = (over[1],)
    elif not lay.stages and first_last_stages(lay, shape.num_layers):  # costed as a layout's stages
        lay = Layout(**{**lay.__dict__, "stages": first_last_stages(lay, shape.num_layers)})
    if over is None and lay.stages and sum(lay.stages) != shape.num_layers:  # a layout of another layer count: not this model's split
        dropped = (f"the config's pipeline_model_parallel_layout places {sum(lay.stages)} decoder layers where the model "
                   f"has {shape.num_layers} (Megatron-Core refuses it: validate_layer_layout): not read, an even split "
                   "costed",)
        lay = Layout(**{**lay.__dict__, "stages": (), "mtp_stage": None})
    budget = _estimate(lay, shape, system, shape_from)
    budget.assumptions += dropped
    for setting, on in lay.settings.items():
        other = Layout(**{**lay.__dict__, "settings": {**lay.settings, setting: not on}})
        flip = _estimate(other, shape, system, shape_from)
        delta = (flip.exposed_s - budget.exposed_s,
                 sum(flip.overlap_cost.values()) - sum(budget.overlap_cost.values()),
                 flip.bubble_s - budget.bubble_s)  # (the fill and drain carry the stages' exposed communication)
        if any(delta) or on:
            budget.flipped[setting] = delta
    return budget


# Experts x layers on one stage the budget lists parameter by parameter into buckets (Kimi K2 with EP 1 and PP 1 is
# 23,424; fuzzI I1: 4,096 experts in 4,096 layers grew past 19 GB)
MAX_EXPERT_LAYERS = 1 << 15


def _estimate(lay: Layout, shape: shapes.Shape, system: System, shape_from: str) -> Budget:
    tokens = lay.seq * lay.mbs  # one micro-batch of one DP rank
    # the largest stage: the config's layout's, or an even split's
    layers = max(rank_layers(lay, r) for r in range(lay.pp)) if lay.stages else -(-shape.num_layers // lay.pp)
    n_mtp = shape.mtp_num_layers or 0
    if shape.moe and shape.num_moe_experts // lay.ep * layers > MAX_EXPERT_LAYERS:
        raise UsageError(f"{shape.num_moe_experts // lay.ep:,} experts on each of a stage's {layers:,} layers: past the "
                         f"{MAX_EXPERT_LAYERS:,} expert-layers a budget costs one by one (expert parallelism or more "
                         "pipeline stages put fewer on a GPU)")
    rate = system.gemm_tflops(lay.precision) * 1e12 * system.efficiency
    attn_rate = system.gemm_tflops("bf16") * 1e12 * system.efficiency
    # LoRA's adapters run in BF16 (Megatron-Core's own parallel linears, not Transformer Engine's)
    adapter_s = shapes.adapter_flops(shape, lay.peft.gemms, lay.peft.dim, tokens, lay.tp, lay.cp) / attn_rate if lay.peft else 0.0

    def kinds_of(n: int) -> dict:  # (a stage of n layers: what recompute's block method runs again depends on it)
        return {moe: layer_kinds.kind(lay, shape, tokens, rate, attn_rate, adapter_s, n, moe) for moe in {False, shape.moe}}

    mtp_k, mtp_extra = mtps.moe(shape), mtps.flops(shape, tokens, lay.tp, lay.cp)
    logits_fwd = shapes.logits_flops(shape, tokens, lay.tp, lay.cp) / rate  # the output layer's forward, whole vocabulary
    candidates = _candidates(lay, shape, layers, n_mtp, kinds_of, mtp_k, mtp_extra, rate, logits_fwd, adapter_s)
    built = [(_at(lay, shape, system, shape_from, c, n_mtp, mtp_k, mtp_extra, rate, tokens), c) for c in candidates]
    if lay.pp > 1:  # (each rank's wait under the schedule: its bubble)
        paced = pipeline.bubble(*_stage_times(lay, shape, n_mtp, built), lay.micro_batches, lay.vp, lay.vp_group,
                                int(lay.vp > 1 and bool(lay.settings.get("overlap_moe_expert_parallel_comm"))))
        for bb, c in built:
            bb.bubble_s, bb.pipeline = paced.waits[c.rank], paced
    b, costed = max(built, key=lambda bc: _slowest(bc, built))
    if lay.stages:
        b.assumptions += (_rank_said(lay, costed, b, built, lambda r: _twins(lay, shape, n_mtp, r)),)
    b.assumptions += _bubble_said(lay, costed, b)
    b.assumptions += network_rates(b.items, system)
    return b


TIE = 1e-9  # iterations this close (relative) are equal: the ranks' sums of the same times differ in the last bits


def _tied(b: Budget, built: list) -> bool:
    """Whether a candidate's iteration is the longest of the candidates' (within TIE)."""
    return b.iteration_s >= max(bb.iteration_s for bb, _ in built) * (1 - TIE)


def _slowest(bc: tuple, built: list) -> tuple:
    """The order in which _estimate picks the rank it costs: the longest iteration under the schedule (every rank's
    step ends with the optimizer's gradient-norm all-reduce over all of them: the step is the slowest rank's), of
    equal ones (TIE) the slowest stage (its micro-batch with its exposed communication), then the first."""
    b, c = bc
    stage = b.pipeline.stages[c.rank] if b.pipeline is not None else 0.0
    return (_tied(b, built), b.iteration_s if not _tied(b, built) else 0.0, stage, -c.rank)


def _at(lay: Layout, shape: shapes.Shape, system: System, shape_from: str, costed: "Costed", n_mtp: int, mtp_k: bool,
        mtp_extra: dict, rate: float, tokens: int) -> Budget:
    """The budget of one iteration costed at pipeline rank costed.rank (what it holds: Costed)."""
    rank, layers, counts, kinds, with_mtp = costed.rank, costed.layers, costed.counts, costed.kinds, costed.with_mtp
    n_mtp = n_mtp if with_mtp else 0
    attn_s = kinds[False]["attn_s"]
    stage_fwd, stage_bwd = costed.fwd, costed.bwd
    mb_s = stage_fwd + stage_bwd
    m = lay.micro_batches
    b = Budget(lay, shape_from, system, compute_s=m * mb_s, bubble_s=0.0, costed_rank=rank,  # (bubble: _estimate)
               assumptions=ASSUMPTIONS + ((MOE_ASSUMPTION,) if shape.moe else ()) + ((PEFT_ASSUMPTION,) if lay.peft else ())
               + ((RECOMPUTE_ASSUMPTION,) if lay.recompute else ()) + ((mla.ASSUMPTION,) if shape.multi_latent_attention else ())
               + _mtp_said(lay, shape, with_mtp) + embgrad.said(lay, shape) + finalize.said(lay, shape)
               + _uneven_split(shape.num_layers, lay)
               + _cp_exchange(lay) + _not_modelled(lay, shape) + layer_kinds.said(shape, counts))
    off = Layout(**{**lay.__dict__, "settings": {**lay.settings, "tp_comm_overlap": False}})
    lost = rebuilt_without_userbuffers(lay, shape, costed)
    kept = {k: n - lost.get(k, 0) for k, n in counts.items()}
    b.items += tp.collectives(lay, shape, system, [(n, *kinds[k]["tp"]) for k, n in kept.items()], m, tokens)
    if lost:  # (TP_OVERLAP_OFF_MTP_DECODER: built again after eh_proj turned tp_comm_overlap off, no setting hides them)
        b.items += [replace(i, what=REBUILT_WHAT + i.what, setting=None)
                    for i in tp.collectives(off, shape, system, [(n, *kinds[k]["tp"]) for k, n in lost.items()], m, tokens)]
        b.assumptions += (_rebuilt_said(lay, lost, counts),)
    if n_mtp:  # (its layer built after eh_proj turned tp_comm_overlap off: no userbuffers)
        b.items += mtps.tp_collectives(lay, shape, system, link_of(lay, 1, lay.tp), n_mtp, m, tokens,
                                       mtp_extra["eh_proj"] / rate, tp.collectives(off, shape, system, [(n_mtp, *kinds[mtp_k]["tp"])], m, tokens))
    if tp.userbuffers_run(lay, shape):
        b.overlap_cost["tp_comm_overlap"] = sum(n * m * tp.sm_margin_s(lay, kinds[k]["tp"][2], system, kinds[k]["tp"][0])
                                                for k, n in kept.items())
    again = kinds[False]["again"]  # (the attention's recompute: the same in either kind of layer)
    b.items += _cp(lay, shape, system, layers + n_mtp, m, tokens, attn_s, again)
    b.items += _pp(lay, shape, system, m, tokens, stage_fwd)
    b.items += embgrad.collectives(lay, shape, system)
    b.items += finalize.collectives(lay, shape, system, layers, rank=rank, mtp=n_mtp)
    b.items += dp.collectives(lay, shape, system, layers, stage_fwd, stage_bwd, rank=rank, mtp=n_mtp)
    if counts.get(True) or n_mtp and mtp_k:
        b.items += _ep(lay, shape, system, counts.get(True, 0) + n_mtp * mtp_k, m, tokens, kinds[True]["fwd"], kinds[True]["again"])
        b.items += _router_qb_gather(lay, shape, system, counts.get(True, 0) + n_mtp * mtp_k, m, tokens, kinds[True]["again"])
    if lay.router_qb and shape.moe and lay.tp * lay.cp > 1:
        b.assumptions += (ROUTER_QB_GATHER,)
    return b


ROUTER_QB_GATHER = ("MoE: moe_router_load_balancing_type=quantile_balancing gathers each MoE layer's router logits (the "
                    "rank's tokens x num_moe_experts, FP32) over the TP x CP group in every forward, again where the "
                    "layer is recomputed, so the quantile sees a whole sequence's tokens (all_gather_into_tensor, "
                    "Megatron-Core 0.19.2 router.py:332-351, TopKRouter.quantile_balancing): blocking in the router, "
                    "before the dispatch, no overlap setting hides it")


def _router_qb_gather(lay, shape, system, layers: int, m: int, tokens: int, again: dict) -> list:
    """Quantile balancing's logits all-gather over the TP x CP group (tp_cp_group), per MoE layer per micro-batch's
    forward (and its recompute: the router runs inside the MoE layer's checkpoint): local tokens x experts x 4 B in,
    TP x CP times that out (the Item's bytes, as TP's all-gathers are counted: the gathered tensor)."""
    group = lay.tp * lay.cp
    if not lay.router_qb or not shape.moe or group < 2 or not layers:
        return []
    local = tokens // lay.cp // (lay.tp if lay.sp else 1)  # (the router's input: the sequence-parallel shard)
    nbytes = local * group * shape.num_moe_experts * 4
    link = link_of(lay, 1, group)
    near = fewest_local(lay, 1, group) if link == "network" else None
    one = system.seconds("all_gather", nbytes, group, link, near)
    count = round((1 + again["layer"] + again["mlp"]) * layers * m)
    return [Item("tp", "all_gather", "MoE routers' FP32 logits for quantile balancing (tokens x experts, over TP x CP: "
                 "router.py quantile_balancing, in the forward, not overlapped)", nbytes, count, group, link, one * count,
                 0.0, None, **across(system, "all_gather", link, near))]


REBUILT_WHAT = "decoder layers built again after the MTP block (no userbuffers: TP_OVERLAP_OFF_MTP_DECODER): "


def rebuilt_without_userbuffers(lay: Layout, shape, costed: "Costed") -> dict:
    """The costed rank's decoder layers by kind (dense False, MoE True) that run TP without userbuffers where the
    provider's model builds its decoder again after GPTModel.__init__ built the MTP block (lay.mtp_decoder_rebuilt:
    Bridge's Qwen3VLGPTModel, Exaone45GPTModel): eh_proj turned the shared tp_comm_overlap off before, so on the MTP's
    rank the decoder of the model chunk holding the MTP block (and of any chunk built after it) gets none; with PP 1
    and no VPP the whole model. Nothing where TP overlap would not run anyway ({})."""
    if not (lay.mtp_decoder_rebuilt and costed.with_mtp and shape.mtp_num_layers and tp.userbuffers_run(lay, shape)):
        return {}
    if lay.vp <= 1:
        return dict(costed.counts)
    chunks = chunk_numbers(lay, shape.num_layers, costed.rank)
    first = lay.mtp_stage // lay.pp if lay.mtp_stage is not None else len(chunks) - 1
    nums = [n for chunk in chunks[first:] for n in chunk]
    moe = sum(map(shape.is_moe_layer, nums)) if shape.mixed else (len(nums) if shape.moe else 0)
    found = {False: len(nums) - moe, True: moe}
    return {k: min(n, found.get(k, 0)) for k, n in costed.counts.items()}


def _rebuilt_said(lay: Layout, lost: dict, counts: dict) -> str:
    n, of = sum(lost.values()), sum(counts.values())
    where = ("all the decoder layers of the model" if lay.pp == 1 and lay.vp <= 1 else
             f"{n} of the {of} decoder layers of pipeline rank {mtps.rank(lay)} (those of the model chunk holding the "
             "MTP block)")
    return (f"TP overlap: the model's provider builds its decoder again after the MTP block (Bridge's Qwen3VLGPTModel, "
            f"Exaone45GPTModel: TP_OVERLAP_OFF_MTP_DECODER), after eh_proj turned tp_comm_overlap off: {where} run "
            "their TP collectives without userbuffers, priced so, and their GEMMs give no SMs to communication")


@dataclass
class Costed:
    """The pipeline rank the budget costs: its number, decoder layers (and of each kind: counts), whether it holds the
    MTP layers, one micro-batch's forward and backward there, and the layer kinds' costs at its size."""
    rank: int
    layers: int
    counts: dict
    with_mtp: bool
    fwd: float
    bwd: float
    kinds: dict


def _stage_time(lay: Layout, kinds: dict, counts: dict, n_mtp: int, mtp_k: bool, mtp_fwd: float, logits_s: float,
                adapter_s: float) -> tuple[float, float]:
    """One micro-batch's forward and backward on a stage of `counts` decoder layers (dense False, MoE True), `n_mtp`
    MTP layers (their forward mtp_fwd) and `logits_s` of the output layer's forward."""
    attn_s = kinds[False]["attn_s"]
    fwd = sum(n * kinds[k]["fwd"] for k, n in counts.items()) + logits_s + mtp_fwd
    if lay.peft:  # frozen weights: dgrad only (the attention's backward and the trained adapters' stay twice)
        bwd = (sum(n * (sum(kinds[k]["gemm_s"].values()) + 2 * attn_s + 2 * adapter_s) for k, n in counts.items())
               + logits_s + mtp_fwd)  # (the MTP block's: about its forward)
    else:
        bwd = 2 * fwd  # dgrad and wgrad
    bwd += sum(n * kinds[k]["again_s"] for k, n in counts.items()) + n_mtp * kinds[mtp_k]["again_s"]
    return fwd, bwd


def _rank_counts(lay: Layout, shape, rank: int) -> dict:
    """A layout's pipeline rank's decoder layers by kind (dense False, MoE True: moe_layer_freq on their global
    numbers, stage_numbers)."""
    nums = stage_numbers(lay, shape.num_layers, rank)
    if not shape.mixed:
        return {shape.moe: len(nums)}
    moe = sum(map(shape.is_moe_layer, nums))
    return {False: len(nums) - moe, True: moe}


def _alike(lay: Layout, shape, n_mtp: int, rank: int) -> tuple:
    """What a layout's pipeline rank holds, as _candidates compares ranks: its decoder layers by kind, its MTP layers,
    the embedding (first rank), the output layer and loss (last rank)."""
    return (tuple(sorted(_rank_counts(lay, shape, rank).items())), n_mtp if rank == mtps.rank(lay) else 0, rank == 0,
            rank == lay.pp - 1)


def _candidates(lay: Layout, shape, layers: int, n_mtp: int, kinds_of, mtp_k: bool, mtp_extra: dict, rate: float,
                logits_fwd: float, adapter_s: float) -> list:
    """The pipeline ranks the budget may cost (Costed), the busiest of which it costs (_estimate: the longest
    iteration, compute, bubble and exposed communication together; the first of equals). Without a layout one: every
    rank holds as many decoder layers (of each kind as moe_layer_freq loads the busiest: stage_counts), the output
    layer's logits spread over the stages, the MTP layers on the last rank, costed with them (DP on that rank, else on
    rank 0). With a layout each rank with what it really holds: its decoder layers by kind (their global numbers:
    stage_numbers), the MTP block where the layout's 'm' is, the output layer and loss on the last rank (GPTModel builds
    output_layer where post_process; the layout's 'L' is its last layer), the embedding on the first (its lookup no
    GEMM: not counted); of ranks that hold alike only the first (the least of the pipeline's slack beside its DP)."""
    mtp_fwd = lambda kinds, n: n * (kinds[mtp_k]["fwd"] + sum(mtp_extra.values()) / rate)  # noqa: E731
    if not lay.stages:
        kinds = kinds_of(layers)
        counts = layer_kinds.stage_counts(lay, shape, layers, kinds)
        fwd, bwd = _stage_time(lay, kinds, counts, n_mtp, mtp_k, mtp_fwd(kinds, n_mtp),
                               logits_fwd / max(1, lay.pp), adapter_s)  # spread: no stage is apart
        rank = mtps.rank(lay) if n_mtp and lay.pp > 1 else 0
        return [Costed(rank, layers, counts, bool(n_mtp), fwd, bwd, kinds)]
    out, seen = [], set()
    for r in range(lay.pp):
        counts, mine = _rank_counts(lay, shape, r), n_mtp if r == mtps.rank(lay) else 0
        key = _alike(lay, shape, n_mtp, r)
        if key in seen:
            continue
        seen.add(key)
        kinds = kinds_of(sum(counts.values()))
        fwd, bwd = _stage_time(lay, kinds, counts, mine, mtp_k, mtp_fwd(kinds, mine),
                               logits_fwd if r == lay.pp - 1 else 0.0, adapter_s)
        out.append(Costed(r, sum(counts.values()), counts, bool(mine), fwd, bwd, kinds))
    return out


def _holds(lay: Layout, c: Costed) -> str:
    """What a layout's pipeline rank holds, in words."""
    kinds = {False: "dense", True: "MoE"}
    parts = [(n, kinds[k]) for k, n in sorted(c.counts.items()) if n] if len(c.counts) > 1 else []
    kind = f"{parts[0][1]} " if len(parts) == 1 else ""  # (a model of both kinds: which this rank's are)
    layers = f"{c.layers} {kind}decoder layer{'s' * (c.layers != 1)}" + (
        f" ({', '.join(f'{n} {k}' for n, k in parts)})" if len(parts) > 1 else "")
    extra = (["the embedding"] if c.rank == 0 else []) + (["the MTP layers"] if c.with_mtp else []) + (
        ["the output layer and loss"] if c.rank == lay.pp - 1 else [])
    return ", ".join([layers] + extra[:-1]) + (f" and {extra[-1]}" if extra else "")


def _twins(lay: Layout, shape, n_mtp: int, rank: int) -> list:
    """The pipeline ranks that hold what `rank` holds (_alike), itself among them: as busy as it."""
    key = _alike(lay, shape, n_mtp, rank)
    return [r for r in range(lay.pp) if _alike(lay, shape, n_mtp, r) == key]


def _ranks(ranks: list) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]}"


def _rank_said(lay: Layout, c: Costed, b: Budget, built: list, twins_of) -> str:
    """Which rank a layout's budget costs and why: what it holds (and every rank that holds the same, as busy: evalAD
    AD2-3), its micro-batch and iteration; the ranks that hold otherwise and end their iteration as late (_tied); the
    next busiest rank's, below them."""
    per = ", ".join(str(rank_layers(lay, r)) for r in range(lay.pp))
    what = ("num_layers_in_first/last_pipeline_stage place" if lay.first_last != (None, None)
            else "pipeline_model_parallel_layout places")
    twins = twins_of(c.rank)
    if len(twins) > 1:  # (evalAD AD2-3: its twin was left out, and a rank below called "next")
        rest = [r for r in twins if r != c.rank]
        busiest = (f"the budget costs pipeline rank {c.rank}, the busiest with {_ranks(rest)}, which hold{'s' * (len(rest) == 1)} "
                   f"the same (rank {c.rank} the first, with the least pipeline slack beside its DP): each holds {_holds(lay, c)}")
    else:
        busiest = f"the budget costs pipeline rank {c.rank}, the busiest: it holds {_holds(lay, c)}"
    line = (f"the config's {what} the decoder layers ({per} on the {lay.pp} pipeline "
            f"ranks): {busiest}; one micro-batch's "
            f"forward and backward {(c.fwd + c.bwd) * 1e3:,.1f} ms there, the iteration {b.iteration_s * 1e3:,.1f} ms "
            "(the longest under the schedule, its wait included: the step is the slowest rank's)")
    others = [(ob, o) for ob, o in built if o.rank not in twins]
    tied = [(ob, o) for ob, o in others if _tied(ob, built)]
    if tied:  # (other holdings whose iterations end as late: the step waits on the pipeline, not on their own tail)
        names = [r for _, o in tied for r in twins_of(o.rank)]
        line += (f"; {_ranks(sorted(names))} ({'; '.join(_holds(lay, o) for _, o in tied)}) "
                 f"{'end theirs' if len(names) > 1 else 'ends its'} as late, "
                 f"{max(ob.iteration_s for ob, _ in tied) * 1e3:,.1f} ms (the pipeline's end and the same once-an-iteration "
                 f"tail): rank {c.rank} is costed as the slowest stage of them (its micro-batch with its exposed "
                 f"communication {b.pipeline.stages[c.rank] * 1e3:,.1f} ms)")
        others = [(ob, o) for ob, o in others if not _tied(ob, built)]
    if others:  # (the next longest iteration; of equal ones (TIE) the slower stage, not the lower rank: evalAF AF-1)
        top = max(ob.iteration_s for ob, _ in others)
        ob, o = max(others, key=lambda bc: (bc[0].iteration_s >= top * (1 - TIE), _stage(bc), -bc[1].rank))
        alike = twins_of(o.rank)
        line += (f"; next, {_ranks(alike)} ({_holds(lay, o)}{' each' if len(alike) > 1 else ''}): "
                 f"{(o.fwd + o.bwd) * 1e3:,.1f} ms and {ob.iteration_s * 1e3:,.1f} ms")
    line += _pace_said(lay, b, what)
    return (line + "; the output layer's logits (the whole vocabulary over TP) run on the last rank alone (GPTModel "
            "builds output_layer where post_process), the EP all-to-alls on each rank's MoE layers")


def _stage(bc: tuple) -> float:
    b, c = bc
    return b.pipeline.stages[c.rank] if b.pipeline is not None else 0.0


def _pace_said(lay: Layout, b: Budget, what: str) -> str:
    """evalAF AF-1: the ranks by their stages' own pace (Bubble.stages: a micro-batch's forward and backward with its
    exposed communication), slowest first, and what to move: every rank's iteration ends with the pipeline, so the
    iterations cannot say which stage holds the others up; the stage times can (the schedule runs at the slowest's)."""
    if b.pipeline is None or len(b.pipeline.stages) < 2:
        return ""
    stages = b.pipeline.stages
    groups: list = []
    for r in sorted(range(lay.pp), key=lambda r: (-stages[r], r)):
        if groups and stages[groups[-1][0]] <= stages[r] * (1 + TIE):
            groups[-1].append(r)
        else:
            groups.append([r])
    if len(groups) < 2:
        return ""
    per = ", ".join(f"{_ranks(sorted(g))} {stages[g[0]] * 1e3:,.1f} ms" for g in groups)
    slow, fast = sorted(groups[0]), sorted(groups[-1])
    line = (f"; the stages by their own pace (a micro-batch's forward and backward with its exposed communication), "
            f"slowest first: {per}: the pipeline runs at the slowest stage's pace ({_ranks(slow)}: the others wait on "
            f"it)")
    if all(rank_layers(lay, r) > 0 for r in slow):
        knob = ("num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage" if lay.first_last != (None, None)
                else "pipeline_model_parallel_layout")
        line += (f", so moving decoder layers off {_ranks(slow)} toward {_ranks(fast)} ({knob}) shortens the step "
                 "until the stages are even")
    return line


def _mtp_said(lay: Layout, shape, with_mtp: bool) -> tuple:
    if not shape.mtp_num_layers:
        return ()
    where = ("" if with_mtp else f"; the pipeline rank of the MTP layers ({mtps.rank(lay)}) is not the busiest under "
             "the layout: the rank costed holds none")
    return (mtps.ASSUMPTION + where,)


def network_rates(items: list, system: System) -> tuple:
    """One line per dimension whose collectives cross the network: the bus bandwidth each kind got and why (the
    group's ranks per NVLink domain, the NICs they drive, the NVLink cap: System.network_gbps)."""
    nic, per_gpu = system.record["network"]["value"], system.record["nics_per_gpu"]["value"]
    cap = system.record["nvlink"]["other"]["value"]
    own = f"one GPU's NIC ({nic:g} GB/s)" if per_gpu == 1 else f"one GPU's {per_gpu:g} NICs ({per_gpu * nic:g} GB/s)"
    kinds: dict = {}
    for i in items:
        if i.link == "network" and i.gbps:
            kind = "p2p" if i.collective in ("all_to_all", "send_recv") else "ring"
            kinds.setdefault((i.dimension.upper(), kind, i.group, i.local, i.gbps), dict.fromkeys(()))[i.collective] = None
    said: dict = {}
    for (dim, kind, group, local, gbps), collectives in kinds.items():
        names = " and ".join(collectives)
        if "all_to_all" in collectives:
            why = (f"all_to_all over {group} ranks, as few as {local} in one NVLink domain: each rank's parts for the other "
                   f"domains at {own} (an all-to-all cannot aggregate NICs: nccltests_267)")
        elif kind == "p2p":
            why = f"{names}: {own}"
        elif local < 2:
            why = f"{names} over {group} ranks, as few as one in an NVLink domain (its NICs set the ring's pace): {own}"
        else:
            total = local * per_gpu * nic
            limit = f"capped by the NVLink ring's {cap:g} GB/s" if gbps < total else f"under the NVLink ring's {cap:g}"
            why = (f"{names} over {group} ranks, {local} in each NVLink domain at fewest: NCCL runs a ring channel over "
                   f"each of their GPUs' NICs, {local} x {own} = {total:g} GB/s, {limit}: {gbps:g} GB/s "
                   "(nccl_812, nccltests_319)")
        said.setdefault(dim, []).append(why)
    return tuple(f"{dim} across the network, priced at large-message bus bandwidths plus a fixed cost per message: "
                 + "; ".join(whys) for dim, whys in said.items())


def _cp(lay, shape, system, layers, m, tokens, attn_s, again) -> list:
    if lay.cp < 2:
        return []
    # p2p ring (TE's default cp_comm_type): cp-1 exchanges of the local K and V chunk forward, of K, V, dK and dV backward
    if shape.multi_latent_attention:  # the up projections' K and V of the rank's heads
        kv = mla.attention_kv(shape, tokens // lay.cp, lay.tp) * ACT_BYTES
    else:  # fewer groups than TP: one each
        kv = 2 * tokens // lay.cp * max(shape.groups // lay.tp, 1) * shape.head_dim * ACT_BYTES
    link = link_of(lay, lay.tp, lay.cp)
    step_fwd = system.seconds("send_recv", kv, 2, link)
    step_bwd = system.seconds("send_recv", 2 * kv, 2, link)
    steps = (lay.cp - 1) * layers * m
    fwd_runs = 1 + again["layer"] + again["core_attn"]  # a recomputed attention exchanges its chunks again
    compute_step = attn_s / lay.cp  # one block of the causal attention per exchange
    # the backward's messages are twice the forward's (TE's context_parallel.py: K and V with dK and dV): two rows
    return [Item("cp", "send_recv", "K/V chunks of the attention ring (forward)", kv, round(fwd_runs * steps), 2, link,
                 steps * fwd_runs * step_fwd, steps * fwd_runs * min(step_fwd, compute_step), None,
                 **across(system, "send_recv", link, 1)),
            Item("cp", "send_recv", "K/V and dK/dV chunks of the attention ring (backward)", 2 * kv, round(steps), 2, link,
                 steps * step_bwd, steps * min(step_bwd, 2 * compute_step), None, **across(system, "send_recv", link, 1))]


def _pp(lay, shape, system, m, tokens, stage_fwd) -> list:
    if lay.pp < 2:
        return []
    size = tokens // lay.cp // (lay.tp if lay.sp else 1) * shape.hidden_size * ACT_BYTES
    link = link_of(lay, lay.tp * lay.cp * lay.dp, lay.pp)
    one = system.seconds("send_recv", size, 2, link)
    count = 2 * m * lay.vp  # activations forward, their gradients backward, at each of the stage's chunk boundaries
    total = one * count
    chunk_fwd = stage_fwd / lay.vp
    on = lay.settings["overlap_p2p_comm"] and lay.vp > 1
    hidden = count * min(one, chunk_fwd) if on else 0.0
    return [Item("pp", "send_recv", "activations and their gradients between stages", size, count, 2, link, total, hidden,
                 "overlap_p2p_comm", **across(system, "send_recv", link, 1))]


def _ep(lay, shape, system, layers, m, tokens, layer_fwd, again) -> list:
    if lay.ep < 2 or not shape.moe:
        return []
    local = tokens // lay.cp // (lay.tp if lay.sp else 1)
    size = round(local * copies_per_token(lay, shape) * shape.hidden_size * ACT_BYTES)
    link = link_of(lay, lay.etp, lay.ep)  # the expert grid's order: tp-ep-dp-pp, TP the expert TP
    local = fewest_local(lay, lay.etp, lay.ep) if link == "network" else None
    parts = ep_parts(lay, shape, local) if local else None  # (the shares over NVLink and across the network)
    one = system.seconds("all_to_all", size, lay.ep, link, local, parts)
    count = round((4 + 2 * (again["layer"] + again["mlp"])) * layers * m)  # dispatch and combine, forward (again where recomputed) and backward
    total = one * count
    on = lay.settings["overlap_moe_expert_parallel_comm"]
    # hidden behind the other micro-batch's attention or MLP; combined 1F1B runs the first micro-batch's forward and
    # the last one's backward alone (pipeline_parallel/combined_1f1b.py): their dispatch and combine stay exposed
    hidden = max(0, count - 4 * layers) * min(one, layer_fwd / 2) if on else 0.0
    return [Item("ep", "all_to_all", "routed tokens (dispatch and combine)", size, count, lay.ep, link, total, hidden,
                 "overlap_moe_expert_parallel_comm", **across(system, "all_to_all", link, local))]

