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
