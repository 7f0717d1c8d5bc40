"""Issue 33 (bubble): the pipeline bubble from an event simulation of Megatron-Core 0.19.2's schedules
(budget/pipeline.py): with even stages it is today's (pp - 1) / vp micro-batches exactly; with uneven stages each
stage runs at its own pace (budgetgrp's sim1f1b.py: busiest stage first 3, not 18; last 9, not 18)."""

from __future__ import annotations

import pytest

from mbridge_overlap import api
from mbridge_overlap.budget import pipeline

EVEN = [(4, 16, 1, None), (8, 64, 1, None), (4, 3, 1, None), (2, 8, 2, None), (4, 16, 2, None), (4, 16, 4, None),
        (4, 12, 3, 6), (4, 10, 2, 5), (8, 32, 2, None), (4, 4, 2, None), (16, 128, 4, None)]


@pytest.mark.parametrize("pp,m,vp,group", EVEN)
@pytest.mark.parametrize("f,b", [(1.0, 2.0), (3.0, 1.0), (0.25, 0.5)])
def test_even_stages_are_todays_count_exactly(pp, m, vp, group, f, b):
    run = pipeline.simulate([f] * pp, [b] * pp, m, vp, group)
    exact = vp in (1, 2, 4)  # (a chunk of 1/3 is not exact in binary: equal to the last bit or two)
    want = m * (f + b) + (pp - 1) / vp * (f + b)
    assert run.iteration_s == want if exact else run.iteration_s == pytest.approx(want, rel=1e-14)
    assert all(run.wait(r) == pytest.approx((pp - 1) / vp * (f + b), rel=0 if exact else 1e-12) for r in range(pp))


def test_a_last_group_smaller_than_pp_leaves_the_dependency_bubble_megatron_refuses():
    # schedules.py: 0 < m % group < pp raises ('it introduces dependency bubbles'): the simulation shows them
    run = pipeline.simulate([1.0] * 4, [2.0] * 4, 18, 2)
    assert run.iteration_s > 18 * 3 + 3 / 2 * 3


@pytest.mark.parametrize("f,bubble", [([2, 1, 1, 1], 3), ([1, 1, 1, 2], 9), ([1, 1, 1, 1, 1, 1, 1, 3], 21)])
def test_uneven_stages_run_at_their_own_pace(f, bubble):
    b, m = [2 * x for x in f], 16
    run = pipeline.simulate(f, b, m)
    busiest = max(range(len(f)), key=lambda r: f[r])
    assert run.wait(busiest) == bubble  # budgetgrp's sim1f1b.py; the even count of the busiest: (pp - 1) x 3 f
    got = pipeline.bubble([(x, y) for x, y in zip(f, b)], [(x, y) for x, y in zip(f, b)], m)
    assert got.paced and got.waits[busiest] == bubble and got.even_s[busiest] == (len(f) - 1) * 3 * f[busiest]


def test_the_order_is_the_schedules_and_linear():
    # 1F1B: rank r runs pp - r - 1 warm-up forwards; every rank each forward and backward once
    steps = pipeline.order(4, 8)
    assert [s for s in steps[1][:3]] == [("F", 0, 0), ("F", 0, 1), ("F", 0, 2)] and steps[1][3] == ("B", 0, 0)
    assert all(len(s) == 2 * 8 for s in steps)
    # interleaved, PP 2 x VP 2, group 3, 5 micro-batches: schedules.py's own table in get_schedule_table's comment
    assert pipeline.table(5, 2, 3) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0), (3, 1), (4, 1)]
    assert all(len(s) == 2 * 5 * 2 for s in pipeline.order(2, 5, 2, 3))
    assert pipeline.steps(4, 8, 2) == 128


DSV3 = "perf_recipes.deepseek_v3_pretrain_256gpu_b200_bf16_config"


def test_the_budget_shows_each_ranks_wait():
    # the recipe's 256 GPUs: rank 7 (5 layers, the MTP and output layers) the slowest stage and costed; the others wait on it
    b = api.budget({}, recipe=DSV3).to_dict()["budget"]
    p = b["pipeline"]
    assert p["paced"] and p["costed_rank"] == 7 and p["busiest_rank"] == 7
    assert b["bubble_ms"] == pytest.approx(p["waits_ms"][7], abs=1e-3)
    # the slowest stage waits only the others' fill and drain; the others wait on it every micro-batch too
    assert p["busiest_wait_ms"] < p["waits_ms"][1]
    said = [a for a in b["assumptions"] if a.startswith("PP: the bubble")][0]
    assert "forward_backward_pipelining_without_interleaving" in said and "at its own pace" in said
    assert f"so the costed rank 7 waits {p['waits_ms'][7]:,.1f} ms" in said and p["waits_ms"][1] > p["waits_ms"][7]
    assert "the busiest stage, rank" not in said  # (the costed rank is it)
    # EP 64 on 512 GPUs: rank 1's exposed all-to-alls make it the slowest stage; rank 7 waits on it
    b = api.budget({"model.expert_model_parallel_size": "64"}, recipe=DSV3, gpus=512).to_dict()["budget"]
    p = b["pipeline"]
    assert p["costed_rank"] == p["busiest_rank"] == 1 and p["waits_ms"][7] > p["waits_ms"][1]


def test_even_stages_keep_the_budget_unchanged():
    b = api.budget({}, recipe="llama31_405b_pretrain_1024gpu_h100_bf16_config").to_dict()["budget"]
    lay = b["layout"]
    assert lay["pp"] == 8 and lay["vp"] == 8 and not b["pipeline"]["paced"]
    mb = b["compute_ms"] / lay["micro_batches"]
    assert b["bubble_ms"] == pytest.approx((lay["pp"] - 1) / lay["vp"] * mb, abs=2e-3)
