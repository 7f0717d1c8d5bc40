"""Multi-token prediction in the budget against Megatron-Core's own code on the CPU: the GPT model it builds with an MTP
block (get_gpt_mtp_block_spec on the decoder's block spec, as Bridge's mtp_block_spec does) on the meta device by
TP x PP x EP gloo ranks: the parameters of the rank holding the MTP layers (names, sizes, order, expert flag) and of
the first stage, both DP buffers' buckets, for a small dense shape, a small MoE one, PP 2 and DeepSeek-V3's real
layer sizes with MLA; and the tp_comm_overlap switch-off Megatron-Core's TELinear makes at eh_proj."""

from types import SimpleNamespace

import pytest
import torch

from mbridge_overlap.budget import dp as budget_dp, mtp, shape as shapes

from test_budget_buckets import _as_te_builds_them, rank0_of  # (rootdir-relative: tests/bridge has no __init__)
from test_budget_mla import _as_te_builds_mla

_BUILD_MTP = """
import json, os, sys
import torch
import torch.nn.functional as F
port, s, rank, world = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
torch.distributed.init_process_group("gloo")
torch.cuda.current_device = lambda: "cpu"  # (MLA's rotary embedding builds its table on CUDA; it has no parameters)
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
parallel_state.initialize_model_parallel(s["tp"], s["pp"], expert_model_parallel_size=s["ep"])
moe = {k: s[k] for k in ("num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                         "moe_layer_freq") if s.get(k) is not None and s.get("num_moe_experts")}
common = dict(num_layers=s["num_layers"], hidden_size=s["hidden_size"], ffn_hidden_size=s["ffn_hidden_size"],
              num_attention_heads=s["num_attention_heads"], tensor_model_parallel_size=s["tp"],
              pipeline_model_parallel_size=s["pp"], expert_model_parallel_size=s["ep"], mtp_num_layers=s["mtp_num_layers"],
              gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, normalization="RMSNorm",
              qk_layernorm=s["qk_layernorm"], use_cpu_initialization=True, init_model_with_meta_device=True,
              **({"pipeline_dtype": torch.bfloat16} if s["pp"] > 1 else {}), **moe)
if s.get("multi_latent_attention"):
    cfg = MLATransformerConfig(q_lora_rank=s["q_lora_rank"], kv_lora_rank=s["kv_lora_rank"], qk_head_dim=s["qk_head_dim"],
                               qk_pos_emb_head_dim=s["qk_pos_emb_head_dim"], v_head_dim=s["v_head_dim"], **common)
else:
    cfg = TransformerConfig(num_query_groups=s.get("num_query_groups"), **common)
spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm")
if s.get("multi_latent_attention"):
    from megatron.core.post_training.modelopt.layers import Linear
    for layer in spec.layer_specs:  # Transformer Engine's spec: the down projections duplicated (TELinear), as Linear is
        sub = layer.submodules.self_attention.submodules
        sub.linear_q_down_proj = sub.linear_kv_down_proj = Linear
        sub.core_attention = IdentityOp
mtp_spec = get_gpt_mtp_block_spec(cfg, spec, use_transformer_engine=False)
first, last = parallel_state.is_pipeline_first_stage(), parallel_state.is_pipeline_last_stage()
with torch.device("meta"):
    model = GPTModel(cfg, spec, vocab_size=s["vocab_size"], max_sequence_length=4096, position_embedding_type="rope",
                     share_embeddings_and_output_weights=s.get("share", False), pre_process=first, post_process=last,
                     mtp_block_spec=mtp_spec)
if rank == s.get("show", 0):
    print(json.dumps([[n, p.numel(), not getattr(p, "allreduce", True), bool(getattr(p, "shared_embedding", False))]
                      for n, p in model.named_parameters()]))
"""


def _theirs(s: dict, world: int, show: int = 0) -> tuple[list, set]:
    """The parameters rank `show` of Megatron-Core's model holds, as Transformer Engine's spec names and orders them,
    and the names it marks shared_embedding."""
    if show:  # (rank0_of reads rank 0's line: another rank prints as the last line of its own run)
        s = {**s, "show": show}
    got = _rank_of(s, world, show)
    shared = {n for n, _, _, e in got if e}
    plain = [[n, k, x] for n, k, x, _ in got]
    return (_as_te_builds_mla(plain) if s.get("multi_latent_attention") else _as_te_builds_them(plain)), shared


def _rank_of(s: dict, world: int, show: int) -> list:
    if not show:
        return rank0_of(_BUILD_MTP, s, world, timeout=900)
    import json
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", _BUILD_MTP, port, json.dumps(s), str(r), str(world)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[show][1][-3000:]
    return json.loads(outs[show][0].strip().splitlines()[-1])


SMALL = {"num_layers": 3, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "num_query_groups": 4,
         "vocab_size": 1024, "qk_layernorm": False, "mtp_num_layers": 2}
SMALL_MOE = {**SMALL, "num_layers": 4, "num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 128,
             "moe_shared_expert_intermediate_size": 128, "moe_layer_freq": [0, 1, 0, 1], "mtp_num_layers": 1,
             "qk_layernorm": True}


def _deepseek_v3_layers():
    """DeepSeek-V3's real layer sizes (the budget's deepseek_v3 shape), two layers (dense, MoE) and its one MTP layer."""
    s = {k: list(v) if isinstance(v, tuple) else v for k, v in shapes.models()["deepseek_v3"]["shape"].items()}
    return {**s, "num_layers": 2, "moe_layer_freq": [0, 1], "mtp_num_layers": 1, "multi_latent_attention": True}


def _mine_shape(s: dict):
    names = set(shapes.Shape.__dataclass_fields__)
    return shapes.of(None, {k: tuple(v) if isinstance(v, list) else v for k, v in s.items() if k in names})[0]


def _buckets_agree(theirs, mine, shared: set, expert: bool, bucket: int, tied: bool) -> int:
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    tensors = []
    for name, n, x in theirs:
        if x == expert:
            t = torch.nn.Parameter(torch.empty(n, device="meta"))
            t.shared_embedding = name in shared
            tensors.append(t)
    layout = DistributedOptimizer._compute_per_buffer_param_layout(tensors, bucket, 4,
                                                                   DistributedDataParallelConfig(use_distributed_optimizer=True))
    lay = SimpleNamespace(ddp={}, quantized=None)
    groups = budget_dp._bucket_groups(lay, [p for p in mine if p[2] == expert], bucket, True, 4,
                                      "embedding.word_embeddings.weight" if tied else None, lambda name: False)
    assert [n for g in groups for n, _ in g] == [e - s for s, e in layout.bucket_indices]
    return len(groups)


CASES = [(2, 1, SMALL, 200_000), (2, 2, SMALL_MOE, 200_000), (2, 1, _deepseek_v3_layers(), 40_000_000)]


@pytest.mark.parametrize("tp, ep, s, bucket", CASES, ids=["small_dense", "small_moe", "deepseek_v3_mla"])
def test_mtp_parameters_and_buckets_are_megatron_core_s(tp, ep, s, bucket):
    """PP 1: rank 0 holds the decoder and the MTP block; its parameters are the budget's stage parameters (names,
    elements, expert flag, order: the MTP layers after the decoder's final norm, before the output layer), and both
    DP buffers' buckets Megatron-Core's layout makes of them are the budget's."""
    sh = _mine_shape(s)
    theirs, shared = _theirs({**s, "tp": tp, "pp": 1, "ep": ep}, tp * ep)
    mine = [list(p) for p in shapes.stage_params(sh, tp, ep, s["num_layers"], first=True, last=True)]
    assert mine == theirs
    assert sum(n.startswith(f"mtp.layers.{s['mtp_num_layers'] - 1}.") for n, _, _ in mine) > 3 and not shared
    assert any(n.endswith("mtp_model_layer.mlp.router.weight") for n, _, _ in mine) == mtp.moe(sh) == bool(s.get("num_moe_experts"))
    for expert in (False, True)[:1 + (ep > 1)]:
        assert _buckets_agree(theirs, mine, shared, expert, bucket, tied=False) > 1


def test_with_pp_2_the_last_stage_holds_mtp_and_an_embedding_and_the_first_stage_s_is_a_bucket_of_its_own():
    """PP 2, no layout: Megatron-Core builds the MTP block on the last stage (mtp_on_this_rank) with an embedding of its
    own there (GPTModel: pre_process or mtp_process), and marks the first stage's embedding shared_embedding (tied to
    that copy: setup_embeddings_and_output_layer), which the distributed optimizer gives a bucket of its own: the
    budget's stage parameters on both stages and the first stage's buckets."""
    s = {**SMALL, "num_layers": 4, "mtp_num_layers": 1}
    sh = _mine_shape(s)
    spec = {**s, "tp": 1, "pp": 2, "ep": 1}
    first, shared = _theirs(spec, 2)
    last, _ = _theirs(spec, 2, show=1)
    assert [list(p) for p in shapes.stage_params(sh, 1, 1, 2, first=True, last=False)] == first
    assert [list(p) for p in shapes.stage_params(sh, 1, 1, 2, first=False, last=True)] == last
    assert shared == {"embedding.word_embeddings.weight"} and last[0][0] == "embedding.word_embeddings.weight"
    mine = [list(p) for p in shapes.stage_params(sh, 1, 1, 2, first=True, last=False)]
    assert _buckets_agree(first, mine, shared, False, 10**9, tied=True) == 2  # one bucket asked for: the embedding's apart


@pytest.mark.parametrize("name, stays", [("mtp_eh_proj", False), ("qkv", True)])
def test_eh_proj_turns_the_model_s_tp_overlap_off_as_the_budget_says(name, stays):
    """Megatron-Core's TELinear (TEColumnParallelLinear's base: Transformer Engine's spec builds eh_proj with it,
    MultiTokenPredictionLayer passing tp_comm_buffer_name="mtp_eh_proj") sets the shared config's tp_comm_overlap to
    False before Transformer Engine's own constructor (which needs CUDA here), so the MTP layer's transformer layer,
    built after it, gets no userbuffers; the decoder's layers, built before the MTP block, keep them. The budget runs
    the MTP layers' TP collectives without userbuffers and says why (mtp.ASSUMPTION)."""
    import inspect

    from megatron.core.extensions.transformer_engine import TELinear
    from megatron.core.models.gpt import gpt_model
    from megatron.core.transformer import multi_token_prediction as m
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(num_layers=1, hidden_size=256, num_attention_heads=8, tensor_model_parallel_size=2,
                            sequence_parallel=True, tp_comm_overlap=True, normalization="RMSNorm", use_cpu_initialization=True)
    with pytest.raises(RuntimeError, match="TransformerEngine needs CUDA"):
        TELinear(512, 128, parallel_mode="column", config=cfg, init_method=lambda w: w, bias=False, skip_bias_add=False,
                 skip_weight_param_allocation=False, tp_comm_buffer_name=name)
    assert cfg.tp_comm_overlap is stays
    layer = inspect.getsource(m.MultiTokenPredictionLayer.__init__)
    assert 'tp_comm_buffer_name="mtp_eh_proj"' in layer
    assert layer.index("self.eh_proj = build_module") < layer.index("self.mtp_model_layer = build_module")
    init = inspect.getsource(gpt_model.GPTModel.__init__)
    assert init.index("self.decoder = TransformerBlock") < init.index("self.mtp = MultiTokenPredictionBlock")
    assert "eh_proj" in mtp.ASSUMPTION and "without userbuffers" in mtp.ASSUMPTION
