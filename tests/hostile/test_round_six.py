"""Hostile input, round six: what a fresh fuzzing pass broke in diagnose's process groups, its words-only causes and
its traceback fallback (each case failed before its fix), and a few older gaps it found."""

from __future__ import annotations

import gzip
import io
import json
import sys

import pytest

from hostile_kit import ROOT, assert_clean_stderr, run_cli

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from mbridge_overlap import api  # noqa: E402
from mbridge_overlap.safeio import esc  # noqa: E402

RECIPE = {"recipe": "llama3_8b_pretrain_config", "gpus": 16}  # CP 2 as shipped; TP 2 below: DP 4 (DP x CP 8)


def _watchdog(op: str, numel_in: int, numel_out: int, desc: str = "", rank: int = 0) -> str:
    pg = f"[PG ID 5 PG GUID 9({desc}) Rank {rank}]" if desc else f"[Rank {rank}]"
    return (f"[rank{rank}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] {pg} Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum=4, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)=600000) "
            "ran for 600055 milliseconds before timing out.\n")


def _diagnose(text: str, **kw) -> dict:
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode()), **kw).to_dict()


def _ids(d: dict) -> list:
    return [c["id"] for c in d["causes"]]


@pytest.mark.parametrize("text", [
    'Traceback (most recent call last):\n  File "/x/y.py", line ' + "9" * 4400 + ", in f\n    x\nValueError: boom\n",
    "RuntimeError: The size of tensor a (" + "9" * 4400 + ") must match the size of tensor b (4096) at non-singleton dimension 0\n",
    "RuntimeError: Sizes of tensors must match except in dimension 1. Expected size " + "9" * 4400
    + " but got size 4096 for tensor number 1 in the list.\n",
])
def test_numbers_past_int_s_limit_are_no_traceback(text, tmp_path):
    log = tmp_path / "big.log"
    log.write_text(text)
    proc = run_cli("diagnose", log, "--format", "json", timeout=30)
    assert proc.returncode in (0, 1), proc.stderr
    assert_clean_stderr(proc)
    json.loads(proc.stdout)


def test_a_rank_of_1e999_in_the_trace_s_group_table_is_no_traceback(tmp_path):
    from trace_fixtures import DP_DESC, TraceBuilder, nccl

    b = TraceBuilder(pg_config=[{"pg_name": "9", "pg_desc": DP_DESC, "ranks": [0, 1]}])
    b.step(1, 0, 1000).kernel(nccl("ReduceScatter"), 100, 200, stream=21, record={"Process Group Name": "9"})
    path = tmp_path / "rank0.json"
    path.write_text(b.text().replace('"ranks": [0, 1]', '"ranks": [0, 1e999]'))
    assert "1e999" in path.read_text()
    proc = run_cli("trace", path, "--format", "json", timeout=60)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert_clean_stderr(proc)


def test_each_watchdog_group_size_is_its_own_and_order_does_not_matter():
    two, four = _watchdog("_ALLGATHER_BASE", 1024, 2048), _watchdog("_REDUCE_SCATTER_BASE", 4096, 1024, rank=1)
    over = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True}
    one = _diagnose(two + four, overrides=over, **RECIPE)
    other = _diagnose(four + two, overrides=over, **RECIPE)
    assert sorted(_ids(one)) == sorted(_ids(other)) == ["CP_COLLECTIVE_TIMEOUT", "DP_COLLECTIVE_TIMEOUT"]


def test_tp_is_named_only_with_sequence_parallel_and_the_optimizer_instances_count():
    two = _watchdog("_ALLGATHER_BASE", 1024, 2048)
    sp_off = _diagnose(two, overrides={"model.tensor_model_parallel_size": 2, "model.context_parallel_size": 1,
                                       "model.sequence_parallel": False}, **RECIPE)
    assert "TP_COLLECTIVE_TIMEOUT" not in _ids(sp_off)
    # 4 distributed-optimizer instances at DP 16: the intra-instance group of 4 is DP's
    four = _watchdog("_ALLGATHER_BASE", 1024, 4096)
    d = _diagnose(four, overrides={"model.tensor_model_parallel_size": 1, "model.context_parallel_size": 1,
                                   "ddp.num_distributed_optimizer_instances": 4}, **RECIPE)
    (cause,) = d["causes"]
    assert cause["id"] == "DP_COLLECTIVE_TIMEOUT" and "DP's" in cause["analysis"]


@pytest.mark.parametrize("desc, op, fid", [
    ("PIPELINE_MODEL_PARALLEL_GROUP", "_ALLGATHER_BASE", "GROUP_COLLECTIVE_TIMEOUT"),
    ("EMBEDDING_GROUP", "_ALLGATHER_BASE", "GROUP_COLLECTIVE_TIMEOUT"),
    ("default_pg", "_ALLGATHER_BASE", "GROUP_COLLECTIVE_TIMEOUT"),
    ("TENSOR_AND_CONTEXT_PARALLEL_GROUP", "_ALLGATHER_BASE", "EP_COLLECTIVE_TIMEOUT"),  # the MoE router's only
    ("HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L0", "_ALLGATHER_BASE", "CP_COLLECTIVE_TIMEOUT"),  # a2a+p2p's levels
    ("TENSOR_MODEL_PARALLEL_GROUP_1", "_ALLGATHER_BASE", "TP_COLLECTIVE_TIMEOUT"),
    ("CONTEXT_PARALLEL_GROUP", "ALLTOALL_BASE", "CP_COLLECTIVE_TIMEOUT"),
])
def test_a_described_group_is_one_cause_of_its_own(desc, op, fid):
    assert _ids(_diagnose(_watchdog(op, 1024, 2048, desc))) == [fid]


def test_an_undescribed_all_to_all_is_cp_s_where_the_config_has_no_experts():
    d = _diagnose(_watchdog("ALLTOALL_BASE", 1024, 1024), overrides={"model.cp_comm_type": "a2a"}, **RECIPE)
    assert _ids(d) == ["CP_COLLECTIVE_TIMEOUT"]


@pytest.mark.parametrize("line", [
    "AttributeError: 'DataParallel' object has no attribute 'config'",
    "AttributeError: module 'megatron.core.tensor_parallel' has no attribute 'gather_from_sequence_parallel_region_x'",
    "AssertionError: ckpt was saved with TP size 4 but this run uses TP size 2",
    "ValueError: restore requires the same tensor parallel size (ckpt: 4, run: 2)",
    "RuntimeError: cannot resume: distcp shards were written for pipeline parallel size 4",
    "torch.OutOfMemoryError: Tried to allocate 2.00 GiB on rank 3 (tensor parallel size 2)",
    "AssertionError: global batch size (1000) is not divisible by micro batch size (3) times data parallel size (8)",
    "ErrorHandler: initialized tensor parallel group for rank 0",
    "KeyboardInterrupt: stopping data parallel workers",
])
def test_ordinary_errors_are_not_named_by_their_words(line):
    assert "OVERLAP_TERMS_IN_ERROR" not in _ids(_diagnose(line + "\n"))


@pytest.mark.parametrize("line", [
    "AssertionError: it is important that sequence parallel is on when tp_comm_overlap is set",
    "ValueError: expert parallel size 8 must divide num_experts for load balancing",
    "ValueError: distributed optimizer does not support activation checkpointing with overlap_param_gather",
])
def test_a_word_that_merely_contains_an_excluded_one_does_not_hide_the_terms(line):
    assert _ids(_diagnose(line + "\n")) == ["OVERLAP_TERMS_IN_ERROR"]


def test_per_rank_texts_are_one_kind_and_what_is_dropped_is_said():
    ranks = "".join(f"RuntimeError: [Rank {r}] NCCL communicator was aborted on rank {r}.\n" for r in range(40))
    d = _diagnose(ranks + "ValueError: Packed sequence length 4551 must be divisible by 2 * CP size 2\n")
    assert _ids(d) == ["OVERLAP_TERMS_IN_ERROR"] and len(d["other"]) == 1 and d["other"][0]["count"] == 40
    many = "".join(f"RuntimeError: failure kind {chr(97 + i // 26)}{chr(97 + i % 26)} here\n" for i in range(30))
    d = _diagnose(many)
    assert len(d["other"]) == 16 and any("14 further exception lines" in n for n in d["notes"])


@pytest.mark.parametrize("end", [
    "KeyboardInterrupt\n", "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15\n",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
])
def test_what_stops_a_run_from_outside_is_not_the_overlap_code_s_exception(end):
    frames = ('Traceback (most recent call last):\n'
              '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py", line 2634, in _coalescing_manager\n'
              '    work = group.reduce_scatter_tensor_coalesced(outputs, inputs, reduce_opts)\n')
    d = _diagnose(frames + end)
    assert not [c for c in d["causes"] if c.get("overlap_related", True)], _ids(d)


def test_a_linked_config_drops_the_hint_to_link_one():
    line = "ValueError: Packed sequence length 4551 must be divisible by 2 * CP size 2\n"
    assert "with --config" in _diagnose(line)["causes"][0]["fix"]
    assert "with --config" not in _diagnose(line, **RECIPE)["causes"][0]["fix"]


def test_letters_that_print_as_nothing_are_escaped():
    assert esc("Foo\u3164Error") == "Foo\\u3164Error" and esc("plain") == "plain"


def test_a_cut_gzip_log_says_so(tmp_path):
    whole = gzip.compress(("Traceback (most recent call last):\n" * 200).encode())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    proc = run_cli("diagnose", cut, "--format", "json", timeout=30)
    assert proc.returncode in (0, 1), proc.stderr
    assert any("ends early" in n for n in json.loads(proc.stdout)["notes"])
