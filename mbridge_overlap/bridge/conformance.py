"""Conformance: the resolver against real Megatron-Bridge over a generated set of requested configs.

Each case is a dict of typed dotted overrides plus a world size and TE flag. The same overrides go to
mbridge_overlap.resolve() and, through the adapter, onto Bridge's own _pretrain_common() config before
runtime_config_update(); every effective field and every rejection must agree.
"""

from __future__ import annotations

import math
import os
import random
import re
import time
from dataclasses import dataclass

from .. import api
from ..upstream import releases
from ..errors import UsageError
from . import adapter

_PRESETS = releases.data()["tp_overlap_presets"]
_RECIPES = ["bf16_mixed", "fp16_mixed", "bf16_with_fp8_current_scaling_mixed", "bf16_with_mxfp8_mixed",
            "bf16_with_fp8_delayed_scaling_mixed", "bf16_with_fp8_subchannel_scaling_mixed", "bf16_with_nvfp4_mixed",
            "fp16_with_mxfp8_mixed"]


@dataclass
class Case:
    overrides: dict
    gpus: int
    te: bool


@dataclass
class Outcome:
    case: Case
    differences: list  # (field, resolver, bridge)


def generate(count: int, seed: int = 0, moe: bool = False) -> list[Case]:
    """`count` requests covering layouts, TE, the distributed optimizer, ddp/optimizer/comm_overlap knobs,
    mixed-precision recipes and no comm_overlap at all; with `moe`, expert layouts instead (EP, expert TP, biases,
    dispatchers). Deterministic for a seed."""
    rng = random.Random(seed)
    return [(_moe_case if moe else _case)(rng) for _ in range(count)]


def _maybe(rng, p=0.3):
    return rng.random() < p


def _case(rng: random.Random) -> Case:
    tp, pp, cp = rng.choice([1, 1, 2, 4, 8]), rng.choice([1, 1, 2, 4]), rng.choice([1, 1, 2])
    dp = rng.choice([1, 1, 2, 4])
    o: dict = {"model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp}
    if cp > 1:
        o["model.context_parallel_size"] = cp
    if pp > 1 and _maybe(rng, 0.7):
        o["model.virtual_pipeline_model_parallel_size"] = rng.choice([1, 2, 3, 4])
    if _maybe(rng, 0.7):
        o["model.sequence_parallel"] = rng.random() < 0.75
    for key in ("model.tp_comm_overlap", "model.overlap_p2p_comm", "model.batch_p2p_comm"):
        if _maybe(rng, 0.1):
            o[key] = rng.random() < 0.5
    for key in ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"):
        if _maybe(rng, 0.3):
            o[key] = rng.random() < 0.5
    for key in ("ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.align_param_gather",
                "optimizer.overlap_param_gather", "optimizer.overlap_param_gather_with_optimizer_step",
                "ddp.grad_reduce_in_fp32", "ddp.fp8_param_gather"):
        if _maybe(rng, 0.15):
            o[key] = rng.random() < 0.5
    if _maybe(rng, 0.15):
        o["ddp.bucket_size"] = rng.choice([None, 40_000_000, 2**25, 25])
    if _maybe(rng, 0.05):
        o["ddp.num_buckets"] = rng.choice([4, 8])
    _mixed_precision(rng, o)
    if not _maybe(rng, 0.25):
        _comm_overlap(rng, o)
    if _maybe(rng, 0.2):
        o["env_vars.CUDA_DEVICE_MAX_CONNECTIONS"] = rng.choice([1, 8, 32])
    return Case(o, gpus=tp * pp * cp * dp, te=rng.random() < 0.85)


def _moe_case(rng: random.Random) -> Case:
    """An expert layout: the expert grid (ETP x EP x PP) and the dense one (TP x PP x CP) both divide the world."""
    tp, pp, ep = rng.choice([1, 2, 4]), rng.choice([1, 1, 2]), rng.choice([1, 2, 4, 8])
    etp = rng.choice([None, None, 1, 2, tp])
    o: dict = {"model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp,
               "model.expert_model_parallel_size": ep, "model.num_moe_experts": ep * rng.choice([1, 2, 4]),
               "model.sequence_parallel": tp > 1 and rng.random() < 0.9, "ddp.use_distributed_optimizer": True}
    if etp is not None:
        o["model.expert_tensor_parallel_size"] = etp
    if _maybe(rng, 0.5):
        o["model.add_bias_linear"] = rng.random() < 0.5
    if _maybe(rng, 0.5):
        o["model.moe_token_dispatcher_type"] = rng.choice(["allgather", "alltoall"])
    if _maybe(rng, 0.5):
        o["comm_overlap.tp_comm_overlap"] = False
    expert, dense = (etp or tp) * ep * pp, tp * pp
    lcm = expert * dense // math.gcd(expert, dense)
    return Case(o, gpus=lcm * rng.choice([1, 2]), te=True)


def _mixed_precision(rng, o: dict) -> None:
    if _maybe(rng, 0.4):
        o["mixed_precision"] = rng.choice(_RECIPES + [None])
    if o.get("mixed_precision", "bf16_mixed") is not None:
        for key in ("grad_reduce_in_fp32", "fp8_param_gather"):
            if _maybe(rng, 0.1):
                o[f"mixed_precision.{key}"] = rng.random() < 0.5


def _comm_overlap(rng, o: dict) -> None:
    o["comm_overlap.tp_comm_overlap"] = rng.random() < 0.6
    if _maybe(rng, 0.3):
        o["comm_overlap.tp_comm_overlap_cfg"] = rng.choice(_PRESETS)
    if _maybe(rng, 0.1):
        o["comm_overlap.tp_comm_bootstrap_backend"] = rng.choice(["nccl", "mpi", "gloo"])
    for key in ("overlap_p2p_comm", "batch_p2p_comm", "overlap_grad_reduce", "overlap_param_gather",
                "overlap_param_gather_with_optimizer_step", "align_param_gather"):
        if _maybe(rng, 0.12):
            o[f"comm_overlap.{key}"] = rng.random() < 0.5
    if _maybe(rng, 0.12):
        o["comm_overlap.bucket_size"] = rng.choice([50_000_000, 2**27, 2**20])


def check(case: Case, bridge_version: str) -> Outcome:
    """Resolve a case both ways and list every field where they differ."""
    try:
        mine = api.resolve(case.overrides, gpus=case.gpus, te=case.te, bridge_version=bridge_version)
    except UsageError as exc:
        theirs = _bridge_rejection(case)
        # Both refuse a field this release lacks (env_vars before 0.6): the error names the missing attribute.
        agree = theirs is not None and _missing_attribute(theirs) in str(exc).split(":", 1)[0].split(".")
        return Outcome(case, [] if agree else [("resolver", f"UsageError: {exc}", theirs or "accepted")])
    cfg = adapter.baseline_config()
    cfg.train.global_batch_size = cfg.train.micro_batch_size * mine.data_parallel_size
    try:
        adapter.apply_overrides(cfg, case.overrides)
    except Exception as exc:  # the resolver took a field this Bridge does not have
        return Outcome(case, [("overrides", "accepted", f"{type(exc).__name__}: {exc}")])
    error, env = adapter.runtime_config_update(cfg, case.gpus, case.te)
    rejected = mine.state.rejections  # config-time rejections only: the failures after the config step are not Bridge's to show
    if error or rejected:
        ours = rejected[0].message if rejected else None
        agree = bool(error and ours and ours in error)
        return Outcome(case, [] if agree else [("rejection", ours, error)])
    theirs = adapter.effective(cfg)
    theirs_dp = cfg.data_parallel_size
    diffs = [("data_parallel_size", mine.data_parallel_size, theirs_dp)] if mine.data_parallel_size != theirs_dp else []
    expected_env = {k: v for k, v in mine.env_vars.items() if k not in os.environ}  # setdefault: the process's own win
    if {k: v for k, v in env.items() if k != "WORLD_SIZE"} != expected_env:
        diffs.append(("env", expected_env, env))
    for section, values in mine.effective.items():
        for name, value in values.items():
            other = theirs[section][name]
            if isinstance(other, list) and value in other:
                continue  # identical presets: Bridge keeps only their content
            if other != value:
                diffs.append((f"{section}.{name}", value, other))
    return Outcome(case, diffs)


def _bridge_rejection(case: Case) -> str | None:
    """Bridge's error when the case's overrides are applied to its config, or None when it takes them."""
    cfg = adapter.baseline_config()
    try:
        adapter.apply_overrides(cfg, case.overrides)
    except Exception as exc:  # AttributeError for a field the release does not have
        return f"{type(exc).__name__}: {exc}"
    return adapter.runtime_config_update(cfg, case.gpus, case.te)[0]


def _missing_attribute(error: str) -> str | None:
    match = re.search(r"has no attribute '(\w+)'", error)
    return match.group(1) if match else None


def run(count: int = 2000, seed: int = 0, progress=None, moe: bool = False) -> dict:
    """Check `count` generated cases in this process; a summary with every disagreement."""
    adapter.import_bridge()
    adapter.quiet()
    version = adapter.bridge_version()
    start, failures = time.time(), []
    cases = generate(count, seed, moe)
    for i, case in enumerate(cases, 1):
        outcome = check(case, version)
        if outcome.differences:
            failures.append(outcome)
        if progress and i % 250 == 0:
            progress(f"conformance: {i}/{count} checked, {len(failures)} disagree")
    return {
        "bridge_version": version,
        "cases": count,
        "agree": count - len(failures),
        "seconds": round(time.time() - start, 1),
        "failures": [{"overrides": f.case.overrides, "gpus": f.case.gpus, "te": f.case.te, "differences": f.differences} for f in failures],
    }
