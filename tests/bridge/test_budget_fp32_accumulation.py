"""ddp.reduce_scatter_with_fp32_accumulation in the budget against Megatron-Core's own code on the CPU: the messages its
reduce_scatter_with_fp32_accumulation sends for each bucket of a real Llama 3 8B layout (meta tensors, so no memory),
its partition_buckets' bucket groups with FP8 parameters, and where DistributedDataParallel links each bucket group to
the one before it."""

import inspect
from types import SimpleNamespace

import pytest
import torch

from mbridge_overlap import api
from mbridge_overlap.budget import buckets, dp as budget_dp, layout, shape as shapes

OVERRIDES = {"train.global_batch_size": 8, "model.seq_length": 2048, "dataset.seq_length": 2048,
             "ddp.reduce_scatter_with_fp32_accumulation": True}


def _all_to_all_messages(monkeypatch, sizes: list[int], dtype, group: int) -> list[int]:
    """The bytes Megatron-Core's reduce_scatter_with_fp32_accumulation hands all_to_all_single for each bucket's
    gradient buffer (its grad_data, in the buffer's dtype) and the rank's shard of it, as start_grad_sync calls it."""
    from megatron.core.distributed import reduce_scatter_with_fp32_accumulation as rs

    sent = []

    def all_to_all_single(output, input, group, async_op):  # noqa: A002 (torch's own argument names)
        assert output.shape == input.shape and output.dtype == input.dtype
        sent.append(input.numel() * input.element_size())

    monkeypatch.setattr(rs.torch.distributed, "all_to_all_single", all_to_all_single)
    ranks = SimpleNamespace(size=lambda: group)
    for n in sizes:
        grad = torch.empty(n, dtype=dtype, device="meta")
        shard = grad.view(group, -1)[0]
        rs.reduce_scatter_with_fp32_accumulation(shard, grad, op=torch.distributed.ReduceOp.SUM, group=ranks, async_op=False)
    return sent


@pytest.mark.parametrize("fp32_grads", [True, False])
def test_each_bucket_s_all_to_all_is_the_budget_s_message(monkeypatch, fp32_grads):
    """The budget's DP gradient item for llama3_8b on 8 GPUs (DP x CP 8, the distributed optimizer): its largest message and
    count are what Megatron-Core's all-to-all sends for the buckets its distributed optimizer lays out."""
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    b = api.budget({**OVERRIDES, "mixed_precision.grad_reduce_in_fp32": fp32_grads}, recipe="llama3_8b_pretrain_config",
                   gpus=8).to_dict()["budget"]
    lay = b["layout"]
    assert (lay["tp"], lay["pp"], lay["cp"] * lay["dp"]) == (1, 1, 8)  # (gradients reduce over DP x CP)
    (item,) = [c for c in b["collectives"] if c["dimension"] == "dp" and c["collective"] != "all_gather"]
    assert item["collective"] == "all_to_all"
    sh, _ = shapes.of("llama3_8b", {})
    params = [p for p in shapes.stage_params(sh, 1, 1, sh.num_layers, first=True, last=True) if not p[2]]
    tensors = [torch.nn.Parameter(torch.empty(n, device="meta")) for _, n, _ in params]
    cfg = DistributedDataParallelConfig(use_distributed_optimizer=True)
    theirs = DistributedOptimizer._compute_per_buffer_param_layout(tensors, buckets.default_bucket_size(None, True, 8), 8, cfg)
    sizes = [e - s for s, e in theirs.bucket_indices]
    sent = _all_to_all_messages(monkeypatch, sizes, torch.float32 if fp32_grads else torch.bfloat16, 8)
    assert len(sent) == item["count"] and max(sent) == item["bytes"]
    assert max(sent) == max(sizes) * (4 if fp32_grads else 2)  # the whole bucket, not the rank's shard


def test_partition_buckets_gives_every_bucket_a_group_of_its_own_with_fp8_parameters():
    """partition_buckets(reduce_scatter_with_fp32_accumulation=True) with an FP8 (uint8) buffer: each FP8 bucket a group,
    then each other bucket a group of its own (without the flag they join the last FP8 group); the budget's groups
    hold the same buckets in the same order, held to the distributed optimizer's layout of a real Llama 3 70B stage."""
    from megatron.core.distributed import param_and_grad_buffer as pgb
    from megatron.core.distributed.distributed_data_parallel_config import DistributedDataParallelConfig
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    sh, _ = shapes.of("llama3_70b", {})
    params = [p for p in shapes.stage_params(sh, 4, 1, 4, first=True, last=False) if not p[2]]
    tensors = []
    for name, n, _ in params:
        t = torch.nn.Parameter(torch.empty(n, device="meta", dtype=torch.bfloat16))
        t.quantized_here = bool(layout.QUANTIZED_WEIGHT.search(name))
        tensors.append(t)
    size = buckets.default_bucket_size(None, True, 2)
    cfg = DistributedDataParallelConfig(use_distributed_optimizer=True, fp8_param_gather=True,
                                        reduce_scatter_with_fp32_accumulation=True)
    real = pgb._param_uses_quantized_storage
    pgb._param_uses_quantized_storage = lambda p: getattr(p, "quantized_here", False)
    try:
        full = DistributedOptimizer.compute_full_param_layout(tensors, size, 2, cfg)
    finally:
        pgb._param_uses_quantized_storage = real
    ranks = SimpleNamespace(rank=lambda: 0, size=lambda: 2)
    buffers = [SimpleNamespace(param_dtype=key.param_dtype, ddp_config=cfg, data_parallel_group=ranks, data_parallel_world_size=2,
                               buckets=[SimpleNamespace(params_list=[], numel=e - s) for s, e in lay.bucket_indices])
               for key, lay in full.layouts.items()]
    assert {b.param_dtype for b in buffers} == {torch.uint8, torch.bfloat16}
    groups = pgb.partition_buckets(buffers, reduce_scatter_with_fp32_accumulation=True)
    theirs = [[b.numel for b in g.buckets] for g in groups]
    merged = [[b.numel for b in g.buckets] for g in pgb.partition_buckets(buffers)]
    lay = SimpleNamespace(ddp={}, quantized=("FP8", 1), fp32_accumulation=True, fsdp=False)
    quantized = lambda name: bool(layout.QUANTIZED_WEIGHT.search(name))  # noqa: E731
    mine = budget_dp._bucket_groups(lay, params, size, True, 2, None, quantized)
    assert [[n for n, _ in g] for g in mine] == theirs and all(len(g) == 1 for g in theirs)
    assert len(merged) < len(theirs)  # (the flag is what splits them)
    unsplit = budget_dp._bucket_groups(SimpleNamespace(**{**lay.__dict__, "fp32_accumulation": False}), params, size, True, 2,
                                       None, quantized)
    assert [[n for n, _ in g] for g in unsplit] == merged


def test_each_bucket_group_waits_for_the_one_before_only_with_overlap_grad_reduce():
    """DistributedDataParallel.__init__ links bucket_groups[i] to bucket_groups[i - 1] (each buffer's list: the dense
    and the experts' apart) where overlap_grad_reduce and the flag are on, with no condition on the distributed
    optimizer; start_grad_sync finishes that group's reduction before its own dispatch; the all-to-all's wait() sums
    in FP32 where it is called (the compute stream)."""
    from megatron.core.distributed import distributed_data_parallel, param_and_grad_buffer
    from megatron.core.distributed import reduce_scatter_with_fp32_accumulation as rs

    init = inspect.getsource(distributed_data_parallel.DistributedDataParallel.__init__)
    link = init[init.index("self.ddp_config.overlap_grad_reduce\n            and self.ddp_config.reduce_scatter_with_fp32"):]
    link = link[:link.index("# Create map from param to bucket group")]
    assert "bucket_groups[i].previous_grad_reduce_bucket_group = bucket_groups[i - 1]" in link
    assert "for bucket_groups in [self.bucket_groups, self.expert_parallel_bucket_groups]" in link
    assert "use_distributed_optimizer" not in link
    start = inspect.getsource(param_and_grad_buffer._ParamAndGradBucketGroup.start_grad_sync)
    drain = start.index("self.previous_grad_reduce_bucket_group.finish_grad_sync(")
    assert drain < start.index("dist_reduce_scatter_func(")
    wait = inspect.getsource(rs._ReduceScatterWithFP32AccumulationWorkHandle.wait)
    assert "dtype=torch.float32" in wait and "self.all_to_all_handle.wait()" in wait
