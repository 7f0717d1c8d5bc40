"""diagnose's traceback rows (mbridge_overlap/diagnose/frames.py) against the installed Megatron-Bridge, Megatron-Core
and Transformer Engine: every row names files that exist, and the frames it takes for model calls really run the
model (so that what is raised below them is the model's)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from mbridge_overlap.diagnose import frames


def _installed_files() -> list[str]:
    import megatron.bridge
    import megatron.core
    import transformer_engine

    roots = [Path(megatron.core.__file__).parents[1], Path(megatron.bridge.__file__).parents[2],
             Path(transformer_engine.__file__).parent.parent]
    return sorted({str(p).replace("\\", "/") for root in roots for p in root.glob("**/*.py")})


# the rows of these packages, but for Transformer Engine 2.2's attention.py (the release installed has none)
INSTALLED = [r for r in frames.ROWS if re.match(r"(?:megatron/(?:core|bridge)|transformer_engine/pytorch)/", r[0])
             and r[0] != r"transformer_engine/pytorch/attention\.py$"]


@pytest.mark.parametrize("row", INSTALLED, ids=lambda r: r[0][:60])
def test_each_row_of_the_installed_packages_names_a_file_they_have(row):
    rx = re.compile(row[0])
    assert any(rx.search(f) for f in _installed_files()), row[0]


def test_the_model_calls_run_the_model():
    from megatron.core.distributed import distributed_data_parallel
    from megatron.core.pipeline_parallel import schedules

    calls = {"forward_step": "forward_step_func(", "forward_step_calc_loss": "loss_func(", "backward_step": "backward(",
             "custom_backward": "run_backward("}
    for name, call in calls.items():
        assert frames.overlap_frame("/x/megatron/core/pipeline_parallel/schedules.py", name) is None
        assert call in inspect.getsource(getattr(schedules, name)), name
    assert "self.module(" in inspect.getsource(distributed_data_parallel.DistributedDataParallel.forward)
    assert frames.overlap_frame("/x/megatron/core/distributed/distributed_data_parallel.py", "forward") is None
    # the schedule's own functions and DDP's hooks stay on the path
    assert frames.overlap_frame("/x/megatron/core/pipeline_parallel/schedules.py", "forward_backward_pipelining_with_interleaving")
    assert frames.overlap_frame("/x/megatron/core/distributed/distributed_data_parallel.py", "hook")


def test_the_fallback_frames_are_what_megatron_core_calls_for_the_dp_buckets():
    """torch's _coalescing_manager is on the DP path in a paste that starts inside torch: Megatron-Core's DP buckets
    call it, and of Megatron-Core only the buffers do (Transformer Engine's callers are on the path as TP rows)."""
    import megatron.core
    import torch.distributed

    names = [n for _p, rx_fn, *_ in frames.FALLBACK
             for n in rx_fn.pattern.removeprefix("^").removesuffix("$").removeprefix("(?:").removesuffix(")").split("|")]
    assert "isend" in names and all(hasattr(torch.distributed.distributed_c10d, n) for n in names), names
    root = Path(megatron.core.__file__).parent
    callers = sorted(str(p.relative_to(root)) for p in root.glob("**/*.py") if "_coalescing_manager(" in p.read_text())
    # the DP buffers (DDP's and Megatron-FSDP's), and generalized tensor parallelism, which Bridge's configs do not set
    assert callers == ["distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py", "distributed/param_and_grad_buffer.py",
                       "tensor_parallel/generalized_tensor_parallelism.py"], callers
    assert all(frames.overlap_frame(f"megatron/core/{c}", "start_grad_sync")[0] == "dp" for c in callers[:2])
    source = inspect.getsource(__import__("megatron.core.distributed.param_and_grad_buffer", fromlist=["x"]))
    assert "_coalescing_manager(" in source and "reduce_scatter_tensor" in source
