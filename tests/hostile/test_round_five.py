"""Hostile input, round five: what a fresh fuzzing pass broke (each case failed before its fix).

Sizes and ranks a log states that Python's int() takes and nothing else bounds (a 20-digit rank made diagnose loop
for ever, a superscript digit raised ValueError); one place per traceback kept without bound; shape overrides the
budget ignored; --jobs without a bound; a log's impossible world size failing the whole diagnosis; standard input
named twice.
"""

from __future__ import annotations

import gzip
import json

import pytest

from hostile_kit import ROOT, assert_clean_stderr, assert_one_line, run_cli

TP2 = "> initialized tensor model parallel with size 2\n"


@pytest.mark.parametrize("text", [
    TP2 + "!!! [UB] Global ranks on domain 0: [0, 99999999999999999999]\n!!! [UB] Global ranks on domain 1: [1]\n",
    TP2 + "!!! [UB] Global ranks on domain 0: [0, 99999999]\n!!! [UB] Global ranks on domain 1: [1]\n",
    "> initialized tensor model parallel with size \u00b2\n",
    "> initialized tensor model parallel with size " + "9" * 5000 + "\n",
    "> initialized HyperCommGrid with tp=" + "9" * 5000 + ", pp=1, cp=1, dp=1\n",
    "!!! [UB] Global ranks on domain " + "9" * 5000 + ": [0, 1]\n",
    "!!! [UB] Global ranks on domain 0: [" + "9" * 5000 + "]\n",
])
def test_sizes_and_ranks_a_log_states_are_bounded(text, tmp_path):
    log = tmp_path / "facts.log"
    log.write_text(text)
    proc = run_cli("diagnose", log, "--format", "json", timeout=20)
    assert proc.returncode in (0, 1), proc.stderr  # (1: a TP group across NVLink domains is a cause)
    assert_clean_stderr(proc)
    facts = json.loads(proc.stdout)["facts"]
    assert all(len(str(v)) < 200 for v in facts.values()), facts


def test_tp_groups_across_domains_are_found_from_the_ranks_listed():
    from mbridge_overlap.verbs.diagnose import _across

    assert _across({0: [0, 3], 1: [1, 2]}, 2) == [[0, 1], [2, 3]]
    assert _across({0: [0, 10**18], 1: [1]}, 2) == [[0, 1]]  # a far rank is its own group, not a loop to it


def test_tracebacks_through_overlap_code_in_ever_new_places_are_counted_not_kept(tmp_path):
    """One group per place and exception, up to MAX_TRACEBACKS; the rest counted: memory and answer stay small."""
    from mbridge_overlap.diagnose.scan import MAX_TRACEBACKS

    log = tmp_path / "many.log.gz"
    frame = ('Traceback (most recent call last):\n  File "/x{i}/megatron/core/distributed/param_and_grad_buffer.py", '
             'line 400, in start_grad_sync\n    raise RuntimeError(1)\nRuntimeError: boom {i}\n')
    with gzip.open(log, "wt") as f:
        f.write("".join(frame.format(i=i) for i in range(3000)))
    proc = run_cli("diagnose", log, "--format", "json", "--jobs", "1", timeout=120)
    d = json.loads(proc.stdout)
    assert len(d["causes"]) == MAX_TRACEBACKS and d["facts"]["tracebacks_dropped"] == 3000 - MAX_TRACEBACKS
    assert len(proc.stdout) < 2_000_000 and any("counted, not listed" in n for n in d["notes"])


def test_a_traceback_frame_of_a_huge_path_is_kept_short(tmp_path):
    log = tmp_path / "path.log"
    log.write_text('Traceback (most recent call last):\n  File "/' + "a" * 100_000 + '/megatron/core/distributed/'
                   'param_and_grad_buffer.py", line 4, in start_grad_sync\n    x()\nRuntimeError: boom\n')
    proc = run_cli("diagnose", log, "--format", "json")
    assert len(proc.stdout) < 50_000


def test_shape_overrides_reach_the_budget():
    """model.num_layers=20 on a recipe: the budget of 20 layers, and its shape line says so (it costed 80 as before).
    (20: PP 4 x VPP 5 chunks of one layer; 8 layers do not split so, and the run would not build)"""
    from mbridge_overlap import api

    recipe = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    whole = api.budget({}, recipe=recipe).to_dict()["budget"]
    twenty = api.budget({"model.num_layers": 20}, recipe=recipe).to_dict()["budget"]
    assert twenty["compute_ms"] < whole["compute_ms"] / 3 and "overrides: model.num_layers" in twenty["shape_from"]
    glu = api.budget({"model.gated_linear_unit": "false"}, recipe=recipe).to_dict()["budget"]  # as the command line gives it
    assert glu["compute_ms"] < whole["compute_ms"] and "overrides: model.gated_linear_unit" in glu["shape_from"]
    proc = run_cli("budget", "--recipe", recipe, "model.num_layers=abc")
    assert proc.returncode == 2
    assert_one_line(proc)


@pytest.mark.parametrize("jobs", ["9" * 999, "100000", "0"])
def test_jobs_is_bounded(jobs):
    proc = run_cli("diagnose", ROOT / "tests" / "data" / "logs" / "bridge-0.6.2", "--jobs", jobs)
    assert proc.returncode == 2
    assert_one_line(proc)


def test_a_world_size_no_machine_has_drops_the_config_link_not_the_causes(tmp_path):
    odd = tmp_path / "grid.log"
    odd.write_text("> initialized HyperCommGrid with tp=2048, pp=1024, cp=1, dp=1\n")
    other = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2" / "tp_overlap_nvfp4.log"
    proc = run_cli("diagnose", odd, other, "--format", "json")
    assert proc.returncode in (0, 1) and json.loads(proc.stdout)["causes"]
    assert_clean_stderr(proc)


def test_standard_input_named_twice_is_refused():
    proc = run_cli("diagnose", "--compare", "-", "-", input=b"hi\n")
    assert proc.returncode == 2
    assert_one_line(proc)


def test_a_log_that_grows_while_read_is_read_as_it_was_when_opened(tmp_path):
    """A regular file is read up to its size when opened: a run that keeps writing the log (faster than diagnose
    reads) no longer keeps diagnose reading for ever."""
    from mbridge_overlap.diagnose import reader

    log = tmp_path / "growing.log"
    log.write_bytes(b"step 1\n" * 1000)
    with open(log, "rb") as stream:
        read = reader._bounded(stream)
        with open(log, "ab") as writer:
            writer.write(b"written after the open\n" * 1000)
            got = b"".join(iter(lambda: read(4096), b""))
    assert got == b"step 1\n" * 1000
