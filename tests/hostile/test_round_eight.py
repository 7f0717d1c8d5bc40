"""Hostile input, round eight, and the leftovers of round seven (each case failed before its fix)."""

from __future__ import annotations

import sys

from hostile_kit import ROOT, assert_one_line, run_cli

sys.path.insert(0, str(ROOT))

from mbridge_overlap import api  # noqa: E402


def _errors(overrides):
    return {(f.id, f.message) for f in api.resolve(overrides=overrides, gpus=8).findings if f.severity == "error"}


def test_no_fix_leaves_a_refused_layout_refused_for_another_reason():
    # fuzzE E9: the VPP fix of PP_OVERLAP_NOT_SELECTED turned "25 middle layers over 3 stages" into "7 first-stage layers
    # not divisible by VPP 2": the same finding id, a new reason
    given = {"model.pipeline_model_parallel_size": 4, "model.num_layers": 32, "model.num_layers_in_first_pipeline_stage": 7}
    before = _errors(given)
    assert {i for i, _ in before} == {"PIPELINE_LAYOUT_REJECTED"}
    offered = [f for f in api.resolve(overrides=given, gpus=8).findings if f.fix_overrides]
    assert offered
    for f in offered:
        assert _errors({**given, **f.fix_overrides}) <= before, f.id


def test_a_group_description_in_lower_case_is_still_megatron_core_s_group():
    # fuzzE E11: a framework that writes the group's name in lower case got "none of the DP, TP, CP or EP groups"
    from mbridge_overlap.diagnose import groups

    line = "[PG ID 6 PG GUID 90({}) Rank 1] Watchdog caught collective operation timeout"
    assert groups.described(line.format("tensor_model_parallel_group")) == "tp"
    assert groups.described(line.format("context_parallel_group")) == "cp"
    assert groups.described(line.format("DATA_PARALLELISM_GROUP")) == "other"  # a word that only starts like one


RUNS = ROOT / "tests" / "data" / "run_configs"


def _saved(tmp_path, name, *edits):
    text = (RUNS / "baseline.yaml").read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_saved_run_config_s_hierarchical_cp_sizes_are_read(tmp_path):
    # fuzzF F1: the file's sizes were dropped, so a valid a2a+p2p config was refused and an invalid one passed
    # (Bridge's validate(): prod(hierarchical_context_parallel_sizes) == context_parallel_size whenever they are set)
    sizes = ("  hierarchical_context_parallel_sizes: null\n", "  hierarchical_context_parallel_sizes: [2, 1]\n")
    valid = _saved(tmp_path, "valid.yaml", ("  context_parallel_size: 1\n", "  context_parallel_size: 2\n"),
                   ("  cp_comm_type: null\n", "  cp_comm_type: a2a+p2p\n"), sizes, ("  data_parallel_size: 4\n", "  data_parallel_size: 2\n"))
    assert "CP_HIERARCHICAL_SIZES_INVALID" not in {f.id for f in api.resolve(config=valid).findings}
    invalid = _saved(tmp_path, "invalid.yaml", sizes)
    assert "CP_HIERARCHICAL_SIZES_INVALID" in {f.id for f in api.resolve(config=invalid).findings}


def test_a_tuned_userbuffers_config_in_a_saved_run_config_is_read_and_said_unmodelled(tmp_path):
    # fuzzF F6: one num_sm changed made every verb exit 2, diagnose --config included (the logs were never read)
    bulk = ("    fc1_dgrad:\n      _target_: megatron.bridge.training.comm_overlap.BulkOverlapCfg\n      cga_size: 2\n"
            "      method: bulk\n      num_sm: 2\n")
    path = _saved(tmp_path, "tuned.yaml", (bulk, bulk.replace("num_sm: 2", "num_sm: 4")))
    r = api.resolve(config=path)
    assert r.effective["model"]["tp_comm_overlap"] is True
    unmodelled = [f for f in r.findings if f.id == "UNMODELED_OVERLAP_KEY"]
    assert unmodelled and "comm_overlap.tp_comm_overlap_cfg" in unmodelled[0].knobs
    assert not {"PRESET_NOT_USED", "TP_OVERLAP_DEFAULT_UB_CFG", "PRESET_NOT_FOR_LAYOUT"} & {f.id for f in r.findings}


def _watchdog(rank, desc, op, numel_in, numel_out):
    return (f"[rank{rank}]:[E1201 12:00:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 5 PG GUID 9({desc}) Rank {rank}] Watchdog "
            f"caught collective operation timeout: WorkNCCL(SeqNum=199, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, "
            "Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n")


def _causes(text, **kw):
    import io

    return [c["id"] for c in api.diagnose(["-"], stdin=io.BytesIO(text.encode()), **kw).to_dict()["causes"]]


def test_a_coalesced_collective_goes_by_its_group_not_to_the_pipeline():
    # fuzzF F2: Megatron-Core runs the DP buckets' reduce-scatter and all-gather in torch's _coalescing_manager, which
    # the watchdog prints as OpType=COALESCED; every such line was PIPELINE_P2P_TIMEOUT
    assert _causes(_watchdog(0, "DATA_PARALLEL_GROUP_WITH_CP", "COALESCED", 4000, 1000)) == ["DP_COLLECTIVE_TIMEOUT"]
    assert _causes(_watchdog(0, "TENSOR_MODEL_PARALLEL_GROUP", "COALESCED", 4000, 1000)) == ["TP_COLLECTIVE_TIMEOUT"]
    assert _causes(_watchdog(0, "PIPELINE_MODEL_PARALLEL_GROUP", "COALESCED", 4000, 4000)) == ["PIPELINE_P2P_TIMEOUT"]
    plain = _watchdog(0, "x", "COALESCED", 4000, 1000).replace("(x)", "")
    assert _causes(plain) == ["PIPELINE_P2P_TIMEOUT"]  # the log alone: the pipeline's batched sends, as before
    no_pp = {"model.pipeline_model_parallel_size": 1, "model.virtual_pipeline_model_parallel_size": None}
    assert _causes(plain, config=str(RUNS / "baseline.yaml"), overrides=no_pp) == ["DP_COLLECTIVE_TIMEOUT"]


def test_torch_s_undefined_description_is_no_description():
    # fuzzF F3: torch 2.4+ names a group made without a description 'undefined'; it was a named group of no dimension
    line = _watchdog(0, "undefined", "_REDUCE_SCATTER_BASE", 4000, 1000)
    assert _causes(line) == _causes(line.replace("(undefined)", "")) == ["DP_COLLECTIVE_TIMEOUT"]


def test_a_dp_group_s_gradient_all_reduce_is_the_dp_collective_and_a_scalar_s_is_not():
    # fuzzF F4: without the distributed optimizer the DP buckets all-reduce (param_and_grad_buffer.py)
    assert _causes(_watchdog(0, "DATA_PARALLEL_GROUP_WITH_CP", "ALLREDUCE", 4000, 4000)) == ["DP_COLLECTIVE_TIMEOUT"]
    assert "DP_COLLECTIVE_TIMEOUT" not in _causes(_watchdog(0, "DATA_PARALLEL_GROUP", "ALLREDUCE", 1, 1))  # a loss average


def test_ever_new_group_sizes_are_bounded_and_said():
    # fuzzF F7: a group per size: 200,000 sizes gave 110 MB of JSON
    import io

    from mbridge_overlap.diagnose.scan import MAX_SIZES

    text = "".join(_watchdog(i % 8, "undefined", "_ALLGATHER_BASE", 2, 2 * (i + 2)) for i in range(400))  # (not 1 a rank: F18-1)
    d = api.diagnose(["-"], stdin=io.BytesIO(text.encode())).to_dict()
    evidence = [e for c in d["causes"] for e in c["evidence"]]
    assert len(evidence) <= MAX_SIZES + 1 and sum(e["count"] for e in evidence) == 400
    assert any(f"{400 - MAX_SIZES:,} watchdog lines of further group sizes" in n for n in d["notes"])


def test_the_budget_takes_shapes_megatron_core_takes():
    # fuzzF F5: TransformerConfig accepts num_query_groups that divide TP and a hidden size no multiple of the heads
    recipe = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    assert api.budget(recipe=recipe, shape={"num_query_groups": 2}).to_dict()["budget"]
    assert api.budget(recipe=recipe, shape={"hidden_size": 8200}).to_dict()["budget"]


def test_an_iteration_time_is_a_whole_number_not_a_prefix_and_never_zero(tmp_path):
    # fuzzF F9: '1e308' was read as 1.0 ms, '1,234.5' as 1 and 0 ms as a time: a made-up throughput change
    def log(name, ms):
        path = tmp_path / name
        path.write_text("".join(f" iteration {i}/ 10 | elapsed time per iteration (ms): {ms} | lr: 1.0E-04 |\n"
                                for i in range(1, 5)))
        return str(path)

    before = log("before.log", "4338.7")
    for bad in ("1e308", "1,234.5", "0", "0.0"):
        d = api.diagnose([before, log(f"after{len(bad)}.log", bad)], compare=True).to_dict()
        assert d["compare"]["after"]["median_ms"] is None and d["compare"]["change"] is None, bad
    d = api.diagnose([before, log("after.log", "4400.5")], compare=True).to_dict()
    assert d["compare"]["after"]["median_ms"] == 4400.5


def test_the_checkpoint_megatron_s_tracker_names_is_the_one_read(tmp_path):
    # fuzzF F19: 'release' or a tracked iteration without a config silently read the newest iter_* folder's
    base = (RUNS / "baseline.yaml").read_text()
    for folder in ("iter_0000100", "release"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "run_config.yaml").write_text(base)
    (tmp_path / "iter_0000200").mkdir()
    (tmp_path / "iter_0000200" / "run_config.yaml").write_text(base.replace("  tensor_model_parallel_size: 4\n",
                                                                           "  tensor_model_parallel_size: 2\n", 1))
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    tracker.write_text("release")
    assert api.resolve(config=str(tmp_path)).to_dict()["inputs"]["config"].endswith("release/run_config.yaml")
    tracker.write_text("100")
    assert api.resolve(config=str(tmp_path)).to_dict()["inputs"]["config"].endswith("iter_0000100/run_config.yaml")
    tracker.write_text("300")
    proc = run_cli("resolve", "--config", str(tmp_path))
    assert proc.returncode == 2 and b"names iteration 300" in proc.stderr
    assert_one_line(proc)


def test_an_output_path_that_names_a_folder_is_refused(tmp_path):
    # fuzzF F17: 'out.txt/' wrote a file out.txt
    proc = run_cli("plan", "--tp", "2", "--gpus", "8", "--output", str(tmp_path / "out.txt") + "/")
    assert proc.returncode == 2 and not (tmp_path / "out.txt").exists()
    assert_one_line(proc)


def test_a_plan_with_expert_parallelism_and_no_expert_count_asks_for_it():
    # fuzzF F15: the plan handed out overrides Bridge rejects (EXPERT_PARALLEL_WITHOUT_EXPERTS)
    proc = run_cli("plan", "--tp", "2", "--gpus", "8", "--moe", "--ep", "2")
    assert proc.returncode == 2 and b"expert count" in proc.stderr
    assert_one_line(proc)
    assert run_cli("plan", "--tp", "2", "--gpus", "8", "--moe", "--ep", "2", "--model", "qwen3_30b_a3b").returncode == 0


def test_the_budget_of_a_recipe_bridge_refuses_says_so():
    # fuzzF F18
    note = api.budget(recipe="perf_recipes.qwen3_235b_a22b_pretrain_128gpu_b200_fp8mx_deepep_dev_config").to_dict()["note"]
    assert "RECIPE_REJECTED_OUTSIDE_OVERLAP" in note
    assert "refuses" not in api.budget(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config").to_dict()["note"]


def test_nccl_with_no_algorithm_under_a_forced_nccl_algo_names_the_launcher_variables():
    # corpus batch five, dev (nccl1670): NCCL_ALGO=nvls for every collective, and NCCL has no NVLS reduce-scatter
    causes = api.diagnose(["-"], stdin=__import__("io").BytesIO(
        b"Error : no algorithm/protocol available for function ReduceScatter with datatype ncclFloat32. NCCL_ALGO was set to nvls\n"
    )).to_dict()["causes"]
    assert [c["id"] for c in causes] == ["NCCL_ALGORITHM_UNAVAILABLE"] and "env_vars.NCCL_ALGO" in causes[0]["knobs"]


def test_a_tuned_userbuffers_config_is_priced_with_its_own_values(tmp_path):
    # evalG G5: the budget priced a run config's own tuned config with Transformer Engine's defaults
    same = _saved(tmp_path, "same.yaml", ("      cga_size: 2\n      method: bulk\n      num_sm: 2\n",
                                          "      cga_size: 2\n      method: bulk\n      num_sm: 4\n"))  # fc1_dgrad: no SM margin
    more = _saved(tmp_path, "more.yaml", ("      method: pipeline\n      num_sm: 24\n", "      method: pipeline\n      num_sm: 64\n"))

    def cost(path):
        return api.budget(config=path).to_dict()["budget"]["overlap_cost_ms"]

    preset = cost(str(RUNS / "baseline.yaml"))
    assert cost(same) == preset  # a field that takes no SMs from the GEMM changes nothing
    assert cost(more) > preset  # proj_fprop's pipeline GEMM leaves 64 SMs to its communication, not 24


def test_bytes_after_the_last_gzip_member_are_ignored_as_gzip_does(tmp_path):
    # fuzzF F12: 7 bytes of trailing garbage failed the whole folder; gzip -d says "trailing garbage ignored"
    import gzip

    line = _watchdog(0, "DATA_PARALLEL_GROUP", "_REDUCE_SCATTER_BASE", 4000, 1000)
    (tmp_path / "rank0.log.gz").write_bytes(gzip.compress(line.encode()) + b"GARBAGE")
    d = api.diagnose([str(tmp_path)]).to_dict()
    assert [c["id"] for c in d["causes"]] == ["DP_COLLECTIVE_TIMEOUT"]
    assert any("no gzip data follow its last gzip member" in n for n in d["notes"])
