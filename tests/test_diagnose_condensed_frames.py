"""Traceback frames in the second syntax (issue 31, devmiss2 G3): rich's panel (`{filename}:{lineno} in {name}`,
rich/traceback.py _render_stack; wrapped before its name at the panel's width; its code line marked with ❱) and a
condensed chain's `-> path.py:LINE  code` (NeMo-RL PR 4086) are placed through frames.ROWS as Python's `File "..."`
frames are; a line that merely names `file.py:NN` (a logger's, glog's, a warning's) starts no traceback."""

import io

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import messages
from tests.conftest import diagnose_causes

PGB = "/usr/local/lib/python3.12/dist-packages/megatron/core/distributed/param_and_grad_buffer.py"
DP = ["ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.bucket_size", "ddp.use_distributed_optimizer"]
ERROR = "RuntimeError: setStorage: sizes [40907008], strides [1], storage offset 0, and itemsize 2\n"
TOP = "╭───────────────────── Traceback (most recent call last) ──────────────────────╮\n"
BOTTOM = "╰──────────────────────────────────────────────────────────────────────────────╯\n"


def panel(*rows: str, border: str = "│") -> str:
    return TOP + "".join(f"{border} {r:<96} {border}\n" for r in rows) + BOTTOM


def only(text: str) -> dict:
    (c,) = diagnose_causes(text)
    return c


def test_rich_header_whole_in_its_panel():
    c = only(panel(f"{PGB}:557 in start_param_sync", "", "❱ 557 │   │   shard_buffer(bucket.param_data, n)") + ERROR)
    assert c["id"] == "OVERLAP_PATH_TRACEBACK" and c["knobs"] == DP and "start_param_sync" in c["message"]


def test_rich_header_wrapped_before_its_name():
    c = only(panel(f"{PGB}:557", "in start_param_sync", "", "❱ 557 │   shard_buffer(bucket.param_data, n)") + ERROR)
    assert c["id"] == "OVERLAP_PATH_TRACEBACK" and c["knobs"] == DP and "start_param_sync" in c["message"]


def test_a_wrapped_name_is_the_frame_s_so_a_model_call_is_not_the_path():
    # forward_step of schedules.py runs the model (frames.MODEL_CALLS): known only from the wrapped line
    sched = "/opt/megatron-lm/megatron/core/pipeline_parallel/schedules.py"
    assert diagnose_causes(panel(f"{sched}:402", "in forward_step", "", "❱ 402 │   output = model(x)") + ERROR) == []
    assert only(panel(f"{sched}:402", "in get_tensor_shapes") + ERROR)["id"] == "OVERLAP_PATH_TRACEBACK"


def test_rich_ascii_borders():
    c = only(panel(f"{PGB}:557 in start_param_sync", border="|") + ERROR)
    assert c["knobs"] == DP


def test_rich_code_line_is_the_frame_s_code():
    # a model's frame whose marked code line calls Megatron-Core's TP mapping (frames.call_on_path)
    c = only(panel("/work/model.py:41 in forward", "", "❱ 41 │   │   x = tensor_parallel.scatter_to_sequence_parallel_region(x)")
             + "RuntimeError: shape mismatch\n")
    assert c["id"] == "OVERLAP_PATH_TRACEBACK" and "model.sequence_parallel" in c["knobs"]


def test_condensed_chain_with_a_shortened_path():
    text = ("megatron_policy_worker.py:4161 in sync_params_before_refit\n"
            "    self.model.start_param_sync(force_sync=True)\n"
            "  -> param_and_grad_buffer.py:557  shard_buffer(bucket.param_data, ...)\n" + ERROR)
    c = only(text)
    # Megatron-Core's and Megatron FSDP's file of that name: both DP, their fields together
    assert c["id"] == "OVERLAP_PATH_TRACEBACK" and set(DP) | {"ddp.use_megatron_fsdp"} <= set(c["knobs"])
    assert "line 557" in c["message"]
    assert only(text.replace("-> param_and", "-> distributed/param_and"))["knobs"] == DP  # Megatron-Core's only


@pytest.mark.parametrize("frame", [
    "-> module.py:1532 in _call_impl",  # torch's name too: a bare name must be distinctive
    "-> utils.py:88  x = f(y)",  # several files of the catalog
    "-> mixed_precision.py:50  x = f(y)",  # Bridge's off the path, Megatron FSDP's on it
    "-> schedules.py:402  output = model(x)",  # no function: its model call may be the frame
    "-> my_param_and_grad_buffer.py:557  x = f(y)",  # no file of the catalog
])
def test_condensed_frames_placed_only_where_certain(frame):
    assert diagnose_causes(f"{frame}\n{ERROR}") == []


@pytest.mark.parametrize("line", [
    f"[param_and_grad_buffer.py:557] starting param sync of {PGB}",  # a logger's [%(filename)s:%(lineno)d]
    "I1207 10:00:00.000000 1234 param_and_grad_buffer.py:557] bucket 3 ready",  # glog / torch._logging
    f"{PGB}:45: UserWarning: overlap_param_gather is experimental",  # warnings.formatwarning
    f"{PGB}:557",  # a bare location outside rich's panel
    f"{PGB}:557 in start_param_sync took 3 ms",  # more than a header
    "tests/e2e/test_x.py:15  from megatron.core.distributed import param_and_grad_buffer",  # no arrow
])
def test_lines_that_name_a_file_and_line_start_no_traceback(line):
    for text in (f"{line}\n{ERROR}", f"{line}\n"):
        assert diagnose_causes(text) == [], text


def test_parse_condensed_takes_whole_lines_only():
    assert messages.parse_condensed(f"│ {PGB}:557 in start_param_sync    │") == (PGB, 557, "start_param_sync", None)
    assert messages.parse_condensed("  -> a_b_c_d_e.py:5  x = y | z") == ("a_b_c_d_e.py", 5, "", "x = y | z")
    assert messages.parse_condensed(f"│ {PGB}:557 in start_param_sync") is None  # one border only
    assert messages.parse_condensed("x.py:5 in f  g()") is None  # rich's header holds no code


def test_blocks_and_every_line_agree_on_rich_tracebacks():
    text = (panel(f"{PGB}:557", "in start_param_sync", "   556 │   │   │", "❱ 557 │   shard_buffer(b, n)") + ERROR) * 3
    got = api.diagnose(["-"], stdin=io.BytesIO(("iteration 1 | x\n" * 5000 + text).encode())).to_dict()["causes"]
    assert [c["id"] for c in got] == ["OVERLAP_PATH_TRACEBACK"] and got[0]["knobs"] == DP
