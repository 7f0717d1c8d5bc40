"""What happens once the job launches, decided by the config and the machine: at setup (process groups, userbuffers,
model build), at the first step, and in steady state. Each rule mirrors code of Megatron-Core or Transformer Engine
(the anchors of its record), or, where only an upstream report documents it, cites that report.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ...budget.layout import RUN_BOUNDS
from ...run import launch_env, layout, peft
from ...upstream import catalog, presets, releases
from .. import make, shell
from ..proof import fixed
from ...run.resolver import State
from ...values import fmt
from ..registry import check
from .common import owner_key


def _tp_overlap_on(state: State) -> bool:
    return bool(state.model["tp_comm_overlap"]) and state.model["tensor_model_parallel_size"] >= 2


def _tp_off(state: State) -> dict:
    return {owner_key(state, "tp_comm_overlap"): False}


# --- setup: the parallel grid --------------------------------------------------------------------------------------


@check("EXPERT_GRID_NOT_DIVIDING_WORLD", "EXPERT_DP_DIFFERS_WITHOUT_PP_LAST")
def expert_grid(state: State):
    """parallel_state.initialize_model_parallel: the expert grid ETP x EP x PP must divide the world (CP is not in it);
    and where the rank order does not end in PP (dist.use_tp_pp_dp_mapping: Bridge's 'tp-cp-ep-pp-dp') with PP > 1,
    the experts' DP size must be the dense layers' (recheck47 R2)."""
    m = state.model
    if not state.data_parallel_size or m["expert_model_parallel_size"] <= 1:
        return
    etp, ep, pp = m["expert_tensor_parallel_size"], m["expert_model_parallel_size"], m["pipeline_model_parallel_size"]
    size = etp * ep * pp
    if state.gpus % size:
        # expert TP 1 (Bridge 0.6's default with EP > 1, what its MoE recipes set) where that alone makes it divide
        candidates = [{"model.expert_tensor_parallel_size": 1}] if etp > 1 else []
        o, fix = fixed(state, "EXPERT_GRID_NOT_DIVIDING_WORLD", candidates, shell(
            "run on a multiple of {size} GPUs, or lower model.expert_model_parallel_size (or the expert TP) so that "
            "ETP x EP x PP divides {gpus}", size=size, gpus=state.gpus))
        yield make("EXPERT_GRID_NOT_DIVIDING_WORLD", fix_overrides=o, fix=fix, gpus=state.gpus, size=size, etp=etp, ep=ep, pp=pp)
        return
    dense_dp = state.gpus // (m["tensor_model_parallel_size"] * pp * m["context_parallel_size"])
    if state.dist.get("use_tp_pp_dp_mapping") and pp > 1 and state.gpus // size != dense_dp:
        o, fix = fixed(state, "EXPERT_DP_DIFFERS_WITHOUT_PP_LAST", [{"dist.use_tp_pp_dp_mapping": False}])
        yield make("EXPERT_DP_DIFFERS_WITHOUT_PP_LAST", fix_overrides=o, fix=fix, expert_dp=state.gpus // size, dp=dense_dp)


@check("DISTOPT_INSTANCES_NOT_DIVIDING")
def distopt_instances(state: State):
    """initialize_model_parallel and DistributedDataParallel: partial distributed-optimizer sharding over N instances."""
    m, ddp = state.model, state.ddp
    n = ddp["num_distributed_optimizer_instances"]
    if n <= 1 or not state.data_parallel_size:
        return
    expert = m["expert_tensor_parallel_size"] * m["expert_model_parallel_size"] * m["pipeline_model_parallel_size"]
    if (state.data_parallel_size * m["context_parallel_size"]) % n:
        message = "Data parallel size should be divisible by partial DistOpt shard factor"
    elif state.gpus % expert == 0 and (state.gpus // expert) % n:
        message = "Expert data parallel size should be divisible by partial DistOpt shard factor"
    elif not ddp["use_distributed_optimizer"]:
        message = "Partial DistOpt cannot be used without DistOpt"
    else:
        return
    o, fix = fixed(state, "DISTOPT_INSTANCES_NOT_DIVIDING", [{"ddp.num_distributed_optimizer_instances": 1}])
    yield make("DISTOPT_INSTANCES_NOT_DIVIDING", fix_overrides=o, fix=fix, n=n, bridge=message,
               dp=state.data_parallel_size, cp=m["context_parallel_size"])


# --- setup: Transformer Engine's userbuffers (TP overlap) ------------------------------------------------------------


@check("UB_TP_ACROSS_NVLINK_DOMAINS")
def ub_nvlink_domain(state: State):
    """initialize_ub forms each userbuffers domain from tp_size consecutive ranks and exchanges buffers inside it by
    CUDA IPC or multicast; nothing checks that the ranks share an NVLink domain."""
    if not _tp_overlap_on(state):
        return
    mach, tp = state.scenario.machine, state.model["tensor_model_parallel_size"]
    if tp > mach.nvlink_domain or mach.nvlink_domain % tp:
        why = (f"an NVLink domain here joins {mach.nvlink_domain} GPUs, so a TP group of {tp} consecutive ranks spans two or more "
               "domains")
    elif tp > mach.gpus_per_node and releases.version_key(mach.te_version) < releases.version_key("2.2"):
        why = (f"a TP group of {tp} spans nodes of {mach.gpus_per_node} GPUs, and Transformer Engine {mach.te_version} has no "
               "multi-node NVLink (MNNVL) userbuffers (since 2.2)")
    else:
        return
    o, fix = fixed(state, "UB_TP_ACROSS_NVLINK_DOMAINS", [_tp_off(state)])
    yield make("UB_TP_ACROSS_NVLINK_DOMAINS", fix_overrides=o, fix=shell("{fix}, or TP <= {domain} that divides it", fix=fix,
               domain=mach.nvlink_domain), tp=tp, why=why, gpu=mach.gpu)


@check("UB_BOOTSTRAP_NEEDS_MPI", "UB_BOOTSTRAP_MPI_LAUNCHER")
def ub_bootstrap(state: State):
    """initialize_ub bootstraps userbuffers with torch.distributed collectives of model.tp_comm_bootstrap_backend."""
    if not _tp_overlap_on(state) or state.model["tp_comm_bootstrap_backend"] != "mpi":
        return
    mach = state.scenario.machine
    if mach.torch_mpi:
        yield make("UB_BOOTSTRAP_MPI_LAUNCHER")
        return
    o, fix = fixed(state, "UB_BOOTSTRAP_NEEDS_MPI", [{owner_key(state, "tp_comm_bootstrap_backend"): "nccl"}])
    yield make("UB_BOOTSTRAP_NEEDS_MPI", fix_overrides=o, fix=fix, source=mach.sources.get("torch_mpi", "given"))


def _skip_multicast(state: State) -> bool:
    return str(state.environ.get("UB_SKIPMC", "0")).strip() not in ("", "0")


@check("UB_NEEDS_MULTICAST", "UB_IPC_TP_OVER_8")
def ub_multicast(state: State):
    """initialize_ub refuses a device without CUDA multicast unless UB_SKIPMC=1; the CUDA IPC path then takes at most
    8 GPUs per domain (userbuffers-host.cpp register_user_buffer_collective)."""
    if not _tp_overlap_on(state):
        return
    mach, tp = state.scenario.machine, state.model["tensor_model_parallel_size"]
    ipc = _skip_multicast(state) or not mach.multicast
    if ipc and tp > 8:
        o, fix = fixed(state, "UB_IPC_TP_OVER_8", [_tp_off(state)])
        yield make("UB_IPC_TP_OVER_8", fix_overrides=o, fix=fix, tp=tp)
    elif not mach.multicast and not _skip_multicast(state):
        c = [{"env_vars.UB_SKIPMC": 1}] if state.request.release.env_vars else []
        o, fix = fixed(state, "UB_NEEDS_MULTICAST", c, shell("export UB_SKIPMC=1 in the launcher (CUDA IPC instead of multicast)"))
        yield make("UB_NEEDS_MULTICAST", fix_overrides=o, fix=fix)


@check("UB_LAZY_MPU_INIT")
def ub_lazy_init(state: State):
    """torch_dist_init calls _initialize_tp_communicators only without dist.lazy_mpu_init; Transformer Engine's layers
    then assert at construction."""
    if _tp_overlap_on(state) and state.dist["lazy_mpu_init"]:
        o, fix = fixed(state, "UB_LAZY_MPU_INIT", [{"dist.lazy_mpu_init": False}])
        yield make("UB_LAZY_MPU_INIT", fix_overrides=o, fix=fix)


# --- the first step: the fixed userbuffers shape ----------------------------------------------------------------------


@check("SP_SEQ_LENGTH_NOT_DIVISIBLE_BY_TP")
def sp_sequence(state: State):
    """Sequence parallel's scatter at the embedding (tensor_parallel/mappings.py _split_along_first_dim) asserts at
    the first forward that each CP rank's sequence, seq_length / CP, divides by TP; Bridge's config step checks only
    CP's split (evalM M4: 4,100 tokens at TP 4, CP 2 resolved clean). Pre-training's fixed length only: fine-tuning
    data and packed micro-batches are padded by their own rules."""
    m, ds = state.model, state.dataset
    seq, tp, cp = m.get("seq_length"), m["tensor_model_parallel_size"], m["context_parallel_size"]
    if not m["sequence_parallel"] or tp < 2 or not seq or seq > RUN_BOUNDS["model.seq_length"] or state.request.context.get("dataset.sft") \
            or state.scenario.task in ("sft", "peft") or ds.get("enable_in_batch_packing"):
        return  # (a length past any model's is refused where it is used: the budget's bounds)
    if seq % cp == 0 and (seq // cp) % tp:
        multiple = math.lcm(tp * cp, 2 * cp if cp > 1 else 1)  # each CP rank's share over TP, and Bridge's 2 x CP
        yield make("SP_SEQ_LENGTH_NOT_DIVISIBLE_BY_TP", seq=seq, cp=cp, tp=tp, per=seq // cp, multiple=multiple)


@check("UB_VARIABLE_TOKEN_COUNT")
def ub_token_count(state: State):
    """Userbuffers are registered for seq_length x micro_batch_size / CP tokens; every all-gather overlap copies its
    input in and checks the size (comm_gemm_overlap.cpp copy_into_buffer)."""
    ds = state.dataset
    if not _tp_overlap_on(state):
        return
    if ds["enable_in_batch_packing"]:
        why, candidates = "dataset.enable_in_batch_packing=true: packed micro-batches have the width of what they pack", [_tp_off(state)]
    elif ds["pad_to_max_length"] is False:
        why = ("dataset.pad_to_max_length=false with PP = 1 and EP = 1 (Bridge forces it on only with PP > 1 or EP > 1): "
               "each micro-batch is padded to its own longest sample")
        candidates = [{"dataset.pad_to_max_length": True}, _tp_off(state)]
    else:
        return
    o, fix = fixed(state, "UB_VARIABLE_TOKEN_COUNT", candidates)
    yield make("UB_VARIABLE_TOKEN_COUNT", fix_overrides=o, fix=fix, why=why)


@check("UB_MXFP8_ROWS_NOT_128")
def ub_mxfp8_rows(state: State):
    """fill_userbuffers_buffer_for_all_gather: MXFP8 through userbuffers needs the local rows and the width to be
    multiples of 128."""
    m = state.model
    if not _tp_overlap_on(state) or not (m["fp8"] and m["fp8_recipe"] == "mxfp8"):
        return
    shape = state.scenario.shape
    seq, mbs, hidden = shape["seq_length"], shape["micro_batch_size"], shape["hidden_size"]
    if seq is None or mbs is None:
        return  # not known: nothing to say
    rows = seq * mbs // m["context_parallel_size"] // m["tensor_model_parallel_size"]
    if rows % 128 == 0 and (hidden is None or hidden % 128 == 0):
        return
    o, fix = fixed(state, "UB_MXFP8_ROWS_NOT_128", [_tp_off(state)])
    yield make("UB_MXFP8_ROWS_NOT_128", fix_overrides=o, fix=fix, rows=rows, hidden=fmt(hidden), seq=seq, mbs=mbs,
               cp=m["context_parallel_size"], tp=m["tensor_model_parallel_size"])


# --- steady state -------------------------------------------------------------------------------------------------


@check("UB_LORA_AG_OVERLAP_DROPPED")
def ub_lora(state: State):
    """Bridge's LoRA sets return_layernorm_output on the LayerNorm-fused linears it adapts (linear_qkv, linear_fc1);
    Transformer Engine's LayerNormLinear then drops its all-gather overlap there (the other overlaps stay)."""
    modules = _layernorm_fused(peft.of(state))
    if _tp_overlap_on(state) and modules:
        yield make("UB_LORA_AG_OVERLAP_DROPPED", modules=modules)


@check("LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED")
def lora_gathered_ln_output(state: State):
    """Bridge's LoRA asks TE for the gathered LayerNorm output where sequence parallel is on and the linear has no
    userbuffers all-gather; TE >= 2.4 drops that output's gradient (_LayerNormLinear.backward)."""
    m, adapted = state.model, peft.of(state)
    modules = _layernorm_fused(adapted)
    if (not modules or not m["sequence_parallel"] or m["tensor_model_parallel_size"] < 2 or m["tp_comm_overlap"]
            or adapted.regather or releases.version_key(state.te_version) < releases.version_key(TE_GATHERED_GRAD_DROPPED)):
        return
    yield make("LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED", modules=modules, te=state.te_version)


def _layernorm_fused(adapted) -> str:
    """The adapted LayerNorm-fused linears by name ("linear_qkv and linear_fc1"), '' for none (or no PEFT)."""
    return " and ".join(f"linear_{g}" for g in adapted.layernorm_fused) if adapted else ""


TE_GATHERED_GRAD_DROPPED = "2.4.0"  # TE PR 1711 removed the gathered LayerNorm output's gradient
TE_FROZEN_BULK_WGRAD = "2.1.0"  # the TE 2.0 code (first released in 2.1) dropped PR 702's guard for frozen weights


@check("PEFT_BULK_WGRAD_ON_FROZEN_WEIGHTS")
def peft_frozen_bulk_wgrad(state: State):
    """TE's bulk wgrad overlap reduce-scatters a column-parallel linear's input gradient from the wgrad GEMM call,
    which a frozen weight (every base weight of a PEFT run) skips; TE 2.x no longer turns bulk wgrad off for it."""
    m = state.model
    if (peft.of(state) is None or not _tp_overlap_on(state) or not m["sequence_parallel"]
            or releases.version_key(state.te_version) < releases.version_key(TE_FROZEN_BULK_WGRAD)):
        return
    preset = m["tp_comm_overlap_cfg"] if m["tp_comm_overlap_cfg"] in releases.preset_content() else None
    bulk = [g for g in ("qkv", "fc1") if presets.ub_config(preset, f"{g}_dgrad")["method"] == "bulk"]
    if bulk:
        how = f"preset {preset}" if preset else "Transformer Engine's default userbuffers config"
        yield make("PEFT_BULK_WGRAD_ON_FROZEN_WEIGHTS", modules=" and ".join(f"linear_{g}" for g in bulk), how=how,
                   te=state.te_version)


@check("CUDA_DEVICE_MAX_CONNECTIONS_ONE_SERIALIZES_DP")
def one_connection_dp(state: State):
    """With one hardware queue, the bucketed reduce-scatter/all-gather wait behind the compute kernels queued before
    them: DP overlap is configured and does not happen (Megatron-LM issue 1468). With TP or CP > 1 that is the price
    of their overlap, which Bridge's Hopper launch rule pays; with TP = CP = 1 nothing needs it."""
    m, ddp = state.model, state.ddp
    if str(state.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "")).strip() != "1" or state.fsdp:
        return
    if m["tensor_model_parallel_size"] > 1 or m["context_parallel_size"] > 1:
        return
    if state.data_parallel_size <= 1 or not (ddp["overlap_grad_reduce"] or ddp["overlap_param_gather"]):
        return
    rule = {name: value for name, value, _ in launch_env.rules(state.request.release, launch_env.layout_of(state))}
    value = rule["CUDA_DEVICE_MAX_CONNECTIONS"]
    from_launcher = "CUDA_DEVICE_MAX_CONNECTIONS" in state.launcher_env
    c = [] if from_launcher or not state.request.release.env_vars else [{"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": int(value)}]
    o, fix = fixed(state, "CUDA_DEVICE_MAX_CONNECTIONS_ONE_SERIALIZES_DP", c,
                   shell("export CUDA_DEVICE_MAX_CONNECTIONS={value} in the launcher (or unset it)", value=value))
    yield make("CUDA_DEVICE_MAX_CONNECTIONS_ONE_SERIALIZES_DP", fix_overrides=o, fix=fix, dp=state.data_parallel_size,
               origin="the launcher's environment" if from_launcher else "env_vars")


# --- the first step: pipeline schedules -----------------------------------------------------------------------------


@check("INTERLEAVED_MICROBATCH_GROUPS")
def interleaved_microbatches(state: State):
    """forward_backward_pipelining_with_interleaving: micro-batches run in groups of microbatch_group_size_per_vp_stage
    (default PP) per virtual stage; the group must fit the micro-batch count, and the remainder be 0 or >= PP."""
    m, train = state.model, state.train
    pp, vpp = m["pipeline_model_parallel_size"], m["virtual_pipeline_model_parallel_size"]
    gbs, mbs, dp = train["global_batch_size"], train["micro_batch_size"], state.data_parallel_size
    if pp <= 1 or (vpp or 1) <= 1 or gbs is None or mbs is None or not dp or gbs % (mbs * dp):
        return
    micro = gbs // (mbs * dp)
    group = m["microbatch_group_size_per_vp_stage"] or pp
    if group > micro or group < pp:
        bridge = f"The number of contiguous micro-batches in a virtual pipeline stageshould range in [PP={pp} , M={micro}]"
    elif 0 < micro % group < pp:
        bridge = (f"The remainder of M (the total micro-batches) divided by N (number of contiguous micro-batches in a virtual "
                  f"pipeline stage) should be 0, or larger than or equal to the pipeline-parallel size, but it is {micro % group}.")
    else:
        return
    step = mbs * dp * max(group, pp)
    c = {"train.global_batch_size": -(-gbs // step) * step}
    o, fix = fixed(state, "INTERLEAVED_MICROBATCH_GROUPS", [c])
    yield make("INTERLEAVED_MICROBATCH_GROUPS", fix_overrides=o, fix=fix, bridge=bridge, micro=micro, group=group, pp=pp,
               gbs=gbs, mbs=mbs, dp=dp)


@check("PP_VARIABLE_SEQ_LENGTHS_SHAPE_EXCHANGE")
def variable_seq_lengths(state: State):
    """With in-batch packing and PP > 1 Bridge sets variable_seq_lengths; Megatron-Core then exchanges each
    micro-batch's shape with batch_isend_irecv whatever batch_p2p_comm says (P2PCommunicator._communicate_shapes)."""
    pp = state.model["pipeline_model_parallel_size"]
    if state.dataset["enable_in_batch_packing"] and pp > 1:
        yield make("PP_VARIABLE_SEQ_LENGTHS_SHAPE_EXCHANGE", pp=pp)


# --- FP8 parameter gather -------------------------------------------------------------------------------------------


@check("MXFP8_PARAM_SYNC_NOT_OVERLAPPED")
def mxfp8_sync(state: State):
    """DistributedOptimizer.step_with_ready_grads: without overlap_param_gather the reused MXFP8 parameter buffer is
    all-gathered synchronously after every step."""
    ddp = state.ddp
    if not ddp["reuse_grad_buf_for_mxfp8_param_ag"] or ddp["overlap_param_gather"] or state.data_parallel_size <= 1 or state.fsdp:
        return
    c = {"comm_overlap.overlap_param_gather": True} if state.dp_overlap_applied else \
        {"ddp.overlap_param_gather": True, "optimizer.overlap_param_gather": True}
    o, fix = fixed(state, "MXFP8_PARAM_SYNC_NOT_OVERLAPPED", [c])
    yield make("MXFP8_PARAM_SYNC_NOT_OVERLAPPED", fix_overrides=o, fix=fix, dp=state.data_parallel_size)


@check("ALIGN_PARAM_GATHER_WITHOUT_INTERLEAVING")
def align_without_interleaving(state: State):
    """align_param_gather leaves the param all-gathers to the schedule's param_sync_func, which only the interleaved
    schedule calls: elsewhere nothing prefetches them."""
    d, m = state.ddp, state.model
    if d["align_param_gather"] and d["overlap_param_gather"] and d["use_distributed_optimizer"] \
            and not layout.Layout.of(m, state.gpus).interleaved and state.data_parallel_size > 1:
        key = "comm_overlap.align_param_gather" if state.request.comm_overlap is not None else "ddp.align_param_gather"
        o, fix = fixed(state, "ALIGN_PARAM_GATHER_WITHOUT_INTERLEAVING", [{key: False}])
        schedule = "PP=1" if m["pipeline_model_parallel_size"] == 1 else "the non-interleaved pipeline schedule (no VPP)"
        yield make("ALIGN_PARAM_GATHER_WITHOUT_INTERLEAVING", fix_overrides=o, fix=fix, schedule=schedule)


@check("MOE_TP_WITHOUT_SEQUENCE_PARALLEL")
def moe_tp_without_sequence_parallel(state: State):
    """Megatron-Core's MoELayer.forward raises in training whenever TP > 1 and sequence parallel is off (every release
    this skill covers; evalP P2); with EP > 1 ModelParallelConfig.__post_init__ also warns when Bridge finalizes the
    model config, so that log line is predicted too. An MoE model: experts set, or EP > 1 (which needs them)."""
    m = state.model
    tp, ep, experts = m["tensor_model_parallel_size"], m["expert_model_parallel_size"], m.get("num_moe_experts")
    if tp > 1 and not m["sequence_parallel"] and not _own_moe_layer(state) and (
            experts or ep > 1 or (ran_as_moe := _family_runs_moe(state))):
        otherwise = None
        if peft.of(state):  # sequence parallel brings LoRA's gathered LayerNorm output (recheck50 R4)
            otherwise = (shell("with LoRA, sequence parallel with peft.sequence_parallel_input_regather=true set in the "
                               "recipe's Python (Hydra overrides leave peft out), or TP = 1") if _since(state, "0.6.0")
                         else shell("with LoRA, TP = 1 (this release's LoRA has no sequence_parallel_input_regather, and "
                                    "sequence parallel drops a LayerNorm output's gradient: LORA_GATHERED_LN_OUTPUT_GRAD_DROPPED)"))
        o, fix = fixed(state, "MOE_TP_WITHOUT_SEQUENCE_PARALLEL", [{"model.sequence_parallel": True}], otherwise)
        what = f"EP={ep}" if ep > 1 else "num_moe_experts set" if experts else ran_as_moe  # (not a stand-in's count: R1)
        also = (f"; with EP={ep} its ModelParallelConfig also warns when Bridge finalizes the model config" if ep > 1 else "")
        yield make("MOE_TP_WITHOUT_SEQUENCE_PARALLEL", fix_overrides=o, fix=fix, what=what, tp=tp, also=also)


def _family_runs_moe(state: State) -> str | None:
    """Where a recipe reads its model from a Hugging Face config (no expert count offline), another recipe of the same
    model that runs it with experts or EP > 1 says it is MoE (recheck50 R6: gpt_oss_20b's peft recipes); None else."""
    family = (state.request.recipe or {}).get("model") or state.scenario.family
    return _moe_recipe(catalog.release_of(state.request.release), family) if family else None


@lru_cache(maxsize=64)
def _moe_recipe(version: str, family: str) -> str | None:
    for e in catalog.entries_where(version, lambda r: r.model == family):
        m = (e.get("request") or {}).get("model") or {}
        if (m.get("num_moe_experts") or 0) > 0 or (m.get("expert_model_parallel_size") or 1) > 1 \
                or any(f.startswith(catalog.STANDIN_EXPERTS) for f in e.get("fixups") or []):
            return f"{family}: its recipe {e['name']} runs it with experts"
    return None


# Model families whose MoE layers are Bridge's own and skip MoELayer.forward's check, from the Bridge release that has
# them: Gemma 4's layer calls Gemma4MoELayer.forward_with_separate_inputs from 0.6.0 (models/gemma/modeling_gemma4.py;
# recheck50 R7); 0.5.x's inherits MoELayer.forward (recheck51 T2)
OWN_MOE_LAYER = {"gemma4": "0.6.0"}
# A run config names its model by its provider class, not its family (recheck51 T3; gemma4_provider.py, gemma4_vl_provider.py)
PROVIDER_FAMILY = {"Gemma4ModelProvider": "gemma4", "Gemma4VLModelProvider": "gemma4"}


def _own_moe_layer(state: State) -> bool:
    rc = state.scenario.config
    family = state.scenario.family or PROVIDER_FAMILY.get(rc.provider.rsplit(".", 1)[-1] if rc else "", "")
    return any(family.startswith(name) and _since(state, since) for name, since in OWN_MOE_LAYER.items())


def _since(state: State, version: str) -> bool:
    return releases.version_key(state.request.release.version) >= releases.version_key(version)


# --- the first step: the MoE router ---------------------------------------------------------------------------------

# Where Megatron-Core raises, by its version (the line a traceback names; held to the installed Megatron-Core in
# tests/bridge/test_moe_router.py): group_limited_topk's topk(topk // group_topk) in moe_utils.py (0.18.x, 0.19.x alike),
# TopKRouter.quantile_balancing's two asserts in router.py (0.19 only)
GROUP_TOPK_LINE = {"0.18": 618, "0.19": 656}
QB_ASSERT_LINES = {"0.19.0": (325, 328), "0.19.2": (324, 327)}
QB_FUSION = "Quantile balancing routing does not support moe_router_fusion."
QB_GROUPS = "Quantile balancing routing does not support group-limited routing."


@check("MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE", "QUANTILE_BALANCING_REFUSED_BY_ROUTER", "QUANTILE_BALANCING_NOT_IN_RELEASE")
def moe_router(state: State):
    """The MoE router's first forward (Megatron-Core's TopKRouter.routing): quantile balancing asserts router fusion off
    and no group-limited routing (0.19), and is absent from 0.18 (taken, no balancing); group_limited_topk asks
    torch.topk for topk // group_topk experts of each group (budget.router_of: the run's routing)."""
    from ... import budget

    r = budget.router_of(state.scenario, state.model["expert_model_parallel_size"])
    if r is None:
        return
    mcore, version = state.request.release.megatron_core, state.request.release.version
    grouped = r["moe_router_num_groups"] is not None or r["moe_router_group_topk"] is not None
    if r["load_balancing"] == "quantile_balancing":
        if "moe_router_quantile_balancing_ema" not in releases.bridge_fields(version).get("model", ()):
            bias = (" but the expert bias (moe_router_enable_expert_bias), which still updates" if r["moe_router_enable_expert_bias"] else "")
            yield make("QUANTILE_BALANCING_NOT_IN_RELEASE", version=version, mcore=mcore, bias=bias)
            return
        if r["fusion"] or grouped:
            lines = QB_ASSERT_LINES.get(mcore)
            words, at = (QB_FUSION, 0) if r["fusion"] else (QB_GROUPS, 1)
            what = " and ".join(w for w, on in (("model.moe_router_fusion=true", r["fusion"]),
                                                (_groups_said(r), grouped)) if on)
            c = {"model.moe_router_fusion": False}
            if grouped:
                c.update({"model.moe_router_num_groups": None, "model.moe_router_group_topk": None})
            if r["moe_router_topk_limited_devices"]:
                c["model.moe_router_topk_limited_devices"] = None
            o, fix = fixed(state, "QUANTILE_BALANCING_REFUSED_BY_ROUTER", [c])
            yield make("QUANTILE_BALANCING_REFUSED_BY_ROUTER", fix_overrides=o, fix=fix, what=what, mcore=mcore, words=words,
                       where=f":{lines[at]}" if lines else " TopKRouter.quantile_balancing")
        return  # (quantile balancing never reaches group_limited_topk)
    groups, pick, k, experts = r["moe_router_num_groups"], r["moe_router_group_topk"], r["moe_router_topk"], r["num_moe_experts"]
    if not (groups and pick) or experts % groups or pick > groups or (r["moe_router_topk_limited_devices"] and not r["limited"]):
        return  # (not group-limited, or a config TransformerConfig refuses: the budget's shape says so)
    per = experts // groups
    if k // pick <= per:
        return
    enough = -(-k // per)  # the fewest groups whose experts hold the top-k (and so k // it <= a group's)
    key = "model.moe_router_topk_limited_devices" if r["limited"] else "model.moe_router_group_topk"
    o, fix = fixed(state, "MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE", [{key: enough}] if enough <= groups else [])
    line = GROUP_TOPK_LINE.get(mcore.rpartition(".")[0])
    limited = (f" (model.moe_router_topk_limited_devices={pick} over the {groups} EP ranks: Megatron-Core's TransformerConfig "
               "turns it into group-limited routing)") if r["limited"] else ""
    yield make("MOE_ROUTER_GROUP_TOPK_OUT_OF_RANGE", fix_overrides=o, fix=fix, k=k, pick=pick, groups=groups, per=per,
               experts=experts, need=k // pick, limited=limited,
               fused=(" (the unfused router's; with model.moe_router_fusion=true, as set here, Transformer Engine's "
                      "fused_topk_with_score_function takes the same top experts of each group, unchecked in its "
                      "Python: its CUDA kernel is not run here)") if r["fusion"] else "",
               where=f"megatron/core/transformer/moe/moe_utils.py:{line}" if line else "megatron/core/transformer/moe/moe_utils.py",
               knobs=[key, "model.moe_router_num_groups", "model.moe_router_topk"])


def _groups_said(r: dict) -> str:
    if r["limited"]:
        return f"model.moe_router_topk_limited_devices={r['moe_router_topk_limited_devices']} (group-limited routing)"
    return (f"group-limited routing (moe_router_num_groups {r['moe_router_num_groups']}, moe_router_group_topk "
            f"{r['moe_router_group_topk']})")


@check("FP8_PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER")
def fp8_param_gather_plain_optimizer(state: State):
    """No check in Bridge 0.6.2 or Megatron-Core 0.19.2 (Megatron-LM's own arguments.py refuses it): what the
    non-distributed optimizer does with FP8 parameters is not settled by the code."""
    if state.ddp["fp8_param_gather"] and not state.ddp["use_distributed_optimizer"] and not state.fsdp:
        c = {"ddp.use_distributed_optimizer": True, "optimizer.use_distributed_optimizer": True}
        o, fix = fixed(state, "FP8_PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER", [c])
        yield make("FP8_PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER", fix_overrides=o, fix=fix)
