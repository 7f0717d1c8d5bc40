"""The finding registry is the unit of change: every record complete and of known fields, every id raised by exactly
one raiser (a registered check, or a verb's own declared raiser), and each record's fixability true of its example."""

import pytest

from mbridge_overlap.findings import rules as checks
from mbridge_overlap import findings
from tools import examples
from mbridge_overlap.verbs import diff, lint, plan as planner  # noqa: F401  (their raisers declare themselves)
from mbridge_overlap.diagnose import report  # noqa: F401
from mbridge_overlap.budget import worth  # noqa: F401


def test_every_record_is_complete_and_of_known_fields():
    for fid, rec in findings.records().items():
        assert set(rec) <= set(findings.FIELDS), (fid, set(rec) - set(findings.FIELDS))
        assert all(rec.get(k) for k in findings.REQUIRED), (fid, [k for k in findings.REQUIRED if not rec.get(k)])
        assert rec["severity"] in findings.SEVERITIES and rec["fixable"] in findings.FIXABLE, fid
        assert rec.get("when") in (None, *findings.WHEN), fid
        assert rec.get("blocks") in (None, "tp", "pp", "dp", "dp.grad_reduce", "dp.param_gather"), fid


def test_every_id_has_exactly_one_raiser():
    raisers = checks.RAISERS
    assert {fid: r for fid, r in raisers.items() if len(r) != 1} == {}
    assert set(raisers) - set(findings.records()) == set(), "a raiser declares an id the registry lacks"
    assert set(findings.records()) - set(raisers) == set(), "an id nobody raises"


def test_a_check_that_raises_an_undeclared_id_is_caught():
    from mbridge_overlap.findings import analysis
    from mbridge_overlap.run import scenario

    state = analysis.state_of(scenario.build(gpus=8))
    rogue = checks.check("DP_SIZE_ONE")(lambda s: iter([findings.make("VPP_WITHOUT_PP", vpp=2, fix=findings.shell("x"))]))
    try:
        with pytest.raises(RuntimeError, match="does not declare"):
            checks.collect(state)
    finally:
        checks.CHECKS.remove((rogue, frozenset({"DP_SIZE_ONE"})))
        checks.RAISERS["DP_SIZE_ONE"].pop()


@pytest.mark.parametrize("finding_id", sorted(fid for fid, rec in findings.records().items() if rec["fixable"] != "sometimes"))
def test_fixable_holds_for_the_example(finding_id):
    rec = findings.record(finding_id)
    raised = [f for f in _findings(rec["example"]) if f.id == finding_id]
    assert raised
    assert all(bool(f.fix_overrides) == (rec["fixable"] == "always") for f in raised), [f.fix_overrides for f in raised]


def _findings(example):
    """The example's findings with their fix_overrides (examples.run shows text only)."""
    from mbridge_overlap import api

    kw = {k: v for k, v in example.items() if k != "verb"}
    if example["verb"] == "resolve":
        return api.resolve(**kw).findings
    if example["verb"] == "plan":
        p = api.plan(**kw)
        return p.analysis.findings + p.notes
    if example["verb"] == "budget":
        return api.budget(**kw).budget.findings
    if example["verb"] == "lint":
        return api.lint(None, kw["overrides"], gpus=kw["gpus"], gpu=kw["gpu"]).findings
    if example["verb"].startswith("diagnose"):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            return [c.finding for c in examples.diagnosed(example, tmp).causes]
    return [_NoFix(f.id) for f in examples.run(example)]


class _NoFix:
    """A diff change or a saved-config finding: fix text only."""

    def __init__(self, fid):
        self.id, self.fix_overrides = fid, {}
