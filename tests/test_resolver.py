"""The resolver against outcomes read off Bridge's source (comm_overlap.py, config.py, mixed_precision.py).

Each expectation is written from the Bridge code path named in the test, not from the resolver's output;
tests/bridge/test_conformance.py checks the same rules against the installed package."""

import pytest

import mbridge_overlap
from mbridge_overlap import UsageError

TP4_SP_PP4_VPP2 = {
    "model.tensor_model_parallel_size": 4,
    "model.sequence_parallel": True,
    "model.pipeline_model_parallel_size": 4,
    "model.virtual_pipeline_model_parallel_size": 2,
}


def ids(result):
    return {f.id for f in result.findings}


def test_baseline_without_comm_overlap_keeps_recipe_ddp_values():
    # _pretrain_common: comm_overlap None, ddp overlap_grad_reduce/overlap_param_gather True, distopt on both.
    r = mbridge_overlap.resolve({}, gpus=8)
    assert r.data_parallel_size == 8
    assert r.effective["model"]["tp_comm_overlap"] is False
    assert (r.effective["model"]["overlap_p2p_comm"], r.effective["model"]["batch_p2p_comm"]) == (False, True)
    assert r.effective["ddp"]["overlap_grad_reduce"] is True
    assert r.effective["ddp"]["bucket_size"] is None
    # validate() syncs overlap_param_gather: ddp True turns optimizer's on
    assert r.effective["optimizer"]["overlap_param_gather"] is True
    assert "COMM_OVERLAP_ABSENT" in ids(r)


def test_seed_example_enables_tp_pp_dp_overlap():
    r = mbridge_overlap.resolve({**TP4_SP_PP4_VPP2, "comm_overlap.tp_comm_overlap": True}, gpus=64)
    model, ddp = r.effective["model"], r.effective["ddp"]
    assert r.data_parallel_size == 64 // 16
    assert model["tp_comm_overlap"] is True and model["tp_comm_overlap_cfg"] is None
    assert (model["overlap_p2p_comm"], model["batch_p2p_comm"]) == (True, False)
    assert ddp["bucket_size"] == 128 * 1024 * 1024
    assert ddp["overlap_grad_reduce"] and ddp["overlap_param_gather"] and ddp["align_param_gather"]
    assert r.effective["optimizer"]["overlap_param_gather_with_optimizer_step"] is False
    assert {"TP_OVERLAP_DEFAULT_UB_CFG", "BRIDGE_SELECTS_ALIGN_PARAM_GATHER"} <= ids(r)


@pytest.mark.parametrize(
    "overrides, te, finding",
    [
        ({"model.tensor_model_parallel_size": 1, "model.sequence_parallel": True}, True, "TP_OVERLAP_OFF_TP_SIZE"),
        ({"model.tensor_model_parallel_size": 4, "model.sequence_parallel": False}, True, "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL"),
        ({"model.tensor_model_parallel_size": 4, "model.sequence_parallel": True}, False, "TP_OVERLAP_OFF_NO_TE"),
    ],
)
def test_tp_overlap_gating_turns_overlap_off_with_one_finding_each(overrides, te, finding):
    r = mbridge_overlap.resolve({**overrides, "comm_overlap.tp_comm_overlap": True}, gpus=8, te=te)
    assert r.effective["model"]["tp_comm_overlap"] is False
    tp_findings = {i for i in ids(r) if i.startswith("TP_OVERLAP_OFF")}
    assert tp_findings == {finding}


def test_tp1_with_sequence_parallel_drops_sequence_parallel_at_finalize():
    r = mbridge_overlap.resolve({"model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True}, gpus=8)
    assert r.effective["model"]["sequence_parallel"] is False
    assert {"SEQUENCE_PARALLEL_DROPPED", "TP_OVERLAP_OFF_TP_SIZE"} <= ids(r)


@pytest.mark.parametrize("vpp", [None, 1])
def test_pp_without_vpp_gets_batched_p2p(vpp):
    o = {"model.pipeline_model_parallel_size": 2, "comm_overlap.tp_comm_overlap": False}
    if vpp:
        o["model.virtual_pipeline_model_parallel_size"] = vpp
    r = mbridge_overlap.resolve(o, gpus=8)
    assert (r.effective["model"]["overlap_p2p_comm"], r.effective["model"]["batch_p2p_comm"]) == (False, True)
    assert "PP_OVERLAP_NOT_SELECTED" in ids(r)


def test_dp1_turns_dp_overlap_off_through_comm_overlap():
    r = mbridge_overlap.resolve({"model.tensor_model_parallel_size": 8, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True},
                                gpus=8)
    ddp = r.effective["ddp"]
    assert r.data_parallel_size == 1
    assert (ddp["overlap_grad_reduce"], ddp["overlap_param_gather"], ddp["bucket_size"]) == (False, False, None)
    assert r.effective["optimizer"]["overlap_param_gather"] is False
    assert "DP_SIZE_ONE" in ids(r)


def test_user_ddp_knob_is_overwritten_but_comm_overlap_knob_wins():
    r = mbridge_overlap.resolve({"ddp.overlap_grad_reduce": False, "comm_overlap.tp_comm_overlap": False}, gpus=8)
    assert r.effective["ddp"]["overlap_grad_reduce"] is True
    assert "DP_OVERLAP_KNOB_OVERWRITTEN" in ids(r)
    knob = next(f for f in r.findings if f.id == "DP_OVERLAP_KNOB_OVERWRITTEN")
    assert knob.fix_overrides == {"comm_overlap.overlap_grad_reduce": False}
    r = mbridge_overlap.resolve({"comm_overlap.overlap_grad_reduce": False}, gpus=8)
    assert r.effective["ddp"]["overlap_grad_reduce"] is False


def test_an_overwritten_off_says_what_the_next_answer_will_say():
    """evalM M8: the fix that carries the user's off onto comm_overlap brings MODE_LEFT_OFF, whose fix turns it on
    again. The first answer says so and names the other way; the second names the off as the user's choice."""
    over = {"ddp.overlap_grad_reduce": False, "comm_overlap.tp_comm_overlap": False}
    knob = next(f for f in mbridge_overlap.resolve(over, gpus=8).findings if f.id == "DP_OVERLAP_KNOB_OVERWRITTEN")
    assert "MODE_LEFT_OFF" in knob.fix and "drop ddp.overlap_grad_reduce" in knob.fix
    moved = mbridge_overlap.resolve({**over, **knob.fix_overrides}, gpus=8)
    left = next(f for f in moved.findings if f.id == "MODE_LEFT_OFF")
    assert "comm_overlap.overlap_grad_reduce=false by your override" in left.message
    dropped = mbridge_overlap.resolve({"comm_overlap.tp_comm_overlap": False}, gpus=8)
    assert dropped.effective["ddp"]["overlap_grad_reduce"] is True
    assert not {"DP_OVERLAP_KNOB_OVERWRITTEN", "MODE_LEFT_OFF"} & {f.id for f in dropped.findings}


def test_ddp_bucket_size_is_replaced_by_bridge_default_when_dp_gt_1():
    r = mbridge_overlap.resolve({"ddp.bucket_size": 50_000_000, "comm_overlap.tp_comm_overlap": False}, gpus=4)
    assert r.effective["ddp"]["bucket_size"] == 134217728
    r = mbridge_overlap.resolve({"comm_overlap.bucket_size": 50_000_000}, gpus=4)
    assert r.effective["ddp"]["bucket_size"] == 50_000_000


def test_distopt_only_on_optimizer_skips_dp_overlap_then_validate_turns_it_on():
    # setup() checks ddp.use_distributed_optimizer; validate() later syncs both flags to True.
    r = mbridge_overlap.resolve({"ddp.use_distributed_optimizer": False, "comm_overlap.tp_comm_overlap": False}, gpus=8)
    assert r.effective["ddp"]["use_distributed_optimizer"] is True
    assert r.effective["optimizer"]["use_distributed_optimizer"] is True
    assert r.effective["ddp"]["bucket_size"] is None  # CommOverlapConfig's 134217728 never applied
    msg = next(f.message for f in r.findings if f.id == "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE")
    assert "skipped DP overlap" in msg


def test_dp_knobs_inert_without_distributed_optimizer():
    r = mbridge_overlap.resolve(
        {
            "ddp.use_distributed_optimizer": False,
            "optimizer.use_distributed_optimizer": False,
            "comm_overlap.bucket_size": 80_000_000,
        },
        gpus=8,
    )
    assert r.effective["ddp"]["bucket_size"] is None
    assert r.effective["ddp"]["use_distributed_optimizer"] is False
    # the baseline's ddp.overlap_param_gather=True stays and validate() mirrors it onto the optimizer
    assert r.effective["optimizer"]["overlap_param_gather"] is True
    assert {"DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER", "PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER"} <= ids(r)


def test_overlap_param_gather_cannot_be_turned_off_on_one_side():
    r = mbridge_overlap.resolve({"ddp.overlap_param_gather": False, "optimizer.overlap_param_gather": True}, gpus=8)
    assert r.effective["ddp"]["overlap_param_gather"] is True
    assert "PARAM_GATHER_FORCED_ON" in ids(r)


def test_precision_knob_on_ddp_is_overwritten_by_mixed_precision():
    r = mbridge_overlap.resolve({"ddp.grad_reduce_in_fp32": False}, gpus=8)
    assert r.effective["ddp"]["grad_reduce_in_fp32"] is True  # bf16_mixed has grad_reduce_in_fp32=True
    assert "PRECISION_KNOB_OVERWRITTEN" in ids(r)
    r = mbridge_overlap.resolve({"mixed_precision": None, "ddp.grad_reduce_in_fp32": False}, gpus=8)
    assert r.effective["ddp"]["grad_reduce_in_fp32"] is False
    r = mbridge_overlap.resolve({"mixed_precision.grad_reduce_in_fp32": False}, gpus=8)
    assert r.effective["ddp"]["grad_reduce_in_fp32"] is False


@pytest.mark.parametrize(
    "recipe, grad_fp32, fp8_gather",
    [("fp16_mixed", False, False), ("bf16_with_fp8_current_scaling_mixed", True, True), ("bf16_with_fp8_subchannel_scaling_mixed", True, False)],
)
def test_mixed_precision_recipes_own_ddp_precision(recipe, grad_fp32, fp8_gather):
    r = mbridge_overlap.resolve({"mixed_precision": recipe}, gpus=8)
    assert (r.effective["ddp"]["grad_reduce_in_fp32"], r.effective["ddp"]["fp8_param_gather"]) == (grad_fp32, fp8_gather)


@pytest.mark.parametrize(
    "overrides, finding",
    [
        ({"mixed_precision.fp8_param_gather": True}, "FP8_PARAM_GATHER_WITHOUT_FP8"),
        ({"ddp.num_buckets": 4, "comm_overlap.tp_comm_overlap": False}, "NUM_BUCKETS_WITH_BUCKET_SIZE"),
        (
            {"mixed_precision": "bf16_with_mxfp8_mixed", "comm_overlap.overlap_param_gather_with_optimizer_step": True,
             "model.pipeline_model_parallel_size": 2, "model.virtual_pipeline_model_parallel_size": 2},
            "MXFP8_REUSE_WITH_PARAM_GATHER_IN_STEP",
        ),
        ({"mixed_precision": "bf16_with_mxfp8_mixed", "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": False},
         "MXFP8_PARAM_GATHER_WITHOUT_REUSE"),
    ],
)
def test_configs_bridge_rejects_are_errors(overrides, finding):
    r = mbridge_overlap.resolve(overrides, gpus=8)
    assert [f.id for f in r.errors] == [finding]
    assert r.errors[0].message.startswith("Bridge raises in ") and r.errors[0].when == "config"


def test_num_buckets_is_fine_without_comm_overlap():
    assert not mbridge_overlap.resolve({"ddp.num_buckets": 4}, gpus=8).errors


def test_model_knobs_overwritten_by_comm_overlap_and_ungated_without():
    r = mbridge_overlap.resolve({"model.overlap_p2p_comm": True, "comm_overlap.tp_comm_overlap": False}, gpus=8)
    assert r.effective["model"]["overlap_p2p_comm"] is False  # PP=1: Bridge selects False
    assert "MODEL_KNOB_OVERWRITTEN" in ids(r)
    r = mbridge_overlap.resolve({"model.tp_comm_overlap": True}, gpus=8)
    assert r.effective["model"]["tp_comm_overlap"] is True  # nothing checks TP size without comm_overlap
    assert "TP_OVERLAP_UNGATED" in ids(r)


@pytest.mark.parametrize("value, flagged", [(25, True), (25 * 2**20, True), (2**28, True), (2**29, True), (134217728, False),
                                            (40_000_000, False), (768_000_000, False), (2**31, False)])
def test_bucket_size_that_looks_like_bytes(value, flagged):
    r = mbridge_overlap.resolve({"comm_overlap.bucket_size": value}, gpus=8)
    assert ("BUCKET_SIZE_LOOKS_LIKE_BYTES" in ids(r)) is flagged


def test_launch_env_as_comm_overlap_field_is_an_error_finding():
    r = mbridge_overlap.resolve({"comm_overlap.cuda_device_max_connections": 1}, gpus=8)
    f = next(f for f in r.findings if f.id == "LAUNCH_ENV_NOT_COMM_OVERLAP_FIELD")
    assert f.severity == "error" and "env_vars.CUDA_DEVICE_MAX_CONNECTIONS" in f.fix


def test_env_vars_are_strings_and_launcher_env_wins():
    r = mbridge_overlap.resolve({"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": "1"}, gpus=8, launcher_env={"CUDA_DEVICE_MAX_CONNECTIONS": "32"})
    assert r.env_vars == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert "LAUNCHER_ENV_WINS" in ids(r)
    r = mbridge_overlap.resolve({"env_vars.NVTE_FWD_LAYERNORM_SM_MARGIN": 20}, gpus=8, launcher_env={"NVTE_FWD_LAYERNORM_SM_MARGIN": "20"})
    assert "LAUNCHER_ENV_WINS" not in ids(r)


def test_env_vars_do_not_exist_before_0_6():
    with pytest.raises(UsageError, match="no env_vars in Megatron-Bridge 0.5.1"):
        mbridge_overlap.resolve({"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1}, gpus=8, bridge_version="0.5.1")


def test_nemotron_ultra_recipe_exists_only_in_0_6_2():
    mbridge_overlap.resolve({"mixed_precision": "nemotron_3_ultra_bf16_with_nvfp4_mixed"}, gpus=8, bridge_version="0.6.2")
    with pytest.raises(UsageError, match="unknown recipe"):
        mbridge_overlap.resolve({"mixed_precision": "nemotron_3_ultra_bf16_with_nvfp4_mixed"}, gpus=8, bridge_version="0.6.1")


@pytest.mark.parametrize(
    "overrides, gpus, message",
    [
        ({"ddp.overlap_grad_reduct": True}, 8, "did you mean 'ddp.overlap_grad_reduce'"),
        ({"model.tensor_model_parallel_size": 0}, 8, "must be a positive integer"),
        ({"model.sequence_parallel": "yes"}, 8, "expected true or false"),
        ({"comm_overlap.tp_comm_overlap_cfg": "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen819"}, 8, "did you mean"),
        ({"mixed_precision": "bf16_mixd"}, 8, "unknown recipe"),
        ({"trian.micro_batch_size": 1}, 8, "unknown config section"),
        ({}, 0, "--gpus"),
    ],
)
def test_bad_input_names_the_field(overrides, gpus, message):
    with pytest.raises(UsageError, match=message):
        mbridge_overlap.resolve(overrides, gpus=gpus)


def test_real_but_unmodeled_keys_are_read_past_and_on_the_overlap_path_a_warning():
    r = mbridge_overlap.resolve({"train.train_iters": 10, "model.num_layers": 32, "ddp.suggested_communication_unit_size": 10**8}, gpus=8)
    off = next(f for f in r.findings if f.id == "UNMODELED_KEY")
    on = next(f for f in r.findings if f.id == "UNMODELED_OVERLAP_KEY")
    assert off.severity == "info" and "train.train_iters" in off.message
    assert "model.num_layers" not in off.message  # the model's shape: the budget prices it (evalAH AH2)
    assert on.severity == "warning" and on.knobs == ["ddp.suggested_communication_unit_size"]


def test_string_values_parse_like_the_command_line():
    typed = mbridge_overlap.resolve({"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True}, gpus=8).to_dict()
    text = mbridge_overlap.resolve({"model.tensor_model_parallel_size": "2", "model.sequence_parallel": "True"}, gpus=8).to_dict()
    assert typed == text


def test_config_file_then_overrides(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "model:\n  _target_: x.GPTModelProvider\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\n  num_layers: 4\n"
        "comm_overlap:\n  _target_: x.CommOverlapConfig\n  tp_comm_overlap: true\n  data_parallel_size: 4\n"
    )
    r = mbridge_overlap.resolve({"model.sequence_parallel": False}, gpus=8, config=cfg)
    assert r.effective["model"]["tensor_model_parallel_size"] == 2
    assert "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL" in ids(r)


def test_older_release_gives_same_rules():
    a = mbridge_overlap.resolve({**TP4_SP_PP4_VPP2, "comm_overlap.tp_comm_overlap": True}, gpus=64, bridge_version="0.5.0").to_dict()
    b = mbridge_overlap.resolve({**TP4_SP_PP4_VPP2, "comm_overlap.tp_comm_overlap": True}, gpus=64).to_dict()
    assert a["effective"] == b["effective"] and a["bridge_version"] == "0.5.0"


def test_a_recipe_s_own_tuned_launch_value_is_not_a_departure_from_bridge():
    """Bridge's Qwen3-235B H100 perf recipe sets the LayerNorm SM margins to 16 itself (most perf recipes set 20):
    that is Bridge's choice, not a value to correct; the same 16 given as an override on another recipe is said."""
    from mbridge_overlap import api

    own = {f.id for f in api.resolve(recipe="perf_recipes.qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config").findings}
    assert "LAUNCH_ENV_TUNED_DIFFERENTLY" not in own
    given = api.resolve(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config", overrides={"env_vars.NVTE_FWD_LAYERNORM_SM_MARGIN": 16})
    assert "LAUNCH_ENV_TUNED_DIFFERENTLY" in {f.id for f in given.findings}


def test_a_key_the_budget_prices_is_never_called_read_past_in_the_same_answer():
    """evalAH AH2: UNMODELED_KEY listed model.moe_router_topk and model.num_layers as 'read past' while the same
    answer's budget said it took them from the overrides."""
    shape = {"model.moe_router_topk": 2, "model.num_layers": 32, "model.hidden_size": 4096, "model.ffn_hidden_size": 14336,
             "model.num_attention_heads": 32, "model.vocab_size": 32000, "model.seq_length": 4096}
    r = mbridge_overlap.resolve({**shape, "train.global_batch_size": 64, "train.micro_batch_size": 1,
                                 "train.train_iters": 10}, gpus=8, gpu="h100").to_dict()
    read_past = " ".join(f["message"] for f in r["findings"] if f["id"].startswith("UNMODELED"))
    priced = [k for k in shape if k != "model.seq_length" and k in r["budget"]["shape_from"]]
    assert "train.train_iters" in read_past and priced and not any(k in read_past for k in priced)
