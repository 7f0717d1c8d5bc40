"""verify.sh takes plan's MoE and Megatron-FSDP flags, so that a plan made with them is verified as planned (evalS
V4: `verify.sh --megatron-fsdp` was an unknown argument, and an FSDP plan's snippet given with --snippets failed
against a prediction made without FSDP). The layout goes to plan before Bridge is imported."""

from __future__ import annotations

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
