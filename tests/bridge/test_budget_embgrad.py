"""The word embedding's gradient all-reduce between pipeline stages (budget/embgrad.py) and the DP buckets of a
pipeline rank after the first (budget/dp.py), against Megatron-Core's own code on the CPU: its GPT model built on the
meta device by TP x PP gloo ranks, each rank's parameters given main_grads in the dtype DDP's group_params_for_buffers
gives them, the embedding group made as each release makes it (Bridge 0.6's _get_embedding_ranks; Megatron-Core's
default_embedding_ranks, which Bridge 0.5.x leaves in place), and finalize_model_grads' own
_allreduce_word_embedding_grads and _allreduce_position_embedding_grads run with torch.distributed.all_reduce
recording what it is given (meta tensors carry no data): which ranks, how many elements, which dtype; and the
distributed optimizer's bucket layout of the rank the budget costs."""

import functools
import inspect
import json

import pytest
import torch

from mbridge_overlap.budget import dp as budget_dp, embgrad, shape as shapes, system as systems
from mbridge_overlap.budget.layout import Layout

import gloo_ranks  # (rootdir-relative: tests/bridge has no __init__)
from test_budget_buckets import _as_te_builds_them

_BUILD = """
import json, os, sys
from functools import partial
from types import SimpleNamespace
import torch
import torch.nn.functional as F
port, s, rank, world = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
torch.distributed.init_process_group("gloo")
torch.cuda.current_device = lambda: "cpu"
from megatron.core import parallel_state
import importlib
fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")  # (the package exports the function)
from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
from megatron.core.distributed.param_and_grad_buffer import group_params_for_buffers
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
from megatron.core.transformer.transformer_config import TransformerConfig
cfg = TransformerConfig(num_layers=s["num_layers"], hidden_size=s["hidden_size"], ffn_hidden_size=s["ffn_hidden_size"],
                        num_attention_heads=s["num_attention_heads"], num_query_groups=s["num_query_groups"],
                        tensor_model_parallel_size=s["tp"], pipeline_model_parallel_size=s["pp"],
                        mtp_num_layers=s.get("mtp_num_layers"), pipeline_model_parallel_layout=s.get("layout"),
                        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, normalization="RMSNorm",
                        use_cpu_initialization=True, init_model_with_meta_device=True, bf16=True,
                        params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16)
ranks_fn = None
if s["release"] == "first_tied_last_mtp":  # Bridge 0.6's setup passes its own; 0.5.x passes none
    from megatron.bridge.training.setup import _get_embedding_ranks
    ranks_fn = partial(_get_embedding_ranks, model_config=SimpleNamespace(
        share_embeddings_and_output_weights=s["share"], transformer=cfg))
parallel_state.initialize_model_parallel(s["tp"], s["pp"], get_embedding_ranks=ranks_fn)
spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm")
mtp_spec = get_gpt_mtp_block_spec(cfg, spec, use_transformer_engine=False) if s.get("mtp_num_layers") else None
first, last = parallel_state.is_pipeline_first_stage(), parallel_state.is_pipeline_last_stage()
with torch.device("meta"):
    model = GPTModel(cfg, spec, vocab_size=s["vocab_size"], max_sequence_length=4096, position_embedding_type="rope",
                     share_embeddings_and_output_weights=s["share"], pre_process=first, post_process=last,
                     mtp_block_spec=mtp_spec)
params = [p for p in model.parameters() if p.requires_grad]
for key, (ps, _) in group_params_for_buffers(params, s["fp32"]).items():  # DDP's main_grad: a view of its buffer
    for p in ps:
        p.main_grad = torch.empty(p.shape, dtype=key.grad_dtype, device="meta")
model.ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=s["fp32"], use_distributed_optimizer=True)
calls = []
def all_reduce(tensor, op=None, group=None, async_op=False):
    calls.append([tensor.numel(), str(tensor.dtype).replace("torch.", ""), torch.distributed.get_process_group_ranks(group)])
torch.distributed.all_reduce = all_reduce
fmg._allreduce_word_embedding_grads([model], cfg)
fmg._allreduce_position_embedding_grads([model], cfg, parallel_state.get_position_embedding_group(check_initialized=False),
                                        parallel_state.get_pipeline_model_parallel_group())
print(json.dumps({"calls": calls, "params": [[n, p.numel(), not getattr(p, "allreduce", True),
                                              bool(getattr(p, "shared_embedding", False))]
                                             for n, p in model.named_parameters()]}))
"""

SMALL = {"num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "num_query_groups": 4,
         "vocab_size": 1024}


def _ranks(s: dict) -> list:
    """Every rank's last line of JSON: its all_reduce calls and its parameters (each spec built once)."""
    return json.loads(_built(json.dumps(s, sort_keys=True)))


@functools.lru_cache(maxsize=None)
def _built(spec: str) -> str:
    s = json.loads(spec)
    return json.dumps(gloo_ranks.run(_BUILD, json.dumps(s), s["tp"] * s["pp"]))


def _lay(s: dict, dp: int = 1, stages: tuple = (), mtp_stage=None) -> Layout:
    settings = dict.fromkeys(("tp_comm_overlap", "overlap_p2p_comm", "overlap_param_gather",
                              "overlap_moe_expert_parallel_comm"), False)
    return Layout(tp=s["tp"], pp=s["pp"], vp=1, cp=1, ep=1, dp=dp, sp=False, seq=4096, mbs=1, gbs=64, precision="bf16",
                  domain=8, settings={**settings, "overlap_grad_reduce": True},
                  ddp={"use_distributed_optimizer": True, "grad_reduce_in_fp32": s["fp32"]}, stages=stages,
                  mtp_stage=mtp_stage, embedding_ranks=s["release"])


def _shape(s: dict):
    keys = set(shapes.Shape.__dataclass_fields__)
    return shapes.of(None, {**{k: v for k, v in s.items() if k in keys},
                            "share_embeddings_and_output_weights": s["share"]})[0]


# (the spec, the budget's layout's stages and MTP stage): PP 2 tied; PP 2 untied with MTP on the last stage; a layout
# that puts the MTP layers on a middle rank and the loss alone on the last (mtp_standalone), untied and tied
_MIDDLE = {**SMALL, "num_layers": 6, "mtp_num_layers": 1, "layout": "Et*3|t*3,m|L"}
CASES = {
    "tied_pp2": ({**SMALL, "tp": 2, "pp": 2, "share": True}, (), None),
    "mtp_pp2": ({**SMALL, "tp": 1, "pp": 2, "share": False, "mtp_num_layers": 1}, (), None),
    "untied_pp2": ({**SMALL, "tp": 1, "pp": 2, "share": False}, (), None),
    "mtp_middle": ({**_MIDDLE, "tp": 1, "pp": 3, "share": False}, (3, 3, 0), 1),
    "tied_mtp_middle": ({**_MIDDLE, "tp": 1, "pp": 3, "share": True}, (3, 3, 0), 1),
}
RELEASES = ["first_tied_last_mtp", "first_last"]


@pytest.mark.parametrize("release", RELEASES, ids=["bridge_0.6", "bridge_0.5"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_embedding_all_reduce_is_megatron_core_s(case, release):
    """The ranks that all-reduce the word embedding's gradient, the elements and the dtype, as finalize_model_grads
    runs it on Megatron-Core's model, are the budget's (embgrad.ranks, runs, collectives); FP32 main_grads with
    grad_reduce_in_fp32 (release 0.6's group for 0.6, Megatron-Core's default for 0.5: the MTP layers' middle rank
    outside it, the loss's last rank all-reducing its output layer's gradient in its place)."""
    spec, stages, mtp_stage = CASES[case]
    for fp32 in (True, False)[: 1 + (case == "tied_pp2")]:
        s = {**spec, "release": release, "fp32": fp32}
        got = _ranks(s)
        lay, sh = _lay(s, stages=stages, mtp_stage=mtp_stage), _shape(s)
        items = embgrad.collectives(lay, sh, systems.get("h100"))
        members = embgrad.ranks(lay, sh)
        for rank, out in enumerate(got):
            tp_rank, pp_rank = rank % s["tp"], rank // s["tp"]
            if not items or pp_rank not in members:
                assert out["calls"] == [], (rank, out["calls"])
                continue
            (item,) = items
            size = 4 if fp32 else 2
            assert out["calls"] == [[item.bytes // size, "float32" if fp32 else "bfloat16",
                                     [tp_rank + k * s["tp"] for k in members]]]
            assert item.group == len(members) and item.hidden == 0.0 and item.setting is None
        assert bool(items) == any(out["calls"] for out in got)


def test_the_groups_per_release_are_what_the_cases_show():
    """What the cases above hold the budget to, spelled out: Bridge 0.6 reduces over the first rank and the MTP
    layers' (with the last where tied: three ranks with the MTP layers in the middle), 0.5 over the first and last."""
    want = {("tied_pp2", RELEASES[0]): (0, 1), ("mtp_pp2", RELEASES[0]): (0, 1), ("untied_pp2", RELEASES[0]): None,
            ("mtp_middle", RELEASES[0]): (0, 1), ("tied_mtp_middle", RELEASES[0]): (0, 1, 2),
            ("tied_pp2", RELEASES[1]): (0, 1), ("mtp_pp2", RELEASES[1]): (0, 1), ("untied_pp2", RELEASES[1]): None,
            ("mtp_middle", RELEASES[1]): (0, 2), ("tied_mtp_middle", RELEASES[1]): (0, 2)}
    for (case, release), group in want.items():
        spec, stages, mtp_stage = CASES[case]
        s = {**spec, "release": release, "fp32": False}
        lay, sh = _lay(s, stages=stages, mtp_stage=mtp_stage), _shape(s)
        assert (embgrad.ranks(lay, sh) if embgrad.runs(lay, sh) else None) == group, (case, release)


@pytest.mark.parametrize("case, rank", [("mtp_pp2", 1), ("tied_pp2", 1), ("mtp_middle", 1), ("mtp_middle", 2)])
def test_a_later_rank_s_buckets_are_megatron_core_s(case, rank):
    """The rank the budget costs past the first (the MTP layers' rank, whose embedding copy Megatron-Core marks
    shared_embedding; a tied last stage's output layer, likewise): its parameters are the budget's, and the
    distributed optimizer's layout of them with no bucket size (DistributedDataParallel: pp_rank > 0) is the budget's
    buffer, the shared copy a bucket of its own. With the MTP layers on a middle rank that rank builds the decoder's
    final norm (the last decoder layer's stage) and no output layer; the loss's last rank the output layer alone."""
    from megatron.core.distributed import distributed_data_parallel
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    assert "if disable_bucketing or pp_rank > 0:" in inspect.getsource(distributed_data_parallel.DistributedDataParallel.__init__)
    spec, stages, mtp_stage = CASES[case]
    s = {**spec, "release": RELEASES[0], "fp32": True}
    got = _ranks(s)[rank * s["tp"]]["params"]
    shared = {n for n, _, _, e in got if e}
    theirs = _as_te_builds_them([[n, k, x] for n, k, x, _ in got])
    lay, sh = _lay(s, dp=4, stages=stages, mtp_stage=mtp_stage), _shape(s)
    holds_mtp = rank == (mtp_stage if mtp_stage is not None else s["pp"] - 1) and bool(s.get("mtp_num_layers"))
    (buf,) = budget_dp._buffers(lay, sh, systems.get("h100"), 0, rank, s.get("mtp_num_layers") if holds_mtp else 0)
    tensors = []
    for name, n, _ in theirs:
        t = torch.nn.Parameter(torch.empty(n, device="meta"))
        t.shared_embedding = name in shared
        tensors.append(t)
    layout = DistributedOptimizer._compute_per_buffer_param_layout(tensors, None, 4,
                                                                   DistributedDataParallelConfig(use_distributed_optimizer=True))
    copy = budget_dp.shared_copy(sh, rank == s["pp"] - 1, holds_mtp)
    assert shared == ({copy} if copy else set())
    assert buf["sizes"] == [e - b for b, e in layout.bucket_indices] and len(buf["sizes"]) == 1 + bool(copy)
    nums = budget_dp.stage_numbers(lay, sh.num_layers, rank)
    last = rank == s["pp"] - 1
    mine = shapes.stage_params(sh, s["tp"], 1, len(nums), first=False, last=last, numbers=nums,
                               mtp=s.get("mtp_num_layers") if holds_mtp else 0, final_norm=shapes.final_norm_here(sh, last, nums))
    assert [list(p) for p in mine] == theirs
