"""The budget's gradient buckets and a stage's parameters against Megatron-Core's own code, on the CPU: its bucket
layout functions (without and with the distributed optimizer) given the parameters of real Llama and Qwen3-MoE stages
(meta tensors, so no memory), and the parameters of a GPT model it builds on the meta device. (The pipeline tensor's
shape is not held to Megatron-Core here.)"""

import pytest
import torch

from mbridge_overlap.budget import buckets, shape as shapes

LAYOUTS = [  # model, TP, EP, layers on the stage, DP, bucket size (None: unset), distributed optimizer, high-busbw padding
    ("llama3_8b", 1, 1, 32, 8, None, True, False),
    ("llama3_70b", 4, 1, 20, 2, None, True, False),
    ("llama3_70b", 8, 1, 10, 16, 40_000_000, False, False),
    ("llama31_405b", 8, 1, 16, 64, 134_217_728, True, True),
    ("qwen3_30b_a3b", 1, 8, 12, 8, None, True, False),
]


def _params(model, tp, ep, layers):
    sh, _ = shapes.of(model, {})
    return [p for p in shapes.stage_params(sh, tp, ep, layers, first=True, last=False) if not p[2]]


@pytest.mark.parametrize("model, tp, ep, layers, dp, size, distopt, pad", LAYOUTS)
def test_buckets_are_megatron_cores(model, tp, ep, layers, dp, size, distopt, pad):
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.distributed.param_and_grad_buffer import _compute_default_per_buffer_param_layout
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    params = _params(model, tp, ep, layers)
    tensors = [torch.nn.Parameter(torch.empty(n, device="meta")) for _, n, _ in params]
    bucket_size = buckets.default_bucket_size(size, True, dp)
    if distopt:
        cfg = DistributedDataParallelConfig(use_distributed_optimizer=True, pad_buckets_for_high_nccl_busbw=pad)
        theirs = DistributedOptimizer._compute_per_buffer_param_layout(tensors, bucket_size, dp, cfg)
    else:
        theirs = _compute_default_per_buffer_param_layout(tensors, bucket_size)
    mine = buckets.layout([n for _, n, _ in params], bucket_size, distributed_optimizer=distopt, dp_size=dp,
                          pad_for_high_nccl_busbw=pad)
    assert [(s, e) for s, e, _ in mine] == list(theirs.bucket_indices)
    assert [u for _, _, u in mine] == list(theirs.per_bucket_numel_unpadded)
    assert len(mine) > 1


@pytest.mark.parametrize("size", [134_217_728, 40_000_000, None])
def test_a_shared_embedding_gets_a_bucket_of_its_own_as_megatron_core_gives_it(size):
    """evalF F3: tied embeddings with PP > 1 mark the first stage's embedding shared_embedding (language_module.py);
    the distributed optimizer's layout closes a bucket before it and after it."""
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    sh, _ = shapes.of("llama3_8b", {"share_embeddings_and_output_weights": True})
    params = [p for p in shapes.stage_params(sh, 1, 1, 16, first=True, last=False) if not p[2]]
    tensors = [torch.nn.Parameter(torch.empty(n, device="meta")) for _, n, _ in params]
    alone = frozenset(i for i, (name, _, _) in enumerate(params) if name == "embedding.word_embeddings.weight")
    for i in alone:
        tensors[i].shared_embedding = True
    cfg = DistributedDataParallelConfig(use_distributed_optimizer=True)
    theirs = DistributedOptimizer._compute_per_buffer_param_layout(tensors, size, 8, cfg)
    mine = buckets.layout([n for _, n, _ in params], size, distributed_optimizer=True, dp_size=8, alone=alone)
    assert alone and [(s, e) for s, e, _ in mine] == list(theirs.bucket_indices)
    assert [u for _, _, u in mine] == list(theirs.per_bucket_numel_unpadded)


def test_the_unset_bucket_size_is_megatron_cores_default():
    import inspect

    from megatron.core.distributed import distributed_data_parallel

    source = inspect.getsource(distributed_data_parallel.DistributedDataParallel.__init__)
    assert "max(40000000, 1000000 * dp_group.size())" in source
    assert buckets.default_bucket_size(None, True, 128) == max(40000000, 1000000 * 128)
    assert buckets.default_bucket_size(None, False, 8) is None  # one bucket without overlap_grad_reduce


def test_only_the_first_model_chunk_is_bucketed_as_megatron_wraps_them():
    """The budget buckets model chunk 0 alone (dp.collectives): Megatron's DDP wrapper, which Bridge calls, gives each
    virtual-pipeline chunk a DDP of its own with disable_bucketing for every other chunk (and for all with
    overlap_param_gather_with_optimizer_step), and DDP then leaves that chunk one bucket."""
    import inspect

    from megatron.core.distributed import distributed_data_parallel
    from megatron.training.models import dist_utils

    wrapper = inspect.getsource(dist_utils)
    assert "(model_chunk_idx > 0)" in wrapper and "or overlap_param_gather_with_optimizer_step" in wrapper
    assert "disable_bucketing=disable_bucketing" in wrapper
    ddp = inspect.getsource(distributed_data_parallel.DistributedDataParallel.__init__)
    assert "if disable_bucketing or pp_rank > 0:" in ddp and "self.bucket_size = None" in ddp


_BUILD = """
import json, os, sys
import torch
import torch.nn.functional as F
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1")
torch.distributed.init_process_group("gloo")
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig
parallel_state.initialize_model_parallel(1, 1)
s = json.loads(sys.argv[2])
cfg = TransformerConfig(num_layers=2, hidden_size=s["hidden_size"], ffn_hidden_size=s["ffn_hidden_size"],
                        num_attention_heads=s["num_attention_heads"], num_query_groups=s["num_query_groups"],
                        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, normalization="RMSNorm",
                        qk_layernorm=s["qk_layernorm"], use_cpu_initialization=True, init_model_with_meta_device=True)
with torch.device("meta"):
    model = GPTModel(cfg, get_gpt_layer_local_spec(qk_layernorm=s["qk_layernorm"]), vocab_size=s["vocab_size"], max_sequence_length=8192,
                     position_embedding_type="rope", share_embeddings_and_output_weights=False)
print(json.dumps([p.numel() for _, p in model.named_parameters()]))
"""


@pytest.mark.parametrize("given", [{}, {"qk_layernorm": True}])
def test_a_stage_s_parameters_are_megatron_cores_in_order(given):
    """Megatron-Core's GPT model built on the meta device (no memory; in a process of its own, which a process group
    needs) with the local layer spec, Transformer Engine's needing CUDA: the weights in registration order and the
    total element count (TE fuses the input norms into linear_qkv and linear_fc1, where the local spec keeps them
    apart: the same tensors, the norms elsewhere); with Qwen3's per-head query and key norms too (evalN N5)."""
    import dataclasses
    import json
    import socket
    import subprocess
    import sys

    sh, _ = shapes.of("llama3_8b", given)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", _BUILD, port, json.dumps(dataclasses.asdict(sh))],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    mine = [n for _, n, _ in shapes.stage_params(sh, 1, 1, 2, first=True, last=True)]
    assert sum(mine) == sum(theirs)
    assert [n for n in mine if n > sh.hidden_size] == [n for n in theirs if n > sh.hidden_size]


@pytest.mark.parametrize("model, tp, ep, layers, dp, first", [
    ("llama31_405b", 8, 1, 2, 16, True), ("llama3_70b", 4, 1, 4, 2, True), ("llama3_70b", 2, 1, 5, 8, False),
    ("qwen3_30b_a3b", 1, 8, 6, 8, True),
])
def test_quantized_weights_are_a_buffer_of_their_own_as_megatron_core_lays_them_out(model, tp, ep, layers, dp, first):
    """evalK K3: with FP8 (MXFP8, NVFP4) parameters Megatron-Core groups the parameters by storage (uint8 for TE's
    quantized GEMM weights, BF16 for the rest: group_params_for_buffers) and lays each buffer out on its own; the budget's
    bucket groups hold the same buckets (the quantized ones in order, every other bucket joined to the last)."""
    from types import SimpleNamespace

    from megatron.core.distributed import param_and_grad_buffer as pgb
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    from mbridge_overlap.budget import dp as budget_dp, layout

    sh, _ = shapes.of(model, {})
    params = [p for p in shapes.stage_params(sh, tp, ep, layers, first=first, last=False) if not p[2]]
    tensors = []
    for name, n, _ in params:
        t = torch.nn.Parameter(torch.empty(n, device="meta", dtype=torch.bfloat16))
        t.quantized_here = bool(layout.QUANTIZED_WEIGHT.search(name))
        tensors.append(t)
    size = buckets.default_bucket_size(None, True, dp)
    cfg = DistributedDataParallelConfig(use_distributed_optimizer=True, fp8_param_gather=True)
    real = pgb._param_uses_quantized_storage
    pgb._param_uses_quantized_storage = lambda p: getattr(p, "quantized_here", False)
    try:
        full = DistributedOptimizer.compute_full_param_layout(tensors, size, dp, cfg)
    finally:
        pgb._param_uses_quantized_storage = real
    theirs = {key.param_dtype: [e - s for s, e in lay.bucket_indices] for key, lay in full.layouts.items()}
    lay = SimpleNamespace(ddp={}, quantized=("FP8", 1), fp32_accumulation=False, fsdp=False)
    groups = budget_dp._bucket_groups(lay, params, size, True, dp, False, lambda name: bool(layout.QUANTIZED_WEIGHT.search(name)))
    assert [n for n, each in (g[0] for g in groups)] == theirs[torch.uint8]  # each group starts with a quantized bucket
    assert [n for n, _ in groups[-1][1:]] == theirs[torch.bfloat16] and all(e == 1 for g in groups for n, e in g[:1])
    assert all(e == 2 for n, e in groups[-1][1:]) and len(theirs) == 2


_BUILD_MOE = """
import json, os, sys
import torch
import torch.nn.functional as F
port, s, rank, world = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
torch.distributed.init_process_group("gloo")
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
from megatron.core.transformer import TransformerConfig
parallel_state.initialize_model_parallel(s["tp"], 1, expert_model_parallel_size=s["ep"])
freq = s["moe_layer_freq"]
cfg = TransformerConfig(num_layers=s["num_layers"], hidden_size=s["hidden_size"], ffn_hidden_size=s["ffn_hidden_size"],
                        num_attention_heads=s["num_attention_heads"], num_query_groups=s["num_query_groups"],
                        tensor_model_parallel_size=s["tp"], expert_model_parallel_size=s["ep"],
                        num_moe_experts=s["num_moe_experts"], moe_router_topk=s["moe_router_topk"],
                        moe_ffn_hidden_size=s["moe_ffn_hidden_size"],
                        moe_shared_expert_intermediate_size=s["moe_shared_expert_intermediate_size"],
                        moe_shared_expert_gate=s["moe_shared_expert_gate"], moe_layer_freq=freq,
                        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, normalization="RMSNorm",
                        qk_layernorm=s["qk_layernorm"], use_cpu_initialization=True, init_model_with_meta_device=True)
with torch.device("meta"):
    model = GPTModel(cfg, get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm"),
                     vocab_size=s["vocab_size"], max_sequence_length=4096, position_embedding_type="rope",
                     share_embeddings_and_output_weights=False)
if rank == 0:  # DistributedDataParallel puts a parameter whose allreduce is False in the expert-parallel buffers
    print(json.dumps([[n, p.numel(), not getattr(p, "allreduce", True)] for n, p in model.named_parameters()]))
"""


def rank0_of(code: str, spec: dict, world: int, timeout: int) -> list:
    """Run `code` as `world` gloo ranks (argv: port, the spec as JSON, rank, world) and read rank 0's last line of
    JSON: what Megatron-Core built there."""
    import json
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", code, port, json.dumps(spec), str(r), str(world)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][1][-3000:]
    return json.loads(outs[0][0].strip().splitlines()[-1])


def _as_te_builds_them(theirs: list) -> list:
    """The local spec's parameters (Transformer Engine's spec needs CUDA) named and ordered as Transformer Engine's
    spec builds the same tensors: the input norm fused into linear_qkv (TELayerNormColumnParallelLinear, built after
    linear_proj), a dense layer's pre-MLP norm into linear_fc1; SequentialMLP's experts as TEGroupedMLP's
    (GroupedLinear linear_fc1 with weight0..N, then linear_fc2)."""
    import re

    out, norm, fc = [], None, {"1": [], "2": []}

    def flush():
        out.extend(fc["1"] + fc["2"])
        fc["1"].clear()
        fc["2"].clear()

    for name, n, expert in theirs:
        m = re.fullmatch(r"(.*\.mlp\.experts\.)local_experts\.(\d+)\.linear_fc([12])\.weight", name)
        if m:
            fc[m[3]].append([f"{m[1]}linear_fc{m[3]}.weight{m[2]}", n, expert])
            continue
        flush()
        if name.endswith(".input_layernorm.weight"):
            norm = [name.replace("input_layernorm.weight", "self_attention.linear_qkv.layer_norm_weight"), n, expert]
            continue
        if name.endswith(".self_attention.linear_qkv.weight"):
            out.append(norm)
        if name.endswith(".mlp.linear_fc1.weight") and out[-1][0].endswith(".pre_mlp_layernorm.weight"):
            out[-1][0] = out[-1][0].replace("pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight")
        out.append([name, n, expert])
    flush()
    return out


MOE_SHAPES = [  # TP, EP, and a shape: shared experts with a gate and every 2nd layer MoE; a list pattern, no gate
    (2, 2, {"num_layers": 4, "moe_layer_freq": 2, "moe_shared_expert_intermediate_size": 384, "moe_shared_expert_gate": True}),
    (2, 1, {"num_layers": 5, "moe_layer_freq": [0, 1, 1, 0, 1], "moe_shared_expert_intermediate_size": 256,
            "qk_layernorm": True}),
]


@pytest.mark.parametrize("tp, ep, given", MOE_SHAPES)
def test_shared_experts_and_dense_layers_are_megatron_core_s_parameters_and_buckets(tp, ep, given):
    """Megatron-Core's GPT model with MoE layers where moe_layer_freq puts them and a shared expert in each (built on
    the meta device by TP x EP gloo processes on the CPU, rank 0's parameters): the budget's stage parameters are its
    parameters (names, elements on the rank, which are expert-parallel: a shared expert is not), in its order; and
    the budget's DP buckets of both buffers (dense and expert) are the ones Megatron-Core's own layout functions make of
    its parameters."""
    from types import SimpleNamespace

    from mbridge_overlap.budget import dp as budget_dp

    base = {"hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "num_query_groups": 4,
            "num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 128, "vocab_size": 1024,
            "moe_shared_expert_gate": False, "qk_layernorm": False}
    s = {**base, **given}
    sh, _ = shapes.of(None, {k: tuple(v) if isinstance(v, list) else v for k, v in s.items()})
    theirs = _as_te_builds_them(rank0_of(_BUILD_MOE, {**s, "tp": tp, "ep": ep}, tp * ep, timeout=300))
    mine = [list(p) for p in shapes.stage_params(sh, tp, ep, s["num_layers"], first=True, last=True)]
    assert mine == theirs
    assert any("shared_experts.linear_fc1" in n for n, _, _ in mine) and any(".mlp.linear_fc1." in n for n, _, _ in mine)
    assert not any(x for n, _, x in mine if "shared_experts" in n)
    assert any(x for _, _, x in mine) == (ep > 1)  # EP 1 with expert TP = TP: the experts' weights in the dense buffer

    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    lay = SimpleNamespace(ddp={}, quantized=None)
    for expert in (False, True)[:1 + (ep > 1)]:
        tensors = [torch.nn.Parameter(torch.empty(n, device="meta")) for _, n, x in theirs if x == expert]
        cfg = DistributedDataParallelConfig(use_distributed_optimizer=True)
        layout = DistributedOptimizer._compute_per_buffer_param_layout(tensors, 200_000, 4, cfg)
        groups = budget_dp._bucket_groups(lay, [p for p in mine if p[2] == expert], 200_000, True, 4, False, lambda name: False)
        assert [n for g in groups for n, _ in g] == [e - s for s, e in layout.bucket_indices]
        assert len(groups) > 1
