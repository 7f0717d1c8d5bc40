"""One analysis, one answer: with the run's config known, a log cause that a config finding explains is that finding
with resolve's proven fix; one line is one cause unless both hold; a log cause never offers a fix the config rules out."""

from __future__ import annotations

import io

from mbridge_overlap import api

RECIPE = "llama3_8b_pretrain_config"
PACKED = "gemma3_vl_12b_sft_config"  # a DirectHFSFTDatasetConfig: it has enable_in_batch_packing
RECV_TIMEOUT = ("[rank3]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=12, OpType=RECV, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) ran "
                "for 600008 milliseconds before timing out.\n")


def _diagnose(text: str, **kw) -> dict:
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode()), **kw).to_dict()


def _resolve(overrides: dict, gpus: int):
    return api.resolve(recipe=RECIPE, overrides=overrides, gpus=gpus)


def test_a_pipeline_hang_that_the_config_explains_is_the_config_s_finding():
    overrides = {"model.pipeline_model_parallel_size": 4, "dataset.enable_in_batch_packing": True,
                 "comm_overlap.tp_comm_overlap": False}
    # in-batch packing is a field of DirectHFSFTDatasetConfig, not of the pretraining recipe's GPTDatasetConfig (fuzzW W2-7)
    resolved = {f.id: f for f in api.resolve(recipe=PACKED, overrides=overrides, gpus=32).findings}
    assert "PP_VARIABLE_SEQ_LENGTHS_SHAPE_EXCHANGE" in resolved
    d = _diagnose(RECV_TIMEOUT, recipe=PACKED, overrides=overrides, gpus=32)
    (cause,) = [c for c in d["causes"] if c["evidence"]]
    assert cause["id"] == "PP_VARIABLE_SEQ_LENGTHS_SHAPE_EXCHANGE" and cause["predicted"] is True
    assert cause["fix"] == resolved[cause["id"]].fix
    assert cause["fix_overrides"] == resolved[cause["id"]].fix_overrides
    assert "PIPELINE_P2P_TIMEOUT" in cause["analysis"]


def test_a_pipeline_hang_is_not_told_to_turn_off_what_the_config_has_off():
    overrides = {"model.pipeline_model_parallel_size": 4, "comm_overlap.tp_comm_overlap": False}
    effective = _resolve(overrides, 32).to_dict()["effective"]
    assert effective["model"]["overlap_p2p_comm"] is False  # a non-interleaved schedule: Bridge leaves it off
    assert effective["model"]["batch_p2p_comm"] is True  # and batches the sends and receives (comm_overlap.py)
    d = _diagnose(RECV_TIMEOUT, recipe=RECIPE, overrides=overrides, gpus=32)
    (cause,) = [c for c in d["causes"] if c["evidence"]]
    assert cause["id"] == "PIPELINE_P2P_TIMEOUT"
    assert "overlap_p2p_comm=false with" not in cause["fix"] and "model.batch_p2p_comm=true" in cause["fix"]
    # without the config, the fix still says what to try when overlap_p2p_comm is on
    (alone,) = _diagnose(RECV_TIMEOUT)["causes"]
    assert "try overlap_p2p_comm=false" in alone["fix"]


def test_a_pipeline_hang_with_unbatched_p2p_keeps_the_unbatched_cause():
    """evalAF AF-4: with batch_p2p_comm=false Megatron-Core runs separate isend/irecv (0.19.2
    pipeline_parallel/p2p_communication.py:367-377 picks _batched_p2p_ops only when config.batch_p2p_comm, else
    _p2p_ops) whatever overlap_p2p_comm is; real Bridge 0.6.2 resolves PP 4 without VPP and batch_p2p_comm=false to
    overlap_p2p_comm=False, batch_p2p_comm=False (comm_overlap.py:454-463 derives them, the user's value then wins).
    The unbatched deadlock is not ruled out by overlap_p2p_comm=false; batching is the fix, proven on the config."""
    overrides = {"model.pipeline_model_parallel_size": 4, "comm_overlap.tp_comm_overlap": False,
                 "comm_overlap.batch_p2p_comm": False}
    model = _resolve(overrides, 32).to_dict()["effective"]["model"]
    assert (model["overlap_p2p_comm"], model["batch_p2p_comm"]) == (False, False)
    (cause,) = [c for c in _diagnose(RECV_TIMEOUT, recipe=RECIPE, overrides=overrides, gpus=32)["causes"] if c["evidence"]]
    assert cause["id"] == "PIPELINE_P2P_TIMEOUT"
    assert "does not apply" not in cause["fix"], cause["fix"]
    assert cause["fix"].startswith("comm_overlap.batch_p2p_comm=true ") and "_p2p_ops" in cause["fix"], cause["fix"]
    assert cause["fix_overrides"] == {"comm_overlap.batch_p2p_comm": True}


def test_an_expert_grid_error_is_one_cause_not_also_a_world_size_one():
    # TP x PP x CP = 1 x 8 x 1 divides 64; ETP x EP x PP = 1 x 64 x 8 does not
    line = "RuntimeError: world_size (64) is not divisible by expert_tensor_model_pipeline_parallel size (512)\n"
    d = _diagnose(line)
    assert [c["id"] for c in d["causes"]] == ["EXPERT_GRID_NOT_DIVIDING_WORLD"]
    # the same message shape with a plain model size is the other cause
    d = _diagnose("RuntimeError: world_size (6) is not divisible by 4\n")
    assert [c["id"] for c in d["causes"]] == ["GPUS_NOT_DIVISIBLE"]


def test_a_cause_the_config_predicts_carries_resolve_s_fix():
    overrides = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True,
                 "comm_overlap.tp_comm_overlap": True, "comm_overlap.tp_comm_bootstrap_backend": "mpi"}
    line = ("RuntimeError: PyTorch must be compiled with 'mpi' support in order to bootstrap Userbuffers with 'mpi' "
            "collectives.\n")
    d = _diagnose(line, recipe=RECIPE, overrides=overrides, gpus=8)
    (cause,) = [c for c in d["causes"] if c["id"] == "UB_BOOTSTRAP_NEEDS_MPI"]
    wanted = api.resolve(recipe=RECIPE, overrides=overrides, gpus=8, machine_facts={"torch_mpi": False})
    (same,) = [f for f in wanted.findings if f.id == "UB_BOOTSTRAP_NEEDS_MPI"]
    assert cause["fix_overrides"] == same.fix_overrides and cause["fix_overrides"]
    # without a config nothing is proven: no machine-applicable fix, only the text
    (alone,) = _diagnose(line)["causes"]
    assert alone["fix_overrides"] == {} and "tp_comm_bootstrap_backend=nccl" in alone["fix"]


def test_the_expert_parallel_sequence_parallel_warning_is_predicted_by_the_config():
    """Megatron-Core warns at config time (ModelParallelConfig.__post_init__) when EP > 1 and TP > 1 run without
    sequence parallel; the analysis had no such rule, so diagnose --config said it was known from the log only and
    offered no fix_overrides."""
    overrides = {"model.tensor_model_parallel_size": 2, "model.expert_model_parallel_size": 8, "model.num_moe_experts": 8,
                 "model.sequence_parallel": False}
    resolved = {f.id: f for f in api.resolve(overrides, gpus=32).findings}
    assert resolved["MOE_TP_WITHOUT_SEQUENCE_PARALLEL"].fix_overrides == {"model.sequence_parallel": True}
    line = ("/usr/local/lib/python3.12/dist-packages/megatron/core/model_parallel_config.py:562: UserWarning: When using "
            "expert parallelism and tensor parallelism for training, sequence parallelism must be used\n")
    d = _diagnose(line, overrides=overrides, gpus=32)
    (cause,) = [c for c in d["causes"] if c["id"] == "MOE_TP_WITHOUT_SEQUENCE_PARALLEL"]
    assert cause["predicted"] is True and cause["fix_overrides"] == {"model.sequence_parallel": True}
    on = {**overrides, "model.sequence_parallel": True}
    assert "MOE_TP_WITHOUT_SEQUENCE_PARALLEL" not in {f.id for f in api.resolve(on, gpus=32).findings}


def test_the_moe_layer_s_training_error_names_sequence_parallel():
    """evalP P2: Megatron-Core's MoELayer.forward raises in training with TP > 1 and sequence parallel off, whatever EP
    is; the analysis called it a warning later releases run past, and said nothing at EP 1."""
    overrides = {"model.tensor_model_parallel_size": 2, "model.num_moe_experts": 8, "model.sequence_parallel": False}
    (finding,) = [f for f in api.resolve(overrides, gpus=8).findings if f.id == "MOE_TP_WITHOUT_SEQUENCE_PARALLEL"]
    assert finding.severity == "error" and finding.when == "step"
    assert finding.fix_overrides == {"model.sequence_parallel": True}
    line = ("[rank3]: ValueError: During training, performance may degrade if MoE and tensor parallelismare enabled "
            "without also enabling sequence parallelism.\n")
    for kw in ({}, {"overrides": overrides, "gpus": 8}):
        (cause,) = [c for c in _diagnose(line, **kw)["causes"] if c["id"] == "MOE_TP_WITHOUT_SEQUENCE_PARALLEL"]
        assert "model.sequence_parallel" in cause["knobs"]
    assert cause["predicted"] is True and cause["fix_overrides"] == {"model.sequence_parallel": True}


CONNECTIONS_WARNING = ("[rank0]: /opt/venv/lib/python3.12/site-packages/megatron/core/tensor_parallel/layers.py:848: UserWarning: "
                       "When using sequence parallelism it is recommended to set the environment variable "
                       "CUDA_DEVICE_MAX_CONNECTIONS to 1 for maximum speedup\n")


def test_a_connections_warning_the_config_makes_expected_is_no_cause_and_its_fix_is_not_offered():
    """evalJ D2: with Megatron-FSDP, which asserts CUDA_DEVICE_MAX_CONNECTIONS != 1, the TP collectives' warning that
    asks for 1 is the price of the config: no cause (exit 0), a note that says why, never 'export ...=1'."""
    fsdp = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "ddp.use_megatron_fsdp": True,
            "checkpoint.ckpt_format": "fsdp_dtensor"}
    assert "FSDP_WITH_ONE_CONNECTION" in {f.id for f in _resolve({**fsdp, "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1}, 16).findings}
    d = _diagnose(CONNECTIONS_WARNING, recipe=RECIPE, overrides=fsdp, gpus=16)
    assert d["causes"] == [] and any("CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE left out: expected" in n for n in d["notes"])
    (alone,) = _diagnose(CONNECTIONS_WARNING)["causes"]
    assert alone["id"] == "CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE"
    kept = _diagnose(CONNECTIONS_WARNING, recipe=RECIPE, overrides={k: v for k, v in fsdp.items() if k.startswith("model.")},
                     gpus=16)
    assert [c["id"] for c in kept["causes"]] == ["CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE"]


def test_a_connections_warning_that_tp_1_cannot_print_says_the_log_and_config_disagree():
    """evalJ D2: every one of these warnings needs TP > 1 (or CP > 1): with a TP 1, CP 1 config the log is not of it."""
    one = {"model.tensor_model_parallel_size": 1, "model.context_parallel_size": 1}
    d = _diagnose(CONNECTIONS_WARNING, recipe=RECIPE, overrides=one, gpus=8)
    assert d["causes"] == [] and any("config rules it out (model.tensor_model_parallel_size=1" in n for n in d["notes"])
    cp = _diagnose(CONNECTIONS_WARNING, recipe=RECIPE, overrides={**one, "model.context_parallel_size": 2}, gpus=8)
    assert [c["id"] for c in cp["causes"]] == ["CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE"]


def test_a_connections_warning_on_a_gpu_bridge_launches_with_32_is_expected():
    """evalJ D2: on Blackwell Bridge's launcher sets CUDA_DEVICE_MAX_CONNECTIONS=32 (TP 2 here), so the warning that asks
    for 1 is expected there; on Hopper the launcher sets 1, and the warning stays a cause."""
    tp2 = {"model.tensor_model_parallel_size": 2, "model.context_parallel_size": 1}
    for gpu, value in (("b200", 32), ("h100", 1)):
        launch = api.resolve(recipe=RECIPE, overrides=tp2, gpus=16, gpu=gpu).to_dict()["launch_env"]
        assert launch["CUDA_DEVICE_MAX_CONNECTIONS"]["value"] in (value, str(value))
    blackwell = _diagnose(CONNECTIONS_WARNING, recipe=RECIPE, overrides=tp2, gpus=16, gpu="b200")
    assert blackwell["causes"] == [] and any("launch_env.CUDA_DEVICE_MAX_CONNECTIONS=32" in n for n in blackwell["notes"])
    hopper = _diagnose(CONNECTIONS_WARNING, recipe=RECIPE, overrides=tp2, gpus=16, gpu="h100")
    assert [c["id"] for c in hopper["causes"]] == ["CUDA_DEVICE_MAX_CONNECTIONS_NOT_ONE"]


PARAM_GATHER_CHECK = "AssertionError: --overlap-grad-reduce should be turned on when using --overlap-param-gather\n"


def test_megatron_lm_s_argument_check_offers_no_bridge_fix_and_says_bridge_never_runs_it():
    """evalAG AG-6: PARAM_GATHER_NEEDS_GRAD_REDUCE is Megatron-LM's validate_args / validate_yaml assert, which a Bridge
    run never calls (nothing in Bridge 0.6.2 or Megatron-Core 0.19.2 asserts the pair); on a Bridge config that runs
    overlap_param_gather without overlap_grad_reduce the cause offered ddp.overlap_grad_reduce=true
    comm_overlap.overlap_grad_reduce=true as if Bridge required it."""
    over = {"comm_overlap.overlap_grad_reduce": False, "comm_overlap.overlap_param_gather": True, "comm_overlap.tp_comm_overlap": False}
    (cause,) = _diagnose(PARAM_GATHER_CHECK, recipe=RECIPE, overrides=over, gpus=16)["causes"]
    assert cause["id"] == "PARAM_GATHER_NEEDS_GRAD_REDUCE" and cause["fix_overrides"] == {}
    assert "a Megatron-Bridge run never runs them" in cause["message"]
    assert "overlap_grad_reduce=true" not in cause["fix"] and "--overlap-grad-reduce" in cause["fix"]
    # Bridge itself takes the combination: it resolves with no error
    assert not [f for f in _resolve(over, 16).findings if f.severity == "error"]


def test_a_log_of_a_check_the_config_cannot_fail_is_left_out():
    """The check fires only with overlap_param_gather on and overlap_grad_reduce off; a config that runs the
    parameter gather off is not the log's (implausible_if)."""
    d = _diagnose(PARAM_GATHER_CHECK, recipe=RECIPE, overrides={"comm_overlap.tp_comm_overlap": False}, gpus=8)
    d_off = _diagnose(PARAM_GATHER_CHECK, recipe=RECIPE, gpus=8,
                      overrides={"comm_overlap.tp_comm_overlap": False, "comm_overlap.overlap_param_gather": False})
    assert d["causes"] == [] and any(n.startswith("PARAM_GATHER_NEEDS_GRAD_REDUCE left out") for n in d["notes"])
    assert d_off["causes"] == [] and any("ddp.overlap_param_gather=false" in n for n in d_off["notes"])


MPI_CRASH = "[rank0]: *** An error occurred in MPI_Init_thread\n[rank0]: *** on a NULL communicator\n"


def test_a_log_only_fix_the_config_already_runs_is_not_offered():
    """recheck48 R4: the MPI bootstrap crash offered comm_overlap.tp_comm_bootstrap_backend=nccl, which the config
    already ran (and with TP overlap off no userbuffers are bootstrapped at all)."""
    on = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True}
    assert _resolve(on, 8).effective["model"]["tp_comm_bootstrap_backend"] == "nccl"
    (cause,) = _diagnose(MPI_CRASH, recipe=RECIPE, overrides=on, gpus=8)["causes"]
    assert cause["id"] == "UB_MPI_BOOTSTRAP_FAILED" and cause["fix_overrides"] == {}
    assert "already runs" in cause["fix"] and "is the log of this config?" in cause["fix"]
    off = _diagnose(MPI_CRASH, recipe=RECIPE, overrides={**on, "comm_overlap.tp_comm_overlap": False}, gpus=8)
    assert off["causes"] == [] and any(n.startswith("UB_MPI_BOOTSTRAP_FAILED left out") for n in off["notes"])
    mpi = _diagnose(MPI_CRASH, recipe=RECIPE, overrides={**on, "comm_overlap.tp_comm_bootstrap_backend": "mpi"}, gpus=8)
    assert mpi["causes"][0]["fix_overrides"] == {"comm_overlap.tp_comm_bootstrap_backend": "nccl"}


NOT_IN_SYNC = ("/opt/venv/lib/python3.12/site-packages/megatron/bridge/training/utils/common_utils.py:112: UserWarning: "
               "overlap_param_gather settings were not in sync: ddp.overlap_param_gather=True, "
               "optimizer.overlap_param_gather=False. Automatically enabling overlap_param_gather for both settings.\n")


def test_validate_s_routine_param_gather_sync_is_no_cause_to_fix():
    """evalQ Q1: every healthy run of a recipe whose own ddp and optimizer flags disagree prints this warning; it was
    a warning cause (exit 1), and with the config "a gap in the rules" while resolve said nothing."""
    alone = api.diagnose(["-"], stdin=io.BytesIO(NOT_IN_SYNC.encode()))
    assert not alone.found and [c["id"] for c in alone.to_dict()["causes"]] == ["PARAM_GATHER_FLAGS_SYNCED"]
    resolved = {f.id: f for f in _resolve({}, 16).findings}
    (cause,) = _diagnose(NOT_IN_SYNC, recipe=RECIPE, gpus=16)["causes"]
    assert cause["id"] == "PARAM_GATHER_FLAGS_SYNCED" and cause["predicted"] is True
    # nothing to fix for the run (recheck50 R2): the text says which flag silences it, and it does
    assert cause["fix_overrides"] == resolved["PARAM_GATHER_FLAGS_SYNCED"].fix_overrides == {}
    assert "optimizer.overlap_param_gather=true" in cause["fix"]
    assert "PARAM_GATHER_FLAGS_SYNCED" not in {f.id for f in _resolve({"optimizer.overlap_param_gather": True}, 16).findings}


def test_the_sync_line_of_a_request_validate_overwrote_is_that_finding():
    asked = {"optimizer.overlap_param_gather": False}
    resolved = {f.id: f for f in _resolve(asked, 16).findings}
    assert "PARAM_GATHER_FLAGS_SYNCED" not in resolved
    (cause,) = _diagnose(NOT_IN_SYNC, recipe=RECIPE, overrides=asked, gpus=16)["causes"]
    assert cause["id"] == "PARAM_GATHER_FORCED_ON" and cause["predicted"] is True and cause["severity"] == "warning"
    assert cause["fix_overrides"] == resolved["PARAM_GATHER_FORCED_ON"].fix_overrides


def test_a_launcher_export_is_named_not_called_a_gap_in_the_rules():
    """evalQ Q2: Megatron-FSDP refused CUDA_DEVICE_MAX_CONNECTIONS=1 that the launcher exported; with a config that
    does not set it the answer said "a gap in the rules" while --launcher-env predicts it."""
    line = "AssertionError: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.\n"
    fsdp = {"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "fsdp_dtensor"}
    (cause,) = [c for c in _diagnose(line, recipe=RECIPE, overrides=fsdp, gpus=16)["causes"] if c["id"] == "FSDP_WITH_ONE_CONNECTION"]
    assert "gap in the rules" not in cause["analysis"] and "--launcher-env" in cause["analysis"]
    given = _diagnose(line, recipe=RECIPE, overrides=fsdp, gpus=16, launcher_env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    (cause,) = [c for c in given["causes"] if c["id"] == "FSDP_WITH_ONE_CONNECTION"]
    assert cause["predicted"] is True


def test_the_sync_line_of_a_param_gather_that_fails_is_that_error():
    """recheck51 T7: PARAM_GATHER_FLAGS_SYNCED said nothing was to change in the same answer as the error that this
    overlap fails without the distributed optimizer."""
    plain = {"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False}
    resolved = {f.id for f in _resolve(plain, 16).findings}
    assert "PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER" in resolved and "PARAM_GATHER_FLAGS_SYNCED" not in resolved
    (cause,) = _diagnose(NOT_IN_SYNC, recipe=RECIPE, overrides=plain, gpus=16)["causes"][:1]
    assert cause["id"] == "PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER" and cause["predicted"] is True


LEAD = "RuntimeError: boom\n"  # printed before its traceback's first frame, with no "Traceback" line (a doc's order)
BUCKET = ('  File "/x/megatron/core/distributed/param_and_grad_buffer.py", line 10, in start_grad_sync\n'
          "    with stream_context, _coalescing_manager(\n")
MODEL = '  File "/opt/train.py", line 3, in main\n    load()\n'


def test_a_lead_exception_line_its_traceback_takes_is_its_cause_only():
    d = _diagnose(LEAD + BUCKET)
    assert [c["id"] for c in d["causes"]] == ["OVERLAP_PATH_TRACEBACK"]
    assert d["causes"][0]["evidence"][0]["logged"] == "RuntimeError: boom"
    assert d["other"] == []


def test_a_lead_exception_line_no_traceback_takes_is_still_another_failure():
    for text in (LEAD + MODEL,  # a traceback through no overlap code
                 LEAD + BUCKET + "Traceback (most recent call last):\n" + MODEL + "ValueError: x\n"):  # another began
        d = _diagnose(text)
        assert "RuntimeError: boom" in [o["logged"] for o in d["other"]], text


GRAD_NONE = "AssertionError: param.grad being None is not safe when overlap_grad_reduce is True\n"


def test_a_fix_with_alternative_keys_names_the_one_the_config_takes():
    """evalAG AG-6: with the config known, GRAD_NONE_WITH_OVERLAP_GRAD_REDUCE's fix offered both comm_overlap's and
    ddp's key with the rule in parentheses. It now names the one that turns overlap_grad_reduce off in that config:
    ddp's where the config has no comm_overlap section, comm_overlap's where it has one (which writes over ddp's)."""
    (alone,) = _diagnose(GRAD_NONE)["causes"]
    assert "comm_overlap.overlap_grad_reduce=false (ddp.overlap_grad_reduce=false where the config has no" in alone["fix"]
    perf = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    for kw, key, other in ((dict(recipe=RECIPE, gpus=8), "ddp.overlap_grad_reduce", "comm_overlap.overlap_grad_reduce"),
                           (dict(recipe=perf), "comm_overlap.overlap_grad_reduce", "ddp.overlap_grad_reduce")):
        (cause,) = _diagnose(GRAD_NONE, **kw)["causes"]
        assert f"{key}=false hides the assert" in cause["fix"] and other not in cause["fix"], cause["fix"]
        # the key named turns it off in this config; the other alone does not (or is not the config's to set)
        assert api.resolve(overrides={key: False}, **kw).effective["ddp"]["overlap_grad_reduce"] is False
        if key.startswith("comm_overlap"):
            assert api.resolve(overrides={other: False}, **kw).effective["ddp"]["overlap_grad_reduce"] is True


BUCKET_ASSERT = "AssertionError: Communication call has not been issued for this bucket (10/12 params have grad available)\n"


def test_the_bucket_assert_s_fix_names_the_keys_the_config_takes():
    """BUCKET_GRAD_SYNC_NOT_ISSUED named comm_overlap's keys and ddp's with the rule even with the config known. Now,
    as AG-6 did for the other dp_keys findings: comm_overlap's where its section applies the DP settings (with the
    distributed optimizer: Bridge comm_overlap.py:635-643), else ddp's, with optimizer.overlap_param_gather beside
    ddp's (Bridge's validate turns both on where either is: training/config.py:1969-1981)."""
    perf = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    no_distopt = {"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False}
    for kw, keys, others in (
            (dict(recipe=RECIPE, gpus=8), ("ddp.overlap_grad_reduce", "ddp.overlap_param_gather",
                                           "optimizer.overlap_param_gather"), ("comm_overlap.",)),
            (dict(recipe=perf), ("comm_overlap.overlap_grad_reduce", "comm_overlap.overlap_param_gather"),
             ("ddp.", "optimizer.overlap")),
            (dict(recipe=perf, overrides=no_distopt), ("ddp.overlap_grad_reduce", "ddp.overlap_param_gather",
                                                       "optimizer.overlap_param_gather"), ("comm_overlap.overlap",))):
        cause = next(c for c in _diagnose(BUCKET_ASSERT, **kw)["causes"] if c["id"] == "BUCKET_GRAD_SYNC_NOT_ISSUED")
        said = cause["fix"].partition("avoid the assert")[0]
        assert all(f"{k}=false" in said for k in keys) and not any(o in said for o in others), cause["fix"]
        off = api.resolve(overrides={**kw.get("overrides", {}), **{k: False for k in keys}},
                          **{k: v for k, v in kw.items() if k != "overrides"}).effective
        assert off["ddp"]["overlap_grad_reduce"] is False and off["ddp"]["overlap_param_gather"] is False


DP_TIMEOUT = ("[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
              "timeout: WorkNCCL(SeqNum=4, OpType=_REDUCE_SCATTER_BASE, NumelIn={numel}, NumelOut=800, Timeout(ms)=600000) "
              "ran for 600055 milliseconds before timing out.\n")


def test_a_dp_timeout_s_test_names_the_keys_the_config_takes():
    """evalAH AH5: with the config known, DP_COLLECTIVE_TIMEOUT's test (turn off the overlap that schedules the
    collective) named comm_overlap's keys with '(ddp.* without a comm_overlap section)' after them. It now names the
    keys that turn each overlap off in that config (the dp_keys rule GRAD_NONE_WITH_OVERLAP_GRAD_REDUCE's fix uses),
    and without a config both keys with the rule."""
    (alone,) = _diagnose(DP_TIMEOUT.format(numel=6400))["causes"]
    assert "comm_overlap.overlap_param_gather=false (ddp.overlap_param_gather=false" in alone["fix"]
    assert "where the config has no comm_overlap section" in alone["fix"]
    perf = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    for kw, section, other in ((dict(recipe=RECIPE, gpus=8), "ddp", "comm_overlap"), (dict(recipe=perf), "comm_overlap", "ddp")):
        dp = api.resolve(**kw).data_parallel_size
        (cause,) = _diagnose(DP_TIMEOUT.format(numel=800 * dp), **kw)["causes"]
        assert cause["id"] == "DP_COLLECTIVE_TIMEOUT"
        for name in ("overlap_grad_reduce", "overlap_param_gather"):
            assert f"{section}.{name}=false" in cause["fix"] and f"{other}.{name}" not in cause["fix"], cause["fix"]
            # the keys named turn that overlap off in this config (diagleft: optimizer's beside ddp's param gather)
            named = [k for k in (f"{section}.{name}", f"optimizer.{name}") if f"{k}=false" in cause["fix"]]
            assert api.resolve(overrides=dict.fromkeys(named, False), **kw).effective["ddp"][name] is False
        assert "without a comm_overlap section" not in cause["fix"]
