"""The suite runner and its pass-count check, on a fixture checkout of our own test files. The pytest process is a
fork of the caller's (what verify does: Bridge imported once) or a new `python -m pytest`: both are checked."""

import os
import sys
import time

import pytest

import fixture_checkout as fx
from mbridge_overlap.bridge import suites

MODES = pytest.mark.parametrize("fork", [True, False], ids=["forked", "new-process"])


def run(tmp_path, given=None, fork=None, **files):
    checkout = fx.make(tmp_path, **files)
    return {r.name: r for r in suites.run(sys.executable, checkout, "0.6.2", given or {}, fork=fork)}


@MODES
def test_passing_suites_pass_with_passed_equal_to_collected(tmp_path, fork):
    results = run(tmp_path, fork=fork)
    for r in results.values():
        assert r.status == suites.PASS, r.reason
        assert r.counts["passed"] == r.counts["collected"] == 3
        assert "passed = collected" in r.expected_from


@MODES
@pytest.mark.parametrize(
    "body, reason",
    [
        (fx.FAILING, "1 failed, 0 errors"),
        (fx.SKIPPED, "nothing passed (1 skipped)"),
        (fx.ERRORING, "0 failed, 1 errors"),
        (fx.EMPTY, "collected nothing"),
    ],
)
def test_failing_skipped_erroring_and_empty_suites_fail(tmp_path, body, reason, fork):
    results = run(tmp_path, comm_overlap=body, fork=fork)
    r = results["test_comm_overlap.py"]
    assert r.status == suites.FAIL and reason in r.reason
    assert results["test_run_plugins.py"].status == suites.PASS  # the other suite of the same pytest run


# What a new `python -m pytest` in the checkout starts with; the forked pytest must start the same.
FRESH_STATE = """import logging, os, pathlib, sys, warnings


def test_starts_as_python_m_pytest_does():
    checkout = pathlib.Path(__file__).resolve().parents[3]
    assert pathlib.Path.cwd() == checkout and checkout in [pathlib.Path(p).resolve() for p in sys.path[:3]]
    assert sys.argv[0].endswith(os.path.join("pytest", "__main__.py")) and "--junitxml" in " ".join(sys.argv)
    assert logging.root.manager.disable == logging.NOTSET
    assert sys.warnoptions == [o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o]
    assert ("ignore", None, Warning, None, 0) not in warnings.filters  # the -W ignore of verify.sh and of our tests
    assert os.environ["MBRIDGE_SKILL_ORIGIN"].endswith("origin.json")
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == os.environ["SKILL_ROOT_FOR_TEST"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn("shown", UserWarning)
    assert [str(w.message) for w in seen] == ["shown"]
"""


@MODES
def test_the_suites_process_starts_as_a_new_pytest_does(tmp_path, monkeypatch, fork):
    import logging
    import warnings

    monkeypatch.setenv("SKILL_ROOT_FOR_TEST", str(suites.SKILL_ROOT))
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    monkeypatch.setattr(sys, "warnoptions", [*sys.warnoptions, "ignore"])  # as verify.sh's -W ignore leaves them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)  # as verify's adapter.quiet() leaves it
        try:
            r = run(tmp_path, comm_overlap=FRESH_STATE, fork=fork)["test_comm_overlap.py"]
        finally:
            logging.disable(logging.NOTSET)
    assert r.status == suites.PASS, r.reason
    assert r.counts["passed"] == 1


SLOW = "import time\n\n\ndef test_a():\n    time.sleep(120)\n"
KILLED = "import os, signal\n\n\ndef test_a():\n    os.kill(os.getpid(), signal.SIGKILL)\n"


@MODES
def test_cancel_stops_the_pytest_process_and_removes_its_files(tmp_path, fork):
    pending = suites.start(sys.executable, fx.make(tmp_path, comm_overlap=SLOW), "0.6.2", {}, fork=fork)
    pid, folder = pending._pid or pending._proc.pid, pending._tmp.name
    started = time.monotonic()
    pending.cancel()
    assert time.monotonic() - started < 10
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone and reaped, not a zombie
    assert not os.path.exists(folder)


@MODES
def test_a_suite_past_the_time_limit_fails(tmp_path, monkeypatch, fork):
    monkeypatch.setattr(suites, "TIMEOUT_S", 3)
    r = run(tmp_path, comm_overlap=SLOW, fork=fork)["test_comm_overlap.py"]
    assert r.status == suites.FAIL and r.reason == "pytest did not finish in 3 s"


@MODES
def test_a_pytest_that_dies_fails_with_its_exit(tmp_path, fork):
    r = run(tmp_path, comm_overlap=KILLED, fork=fork)["test_comm_overlap.py"]
    assert r.status == suites.FAIL and "pytest wrote no report (exit -9)" in r.reason


def test_the_forked_pytest_says_when_it_ended(tmp_path):
    pending = suites.start(sys.executable, fx.make(tmp_path), "0.6.2", {}, fork=True)
    results = pending.results()
    assert all(r.status == suites.PASS for r in results)
    launched, done, exited = (pending.timing[k][0] for k in ("launched", "pytest_done", "exited"))
    assert launched <= done <= exited


@MODES
def test_expected_count_must_match_exactly(tmp_path, fork):
    r = run(tmp_path, given={"test_comm_overlap.py": 4}, fork=fork)["test_comm_overlap.py"]
    assert r.status == suites.FAIL and "3 passed, expected 4 (--expect-passed)" in r.reason
    r = run(tmp_path / "b", given={"test_comm_overlap.py": 3}, fork=fork)["test_comm_overlap.py"]
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


@pytest.mark.parametrize("python", ["this", "other"])
def test_missing_module_makes_the_second_suite_skipped(tmp_path, monkeypatch, python):
    table = suites.table()
    plugins = {**table["suites"]["test_run_plugins.py"], "needs_module": "no_such_module_x"}
    fake = {**table, "suites": {**table["suites"], "test_run_plugins.py": plugins}}
    monkeypatch.setattr(suites, "table", lambda: fake)
    # the same venv's interpreter by another name is "another Python": asked in a process of its own, suites in a new one
    interpreter = sys.executable if python == "this" else os.path.join(os.path.dirname(sys.executable), ".", os.path.basename(sys.executable))
    r = {x.name: x for x in suites.run(interpreter, fx.make(tmp_path), "0.6.2", {})}
    assert r["test_run_plugins.py"].status == suites.SKIPPED and "no_such_module_x" in r["test_run_plugins.py"].reason
    assert r["test_comm_overlap.py"].status == suites.PASS
    assert suites.has_module(interpreter, "pytest") and not suites.has_module(interpreter, "no_such_module_x")


def test_no_checkout_means_not_run_with_how_to_fix():
    for r in suites.run(sys.executable, None, "0.6.2"):
        assert r.status == suites.NOT_RUN and "--mbridge-src" in r.reason


@MODES
def test_a_suite_that_ran_against_the_checkouts_source_fails(tmp_path, fork):
    body = (
        "import sys, pathlib\n"
        "sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / 'src'))\n"
        "for name in [m for m in sys.modules if m.startswith('megatron')]:\n"
        "    del sys.modules[name]\n"
        "import megatron.bridge  # noqa: E402,F401\n\n\ndef test_a():\n    pass\n"
    )
    r = run(tmp_path, comm_overlap=body, fork=fork)["test_comm_overlap.py"]
    assert r.status == suites.FAIL and "not the installed package" in r.reason


def test_find_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("MBRIDGE_SRC", raising=False)
    checkout = fx.make(tmp_path)
    assert suites.find_checkout(str(checkout)) == checkout.resolve()
    monkeypatch.setenv("MBRIDGE_SRC", str(checkout))
    assert suites.find_checkout(None) == checkout.resolve()
    with pytest.raises(Exception, match="not a Megatron-Bridge checkout"):
        suites.find_checkout(str(tmp_path / "nowhere"))
