"""Hostile input, round fourteen (fuzzK): each case failed before its fix."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from hostile_kit import ROOT, assert_one_line, count_findall, run_cli

from mbridge_overlap import UsageError, api
from mbridge_overlap.run import hydra
from mbridge_overlap.trace import attribution


def test_every_short_brace_value_ends():
    # K1: comm_overlap={x:[} looped for ever (5.5 MB/s): a list item ending at "}" was read again at the same place.
    # Every text of up to 5 of these characters inside {x:...} ends, in a process of its own with a time limit.
    code = ("import itertools\nfrom mbridge_overlap.run import hydra\nfrom mbridge_overlap import UsageError\n"
            "for n in range(6):\n    for t in itertools.product('{}[],:a', repeat=n):\n"
            "        try:\n            hydra.brace_fields('{x:' + ''.join(t) + '}')\n"
            "        except UsageError:\n            pass\nprint('ended')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ended", proc.stderr[-1000:]
    assert hydra.brace_fields("{a:[1,2],b:{c:x}}") == [("a", [1, 2]), ("b", {"c": "x"})]


def test_a_brace_value_that_loops_is_one_line_and_exit_2():
    proc = run_cli("resolve", "--gpus", "8", "comm_overlap={x:[}", timeout=30)
    assert proc.returncode == 2
    assert_one_line(proc)


def test_a_product_of_cp_sizes_past_any_world_is_said_not_printed():
    # K2: Python refuses to print an integer of more than 4,300 digits: 400 twelve-digit sizes were a traceback
    sizes = "[" + ",".join(["999999999999"] * 400) + "]"
    r = api.resolve({"model.context_parallel_size": 2, "model.hierarchical_context_parallel_sizes": sizes}, gpus=8)
    (f,) = [f for f in r.findings if f.id == "CP_HIERARCHICAL_SIZES_INVALID"]
    assert "(=a number past 1,048,576)" in f.message and len(f.message) < 1000


def test_a_trace_of_more_groups_than_a_cache_holds_reads_each_ranks_text_once(tmp_path, monkeypatch):
    # K3: J1's cache held 1,024 texts; kernels cycling through 1,025 groups parsed their long text again each time
    groups, kernels = 1_100, 4_400
    events = [{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
               "args": {"External id": g, "Process Group Name": str(1000 + g), "Collective name": "allreduce",
                        "Process Group Ranks": str([g, g + 1])}} for g in range(groups)]
    events += [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 7,
                "ts": 10 + 2 * i, "dur": 1, "args": {"stream": 7, "correlation": i, "External id": i % groups}}
               for i in range(kernels)]
    path = tmp_path / "cycling.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}))
    calls = count_findall(monkeypatch, attribution)
    api.trace([path]).to_dict()
    assert 0 < len(calls) <= groups


def _install(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "install-skill"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_install_skill_answers_a_folder_it_cannot_look_at_in_one_line(tmp_path):
    # K4: a name too long, a loop of links at the install path: tracebacks and exit 1; a file said "File exists"
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "nemo-mbridge-perf-tp-dp-comm-overlap").symlink_to("nemo-mbridge-perf-tp-dp-comm-overlap")
    afile = tmp_path / "afile"
    afile.write_text("")
    for target, said in ((tmp_path / ("a" * 300), "cannot install into"), (loop, "cannot install into"), (afile, "is not a folder")):
        proc = _install(target)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and said in proc.stderr, proc.stderr[-500:]
        assert len(proc.stderr.strip().splitlines()) == 1


def test_verify_refuses_a_missing_snippets_folder_before_importing_bridge(tmp_path):
    # K5: the folder was looked at after the 15 s import of Bridge (this tier has no Bridge: it would fail otherwise)
    from mbridge_overlap.bridge import verify

    args = verify.parser().parse_args(["--skip-suites", "--snippets", str(tmp_path / "nope\x1b[2J")])
    try:
        verify.run(args)
    except UsageError as exc:
        assert "no such folder" in str(exc) and "\x1b" not in str(exc)
    else:
        raise AssertionError("a missing --snippets folder was not refused")


def test_a_null_shape_key_leaves_the_known_model_s_value():
    # K6: model.num_moe_experts=null (Bridge's unset) made the budget "expected a whole number or true/false"
    over = {"model.seq_length": 4096, "dataset.seq_length": 4096, "train.global_batch_size": 64}
    for key in ("num_moe_experts", "kv_channels", "moe_ffn_hidden_size"):
        with_null = api.budget({**over, f"model.{key}": "null"}, model="llama3_8b", gpus=8).to_dict()["budget"]
        plain = api.budget(over, model="llama3_8b", gpus=8).to_dict()["budget"]
        assert with_null["iteration_ms"] == plain["iteration_ms"], key


def _iterations(path, ms):
    line = (" [2026-12-01 19:52:22] iteration {i:8d}/  500000 | consumed samples: 1 | elapsed time per iteration (ms): "
            "{ms} | throughput per GPU (TFLOP/s/GPU): 340.9 |\n")
    path.write_text("".join(line.format(i=i, ms=ms) for i in range(1, 50)))
    return path


def test_compare_says_which_log_has_no_iteration_times_once(tmp_path):
    # K7: "1000.0 -> unknown (unknown (a log without iteration times past the first))"
    proc = run_cli("diagnose", "--compare", _iterations(tmp_path / "b.log", 1000.0), _iterations(tmp_path / "a.log", 0.0))
    (line,) = [x for x in proc.stdout.decode().splitlines() if x.startswith("compare:")]
    assert line.count("unknown") == 1 and "the after log has no iteration times" in line


def test_a_utf16_log_without_a_byte_order_mark_is_read(tmp_path):
    # K8: read as UTF-8, a NUL after every character: no iteration lines, no summary, no word why
    before = _iterations(tmp_path / "b.log", 1000.0)
    after = tmp_path / "a.log"
    after.write_bytes(_iterations(tmp_path / "a8.log", 1250.0).read_text().encode("utf-16-le"))
    d = api.diagnose([before, after], compare=True).to_dict()
    assert d["compare"]["after"]["median_ms"] == 1250.0
    assert any("read as UTF-16-LE" in n for n in d["notes"])


def test_a_trace_of_many_named_groups_gets_a_bounded_number_of_notes(tmp_path):
    # fuzzK (noted): 100,000 groups with descriptions of no dimension gave a note line each
    from mbridge_overlap.trace import notes as trace_notes

    groups = trace_notes.MAX_GROUP_NOTES + 30
    events = [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 7,
               "ts": 10 + 2 * i, "dur": 1, "args": {"stream": 7, "correlation": i, "Process Group Description": f"mine_{i}"}}
              for i in range(groups)]
    path = tmp_path / "groups.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}))
    said = api.trace([path]).to_dict()["ranks"][0]["notes"]
    assert sum("which is not one of Megatron-Core's per-dimension groups" in n for n in said) == trace_notes.MAX_GROUP_NOTES
    assert any(n.startswith("30 communication kernels ran on 30 more groups") for n in said)


def test_a_utf16_log_without_a_mark_that_starts_with_other_than_ascii_is_read(tmp_path):
    # fuzzL L4: progress bars (U+2588) or CJK text first: no zero byte beside them, only beside the line ends
    before = _iterations(tmp_path / "b.log", 1000.0)
    after = tmp_path / "a.log"
    lead = "".join("\u2588" * 60 + "\n" for _ in range(40)) + "".join("训练进度\n" for _ in range(40))
    after.write_bytes((lead + _iterations(tmp_path / "a8.log", 1250.0).read_text()).encode("utf-16-le"))
    d = api.diagnose([before, after], compare=True).to_dict()
    assert d["compare"]["after"]["median_ms"] == 1250.0


@pytest.mark.parametrize("lead", ["I\n", "\ufeff"], ids=["two-characters", "only-the-mark"])
def test_a_utf16_gzip_whose_first_member_is_tiny_is_read(tmp_path, lead):
    # fuzzL L4 (left at stop 48): the encoding was decided on the first member alone
    before = _iterations(tmp_path / "b.log", 1000.0)
    text = _iterations(tmp_path / "a8.log", 1250.0).read_text()
    after = tmp_path / "a.log.gz"
    after.write_bytes(gzip.compress(lead.encode("utf-16-le")) + gzip.compress(text.encode("utf-16-le")))
    d = api.diagnose([before, after], compare=True).to_dict()
    assert d["compare"]["after"]["median_ms"] == 1250.0


def test_compare_gives_no_infinite_change(tmp_path):
    # fuzzL L6: a before median of 1e-321 ms gave "+inf%" in the text and THROUGHPUT_DROP
    d = api.diagnose([_iterations(tmp_path / "b.log", "0." + "0" * 320 + "1"), _iterations(tmp_path / "a.log", 999.0)],
                     compare=True).to_dict()
    assert d["compare"]["change"] is None and not [c for c in d["causes"] if c["id"] == "THROUGHPUT_DROP"]


def test_diagnose_takes_a_whole_section_override(tmp_path):
    # fuzzL L3: comm_overlap=null and mixed_precision=NAME were taken for file names by diagnose and trace
    log = _iterations(tmp_path / "b.log", 1000.0)
    for override in ("comm_overlap=null", "mixed_precision=bf16_with_fp8_current_scaling_mixed"):
        proc = run_cli("diagnose", log, "--gpus", "8", override)
        assert proc.returncode in (0, 1) and b"no such file" not in proc.stderr, proc.stderr[-300:]


def test_install_skill_refuses_a_folder_it_copies(tmp_path):
    # fuzzL L2: an install into references/ was copied by every later install, nested one level deeper each time
    proc = _install(ROOT / "references")
    assert proc.returncode == 2 and "inside a folder of this checkout that an install copies" in proc.stderr
    assert not (ROOT / "references" / "nemo-mbridge-perf-tp-dp-comm-overlap").exists()


def test_an_ep_placement_at_a_million_gpus_is_costed_once(monkeypatch):
    # fuzzL L1: fewest_local looped over every group of the world, twelve times a budget
    from mbridge_overlap.budget import layout

    layout._fewest_local.cache_clear()
    lay = type("L", (), {"tp": 1, "cp": 1, "dp": 1 << 17, "pp": 8, "domain": (1 << 20) - 2})()
    assert layout.fewest_local(lay, 1, 8) == layout.fewest_local(lay, 1, 8)
    assert layout._fewest_local.cache_info().hits == 1


def test_verify_refuses_existing_snippet_files_before_importing_bridge(tmp_path):
    # fuzzL L5: --save-snippets DIR with files there was refused after the 15 s import (this tier has no Bridge)
    from mbridge_overlap.bridge import verify

    (tmp_path / "python.py").write_text("x = 1\n")
    try:
        verify.run(verify.parser().parse_args(["--skip-suites", "--save-snippets", str(tmp_path)]))
    except UsageError as exc:
        assert "--save-snippets" in str(exc) and "exists" in str(exc)
    else:
        raise AssertionError("an existing snippet file was not refused")
    assert (tmp_path / "python.py").read_text() == "x = 1\n"
