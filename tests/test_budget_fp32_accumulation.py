"""ddp.reduce_scatter_with_fp32_accumulation in the budget (Megatron-Core 0.19.2): the gradient buckets reduced by an
all-to-all of the whole bucket, every bucket a group of its own, and with overlap_grad_reduce each group waiting for the
one before it (distributed_data_parallel.py:317-332), which holds the backward. The message sizes are held to
Megatron-Core's own code in tests/bridge/test_budget_fp32_accumulation.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mbridge_overlap import api
from mbridge_overlap.budget import dp

# llama3_8b on 8 H100s, DP 8 inside the NVLink domain, one micro-batch of 2,048 tokens: the reduction is about as long as
# the backward beside it
BASE = {"train.global_batch_size": 8, "model.seq_length": 2048, "dataset.seq_length": 2048}
FLAG = "ddp.reduce_scatter_with_fp32_accumulation"


def _budget(overrides: dict) -> dict:
    return api.budget({**BASE, **overrides}, recipe="llama3_8b_pretrain_config", gpus=8).to_dict()["budget"]


def _grads(b: dict) -> dict:
    (item,) = [c for c in b["collectives"] if c["dimension"] == "dp" and c["collective"] != "all_gather"]
    return item


def test_the_buckets_are_all_to_alls_of_the_same_bytes_and_each_waits_for_the_one_before():
    off, on = _budget({FLAG: False}), _budget({FLAG: True})
    before, after = _grads(off), _grads(on)
    assert (before["collective"], after["collective"]) == ("reduce_scatter", "all_to_all")
    # all_to_all_single of the whole bucket in the gradient buffer's dtype: the reduce-scatter's input, byte for byte
    assert (after["bytes"], after["count"]) == (before["bytes"], before["count"])
    assert "reduce_scatter_with_fp32_accumulation" in after["what"] and "waits for the one before" in after["what"]
    # inside one NVLink domain an all-to-all is priced as the reduce-scatter: what changes is only what waits
    assert after["ms"] == before["ms"]
    assert after["exposed_ms"] > before["exposed_ms"] + 5
    assert after["waits_ms"] == pytest.approx(after["exposed_ms"] - before["exposed_ms"], abs=0.01)
    assert "waits_ms" not in before
    assert on["iteration_ms"] > off["iteration_ms"]
    ids = [f["id"] for f in on["findings"]]
    assert "WORTH_FP32_ACCUMULATION_WAITS" in ids and "WORTH_FP32_ACCUMULATION_WAITS" not in [f["id"] for f in off["findings"]]
    assert any("reduce_scatter_with_fp32_accumulation" in a for a in on["assumptions"])


def test_without_overlap_grad_reduce_nothing_waits_more_than_it_already_does():
    off = _budget({FLAG: False, "ddp.overlap_grad_reduce": False, "comm_overlap.overlap_grad_reduce": False})
    on = _budget({FLAG: True, "ddp.overlap_grad_reduce": False, "comm_overlap.overlap_grad_reduce": False})
    assert _grads(on)["collective"] == "all_to_all"
    assert _grads(on)["exposed_ms"] == _grads(off)["exposed_ms"] == _grads(off)["ms"]  # all exposed either way
    assert "waits_ms" not in _grads(on) and "waits for the one before" not in _grads(on)["what"]


def _lay(**kw):
    base = dict(fp32_accumulation=True, fsdp=False, settings={"overlap_grad_reduce": True}, ddp={}, quantized=("FP8", 1))
    return SimpleNamespace(**{**base, **kw})


def test_megatron_fsdp_never_reads_the_flag_and_the_chain_needs_overlap_grad_reduce():
    assert dp.chained(_lay())
    assert not dp.fp32_accumulation(_lay(fsdp=True)) and not dp.chained(_lay(fsdp=True))
    assert dp.fp32_accumulation(_lay(settings={"overlap_grad_reduce": False}))
    assert not dp.chained(_lay(settings={"overlap_grad_reduce": False}))


def test_quantized_weights_other_buckets_are_groups_of_their_own():
    """partition_buckets: with the flag each non-FP8 bucket is a group of its own after the last FP8 one, not merged
    into it (each group's all-to-all handles one bucket)."""
    params = [("decoder.layers.0.self_attention.linear_qkv.weight", 100, False),
              ("decoder.layers.0.input_layernorm.weight", 10, False),
              ("decoder.layers.1.self_attention.linear_qkv.weight", 100, False),
              ("decoder.layers.1.input_layernorm.weight", 10, False)]

    def fp8(name):
        return name.endswith("linear_qkv.weight")

    merged = dp._bucket_groups(_lay(fp32_accumulation=False), params, 100, False, 2, None, fp8)
    split = dp._bucket_groups(_lay(), params, 100, False, 2, None, fp8)
    assert merged == [[(100, 1)], [(100, 1), (20, 2)]]
    assert split == [[(100, 1)], [(100, 1)], [(20, 2)]]


def test_a_chained_group_holds_the_compute_until_the_one_before_has_ended():
    # two groups: the first 10 long from -10, the second dispatched at -4 runs 0 to 3 in the queue; chained, the
    # compute waits at -4 for the first to end at 0 and so ends at 4, the second's 3 beside it: 4 exposed
    assert dp._run([(-10.0, 10.0, False), (-4.0, 3.0, True)], chain=False) == pytest.approx(3.0)
    assert dp._run([(-10.0, 10.0, False), (-4.0, 3.0, True)], chain=True) == pytest.approx(4.0)
    # a second group of 6: it ends at 6, after the compute's delayed end at 4
    assert dp._run([(-10.0, 10.0, False), (-4.0, 6.0, True)], chain=True) == pytest.approx(6.0)
    # a group that is not linked (another model chunk's DDP) queues without holding the compute
    assert dp._run([(-10.0, 10.0, False), (-4.0, 3.0, False)], chain=True) == pytest.approx(3.0)


def test_groups_spread_over_the_backward_wait_only_where_one_outlasts_the_next_s_compute():
    # backward 10; groups of 2, 4 and 4 after a first of 2: the gaps are 10 x 4/8 = 5 each, no group outlasts its gap
    assert dp._waits([2.0, 4.0, 4.0], 10.0) == pytest.approx(4.0)  # the last one, after the backward
    # a first group of 8 against a gap of 5: the backward waits 3 for it, then the last group's 4 run past it
    assert dp._waits([8.0, 4.0, 4.0], 10.0) == pytest.approx(3.0 + 4.0)


def _unmodeled(release: str, distopt: bool) -> list:
    over = {FLAG: True, "ddp.use_distributed_optimizer": distopt, "optimizer.use_distributed_optimizer": distopt,
            "train.global_batch_size": 8}
    found = api.resolve(over, recipe="llama3_8b_pretrain_config", gpus=8, bridge_version=release).to_dict()["findings"]
    return [k for f in found if f["id"] == "UNMODELED_OVERLAP_KEY" for k in f["knobs"]]


@pytest.mark.parametrize("release", ["0.6.2", "0.5.1"])
def test_the_flag_is_accounted_for_where_the_budget_prices_it(release):
    assert FLAG not in _unmodeled(release, True)


def test_megatron_core_0_18_s_all_reduce_path_is_still_said_not_modelled_and_0_19_s_is_priced():
    """Megatron-Core 0.18 (Bridge 0.5.x) asserts a handle only its reduce-scatter branch sets, where the flag and
    overlap_grad_reduce meet the all-reduce (no distributed optimizer): not what the budget prices."""
    assert FLAG in _unmodeled("0.5.1", False)
    assert FLAG not in _unmodeled("0.6.2", False)
