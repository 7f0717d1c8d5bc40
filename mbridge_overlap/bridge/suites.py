"""Run the upstream overlap suites from a Megatron-Bridge checkout against the installed package, with a
pass-count check. The outcome is read from pytest's JUnit XML, never from its console text.

A suite PASSES only with failed = 0, errors = 0, passed >= 1 and passed equal to the expected count (given,
measured for that exact file in mbridge_overlap/data/suites.yaml, or else the number collected).

Every suite runs in one pytest process of its own. For verify (this interpreter) it is a fork of verify's process
taken right after Bridge was imported, so Bridge is imported once, not twice; the child is set back to what a new
`python -m pytest` in the checkout starts with (start()). Pytest's warning summary then leaves out what Bridge
warns at import (verify imported it before pytest started); the counts are unchanged."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..upstream.suites import table

SKILL_ROOT = Path(__file__).resolve().parents[2]
PASS, FAIL, NOT_RUN, SKIPPED = "PASS", "FAIL", "NOT RUN", "SKIPPED"


@dataclass
class SuiteResult:
    name: str
    status: str
    reason: str = ""
    counts: dict = field(default_factory=dict)  # collected, passed, failed, errors, skipped
    expected: int | None = None
    expected_from: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def find_checkout(explicit: str | None = None) -> Path | None:
    """--mbridge-src, else $MBRIDGE_SRC, else the first folder above the skill that is a Bridge checkout."""
    for candidate in (explicit, os.environ.get("MBRIDGE_SRC")):
        if candidate:
            root = Path(candidate).expanduser().resolve()
            if not (root / "tests").is_dir():
                raise UsageError(f"--mbridge-src {root}: not a Megatron-Bridge checkout (no tests/ folder)")
            return root
    for parent in SKILL_ROOT.parents:
        if (parent / "src" / "megatron" / "bridge").is_dir() and (parent / "tests" / "unit_tests").is_dir():
            return parent
    return None


def expected_count(name: str, path: Path, bridge_version: str, given: dict) -> tuple[int | None, str]:
    if name in given:
        return given[name], "--expect-passed"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for row in table()["measured"]:
        if row["suite"] == name and row["sha256"] == digest and row["bridge"] == bridge_version:
            return row["passed"], f"measured for this file ({', '.join(row['upstream'])}) against {row['bridge']}"
    return None, "passed = collected (no measured figure for this file and release)"


def has_module(python: str, module: str) -> bool:
    """Installed in that Python (found, not imported: importing nemo_run takes seconds). For this interpreter and a
    top-level name the search runs here (find_spec of a top-level name imports nothing); else in a `python -c`."""
    if python == sys.executable and "." not in module:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], capture_output=True, text=True).returncode == 0


def parse_junit(path: Path, suite_paths: dict[str, str]) -> dict[str, dict]:
    """Per-suite counts from pytest's JUnit XML; a test belongs to the suite whose module its classname names."""
    counts = {name: dict(collected=0, passed=0, failed=0, errors=0, skipped=0) for name in suite_paths}
    modules = {name: p[:-3].replace("/", ".") for name, p in suite_paths.items()}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        # a collection error is reported with an empty classname and the module as its name
        qualified = f"{classname}.{case.get('name', '')}".strip(".")
        name = next((n for n, m in modules.items() if classname == m or classname.startswith(m + ".") or qualified == m), None)
        if name is None:
            continue
        c = counts[name]
        c["collected"] += 1
        tags = {child.tag for child in case}
        if "error" in tags:
            c["errors"] += 1
        elif "failure" in tags:
            c["failed"] += 1
        elif "skipped" in tags:
            c["skipped"] += 1
        else:
            c["passed"] += 1
    return counts


def judge(name: str, counts: dict, expected: int | None, expected_from: str, exit_code: int) -> SuiteResult:
    result = SuiteResult(name, FAIL, counts=counts, expected=expected, expected_from=expected_from)
    want = expected if expected is not None else counts["collected"]
    if counts["collected"] == 0:
        result.reason = f"pytest collected nothing (exit {exit_code})"
    elif counts["failed"] or counts["errors"]:
        result.reason = f"{counts['failed']} failed, {counts['errors']} errors"
    elif counts["passed"] == 0:
        result.reason = f"nothing passed ({counts['skipped']} skipped)"
    elif counts["passed"] != want:
        result.reason = f"{counts['passed']} passed, expected {want} ({expected_from})"
    else:
        result.status, result.reason = PASS, f"{counts['passed']} passed, as expected ({expected_from})"
    return result


TIMEOUT_S = 1800


def run(python: str, checkout: Path | None, bridge_version: str, given: dict | None = None, progress=None,
        fork: bool | None = None) -> list[SuiteResult]:
    """Run every suite in one pytest process (Bridge is imported once) and judge each."""
    return start(python, checkout, bridge_version, given, progress, fork).results()


def start(python: str, checkout: Path | None, bridge_version: str, given: dict | None = None, progress=None, fork: bool | None = None) -> "Pending":
    """Start the suites' one pytest process and return at once; Pending.results() waits for it and judges each suite.

    fork (default: when `python` is this interpreter and the platform forks): the pytest process is a fork of this
    one, so it shares the megatron.bridge this process imported (about 8 s saved) and is otherwise set back to what
    `python -m pytest` starts with (working folder, sys.path, argv, environment, warning filters, logging); else a
    new `python -m pytest`. Either way the suites run in a process of their own."""
    given = given or {}
    suites = table()["suites"]
    if checkout is None:
        why = "no Megatron-Bridge checkout: pass --mbridge-src PATH or set MBRIDGE_SRC (a checkout at the tag of your release)"
        return Pending({name: SuiteResult(name, NOT_RUN, why) for name in suites}, list(suites))
    results, to_run = {}, {}
    for name, spec in suites.items():
        path = checkout / spec["path"]
        if not path.is_file():
            results[name] = SuiteResult(name, NOT_RUN, f"{spec['path']} is not in {checkout}")
        elif spec.get("needs_module") and not has_module(python, spec["needs_module"]):
            results[name] = SuiteResult(name, SKIPPED, f"{spec['needs_module']} is not installed in {python}")
        else:
            to_run[name] = spec["path"]
    pending = Pending(results, list(suites))
    if to_run:
        if fork is None:
            fork = python == sys.executable and hasattr(os, "fork")
        pending.launch(python, checkout, to_run, bridge_version, given, progress, fork)
    return pending


class Pending:
    """The suites' pytest process while it runs; results() judges each suite from its JUnit XML."""

    def __init__(self, results: dict, order: list):
        self._results, self._order = results, order
        self._proc = self._pid = self._done_fd = None
        self._tmp = None
        self.timing: dict = {}  # [time.time(), CPU s] at: launched, pytest_done (forked: the child's), exited (seen here)

    def launch(self, python, checkout, to_run, bridge_version, given, progress, fork) -> None:
        self._checkout, self._to_run, self._bridge_version, self._given = checkout, to_run, bridge_version, given
        self._tmp = tempfile.TemporaryDirectory()
        tmp = Path(self._tmp.name)
        self._junit, self._origin, self._log = tmp / "junit.xml", tmp / "origin.json", tmp / "pytest.log"
        args = [*to_run.values(), "-q", "--continue-on-collection-errors", "-p", "no:cacheprovider", "-p", "mbridge_overlap.bridge.pytest_origin",
                f"--junitxml={self._junit}"]
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(SKILL_ROOT), os.environ.get("PYTHONPATH")])),
               "MBRIDGE_SKILL_ORIGIN": str(self._origin)}
        if progress:
            progress(f"suites: running {', '.join(to_run)} in {checkout}")
        self._deadline = time.monotonic() + TIMEOUT_S
        self.timing["launched"] = [time.time(), time.process_time()]
        if fork:
            self._pid, self._done_fd = _fork_pytest(args, checkout, env, self._log)
        else:
            with open(self._log, "wb") as log:
                self._proc = subprocess.Popen([python, "-m", "pytest", *args], cwd=checkout, env={**os.environ, **env}, stdout=log,
                                              stderr=subprocess.STDOUT)

    def _wait(self) -> int:
        """pytest's exit status (negative: killed by that signal); FAIL's reason when it ran past TIMEOUT_S."""
        if self._proc is not None:
            try:
                return self._proc.wait(timeout=max(0.0, self._deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.cancel()
                return None
        # the child holds the write end of a pipe: it writes when pytest ended and reads as closed when it has exited
        said = b""
        while True:
            if select.select([self._done_fd], [], [], max(0.0, self._deadline - time.monotonic()))[0]:
                chunk = os.read(self._done_fd, 64)
                if not chunk:
                    break
                said += chunk
            elif time.monotonic() >= self._deadline:
                self.cancel()
                return None
        with contextlib.suppress(ValueError):
            self.timing["pytest_done"] = [float(x) for x in said.split()]
        os.close(self._done_fd)
        self._done_fd = None
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        return os.waitstatus_to_exitcode(status)

    def cancel(self) -> None:
        """Stop the pytest process if it still runs (verify stopped early) and remove its files."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(self._pid, signal.SIGKILL)
                os.waitpid(self._pid, 0)
            self._pid = None
        if self._done_fd is not None:
            os.close(self._done_fd)
            self._done_fd = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def results(self) -> list[SuiteResult]:
        if self._tmp is not None:
            try:
                returncode = self._wait()
                self.timing["exited"] = [time.time(), time.process_time()]
                self._results.update(self._judge(returncode))
            finally:
                self.cancel()
        return [self._results[name] for name in self._order]

    def _judge(self, returncode) -> dict:
        to_run, checkout = self._to_run, self._checkout
        if returncode is None:
            return {n: SuiteResult(n, FAIL, f"pytest did not finish in {TIMEOUT_S} s") for n in to_run}
        if not self._junit.exists():
            tail = self._log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
            return {n: SuiteResult(n, FAIL, f"pytest wrote no report (exit {returncode}): {' | '.join(tail)}") for n in to_run}
        try:
            counts = parse_junit(self._junit, to_run)
        except ET.ParseError as exc:
            return {n: SuiteResult(n, FAIL, f"pytest's report is unreadable (exit {returncode}): {exc}") for n in to_run}
        ran_against = json.loads(self._origin.read_text()) if self._origin.exists() else {}
        out = {}
        for name, path in to_run.items():
            expected, source = expected_count(name, checkout / path, self._bridge_version, self._given)
            result = judge(name, counts[name], expected, source, returncode)
            package = ran_against.get("file", "")
            if package and str(checkout) in package:
                result.status, result.reason = FAIL, f"ran against the checkout's source ({package}), not the installed package"
            result.counts["megatron_bridge"] = package
            out[name] = result
        return out


def _fork_pytest(args: list, checkout: Path, env: dict, log: Path) -> tuple[int, int]:
    """Fork, and in the child run pytest.main(args) as `python -m pytest ARGS` would in `checkout` with `env` added;
    (the child's pid, the read end of a pipe that closes when the child exits)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()  # or the child would write this process's buffered output again
    done_r, done_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(done_w)
        return pid, done_r
    code = 70
    try:
        os.close(done_r)
        die_with_parent(parent)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        code = _pytest_as_if_fresh(args, checkout, env)
        os.write(done_w, f"{time.time()!r} {time.process_time()!r}".encode())  # the child's CPU starts at 0
    except BaseException:  # noqa: B036  (the child must end here, whatever happened)
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def die_with_parent(parent: int) -> None:
    """Linux: the child gets SIGKILL when verify ends first (killed, interrupted): no pytest is left behind."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before the line above took effect
        os._exit(70)


def _pytest_as_if_fresh(args: list, checkout: Path, env: dict) -> int:
    """In the forked child: undo what this process changed that `python -m pytest` would not have, then run it."""
    import logging
    import warnings

    sys.stdout, sys.stderr = _stream(sys.__stdout__, 1), _stream(sys.__stderr__, 2)
    start_dir = os.getcwd()
    os.chdir(checkout)
    os.environ.update(env)
    if sys.path and sys.path[0] in (start_dir, ""):
        sys.path[0] = str(checkout)  # python -m puts its working folder first
    else:
        sys.path.insert(0, str(checkout))
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(1, entry)
    _fresh_warnings(warnings)
    logging.disable(logging.NOTSET)  # verify silences Bridge's log lines (adapter.quiet)
    for hook in [h for h in sys.meta_path if type(h).__name__ == "AssertionRewritingHook"]:
        sys.meta_path.remove(hook)  # a pytest that ran verify in-process (the tests): its rewriting is not this run's
    import pytest

    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *args]
    return int(pytest.main(args))


def _stream(stream, fd: int):
    return stream if stream is not None and not stream.closed else open(fd, "w", closefd=False)


def _fresh_warnings(warnings) -> None:
    """The warning filters of a new interpreter in this environment: PYTHONWARNINGS kept, the -W options this one
    started with taken off (verify.sh passes -W ignore; a new `python -m pytest` has none); the filters that imports
    added stay, as the same imports add them there."""
    fresh = [o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o]
    extra = list(sys.warnoptions)
    for option in fresh:
        if option in extra:
            extra.remove(option)
    for option in extra:
        entry = _filter_of(warnings, option)
        if entry in warnings.filters:
            position = len(warnings.filters) - 1 - warnings.filters[::-1].index(entry)  # options go in first: the deepest
            del warnings.filters[position]
    sys.warnoptions[:] = fresh
    warnings._filters_mutated()


def _filter_of(warnings, option: str):
    try:
        with warnings.catch_warnings():
            warnings._setoption(option)
            return warnings.filters[0]
    except Exception:  # an option this Python would not take, or a warnings module without _setoption
        return None
