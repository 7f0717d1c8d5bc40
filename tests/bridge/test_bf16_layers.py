"""The first and last layers in BF16 (MixedPrecisionConfig's first_last_layers_bf16): what reaches the model and
what Megatron-Core refuses, against real Bridge; and the layers whose weights Megatron-Core builds unquantized."""

import pytest

from mbridge_overlap.bridge import adapter, conformance

CURRENT = {"mixed_precision": "bf16_with_fp8_current_scaling_mixed"}
CASES = [
    ({"mixed_precision": "bf16_with_fp8_delayed_scaling_mixed", "mixed_precision.first_last_layers_bf16": True}, 8),
    ({**CURRENT, "model.num_layers": 16, "model.pipeline_model_parallel_size": 2}, 8),
    ({**CURRENT, "model.num_layers": 16, "model.pipeline_model_parallel_size": 2, "mixed_precision.num_layers_at_start_in_bf16": 9}, 8),
    ({**CURRENT, "model.num_layers": 16, "model.pipeline_model_parallel_size": 2, "mixed_precision.num_layers_at_end_in_bf16": 8}, 8),
    ({**CURRENT, "mixed_precision.num_layers_at_end_in_bf16": -1}, 8),
    ({**CURRENT, "mixed_precision.first_last_layers_bf16": False, "mixed_precision.num_layers_at_start_in_bf16": -1}, 8),
    ({"mixed_precision": "nemotron_h_bf16_with_fp8_current_scaling_mixed", "model.num_layers": 4, "model.pipeline_model_parallel_size": 2}, 8),
    ({"mixed_precision": "bf16_with_nvfp4_mixed", "mixed_precision.first_last_layers_bf16": True}, 8),
]


@pytest.mark.parametrize("overrides, gpus", CASES, ids=range(len(CASES)))
def test_bf16_layers_resolve_as_bridge_does(overrides, gpus):
    adapter.import_bridge()
    adapter.quiet()
    outcome = conformance.check(conformance.Case(overrides, gpus, True), adapter.bridge_version())
    assert outcome.differences == []


def test_the_cases_include_rejections_and_runs():
    from mbridge_overlap import api

    errors = [any(f.id == "BF16_LAYERS_REJECTED" for f in api.resolve(o, gpus=g).errors) for o, g in CASES]
    assert 3 <= sum(errors) <= len(CASES) - 3


def _mcore_bf16(num_layers, pp, vp, start, end, local, last=None):
    """Megatron-Core's answer for the first stage's local layer `local`: its global number by
    get_transformer_layer_offset (pipeline rank 0, its virtual stage), then is_first_last_bf16_layer."""
    from types import SimpleNamespace

    from megatron.core.fp8_utils import is_first_last_bf16_layer
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    cfg = SimpleNamespace(num_layers=num_layers, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vp if vp > 1 else None,
                          pipeline_model_parallel_layout=None, num_layers_in_first_pipeline_stage=None,
                          num_layers_in_last_pipeline_stage=last, account_for_embedding_in_pipeline_split=False,
                          account_for_loss_in_pipeline_split=False, first_last_layers_bf16=True,
                          num_layers_at_start_in_bf16=start, num_layers_at_end_in_bf16=end, mtp_num_layers=None)
    per = num_layers // pp // vp
    stage = local // per if vp > 1 else None
    offset = get_transformer_layer_offset(cfg, vp_stage=stage, pp_rank=0)
    return is_first_last_bf16_layer(cfg, offset + (local % per if vp > 1 else local))


@pytest.mark.parametrize("num_layers, pp, vp, start, end, last", [
    (80, 4, 5, 1, 1, None), (80, 4, 5, 2, 2, None), (8, 1, 1, 1, 1, None), (16, 2, 1, 2, 2, None), (16, 4, 2, 3, 0, None),
    (24, 2, 3, 4, 4, None), (6, 1, 1, 0, 3, None),
    # recheck47 R3: the model's last layers on the first stage (a later chunk, or a short last stage)
    (8, 2, 2, 0, 4, None), (24, 2, 3, 1, 12, None), (10, 2, 1, 1, 5, 2),
])
def test_the_first_stage_s_bf16_layers_are_megatron_core_s(num_layers, pp, vp, start, end, last):
    """N1 (recheck46): which of the first stage's layers keep BF16 weights, the budget's answer beside Megatron-Core's
    global layer numbering and its is_first_last_bf16_layer."""
    import functools
    from types import SimpleNamespace

    from mbridge_overlap.budget import dp as budget_dp

    layers = num_layers - last if last else num_layers // pp  # the first stage's (a short last stage leaves it the rest)
    lay = SimpleNamespace(quantized=("FP8 weights", 1), bf16_layers=(start, end), pp=pp, vp=vp, chunk_offset=0,
                          num_layers=num_layers, stages=())
    params = [(f"decoder.layers.{i}.mlp.linear_fc1.weight", 1, False) for i in range(layers)]
    kept = 0
    for k, chunk in enumerate(budget_dp._chunks(params, layers, vp)):
        weight = functools.partial(budget_dp._quantized, lay, nums=budget_dp.numbers(lay, layers), layers=layers)
        for name, _, _ in chunk:
            local = int(name.split(".")[2])
            bf16 = _mcore_bf16(num_layers, pp, vp, start, end, local, last)
            assert weight(name) is not bf16, (name, k)
            kept += bf16
    assert kept > 0


def test_bf16_layers_buckets_are_megatron_core_s():
    """The first layer in BF16 (bf16_with_fp8_current_scaling_mixed): its TE weights leave the uint8 buffer for the
    BF16 one; the budget's bucket groups hold compute_full_param_layout's buckets."""
    import functools
    from types import SimpleNamespace

    import torch
    from megatron.core.distributed import param_and_grad_buffer as pgb
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    from mbridge_overlap.budget import buckets, dp as budget_dp, layout, shape as shapes

    sh, _ = shapes.of("llama3_70b", {})
    tp, dp, layers = 4, 4, 4
    params = [p for p in shapes.stage_params(sh, tp, 1, layers, first=True, last=False) if not p[2]]
    tensors = []
    for name, n, _ in params:
        t = torch.nn.Parameter(torch.empty(n, device="meta", dtype=torch.bfloat16))
        local = int(name.split(".")[2]) if name.startswith("decoder.layers.") else None
        t.quantized_here = bool(layout.QUANTIZED_WEIGHT.search(name)) and not (
            local is not None and _mcore_bf16(sh.num_layers, 4, 5, 1, 1, local))
        tensors.append(t)
    size = buckets.default_bucket_size(None, True, dp)
    real = pgb._param_uses_quantized_storage
    pgb._param_uses_quantized_storage = lambda p: getattr(p, "quantized_here", False)
    try:
        full = DistributedOptimizer.compute_full_param_layout(tensors, size, dp, DistributedDataParallelConfig(
            use_distributed_optimizer=True, fp8_param_gather=True))
    finally:
        pgb._param_uses_quantized_storage = real
    theirs = {key.param_dtype: [e - s for s, e in lay.bucket_indices] for key, lay in full.layouts.items()}
    lay = SimpleNamespace(ddp={}, fp32_accumulation=False, fsdp=False, quantized=("FP8", 1), bf16_layers=(1, 1), pp=4,
                          vp=5, chunk_offset=0, num_layers=sh.num_layers, stages=())
    groups = budget_dp._bucket_groups(lay, params, size, True, dp, False, functools.partial(
        budget_dp._quantized, lay, nums=budget_dp.numbers(lay, layers), layers=layers))
    assert [g[0][0] for g in groups] == theirs[torch.uint8]
    assert [n for n, _ in groups[-1][1:]] == theirs[torch.bfloat16] and len(theirs[torch.bfloat16]) > 1
