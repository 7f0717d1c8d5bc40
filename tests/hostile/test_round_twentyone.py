"""Hostile input, round twenty-one (fuzzA3, on the newest surfaces: the MoE refusals the resolver reads from fields it
does not model, the watchdog pairing, the GB200/GB300 placement, the flipped-setting split). Each case failed before
its fix."""

from __future__ import annotations

import pytest
from hostile_kit import assert_one_line, run_cli

from mbridge_overlap import api
from mbridge_overlap.errors import UsageError

EXPERTS = {"model.num_moe_experts": 8, "model.expert_model_parallel_size": 8}


def _errors(words: dict) -> list:
    return [f.id for f in api.resolve({**EXPERTS, **words}, gpus=8, bridge_version="0.6.2").findings
            if f.severity == "error"]


# Hydra's only null is null (any case); 'None' is the text 'None', which Bridge sets on the field (real 0.6.2 through
# parse_hydra_overrides + apply_overrides + runtime_config_update: each of these raises, tests/bridge probe): the
# rank-capacity factor is then not None (transformer_config.py:1692 `is not None`), the flags are truthy
@pytest.mark.parametrize("spelling", ["None", "NONE", "none"])
def test_none_is_text_to_hydra_so_the_rank_capacity_factor_is_set(spelling):
    assert _errors({"model.moe_expert_rank_capacity_factor": spelling}) == ["EXPERT_RANK_CAPACITY_REJECTED"]


def test_null_leaves_the_rank_capacity_factor_unset():
    assert _errors({"model.moe_expert_rank_capacity_factor": "NULL"}) == []
    assert _errors({"model.moe_expert_rank_capacity_factor": "null"}) == []


@pytest.mark.parametrize("key", ["model.moe_pad_expert_input_to_capacity", "model.ep_overlap_early_attn_memory_release",
                                 "model.moe_enable_deepep", "model.moe_deepep_num_sms", "model.moe_hybridep_num_sms",
                                 "model.moe_flex_dispatcher_num_sms", "model.moe_shared_expert_intermediate_size"])
def test_none_on_a_typed_field_read_as_given_is_refused_as_on_a_modelled_one(key):
    """A typed field the resolver models refuses 'None' ("is the text 'None' to Hydra, not null ... write null");
    the bool and integer fields its MoE checks read as given took it for null and judged nothing where Bridge raises
    (pad-to-capacity beside deepep, the early release without the overlap, deepep's SM count beside hybridep's)."""
    words = {"model.moe_token_dispatcher_type": "flex", key: "None"}
    if key != "model.moe_pad_expert_input_to_capacity":  # (read beside the deepep backend, the default)
        words.update({"model.moe_expert_rank_capacity_factor": "1.5", "model.moe_flex_dispatcher_backend": "hybridep"})
    with pytest.raises(UsageError, match="is the text 'None' to Hydra, not null"):
        api.resolve({**EXPERTS, **words}, gpus=8, bridge_version="0.6.2")


@pytest.mark.parametrize("value", ["~", "\x1b[31m1.5"])
def test_a_rank_capacity_word_hydra_refuses_is_one_line(value):
    """Hydra's grammar refuses these words (Bridge's parse_hydra_overrides raises); the factor was judged as set."""
    proc = run_cli("resolve", "--gpus", "8", "model.num_moe_experts=8", "model.expert_model_parallel_size=8",
                   f"model.moe_expert_rank_capacity_factor={value}")
    assert proc.returncode == 2
    assert_one_line(proc)


@pytest.mark.parametrize("key", ["model.moe_deepep_num_sms", "model.moe_pad_expert_input_to_capacity"])
def test_a_tilde_on_a_field_read_as_given_is_one_line(key):
    proc = run_cli("resolve", "--gpus", "8", "model.num_moe_experts=8", "model.expert_model_parallel_size=8",
                   "model.moe_token_dispatcher_type=flex", "model.moe_hybridep_num_sms=3", f"{key}=~")
    assert proc.returncode == 2 and b"refuses '~'" in proc.stderr
    assert_one_line(proc)


def test_a_perf_recipe_on_nodes_of_another_size_is_said_to_be_unsegmented_for_that():
    """Bridge's perf launcher asks Slurm for segments only where num_gpus_per_node == 4 (v0.6.0
    scripts/performance/utils/executors.py:168-177); a perf recipe on nodes of 8 GB200 was said to be left unplaced
    because segments are sized 'only for its perf recipes', which it is."""
    b = api.budget(recipe="llama3_8b_pretrain_32gpu_gb200_bf16_config",
                   machine_facts={"gpus_per_node": 8}).to_dict()["budget"]
    place = b["layout"]["placement"]
    assert place["from"] == "assumed" and "on nodes of 4 GPUs" in place["said"] and "have 8" in place["said"], place


# torch's watchdog lines of one work: the work with the rank alone, the next line with its group's description
# (report._watchdog_pairs). A message's lines of many ranks and works are one group (scan.Group); only its first line
# was paired, so a companion of another rank or work than the first described nothing.
WORK = ("[rank{r}]:[E ProcessGroupNCCL.cpp:574] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL("
        "SeqNum={seq}, OpType=_ALLGATHER_BASE, NumelIn={n}, NumelOut={n4}, Timeout(ms)=600000) ran for 600029 "
        "milliseconds before timing out.\n")
NEXT = ("[rank{r}]:[E ProcessGroupNCCL.cpp:2241] [PG ID 5 PG GUID 37({desc}) Rank {r}] failure detected by watchdog at "
        "work sequence id: {seq} PG status: last enqueued work: 9, last completed work: 6\n")
TP, DP, EP = "TENSOR_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP", "EXPERT_MODEL_PARALLEL_GROUP"


def _work(r, seq=7, n=1024):
    return WORK.format(r=r, seq=seq, n=n, n4=4 * n)


def _next(r, desc, seq=7):
    return NEXT.format(r=r, desc=desc, seq=seq)


def _timeouts(text: str) -> list:
    import io

    d = api.diagnose(["-"], stdin=io.BytesIO(text.encode())).to_dict()
    return sorted(c["id"] for c in d["causes"] if c["id"].endswith("_TIMEOUT"))


@pytest.mark.parametrize("text, expected", [
    # every rank's work, then every rank's companion in reverse order: all TP
    ("".join(_work(r) for r in range(4)) + "".join(_next(r, TP) for r in reversed(range(4))), ["TP_COLLECTIVE_TIMEOUT"]),
    # the companion of the second rank only
    (_work(0) + _work(1) + _next(1, TP), ["TP_COLLECTIVE_TIMEOUT"]),
    # the second work of a rank described (SeqNum 8 on the expert group)
    (_work(1, seq=7) + _work(1, seq=8) + _next(1, EP, seq=8), ["EP_COLLECTIVE_TIMEOUT"]),
    # two ranks' works of one SeqNum on two groups (SeqNum counts per process group): both said
    (_work(0) + _work(1) + _next(0, DP) + _next(1, TP), ["DP_COLLECTIVE_TIMEOUT", "TP_COLLECTIVE_TIMEOUT"]),
])
def test_every_line_of_a_watchdog_work_pairs_with_its_companion(text, expected):
    assert _timeouts(text) == expected


def test_a_work_and_its_companion_in_two_workers_files_pair(tmp_path, monkeypatch):
    """Per-rank files read by two worker processes (diagnose --jobs 2): their scans merge (scan.merge) with every
    line's work."""
    from mbridge_overlap.diagnose import parallel

    monkeypatch.setattr(parallel, "MIN_BYTES", 0)  # (workers share logs of 16 MiB and more)
    (tmp_path / "rank0.log").write_text(_work(0))
    (tmp_path / "rank1.log").write_text(_work(1) + _next(1, TP))
    d = api.diagnose([str(tmp_path / "rank0.log"), str(tmp_path / "rank1.log")], jobs=2).to_dict()
    assert sorted(c["id"] for c in d["causes"] if c["id"].endswith("_TIMEOUT")) == ["TP_COLLECTIVE_TIMEOUT"]


def test_thousands_of_ranks_works_stay_bounded_and_paired():
    """5,000 ranks' works of one SeqNum, each described as TP: one cause, as many ranks as the scan keeps."""
    text = "".join(_work(r) + _next(r, TP) for r in range(5000))
    assert _timeouts(text) == ["TP_COLLECTIVE_TIMEOUT"]


# A config file's MoE flags, which TransformerConfig.__post_init__ checks as it checks the command line's (real 0.6.2:
# the YAML merged as process_config_with_overrides merges it, then runtime_config_update, raised each of these): the
# skill read them from the command line only (schema.CONFIG_READ left them out), so a file that sets them was no error.
@pytest.mark.parametrize("extra, finding", [
    ("  moe_token_dispatcher_type: flex\n  moe_pad_expert_input_to_capacity: true\n", "DEEPEP_PAD_TO_CAPACITY_REJECTED"),
    ("  ep_overlap_early_attn_memory_release: true\n", "MOE_OVERLAP_REJECTED"),
    ("  moe_enable_deepep: true\n", "MOE_ENABLE_DEEPEP_REJECTED"),
    ("  moe_token_dispatcher_type: flex\n  moe_flex_dispatcher_backend: hybridep\n  moe_enable_deepep: true\n",
     "MOE_ENABLE_DEEPEP_REJECTED"),
    ("  moe_token_dispatcher_type: alltoall\n  overlap_moe_expert_parallel_comm: true\n"
     "  overlap_dispatch_backward_with_experts_wgrad: true\n", "MOE_OVERLAP_REJECTED"),
])
def test_a_config_file_s_moe_flags_are_checked_as_the_command_line_s(tmp_path, extra, finding):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  num_moe_experts: 8\n  expert_model_parallel_size: 8\n" + extra)
    errors = [f.id for f in api.resolve(config=str(path), gpus=8, bridge_version="0.6.2").findings if f.severity == "error"]
    assert errors == [finding]


def test_a_config_file_s_moe_flags_off_are_no_error(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  num_moe_experts: 8\n  expert_model_parallel_size: 8\n  moe_token_dispatcher_type: flex\n"
                    "  moe_pad_expert_input_to_capacity: false\n  moe_enable_deepep: false\n"
                    "  ep_overlap_early_attn_memory_release: false\n  overlap_dispatch_backward_with_experts_wgrad: false\n")
    assert [f.id for f in api.resolve(config=str(path), gpus=8, bridge_version="0.6.2").findings if f.severity == "error"] == []
