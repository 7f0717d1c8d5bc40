"""Bridge's own rejections (what runtime_config_update() raises), each with the fix that makes the request resolve."""

from __future__ import annotations

import re

from ... import findings
from ...run import given, layers, layout, resolver
from ...run.launch_env import FSDP_MAX_CONNECTIONS
from .. import Shell, make, shell
from ..proof import fixed
from ...run.request import Request
from ...run.resolver import State
from ..registry import check
from .common import deferral_kept, every_request, owner_key

# What makes each of Bridge's MoE-overlap preconditions hold, by Bridge's message (resolver._MOE_OVERLAP_CHECKS); None:
# only the layout, the model or the precision can (then the fix turns the overlap off).
_MOE_PRECONDITION_FIXES = {
    "overlap_moe_expert_parallel_comm is only supported when moe_token_dispatcher_type == 'alltoall' or 'flex'":
        lambda s: {"model.moe_token_dispatcher_type": "alltoall"},
    "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size > 1":
        lambda s: {"model.virtual_pipeline_model_parallel_size": vpp} if (vpp := layers.interleaved_vpp(s))
        and layers.vpp_checked(s.request) else None,  # (evalX X2-5)
    "disable full recomputation when enabling overlap_moe_expert_parallel_comm":
        lambda s: {"model.recompute_granularity": None, "model.recompute_method": None, "model.recompute_num_layers": None},
    "disable recomputation method when enabling overlap_moe_expert_parallel_comm":
        lambda s: {"model.recompute_method": None, "model.recompute_num_layers": None},
    "recompute_num_layers must be None when enabling overlap_moe_expert_parallel_comm": lambda s: {"model.recompute_num_layers": None},
    "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm":
        lambda s: {"model.recompute_modules": [x for x in s.model["recompute_modules"] or [] if x != "moe"] or ["core_attn"]},
    "disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm": lambda s: {"model.moe_shared_expert_overlap": False},
}


def _moe_fix(state: State, r) -> tuple[list, dict]:
    """First what makes the request resolve with the overlap on (every failing precondition that a config value
    fixes, e.g. model.moe_shared_expert_overlap=false for DeepSeek-V3), then the overlap off."""
    req, off = state.request, {}
    for name in ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute"):
        if req.comm_overlap is not None and req.comm_overlap.get(name):
            off[f"comm_overlap.{name}"] = False
        elif req.comm_overlap is None and req.model.get(name):
            off[f"model.{name}"] = False
    if resolver.given_true(req, resolver.EARLY_RELEASE):  # read only by the overlap's schedule (model_chunk_schedule_plan.py)
        off[resolver.EARLY_RELEASE] = False
    # the check Bridge raised, read on the model as it was then (a layout sets VPP later, at the model's finalize:
    # recheck51 T1), and any other the final model fails
    failing = [message for ok, message in resolver._MOE_OVERLAP_CHECKS if message in r.message or not ok(state.model)]
    fixes = [f(state) if (f := _MOE_PRECONDITION_FIXES.get(message)) else None for message in failing]
    keep = {k: v for f in fixes for k, v in f.items()} if failing and all(f is not None for f in fixes) else {}
    if "must be disabled when enabling overlap_dispatch_backward_with_experts_wgrad" in r.message:
        keep = {resolver.DISPATCH_WITH_WGRAD: False}  # the overlap kept, the other way of hiding the dispatch dropped
    if "requires gradient_accumulation_fusion" in r.message:  # (evalU V2: the overlaps asked for were turned off)
        keep = {**keep, "model.gradient_accumulation_fusion": True}
    return [keep, off], {}


def _defer_off(state: State, r) -> tuple[list, dict]:
    """Deferral kept with a limit Megatron-Core takes where only the limit is wrong (evalT U3), else off."""
    off = {owner_key(state, "defer_embedding_wgrad_compute"): False}
    keep = deferral_kept(state) if "greater than or equal to 0" in r.message else None
    return ([keep] if keep else []) + [off], {}


def _valid_modules(state: State, r) -> tuple[list, dict]:
    """A list is no value a shell takes unquoted: the fix names what to drop, for the user to edit."""
    allowed = resolver.recompute_modules_allowed(state)
    invalid = [m for m in state.model["recompute_modules"] if m not in allowed]
    return [], {"otherwise": shell("drop {invalid} from model.recompute_modules (this Megatron-Core takes {allowed})",
                                   invalid=", ".join(invalid), allowed=Shell(", ".join(allowed)))}


def _reuse_off(state: State, r) -> tuple[list, dict]:
    key = "mixed_precision" if state.request.mixed_precision is not None else "ddp"
    return [{f"{key}.reuse_grad_buf_for_mxfp8_param_ag": False}], {}


def _with_step_off(state: State, r) -> tuple[list, dict]:
    return [every_request(state, "overlap_param_gather_with_optimizer_step", False)], {}


def _batch(state: State, r) -> tuple[list, dict]:
    mbs = state.validation["eval_micro_batch_size"] or state.train["micro_batch_size"]
    key = "validation.eval_global_batch_size" if state.validation["eval_global_batch_size"] else "train.global_batch_size"
    gbs = state.validation["eval_global_batch_size"] or state.train["global_batch_size"]
    step = mbs * state.data_parallel_size
    return [{key: -(-gbs // step) * step}], {}


def _fsdp_connections(state: State, r) -> tuple[list, dict]:
    launcher = state.launcher_env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    if launcher or not state.request.release.env_vars:
        return [], {"origin": "the launcher's environment",
                    "otherwise": shell(f"export CUDA_DEVICE_MAX_CONNECTIONS={FSDP_MAX_CONNECTIONS} in the launcher (not 1)")}
    return [{"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": FSDP_MAX_CONNECTIONS}], {"origin": "env_vars"}


def _fsdp_format(state: State, r) -> tuple[list, dict]:
    which = "save" if state.checkpoint["save"] is not None else "load"
    return [{"checkpoint.ckpt_format": "fsdp_dtensor"}], {"format": state.checkpoint["ckpt_format"], "which": which}


def _gpus(state: State, r) -> tuple[list, dict]:
    shape = layout.Layout.of(state.model, state.gpus)
    return [], {"gpus": state.gpus, "tp": shape.tp, "pp": shape.pp, "cp": shape.cp, "size": shape.model_parallel_size}


def _cp_finetune(state: State, r) -> tuple[list, dict]:
    return [{"model.calculate_per_token_loss": True, "ddp.average_in_collective": False}], {}


def _mxfp8_reuse_on(state: State, r) -> tuple[list, dict]:
    out = {"mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": True}
    if state.optimizer["overlap_param_gather_with_optimizer_step"]:
        out.update(every_request(state, "overlap_param_gather_with_optimizer_step", False))
    return [out], {}


def _cp_comm_type(state: State, r) -> tuple[list, dict]:
    """The ring (p2p) or all-to-all exchange alone needs no hierarchical sizes; a2a+p2p needs sizes whose product is
    CP, which only the user can lay out over their nodes."""
    return [{"model.cp_comm_type": "p2p", "model.hierarchical_context_parallel_sizes": None}], {
        "otherwise": shell("set model.hierarchical_context_parallel_sizes to the a2a and p2p levels, whose product is "
                           "context_parallel_size (for CP 16 as 8 GPUs of a node by 2 nodes: [8, 2])")}


def _constant(state: State, r) -> tuple[list, dict]:
    """The fix that is data: the record's own fix_overrides (none where only the layout can change)."""
    return [dict(findings.record(r.id).get("fix_overrides") or {})], {}


def _flex_backend(state: State, r) -> tuple[list, dict]:
    """A flex backend this GPU runs first, the recipe's own before any other (evalS V7: a DeepEP override on a HybridEP
    GB200 recipe was offered only alltoall, which gives up the recipe's dispatcher), then the record's alltoall."""
    from ...run.flex import refusal

    own = (((state.request.recipe or {}).get("request") or {}).get("model") or {}).get("moe_flex_dispatcher_backend")
    backends = [b for b in dict.fromkeys([own, "hybridep", "deepep"]) if b and refusal(b, state.gpu) is None]
    return [{"model.moe_flex_dispatcher_backend": b} for b in backends] + _constant(state, r)[0], {}


def _rank_capacity(state: State, r) -> tuple[list, dict]:
    """The op fuser on where it is all the hybridep backend lacks, else the factor unset (read only by the hybridep and
    ncclep backends' padding)."""
    off, backend = {resolver.RANK_CAPACITY: None}, state.model["moe_flex_dispatcher_backend"]
    fuser = "use_transformer_engine_op_fuser" in r.message and backend == "hybridep"
    return ([{resolver.OP_FUSER: True}, off] if fuser else [off]), {"backend": backend}


def _flex_sm_counts(state: State, r) -> tuple[list, dict]:
    """The count of the backend the run does not use unset, so the backend's own is the one Megatron-Core routes to
    moe_flex_dispatcher_num_sms: what the run used with Megatron-Core 0.18, and the count Bridge's own migration of a
    checkpoint's model config keeps (0.6.2 training/model_load_save.py _normalize_moe_dispatcher_sm_config: hybridep's
    for the hybridep backend, else DeepEP's). Setting moe_flex_dispatcher_num_sms would fix it too, but it is a key on
    the overlap path this answer does not model (UNMODELED_OVERLAP_KEY), so it is named in the text only."""
    backend = state.model["moe_flex_dispatcher_backend"]
    kept = "moe_hybridep_num_sms" if backend == "hybridep" else "moe_deepep_num_sms"
    other = next(n for n in resolver.DEPRECATED_SM_COUNTS if n != kept)
    sms = resolver.sm_counts(state.request)[kept]
    return [{f"model.{other}": None}], {"backend": backend, "sms": sms, "otherwise": shell(
        "set model.moe_flex_dispatcher_num_sms to the SM count the flex dispatcher should use")}


_LAYERS_REFUSED = re.compile(r"Invalid layer character|must be embedding|must be loss|specified exactly once|"
                             r"must match num_layers|mtp layers|before MTP|MTP should be|MTP layers must|Encoder layer|"
                             r"hold no layer|not a valid LayerType|must be LayerType")


def _layout(state: State, r) -> tuple[list, dict]:
    """With a pipeline_model_parallel_layout, the VPP its stages give (or none: the layout sets it), which the message
    names (evalT U2: no fix was offered, and the text named keys Megatron-Core refuses beside a layout); without one,
    the first and last stages' layer counts."""
    layout = state.request.context.get("model.pipeline_model_parallel_layout")
    if "cannot beset at the same time" in r.message:  # counts beside account_for_* (recheck55 AB3): keep one way
        off = {f"model.account_for_{k}_in_pipeline_split": False for k in ("embedding", "loss")}
        counts = {f"model.num_layers_in_{k}_pipeline_stage": None for k in ("first", "last")}
        return [off, counts], {"otherwise": shell("either the first and last stages' layer counts or account_for_*, not both")}
    if layout is None:  # (null only: "none" is a layout Megatron-Core refuses, fuzzV V2-3)
        return [], {"otherwise": shell(
            "layer counts for the first and last stages (model.num_layers_in_first/last_pipeline_stage) that leave the "
            "middle stages an even share, each a multiple of the virtual pipeline size")}
    if _LAYERS_REFUSED.search(r.message):  # the layers it places (validate_layer_layout, parse_str_to_list: fuzzU U2-1)
        return [], {"otherwise": shell(
            "a layout whose layers Megatron-Core takes: only E, L, t and m in a string; the embedding first and the loss "
            "last, once each; as many decoder layers (t) as model.num_layers and MTP layers (m) as model.mtp_num_layers, "
            "after the decoders, all in one stage that is the last virtual stage of its pipeline rank")}
    detected = re.search(r"detected_vpp_size=(\d+)", r.message)
    vpp = [{"model.virtual_pipeline_model_parallel_size": int(detected[1])},
           {"model.virtual_pipeline_model_parallel_size": None}] if detected else []
    return vpp, {"otherwise": shell(
        "a layout of PP x VPP stages, or a pipeline_model_parallel_size that divides its stages (beside a layout "
        "Megatron-Core refuses num_layers_in_first/last_pipeline_stage and account_for_*_in_pipeline_split)")}


# evalAF AF-2: a file whose layout Bridge 0.5.x saved without its arguments (real 0.5.1 takes the file with the
# recipe's layout given beside it: process_config_with_overrides, then runtime_config_update, dp 32)
_LOST_LAYOUT_FIX = ("give the layout the run used, model.pipeline_model_parallel_layout=... (the one the run's recipe set "
                    "for its PP and VPP, e.g. DeepSeek-V3's set_deepseek_v3_pipeline_model_parallel_layout), on the command "
                    "line beside the file, or analyse the recipe the run came from (--recipe) instead of its saved config")
REJECTION_FIXES = {
    "GPUS_NOT_DIVISIBLE": _gpus,
    "FP4_WITH_FP8": _constant,
    "MOE_OVERLAP_REJECTED": _moe_fix,
    "DEFER_EMBEDDING_WGRAD_REJECTED": _defer_off,
    "FP8_PARAM_GATHER_WITHOUT_FP8": _constant,
    "RECOMPUTE_MODULES_REJECTED": _valid_modules,
    "FP4_PARAM_GATHER_WITHOUT_FP4": _constant,
    "MXFP8_REUSE_WITHOUT_FP8_PARAM_GATHER": _reuse_off,
    "NUM_BUCKETS_WITH_BUCKET_SIZE": _constant,
    "MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP": _with_step_off,
    "MXFP8_PARAM_GATHER_WITHOUT_REUSE": _mxfp8_reuse_on,
    "BATCH_NOT_DIVISIBLE_BY_DP": _batch,
    "FSDP_BOTH_KINDS": _constant,
    "FSDP_NEEDS_FSDP_DTENSOR": _fsdp_format,
    "FSDP_WITH_ONE_CONNECTION": _fsdp_connections,
    "FSDP_MANUAL_REGISTRATION_WITHOUT_NCCL_UB": _constant,
    "FSDP_WITH_TP_PP_DP_MAPPING": _constant,
    "FULL_ITERATION_GRAPH_NAN_CHECK": _constant,
    "FSDP_DTENSOR_WITHOUT_FSDP": _constant,
    "CP_FINETUNE_AVERAGE_IN_COLLECTIVE": _cp_finetune,
    "FLEX_DISPATCHER_NOT_ON_THIS_GPU": _flex_backend,
    "FLEX_SM_COUNTS_CONFLICT": _flex_sm_counts,
    # the backend's default: every Megatron-Core 0.19.2 site that reads the backend reads it with the flex dispatcher
    # only (token_dispatcher.py, moe_utils.py:1425, models/common/utils.py, fine_grained_callables.py)
    "NCCLEP_NEEDS_FLEX_DISPATCHER": lambda state, r: (_constant(state, r)[0], {"dispatcher": state.model["moe_token_dispatcher_type"]}),
    # the flag off: it only sets the backend to deepep, which the flex dispatcher alone reads (the backend asked is kept)
    "MOE_ENABLE_DEEPEP_REJECTED": lambda state, r: ([{resolver.DEEPEP_FLAG: False}], {
        "dispatcher": state.model["moe_token_dispatcher_type"], "backend": state.model["moe_flex_dispatcher_backend"]}),
    # DeepEP kept without the padding (the capacity factor still drops), else the dispatcher that pads
    "DEEPEP_PAD_TO_CAPACITY_REJECTED": lambda state, r: ([{resolver.PAD_TO_CAPACITY: False},
                                                          {"model.moe_token_dispatcher_type": "alltoall"}], {}),
    "EXPERT_RANK_CAPACITY_REJECTED": _rank_capacity,
    "CUDA_GRAPH_LOCAL_SCOPED": _constant,
    "EXPERT_PARALLEL_WITHOUT_EXPERTS": _constant,
    "MOE_BIAS_NEEDS_EXPERT_TP_ONE": _constant,
    "BF16_LAYERS_REJECTED": _constant,
    "CP_SEQUENCE_NOT_DIVISIBLE": _constant,
    "CP_HIERARCHICAL_SIZES_INVALID": _cp_comm_type,
    "PIPELINE_LAYOUT_REJECTED": _layout,
    "RUN_CONFIG_LAYOUT_LOST": lambda state, r: ([], {"otherwise": shell(_LOST_LAYOUT_FIX)}),
    "SEQ_LENGTH_DATASET_MISMATCH": lambda state, r: _seq_length_fix(state),
    # the first that holds: the in-batch packing asked over the recipe's offline one dropped, offline packing with its
    # specs, without them; a value that is no specs (false, 0, a text: fuzzW W2-6) unset with null, the one value an
    # override gives offline_packing_specs (an object: no override sets one)
    "DATASET_PACKING_REJECTED": lambda state, r: ([
        {"dataset.enable_in_batch_packing": False}, {"dataset.enable_offline_packing": True},
        {"dataset.enable_in_batch_packing": False, "dataset.enable_offline_packing": True},
        {"dataset.enable_offline_packing": False}, {"dataset.offline_packing_specs": None},
        {"dataset.enable_offline_packing": False, "dataset.offline_packing_specs": None}], {}),
}


def _seq_length_fix(state: State):
    """The side the user did not set moved to the side the user set (evalAE AE2-2): where the config file or the command
    line set only the dataset's length (the model's is its provider class's default or the recipe's), the model's set to
    the dataset's (for a model a config file's model._target_ builds, the word is ++model.seq_length: Bridge's struct
    config holds only the file's model keys, findings.overrides_text); where the user set only the model's, or both,
    or neither, the dataset's set to the model's (then the model's as the other candidate), except where the model's is
    a config file's model._target_ class's default (GPTModelProvider's 1024) and the dataset's the base config's
    GPTDatasetConfig 4096 (recheck67 AN-1: a file without a dataset section): the model's is set to the dataset's, as
    Bridge's command line takes it (++model.seq_length=4096), as every recipe runs. Where the model's was set to null
    (recheck66 AM-4), the model's set to the dataset's."""
    req, seq = state.request, state.model["seq_length"]
    data = given.integer("dataset.seq_length", req.context.get("dataset.seq_length"))
    if seq is None:
        return [{"model.seq_length": data}], {}
    to_model, to_data = {"model.seq_length": data}, {_dataset_seq_key(state): seq}
    default = req.model_seq_length_of is not None  # the model's the provider class's default, never the user's
    if (dataset_seq_set(req) or default) and req.origin.get("model.seq_length") not in ("config", "override") \
            and data is not None:
        return [to_model, to_data], {}
    return [to_data], {}


def dataset_seq_set(request) -> bool:
    """Whether the config file or the command line set the length validate() compares with the model's (0.5.x's
    dataset.sequence_length is recorded under dataset.seq_length, request._set_plain)."""
    return request.origin.get("dataset.seq_length") in ("config", "override")


def _dataset_seq_key(state: State) -> str:
    return state.request.dataset_seq_word()


@check(*REJECTION_FIXES)
def rejections(state: State):
    for r in state.rejections:
        candidates, extra = REJECTION_FIXES[r.id](state, r)
        otherwise = extra.pop("otherwise", shell("change the layout (no config override fixes it)"))
        params = {**_rejection_params(state), **extra}
        o, fix = fixed(state, r.id, candidates, otherwise)
        yield make(r.id, fix_overrides=o, where=r.where, bridge=r.message, reason=r.message, **params, fix=fix)


def _rejection_params(state: State):
    """Extra template values some rejection records name."""
    model = state.model
    return {"gpu": state.gpu, "seq": model["seq_length"], "cp": model["context_parallel_size"]}


@check("RECIPE_REJECTED_OUTSIDE_OVERLAP")
def recipe_outside_overlap(state: State):
    entry = state.request.recipe
    error = (entry or {}).get("bridge", {}).get("error")
    if not error or any(r.message in error for r in state.rejections) or _modeled_error(state.request.release, entry):
        return
    yield make("RECIPE_REJECTED_OUTSIDE_OVERLAP", version=state.request.release.version, recipe=entry["name"],
               gpus=entry["bridge"]["gpus"], bridge=error)


_MODELED: dict = {}


def _modeled_error(release, entry: dict) -> bool:
    """Whether the error real Bridge raised for the recipe as shipped is one the resolver raises for it too (then a
    request that no longer earns it has fixed it, and it is not outside the overlap path)."""
    key = (release.version, entry["package"], entry["name"])
    if key not in _MODELED:
        shipped = resolver.run(Request.from_recipe(release, entry), entry["bridge"]["gpus"], True, entry.get("gpu"), {})
        _MODELED[key] = any(r.message in entry["bridge"]["error"] for r in shipped.rejections)
    return _MODELED[key]
