"""The config fields the resolver models, with their types and Bridge's baseline values.

The baseline is what `recipes/common.py::_pretrain_common()` builds (comm_overlap None, mixed_precision
"bf16_mixed", its ddp settings, the optimizer of `distributed_fused_adam_with_cosine_annealing`), on top of
the dataclass defaults of Megatron-Core 0.19 (ModelParallelConfig, DistributedDataParallelConfig,
OptimizerConfig) and CommOverlapConfig. tests/bridge checks every value here against the installed package.
"""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs a cold start about 2 ms
    from typing import Any

BOOL, INT, OPT_INT, OPT_BOOL, CHOICE, PRESET = "bool", "int", "opt_int", "opt_bool", "choice", "preset"
OPT_CHOICE, OPT_PATH, STR_LIST = "opt_choice", "opt_path", "str_list"


@dataclass(frozen=True)
class Field:
    kind: str
    default: Any = None
    choices: tuple = ()
    minimum: int | None = 1  # for integers: the smallest value Bridge accepts (None: any)
    since: str | None = None  # the first release whose config has the field (None: every release listed)
    text: bool = False  # for a list: one name is taken too (Megatron-Core makes it a list)


_BACKENDS = ("nccl", "mpi", "gloo")
_DISPATCHERS = ("allgather", "alltoall", "flex")
_FLEX_BACKENDS = ("deepep", "hybridep", "ncclep")
_CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
_SHARDING = ("no_shard", "optim", "optim_grads", "optim_grads_params")
_CKPT_FORMATS = ("torch_dist", "fsdp_dtensor", "zarr", "torch")

MODEL = {
    "tensor_model_parallel_size": Field(INT, 1),
    "pipeline_model_parallel_size": Field(INT, 1),
    "virtual_pipeline_model_parallel_size": Field(OPT_INT, None),
    "microbatch_group_size_per_vp_stage": Field(OPT_INT, None),  # None: PP (Megatron-Core's __post_init__)
    "context_parallel_size": Field(INT, 1),
    "sequence_parallel": Field(BOOL, False),
    "tp_comm_overlap": Field(BOOL, False),
    "overlap_p2p_comm": Field(BOOL, False),
    "batch_p2p_comm": Field(BOOL, True),
    "tp_comm_bootstrap_backend": Field(CHOICE, "nccl", _BACKENDS),
    "expert_model_parallel_size": Field(INT, 1),
    "expert_tensor_parallel_size": Field(OPT_INT, None),  # None: Bridge makes it 1 with EP > 1, else TP (finalize)
    "num_moe_experts": Field(OPT_INT, None),
    "moe_token_dispatcher_type": Field(CHOICE, "allgather", _DISPATCHERS),
    "moe_flex_dispatcher_backend": Field(OPT_CHOICE, "deepep", _FLEX_BACKENDS),
    "moe_shared_expert_overlap": Field(BOOL, False),
    "overlap_moe_expert_parallel_comm": Field(BOOL, False),
    "delay_wgrad_compute": Field(BOOL, False),
    "cuda_graph_impl": Field(CHOICE, "none", _CUDA_GRAPH_IMPLS),
    "cuda_graph_scope": Field(STR_LIST, None, text=True),
    "cuda_graph_modules": Field(STR_LIST, "full", text=True),  # Megatron-Core's default: the legacy "full" (no per-layer modules)
    "defer_embedding_wgrad_compute": Field(BOOL, False),
    "wgrad_deferral_limit": Field(INT, 0, minimum=None),
    "gradient_accumulation_fusion": Field(BOOL, True),
    "recompute_granularity": Field(OPT_CHOICE, None, ("full", "selective")),
    "recompute_method": Field(OPT_CHOICE, None, ("uniform", "block")),
    "recompute_num_layers": Field(OPT_INT, None),
    "recompute_modules": Field(STR_LIST, None),
    "mtp_num_layers": Field(OPT_INT, None, minimum=0),
    "add_bias_linear": Field(BOOL, True),
    "add_qkv_bias": Field(BOOL, False),
    "seq_length": Field(OPT_INT, None),
    "hidden_size": Field(OPT_INT, None),  # the model's own; unknown (None) unless the request says (presets are tuned per size)
    "calculate_per_token_loss": Field(BOOL, False),
}

DDP = {
    "use_distributed_optimizer": Field(BOOL, True),
    "overlap_grad_reduce": Field(BOOL, True),
    "overlap_param_gather": Field(BOOL, True),
    "bucket_size": Field(OPT_INT, None),
    "num_buckets": Field(OPT_INT, None),
    "align_param_gather": Field(BOOL, False),
    "grad_reduce_in_fp32": Field(BOOL, True),
    "fp8_param_gather": Field(BOOL, False),
    "reuse_grad_buf_for_mxfp8_param_ag": Field(BOOL, False),
    "use_megatron_fsdp": Field(BOOL, False),
    "data_parallel_sharding_strategy": Field(CHOICE, "optim_grads_params", _SHARDING),
    "average_in_collective": Field(BOOL, True),
    "disable_symmetric_registration": Field(BOOL, False),
    "nccl_ub": Field(BOOL, False),
    "fsdp_manual_registration": Field(BOOL, False),
    "num_distributed_optimizer_instances": Field(INT, 1),
}

OPTIMIZER = {
    "use_distributed_optimizer": Field(BOOL, True),
    "overlap_param_gather": Field(BOOL, False),
    "overlap_param_gather_with_optimizer_step": Field(BOOL, False),
    "reuse_grad_buf_for_mxfp8_param_ag": Field(BOOL, False),
}

# DistributedInitConfig: Megatron-FSDP is switched on here or on ddp (validate() turns on both).
DIST = {
    "use_megatron_fsdp": Field(BOOL, False),
    "use_torch_fsdp2": Field(BOOL, False),
    "use_tp_pp_dp_mapping": Field(BOOL, False),
    "lazy_mpu_init": Field(BOOL, False),  # skips _initialize_tp_communicators (Transformer Engine's initialize_ub)
}

# The dataset config's fields that decide whether every micro-batch has the same number of tokens (userbuffers hold
# seq_length x micro_batch_size / CP of them). pad_to_max_length None: the dataset config has no such field.
DATASET = {
    "pad_to_max_length": Field(OPT_BOOL, None, since="0.6.0"),
    "enable_in_batch_packing": Field(BOOL, False, since="0.6.0"),
    "enable_offline_packing": Field(BOOL, False, since="0.6.0"),
}

# CheckpointConfig: Megatron-FSDP needs ckpt_format=fsdp_dtensor when a checkpoint is saved or loaded.
CHECKPOINT = {
    "ckpt_format": Field(CHOICE, "torch_dist", _CKPT_FORMATS),
    "save": Field(OPT_PATH, "set"),
    "load": Field(OPT_PATH, "set"),
}

# CommOverlapConfig fields. None means "not requested": Bridge then picks the value.
COMM_OVERLAP = {
    "tp_comm_overlap": Field(BOOL, False),
    "tp_comm_overlap_cfg": Field(PRESET, None),
    "tp_comm_bootstrap_backend": Field(CHOICE, "nccl", _BACKENDS),
    "overlap_p2p_comm": Field(OPT_BOOL, None),
    "batch_p2p_comm": Field(OPT_BOOL, None),
    "overlap_grad_reduce": Field(OPT_BOOL, None),
    "overlap_param_gather": Field(OPT_BOOL, None),
    "overlap_param_gather_with_optimizer_step": Field(OPT_BOOL, None),
    "align_param_gather": Field(OPT_BOOL, None),
    "bucket_size": Field(OPT_INT, None),
    # Written onto the model like the TP/PP fields; their tuning belongs to the MoE and pipeline skills, but Bridge's
    # assertions on them decide whether the config is accepted.
    "overlap_moe_expert_parallel_comm": Field(OPT_BOOL, None),
    "delay_wgrad_compute": Field(OPT_BOOL, None),
    "defer_embedding_wgrad_compute": Field(OPT_BOOL, None),
    "wgrad_deferral_limit": Field(OPT_INT, None, minimum=0),
}

# Set by Bridge from the world size (ConfigContainer.set_data_parallel_size); a requested value is overwritten.
COMM_OVERLAP_COMPUTED = ("data_parallel_size",)

# MixedPrecisionConfig fields that reach the fields we resolve (setup() copies them onto ddp/optimizer).
MIXED_PRECISION = {
    "grad_reduce_in_fp32": Field(BOOL),
    "fp8_param_gather": Field(BOOL),
    "reuse_grad_buf_for_mxfp8_param_ag": Field(BOOL),
    "fp8_recipe": Field(CHOICE, None, ("tensorwise", "delayed", "mxfp8", "blockwise")),
    "fp8": Field(OPT_CHOICE, None, ("hybrid", "e4m3")),
    "fp4": Field(OPT_CHOICE, None, ("e2m1",)),
    "fp4_param_gather": Field(BOOL),
    "bf16": Field(BOOL),
    "fp16": Field(BOOL),
    "first_last_layers_bf16": Field(BOOL),
    "num_layers_at_start_in_bf16": Field(INT, minimum=None),
    "num_layers_at_end_in_bf16": Field(INT, minimum=None),
}

# Batch sizes: unknown (None) unless a recipe, run config or override gives them; then validate()'s divisibility
# check by micro batch x DP applies.
TRAIN = {"micro_batch_size": Field(OPT_INT, None), "global_batch_size": Field(OPT_INT, None)}
VALIDATION = {"eval_micro_batch_size": Field(OPT_INT, None), "eval_global_batch_size": Field(OPT_INT, None)}
# RerunStateMachineConfig: a full-iteration CUDA graph needs the NaN check off.
RERUN_STATE_MACHINE = {"check_for_nan_in_loss": Field(BOOL, True)}

SECTIONS = {"model": MODEL, "ddp": DDP, "optimizer": OPTIMIZER, "dist": DIST, "checkpoint": CHECKPOINT,
            "train": TRAIN, "validation": VALIDATION, "rerun_state_machine": RERUN_STATE_MACHINE, "dataset": DATASET}

BASELINE_MIXED_PRECISION = "bf16_mixed"
# What Bridge's recipe baseline (_pretrain_common()) holds beside the modelled fields: a GPTDatasetConfig of
# sequence length 4096, which validate() compares with the model's (tests/bridge/test_release_data.py)
BASELINE_CONTEXT = {"dataset.seq_length": 4096, "dataset.seq_length_checked": True}

# Names a user may reach for when they mean launch environment; none is a CommOverlapConfig field.
LAUNCH_ENV_NAMES = {
    "cuda_device_max_connections": "CUDA_DEVICE_MAX_CONNECTIONS",
    "layernorm_sm_margin": "NVTE_FWD_LAYERNORM_SM_MARGIN",
    "enable_layernorm_sm_margin": "NVTE_FWD_LAYERNORM_SM_MARGIN",
    "nvte_fwd_layernorm_sm_margin": "NVTE_FWD_LAYERNORM_SM_MARGIN",
    "nvte_bwd_layernorm_sm_margin": "NVTE_BWD_LAYERNORM_SM_MARGIN",
    "nccl_pp_comm_chunksize": "NCCL_P2P_NET_CHUNKSIZE",
    "nccl_p2p_net_chunksize": "NCCL_P2P_NET_CHUNKSIZE",
}

# Every effective field the resolver reports, in output order.
EFFECTIVE_FIELDS = {
    "model": [
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "context_parallel_size",
        "sequence_parallel",
        "tp_comm_overlap",
        "tp_comm_overlap_cfg",
        "tp_comm_bootstrap_backend",
        "overlap_p2p_comm",
        "batch_p2p_comm",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "moe_token_dispatcher_type",
        "moe_flex_dispatcher_backend",
        "overlap_moe_expert_parallel_comm",
        "delay_wgrad_compute",
        "defer_embedding_wgrad_compute",
        "wgrad_deferral_limit",
        "fp8",
        "fp8_recipe",
        "fp8_param",
        "fp4",
        "fp4_param",
    ],
    "ddp": [
        "use_distributed_optimizer",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "bucket_size",
        "align_param_gather",
        "grad_reduce_in_fp32",
        "fp8_param_gather",
        "reuse_grad_buf_for_mxfp8_param_ag",
        "use_megatron_fsdp",
        "average_in_collective",
        "nccl_ub",
        "fsdp_manual_registration",
    ],
    "optimizer": [
        "use_distributed_optimizer",
        "overlap_param_gather",
        "overlap_param_gather_with_optimizer_step",
        "reuse_grad_buf_for_mxfp8_param_ag",
    ],
    "dist": ["use_megatron_fsdp"],
    "checkpoint": ["ckpt_format"],
}

# The fields that lay the layers over the pipeline stages other than evenly (Bridge's GPTModelProvider.provide calls
# such a layout flexible and leaves its VPP check to Megatron-Core's)
LAYOUT_KEY = "model.pipeline_model_parallel_layout"  # an override's word read as Hydra reads it (run/request.py)
PIPELINE_LAYOUT = ("pipeline_model_parallel_layout", "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage",
                   "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")

# What the recipe catalog records of each recipe (tools/gen_recipe_catalog.py): every modeled field, and these
# fields the rules or the listing read without resolving them.
CONTEXT = {
    "model": ["num_layers", "moe_shared_expert_intermediate_size", "cp_comm_type", "hierarchical_context_parallel_sizes",
              *PIPELINE_LAYOUT],
    "ddp": ["fsdp_double_buffer", "outer_dp_sharding_strategy",
            "suggested_communication_unit_size"],
    "optimizer": ["optimizer", "use_precision_aware_optimizer"],
    "rng": ["te_rng_tracker"],
    # sft: a fine-tuning dataset config (validate() checks CP against it); seq_length_checked: validate() compares the
    # dataset's seq_length with the model's (its dataset class is one of those validate() names; bridge/recipes.py);
    # offline_packing_specs: whether the recipe sets them (validate() checks the packing flags against it)
    "dataset": ["sft", "seq_length", "seq_length_checked", "offline_packing_specs"],
}
# Context fields whose only fact a rule reads is whether they are set (not None), as ConfigContainer.validate() checks
# them: held as true or false whoever sets them (the recipe catalog's record, a config's mapping or null, an override's
# null), never read past (evalAA AA-2: the text "null" was taken as set specs).
SET_OR_NOT = frozenset({"dataset.offline_packing_specs"})
# Fields a config's value of is read (a rule names it) but the recipe catalog does not record: a recipe's model comes
# from its checkpoint's config, which the offline stand-in lacks (multi-latent attention: TP_OVERLAP_OFF_MLA, which
# knows a recipe's from its model family instead); the op fuser, which TP_OVERLAP_OFF_MTP reads; the flex dispatcher's
# SM counts, which FLEX_SM_COUNTS_CONFLICT reads (resolver.sm_counts: not judged where a recipe builds the model); the
# MoE flags of TransformerConfig.__post_init__'s refusals (MOE_ENABLE_DEEPEP_REJECTED, DEEPEP_PAD_TO_CAPACITY_REJECTED,
# EXPERT_RANK_CAPACITY_REJECTED with the capacity checks before it, MOE_OVERLAP_REJECTED's EP-overlap companions).
CONFIG_READ = frozenset({"model.multi_latent_attention", "model.use_transformer_engine_op_fuser", "model.moe_flex_dispatcher_num_sms",
                         "model.moe_deepep_num_sms", "model.moe_hybridep_num_sms", "model.moe_enable_deepep",
                         "model.moe_pad_expert_input_to_capacity", "model.moe_expert_rank_capacity_factor",
                         "model.moe_router_load_balancing_type", "model.moe_aux_loss_coeff", "model.moe_expert_capacity_factor",
                         "model.ep_overlap_early_attn_memory_release", "model.overlap_dispatch_backward_with_experts_wgrad"})
RECORDED = {s: sorted(set(SECTIONS.get(s, {})) | set(CONTEXT.get(s, ()))) for s in dict.fromkeys([*SECTIONS, *CONTEXT])}
