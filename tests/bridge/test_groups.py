"""diagnose's process-group sizes and descriptions (mbridge_overlap/diagnose/groups.py) against Megatron-Core's own
rank generators, built as parallel_state.initialize_model_parallel builds them (its default order, the expert grid's
world), and its group_desc names."""

from __future__ import annotations

import inspect
import io
import re

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import groups

LAYOUTS = [  # world, tp, pp, cp, ep, etp
    (64, 4, 4, 2, 1, None), (64, 2, 1, 1, 8, 1), (128, 8, 2, 1, 16, 2), (16, 1, 2, 4, 1, None), (8, 2, 1, 1, 1, None),
    (256, 4, 8, 1, 32, 1), (32, 2, 2, 2, 4, 1),
]


def _megatron_sizes(world, tp, pp, cp, ep, etp) -> dict:
    from megatron.core.parallel_state import RankGenerator

    dp = world // (tp * pp * cp)
    etp = etp or tp
    dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
    expert = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order="tp-ep-dp-pp")
    size = lambda gen, name: len(gen.get_ranks(name)[0])  # noqa: E731
    out = {"dp": {size(dense, "dp"), size(dense, "dp-cp")}, "cp": {size(dense, "cp")}, "tp": {size(dense, "tp")},
           "ep": set(), "pp": {size(dense, "pp")}, "world": {dense.world_size}}
    if ep > 1:
        out["dp"].add(size(expert, "dp"))
        out["ep"] = {size(expert, "tp-ep"), size(expert, "tp")}
    return {k: {s for s in v if s > 1} for k, v in out.items()}


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: "-".join(map(str, x)))
def test_the_group_sizes_are_megatron_core_s(layout):
    world, tp, pp, cp, ep, etp = layout
    model = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
             "expert_model_parallel_size": ep, "expert_tensor_parallel_size": etp, "sequence_parallel": True}
    assert groups.of_config(model, world // (tp * pp * cp)) == _megatron_sizes(*layout)


def _descriptions() -> set:
    from megatron.core import parallel_state

    return set(re.findall(r"group_desc=['\"]([A-Z_]+)['\"]", inspect.getsource(parallel_state)))


def test_each_megatron_core_group_description_is_one_dimension_and_one_cause():
    names = _descriptions()
    named = {n: groups.described(f"[PG ID 1 PG GUID 7({n}) Rank 0]") for n in names}
    assert named["TENSOR_MODEL_PARALLEL_GROUP"] == "tp" and named["CONTEXT_PARALLEL_GROUP"] == "cp"
    assert {named[n] for n in names if n.startswith(("DATA_PARALLEL", "EXPERT_DATA_PARALLEL", "INTRA_PARTIAL"))} == {"dp"}
    assert {named[n] for n in ("EXPERT_MODEL_PARALLEL_GROUP", "EXPERT_TENSOR_PARALLEL_GROUP",
                               "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP")} == {"ep"}
    assert named["PIPELINE_MODEL_PARALLEL_GROUP"] == named["EMBEDDING_GROUP"] == "pp"
    assert named["MODEL_PARALLEL_GROUP"] == "other"
    for n in names:  # an all-gather timeout on each of Megatron-Core's groups: exactly one cause
        line = (f"[rank0]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 1 PG GUID 7({n}) Rank 0] Watchdog "
                "caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=_ALLGATHER_BASE, NumelIn=1024, "
                "NumelOut=2048, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.\n")
        causes = api.diagnose(["-"], stdin=io.BytesIO(line.encode())).to_dict()["causes"]
        assert len(causes) == 1, (n, [c["id"] for c in causes])


def _megatron_places(world, tp, pp, cp, ep, etp, order) -> dict:
    """dimension -> size -> rank -> the rank's index in its group, from Megatron-Core's generators' own groups."""
    from megatron.core.parallel_state import RankGenerator

    etp = etp or tp
    dense = RankGenerator(tp=tp, ep=1, dp=world // (tp * pp * cp), pp=pp, cp=cp, order=order)
    expert = RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=order)
    tokens = [("dp", dense, "dp"), ("dp", dense, "dp-cp"), ("cp", dense, "cp"), ("tp", dense, "tp"), ("pp", dense, "pp")]
    if ep > 1:
        tokens += [("dp", expert, "dp"), ("ep", expert, "tp-ep"), ("ep", expert, "tp")]
    out: dict = {}
    for dim, gen, token in tokens:
        for ranks in gen.get_ranks(token):
            if len(ranks) > 1:
                for i, r in enumerate(sorted(ranks)):  # torch numbers a new group's ranks in sorted order
                    out.setdefault(r, {}).setdefault(dim, {}).setdefault(len(ranks), set()).add(i)
    return out


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: "-".join(map(str, x)))
def test_a_rank_s_place_in_its_groups_is_megatron_core_s(layout, order):
    world, tp, pp, cp, ep, etp = layout
    model = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
             "expert_model_parallel_size": ep, "expert_tensor_parallel_size": etp, "sequence_parallel": True}
    real = _megatron_places(*layout, order)
    for rank in range(world):
        ours = groups.positions(model, world // (tp * pp * cp), rank, tp_pp_dp=order.endswith("pp-dp"))
        assert ours.pop("world") == {world: {rank}}
        assert ours == real[rank], rank


@pytest.mark.parametrize("world, tp, pp, cp, ep, etp, order", [
    (8, 2, 2, 1, 1, None, "tp-cp-ep-dp-pp"), (32, 2, 2, 2, 4, 1, "tp-cp-ep-dp-pp"), (16, 2, 2, 1, 1, None, "tp-cp-ep-pp-dp"),
    (64, 4, 2, 2, 8, 1, "tp-cp-ep-dp-pp"), (16, 2, 1, 1, 4, 2, "tp-cp-ep-dp-pp"),
])
def test_the_groups_by_their_ranks_are_rank_generator_s(world, tp, pp, cp, ep, etp, order):
    """upstream.groups.by_ranks (trace's attribution of undescribed groups by their ranks) lists exactly the groups of
    Megatron-Core's RankGenerator that one dimension alone has."""
    from megatron.core.parallel_state import RankGenerator

    from mbridge_overlap.upstream.groups import by_ranks

    dp = world // (tp * pp * cp)
    dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    expert = RankGenerator(tp=etp or tp, ep=ep, dp=world // ((etp or tp) * ep * pp), pp=pp, cp=1, order=order)
    want: dict = {}
    tokens = [(dense, t, d) for t, d in (("tp", "tp"), ("cp", "cp"), ("dp", "dp"), ("dp-cp", "dp"), ("pp", "pp"))]
    if ep > 1:
        tokens += [(expert, t, d) for t, d in (("ep", "ep"), ("tp-ep", "ep"), ("tp", "ep"), ("dp", "dp"))]
    for gen, token, dim in tokens:
        for group in gen.get_ranks(token):
            if len(group) > 1:
                want.setdefault(tuple(group), set()).add(dim)
    expected = {ranks: next(iter(dims)) for ranks, dims in want.items() if len(dims) == 1}
    assert by_ranks(tp, pp, cp, dp, ep, etp, tp_pp_dp=order.endswith("pp-dp")) == expected
