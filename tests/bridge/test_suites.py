"""The suite runner and its pass-count check, on a fixture checkout of our own test files."""

import sys

import pytest

import fixture_checkout as fx
from mbridge_overlap.bridge import suites


def run(tmp_path, given=None, **files):
    checkout = fx.make(tmp_path, **files)
    return {r.name: r for r in suites.run(sys.executable, checkout, "0.6.2", given or {})}


def test_passing_suites_pass_with_passed_equal_to_collected(tmp_path):
    results = run(tmp_path)
    for r in results.values():
        assert r.status == suites.PASS, r.reason
        assert r.counts["passed"] == r.counts["collected"] == 3
        assert "passed = collected" in r.expected_from


@pytest.mark.parametrize(
    "body, reason",
    [
        (fx.FAILING, "1 failed, 0 errors"),
        (fx.SKIPPED, "nothing passed (1 skipped)"),
        (fx.ERRORING, "0 failed, 1 errors"),
        (fx.EMPTY, "collected nothing"),
    ],
)
def test_failing_skipped_erroring_and_empty_suites_fail(tmp_path, body, reason):
    r = run(tmp_path, comm_overlap=body)["test_comm_overlap.py"]
    assert r.status == suites.FAIL and reason in r.reason
    assert run(tmp_path / "other", comm_overlap=body)["test_run_plugins.py"].status == suites.PASS


def test_expected_count_must_match_exactly(tmp_path):
    r = run(tmp_path, given={"test_comm_overlap.py": 4})["test_comm_overlap.py"]
    assert r.status == suites.FAIL and "3 passed, expected 4 (--expect-passed)" in r.reason
    r = run(tmp_path / "b", given={"test_comm_overlap.py": 3})["test_comm_overlap.py"]
    assert r.status == suites.PASS


def test_measured_figure_is_used_only_for_the_exact_file(tmp_path, monkeypatch):
    checkout = fx.make(tmp_path)
    digest = __import__("hashlib").sha256((checkout / "tests/unit_tests/training/test_comm_overlap.py").read_bytes()).hexdigest()
    table = suites.table()
    fake = {**table, "measured": [{"suite": "test_comm_overlap.py", "sha256": digest, "upstream": ["fixture"], "bridge": "0.6.2", "passed": 2}]}
    monkeypatch.setattr(suites, "table", lambda: fake)
    r = {x.name: x for x in suites.run(sys.executable, checkout, "0.6.2", {})}["test_comm_overlap.py"]
    assert r.status == suites.FAIL and "expected 2 (measured for this file (fixture)" in r.reason
    r = {x.name: x for x in suites.run(sys.executable, checkout, "0.6.1", {})}["test_comm_overlap.py"]
    assert r.status == suites.PASS  # the figure was measured against another release


def test_missing_module_makes_the_second_suite_skipped(tmp_path, monkeypatch):
    table = suites.table()
    fake = {**table, "suites": {**table["suites"], "test_run_plugins.py": {**table["suites"]["test_run_plugins.py"], "needs_module": "no_such_module_x"}}}
    monkeypatch.setattr(suites, "table", lambda: fake)
    r = run(tmp_path)
    assert r["test_run_plugins.py"].status == suites.SKIPPED and "no_such_module_x" in r["test_run_plugins.py"].reason
    assert r["test_comm_overlap.py"].status == suites.PASS


def test_no_checkout_means_not_run_with_how_to_fix():
    for r in suites.run(sys.executable, None, "0.6.2"):
        assert r.status == suites.NOT_RUN and "--mbridge-src" in r.reason


def test_a_suite_that_ran_against_the_checkouts_source_fails(tmp_path):
    body = (
        "import sys, pathlib\n"
        "sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / 'src'))\n"
        "for name in [m for m in sys.modules if m.startswith('megatron')]:\n"
        "    del sys.modules[name]\n"
        "import megatron.bridge  # noqa: E402,F401\n\n\ndef test_a():\n    pass\n"
    )
    r = run(tmp_path, comm_overlap=body)["test_comm_overlap.py"]
    assert r.status == suites.FAIL and "not the installed package" in r.reason


def test_find_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("MBRIDGE_SRC", raising=False)
    checkout = fx.make(tmp_path)
    assert suites.find_checkout(str(checkout)) == checkout.resolve()
    monkeypatch.setenv("MBRIDGE_SRC", str(checkout))
    assert suites.find_checkout(None) == checkout.resolve()
    with pytest.raises(Exception, match="not a Megatron-Bridge checkout"):
        suites.find_checkout(str(tmp_path / "nowhere"))
