"""verify.sh takes plan's MoE and Megatron-FSDP flags, so that a plan made with them is verified as planned (evalS
V4: `verify.sh --megatron-fsdp` was an unknown argument, and an FSDP plan's snippet given with --snippets failed
against a prediction made without FSDP). The layout goes to plan before Bridge is imported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mbridge_overlap import api
from mbridge_overlap.bridge import verify


def _plan(*argv):
    return api.plan(**verify.layout_of(verify.parser().parse_args(list(argv))))


def test_megatron_fsdp_reaches_the_plan_verify_checks():
    plan = _plan("--tp", "2", "--pp", "1", "--vpp", "0", "--gpus", "64", "--megatron-fsdp")
    assert plan.overrides.get("ddp.use_megatron_fsdp") is True
    assert _plan("--tp", "2", "--pp", "1", "--vpp", "0", "--gpus", "64").overrides.get("ddp.use_megatron_fsdp") is not True


def test_moe_flags_reach_the_plan_verify_checks():
    plan = _plan("--tp", "1", "--pp", "1", "--vpp", "0", "--ep", "8", "--gpus", "8", "--gpu", "b200", "--moe", "--model", "qwen3_30b_a3b",
                 "--moe-a2a-overlap", "--moe-flex-backend", "deepep")
    assert plan.overrides.get("comm_overlap.overlap_moe_expert_parallel_comm") is True
    assert plan.overrides.get("model.moe_flex_dispatcher_backend") == "deepep"


def test_an_empty_text_flag_is_refused_before_bridge_is_imported():
    """fuzzP P4: verify.sh --model '' imported Bridge and passed; plan refuses it in one line."""
    import subprocess
    import sys

    from conftest import ROOT

    for flag in ("--model", "--recipe", "--precision"):
        proc = subprocess.run([sys.executable, "-m", "mbridge_overlap.bridge.verify", flag, "", "--skip-suites"],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 2 and proc.stderr.strip() == f"verify: error: {flag}: empty; leave it out for the default", proc.stderr


@pytest.mark.parametrize("argv", [["--tp", "abc"], ["--bogus"], ["--recipe", ""], ["--tp", "2", "--which-python"]])
def test_the_script_refuses_bad_arguments_before_it_builds_anything(tmp_path, argv):
    """fuzzR R6: scripts/verify.sh picked (and on a fresh machine built: 4.6 GB of torch) its Bridge interpreter before
    the arguments were read; now any Python refuses them first, in one line, and nothing is created in the cache."""
    import subprocess

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_NO_INDEX": "1", "MBRIDGE_VERIFY_PYTHON": ""}
    script = Path(__file__).resolve().parent.parent / "scripts" / "verify.sh"
    proc = subprocess.run(["bash", str(script), *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "cache").exists()
