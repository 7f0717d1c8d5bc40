"""Findings an agent can apply blindly (issue 9, items 2 and 3), proven by re-resolution.

Over 2,000 generated configs (conformance's generator, seed 0) and every built recipe of the catalog (and lint of every
perf recipe): applying a finding's `fix_overrides` removes it (same id, same knobs) and raises no warning or error
(id and knobs) that was not there; no two findings of one config set a key to different values; every finding's
`asserts` hold in `effective`; the fix text names every key its overrides set. No exception is allowed: every fix
that cannot be proven is left out of `fix_overrides` by the check itself (its text says what to do).
scripts/check_fixes.py runs the same properties over any number of configs (--count 20000) and prints the counts.

Then the registry's hygiene: every id is raised by an example and not by a counter-example (the table below), every
anchor exists, no id is dead, every template field is supplied (rendering each id through its example).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass

import pytest
import yaml

from conftest import ROOT
from mbridge_overlap import anchors, api, findings, schema
from mbridge_overlap.analysis import analyze

_spec = importlib.util.spec_from_file_location("check_fixes", ROOT / "scripts" / "check_fixes.py")
check_fixes = sys.modules.setdefault("check_fixes", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(check_fixes)

GENERATED = 2000  # the issue's count for CI; the conformance run takes --count 20000
# The findings the issue names: the properties must have exercised a fix of each.
ISSUE_IDS = {"DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER", "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE", "DP_OVERLAP_KNOB_OVERWRITTEN",
             "BUCKET_SIZE_LOOKS_LIKE_BYTES"}


@pytest.fixture(scope="module")
def generated():
    return check_fixes.check_generated(GENERATED, seed=0)


@pytest.fixture(scope="module")
def recipes(tmp_path_factory):
    return check_fixes.check_catalog(check_fixes.Tally(), check_fixes.Tally(), tmp_path_factory.mktemp("lint"))


def _proven_and_clean(tally, configs):
    assert tally.configs == configs
    for kind in ("failing", "conflicts", "contradictions", "untold"):
        items = getattr(tally, kind)
        assert not items, f"{len(items)} {kind}, e.g. {items[:3]}"


def test_fixes_on_generated_configs(generated):
    _proven_and_clean(generated, GENERATED)
    assert ISSUE_IDS <= set(generated.by_id), "the generated configs no longer exercise the fixes the issue names"
    assert generated.asserts_checked > GENERATED


def test_fixes_on_every_built_recipe(recipes):
    tally, _ = recipes
    _proven_and_clean(tally, len(check_fixes.built_recipes()))
    assert tally.tried and tally.asserts_checked


def test_fixes_of_lint_on_every_perf_recipe(recipes):
    _, lint = recipes
    _proven_and_clean(lint, sum(e["package"] == "perf_recipes" for e in check_fixes.built_recipes()))
    assert "MODE_LEFT_OFF" in lint.by_id  # lint's own findings are among those proven


# --- the four problems the issue lists ----------------------------------------------------------------------------


def _resolve(overrides, gpus=8, **kw):
    return api.resolve(overrides, gpus=gpus, **kw)


def _one(res, fid, knob=None):
    found = [f for f in res.findings if f.id == fid and (knob is None or knob in f.knobs)]
    assert len(found) == 1, [(f.id, f.knobs) for f in res.findings]
    return found[0]


def _applied(res, f):
    return analyze(res.scenario.derive(f.fix_overrides, f.remove_keys))


def test_distributed_optimizer_fix_turns_both_flags_on_and_keeps_the_ddp_values():
    """It suggested ddp.use_distributed_optimizer=true alone, which brought DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE and
    DP_OVERLAP_KNOB_OVERWRITTEN."""
    res = _resolve({"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False,
                    "ddp.overlap_grad_reduce": False, "comm_overlap.tp_comm_overlap": False, "comm_overlap.bucket_size": 50_000_000})
    after = _applied(res, _one(res, "DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER"))
    assert {f.id for f in after.findings}.isdisjoint({"DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER", "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE",
                                                      "DP_OVERLAP_KNOB_OVERWRITTEN"})
    ddp = after.effective["ddp"]
    assert ddp["use_distributed_optimizer"] and ddp["bucket_size"] == 50_000_000
    assert ddp["overlap_grad_reduce"] is False  # the user's own value, now on comm_overlap where it wins


def test_align_param_gather_is_not_said_to_be_selected_when_the_user_turned_it_off():
    layout = {"model.pipeline_model_parallel_size": 2, "model.virtual_pipeline_model_parallel_size": 2, "comm_overlap.tp_comm_overlap": False}
    selected = _resolve(layout)
    assert _one(selected, "BRIDGE_SELECTS_ALIGN_PARAM_GATHER") and selected.effective["ddp"]["align_param_gather"] is True
    off = _resolve({**layout, "comm_overlap.align_param_gather": False})
    assert "BRIDGE_SELECTS_ALIGN_PARAM_GATHER" not in {f.id for f in off.findings}
    assert off.effective["ddp"]["align_param_gather"] is False


@pytest.mark.parametrize("requested", [None, True])
def test_dp_size_one_says_what_dp_overlap_is_left(requested):
    overrides = {"comm_overlap.tp_comm_overlap": False}
    if requested is not None:
        overrides["comm_overlap.overlap_grad_reduce"] = requested
    res = _resolve(overrides, gpus=1)
    f = _one(res, "DP_SIZE_ONE")
    on = res.effective["ddp"]["overlap_grad_reduce"]
    assert on is bool(requested)
    assert ("turns DP overlap off" in f.message) is not on and ("stays on" in f.message) is on


@pytest.mark.parametrize("grad_fp32", [True, False])
def test_a_bucket_size_meant_as_512_mib_becomes_its_parameter_count_in_every_fix(grad_fp32):
    res = _resolve({"ddp.bucket_size": 512 * 2**20, "ddp.grad_reduce_in_fp32": grad_fp32, "mixed_precision.grad_reduce_in_fp32": grad_fp32,
                    "comm_overlap.tp_comm_overlap": False})
    per = 4 if grad_fp32 else 2
    bucket = _one(res, "BUCKET_SIZE_LOOKS_LIKE_BYTES")
    overwritten = _one(res, "DP_OVERLAP_KNOB_OVERWRITTEN", "ddp.bucket_size")
    if grad_fp32:  # 512 MiB of fp32 gradients: 134217728 parameters, which reads as nothing else
        assert bucket.fix_overrides["comm_overlap.bucket_size"] == 512 * 2**20 // per
        for f in (bucket, overwritten):
            after = _applied(res, f)
            assert after.effective["ddp"]["bucket_size"] * per == 512 * 2**20
            assert {"BUCKET_SIZE_LOOKS_LIKE_BYTES", "DP_OVERLAP_KNOB_OVERWRITTEN"}.isdisjoint({g.id for g in after.findings})
    else:  # 268435456 parameters is a whole number of MiB again: no blind fix carries the number over
        assert bucket.fix_overrides == {} and "512 MiB of gradients" in bucket.fix
        assert overwritten.fix_overrides.get("comm_overlap.bucket_size") is None


def test_a_bucket_size_of_25_mib_gets_one_fix_from_both_findings():
    res = _resolve({"ddp.bucket_size": 25 * 2**20, "comm_overlap.tp_comm_overlap": False})
    bucket, overwritten = _one(res, "BUCKET_SIZE_LOOKS_LIKE_BYTES"), _one(res, "DP_OVERLAP_KNOB_OVERWRITTEN", "ddp.bucket_size")
    shared = set(bucket.fix_overrides) & set(overwritten.fix_overrides)
    assert shared and all(bucket.fix_overrides[k] == overwritten.fix_overrides[k] for k in shared)
    for f in (bucket, overwritten):
        assert {"BUCKET_SIZE_LOOKS_LIKE_BYTES", "DP_OVERLAP_KNOB_OVERWRITTEN"}.isdisjoint({g.id for g in _applied(res, f).findings})


def test_requests_that_contradict_each_other_get_one_fix_and_the_other_waits():
    """The safety net: where two findings' fixes would set one key differently, the more severe one's stands and the
    other waits for it. No generated config reaches it since DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER is raised only
    for requests the run does not get, so it is exercised on two findings made for it."""
    from mbridge_overlap.checks import one_value_per_key
    from mbridge_overlap.findings import Finding

    warn = Finding("PARAM_GATHER_FORCED_ON", "warning", "m", "f", fix_overrides={"optimizer.overlap_param_gather": True})
    err = Finding("NUM_BUCKETS_WITH_BUCKET_SIZE", "error", "m", "f", fix_overrides={"optimizer.overlap_param_gather": False})
    same = Finding("DP_SIZE_ONE", "info", "m", "f", fix_overrides={"optimizer.overlap_param_gather": False})
    out = one_value_per_key([warn, err, same])
    assert out[1].fix_overrides == {"optimizer.overlap_param_gather": False} and out[2].fix_overrides == out[1].fix_overrides
    assert out[0].fix_overrides == {} and out[0].fix.startswith("after the fix of NUM_BUCKETS_WITH_BUCKET_SIZE")


# --- the registry: every id has an example and a counter-example ---------------------------------------------------

TP2 = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True}
CO = {"comm_overlap.tp_comm_overlap": False}
PP2 = {"model.pipeline_model_parallel_size": 2, **CO}
VPP = {"model.virtual_pipeline_model_parallel_size": 2}
FSDP = {"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "fsdp_dtensor"}
MXFP8 = {"mixed_precision": "bf16_with_mxfp8_mixed"}
SFT_CP = {"model.context_parallel_size": 2}
PRESET_H100 = "userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048"
PRESET_LAYOUT = {**TP2, "model.hidden_size": 6144, "model.seq_length": 2048, "train.micro_batch_size": 2, "train.global_batch_size": 64}


def r(overrides=None, gpus=8, **kw):
    return ("resolve", dict(overrides=overrides or {}, gpus=gpus, **kw))


def lint(config, gpus=8, gpu="h100"):
    return ("lint", dict(config=config, gpus=gpus, gpu=gpu))


def diff(before, after, gpus=(8, 8)):
    return ("diff", dict(before=before, after=after, gpus=gpus))


def plan(**kw):
    return ("plan", kw)


# id: (example that raises it, counter-example that does not)
EXAMPLES = {
    "TP_OVERLAP_OFF_TP_SIZE": (r({"comm_overlap.tp_comm_overlap": True}), r({**TP2, "comm_overlap.tp_comm_overlap": True})),
    "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL": (r({"model.tensor_model_parallel_size": 2, "comm_overlap.tp_comm_overlap": True}),
                                            r({**TP2, "comm_overlap.tp_comm_overlap": True})),
    "TP_OVERLAP_OFF_NO_TE": (r({**TP2, "comm_overlap.tp_comm_overlap": True}, te=False), r({**TP2, "comm_overlap.tp_comm_overlap": True})),
    "TP_OVERLAP_UNSUPPORTED_PRECISION": (r({**TP2, "comm_overlap.tp_comm_overlap": True, "mixed_precision": "bf16_with_nvfp4_mixed"}),
                                         r({**TP2, "comm_overlap.tp_comm_overlap": True})),
    "TP_OVERLAP_NOT_RECOMMENDED": (plan(tp=2, gpus=64, gpu="gb200", precision="nvfp4"), plan(tp=2, gpus=64, gpu="gb200")),
    "PLAN_LEAVES_KEY_AS_SHIPPED": (plan(recipe="nemotron_3_ultra_pretrain_256gpu_gb200_fp8mx_config"),
                                   plan(recipe="nemotron_3_ultra_pretrain_24gpu_h100_bf16_config")),
    "SHIPPED_RECIPES_DIFFER": (plan(tp=4, pp=16, vpp=8, gpus=128, gpu="gb200", precision="nvfp4"), plan(tp=4, pp=16, vpp=8, gpus=128, gpu="h100")),
    "TP_OVERLAP_DEFAULT_UB_CFG": (r({**TP2, "comm_overlap.tp_comm_overlap": True}),
                                  r({**TP2, "comm_overlap.tp_comm_overlap": True, "comm_overlap.tp_comm_overlap_cfg": PRESET_H100})),
    "TP_PRESET_MATCHED": (plan(tp=2, gpus=8, gpu="h100", hidden_size=6144, seq_length=2048, micro_batch_size=2),
                          plan(tp=2, gpus=8, gpu="h100", hidden_size=4096, seq_length=2048, micro_batch_size=2)),
    "TP_OVERLAP_UNGATED": (r({**TP2, "model.tp_comm_overlap": True}), r({**TP2, "comm_overlap.tp_comm_overlap": True})),
    "SEQUENCE_PARALLEL_DROPPED": (r({"model.sequence_parallel": True}), r(TP2)),
    "PP_OVERLAP_NOT_SELECTED": (r(PP2), r({**PP2, **VPP})),
    "P2P_OVERLAP_WITHOUT_INTERLEAVING": (r({**PP2, "comm_overlap.overlap_p2p_comm": True}), r({**PP2, **VPP, "comm_overlap.overlap_p2p_comm": True})),
    "P2P_OVERLAP_AND_BATCHED": (r({**PP2, **VPP, "comm_overlap.batch_p2p_comm": True}), r({**PP2, **VPP})),
    "VPP_WITHOUT_PP": (r(VPP), r({**PP2, **VPP})),
    "GPUS_NOT_DIVISIBLE": (r({"model.tensor_model_parallel_size": 4}, gpus=6), r({"model.tensor_model_parallel_size": 4})),
    "COMM_OVERLAP_ABSENT": (r(), r(CO)),
    "DP_OVERLAP_KNOB_OVERWRITTEN": (r({**CO, "ddp.overlap_grad_reduce": False}), r({**CO, "comm_overlap.overlap_grad_reduce": False})),
    "MODEL_KNOB_OVERWRITTEN": (r({**PP2, "model.batch_p2p_comm": False}), r({**PP2, "comm_overlap.batch_p2p_comm": False})),
    "DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER": (
        r({"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False, "ddp.overlap_grad_reduce": False,
           "comm_overlap.overlap_grad_reduce": True}),
        r({"ddp.overlap_grad_reduce": False, "comm_overlap.overlap_grad_reduce": True})),
    "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE": (r({"ddp.use_distributed_optimizer": False}),
                                             r({"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False})),
    "PARAM_GATHER_FORCED_ON": (r({"optimizer.overlap_param_gather": False}),
                               r({"optimizer.overlap_param_gather": False, "ddp.overlap_param_gather": False})),
    "PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER": (
        r({"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False}),
        r({"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False, "ddp.overlap_param_gather": False})),
    "DP_SIZE_ONE": (r(gpus=1), r(gpus=2)),
    "BRIDGE_SELECTS_ALIGN_PARAM_GATHER": (r({**PP2, **VPP}), r({**PP2, **VPP, "comm_overlap.align_param_gather": False})),
    "PARAM_GATHER_WITH_OPTIMIZER_STEP_SINGLE_CHUNK": (r({**CO, "comm_overlap.overlap_param_gather_with_optimizer_step": True}),
                                                      r({**PP2, **VPP, "comm_overlap.overlap_param_gather_with_optimizer_step": True})),
    "PARAM_GATHER_WITH_OPTIMIZER_STEP_UNCHECKED": (
        r({**PP2, **VPP, "comm_overlap.overlap_param_gather_with_optimizer_step": True, "model.cuda_graph_impl": "transformer_engine"}),
        r({**PP2, **VPP, "comm_overlap.overlap_param_gather_with_optimizer_step": True})),
    "BUCKET_SIZE_LOOKS_LIKE_BYTES": (r({"ddp.bucket_size": 25 * 2**20}), r({"ddp.bucket_size": 40_000_000})),
    "PRECISION_KNOB_OVERWRITTEN": (r({"ddp.grad_reduce_in_fp32": False}), r({"mixed_precision.grad_reduce_in_fp32": False})),
    "MEGATRON_FSDP_OVERWRITES": (r({**FSDP, "ddp.average_in_collective": True}),
                                 r({**FSDP, "ddp.average_in_collective": True, "ddp.disable_symmetric_registration": True})),
    "MEGATRON_FSDP_DP_OVERLAP": (r(FSDP), r()),
    "MEGATRON_FSDP_SKIPPED_DP_OVERLAP": (r({**FSDP, **CO, "ddp.use_distributed_optimizer": False}), r({**FSDP, **CO})),
    "FSDP_NEEDS_FSDP_DTENSOR": (r({"ddp.use_megatron_fsdp": True}), r(FSDP)),
    "FSDP_WITH_ONE_CONNECTION": (r({**FSDP, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1}), r({**FSDP, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 32})),
    "FSDP_MANUAL_REGISTRATION_WITHOUT_NCCL_UB": (r({**FSDP, "ddp.fsdp_manual_registration": True}),
                                                 r({**FSDP, "ddp.fsdp_manual_registration": True, "ddp.nccl_ub": True})),
    "FSDP_WITH_TP_PP_DP_MAPPING": (r({**FSDP, "dist.use_tp_pp_dp_mapping": True}), r(FSDP)),
    "FSDP_BOTH_KINDS": (r({"dist.use_megatron_fsdp": True, "dist.use_torch_fsdp2": True}), r({"dist.use_megatron_fsdp": True})),
    "FSDP_DTENSOR_WITHOUT_FSDP": (r({"checkpoint.ckpt_format": "fsdp_dtensor"}), r(FSDP)),
    "NCCL_UB_LAUNCH_ENV": (r({"ddp.nccl_ub": True}), r({"ddp.nccl_ub": True, "env_vars.NCCL_NVLS_ENABLE": 1, "env_vars.NCCL_CTA_POLICY": 1})),
    "MOE_OVERLAP_REJECTED": (r({**CO, "comm_overlap.overlap_moe_expert_parallel_comm": True}),
                             r({**CO, "comm_overlap.overlap_moe_expert_parallel_comm": False})),
    "DEFER_EMBEDDING_WGRAD_REJECTED": (r({**CO, "comm_overlap.defer_embedding_wgrad_compute": True}),
                                       r({**PP2, "comm_overlap.defer_embedding_wgrad_compute": True, "comm_overlap.wgrad_deferral_limit": 2})),
    "EXPERT_PARALLEL_WITHOUT_EXPERTS": (r({"model.expert_model_parallel_size": 2}),
                                        r({"model.expert_model_parallel_size": 2, "model.num_moe_experts": 8})),
    "FLEX_DISPATCHER_NOT_ON_THIS_GPU": (r({"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "deepep"}, gpu="gb200"),
                                        r({"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "deepep"}, gpu="h100")),
    "CUDA_GRAPH_LOCAL_SCOPED": (r({"model.cuda_graph_impl": "local", "model.cuda_graph_scope": ["attn"]}),
                                r({"model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["attn"]})),
    "FULL_ITERATION_GRAPH_NAN_CHECK": (r({"model.cuda_graph_impl": "full_iteration"}),
                                       r({"model.cuda_graph_impl": "full_iteration", "rerun_state_machine.check_for_nan_in_loss": False})),
    "BATCH_NOT_DIVISIBLE_BY_DP": (r({"train.micro_batch_size": 1, "train.global_batch_size": 6}),
                                  r({"train.micro_batch_size": 1, "train.global_batch_size": 16})),
    "CP_SEQUENCE_NOT_DIVISIBLE": (r({**SFT_CP, "model.seq_length": 6}), r({**SFT_CP, "model.seq_length": 8})),
    "CP_FINETUNE_AVERAGE_IN_COLLECTIVE": (r(SFT_CP, gpus=4, recipe="recipes.llama3_8b_sft_config"),
                                          r({**SFT_CP, "model.calculate_per_token_loss": True, "ddp.average_in_collective": False},
                                            gpus=4, recipe="recipes.llama3_8b_sft_config")),
    "FP4_WITH_FP8": (r({"mixed_precision": "bf16_with_fp8_delayed_scaling_mixed", "mixed_precision.fp4": "e2m1"}),
                     r({"mixed_precision": "bf16_with_fp8_delayed_scaling_mixed"})),
    "FP4_PARAM_GATHER_WITHOUT_FP4": (r({"mixed_precision.fp4_param_gather": True}),
                                     r({"mixed_precision": "bf16_with_nvfp4_mixed", "mixed_precision.fp4_param_gather": True})),
    "MXFP8_REUSE_WITHOUT_FP8_PARAM_GATHER": (r({"mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": True}), r(MXFP8)),
    "NUM_BUCKETS_WITH_BUCKET_SIZE": (r({**CO, "ddp.num_buckets": 4}), r({"ddp.num_buckets": 4})),
    "MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP": (r({**MXFP8, **PP2, **VPP, "comm_overlap.overlap_param_gather_with_optimizer_step": True}),
                                              r({**MXFP8, **PP2, **VPP})),
    "MXFP8_PARAM_GATHER_WITHOUT_REUSE": (r({**MXFP8, "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": False}), r(MXFP8)),
    "FP8_PARAM_GATHER_WITHOUT_FP8": (r({"mixed_precision.fp8_param_gather": True}),
                                     r({"mixed_precision": "bf16_with_fp8_current_scaling_mixed", "mixed_precision.fp8_param_gather": True})),
    "LAUNCH_ENV_NOT_COMM_OVERLAP_FIELD": (r({"comm_overlap.cuda_device_max_connections": 1}), r({"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1})),
    "LAUNCHER_ENV_WINS": (r({"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1}, launcher_env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"}),
                          r({"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1}, launcher_env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})),
    "LAUNCH_ENV_DIFFERS_FROM_BRIDGE": (lint({**TP2, "comm_overlap.tp_comm_overlap": True, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 8}),
                                       lint({**TP2, "comm_overlap.tp_comm_overlap": True, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1})),
    "LAUNCH_ENV_TUNED_DIFFERENTLY": (lint({**TP2, "comm_overlap.tp_comm_overlap": True, "env_vars.NVTE_FWD_LAYERNORM_SM_MARGIN": 7}),
                                     lint({**TP2, "comm_overlap.tp_comm_overlap": True})),
    "LAUNCH_ENV_NOT_SET": (lint({**TP2, "comm_overlap.tp_comm_overlap": True}),
                           ("lint, every launch variable set", lint({**TP2, "comm_overlap.tp_comm_overlap": True})[1])),
    "UNMODELED_OVERLAP_KEY": (r({"ddp.num_distributed_optimizer_instances": 2}), r({"ddp.check_for_nan_in_grad": True})),
    "UNMODELED_KEY": (r({"ddp.check_for_nan_in_grad": True}), r({"ddp.num_distributed_optimizer_instances": 2})),
    "RELEASE_NOT_VERIFIED": (r(bridge_version="0.7.0"), r(bridge_version="0.6.2")),
    "RELEASE_READ_FROM_SOURCE": (r(bridge_version="0.6.0"), r(bridge_version="0.5.1")),
    "RECIPE_REJECTED_OUTSIDE_OVERLAP": (r(gpus=32, recipe="recipes.deepseek_v4_flash_no_mtp_sft_32gpu_h100_bf16_config"),
                                        r(gpus=2, recipe="recipes.llama3_8b_sft_config")),
    "MODE_LEFT_OFF": (lint(TP2), lint({**TP2, "comm_overlap.tp_comm_overlap": True})),
    "PRESET_NOT_FOR_LAYOUT": (lint({**TP2, "comm_overlap.tp_comm_overlap": True,
                                    "comm_overlap.tp_comm_overlap_cfg": "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"}),
                              lint({**TP2, "comm_overlap.tp_comm_overlap": True, "comm_overlap.tp_comm_overlap_cfg": PRESET_H100})),
    "PRESET_NOT_USED": (lint({**PRESET_LAYOUT, "comm_overlap.tp_comm_overlap": True}),
                        lint({**PRESET_LAYOUT, "comm_overlap.tp_comm_overlap": True, "comm_overlap.tp_comm_overlap_cfg": PRESET_H100})),
    "SAVED_EFFECTIVE_DIFFERS": (("saved", {"ddp": {"overlap_grad_reduce": False}}), ("saved", {})),
    "REQUESTED_CHANGE": (diff(CO, {**CO, "comm_overlap.overlap_grad_reduce": False}), diff(CO, CO, gpus=(8, 1))),
    "PP_OVERLAP_SELECTION": (diff(PP2, {**PP2, **VPP}), diff(CO, CO, gpus=(8, 1))),
    "DP_OVERLAP_DEFAULTS": (diff({}, {"ddp.overlap_grad_reduce": False}), diff(PP2, {**PP2, **VPP})),
    "PRECISION_FROM_MIXED_PRECISION": (diff(CO, {**CO, "mixed_precision.grad_reduce_in_fp32": False}), diff(CO, CO, gpus=(8, 1))),
    "LAUNCH_ENV_CHANGED": (diff({**CO, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1}, {**CO, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 32}),
                           diff(CO, CO, gpus=(8, 1))),
}


def _write(tmp_path, name, overrides) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(check_fixes._nested(overrides)))  # JSON is YAML
    return str(path)


@dataclass
class Shown:
    """A finding as plan's JSON or a diff change shows it."""

    id: str
    message: str
    fix: str


def _lint(tmp_path, kw, env_set=False):
    result = api.lint(_write(tmp_path, "lint", kw["config"]), gpus=kw["gpus"], gpu=kw["gpu"])
    if not env_set:
        return result.findings
    rules = {f"env_vars.{name}": rule["value"] for name, rule in result.analysis.launch_env.items()}
    return api.lint(_write(tmp_path, "lint", {**kw["config"], **rules}), gpus=kw["gpus"], gpu=kw["gpu"]).findings


def _saved(tmp_path, edits):
    raw = yaml.safe_load((ROOT / "tests" / "data" / "run_configs" / "baseline.yaml").read_text())
    for section, values in edits.items():
        raw[section].update(values)
    path = tmp_path / "run_config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return api.lint(str(path), gpu="h100").findings


def _diff(tmp_path, kw):
    before, after = _write(tmp_path, "before", kw["before"]), _write(tmp_path, "after", kw["after"])
    result = api.diff(before, after, gpus_before=kw["gpus"][0], gpus_after=kw["gpus"][1])
    return [Shown(c.rule, c.message, c.fix or "") for c in result.changes]


def raised(case, tmp_path) -> list:
    """The findings a table entry earns (for diff: its changes, by the rule that explains each)."""
    verb, kw = case
    if verb == "resolve":
        return api.resolve(**kw).findings
    if verb == "plan":
        d = api.plan(**kw).to_dict()
        return [Shown(f["id"], f["message"], f["fix"]) for f in d["findings"] + d["plan_notes"]]
    if verb in ("lint", "lint, every launch variable set"):
        return _lint(tmp_path, kw, env_set=verb != "lint")
    if verb == "saved":
        return _saved(tmp_path, kw)
    return _diff(tmp_path, kw)


def test_every_id_has_an_example_and_a_counter_example():
    assert set(EXAMPLES) == set(findings.registry())


_UNFILLED = re.compile(r"\{[A-Za-z_]\w*\}")


@pytest.mark.parametrize("finding_id", sorted(EXAMPLES))
def test_example_raises_it_rendered_and_counter_example_does_not(finding_id, tmp_path):
    example, counter = EXAMPLES[finding_id]
    found = [f for f in raised(example, tmp_path) if f.id == finding_id]
    assert found, f"{finding_id} not raised by its example"
    for f in found:  # every template field supplied by the call site
        assert not _UNFILLED.search(f.message) and not _UNFILLED.search(f.fix), (f.message, f.fix)
    assert finding_id not in {f.id for f in raised(counter, tmp_path)}


def test_every_anchor_exists():
    ids = set(anchors.specs())
    missing = {fid: rec["anchor"] for fid, rec in findings.registry().items() if rec.get("anchor") and rec["anchor"] not in ids}
    assert not missing


def test_no_id_is_dead():
    """Each id appears, quoted, in the code that raises findings (checks, the resolver's rejections, lint, plan,
    diff, resolution)."""
    code = "\n".join(p.read_text() for p in (ROOT / "mbridge_overlap").rglob("*.py"))
    dead = [fid for fid in findings.registry() if f'"{fid}"' not in code]
    assert not dead


def test_every_assert_names_an_effective_field():
    fields = {f"{s}.{n}" for s, names in schema.EFFECTIVE_FIELDS.items() for n in names}
    fields |= {f"{s}.{n}" for s, section in schema.SECTIONS.items() for n in section}
    bad = {fid: k for fid, rec in findings.registry().items() for k in (rec.get("asserts") or {}) if k not in fields and not k.startswith("env_vars.")}
    assert not bad


def test_fixes_of_lint_on_generated_configs(tmp_path):
    """lint's own findings (MODE_LEFT_OFF above all) on run configs written from generated requests: every fix proven
    by linting the fixed config again; the one-value-per-key rule holds over lint's and the resolver's findings."""
    tally = check_fixes.check_generated_lint(400, 0, tmp_path)
    assert tally.configs > 250
    _proven_and_clean(tally, tally.configs)
    assert tally.by_id["MODE_LEFT_OFF"] > 20
