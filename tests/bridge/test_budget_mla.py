"""Multi-latent attention in the budget against Megatron-Core's own code on the CPU: the GPT model it builds with
MLASelfAttention on the meta device by TP x EP gloo ranks (parameter names, sizes on the rank, order, expert flag, and
both DP buffers' buckets) for a DeepSeek-like small shape, one without a query down projection, and DeepSeek-V3's
real layer sizes; and the tp_comm_overlap switch-off Megatron-Core's TELinear makes as it builds a down projection."""

from types import SimpleNamespace

import pytest
import torch

from mbridge_overlap.budget import dp as budget_dp, mla, shape as shapes

from test_budget_buckets import _as_te_builds_them, rank0_of  # (rootdir-relative: tests/bridge has no __init__)

_BUILD_MLA = """
import json, os, sys
import torch
import torch.nn.functional as F
port, s, rank, world = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
torch.distributed.init_process_group("gloo")
torch.cuda.current_device = lambda: "cpu"  # (MLA's rotary embedding builds its table on CUDA; it has no parameters)
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
from megatron.core.post_training.modelopt.layers import Linear
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.transformer_config import MLATransformerConfig
parallel_state.initialize_model_parallel(s["tp"], 1, expert_model_parallel_size=s["ep"])
moe = {k: s[k] for k in ("num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                         "moe_layer_freq") if s.get("num_moe_experts")}
cfg = MLATransformerConfig(num_layers=s["num_layers"], hidden_size=s["hidden_size"], ffn_hidden_size=s["ffn_hidden_size"],
                           num_attention_heads=s["num_attention_heads"], q_lora_rank=s["q_lora_rank"],
                           kv_lora_rank=s["kv_lora_rank"], qk_head_dim=s["qk_head_dim"],
                           qk_pos_emb_head_dim=s["qk_pos_emb_head_dim"], v_head_dim=s["v_head_dim"],
                           tensor_model_parallel_size=s["tp"], expert_model_parallel_size=s["ep"], **moe,
                           gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, normalization="RMSNorm",
                           qk_layernorm=s["qk_layernorm"], use_cpu_initialization=True, init_model_with_meta_device=True)
spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm")
for layer in spec.layer_specs:  # Transformer Engine's spec: the down projections duplicated (TELinear), as Linear is
    sub = layer.submodules.self_attention.submodules
    sub.linear_q_down_proj = sub.linear_kv_down_proj = Linear
    sub.core_attention = IdentityOp  # (TE's core takes k_channels, the local one not; neither has parameters)
with torch.device("meta"):
    model = GPTModel(cfg, spec, vocab_size=s["vocab_size"], max_sequence_length=4096, position_embedding_type="rope",
                     share_embeddings_and_output_weights=False)
if rank == 0:
    print(json.dumps([[n, p.numel(), not getattr(p, "allreduce", True)] for n, p in model.named_parameters()]))
"""


def _as_te_builds_mla(theirs: list) -> list:
    """The local spec's MLA parameters named and ordered as Transformer Engine's spec builds them: q_layernorm and
    kv_layernorm fused into linear_q_up_proj and linear_kv_up_proj (TELayerNormColumnParallelLinear: layer_norm_weight
    before weight; Bridge's mapping_registry maps the one name to the other), the input norm a module of its own
    (TENorm: MLA fuses it into no linear); then the MLP as _as_te_builds_them makes it."""
    norms = {n.rpartition(".self_attention.")[0] + "." + n.rpartition(".")[0].rpartition(".")[2]: (n, k, x)
             for n, k, x in theirs if n.endswith(("self_attention.q_layernorm.weight", "self_attention.kv_layernorm.weight"))}
    out = []
    for name, n, x in theirs:
        if name in {v[0] for v in norms.values()}:
            continue
        for up, norm in (("linear_q_up_proj", "q_layernorm"), ("linear_kv_up_proj", "kv_layernorm")):
            if name.endswith(f"self_attention.{up}.weight"):
                layer = name.rpartition(".self_attention.")[0]
                if f"{layer}.{norm}" in norms:
                    out.append([name.replace(".weight", ".layer_norm_weight"), norms[f"{layer}.{norm}"][1], False])
        out.append([name.replace("input_layernorm.weight", "input_layernorm.weight#"), n, x])
    return [[n.rstrip("#"), k, x] for n, k, x in _as_te_builds_them(out)]


SMALL = {"num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "vocab_size": 1024,
         "q_lora_rank": 96, "kv_lora_rank": 64, "qk_head_dim": 32, "qk_pos_emb_head_dim": 16, "v_head_dim": 48,
         "qk_layernorm": True, "num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 128,
         "moe_shared_expert_intermediate_size": 128, "moe_layer_freq": [0, 1, 1, 1]}
DENSE_NO_Q_LORA = {**{k: v for k, v in SMALL.items() if not k.startswith(("num_moe", "moe_"))}, "q_lora_rank": None,
                   "qk_layernorm": False, "num_layers": 3}


def _deepseek_v3_layers():
    """DeepSeek-V3's real layer sizes (the budget's deepseek_v3 shape), four layers: three dense and one MoE."""
    s = {k: list(v) if isinstance(v, tuple) else v for k, v in shapes.models()["deepseek_v3"]["shape"].items()}
    return {**s, "num_layers": 4, "moe_layer_freq": [0, 0, 0, 1]}


CASES = [(2, 2, SMALL, 200_000), (2, 1, DENSE_NO_Q_LORA, 200_000), (2, 1, _deepseek_v3_layers(), 40_000_000)]


@pytest.mark.parametrize("tp, ep, s, bucket", CASES, ids=["small_moe", "no_q_lora", "deepseek_v3"])
def test_mla_parameters_and_buckets_are_megatron_core_s(tp, ep, s, bucket):
    """rank 0's parameters of Megatron-Core's MLA GPT model are the budget's stage parameters (names, elements,
    expert flag, order), and both DP buffers' buckets Megatron-Core's layout makes of them are the budget's."""
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in s.items() if k in {f for f in shapes.Shape.__dataclass_fields__}}
    sh, _ = shapes.of(None, {**given, "multi_latent_attention": True})
    theirs = _as_te_builds_mla(rank0_of(_BUILD_MLA, {**s, "tp": tp, "ep": ep}, tp * ep, timeout=600))
    mine = [list(p) for p in shapes.stage_params(sh, tp, ep, s["num_layers"], first=True, last=True)]
    assert mine == theirs
    names = {n.partition("self_attention.")[2] for n, _, _ in mine if "self_attention." in n}
    assert ("linear_q_proj.weight" in names) == (s["q_lora_rank"] is None) and "linear_qkv.weight" not in names

    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    lay = SimpleNamespace(ddp={}, quantized=None)
    for expert in (False, True)[:1 + (ep > 1)]:
        tensors = [torch.nn.Parameter(torch.empty(n, device="meta")) for _, n, x in theirs if x == expert]
        layout = DistributedOptimizer._compute_per_buffer_param_layout(tensors, bucket, 4,
                                                                       DistributedDataParallelConfig(use_distributed_optimizer=True))
        groups = budget_dp._bucket_groups(lay, [p for p in mine if p[2] == expert], bucket, True, 4, False, lambda name: False)
        assert [n for g in groups for n, _ in g] == [e - s for s, e in layout.bucket_indices]
        assert len(groups) > 1


@pytest.mark.parametrize("name, stays", [("q_down_proj", False), ("kv_down_proj", False), ("q_proj", False), ("proj", True)])
def test_a_down_projection_turns_the_model_s_tp_overlap_off_as_the_budget_says(name, stays):
    """Megatron-Core's TELinear sets the shared config's tp_comm_overlap to False when it builds a linear whose
    userbuffers name is not qkv, proj, fc1 or fc2 (MLA's q_down_proj, kv_down_proj, q_proj: before Transformer Engine's
    own constructor, which needs CUDA here), so every layer built after it runs no userbuffers GEMM; linear_proj, built
    before them, keeps it. The budget runs none with MLA (tp.userbuffers_run) and says why (mla.ASSUMPTION)."""
    from megatron.core.extensions.transformer_engine import TELinear
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    from mbridge_overlap.budget import tp

    cfg = MLATransformerConfig(num_layers=1, hidden_size=256, num_attention_heads=8, tensor_model_parallel_size=2,
                               sequence_parallel=True, tp_comm_overlap=True, normalization="RMSNorm",
                               use_cpu_initialization=True)
    with pytest.raises(RuntimeError, match="TransformerEngine needs CUDA"):
        TELinear(256, 96, parallel_mode="duplicated" if "down" in name else "column", config=cfg,
                 init_method=lambda w: w, bias=False, skip_bias_add=False, skip_weight_param_allocation=False,
                 tp_comm_buffer_name=name)
    assert cfg.tp_comm_overlap is stays
    sh, _ = shapes.of(None, {**{k: v for k, v in DENSE_NO_Q_LORA.items() if k != "q_lora_rank"}, "multi_latent_attention": True})
    lay = SimpleNamespace(tp=2, sp=True, settings={"tp_comm_overlap": True}, domain=8, cp=1, dp=1, pp=1, ep=1, etp=2)
    assert not tp.userbuffers_run(lay, sh) and "tp_comm_overlap off" in mla.ASSUMPTION


@pytest.mark.parametrize("key", sorted(shapes.NOT_NULL | {"q_lora_rank"}))
def test_a_null_mla_size_is_refused_where_megatron_core_cannot_build_it(key):
    """fuzzV V2-7: Megatron-Core builds its MLA layer with q_lora_rank None (linear_q_proj) and with no other size
    None (MultiLatentAttention and MLASelfAttention add and multiply them: a TypeError), so the budget refuses a null
    of shapes.NOT_NULL, as it refuses 0, and takes q_lora_rank's (V2-8: on the command line too)."""
    import json
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    s = {**DENSE_NO_Q_LORA, "q_lora_rank": 96, "num_layers": 1, "tp": 1, "ep": 1, key: None}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", _BUILD_MLA, port, json.dumps(s), "0", "1"],
                          capture_output=True, text=True, timeout=600)
    assert (proc.returncode == 0) == (key in shapes.NULLABLE), proc.stderr[-2000:]
    assert key in shapes.NULLABLE or "TypeError" in proc.stderr.strip().splitlines()[-1]
    if key in shapes.NULLABLE:
        assert shapes.value_of(key, "null") is None
    else:
        with pytest.raises(shapes.UsageError, match=f"{key}: expected a whole number, got null"):
            shapes.value_of(key, "null")
    # every MLA size the budget reads (a field MLATransformerConfig adds to TransformerConfig) is decided: null taken or refused
    from dataclasses import fields

    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    added = {f.name for f in fields(MLATransformerConfig)} - {f.name for f in fields(TransformerConfig)}
    assert added & set(shapes.Shape.__dataclass_fields__) == shapes.NOT_NULL | {"q_lora_rank"}
