"""Issue 33 (bubble): budget/pipeline.py's order of forward and backward steps against Megatron-Core 0.19.2's own
schedule code (the Bridge venv): get_pp_rank_microbatches' warm-up counts and get_schedule_table's virtual
micro-batches, assembled as forward_backward_pipelining_with_interleaving runs them (forward k + warm-up, then
backward k: its chunk num_model_chunks - 1 - the table's)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mbridge_overlap.budget import pipeline


def _comm(pp, rank, vp):
    group = SimpleNamespace(size=lambda: pp, rank=lambda: rank)
    return SimpleNamespace(pp_group=group, virtual_pipeline_model_parallel_size=vp)


@pytest.mark.parametrize("pp,m,vp,group,moe_overlap", [(4, 8, 1, None, False), (4, 3, 1, None, False),
                                                       (2, 8, 2, 2, False), (2, 5, 2, 3, False), (4, 16, 2, 4, True),
                                                       (4, 12, 3, 6, False)])
def test_order_is_megatron_cores(pp, m, vp, group, moe_overlap):
    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches, get_schedule_table

    ours = pipeline.order(pp, m, vp, group, int(moe_overlap and vp > 1))
    for r in range(pp):
        total, _, warm, rest = get_pp_rank_microbatches(m, vp, group or pp, False, moe_overlap,
                                                        _comm(pp, r, vp if vp > 1 else None))
        table = get_schedule_table(m, vp, group or pp) if vp > 1 else [(i, 0) for i in range(m)]
        fwd = [("F", c, i) for i, c in table]
        bwd = [("B", vp - 1 - c, i) for i, c in table]
        want = fwd[:warm] + [s for k in range(rest) for s in (fwd[k + warm], bwd[k])] + bwd[rest:]
        assert ours[r] == want and total == m * vp
