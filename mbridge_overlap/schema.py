"""The config fields the resolver models, with their types and Bridge's baseline values.

The baseline is what `recipes/common.py::_pretrain_common()` builds (comm_overlap None, mixed_precision
"bf16_mixed", its ddp settings, the optimizer of `distributed_fused_adam_with_cosine_annealing`), on top of
the dataclass defaults of Megatron-Core 0.19 (ModelParallelConfig, DistributedDataParallelConfig,
OptimizerConfig) and CommOverlapConfig. tests/bridge checks every value here against the installed package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOOL, INT, OPT_INT, OPT_BOOL, CHOICE, PRESET = "bool", "int", "opt_int", "opt_bool", "choice", "preset"
OPT_CHOICE = "opt_choice"


@dataclass(frozen=True)
class Field:
    kind: str
    default: Any = None
    choices: tuple = ()


_BACKENDS = ("nccl", "mpi", "gloo")

MODEL = {
    "tensor_model_parallel_size": Field(INT, 1),
    "pipeline_model_parallel_size": Field(INT, 1),
    "virtual_pipeline_model_parallel_size": Field(OPT_INT, None),
    "context_parallel_size": Field(INT, 1),
    "sequence_parallel": Field(BOOL, False),
    "tp_comm_overlap": Field(BOOL, False),
    "overlap_p2p_comm": Field(BOOL, False),
    "batch_p2p_comm": Field(BOOL, True),
    "tp_comm_bootstrap_backend": Field(CHOICE, "nccl", _BACKENDS),
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
}

OPTIMIZER = {
    "use_distributed_optimizer": Field(BOOL, True),
    "overlap_param_gather": Field(BOOL, False),
    "overlap_param_gather_with_optimizer_step": Field(BOOL, False),
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
}

# CommOverlapConfig fields that belong to other skills; accepted only when unset (None or False).
COMM_OVERLAP_OUT_OF_SCOPE = {
    "defer_embedding_wgrad_compute": "pipeline bubble overlap (needs gradient_accumulation_fusion)",
    "wgrad_deferral_limit": "pipeline bubble overlap",
    "overlap_moe_expert_parallel_comm": "MoE expert-parallel overlap: see the nemo-mbridge-perf-moe-comm-overlap skill",
    "delay_wgrad_compute": "MoE expert-parallel overlap: see the nemo-mbridge-perf-moe-comm-overlap skill",
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
}

SECTIONS = {"model": MODEL, "ddp": DDP, "optimizer": OPTIMIZER}

BASELINE_MIXED_PRECISION = "bf16_mixed"

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
    ],
    "ddp": [
        "use_distributed_optimizer",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "bucket_size",
        "align_param_gather",
        "grad_reduce_in_fp32",
        "fp8_param_gather",
    ],
    "optimizer": [
        "use_distributed_optimizer",
        "overlap_param_gather",
        "overlap_param_gather_with_optimizer_step",
    ],
}
