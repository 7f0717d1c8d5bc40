"""The newest TransformerConfig.__post_init__ refusals judged from a run config file (resolve --config), as from the
command line: the fields they read that the resolver does not model (moe_enable_deepep, moe_pad_expert_input_to_capacity,
moe_expert_rank_capacity_factor with the capacity fields checked before it, ep_overlap_early_attn_memory_release,
overlap_dispatch_backward_with_experts_wgrad) were dropped from a file, so a file that sets them was taken. Megatron-Core's
words are written out from its source (0.19.2 transformer_config.py:1589-1607, 1609-1614, 1692-1706, 2737-2746,
2759-2763, 2772-2776). tests/bridge/test_config_file_refusals_bridge.py holds each case to the installed Bridge."""

import pytest
import yaml

from mbridge_overlap import api
from conftest import ROOT

EP = {"num_moe_experts": 8, "expert_model_parallel_size": 8}
OVERLAP = {"overlap_moe_expert_parallel_comm": True, "num_moe_experts": 8, "expert_model_parallel_size": 2,
           "moe_token_dispatcher_type": "alltoall"}
ONE_EXPERT_GRAPHS = {**OVERLAP, "num_moe_experts": 1, "cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["mlp"]}
RANK = {**EP, "moe_expert_rank_capacity_factor": 1.5}
PAD = {**EP, "moe_token_dispatcher_type": "flex", "moe_pad_expert_input_to_capacity": True, "moe_expert_capacity_factor": 1.0}

# (finding, the model section of a refused file, Megatron-Core's words, one field changed that it takes)
CASES = [
    ("MOE_ENABLE_DEEPEP_REJECTED", {**EP, "moe_enable_deepep": True},
     "DeepEP backend is only supported with flex token dispatcher.", {"moe_token_dispatcher_type": "flex"}),
    ("DEEPEP_PAD_TO_CAPACITY_REJECTED", PAD,
     "Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity",
     {"moe_flex_dispatcher_backend": "hybridep"}),
    ("EXPERT_RANK_CAPACITY_REJECTED", RANK,
     "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep' or 'ncclep'.",
     {"moe_expert_rank_capacity_factor": None}),
    ("EXPERT_RANK_CAPACITY_REJECTED", {**RANK, "moe_flex_dispatcher_backend": "hybridep", "moe_token_dispatcher_type": "flex"},
     "moe_expert_rank_capacity_factor with the 'hybridep' backend requires use_transformer_engine_op_fuser to be enabled.",
     {"use_transformer_engine_op_fuser": True}),
    ("NCCLEP_NEEDS_FLEX_DISPATCHER", {**EP, "moe_flex_dispatcher_backend": "ncclep", "moe_token_dispatcher_type": "alltoall"},
     "moe_flex_dispatcher_backend='ncclep' requires moe_token_dispatcher_type='flex'.", {"moe_token_dispatcher_type": "flex"}),
    ("FLEX_SM_COUNTS_CONFLICT", {"moe_deepep_num_sms": 20, "moe_hybridep_num_sms": 16},
     "Conflicting deprecated SM-count knobs {'moe_deepep_num_sms': 20, 'moe_hybridep_num_sms': 16}; set a single "
     "moe_flex_dispatcher_num_sms instead.", {"moe_flex_dispatcher_num_sms": 24}),
    ("MOE_OVERLAP_REJECTED", {**EP, "ep_overlap_early_attn_memory_release": True},
     "overlap_moe_expert_parallel_comm must be enabled when enabling ep_overlap_early_attn_memory_release",
     {"ep_overlap_early_attn_memory_release": False}),
    ("MOE_OVERLAP_REJECTED", {**OVERLAP, "overlap_dispatch_backward_with_experts_wgrad": True},
     "overlap_moe_expert_parallel_comm must be disabled when enabling overlap_dispatch_backward_with_experts_wgrad.",
     {"overlap_dispatch_backward_with_experts_wgrad": False}),
    ("MOE_OVERLAP_REJECTED", ONE_EXPERT_GRAPHS,
     "CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm", {"cuda_graph_modules": ["attn"]}),
]


def _write(tmp_path, model: dict, base: dict | None = None) -> str:
    data = base or {}
    data["model"] = {**data.get("model", {}), **model}
    path = tmp_path / "run_config.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _errors(path: str, version: str = "0.6.2", gpus: int = 8):
    return [f for f in api.resolve(config=path, gpus=gpus, gpu="h100", bridge_version=version).findings if f.severity == "error"]


@pytest.mark.parametrize("finding, model, words, taken", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_config_file_s_value_is_refused_in_megatron_core_s_words_and_one_it_takes_is_not(tmp_path, finding, model, words, taken):
    (f,) = _errors(_write(tmp_path, model))
    assert f.id == finding and f.message.partition(": ")[2] == words
    assert not _errors(_write(tmp_path, {**model, **taken}))


SAVED = [c[:3] for c in CASES[:4] + CASES[6:8]]  # (the SM counts' saved file: test_flex_sm_counts.py)


@pytest.mark.parametrize("finding, model, words", SAVED, ids=[c[0] for c in SAVED])
def test_a_saved_run_config_s_values_are_read_beside_its_every_other_field(tmp_path, finding, model, words):
    """The whole baseline as Bridge saves it (every MoE field at its default: the load-balancing and capacity fields
    checked before the rank capacity's do not raise), with the refused values written in; its TP 4 and PP 4 at 128
    GPUs, expert TP 1 (its 4 refuses the bias the GPT-3 shape has).
    Its comm_overlap section decides the MoE overlap (Bridge sets the model's from it): asked for there too."""
    base = yaml.safe_load((ROOT / "tests" / "data" / "run_configs" / "baseline.yaml").read_text())
    base["comm_overlap"]["overlap_moe_expert_parallel_comm"] = model.get("overlap_moe_expert_parallel_comm")
    (f,) = _errors(_write(tmp_path, {**model, "expert_tensor_parallel_size": 1}, base), gpus=128)
    assert f.id == finding and f.message.partition(": ")[2] == words


@pytest.mark.parametrize("capacity, raises_first", [
    ({"moe_expert_capacity_factor": 1.0}, False),  # aux_loss, the default, works with a capacity factor
    ({"moe_expert_capacity_factor": 1.0, "moe_router_load_balancing_type": "seq_aux_loss"}, False),
    ({"moe_expert_capacity_factor": 1.0, "moe_router_load_balancing_type": "sinkhorn"}, True),
    ({"moe_router_load_balancing_type": "sinkhorn"}, False),  # no capacity factor: not checked
    ({"moe_router_load_balancing_type": ["aux_loss", "seq_aux_loss"], "moe_aux_loss_coeff": [0.01, 0.001]}, False),
    ({"moe_router_load_balancing_type": ["aux_loss", "seq_aux_loss"], "moe_aux_loss_coeff": 0.01}, True),
    ({"moe_pad_expert_input_to_capacity": True}, True),  # no capacity factor to pad to
    ({"moe_pad_expert_input_to_capacity": True, "moe_expert_capacity_factor": 1.0}, False),
    ({"moe_pad_expert_input_to_capacity": True, "moe_expert_capacity_factor": -1.0}, True),  # a negative one is None
])
def test_the_rank_capacity_is_judged_unless_a_capacity_check_before_it_raises(tmp_path, capacity, raises_first):
    ours = [f.id for f in _errors(_write(tmp_path, {**RANK, **capacity}))]
    assert ours == ([] if raises_first else ["EXPERT_RANK_CAPACITY_REJECTED"])


def test_the_command_line_s_capacity_words_are_read_as_hydra_types_them():
    def ours(words):
        found = api.resolve({"model.moe_expert_rank_capacity_factor": "1.5", **{f"model.{k}": v for k, v in words.items()}},
                            gpus=8, gpu="h100").findings
        return [f.id for f in found if f.severity == "error"]
    assert ours({"moe_expert_capacity_factor": "1.0"}) == ["EXPERT_RANK_CAPACITY_REJECTED"]
    assert ours({"moe_expert_capacity_factor": "1.0", "moe_router_load_balancing_type": "sinkhorn"}) == []
    assert ours({"moe_router_load_balancing_type": "[aux_loss,seq_aux_loss]", "moe_aux_loss_coeff": "[0.01,0.001]"}) \
        == ["EXPERT_RANK_CAPACITY_REJECTED"]
    assert ours({"moe_router_load_balancing_type": "[aux_loss,seq_aux_loss]"}) == []
    assert ours({"moe_pad_expert_input_to_capacity": "true"}) == []
