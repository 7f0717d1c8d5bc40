"""What flipping an overlap setting changes, in its parts (evalAG AG-1): the exposed communication, the setting's own
cost (GEMMs on the SMs userbuffers take) and the pipeline bubble, whose fill and drain carry the stages' exposed
communication. The text named the whole difference between the iteration change and the exposed change "its own cost
(GEMMs on fewer SMs)", so overlap_p2p_comm, which has no such cost, was said to cost +4.7 ms of GEMMs."""

from __future__ import annotations

import pytest

from mbridge_overlap import api, cli

RECIPE = "llama3_70b_pretrain_64gpu_h100_bf16_config"
LAYOUT = {"model.context_parallel_size": 1}  # TP 4 (tuned preset), PP 4, VPP 5, DP 4 on 64 H100s


def _budget(overrides=None):
    return api.budget({**LAYOUT, **(overrides or {})}, recipe=RECIPE, model="llama3_70b").to_dict()["budget"]


@pytest.mark.parametrize("setting", ["tp_comm_overlap", "overlap_p2p_comm"])
def test_each_part_of_a_flip_is_the_two_budgets_difference(setting):
    on, off = _budget(), _budget({f"comm_overlap.{setting}": False})
    s = on["settings"][setting]
    assert s["overlap_cost_change_ms_if_flipped"] == pytest.approx(off["overlap_cost_ms"] - on["overlap_cost_ms"], abs=0.01)
    assert s["bubble_change_ms_if_flipped"] == pytest.approx(off["bubble_ms"] - on["bubble_ms"], abs=0.01)
    assert s["exposed_change_ms_if_flipped"] == pytest.approx(off["exposed_ms"] - on["exposed_ms"], abs=0.01)
    assert s["iteration_change_ms_if_flipped"] == pytest.approx(
        s["exposed_change_ms_if_flipped"] + s["overlap_cost_change_ms_if_flipped"] + s["bubble_change_ms_if_flipped"], abs=0.01)


def test_p2p_overlap_is_not_said_to_cost_gemm_time(capsys):
    """overlap_p2p_comm takes no SMs: what turning it off adds besides the exposed sends is the pipeline bubble."""
    on, off = _budget(), _budget({"comm_overlap.overlap_p2p_comm": False})
    assert off["overlap_cost_ms"] == on["overlap_cost_ms"] and off["bubble_ms"] > on["bubble_ms"]
    assert cli.main(["budget", "--recipe", RECIPE, "--model", "llama3_70b", "model.context_parallel_size=1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.lstrip().startswith("overlap_p2p_comm=true"))
    assert "GEMMs on fewer SMs" not in line
    assert f"pipeline bubble {off['bubble_ms'] - on['bubble_ms']:+,.1f} ms" in line


def test_tp_overlap_own_cost_is_its_overlap_cost(capsys):
    on, off = _budget(), _budget({"comm_overlap.tp_comm_overlap": False})
    assert cli.main(["budget", "--recipe", RECIPE, "--model", "llama3_70b", "model.context_parallel_size=1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.lstrip().startswith("tp_comm_overlap=true"))
    assert f"its own cost {off['overlap_cost_ms'] - on['overlap_cost_ms']:+,.1f} ms (GEMMs on fewer SMs)" in line
    assert f"pipeline bubble {off['bubble_ms'] - on['bubble_ms']:+,.1f} ms" in line


def test_diff_splits_a_flipped_setting_the_same_way(capsys):
    change = {**LAYOUT, "comm_overlap.overlap_p2p_comm": False}
    d = api.diff(recipe=RECIPE, before_overrides=LAYOUT, overrides=change, model="llama3_70b").to_dict()["budget"]
    before, after = _budget(), _budget({"comm_overlap.overlap_p2p_comm": False})
    (flip,) = d["settings_flipped"]
    assert flip["overlap_cost_change_ms"] == pytest.approx(0.0, abs=0.01)
    assert after["bubble_ms"] > before["bubble_ms"]
    assert flip["bubble_change_ms"] == pytest.approx(after["bubble_ms"] - before["bubble_ms"], abs=0.01)
    assert cli.main(["diff", "--recipe", RECIPE, "--model", "llama3_70b", "--before", "model.context_parallel_size=1",
                     "comm_overlap.overlap_p2p_comm=false"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "overlap_p2p_comm on -> off" in x)
    assert "GEMMs on fewer SMs" not in line and "pipeline bubble" in line
