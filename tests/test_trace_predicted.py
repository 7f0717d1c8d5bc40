"""trace with the run's config: the communication budget's prediction per dimension beside what the traces measured,
per iteration, on traces built with known exposed times per rank and step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mbridge_overlap import api
from trace_fixtures import DP_DESC, REPO, TP_DESC, TraceBuilder, nccl

RECIPE = "llama3_8b_pretrain_config"
TP2 = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True}  # so that TP has a budget


def _rank(rank: int, tp_exposed: list, dp_hidden: int = 30, world: int = 8) -> TraceBuilder:
    """Steps of 1,000 us: a GEMM [0, 400) of each, a TP all-gather right after it (exposed tp_exposed[i] us) and a DP
    reduce-scatter under the GEMM's end (hidden dp_hidden us, exposed 20)."""
    b = TraceBuilder(rank=rank, world_size=world)
    for i, exposed in enumerate(tp_exposed):
        t = 1000 * i
        b.step(i + 1, t, t + 1000)
        b.kernel("sm90_gemm", t, t + 400)
        b.kernel(nccl("AllGather"), t + 400, t + 400 + exposed, stream=20, **{"Process Group Description": TP_DESC})
        b.kernel(nccl("ReduceScatter"), t + 400 - dp_hidden, t + 420, stream=21, **{"Process Group Description": DP_DESC})
    return b.noise()


@pytest.fixture
def traces(tmp_path):
    # three steps each (the last is left out of the totals): rank 0's TP exposes 40 and 60 us, rank 1's 100 and 100,
    # rank 2's 10 and 30: per-rank means 50, 100, 20 us; their median 50 us = 0.05 ms
    for rank, tp in enumerate(([40, 60, 999], [100, 100, 999], [10, 30, 999])):
        _rank(rank, tp).write(tmp_path / f"rank-{rank}.json.gz")
    return tmp_path


def _row(d: dict, dim: str) -> dict:
    return next(r for r in d["predicted"]["dimensions"] if r["dimension"] == dim)


def test_measured_is_the_median_rank_mean_per_step_and_predicted_is_the_budget(traces):
    d = api.trace([traces], recipe=RECIPE, gpus=8, overrides=TP2).to_dict()
    b = api.budget(TP2, recipe=RECIPE, gpus=8).to_dict()["budget"]
    tp, dp = _row(d, "tp"), _row(d, "dp")
    assert {"tp", "dp"} <= set(b["dimensions"])
    assert tp["measured_exposed_ms"] == 0.05 and tp["measured_hidden_ms"] == 0.0
    assert dp["measured_exposed_ms"] == 0.02 and dp["measured_hidden_ms"] == 0.03 and dp["measured_ms"] == 0.05
    for row in (tp, dp):
        want = b["dimensions"][row["dimension"]]
        assert (row["predicted_ms"], row["predicted_hidden_ms"], row["predicted_exposed_ms"]) == \
            (want["ms"], want["hidden_ms"], want["exposed_ms"])
        assert want["exposed_ms"] > 0
        # (the fixture's GEMMs are microseconds against an 8B model's step: another job, so no ratio is given; the
        # ratio of a job the config is: measured exposed over predicted exposed)
        assert row["exposed_ratio"] is None
        from mbridge_overlap.trace import predicted

        same = predicted._row(row["dimension"], want, {k: row[f"measured_{k}"] for k in ("ms", "hidden_ms", "exposed_ms")})
        assert same["exposed_ratio"] == round(row["measured_exposed_ms"] / want["exposed_ms"], 2)
    p = d["predicted"]
    assert p["steps"] == 2 and p["ranks"] == 3
    assert p["iteration_ms"]["predicted"] == b["iteration_ms"] and p["compute_ms"]["measured"] == 0.4
    assert not any("job of" in n for n in p["notes"])  # the traces' world size is the config's: nothing to say of it


def test_predicted_compute_holds_the_sms_tp_overlap_takes_from_gemms(traces):
    """The trace's compute is every compute kernel's time, so GEMMs slowed by userbuffers' SM margin are in it: the
    prediction set beside it is the budget's compute plus that cost."""
    on = {**TP2, "comm_overlap.tp_comm_overlap": True}
    p = api.trace([traces], recipe=RECIPE, gpus=8, overrides=on).to_dict()["predicted"]
    b = api.budget(on, recipe=RECIPE, gpus=8).to_dict()["budget"]
    assert b["overlap_cost_ms"] > 0
    assert p["compute_ms"]["predicted"] == pytest.approx(b["compute_ms"] + b["overlap_cost_ms"], abs=0.001)


def test_a_config_of_another_size_is_said(traces):
    p = api.trace([traces], recipe=RECIPE, gpus=16).to_dict()["predicted"]
    assert any("8 GPUs" in n and "16" in n for n in p["notes"])


def test_no_budget_says_why_and_no_steps_says_so(traces, tmp_path):
    p = api.trace([traces], recipe=RECIPE, gpus=7).to_dict()["predicted"]
    assert "does not run" in p["unavailable"]
    flat = tmp_path / "flat"
    flat.mkdir()
    b = TraceBuilder(rank=0, world_size=8)
    b.kernel("sm90_gemm", 0, 400).kernel(nccl("AllGather"), 400, 450, stream=20, **{"Process Group Description": TP_DESC})
    b.noise().write(flat / "rank-0.json.gz")
    assert "profiler steps" in api.trace([flat], recipe=RECIPE, gpus=8).to_dict()["predicted"]["unavailable"]


def test_without_a_config_the_report_is_as_before(traces):
    assert "predicted" not in api.trace([traces]).to_dict()


def test_cli_text_json_and_misuse(traces):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "mbridge_overlap", "trace", *args], capture_output=True,
                              text=True, cwd=REPO)

    js = run(str(traces), "model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "--recipe", RECIPE,
             "--gpus", "8", "--format", "json")
    assert js.returncode == 0, js.stderr
    tp = _row(json.loads(js.stdout), "tp")
    assert tp["measured_exposed_ms"] == 0.05 and tp["predicted_exposed_ms"] > 0
    text = run(str(traces), "--recipe", RECIPE, "--gpus", "8")
    assert "predicted beside measured" in text.stdout and "\n  tp " in text.stdout
    for bad in (["--compare", str(traces), str(traces), "--recipe", RECIPE],
                ["--snippet", "python", "--recipe", RECIPE]):
        proc = run(*bad)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_a_config_that_records_no_gpu_count_takes_the_traces_job_size(traces, tmp_path):
    """A run config without a comm_overlap section records no GPU count; the traces' distributedInfo.world_size is
    the job's (it was: exit 2, pass --gpus N)."""
    from pathlib import Path

    saved = (Path(REPO) / "tests" / "data" / "run_configs" / "no_comm_overlap.yaml").read_text()  # TP 4 x PP 4: 16
    config = tmp_path / "run_config.yaml"
    config.write_text(saved.replace("  pipeline_model_parallel_size: 4\n", "  pipeline_model_parallel_size: 1\n", 1)
                      .replace("  virtual_pipeline_model_parallel_size: 2\n", "  virtual_pipeline_model_parallel_size: null\n", 1)
                      .replace("  tensor_model_parallel_size: 4\n", "  tensor_model_parallel_size: 2\n", 1))
    p = api.trace([str(traces)], config=str(config)).to_dict()["predicted"]
    assert "dimensions" in p and not any("job of" in n for n in p["notes"])


def test_a_prediction_far_from_the_measured_compute_says_the_config_is_another_job_s(traces):
    p = api.trace([str(traces)], recipe=RECIPE, overrides=TP2, gpus=8).to_dict()["predicted"]
    assert any("is not the traced job's" in n for n in p["notes"])  # microseconds of GEMMs against an 8B model's step
    # evalL L9: a ratio of two jobs' exposed times would read as an overlap that hid too little: none is given
    assert p["dimensions"] and all(r["exposed_ratio"] is None for r in p["dimensions"])
    assert any("no exposed ratio is given" in n for n in p["notes"])


def _undescribed(tmp_path, ranks: str, desc: str = "undefined", world: int = 8):
    b = TraceBuilder(rank=0, world_size=world)
    for i in range(3):
        t = 1000 * i
        b.step(i + 1, t, t + 1000)
        b.kernel("sm90_gemm", t, t + 400)
        b.kernel(nccl("AllReduce"), t + 400, t + 450, stream=21,
                 **{"Process Group Description": desc, "Process Group Ranks": ranks})
    b.write(tmp_path / "rank-0.json.gz")
    return tmp_path


def _dims(d: dict) -> set:
    return {x["dimension"] for x in d["ranks"][0]["dimensions"]}


LAYOUT = {"model.tensor_model_parallel_size": 2, "model.pipeline_model_parallel_size": 2, "model.context_parallel_size": 1,
          "model.sequence_parallel": True}


def test_a_group_without_a_description_is_the_dimension_its_ranks_are_in_the_config_s_layout(tmp_path):
    """evalH H6: ranks [0, 2] at TP 2, PP 2, DP 2 on 8 GPUs are a DP group (RankGenerator: tp [0,1], dp [0,2], pp
    [0,4]; tier 2 holds by_ranks to it); without the config, or with another job's size, nothing is placed."""
    traces = _undescribed(tmp_path, "[0, 2]")
    assert _dims(api.trace([traces]).to_dict()) == {"unattributed"}
    d = api.trace([traces], recipe=RECIPE, gpus=8, overrides=LAYOUT).to_dict()
    assert _dims(d) == {"dp"} and any("counted as that dimension's" in n for n in d["ranks"][0]["notes"])
    assert _dims(api.trace([traces], recipe=RECIPE, gpus=16, overrides=LAYOUT).to_dict()) == {"unattributed"}


def test_the_default_group_is_never_placed_by_its_ranks(tmp_path):
    traces = _undescribed(tmp_path, "[0, 1]", desc="default_pg", world=2)  # [0, 1] is TP's group at TP 2 on 2 GPUs
    d = api.trace([traces], recipe=RECIPE, gpus=2, overrides={"model.tensor_model_parallel_size": 2}).to_dict()
    assert _dims(d) == {"unattributed"}


def test_ranks_two_dimensions_share_in_the_layout_place_nothing(tmp_path):
    # the recipe's CP 2 with DP 1: [0, 2] is the CP group and the DP x CP group alike
    traces = _undescribed(tmp_path, "[0, 2]")
    over = {**LAYOUT, "model.context_parallel_size": 2}
    assert _dims(api.trace([traces], recipe=RECIPE, gpus=8, overrides=over).to_dict()) == {"unattributed"}


def test_the_placed_kernels_note_counts_the_kernels_in_the_totals(tmp_path):
    """evalO O6: the note counted the last step's kernels too, which the totals leave out (as HTA does)."""
    d = api.trace([_undescribed(tmp_path, "[0, 2]")], recipe=RECIPE, gpus=8, overrides=LAYOUT).to_dict()
    rank = d["ranks"][0]
    (note,) = [n for n in rank["notes"] if "counted as that dimension's" in n]
    counted = next(x["kernels"] for x in rank["dimensions"] if x["dimension"] == "dp")
    assert note.startswith(f"{counted:,} communication kernels") and counted == 2  # three steps, the last left out


def test_traffic_of_a_dimension_the_config_has_none_of_gives_no_ratio(tmp_path):
    """evalO O3: the trace's own groups showed pipeline traffic, the config had PP 1, and a DP ratio was given."""
    _three_steps(tmp_path, (nccl("AllReduce"), 400, 450, 21, "DATA_PARALLEL_GROUP"),
                 (nccl("SendRecv"), 450, 500, 22, "PIPELINE_MODEL_PARALLEL_GROUP"))
    flat = {**LAYOUT, "model.pipeline_model_parallel_size": 1}
    p = api.trace([tmp_path], recipe=RECIPE, gpus=8, overrides=flat).to_dict()["predicted"]
    assert all(r["exposed_ratio"] is None for r in p["dimensions"])
    assert any("ran PP communication" in n for n in p["notes"])
    staged = api.trace([tmp_path], recipe=RECIPE, gpus=8, overrides=LAYOUT).to_dict()["predicted"]
    assert not any("ran PP communication" in n for n in staged["notes"])


def test_peer_to_peer_copies_are_counted_in_a_note(tmp_path):
    """evalO O2: TE's ring-exchange TP overlap copies its chunks with the copy engine (Memcpy PtoP, memory to the
    HTA rules): the TP figures leave them out, without a word."""
    _three_steps(tmp_path, ("Memcpy PtoP (Device -> Device)", 100, 300, 20, None))
    (note,) = [n for n in api.trace([tmp_path]).to_dict()["ranks"][0]["notes"] if "Memcpy PtoP" in n]
    assert note.startswith("2 peer-to-peer copies (Memcpy PtoP) in the totals") and "400 us" in note


def test_expert_traffic_of_a_config_with_ep_1_is_not_another_layout(tmp_path):
    """recheck49 Q2: the expert and router groups count as EP (and DP) and have traffic at EP 1 (the router's aux loss
    over TP x CP); only TP, PP and CP traffic where the config has none says the trace is another layout's."""
    _three_steps(tmp_path, (nccl("AllReduce"), 400, 450, 21, "EXPERT_MODEL_PARALLEL_GROUP"))
    p = api.trace([tmp_path], recipe=RECIPE, gpus=8, overrides=LAYOUT).to_dict()["predicted"]
    assert not any("communication, which the config" in n for n in p["notes"])


def _three_steps(tmp_path, *extra):
    """A rank's trace of three profiler steps, each a GEMM and the kernels `extra` gives: (name, start, end within the
    step, stream, process-group description or None)."""
    b = TraceBuilder(rank=0, world_size=8)
    for i in range(3):
        t = 1000 * i
        b.step(i + 1, t, t + 1000)
        b.kernel("sm90_gemm", t, t + 400)
        for name, start, end, stream, desc in extra:
            b.kernel(name, t + start, t + end, stream=stream, **({"Process Group Description": desc} if desc else {}))
    b.write(tmp_path / "rank-0.json.gz")
    return tmp_path
