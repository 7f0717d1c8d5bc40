"""Which dimension each communication kernel serves, on a generated trace with every kind of evidence."""

from __future__ import annotations

from mbridge_overlap.trace import analyze, attribution
from trace_fixtures import DP_DESC, TP_DESC, TraceBuilder, nccl

PG_CONFIG = [
    {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 8, "ranks": []},
    {"pg_name": "3", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP", "pg_size": 2, "ranks": [0, 4]},
    {"pg_name": "4", "pg_desc": "CONTEXT_PARALLEL_GROUP", "pg_size": 2, "ranks": [0, 1]},
]


def every_kind_of_evidence() -> TraceBuilder:
    b = TraceBuilder(rank=0, world_size=8, pg_config=PG_CONFIG)
    for start, end in ((0, 100), (420, 500), (800, 830), (1000, 1010)):
        b.kernel("sm90_gemm", start, end)
    # TP, description on the kernel itself (PyTorch copies it there): [50,150), hidden 50
    b.kernel(nccl("AllGather"), 50, 150, stream=20, **{"Process Group Description": TP_DESC,
                                                        "Process Group Name": "1", "Collective name": "_allgather_base"})
    # DP, description only on the CPU collective record with the same External id: [200,300), hidden 0
    b.kernel(nccl("ReduceScatter"), 200, 300, stream=21,
             record={"Process Group Name": "2", "Process Group Description": DP_DESC, "Collective name": "reduce_scatter"})
    # DP, a hierarchical sub-group of a DP group: [1000,1020), hidden 10
    b.kernel(nccl("ReduceScatter"), 1000, 1020, stream=21,
             **{"Process Group Description": "HIERARCHICAL_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_L0"})
    # PP, group name looked up in distributedInfo.pg_config: [400,450), hidden 30
    b.kernel(nccl("SendRecv"), 400, 450, stream=22, **{"Process Group Name": "3"})
    # CP, no description but ranks that match one pg_config group: [600,700), hidden 0
    b.kernel(nccl("SendRecv"), 600, 700, stream=23,
             **{"Process Group Description": "undefined", "Process Group Ranks": "[0, 1]"})
    # EP: [700,750), hidden 0
    b.kernel(nccl("AllToAll"), 700, 750, stream=24, **{"Process Group Description": "EXPERT_MODEL_PARALLEL_GROUP"})
    # TP, Transformer Engine userbuffers: [800,860), hidden 30
    b.kernel("userbuffers_fp16_sum_inplace_gpu_rr_rs", 800, 860, stream=25)
    # unattributed: the world group [1100,1150), and a SendRecv with no record at all [1200,1300)
    b.kernel(nccl("AllReduce"), 1100, 1150, stream=20, **{"Process Group Name": "0"})
    b.kernel(nccl("SendRecv"), 1200, 1300, stream=22)
    return b.noise()


def test_every_kind_of_evidence(tmp_path):
    r = analyze(every_kind_of_evidence().write(tmp_path / "rank-0.json.gz")).ranks[0].to_dict()
    dims = {d["dimension"]: d for d in r["dimensions"]}
    assert list(dims) == ["tp", "dp", "pp", "cp", "ep", "unattributed"]
    expected = {  # dimension: (kernels, communication, hidden, exposed)
        "tp": (2, 160, 80, 80),
        "dp": (2, 120, 10, 110),
        "pp": (1, 50, 30, 20),
        "cp": (1, 100, 0, 100),
        "ep": (1, 50, 0, 50),
        "unattributed": (2, 150, 0, 150),
    }
    for dim, (count, comm, hidden, exposed) in expected.items():
        d = dims[dim]
        assert (d["kernels"], d["communication_us"], d["hidden_us"], d["exposed_us"]) == (count, comm, hidden, exposed), dim
    assert dims["tp"]["collectives"] == {"AllGather": 1, "userbuffers": 1}
    assert dims["unattributed"]["collectives"] == {"AllReduce": 1, "SendRecv": 1}
    assert dims["pp"]["groups"] == ["PIPELINE_MODEL_PARALLEL_GROUP"]
    assert dims["cp"]["groups"] == ["CONTEXT_PARALLEL_GROUP"]
    # totals: comm merged 100+100+50+150+60+20+50+100, hidden 50+30+30+10, compute 100+80+30+10
    assert (r["communication_us"], r["hidden_us"], r["compute_us"]) == (630, 120, 220)
    notes = " ".join(r["notes"])
    assert "userbuffers" in notes and "default (world) process group" in notes and "point-to-point" in notes


def test_group_descriptions_megatron_gives():
    assert attribution.dimension_of("TENSOR_MODEL_PARALLEL_GROUP") == "tp"
    assert attribution.dimension_of("DATA_PARALLEL_GROUP_WITH_CP") == "dp"
    assert attribution.dimension_of("EXPERT_DATA_PARALLEL_GROUP") == "dp"
    assert attribution.dimension_of("PIPELINE_MODEL_PARALLEL_GROUP") == "pp"
    assert attribution.dimension_of("EMBEDDING_GROUP") == "pp"
    assert attribution.dimension_of("CONTEXT_PARALLEL_GROUP") == "cp"
    assert attribution.dimension_of("EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP") == "ep"
    assert attribution.dimension_of("EXPERT_TENSOR_PARALLEL_GROUP") == "ep"  # the expert layers' own TP
    assert attribution.dimension_of("HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L1") == "cp"  # a2a+p2p's levels
    assert attribution.dimension_of("DATA_PARALLEL_GROUP_WITH_GTP_REMAT") == "dp"
    assert attribution.dimension_of("tensor_model_parallel_group") == "tp"  # a framework's lower case
    for unknown in (None, "", "undefined", "default_pg", "MODEL_PARALLEL_GROUP", "TENSOR_AND_DATA_PARALLEL_GROUP",
                    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP", "DATA_PARALLELISM_GROUP"):
        assert attribution.dimension_of(unknown) == "unattributed"


def test_group_table_prefers_the_recorded_description():
    table = attribution.GroupTable(PG_CONFIG)
    assert table.description({"Process Group Description": TP_DESC, "Process Group Name": "3"}) == TP_DESC
    assert table.description({"Process Group Name": "3"}) == "PIPELINE_MODEL_PARALLEL_GROUP"
    assert table.description({"Process Group Ranks": "[0, 1]"}) == "CONTEXT_PARALLEL_GROUP"
    assert table.description({"Process Group Ranks": "[5, 6]"}) is None
    assert table.description({"Process Group Description": "undefined"}) == "undefined"
    assert attribution.GroupTable("not a list").description({}) is None


def test_megatron_group_names_exist_in_megatron_core():
    """Every description we map is one Megatron-Core 0.19's parallel_state.py passes as group_desc."""
    import os
    import pathlib
    import re

    import pytest

    default = pathlib.Path.home() / ".cache/nemo-mbridge-perf-tp-dp-comm-overlap/venv-mbridge-0.6.2"
    venv = pathlib.Path(os.environ.get("MBRIDGE_VENV", default))
    found = sorted(venv.glob("lib/python3*/site-packages/megatron/core/parallel_state.py"))
    if not found:
        pytest.skip(f"Megatron-Core source not found under {venv} (scripts/bridge_env.sh builds it)")
    source = found[0]
    descs = set(re.findall(r'group_desc=["\']([A-Z_]+)["\']', source.read_text()))
    from mbridge_overlap.upstream import groups

    assert set(groups.DIMENSION_OF_GROUP) <= descs, set(groups.DIMENSION_OF_GROUP) - descs
    # fuzzF F11: diagnose and trace read one table, so a description is one dimension in both
    from mbridge_overlap.diagnose.groups import described

    for desc in descs | {"HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L0", "TENSOR_MODEL_PARALLEL_GROUP_1"}:
        in_trace = attribution.dimension_of(desc)
        in_diagnose = described(f"[PG ID 1 PG GUID 7({desc}) Rank 0]")
        assert (in_trace, in_diagnose) in {(d, d) for d in groups.DIMENSIONS} | {("unattributed", "other")}, desc


def test_dimensions_running_together_are_noted(tmp_path):
    # tp [0,100) and dp [50,150) with no compute: each exposed in full (100 + 100), the rank only 150
    b = TraceBuilder().kernel("gemm", 500, 600)
    b.kernel(nccl("AllGather"), 0, 100, stream=20, **{"Process Group Description": TP_DESC})
    b.kernel(nccl("ReduceScatter"), 50, 150, stream=21, **{"Process Group Description": DP_DESC})
    r = analyze(b.write(tmp_path / "t.json")).ranks[0].to_dict()
    assert r["exposed_us"] == 150 and [d["exposed_us"] for d in r["dimensions"]] == [100, 100]
    assert any("add up to more" in n for n in r["notes"])
