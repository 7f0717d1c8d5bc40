"""PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER against the installed Megatron-Core, on the CPU: DistributedDataParallel
registers its param all-gather pre-hook on overlap_param_gather alone, and a bucket group without the distributed
optimizer (a plain optimizer: nobody calls set_layerwise_params_list) raises TypeError at the first forward's param
sync with a data-parallel group of two; with one rank it returns."""

from __future__ import annotations

import ast
import inspect
import warnings

import pytest

torch = pytest.importorskip("torch")


def _group(size: int):
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucket, _ParamAndGradBucketGroup

    class Group:  # what the bucket group asks of its collective group before any communication
        def size(self):
            return size

        def rank(self):
            return 0

    ddp = DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather=True, use_distributed_optimizer=False)
    param = torch.nn.Parameter(torch.zeros(8))
    bucket = _ParamAndGradBucket([param], None, torch.zeros(8), 0, 8, 1.0, 0, {param: (0, 8, 0)}, [])
    return _ParamAndGradBucketGroup([bucket], ddp, Group(), size)


def test_the_forward_pre_hook_is_registered_on_overlap_param_gather_alone():
    from megatron.core.distributed.distributed_data_parallel import DistributedDataParallel

    tree = ast.parse(inspect.getsource(DistributedDataParallel.__init__).lstrip())
    hook = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign)
                and any(ast.unparse(t) == "self.use_forward_hook" for t in n.targets))
    assert ast.unparse(hook.value) == "self.ddp_config.overlap_param_gather"


def test_the_first_param_sync_without_the_distributed_optimizer_raises_with_dp_2():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError, match="NoneType"):
            _group(2).finish_param_sync()  # what the forward pre-hook calls for a module's parameters
        _group(1).finish_param_sync()  # one rank: nothing to gather
