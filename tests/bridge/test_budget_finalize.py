"""finalize_model_grads' collectives besides the DP buckets and the word embedding's (budget/finalize.py), against
Megatron-Core's own code on the CPU: its GPT model built by TP x CP x EP x PP gloo ranks (the local spec with Transformer
Engine's TENorm for every norm, whose weight TE marks sequence_parallel as the norms TELayerNormColumnParallelLinear
fuses are marked; MLA's down projections duplicated as TELinear builds them; linear weights on the meta device), each
parameter given a main_grad in the dtype DDP's group_params_for_buffers gives it, and finalize_model_grads itself run
with the process groups Bridge passes (ProcessGroupCollection.use_mpu_process_groups) and torch.distributed's
all_reduce and broadcast recording what they are given: which ranks, how many elements, which dtype. The DP buckets'
finish_grad_sync is stubbed (tests/bridge/test_budget_buckets.py holds them). Runs under either release's Python
(0.6.2's Megatron-Core 0.19, 0.5.1's 0.18: the code that differs is not on these paths)."""

import functools
import inspect
import json

import pytest

from mbridge_overlap.budget import dp as budget_dp, embgrad, finalize, shape as shapes, system as systems
from mbridge_overlap.budget.layout import Layout

import gloo_ranks  # (rootdir-relative: tests/bridge has no __init__)
from test_budget_buckets import _as_te_builds_them

_BUILD = r'''
import json, os, sys
import torch
import torch.nn.functional as F
port, s, rank, world = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world))
torch.distributed.init_process_group("gloo")
torch.cuda.current_device = lambda: "cpu"
from megatron.core import parallel_state
import importlib
fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")
from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
from megatron.core.distributed.param_and_grad_buffer import group_params_for_buffers
from megatron.core.extensions.transformer_engine import TENorm
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt import gpt_layer_specs as specs
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.transformer_config import TransformerConfig, MLATransformerConfig
from megatron.core.models.backends import LocalSpecProvider
LocalSpecProvider.layer_norm = lambda self, *a, **k: TENorm
specs.LNImpl = TENorm  # Transformer Engine's norm (it sets sequence_parallel on its weight) in the local spec
moe = {k: s[k] for k in ("num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                         "moe_layer_freq", "moe_shared_expert_gate", "moe_router_enable_expert_bias",
                         "moe_router_load_balancing_type", "moe_aux_loss_coeff") if k in s}
if s.get("moe_router_enable_expert_bias"):
    moe["moe_router_score_function"] = "sigmoid"
mla = {k: s[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim") if k in s}
Config = MLATransformerConfig if mla else TransformerConfig
cfg = Config(num_layers=s["num_layers"], hidden_size=s["hidden_size"], ffn_hidden_size=s["ffn_hidden_size"],
             num_attention_heads=s["num_attention_heads"], num_query_groups=s.get("num_query_groups"),
             tensor_model_parallel_size=s["tp"], pipeline_model_parallel_size=s["pp"], context_parallel_size=s.get("cp", 1),
             expert_model_parallel_size=s.get("ep", 1), sequence_parallel=s["sp"],
             virtual_pipeline_model_parallel_size=s.get("vp"), qk_layernorm=s.get("qk_layernorm", False),
             mtp_num_layers=s.get("mtp_num_layers"), calculate_per_token_loss=s.get("per_token_loss", False),
             gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, normalization="RMSNorm",
             use_cpu_initialization=True, init_model_with_meta_device=True, bf16=True, params_dtype=torch.bfloat16,
             pipeline_dtype=torch.bfloat16, **moe, **mla)
# (Bridge's initialize_distributed passes these, and no gtp_remat_size: training/initialize.py)
parallel_state.initialize_model_parallel(s["tp"], s["pp"], virtual_pipeline_model_parallel_size=s.get("vp"),
                                         context_parallel_size=s.get("cp", 1), expert_model_parallel_size=s.get("ep", 1))
from megatron.core.post_training.modelopt.layers import Linear
from megatron.core.transformer.identity_op import IdentityOp
chunks = []
for vp_stage in (range(s["vp"]) if s.get("vp") else [None]):  # (VPP: one model chunk per virtual stage)
    spec = specs.get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm", vp_stage=vp_stage)
    for layer in spec.layer_specs:
        sub = layer.submodules.self_attention.submodules
        sub.core_attention = IdentityOp  # (no parameters; the local one refuses CP, TE's MLA core takes k_channels)
        if mla:  # TE's spec: the down projections duplicated (TELinear), as Linear is
            sub.linear_q_down_proj = sub.linear_kv_down_proj = Linear
    mtp_spec = specs.get_gpt_mtp_block_spec(cfg, spec, use_transformer_engine=False) if s.get("mtp_num_layers") else None
    first = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
    last = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
    with torch.device("meta"):
        model = GPTModel(cfg, spec, vocab_size=s["vocab_size"], max_sequence_length=4096, position_embedding_type="rope",
                         share_embeddings_and_output_weights=False, pre_process=first, post_process=last,
                         mtp_block_spec=mtp_spec, **({} if vp_stage is None else {"vp_stage": vp_stage}))
    params = [p for p in model.parameters() if p.requires_grad]
    for key, (ps, _) in group_params_for_buffers(params, s["fp32"]).items():
        for p in ps:
            p.main_grad = torch.empty(p.shape, dtype=key.grad_dtype, device="meta")
    model.ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=s["fp32"], use_distributed_optimizer=True)
    model.finish_grad_sync = lambda force_all_reduce=False: None  # (the DP buckets: budget/dp.py, held elsewhere)
    model.scale_gradients = lambda scaling: None
    chunks.append(model)
gtp = [1, 1]  # (Megatron-Core 0.18 has no gtp_remat groups)
if hasattr(fmg, "_allreduce_replicated_grads_over_gtp_remat_group"):
    pgs = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["gtp_remat", "expt_gtp_remat"])
    gtp = [1 if g is None else g.size() for g in (pgs.gtp_remat, pgs.expt_gtp_remat)]
calls = []
def record(kind):
    def call(tensor, *a, group=None, **k):
        calls.append([kind, tensor.numel(), str(tensor.dtype).replace("torch.", ""),
                      torch.distributed.get_process_group_ranks(group)])
    return call
torch.distributed.all_reduce = record("all_reduce")
torch.distributed.broadcast = record("broadcast")
num_tokens = torch.zeros([], dtype=torch.int) if s.get("per_token_loss") else None  # (schedules.py total_num_tokens)
fmg.finalize_model_grads(chunks, num_tokens, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
print(json.dumps({"calls": calls, "gtp": gtp, "qb": hasattr(fmg, "_update_router_qb_beta"),
                  "params": [[n, p.numel(), not getattr(p, "allreduce", True), bool(getattr(p, "sequence_parallel", False))]
                             for n, p in chunks[0].named_parameters()]}))
'''

SMALL = {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4, "num_query_groups": 2,
         "vocab_size": 128}
MOE = {"num_moe_experts": 4, "moe_router_topk": 2, "moe_ffn_hidden_size": 32, "moe_shared_expert_intermediate_size": 32,
       "moe_shared_expert_gate": True, "moe_layer_freq": [0, 1, 1], "num_layers": 3}
MLA = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_head_dim": 16, "qk_pos_emb_head_dim": 8, "v_head_dim": 16}
CASES = {  # (TP, PP, CP, EP, sequence parallel and the rest)
    "dense_sp_qk_tokens": {**SMALL, "tp": 2, "pp": 1, "sp": True, "qk_layernorm": True, "per_token_loss": True},
    "qk_without_sp": {**SMALL, "tp": 2, "pp": 1, "sp": False, "qk_layernorm": True},
    "dense_no_sp": {**SMALL, "tp": 2, "pp": 1, "sp": False},
    "moe_bias_ep2": {**SMALL, **MOE, "tp": 2, "pp": 1, "ep": 2, "sp": True, "moe_router_enable_expert_bias": True},
    "mtp_pp2_tokens": {**SMALL, "num_layers": 2, "tp": 2, "pp": 2, "sp": True, "mtp_num_layers": 1, "per_token_loss": True},
    "cp2_tokens_bias": {**SMALL, **MOE, "tp": 1, "pp": 1, "cp": 2, "sp": False, "moe_router_enable_expert_bias": True,
                        "per_token_loss": True},
    "mla_sp": {**SMALL, **MLA, "tp": 2, "pp": 1, "sp": True, "qk_layernorm": True},
    # quantile-balancing router bias (Megatron-Core 0.19): over DP x CP (here CP 2, the TP ranks apart)
    "qb_cp2_dp2": {**SMALL, **MOE, "tp": 1, "pp": 1, "cp": 2, "sp": False, "moe_router_load_balancing_type": "quantile_balancing",
                   "moe_aux_loss_coeff": 0.0},
    "qb_tp2_dp2": {**SMALL, **MOE, "tp": 2, "pp": 1, "sp": True, "moe_router_load_balancing_type": "quantile_balancing",
                   "moe_aux_loss_coeff": 0.0, "per_token_loss": True},
    # PP 2 x VPP 2: two model chunks on each rank, their norms in one all-reduce, the embedding on the first
    "pp2_vp2_sp": {**SMALL, "num_layers": 4, "tp": 2, "pp": 2, "vp": 2, "sp": True, "qk_layernorm": True, "per_token_loss": True},
    "pp2_vp2_moe_bias": {**SMALL, **MOE, "num_layers": 4, "moe_layer_freq": [0, 1, 1, 1], "tp": 2, "pp": 2, "vp": 2,
                         "sp": True, "moe_router_enable_expert_bias": True},
}
WORLD = 4


@functools.lru_cache(maxsize=None)
def _built(spec: str) -> str:
    return json.dumps(gloo_ranks.run(_BUILD, spec, WORLD))


def _has_qb() -> bool:
    """Whether this release's Megatron-Core has quantile balancing's finalize step (0.19: Bridge 0.6.x)."""
    import importlib

    return hasattr(importlib.import_module("megatron.core.distributed.finalize_model_grads"), "_update_router_qb_beta")


def test_the_budget_prices_what_finalize_model_grads_runs():
    """The budget prices quantile balancing where the release's Megatron-Core runs it: the skill's release data (the
    model config's moe_router_quantile_balancing_ema) agrees with the installed finalize_model_grads; and Bridge's
    initialize_distributed passes no gtp_remat_size (its gtp_remat groups are one rank); no TransformerConfig field
    turns on flextron's or the conditional embedders' reductions."""
    import megatron.bridge
    from megatron.bridge.training import initialize
    from megatron.core.transformer.transformer_config import TransformerConfig

    from mbridge_overlap.upstream.releases import bridge_fields

    version = megatron.bridge.__version__
    assert ("moe_router_quantile_balancing_ema" in bridge_fields(version)["model"]) is _has_qb()
    assert "gtp_remat" not in inspect.getsource(initialize)
    names = set(TransformerConfig.__dataclass_fields__)
    assert not {"flextron", "has_cond_embedder"} & names


def test_the_budget_names_gtp_remat_where_finalize_model_grads_has_it():
    """recheck66 AM-9: the budget's "not run under Bridge" names the gtp_remat reduction only where the installed
    Megatron-Core's finalize_model_grads has it (0.19.x: Bridge 0.6.x; 0.18.x: Bridge 0.5.x has no gtp_remat code)."""
    import importlib

    import megatron.bridge

    from mbridge_overlap import api

    fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")
    has = hasattr(fmg, "_allreduce_replicated_grads_over_gtp_remat_group")
    assert has is ("gtp" in inspect.getsource(fmg))
    over = {"model.expert_model_parallel_size": 8, "model.moe_token_dispatcher_type": "alltoall",
            "train.global_batch_size": 64}
    budget = api.budget(over, recipe="qwen3_30b_a3b_pretrain_config", gpus=16,
                        bridge_version=megatron.bridge.__version__).to_dict()["budget"]
    (said,) = [a for a in budget["assumptions"] if a.startswith("finalize_model_grads")]
    assert ("_allreduce_replicated_grads_over_gtp_remat_group" in said) is has
    for name in ("_allreduce_router_grads", "_allreduce_conditional_embedding_grads"):
        assert (name in said) is hasattr(fmg, name)


def _lay(s: dict) -> Layout:
    tp, pp, cp = s["tp"], s["pp"], s.get("cp", 1)
    off = dict.fromkeys(("tp_comm_overlap", "overlap_p2p_comm", "overlap_grad_reduce", "overlap_param_gather",
                         "overlap_moe_expert_parallel_comm"), False)
    return Layout(tp=tp, pp=pp, vp=s.get("vp") or 1, cp=cp, ep=s.get("ep", 1), dp=WORLD // (tp * pp * cp), sp=s["sp"], seq=4096, mbs=1,
                  gbs=64, precision="bf16", domain=8, settings=off, ddp={"grad_reduce_in_fp32": s["fp32"]},
                  per_token_loss=s.get("per_token_loss", False),
                  router_qb=s.get("moe_router_load_balancing_type") == "quantile_balancing")


def _shape(s: dict):
    keys = set(shapes.Shape.__dataclass_fields__)
    return shapes.of(None, {**{k: v for k, v in s.items() if k in keys}, "multi_latent_attention": "q_lora_rank" in s})[0]


def _groups(s: dict, rank: int) -> dict:
    """Megatron-Core's groups of `rank` (order tp-cp-ep-dp-pp; the dense groups: TP innermost, then CP, DP, PP)."""
    tp, cp, pp = s["tp"], s.get("cp", 1), s["pp"]
    dp = WORLD // (tp * cp * pp)
    stage = WORLD // pp
    base = rank - rank % stage
    return {"tp": [rank - rank % tp + i for i in range(tp)], "pp": [rank % stage + k * stage for k in range(pp)],
            "tp_dp_cp": list(range(base, base + stage)),
            "dp_cp": [base + rank % tp + i * tp for i in range(cp * dp)]}


@pytest.mark.parametrize("fp32", [True, False], ids=["fp32_grads", "bf16_grads"])
@pytest.mark.parametrize("case", list(CASES))
def test_finalize_model_grads_collectives_are_megatron_core_s(case, fp32):
    """Every rank's finalize_model_grads all-reduces and broadcasts are the budget's for that pipeline rank (kind, group,
    elements, dtype; with PP the word embedding's too, embgrad.py's), and none runs that the budget does not price (groups of one rank cost
    nothing: left out)."""
    if not fp32 and case not in ("dense_sp_qk_tokens", "moe_bias_ep2", "pp2_vp2_sp"):
        pytest.skip("the gradient dtype is held on three cases")
    s = {**CASES[case], "fp32": fp32}
    if "moe_router_load_balancing_type" in s and not _has_qb():
        pytest.skip("Megatron-Core 0.18 (Bridge 0.5.x) has no quantile balancing (test_the_budget_prices_what_"
                    "finalize_model_grads_runs holds that the budget prices none there)")
    got = json.loads(_built(json.dumps(s, sort_keys=True)))
    lay, sh = _lay(s), _shape(s)
    per_stage = sh.num_layers // s["pp"]
    for rank, out in enumerate(got):
        pp_rank = rank // (WORLD // s["pp"])
        mtp = (sh.mtp_num_layers or 0) if pp_rank == s["pp"] - 1 else 0
        items = finalize.collectives(lay, sh, systems.get("h100"), per_stage, rank=pp_rank, mtp=mtp)
        groups = _groups(s, rank)
        real = [c for c in out["calls"] if len(c[3]) > 1]
        want = [["all_reduce", e.bytes // (4 if fp32 else 2), "float32" if fp32 else "bfloat16", groups["pp"]]
                for e in embgrad.collectives(lay, sh, systems.get("h100")) if pp_rank in embgrad.ranks(lay, sh)]
        for item in items:  # (the word embedding's all-reduce above: budget/embgrad.py, tests/bridge/test_budget_embgrad.py)
            if item.dimension == "tp":
                want.append(["all_reduce", item.bytes // (4 if fp32 else 2), "float32" if fp32 else "bfloat16", groups["tp"]])
            elif "expert bias" in item.what:
                want.append(["all_reduce", item.bytes // 4, "float32", groups["tp_dp_cp"]])
            elif "quantile" in item.what:
                want.append(["all_reduce", item.bytes // 4, "float32", groups["dp_cp"]])
            elif item.collective == "broadcast":
                want.append(["broadcast", 1, "int32", groups["pp"]])
            else:
                want.append(["all_reduce", 1, "int32", groups["dp_cp"]])
            assert item.hidden == 0.0 and item.setting is None and item.group == len(want[-1][3])
        assert sorted(real) == sorted(want), (case, rank, out["calls"])
        assert out["gtp"] == [1, 1]  # (Bridge builds no gtp_remat axis: _allreduce_replicated_grads_over_gtp_remat_group returns)


@pytest.mark.parametrize("case", [c for c in CASES if c != "mla_sp" and "vp" not in CASES[c]
                                  and "moe_router_load_balancing_type" not in CASES[c]])
def test_the_parameters_marked_sequence_parallel_are_the_budget_s(case):
    """The parameters whose gradients Megatron-Core sums over TP (marked sequence_parallel with it on, q/k norms by
    name), named as Transformer Engine's spec builds them, are those finalize.tp_summed picks from the budget's own
    parameter list of that rank."""
    s = {**CASES[case], "fp32": True}
    got = json.loads(_built(json.dumps(s, sort_keys=True)))
    lay, sh = _lay(s), _shape(s)
    for rank in (0, WORLD - 1):
        pp_rank = rank // (WORLD // s["pp"])
        marked = [[n, k, flag or (sh.qk_layernorm and ("q_layernorm" in n or "k_layernorm" in n))]
                  for n, k, _, flag in got[rank]["params"]]
        theirs = _as_te_builds_them(marked)
        mtp = (sh.mtp_num_layers or 0) if pp_rank == s["pp"] - 1 else 0
        _, mine, _, _, _ = budget_dp.rank_params(lay, sh, sh.num_layers // s["pp"], pp_rank, mtp)
        assert [n for n, _, _ in mine] == [n for n, _, _ in theirs]
        assert [n for n, _, x in mine if not x and finalize.tp_summed(n, sh, s["sp"])] == [n for n, _, f in theirs if f]


def test_transformer_engine_marks_the_norms_it_fuses():
    """The norms Transformer Engine fuses into linear_qkv and linear_fc1 (TE's spec) are marked as TENorm's are: the
    local spec above builds them apart, so this is read from TE's source."""
    from transformer_engine.pytorch.module import layernorm_linear, layernorm_mlp

    for module in (layernorm_linear.LayerNormLinear, layernorm_mlp.LayerNormMLP):
        assert 'setattr(self.layer_norm_weight, "sequence_parallel", self.sequence_parallel)' in \
            inspect.getsource(module.reset_parameters)
