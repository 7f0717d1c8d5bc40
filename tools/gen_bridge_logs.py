"""Training logs produced by real Megatron-Bridge on this CPU-only machine, for the `diagnose` tests.

Each scenario is a Bridge pretraining launch with a communication-overlap config: the real training entry point,
`megatron.bridge.training.pretrain.pretrain(cfg, forward_step)` with the GPT forward step Bridge ships, run until it
fails. It fails at config time (runtime_config_update() rejects the config) or at setup, where Bridge's
initialize_megatron() asserts CUDA (this machine has no GPU); runs that pass config time carry Bridge's config-time
warnings and its "Configuration Summary" block. The captured stdout+stderr is normalised (paths, timestamps, PIDs,
addresses, host names) and written to tests/data/logs/bridge-0.6.2/<scenario>.log, with manifest.yaml saying for
each scenario its overrides (Bridge dotted keys), world size, launcher, the expected cause (the project's finding id)
and knobs, where it failed and the error's first line. Run with the Bridge venv's python:

    $(scripts/bridge_env.sh --print-python) tools/gen_bridge_logs.py [--check] [--only NAME ...]
    python3 tools/gen_bridge_logs.py --upstream [--check]

--check regenerates into a temporary folder and compares with the committed files (exit 1 on a difference, naming
the files); tests/bridge/test_bridge_logs.py runs it.

How each scenario is launched (manifest `launch`):
  fork         one process imports the training script's modules once, then forks a child per scenario that runs
               the training script (runpy, as __main__) with the scenario's environment and stdout+stderr on the
               log file; the import-time output of the parent is the head of every such log. It is rank 0 of a
               WORLD_SIZE=N launch: every config-time path runs before any process group exists, so no other rank
               is needed to reach the failure. (--check compares one scenario also run as `python` to prove the
               text is the same.)
  python       `python train.py scenario.json`, a fresh interpreter, as a single-process launch.
  torchrun     `torchrun --nproc_per_node 2 --tee 3 ...`: two real ranks on the CPU, lines prefixed [default0]:
               and [default1]: by torchrun; with init_gloo the script creates a gloo process group first, so
               uncaught tracebacks carry torch's [rankN]: prefix too. torchrun tails each rank's stdout and
               stderr separately, so lines interleave by timing: --check compares a torchrun log's lines as a
               sorted list (every line, not their order). MONITOR_INTERVAL makes torchrun look at its workers
               only after both have exited, so neither is killed half-way by the other's failure; when a poll
               still falls between the two exits (a loaded machine), the scenario runs again (TORCHRUN_TRIES),
               and where it still did, each rank's lines of one run are to be among the other's (same_torchrun).
  entry initialize_tp_communicators: after runtime_config_update() the script calls the function Bridge's
               initialize_megatron() calls for TP overlap (megatron.bridge.training.initialize.
               _initialize_tp_communicators), because pretrain() stops at its CUDA assert before reaching it on a CPU
               machine; Transformer Engine's initialize_ub() then fails at its first CUDA call.

--upstream writes tests/data/logs/upstream/<id>.log from tests/data/logs/upstream/manifest.yaml: each error text
quoted in a public upstream thread (verbatim, unmarked) inside generated lines around it (launcher and NCCL start-up
lines, other ranks' output, iteration lines, a few ANSI-coloured lines), deterministic per id; it needs neither torch
nor Bridge, and `--check --upstream` compares only those (plain --check compares both).

nvidia_resiliency_ext is not in the pinned venv; pretrain.py imports `CallWrapper` from it for a type annotation
only, so when the package is missing a one-class stub is put on PYTHONPATH (recorded in the manifest).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import generated  # noqa: E402

OUT = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2"
UPSTREAM = ROOT / "tests" / "data" / "logs" / "upstream"
BRIDGE_VERSION = "0.6.2"
MASTER_PORT = 29641
MONITOR_INTERVAL = 60  # torchrun polls its workers this often: both ranks have exited by the first poll
TORCHRUN_TRIES = 3  # a poll between the two ranks' exits (a loaded machine) stops the slower one: run it again

# The training script, as a user writes it: imports, a config built from Bridge's recipe baseline with a small GPT
# provider, the scenario's overrides, then Bridge's pretrain() with Bridge's GPT forward step. HEADER is also what the
# fork parent imports before forking. Its text is part of every traceback: change it and regenerate.
HEADER = '''\
"""A Megatron-Bridge pretraining launch for one communication-overlap scenario (tools/gen_bridge_logs.py)."""
import json
import os
import sys

import torch
from megatron.bridge.models import GPTModelProvider
from megatron.bridge.recipes.common import _pretrain_common
from megatron.bridge.training import comm_overlap, mixed_precision
from megatron.bridge.training.config import MockGPTDatasetConfig, TokenizerConfig, runtime_config_update
from megatron.bridge.training.gpt_step import forward_step
from megatron.bridge.training.pretrain import pretrain
'''
BODY = '''
MODEL = dict(num_layers=4, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, seq_length=128,
             vocab_size=1024, make_vocab_size_divisible_by=128)


def build_config(overrides):
    cfg = _pretrain_common()
    cfg.model = GPTModelProvider(**MODEL)
    cfg.tokenizer = TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=MODEL["vocab_size"])
    cfg.dataset = MockGPTDatasetConfig(seq_length=MODEL["seq_length"], random_seed=1234, reset_position_ids=False,
                                       reset_attention_mask=False, eod_mask_loss=False, num_workers=1)
    cfg.train.micro_batch_size = 1
    cfg.train.global_batch_size = 8
    cfg.train.train_iters = 10
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if section == "comm_overlap":
            if cfg.comm_overlap is None:
                cfg.comm_overlap = comm_overlap.CommOverlapConfig(tp_comm_overlap=False)
            setattr(cfg.comm_overlap, name, value)
        elif section == "mixed_precision":
            if not name:
                cfg.mixed_precision = value
            else:
                cfg.mixed_precision = mixed_precision.get_mixed_precision_config(cfg.mixed_precision)
                setattr(cfg.mixed_precision, name, value)
        elif section == "env_vars":
            cfg.env_vars[name] = value
        else:
            setattr(getattr(cfg, section), name, value)
    return cfg


scenario = json.loads(open(sys.argv[1]).read())
if scenario.get("init_gloo"):
    torch.distributed.init_process_group("gloo")
cfg = build_config(scenario["overrides"])
if scenario.get("entry") == "initialize_tp_communicators":
    from megatron.bridge.training.initialize import _initialize_tp_communicators

    runtime_config_update(cfg)
    _initialize_tp_communicators(cfg.model, cfg.train.micro_batch_size)
else:
    pretrain(cfg, forward_step)
'''
STUB = "class CallWrapper:  # stub: megatron/bridge/training/pretrain.py uses it only as a type annotation\n    pass\n"

FSDP = {"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "fsdp_dtensor"}
TP2_SP = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True}
NO_TP = {"comm_overlap.tp_comm_overlap": False}

# name: scenario. overrides: Bridge dotted keys as in tools/gen_run_configs.py (mixed_precision: a recipe name);
# env: the launcher's exports; expect: lines the log must contain (checked when generating); finding: the project's
# finding id (mbridge_overlap/data/findings.yaml) or null; knobs: the config keys or launch settings behind it.
SCENARIOS: dict[str, dict] = {
    # ---- FSDP (config time) ----
    "fsdp_one_connection_env_vars": dict(
        topic="fsdp", overrides={**FSDP, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1}, world_size=8,
        finding="FSDP_WITH_ONE_CONNECTION", knobs=["env_vars.CUDA_DEVICE_MAX_CONNECTIONS", "ddp.use_megatron_fsdp"],
        expect=["AssertionError: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset."]),
    "fsdp_one_connection_launcher_export": dict(
        topic="fsdp", overrides=dict(FSDP), env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, world_size=2,
        launch="torchrun", init_gloo=True,
        finding="FSDP_WITH_ONE_CONNECTION", knobs=["launcher:CUDA_DEVICE_MAX_CONNECTIONS", "ddp.use_megatron_fsdp"],
        expect=["[default0]:[rank0]: AssertionError: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.",
                "[default1]:[rank1]: AssertionError: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset."]),
    "fsdp_without_fsdp_dtensor": dict(
        topic="fsdp", overrides={"ddp.use_megatron_fsdp": True}, world_size=8,
        finding="FSDP_NEEDS_FSDP_DTENSOR", knobs=["checkpoint.ckpt_format", "ddp.use_megatron_fsdp"],
        expect=["AssertionError: Megatron-FSDP requires the fsdp_dtensor checkpointing format!"]),
    "fsdp_manual_registration_without_nccl_ub": dict(
        topic="fsdp", overrides={**FSDP, "ddp.fsdp_manual_registration": True}, world_size=8,
        finding="FSDP_MANUAL_REGISTRATION_WITHOUT_NCCL_UB", knobs=["ddp.fsdp_manual_registration", "ddp.nccl_ub"],
        expect=["AssertionError: DDP.fsdp_manual_registration requires DDP.nccl_ub!"]),
    "fsdp_and_torch_fsdp2": dict(
        topic="fsdp", overrides={"dist.use_megatron_fsdp": True, "dist.use_torch_fsdp2": True}, world_size=8,
        finding="FSDP_BOTH_KINDS", knobs=["dist.use_megatron_fsdp", "dist.use_torch_fsdp2"],
        expect=["ValueError: use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive."]),
    "fsdp_ok_reaches_setup": dict(
        topic="fsdp", on_a_gpu="none", overrides=dict(FSDP), world_size=8,
        finding="MEGATRON_FSDP_DP_OVERLAP", knobs=["ddp.data_parallel_sharding_strategy", "ddp.use_megatron_fsdp"],
        expect=["Configuration Summary (Non-Default Values vs Megatron Core)", "use_megatron_fsdp: True",
                "AssertionError: Megatron requires CUDA."]),
    # ---- DP overlap: buckets, distributed optimizer, precision (config time) ----
    "num_buckets_with_bucket_size": dict(
        topic="dp", overrides={"ddp.num_buckets": 4, "ddp.bucket_size": 40000000}, world_size=8,
        finding="NUM_BUCKETS_WITH_BUCKET_SIZE", knobs=["ddp.num_buckets", "ddp.bucket_size"],
        expect=["AssertionError: Cannot specify both num_buckets and bucket_size"]),
    "num_buckets_with_comm_overlap_bucket_size": dict(
        topic="dp", overrides={**NO_TP, "ddp.num_buckets": 4}, world_size=8,
        finding="NUM_BUCKETS_WITH_BUCKET_SIZE", knobs=["ddp.num_buckets", "comm_overlap.bucket_size"],
        expect=["AssertionError: Cannot specify both num_buckets and bucket_size"]),
    "mxfp8_param_gather_without_reuse": dict(
        topic="precision", overrides={"mixed_precision": "bf16_with_mxfp8_mixed", "mixed_precision.fp8_param_gather": True,
                                      "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": False}, world_size=8,
        finding="MXFP8_PARAM_GATHER_WITHOUT_REUSE", knobs=["mixed_precision.reuse_grad_buf_for_mxfp8_param_ag"],
        expect=["reuse_grad_buf_for_mxfp8_param_ag must be set to True"]),
    "mxfp8_reuse_without_param_gather": dict(
        topic="precision", overrides={"mixed_precision": "bf16_with_mxfp8_mixed", "mixed_precision.fp8_param_gather": False,
                                      "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": True}, world_size=8,
        finding="MXFP8_REUSE_WITHOUT_FP8_PARAM_GATHER",
        knobs=["mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", "mixed_precision.fp8_param_gather"],
        expect=["AssertionError: Reuse grad buffer only when keeping params in MXFP8."]),
    "mxfp8_reuse_with_param_gather_in_step": dict(
        topic="precision", overrides={"mixed_precision": "bf16_with_mxfp8_mixed", "mixed_precision.fp8_param_gather": True,
                                      "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": True, **NO_TP,
                                      "comm_overlap.overlap_param_gather_with_optimizer_step": True,
                                      "model.pipeline_model_parallel_size": 2,
                                      "model.virtual_pipeline_model_parallel_size": 2}, world_size=8,
        finding="MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP",
        knobs=["comm_overlap.overlap_param_gather_with_optimizer_step", "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag"],
        expect=["ValueError: overlap_param_gather_with_optimizer_step is not supported with reuse_grad_buf_for_mxfp8_param_ag."]),
    "fp8_param_gather_without_fp8": dict(
        topic="precision", overrides={"mixed_precision.fp8_param_gather": True}, world_size=8,
        finding="FP8_PARAM_GATHER_WITHOUT_FP8", knobs=["mixed_precision.fp8_param_gather"],
        expect=["ValueError: fp8_param must be used together with fp8 mode."]),
    "distributed_optimizer_flags_disagree": dict(
        topic="dp", on_a_gpu="none", overrides={**NO_TP, "ddp.use_distributed_optimizer": False}, world_size=8,
        finding="DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE",
        knobs=["ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"],
        expect=["UserWarning: Distributed optimizer settings were not in sync: ddp.use_distributed_optimizer=False",
                "AssertionError: Megatron requires CUDA."]),
    "param_gather_forced_on": dict(
        topic="dp", on_a_gpu="none", overrides={"ddp.overlap_param_gather": True, "optimizer.overlap_param_gather": False},
        world_size=8, launch="python",
        finding="PARAM_GATHER_FORCED_ON", knobs=["ddp.overlap_param_gather", "optimizer.overlap_param_gather"],
        # the log shows the sync, not that optimizer's false was a request: from it alone, the routine sync (evalQ Q1)
        from_log="PARAM_GATHER_FLAGS_SYNCED",
        expect=["UserWarning: overlap_param_gather settings were not in sync: ddp.overlap_param_gather=True, "
                "optimizer.overlap_param_gather=False. Automatically enabling overlap_param_gather for both settings.",
                "AssertionError: Megatron requires CUDA."]),
    # ---- TP overlap ----
    "tp_overlap_no_sequence_parallel": dict(
        topic="tp", on_a_gpu="none", overrides={"model.tensor_model_parallel_size": 2, "comm_overlap.tp_comm_overlap": True},
        world_size=2, launch="torchrun",
        finding="TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL", knobs=["model.sequence_parallel", "comm_overlap.tp_comm_overlap"],
        expect=["[default0]:WARNING:root:Disabling tensor parallel communication overlap due to sequence_parallel=False.",
                "[default1]:WARNING:root:Disabling tensor parallel communication overlap due to sequence_parallel=False.",
                "AssertionError: Megatron requires CUDA."]),
    "tp_overlap_tp_size_one": dict(
        topic="tp", on_a_gpu="none", overrides={"comm_overlap.tp_comm_overlap": True}, world_size=8,
        finding="TP_OVERLAP_OFF_TP_SIZE", knobs=["model.tensor_model_parallel_size", "comm_overlap.tp_comm_overlap"],
        expect=["WARNING:root:Disabling tensor parallel communication overlap due to TP size < 2.",
                "AssertionError: Megatron requires CUDA."]),
    "tp_overlap_default_ub_cfg": dict(
        topic="tp", on_a_gpu="none", overrides={**TP2_SP, "comm_overlap.tp_comm_overlap": True}, world_size=8,
        finding="TP_OVERLAP_DEFAULT_UB_CFG", knobs=["comm_overlap.tp_comm_overlap_cfg"],
        expect=["WARNING:root:Tensor parallel overlap: No overlap config provided. Initializing TP comm overlap "
                "with the default config.", "tp_comm_overlap: True", "AssertionError: Megatron requires CUDA."]),
    "tp_overlap_nvfp4": dict(
        topic="tp", on_a_gpu="step", overrides={**TP2_SP, "comm_overlap.tp_comm_overlap": True, "mixed_precision": "bf16_with_nvfp4_mixed"},
        world_size=8,
        finding="TP_OVERLAP_UNSUPPORTED_PRECISION", knobs=["comm_overlap.tp_comm_overlap", "mixed_precision"],
        expect=["fp4: 'e2m1'", "tp_comm_overlap: True", "AssertionError: Megatron requires CUDA."]),
    "tp_overlap_initialize_ub_no_gpu": dict(
        topic="tp", on_a_gpu="none", overrides={**TP2_SP, "comm_overlap.tp_comm_overlap": True}, world_size=2,
        launch="torchrun", init_gloo=True, entry="initialize_tp_communicators",
        finding=None, knobs=["hardware:gpu", "comm_overlap.tp_comm_overlap"],
        expect=["[rank0]: RuntimeError: ", "CUDA Error: "]),
    # ---- PP overlap ----
    "p2p_overlap_without_interleaving": dict(
        topic="pp", on_a_gpu="step", overrides={**NO_TP, "model.pipeline_model_parallel_size": 2, "comm_overlap.overlap_p2p_comm": True},
        world_size=8,
        finding="P2P_OVERLAP_WITHOUT_INTERLEAVING",
        knobs=["comm_overlap.overlap_p2p_comm", "model.virtual_pipeline_model_parallel_size"],
        expect=["overlap_p2p_comm: True", "AssertionError: Megatron requires CUDA."]),
    "p2p_overlap_and_batched": dict(
        topic="pp", on_a_gpu="step", overrides={**NO_TP, "model.pipeline_model_parallel_size": 2,
                               "model.virtual_pipeline_model_parallel_size": 2, "comm_overlap.batch_p2p_comm": True},
        world_size=8,
        finding="P2P_OVERLAP_AND_BATCHED", knobs=["comm_overlap.batch_p2p_comm"],
        expect=["overlap_p2p_comm: True", "AssertionError: Megatron requires CUDA."]),
    "vpp_without_pp": dict(
        topic="pp", on_a_gpu="setup", overrides={"model.virtual_pipeline_model_parallel_size": 2}, world_size=8,
        finding="VPP_WITHOUT_PP",
        knobs=["model.virtual_pipeline_model_parallel_size", "model.pipeline_model_parallel_size"],
        expect=["AssertionError: Megatron requires CUDA."]),
    "defer_embedding_wgrad_without_pp": dict(
        topic="pp", overrides={**NO_TP, "comm_overlap.defer_embedding_wgrad_compute": True}, world_size=8,
        finding="DEFER_EMBEDDING_WGRAD_REJECTED",
        knobs=["comm_overlap.defer_embedding_wgrad_compute", "model.pipeline_model_parallel_size"],
        expect=["ValueError: Cannot defer embedding wgrad compute when pipeline model parallel is not used"]),
    "defer_embedding_wgrad_without_limit": dict(
        topic="pp", overrides={**NO_TP, "comm_overlap.defer_embedding_wgrad_compute": True,
                               "model.pipeline_model_parallel_size": 2}, world_size=8,
        finding="DEFER_EMBEDDING_WGRAD_REJECTED",
        knobs=["comm_overlap.defer_embedding_wgrad_compute", "comm_overlap.wgrad_deferral_limit"],
        expect=["ValueError: Wgrad deferral limit should be greater than or equal to 0 when it is enabled!"]),
    "param_gather_with_optimizer_step_single_chunk": dict(
        topic="dp", on_a_gpu="setup", overrides={**NO_TP, "comm_overlap.overlap_param_gather_with_optimizer_step": True}, world_size=8,
        finding="PARAM_GATHER_WITH_OPTIMIZER_STEP_SINGLE_CHUNK",
        knobs=["comm_overlap.overlap_param_gather_with_optimizer_step", "model.virtual_pipeline_model_parallel_size"],
        expect=["overlap_param_gather_with_optimizer_step: True", "AssertionError: Megatron requires CUDA."]),
    # ---- MoE overlap (config time) ----
    "moe_overlap_without_expert_parallel": dict(
        topic="moe", overrides={**NO_TP, "comm_overlap.overlap_moe_expert_parallel_comm": True}, world_size=8,
        finding="MOE_OVERLAP_REJECTED",
        knobs=["comm_overlap.overlap_moe_expert_parallel_comm", "model.expert_model_parallel_size"],
        expect=["AssertionError: overlap_moe_expert_parallel_comm is only supported when expert_model_parallel_size > 1"]),
    "delay_wgrad_without_moe_overlap": dict(
        topic="moe", overrides={**NO_TP, "comm_overlap.delay_wgrad_compute": True}, world_size=8,
        finding="MOE_OVERLAP_REJECTED",
        knobs=["comm_overlap.delay_wgrad_compute", "comm_overlap.overlap_moe_expert_parallel_comm"],
        expect=["AssertionError: overlap_moe_expert_parallel_comm is required for delay_wgrad_compute"]),
    # ---- layout ----
    "gpus_not_divisible": dict(
        topic="layout", overrides={"model.tensor_model_parallel_size": 4}, world_size=6,
        finding="GPUS_NOT_DIVISIBLE",
        knobs=["model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size"],
        expect=["AssertionError"]),
    # ---- controls: nothing overlap-related is wrong ----
    "baseline_no_gpu": dict(
        topic="control", on_a_gpu="none", overrides={"optimizer.overlap_param_gather": True}, world_size=8, finding=None, knobs=[],
        expect=["Configuration Summary (Non-Default Values vs Megatron Core)", "AssertionError: Megatron requires CUDA."]),
    "batch_not_divisible": dict(
        topic="control", overrides={"train.global_batch_size": 6}, world_size=8,
        finding="BATCH_NOT_DIVISIBLE_BY_DP",
        knobs=["train.global_batch_size", "train.micro_batch_size", "validation.eval_global_batch_size"],
        expect=["must be divisible by"]),
}
# A scenario run twice, fork and fresh interpreter, by --check: the two logs must be identical.
SAME_TEXT_PROBE = "num_buckets_with_bucket_size"


# ------------------------------------------------------------------------------------------------- normalisation

def site_packages() -> str:
    import sysconfig

    return sysconfig.get_paths()["purelib"]


class Normaliser:
    """Machine- and run-specific text to stable placeholders. PIDs and addresses are numbered in order of first
    appearance so that the same process keeps the same number within a log."""

    GLOG = re.compile(r"(?m)(^|\]:|\[)([WEIF])\d{3,4} \d\d:\d\d:\d\d\.(\d+)( +\d+)?( )")
    DATETIME = re.compile(r"\d{4}-\d\d-\d\d[_ T]\d\d:\d\d:\d\d")
    ADDR = re.compile(r"0x[0-9a-fA-F]{8,16}")
    PID_CTX = re.compile(r"(\(pid: |pid=|process |PID )(\d+)")

    def __init__(self, workdir: str):
        import sysconfig

        paths = sysconfig.get_paths()
        self.paths = sorted({(site_packages(), "<site-packages>"), (paths["stdlib"], "<python-lib>"),
                             (str(Path(sys.executable).parent.parent), "<venv>"), (sys.prefix, "<venv>"),
                             (str(Path(sys.executable).resolve().parent.parent), "<python>"),
                             (workdir, "<workdir>"), (str(ROOT), "<repo>"), (tempfile.gettempdir(), "<tmp>")},
                            key=lambda p: -len(p[0]))
        self.host = socket.gethostname()
        self.pids: dict[str, str] = {}
        self.addrs: dict[str, str] = {}

    def pid(self, value: str) -> str:
        if value not in self.pids:  # worker PIDs are set to 4200 + local rank first; the others count from 4100
            self.pids[value] = str(4100 + sum(1 for v in self.pids.values() if int(v) < 4200))
        return self.pids[value]

    def __call__(self, text: str) -> str:
        # torchrun's workers by local rank, whatever order their lines came in: 4200 + local rank
        for rank, pid in re.findall(r"local_rank: (\d+)\)?\n?\s*(?:exitcode\s*: -?\d+ )?\(pid: (\d+)\)", text):
            self.pids.setdefault(pid, str(4200 + int(rank)))
        for rank, pid in re.findall(r"(?m)^\[default(\d+)\]:[WEIF]\d{3,4} \d\d:\d\d:\d\d\.\d+ +(\d+) ", text):
            self.pids.setdefault(pid, str(4200 + int(rank)))
        for path, name in self.paths:
            text = text.replace(path, name)
        if self.host:  # a short host name ("vm") is replaced only where a host name stands
            pattern = rf"\b{re.escape(self.host)}\b" if len(self.host) >= 6 else rf"(?<=host      : ){re.escape(self.host)}\b"
            text = re.sub(pattern, "node001", text)

        def glog(m):
            pid = f" {self.pid(m.group(4).strip())}" if m.group(4) else ""
            return f"{m.group(1)}{m.group(2)}1201 12:00:00.{'0' * len(m.group(3))}{pid}{m.group(5)}"

        text = self.GLOG.sub(glog, text)
        text = self.PID_CTX.sub(lambda m: m.group(1) + self.pid(m.group(2)), text)
        text = self.DATETIME.sub(lambda m: "2026-12-01" + m.group(0)[10] + "12:00:00", text)
        text = self.ADDR.sub(lambda m: self.addrs.setdefault(m.group(0), f"0x7f00{len(self.addrs):08x}"), text)
        return text


# ------------------------------------------------------------------------------------------------- launching

def base_env(workdir: Path, stub: Path | None, scenario: dict, rank0: bool) -> dict:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TERM") if k in os.environ}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1",
               PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    if stub is not None:
        env["PYTHONPATH"] = str(stub)
    if rank0:
        env.update(WORLD_SIZE=str(scenario["world_size"]), RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(MASTER_PORT))
    env.update(scenario.get("env", {}))
    return env


def write_inputs(workdir: Path, name: str, scenario: dict) -> Path:
    spec = {k: scenario[k] for k in ("overrides",) if k in scenario}
    spec.update({k: scenario[k] for k in ("init_gloo", "entry") if k in scenario})
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(spec, indent=1, sort_keys=True))
    return path


def stub_dir(workdir: Path) -> Path | None:
    import importlib.util

    if importlib.util.find_spec("nvidia_resiliency_ext") is not None:
        return None
    pkg = workdir / "stub" / "nvidia_resiliency_ext"
    (pkg / "inprocess").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inprocess" / "__init__.py").write_text(STUB)
    return workdir / "stub"


def run_fork_batch(names: list[str], workdir: Path, train: Path, stub: Path | None, raw: Path) -> None:
    """Import the training script's modules once, then fork one child per scenario (see the module docstring)."""
    import runpy
    import traceback

    prelude = raw / "_prelude.txt"
    env0 = base_env(workdir, stub, {"world_size": 1}, rank0=True)
    # the warning filters of a fresh interpreter (this process may run under -W ignore or PYTHONWARNINGS)
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env0)
    if stub is not None:
        sys.path.insert(0, str(stub))
    os.chdir(workdir)
    sys.stdout.flush()
    sys.stderr.flush()
    keep = os.dup(1), os.dup(2)
    fd = os.open(prelude, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(write_through=True)
    sys.stderr.reconfigure(write_through=True)
    try:
        exec(compile(HEADER, str(train), "exec"), {"__name__": "__gen_bridge_logs_header__", "__file__": str(train)})
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(keep[0], 1)
        os.dup2(keep[1], 2)
    head = prelude.read_text()
    for name in names:
        scenario = SCENARIOS[name]
        spec = write_inputs(workdir, name, scenario)
        log = raw / f"{name}.log"
        log.write_text(head)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()": nothing runs yet
            pid = os.fork()
        if pid == 0:  # the child: one launch of the training script
            code = 1
            try:
                fd = os.open(log, os.O_WRONLY | os.O_APPEND)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.environ.clear()
                os.environ.update(base_env(workdir, stub, scenario, rank0=True))
                sys.argv = [str(train), str(spec)]
                runpy.run_path(str(train), run_name="__main__")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # noqa: BLE001 - printed as the interpreter prints an uncaught exception
                tb = exc.__traceback__
                while tb is not None and tb.tb_frame.f_code.co_filename != str(train):
                    tb = tb.tb_next
                try:
                    sys.excepthook(type(exc), exc.with_traceback(tb), tb)
                except BaseException:  # noqa: BLE001
                    traceback.print_exception(type(exc), exc, tb)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        (raw / f"{name}.rc").write_text(str(os.waitstatus_to_exitcode(status)))
    os.environ.clear()
    os.environ.update(saved_env)
    os.chdir(saved_cwd)


def launch_command(name: str, scenario: dict, train: Path, spec: Path, launch: str) -> list[str]:
    if launch == "python":
        return [sys.executable, str(train), str(spec)]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(scenario["world_size"]), "--tee", "3",
            "--master_addr", "127.0.0.1", "--master_port", str(MASTER_PORT), "--monitor_interval", str(MONITOR_INTERVAL),
            str(train), str(spec)]


def run_process(name: str, workdir: Path, train: Path, stub: Path | None, raw: Path, launch: str) -> subprocess.Popen:
    scenario = SCENARIOS[name]
    spec = write_inputs(workdir, name, scenario)
    env = base_env(workdir, stub, scenario, rank0=(launch == "python"))
    out = open(raw / f"{name}.log", "wb")
    proc = subprocess.Popen(launch_command(name, scenario, train, spec, launch), cwd=workdir, env=env, stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    proc._log = out  # type: ignore[attr-defined]
    return proc


def launch_of(scenario: dict) -> str:
    return scenario.get("launch", "fork")


# ------------------------------------------------------------------------------------------------- reading a log

ERROR_LINE = re.compile(r"^(?:\[[a-z]+\d+\]:)*(?:\[rank\d+\]: )?((?:[A-Za-z_.]+\.)?[A-Z]\w*(?:Error|Exception)|AssertionError)(: .*)?$")


def rank0(text: str) -> str:
    """The log as rank 0 printed it: a torchrun log's [default0]: lines without the prefix, else the log itself."""
    if not re.search(r"(?m)^\[default\d+\]:", text):
        return text
    return "\n".join(line[len("[default0]:"):] for line in text.splitlines() if line.startswith("[default0]:"))


def first_error(text: str) -> str | None:
    """The first line of the exception that ends rank 0's first traceback (torch's [rankN]: prefix stripped); for a
    message that starts on the next line (a triple-quoted f-string), that line is appended."""
    lines = [re.sub(r"^\[rank\d+\]: ?", "", line) for line in rank0(text).splitlines()]
    for i, line in enumerate(lines):
        if "Traceback (most recent call last):" in line:
            for j in range(i + 1, len(lines)):
                m = ERROR_LINE.match(lines[j])
                if m:
                    head = (m.group(1) + (m.group(2) or "")).strip()
                    if head.endswith(":") and j + 1 < len(lines):
                        head += " " + lines[j + 1].strip()
                    return head
    return None


def failed_at(text: str) -> str:
    """Where the run stopped: config (runtime_config_update raised) or setup (Bridge's setup: its CUDA assert in
    initialize_megatron on this machine, or Transformer Engine's initialize_ub)."""
    text = rank0(text)
    if "in initialize_megatron" in text or "in _initialize_tp_communicators" in text:
        return "setup"
    if "in runtime_config_update" in text:
        return "config"
    return "unknown"


def warning_lines(text: str) -> list[str]:
    """Bridge's overlap-related config-time warnings in the log, once each, rank prefixes stripped."""
    keys = ("Disabling tensor parallel communication overlap", "Tensor parallel overlap:", "were not in sync",
            "Activating...", "Deactivating...")
    seen: list[str] = []
    for line in rank0(text).splitlines():
        body = re.sub(r"^\[rank\d+\]: ?", "", line)
        if any(k in body for k in keys) and body not in seen:
            seen.append(body)
    return sorted(seen)  # sorted: a torchrun rank's stdout and stderr interleave by timing


def canonical(text: str) -> list[str]:
    """A torchrun log as the sorted list of its lines: torchrun tails each rank's stdout and stderr from separate
    files, so neither the interleaving of ranks nor that of one rank's two streams is reproducible; the lines are."""
    return sorted(text.splitlines())


_RANK = re.compile(r"^\[default(\d+)\]:")


def same_torchrun(old: str, new: str) -> bool:
    """Two runs of a torchrun scenario print the same: the same lines (canonical), or, where its ranks fail at one
    point and torchrun stops the others when it sees the first, each rank's lines of one run among the other's. How
    far a stopped rank got is timing (a loaded machine lets it print its own traceback first); what it prints is not."""
    if canonical(old) == canonical(new):
        return True
    a, b = _lines_by_rank(old), _lines_by_rank(new)
    return a.keys() == b.keys() and all(a[r] <= b[r] or b[r] <= a[r] for r in a)


def _lines_by_rank(text: str) -> dict:
    from collections import Counter

    out: dict = {}
    for line in text.splitlines():
        m = _RANK.match(line)
        out.setdefault(m[1] if m else "agent", Counter())[line] += 1
    return out


# ------------------------------------------------------------------------------------------------- upstream logs

ESC = "\x1b"


class Context:
    """Generated lines around an upstream quote, from a generator seeded by the entry id (random.Random on a str is
    stable across interpreters and PYTHONHASHSEED)."""

    def __init__(self, entry: dict):
        self.e = entry
        self.r = random.Random(entry["id"])
        self.ranks = 8
        self.host = f"node{self.r.randint(1, 64):03d}"
        self.pids = [self.r.randint(20000, 90000) + 7 * i for i in range(self.ranks)]
        self.agent = self.r.randint(1000, 19999)
        self.clock = self.r.randint(8 * 3600, 20 * 3600)

    def tick(self, seconds: float = 1.0) -> None:
        self.clock += seconds

    def hms(self) -> str:
        c = int(self.clock)
        return f"{c // 3600 % 24:02d}:{c // 60 % 60:02d}:{c % 60:02d}"

    def glog(self, level: str, where: str, msg: str) -> str:
        return f"{level}1201 {self.hms()}.{self.r.randint(0, 999999):06d} {self.agent} {where}] {msg}"

    def prefix(self, rank: int) -> str:
        return f"{self.host}: " if self.e.get("launcher") == "pdsh" else ""

    def launcher_head(self) -> list[str]:
        launcher = self.e.get("launcher", "plain")
        if launcher == "torchrun":
            star = "*" * 41
            where = "torch/distributed/run.py:793"
            return [self.glog("W", where, ""), self.glog("W", where, star),
                    self.glog("W", where, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                              "to avoid your system being overloaded, please further tune the variable for optimal "
                              "performance in your application as needed. "),
                    self.glog("W", where, star)]
        if launcher == "deepspeed":
            return [f"[2026-12-01 {self.hms()},{self.r.randint(100, 999)}] [INFO] [launch.py:146:main] WORLD INFO DICT: "
                    f"{{'{self.host}': [0, 1, 2, 3, 4, 5, 6, 7]}}",
                    f"[2026-12-01 {self.hms()},{self.r.randint(100, 999)}] [INFO] [launch.py:152:main] nnodes=1, "
                    "num_local_procs=8, node_rank=0"]
        if launcher == "mpirun":
            return [f"Warning: Permanently added '{self.host}' (ED25519) to the list of known hosts."]
        return []

    def nccl_init(self) -> list[str]:
        lines = []
        for rank in self.r.sample(range(self.ranks), 4):
            tag = f"{self.prefix(rank)}{self.host}:{self.pids[rank]}:{self.pids[rank]} [{rank}] NCCL INFO"
            lines.append(f"{tag} Bootstrap : Using eth0:10.{self.r.randint(0, 255)}.{self.r.randint(0, 255)}.{self.r.randint(2, 250)}<0>")
            if rank == 0:
                lines.append(f"{tag} cudaDriverVersion 12080")
                lines.append(f"{self.prefix(rank)}NCCL version 2.21.5+cuda12.4")
            lines.append(f"{tag} Comm config Blocking set to 1")
        for rank in self.r.sample(range(self.ranks), 3):
            comm = f"0x{self.r.randint(0x5500000000, 0x56ffffffff):x}"
            lines.append(f"{self.prefix(rank)}{self.host}:{self.pids[rank]}:{self.pids[rank] + 61} [{rank}] NCCL INFO comm {comm} "
                         f"rank {rank} nranks {self.ranks} cudaDev {rank} nvmlDev {rank} busId {self.r.choice('1a3a5d9abcd')}{rank}000 "
                         f"commId 0x{self.r.getrandbits(60):x} - Init COMPLETE")
        return lines

    def megatron_init(self) -> list[str]:
        p = self.prefix(0)
        return [f"{p}> initializing torch distributed ...",
                f"{p}{ESC}[32m[NeMo I 2026-12-01 {self.hms()} nemo_logging:393]{ESC}[0m Experiments will be logged at /results/{self.e['id'][:12]}",
                f"{p}> initialized tensor model parallel with size {self.r.choice([1, 2, 4, 8])}",
                f"{p}> initialized pipeline model parallel with size {self.r.choice([1, 2, 4])}",
                f"{p}> setting random seeds to 1234 ...",
                f"{p}{ESC}[33m[NeMo W 2026-12-01 {self.hms()} nemo_logging:405]{ESC}[0m Apex is not installed. Falling back to Torch Norm",
                f"{p}building GPT model ...",
                f"{p} > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {self.r.randint(10 ** 8, 2 * 10 ** 9)}",
                f"{p}{ESC}[1m[after model, optimizer, and learning rate scheduler are built] datetime: 2026-12-01 {self.hms()} {ESC}[0m"]

    def iterations(self, n: int) -> list[str]:
        out, step, loss = [], self.r.randint(1, 40) * 10, self.r.uniform(2.5, 9.0)
        memory_after = self.r.randrange(n)
        for i in range(n):
            self.tick(self.r.uniform(3, 9))
            step += 10
            loss *= self.r.uniform(0.97, 0.999)
            ms = self.r.uniform(900, 9000)
            out.append(f"{self.prefix(0)} [2026-12-01 {self.hms()}] iteration {step:>8d}/  500000 | consumed samples: {step * 256:>12d} "
                       f"| elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {self.r.uniform(150, 600):.1f} "
                       f"| learning rate: {self.r.uniform(1e-5, 3e-4):.6E} | global batch size:   256 | lm loss: {loss:.6E} "
                       f"| loss scale: 1.0 | grad norm: {self.r.uniform(0.2, 3.0):.3f} | number of skipped iterations:   0 "
                       f"| number of nan iterations:   0 |")
            if i == memory_after:
                out.append(f"{self.prefix(0)}{ESC}[36m[Rank 0] (after {step} iterations) memory (MB) | allocated: "
                           f"{self.r.randint(20000, 70000)}.5 | max allocated: {self.r.randint(70000, 79000)}.1{ESC}[0m")
        return out

    def other_ranks(self) -> list[str]:
        lines = []
        for rank in self.r.sample(range(1, self.ranks), 2):
            lines.append(f"{self.prefix(rank)}{self.host}:{self.pids[rank]}:{self.pids[rank] + 97} [{rank}] NCCL INFO [Service thread] "
                         f"Connection closed by localRank {self.r.randrange(self.ranks)}")
        rank = self.r.randrange(1, self.ranks)
        lines.append(f"{self.prefix(rank)}[rank{rank}]:[W1201 {self.hms()}.{self.r.randint(0, 10 ** 9 - 1):09d} ProcessGroupNCCL.cpp:1479] "
                     "Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources. "
                     "For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())")
        return lines

    def launcher_tail(self) -> list[str]:
        launcher = self.e.get("launcher", "plain")
        if launcher == "torchrun":
            self.tick(2)
            named = re.search(r"\[rank(\d+)\]", self.e["quote"])
            victim = int(named.group(1)) % self.ranks if named else 0
            out = [self.glog("W", "torch/distributed/elastic/multiprocessing/api.py:897",
                             f"Sending process {self.pids[r]} closing signal SIGTERM") for r in range(self.ranks) if r != victim][:3]
            out.append(self.glog("E", "torch/distributed/elastic/multiprocessing/api.py:869",
                                 f"failed (exitcode: 1) local_rank: {victim} (pid: {self.pids[victim]}) of binary: /usr/bin/python"))
            return out
        if launcher == "deepspeed":
            return [f"[2026-12-01 {self.hms()},{self.r.randint(100, 999)}] [ERROR] [launch.py:321:sigkill_handler] "
                    "['/usr/bin/python', '-u', 'pretrain_gpt.py'] exits with return code = 1"]
        if launcher == "mpirun":
            return ["--------------------------------------------------------------------------",
                    "Primary job  terminated normally, but 1 process returned",
                    "a non-zero exit code. Per user-direction, the job has been aborted.",
                    "--------------------------------------------------------------------------"]
        return []


def upstream_log(entry: dict) -> str:
    ctx = Context(entry)
    quote = entry["quote"]
    body = entry["embed"].replace("{quote}", quote) if entry.get("embed") else quote
    lines = ctx.launcher_head() + ctx.nccl_init() + ctx.megatron_init()
    if entry.get("phase") == "train":
        lines += ctx.iterations(ctx.r.randint(4, 9))
    lines += body.split("\n")
    lines += ctx.other_ranks() + ctx.launcher_tail()
    text = "\n".join(lines) + "\n"
    assert quote in text, entry["id"]
    return text


def upstream_manifest() -> dict:
    import yaml

    return yaml.safe_load((UPSTREAM / "manifest.yaml").read_text(encoding="utf-8"))


def generate_upstream(dest: Path) -> list[str]:
    dest.mkdir(parents=True, exist_ok=True)
    names = []
    for entry in upstream_manifest()["entries"]:
        (dest / f"{entry['id']}.log").write_text(upstream_log(entry), encoding="utf-8")
        names.append(f"{entry['id']}.log")
    return names


def check_upstream() -> list[str]:
    problems = []
    with tempfile.TemporaryDirectory(prefix="gen-upstream-logs-") as tmp:
        names = set(generate_upstream(Path(tmp)))
        committed = {p.name for p in UPSTREAM.glob("*.log")}
        for name in sorted(names | committed):
            a, b = UPSTREAM / name, Path(tmp) / name
            if name not in committed:
                problems.append(f"upstream/{name}: not committed (new)")
            elif name not in names:
                problems.append(f"upstream/{name}: committed but not in manifest.yaml")
            elif a.read_bytes() != b.read_bytes():
                problems.append(f"upstream/{name}: differs from what manifest.yaml generates")
    return problems

# ------------------------------------------------------------------------------------------------- main

def generate(names: list[str], dest: Path, extra_probe: bool = False) -> dict:
    dest.mkdir(parents=True, exist_ok=True)
    keep = os.environ.get("GEN_BRIDGE_LOGS_KEEP") == "1"  # keep the launch folder (raw logs) for debugging
    with (contextlib.nullcontext(tempfile.mkdtemp(prefix="gen-bridge-logs-")) if keep
          else tempfile.TemporaryDirectory(prefix="gen-bridge-logs-")) as tmp:
        workdir = Path(tmp).resolve()
        raw = workdir / "raw"
        raw.mkdir()
        train = workdir / "train.py"
        train.write_text(HEADER + BODY)
        stub = stub_dir(workdir)
        forked = [n for n in names if launch_of(SCENARIOS[n]) == "fork"]
        others = [n for n in names if launch_of(SCENARIOS[n]) != "fork"]
        # the fresh-interpreter launches run alongside the fork batch, torchrun ones one at a time after it
        procs = [run_process(n, workdir, train, stub, raw, "python") for n in others if launch_of(SCENARIOS[n]) == "python"]
        probe = None
        if extra_probe and SAME_TEXT_PROBE in forked:
            probe_raw = workdir / "probe"
            probe_raw.mkdir()
            probe = run_process(SAME_TEXT_PROBE, workdir, train, stub, probe_raw, "python")
            procs.append(probe)
        if forked:
            run_fork_batch(forked, workdir, train, stub, raw)
        for p in procs:
            p.wait(timeout=900)
            p._log.close()
        for n in others:
            if launch_of(SCENARIOS[n]) == "torchrun":
                for _ in range(TORCHRUN_TRIES):  # again when torchrun stopped a rank that had not finished yet
                    p = run_process(n, workdir, train, stub, raw, "torchrun")
                    p.wait(timeout=900)
                    p._log.close()
                    if "closing signal SIGTERM" not in (raw / f"{n}.log").read_text(errors="replace"):
                        break
        manifest = {}
        for n in names:
            sc = SCENARIOS[n]
            text = Normaliser(str(workdir))((raw / f"{n}.log").read_bytes().decode("utf-8", "replace"))
            missing = [e for e in sc.get("expect", []) if e not in text]
            if missing:
                raise SystemExit(f"{n}: the log lacks {missing!r}; see {raw / (n + '.log')}")
            (dest / f"{n}.log").write_text(text)
            manifest[n] = entry(n, sc, text, stub is not None)
        if probe is not None:
            a = Normaliser(str(workdir))((raw / f"{SAME_TEXT_PROBE}.log").read_text())
            b = Normaliser(str(workdir))((workdir / "probe" / f"{SAME_TEXT_PROBE}.log").read_text())
            if a != b:
                diff = "".join(difflib.unified_diff(b.splitlines(True), a.splitlines(True), "python", "fork", n=1))
                raise SystemExit(f"fork and python launches of {SAME_TEXT_PROBE} print different text:\n{diff[:4000]}")
    return manifest


def entry(name: str, sc: dict, text: str, stubbed: bool) -> dict:
    launch = launch_of(sc)
    how = {"fork": "pretrain() in a forked child of one process that imported the training script's modules once; "
                   "rank 0 of the world size",
           "python": "pretrain() in a fresh interpreter (python train.py); rank 0 of the world size",
           "torchrun": f"torchrun --nproc_per_node {sc['world_size']} --tee 3, two ranks on the CPU"}[launch]
    if sc.get("init_gloo"):
        how += "; the script creates a gloo process group first (torch's [rankN]: traceback prefix)"
    if sc.get("entry") == "initialize_tp_communicators":
        how += ("; runtime_config_update() then Bridge's initialize._initialize_tp_communicators(), the call "
                "initialize_megatron() makes for TP overlap (pretrain() stops at its CUDA assert before it on a CPU)")
    return {
        "topic": sc["topic"],
        "overrides": sc["overrides"],
        "launcher_env": sc.get("env", {}),
        "world_size": sc["world_size"],
        "launch": launch,
        "entry": sc.get("entry", "pretrain"),
        "produced_by": how,
        "expected_finding": sc["finding"],
        **({"expected_from_log": sc["from_log"]} if sc.get("from_log") else {}),
        "knobs": sc["knobs"],
        "failed_at": failed_at(text),
        "on_a_gpu": sc.get("on_a_gpu", failed_at(text)),
        "first_error": first_error(text),
        "overlap_warnings": warning_lines(text),
        "nvidia_resiliency_ext": "stub" if stubbed else "installed",
        "lines": text.count("\n"),
    }


def manifest_text(manifest: dict) -> str:
    import yaml

    head = (f"# Logs of real Megatron-Bridge {BRIDGE_VERSION} runs on a CPU-only machine, written by "
            "tools/gen_bridge_logs.py (do not edit; regenerate).\n"
            "# expected_finding: the mbridge_overlap finding id the log should be diagnosed as (null: nothing "
            "overlap-related is wrong, or no id exists), with the scenario's overrides; expected_from_log: the one the "
            "log alone is diagnosed as, where the request that decides it is not in the log; knobs: the config keys "
            "(Bridge dotted) or launch settings behind it;\n# failed_at: where this run stopped here (config: runtime_config_update raised; setup: "
            "Bridge's setup, i.e. its CUDA assert on this GPU-less machine, or TE's initialize_ub); on_a_gpu: where the "
            "same config stops on a GPU machine (config, setup, step; none: it trains, the cause is a warning or a "
            "silent change).\n"
            "# Normalised: <site-packages>, <venv>, <python-lib>, <workdir> (the launch folder), <repo>, <tmp>; "
            "glog timestamps 1201 12:00:00.000000, dates 2026-12-01 12:00:00, PIDs numbered from 4100, "
            "addresses 0x7f00NNNNNNNN, host node001.\n")
    body = {"bridge_version": BRIDGE_VERSION, "megatron_core": _version("megatron-core"),
            "transformer_engine": _version("transformer-engine"), "torch": _version("torch"),
            "normalisation": "see the header", "scenarios": manifest}
    return head + yaml.safe_dump(body, sort_keys=False, width=120, allow_unicode=True)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "absent"


def compare(committed: Path, fresh: Path) -> list[str]:
    problems = []
    names = {p.name for p in committed.glob("*")} | {p.name for p in fresh.glob("*")}
    manifest = {}
    if (fresh / "manifest.yaml").exists():
        import yaml

        manifest = yaml.safe_load((fresh / "manifest.yaml").read_text())["scenarios"]
    for name in sorted(names):
        a, b = committed / name, fresh / name
        if not a.exists():
            problems.append(f"{name}: not committed (new)")
        elif not b.exists():
            problems.append(f"{name}: committed but no longer generated")
        else:
            old, new = a.read_text(), b.read_text()
            scen = manifest.get(name[:-4], {}) if name.endswith(".log") else {}
            if scen.get("launch") == "torchrun":
                same = same_torchrun(old, new)
            else:
                same = old == new
            if not same:
                diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"committed/{name}",
                                                    f"generated/{name}", n=1))
                problems.append(f"{name}: differs\n{diff[:3000]}")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="regenerate into a temporary folder and compare")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these scenarios (not with --check)")
    p.add_argument("--upstream", action="store_true", help="the upstream-quote logs only (no torch or Bridge needed)")
    p.add_argument("--out", type=Path, default=OUT, help="where to write the Bridge logs (default: %(default)s)")
    args = p.parse_args()
    if args.only and (args.check or args.upstream):
        p.error("--only cannot be combined with --check or --upstream")
    if args.upstream and not args.check:
        names = generate_upstream(UPSTREAM)
        print(f"wrote {len(names)} logs to {UPSTREAM}")
        return 0
    if args.check:
        problems = check_upstream()
        count = f"{len(upstream_manifest()['entries'])} upstream logs"
        if not args.upstream:
            with tempfile.TemporaryDirectory(prefix="gen-bridge-logs-check-") as tmp:
                fresh = Path(tmp)
                manifest = generate(list(SCENARIOS), fresh, extra_probe=True)
                (fresh / "manifest.yaml").write_text(manifest_text(manifest))
                problems += compare(args.out, fresh)
            count += f", {len(SCENARIOS)} Bridge scenarios"
        return generated.verdict(problems, "\n".join([*problems, f"{count}: {len(problems)} file(s) differ"]), f"{count}: OK")
    names = args.only or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = generate(names, args.out)
    if args.only and (args.out / "manifest.yaml").exists():
        import yaml

        old = yaml.safe_load((args.out / "manifest.yaml").read_text())["scenarios"]
        manifest = {n: manifest.get(n, old.get(n)) for n in SCENARIOS if n in manifest or n in old}
    else:
        for stale in args.out.glob("*.log"):
            if stale.stem not in SCENARIOS:
                stale.unlink()
    (args.out / "manifest.yaml").write_text(manifest_text(manifest))
    print(f"wrote {len(names)} logs and manifest.yaml to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
