"""Hostile input, round seventeen (fuzzQ's rest and fuzzR): each case failed before its fix."""

from __future__ import annotations

from hostile_kit import assert_one_line, run_cli


def test_a_config_s_unknown_mixed_precision_field_is_refused(tmp_path):
    # Q9: the mixed_precision section's fields were read by name and any other taken silently (a typo of
    # grad_reduce_in_fp32 answered as the recipe's value); MixedPrecisionConfig has no such field
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  tensor_model_parallel_size: 2\nmixed_precision:\n  bf16: true\n  grad_reduce_in_fp33: true\n")
    proc = run_cli("lint", config, "--gpus", "8")
    assert proc.returncode == 2
    assert_one_line(proc)
    assert b"mixed_precision.grad_reduce_in_fp33" in proc.stderr and b"grad_reduce_in_fp32" in proc.stderr
    config.write_text("model:\n  tensor_model_parallel_size: 2\nmixed_precision:\n  bf16: true\n  grad_reduce_in_fp32: true\n")
    assert run_cli("lint", config, "--gpus", "8").returncode in (0, 1)


def test_trace_compare_of_many_steps_is_not_quadratic(tmp_path):
    # R3: each step position rebuilt every rank's step list (16,000 steps: 17 s; 200,000: past 8 minutes); 40,000
    # steps now take about as long as reading them, far inside the harness's hang limit
    import gzip
    import json

    events = []
    for s in range(40_000):
        t0 = s * 100
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t0, "dur": 100},
                   {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", "pid": 0, "tid": 20,
                    "ts": t0 + 20, "dur": 50, "args": {"stream": 20, "correlation": s,
                                                       "Process Group Description": "DATA_PARALLEL_GROUP"}}]
    path = tmp_path / "steps.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}, f)
    proc = run_cli("trace", "--compare", path, path, "--format", "json", timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["kind"] == "trace_comparison"


import pytest  # noqa: E402


@pytest.mark.parametrize("word, what", [("model.cp_comm_type=p2p,a2a", b"sweep"), ("model.fp8=a,b", b"sweep"),
                                        ("model.fp8_recipe=${x}", b"interpolation"), ("model.fp4=int(1)", b"function")])
def test_a_command_line_value_hydra_or_omegaconf_would_not_pass_as_text_is_refused(word, what):
    # R7: answered (exit 0) for any key but a launch variable; Bridge's parse_hydra_overrides refuses a sweep, and
    # OmegaConf resolves an interpolation (or fails) where Bridge runs
    proc = run_cli("resolve", "--recipe", "llama3_8b_pretrain_config", "--gpus", "16", "model.context_parallel_size=2", word)
    assert proc.returncode == 2 and what in proc.stderr
    assert_one_line(proc)


@pytest.mark.parametrize("line", ["  pipeline_model_parallel_layout: ${x}", '  cp_comm_type: "${oc.env:CP}"'])
def test_an_interpolation_in_a_config_file_s_text_field_is_refused(tmp_path, line):
    # recheck55 AB10: a layout ${x} was analysed as a one-stage layout; OmegaConf resolves it (or fails) when Bridge
    # loads the config
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  pipeline_model_parallel_size: 2\n" + line + "\n")
    proc = run_cli("resolve", "--config", config, "--gpus", "8")
    assert proc.returncode == 2 and b"interpolation" in proc.stderr
    assert_one_line(proc)


def test_a_shape_flag_that_is_no_bool_is_refused():
    # R8: --shape qk_layernorm=2 (any truthy value) was costed as true; Megatron-Core types it bool
    proc = run_cli("budget", "--model", "llama3_8b", "--gpus", "8", "model.seq_length=8192", "dataset.seq_length=8192",
                   "train.global_batch_size=128", "--shape", "qk_layernorm=2")
    assert proc.returncode == 2 and b"qk_layernorm: must be true or false" in proc.stderr
    assert_one_line(proc)


def test_the_api_takes_one_log_path_as_one_log(tmp_path):
    # R9: api.diagnose("x.log") read its characters as paths, "/" first
    from mbridge_overlap import api

    log = tmp_path / "rank0.log"
    log.write_text("> initialized data parallel with size 8\n")
    assert [s["path"] for s in api.diagnose(str(log)).to_dict()["sources"]] == [str(log)]


def test_trace_compare_says_many_ranks_in_a_bounded_line_and_unknown_ones_as_unknown():
    # R1: 3,000 ranks were printed whole on one line (34 KB), a rank the trace does not give as Python's None
    from mbridge_overlap.trace.report import ranks_said

    assert ranks_said([None, None]) == "[?, ?]"
    said = ranks_said(list(range(3000)))
    assert len(said) < 60 and "3,000 in all" in said and said.startswith("[0, 1, 2")


def test_a_trace_compressed_otherwise_than_gzip_is_named_so(tmp_path):
    # R2: a zstd trace was "not UTF-8 text (byte 1)"; diagnose says what it is, and now trace does too
    path = tmp_path / "rank-0.json.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(32))
    proc = run_cli("trace", path)
    assert proc.returncode == 2 and b"zstd data: decompress it first" in proc.stderr
    assert_one_line(proc)


@pytest.mark.parametrize("word", ["comm_overlap.tp_comm_overlap='false'", "model.tensor_model_parallel_size='8'",
                                  "model.cp_comm_type=[p2p,a2a", "model.fp8='a'x"])
def test_a_quoted_typed_value_or_a_malformed_one_is_refused(word):
    # S2-3: 'false' quoted is the text "false" to Hydra (true to Python), answered as false; S2-2: malformed lists and
    # quotes were answered, which Bridge refuses
    proc = run_cli("resolve", "--gpus", "8", word)
    assert proc.returncode == 2
    assert_one_line(proc)


@pytest.mark.parametrize("value", ['"abc"', '"${x}"', "[1]", "1e400"])
def test_a_custom_userbuffers_num_sm_that_is_no_count_is_one_line(tmp_path, value):
    # S2-5: a traceback in the budget's userbuffers pricing
    config = tmp_path / "c.yaml"
    config.write_text(f"comm_overlap:\n  tp_comm_overlap: true\n  tp_comm_overlap_cfg:\n    qkv_dgrad: {{num_sm: {value}, method: bulk}}\n")
    proc = run_cli("budget", "--recipe", "llama3_8b_pretrain_config", "--gpus", "16", "model.tensor_model_parallel_size=2",
                   "model.sequence_parallel=true", "--config", config)
    assert proc.returncode == 2 and b"num_sm" in proc.stderr
    assert_one_line(proc)


def test_trace_s_text_shows_a_bounded_number_of_steps(tmp_path):
    # R5: every ProfilerStep was a row (200,000 steps: 200,011 lines); the JSON keeps them all
    import json

    from mbridge_overlap.trace import render

    events = []
    for s in range(500):
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": s * 100, "dur": 100},
                   {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", "pid": 0, "tid": 20,
                    "ts": s * 100 + 20, "dur": 50, "args": {"stream": 20, "correlation": s,
                                                            "Process Group Description": "DATA_PARALLEL_GROUP"}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}))
    proc = run_cli("trace", path)
    assert proc.returncode == 0 and proc.stdout.count(b"\n") < render.SHOWN_STEPS + 60
    assert b"more steps (--format json has them all)" in proc.stdout
    assert len(json.loads(run_cli("trace", path, "--format", "json").stdout)["ranks"][0]["steps"]) == 500


def test_a_quoted_null_for_a_typed_field_is_refused():
    # recheck57 AD2: 'null' quoted is the text "null" to Hydra, which Bridge receives as a string
    proc = run_cli("resolve", "--gpus", "8", "model.virtual_pipeline_model_parallel_size='null'")
    assert proc.returncode == 2
    assert_one_line(proc)


@pytest.mark.parametrize("word", ["model.virtual_pipeline_model_parallel_size=none", "ddp.bucket_size=None",
                                  "model.sequence_parallel=NONE", "model.virtual_pipeline_model_parallel_size=~"])
def test_a_bare_none_or_tilde_for_a_typed_field_is_refused(word):
    # AD2's rest: Hydra's only null is null (any case): none is text to it and ~ a word its lexer refuses; both were
    # read as null
    proc = run_cli("resolve", "--gpus", "8", word)
    assert proc.returncode == 2 and b"null" in proc.stderr
    assert_one_line(proc)


@pytest.mark.parametrize("word", ["model.virtual_pipeline_model_parallel_size=NULL", "model.cuda_graph_impl=none"])
def test_hydra_s_null_and_a_choice_spelled_none_are_taken(word):
    assert run_cli("resolve", "--gpus", "8", word).returncode == 0
