"""evalAB AB2-1: with a pipeline layout and VPP each model chunk holds the layers the layout gives it, not an even
split of the rank's layers, and a chunk without experts has no expert buffer (the chunk's index, not its contents,
decides its bucketing). Held to Megatron-Core on the CPU: a DeepSeek-V3-shaped model scaled down (dense first layer,
MoE after it, one MTP layer; DeepSeek-V3's layout Et|(tt|)*30mL on PP 2 x VPP 3: Et|tt|tt|tt|tt|mL, rank 0's chunk
0 the embedding and the dense layer alone, rank 1's last chunk the MTP layer and the loss alone) built on the meta
device by PP x DP gloo ranks with Megatron's own build_virtual_pipeline_stages, and wrapped by Megatron's own _ddp_wrap
(megatron/training/models/dist_utils.py, which Bridge's model_provider calls) with DistributedDataParallel recorded:
each chunk's disable_bucketing and the bucket size, DP and expert-DP sizes its full_param_layout is computed with.
The distributed optimizer's layout of each chunk's parameters (Transformer Engine's names and order) with those is
the budget's buckets, for rank 0 and for the rank the budget costs."""

import functools
import inspect
import json

import pytest
import torch

from mbridge_overlap.budget import dp as budget_dp, estimate, shape as shapes, system as systems
from mbridge_overlap.budget.layout import Layout, chunk_layers

import gloo_ranks  # (rootdir-relative: tests/bridge has no __init__)
from test_budget_buckets import _as_te_builds_them

_BUILD = """
import json, os, sys
import torch
import torch.nn.functional as F
port, s, rank, world = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
torch.distributed.init_process_group("gloo")
from megatron.core import parallel_state
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.transformer_config import TransformerConfig
cfg = TransformerConfig(num_layers=s["num_layers"], hidden_size=s["hidden_size"], ffn_hidden_size=s["ffn_hidden_size"],
                        num_attention_heads=s["num_attention_heads"], num_query_groups=s["num_query_groups"],
                        pipeline_model_parallel_size=s["pp"], pipeline_model_parallel_layout=s["layout"],
                        expert_model_parallel_size=s["ep"], num_moe_experts=s["num_moe_experts"],
                        moe_router_topk=s["moe_router_topk"], moe_ffn_hidden_size=s["moe_ffn_hidden_size"],
                        moe_layer_freq=s["moe_layer_freq"], mtp_num_layers=s["mtp_num_layers"],
                        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, normalization="RMSNorm",
                        use_cpu_initialization=True, init_model_with_meta_device=True, bf16=True,
                        params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16)
vpp = cfg.virtual_pipeline_model_parallel_size  # (the layout's: TransformerConfig detects it)
parallel_state.initialize_model_parallel(1, s["pp"], virtual_pipeline_model_parallel_size=vpp,
                                         expert_model_parallel_size=s["ep"])
out = None
if parallel_state.get_data_parallel_rank() == 0:  # (one DP rank of each pipeline rank builds its chunks)
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_decoder_block_spec, get_gpt_decoder_layer_specs,
                                                          get_gpt_mtp_block_spec)
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.training.models import dist_utils
    pg = ProcessGroupCollection.use_mpu_process_groups()
    pp_rank = pg.pp.rank()

    def build(pg_collection, pre_process, post_process, vp_stage=None):
        spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm", vp_stage=vp_stage,
                                          pp_rank=pp_rank)
        mtp = spec
        if not spec.layer_specs:  # Bridge's gpt_provider.mtp_block_spec: the last decoder layer's spec, re-derived
            mtp = get_gpt_decoder_layer_specs(cfg, use_transformer_engine=False, normalization="RMSNorm")[-1]
        mtp = get_gpt_mtp_block_spec(cfg, mtp, use_transformer_engine=False, vp_stage=vp_stage, pp_rank=pp_rank)
        with torch.device("meta"):
            return GPTModel(cfg, spec, vocab_size=s["vocab_size"], max_sequence_length=4096,
                            position_embedding_type="rope", pre_process=pre_process, post_process=post_process,
                            mtp_block_spec=mtp, pg_collection=pg_collection, vp_stage=vp_stage)

    chunks = dist_utils.build_virtual_pipeline_stages(build, pg, vpp)
    seen = []
    real_layout = DistributedOptimizer.compute_full_param_layout

    def layout(params, bucket_size, dp_size, ddp_config, expert_data_parallel_world_size=None):
        seen.append({"bucket_size": bucket_size, "dp": dp_size, "expert_dp": expert_data_parallel_world_size})
        return real_layout(params, bucket_size, dp_size, ddp_config, expert_data_parallel_world_size)

    class Recorded:  # DistributedDataParallel as _ddp_wrap calls it (CUDA buffers and streams not made)
        def __init__(self, config, ddp_config, module, disable_bucketing=False, **kw):
            seen[-1].update(disable_bucketing=disable_bucketing, params=[
                [n, p.numel(), not getattr(p, "allreduce", True), bool(getattr(p, "shared_embedding", False))]
                for n, p in module.named_parameters() if p.requires_grad])

    class Stream:
        def __init__(self, *a, **k): pass
        def wait_stream(self, other): pass
        def __enter__(self): return self
        def __exit__(self, *a): return False

    DistributedOptimizer.compute_full_param_layout = staticmethod(layout)
    dist_utils.DistributedDataParallel = Recorded
    torch.cuda.Stream = Stream
    torch.cuda.current_stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda stream: stream
    ddp = DistributedDataParallelConfig(use_distributed_optimizer=True, overlap_grad_reduce=True,
                                        bucket_size=s["bucket_size"])
    dist_utils._ddp_wrap(chunks, False, ddp, False, pg_collection=pg)
    out = {"pp_rank": pp_rank, "chunks": seen}
    print(json.dumps(out))
torch.distributed.barrier()
"""

# DeepSeek-V3 scaled down: its first layers dense (first_k_dense_replace), the rest MoE, one MTP layer, its layout's
# shape (Et|(tt|)*30mL: here PP 2 x VPP 3), EP 2 with DP 4 (an expert-DP group of 2)
SPEC = {"num_layers": 9, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "num_query_groups": 4,
        "vocab_size": 1024, "num_moe_experts": 4, "moe_router_topk": 2, "moe_ffn_hidden_size": 128,
        "moe_layer_freq": [0] + [1] * 8, "mtp_num_layers": 1, "layout": "Et|tt|tt|tt|tt|mL", "pp": 2, "ep": 2, "dp": 4,
        "bucket_size": 300_000}


@functools.lru_cache(maxsize=None)
def _built(spec: str) -> dict:
    """Each pipeline rank's chunks (rank 0 and the first rank of PP stride answer), as the build script records them."""
    s = json.loads(spec)
    got = gloo_ranks.run(_BUILD, spec, s["pp"] * s["dp"])
    return {g["pp_rank"]: g["chunks"] for g in got}


def _budget_side():
    s = SPEC
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in s.items() if k in shapes.Shape.__dataclass_fields__}
    shape = shapes.of(None, given)[0]
    from mbridge_overlap.run.layers import stage_decoders

    stages = stage_decoders(s["layout"])
    settings = dict.fromkeys(("tp_comm_overlap", "overlap_p2p_comm", "overlap_param_gather",
                              "overlap_moe_expert_parallel_comm"), False)
    lay = Layout(tp=1, pp=s["pp"], vp=len(stages) // s["pp"], cp=1, ep=s["ep"], dp=s["dp"], sp=False, seq=4096, mbs=1,
                 gbs=64, precision="bf16", domain=8, settings={**settings, "overlap_grad_reduce": True},
                 ddp={"use_distributed_optimizer": True, "bucket_size": s["bucket_size"]}, stages=stages,
                 mtp_stage=len(stages) - 1)
    return lay, shape


def _theirs(chunk: dict) -> dict:
    """The distributed optimizer's bucket sizes of one chunk's buffers, dense (False) and expert (True), as its DDP
    is given them: Megatron-Core's layout function on the chunk's parameters in Transformer Engine's names and order,
    with the bucket size and group sizes _ddp_wrap computed it with."""
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    shared = {n for n, _, _, e in chunk["params"] if e}
    tensors = []
    for name, n, expert in _as_te_builds_them([[n, k, x] for n, k, x, _ in chunk["params"]]):
        t = torch.nn.Parameter(torch.empty(n, device="meta", dtype=torch.bfloat16))
        t.allreduce, t.shared_embedding = not expert, name in shared
        tensors.append(t)
    full = DistributedOptimizer.compute_full_param_layout(tensors, chunk["bucket_size"], chunk["dp"],
                                                          DistributedDataParallelConfig(use_distributed_optimizer=True),
                                                          expert_data_parallel_world_size=chunk["expert_dp"])
    return {key.is_expert_parallel: [e - b for b, e in lay.bucket_indices] for key, lay in full.layouts.items()}


def _costed_rank(lay, shape) -> int:
    got = []
    orig = estimate._at

    def spy(lay_, shape_, system, shape_from, costed, *rest):
        b = orig(lay_, shape_, system, shape_from, costed, *rest)
        got.append((b.iteration_s, -costed.rank, costed.rank))
        return b

    estimate._at = spy
    try:
        estimate._estimate(lay, shape, systems.get("h100"), "")
    finally:
        estimate._at = orig
    return max(got)[2]


def test_the_wrapper_buckets_chunk_0_alone_and_ddp_takes_its_layout():
    """What the recorded wrapper stands on: _ddp_wrap computes each chunk's layout with no bucket size past chunk 0
    or past pipeline rank 0, and DistributedDataParallel takes the layout it is given."""
    from megatron.core.distributed import distributed_data_parallel
    from megatron.training.models import dist_utils

    wrap = inspect.getsource(dist_utils._ddp_wrap)
    assert "(model_chunk_idx > 0)" in wrap and "if disable_bucketing or pp_rank > 0" in wrap
    assert "compute_full_param_layout" in wrap and "full_param_layout" in wrap
    ddp = inspect.getsource(distributed_data_parallel.DistributedDataParallel.__init__)
    assert "full_param_layout.layouts[buffer_key]" in ddp


def test_each_chunk_s_buckets_are_megatron_core_s_for_rank_0_and_the_costed_rank():
    lay, shape = _budget_side()
    costed = _costed_rank(lay, shape)
    assert costed == 1  # the MTP layer and the output layer with 4 MoE layers outweigh rank 0's dense layer and 4 MoE
    got = _built(json.dumps(SPEC, sort_keys=True))
    for rank in sorted({0, costed}):
        chunks = got[rank]
        assert [c["disable_bucketing"] for c in chunks] == [False, True, True]
        layers = sum(chunk_layers(lay, rank))
        mtp = SPEC["mtp_num_layers"] if rank == SPEC["pp"] - 1 else 0
        bufs = budget_dp._buffers(lay, shape, systems.get("h100"), layers, rank, mtp)
        dense, experts = bufs
        assert not dense["whose"] and experts["whose"].startswith("expert (2-rank")
        theirs = [_theirs(c) for c in chunks]
        for buf, expert in ((dense, False), (experts, True)):
            mine = [[n for g in groups for n, _ in g] for groups in buf["chunks"]]
            assert mine == [t.get(expert, []) for t in theirs], (rank, expert)
    # what the layout makes of it: rank 0's chunk 0 (the embedding and dense layer 0) has no expert buffer and three
    # dense buckets (the embedding alone: shared with the MTP rank's copy); the MTP rank's last chunk no decoder layer
    assert chunk_layers(lay, 0) == (1, 2, 2) and chunk_layers(lay, 1) == (2, 2, 0)
    assert True not in _theirs(got[0][0]) and len(_theirs(got[0][0])[False]) >= 2
    assert all(True in _theirs(c) for c in got[0][1:]) and all(True in _theirs(c) for c in got[1])


@pytest.mark.parametrize("rank, chunk", [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)])
def test_each_chunk_holds_the_parameters_the_layout_gives_it(rank, chunk):
    """The budget's chunk of each parameter (_chunks with the layout's split: the final norm in rank 0's last chunk,
    beside the model's last decoder layer; the MTP layer, its embedding copy and the output layer in rank 1's) is the
    chunk Megatron-Core builds it in."""
    lay, shape = _budget_side()
    got = _built(json.dumps(SPEC, sort_keys=True))[rank][chunk]
    theirs = [n for n, _, _ in _as_te_builds_them([[n, k, x] for n, k, x, _ in got["params"]])]
    nums = budget_dp.stage_numbers(lay, shape.num_layers, rank)
    last = rank == lay.pp - 1
    params = shapes.stage_params(shape, 1, lay.ep, len(nums), first=rank == 0, last=last, numbers=nums, etp=1,
                                 mtp=SPEC["mtp_num_layers"] if last else 0,
                                 final_norm=shapes.final_norm_here(shape, last, nums))
    split = chunk_layers(lay, rank)
    mine = budget_dp._chunks(params, len(nums), lay.vp, first=rank == 0, split=split,
                             final=budget_dp._final_norm_chunk(split, nums, shape))[chunk]
    # Megatron-Core numbers a chunk's decoder layers from 0; the budget the rank's, across its chunks
    local = sum(split[:chunk])

    def renumbered(name):
        head, _, rest = name.partition("decoder.layers.")
        if not rest:
            return name
        i, _, tail = rest.partition(".")
        return f"{head}decoder.layers.{int(i) - local}.{tail}"

    assert [renumbered(n) for n, _, _ in mine] == theirs
