"""The worked examples of SKILL.md state facts about Bridge; each fact is checked against the command it cites."""

from conftest import cli_json, run_cli
from test_docs import COMMANDS


def skill_commands():
    return {c for doc, c in COMMANDS if doc == "SKILL.md"}


def env(d):
    return {k: v["value"] for k, v in d["launch_env"].items()}


def ids(d):
    return {f["id"]: f for f in d["findings"] + d.get("plan_notes", [])}


def test_tp4_pp4_vpp2_on_64_h100():
    d = cli_json("plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--gpu", "h100")
    assert d["data_parallel_size"] == 4
    assert all(m["enabled"] for m in d["modes"].values())
    model, ddp = d["effective"]["model"], d["effective"]["ddp"]
    assert (model["overlap_p2p_comm"], model["batch_p2p_comm"]) == (True, False)
    assert ddp["overlap_grad_reduce"] and ddp["overlap_param_gather"] and ddp["align_param_gather"]
    assert ddp["bucket_size"] == 128 * 1024 * 1024
    assert not d["effective"]["optimizer"]["overlap_param_gather_with_optimizer_step"]
    assert "TP_OVERLAP_DEFAULT_UB_CFG" in ids(d)
    assert {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_FWD_LAYERNORM_SM_MARGIN": "20", "NVTE_BWD_LAYERNORM_SM_MARGIN": "20",
            "TORCH_NCCL_HIGH_PRIORITY": "1", "NCCL_NVLS_ENABLE": "0"}.items() <= env(d).items()
    sized = cli_json("plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--gpu", "h100",
                     "--hidden-size", "12288", "--seq-length", "2048", "--micro-batch-size", "1")
    assert sized["preset"] == "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048"


def test_nvfp4_on_gb200():
    d = cli_json("plan", "--tp", "2", "--gpus", "64", "--gpu", "gb200", "--precision", "nvfp4")
    assert not d["modes"]["tp"]["enabled"] and "TP_OVERLAP_NOT_RECOMMENDED" in ids(d)
    assert env(d)["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    proc = run_cli("resolve", "--gpus", "64", "--gpu", "gb200", "model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                   "comm_overlap.tp_comm_overlap=true", "mixed_precision=bf16_with_nvfp4_mixed", "--format", "json")
    assert proc.returncode == 1
    import json

    f = ids(json.loads(proc.stdout))["TP_OVERLAP_UNSUPPORTED_PRECISION"]
    assert f["severity"] == "error" and f["when"] == "step"


def test_megatron_fsdp_on_h100():
    d = cli_json("plan", "--tp", "2", "--gpus", "64", "--gpu", "h100", "--megatron-fsdp")
    assert d["overrides"]["ddp.use_megatron_fsdp"] is True and d["overrides"]["checkpoint.ckpt_format"] == "fsdp_dtensor"
    assert env(d)["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    assert "MEGATRON_FSDP_DP_OVERLAP" in ids(d)
    crash = cli_json("resolve", "--gpus", "64", "--gpu", "h100", "ddp.use_megatron_fsdp=true", "checkpoint.ckpt_format=fsdp_dtensor",
                     "++env_vars.CUDA_DEVICE_MAX_CONNECTIONS=1")
    assert ids(crash)["FSDP_WITH_ONE_CONNECTION"]["severity"] == "error"


def test_a_shipped_recipe_without_context_parallelism():
    d = cli_json("resolve", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "model.context_parallel_size=1")
    assert d["gpus"] == 64 and d["gpu"] == "h100" and d["data_parallel_size"] == 4
    assert all(m["enabled"] for m in d["modes"].values())
    assert d["effective"]["model"]["tp_comm_overlap_cfg"] == "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    both = run_cli("resolve", "--recipe", "llama3_70b_peft_8gpu_h100_bf16_config")
    assert both.returncode == 2 and "perf_recipes.llama3_70b_peft_8gpu_h100_bf16_config" in both.stderr


def test_the_examples_are_the_commands_skill_md_shows():
    shown = " ".join(skill_commands())
    for fragment in ("plan --tp 4 --pp 4 --vpp 2 --gpus 64 --gpu h100", "plan --tp 2 --gpus 64 --gpu gb200 --precision nvfp4",
                     "plan --tp 2 --gpus 64 --gpu h100 --megatron-fsdp",
                     "resolve --recipe llama3_70b_pretrain_64gpu_h100_bf16_config model.context_parallel_size=1"):
        assert fragment in shown, fragment
