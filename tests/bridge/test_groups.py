"""diagnose's process-group sizes (mbridge_overlap/diagnose/groups.py) against Megatron-Core's own rank generators,
built as parallel_state.initialize_model_parallel builds them (its default order, the expert grid's world)."""

from __future__ import annotations

import pytest

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
    out = {"dp": {size(dense, "dp"), size(dense, "dp-cp")}, "tp": {size(dense, "tp")}, "cp": {size(dense, "cp")},
           "ep": set()}
    if ep > 1:
        out["dp"].add(size(expert, "dp"))
        out["ep"] = {size(expert, "tp-ep"), size(expert, "tp")}
    return {k: {s for s in v if s > 1} for k, v in out.items()}


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: "-".join(map(str, x)))
def test_the_group_sizes_are_megatron_core_s(layout):
    world, tp, pp, cp, ep, etp = layout
    model = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
             "expert_model_parallel_size": ep, "expert_tensor_parallel_size": etp}
    assert groups.of_config(model, world // (tp * pp * cp)) == _megatron_sizes(*layout)


def test_the_group_descriptions_are_megatron_core_s():
    import inspect
    import re

    from megatron.core import parallel_state

    names = set(re.findall(r"group_desc=['\"]([A-Z_]+)['\"]", inspect.getsource(parallel_state)))
    named = {n: groups.described(f"[PG ID 1 PG GUID 7({n}) Rank 0]") for n in names}
    # the groups whose all-gathers and reduce-scatters diagnose names by dimension
    assert named["TENSOR_MODEL_PARALLEL_GROUP"] == "tp" and named["CONTEXT_PARALLEL_GROUP"] == "cp"
    assert {named[n] for n in names if n.startswith(("DATA_PARALLEL", "EXPERT_DATA_PARALLEL"))} == {"dp"}
    assert {named[n] for n in ("EXPERT_MODEL_PARALLEL_GROUP", "EXPERT_TENSOR_PARALLEL_GROUP",
                               "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP")} == {"ep"}
