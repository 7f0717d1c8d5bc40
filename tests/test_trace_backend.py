"""The optional fast JSON backend (msgspec) gives the stdlib scanner's report or error on every shared real trace
and every hostile case; the stdlib path is what runs without it (and with MBRIDGE_TRACE_JSON=stdlib)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mbridge_overlap.errors import UsageError
from mbridge_overlap.trace import analyze, reader
from trace_fixtures import REPO, real_traces

sys.path.insert(0, str(Path(__file__).parent / "hostile"))
import test_trace_hostile as hostile  # noqa: E402

msgspec = pytest.importorskip("msgspec", reason="msgspec (the optional fast JSON backend) is not installed")
pytestmark = pytest.mark.skipif(reader.BACKEND != "msgspec", reason="MBRIDGE_TRACE_JSON=stdlib is set")


def outcome(paths, allow_partial: bool, fast: bool, monkeypatch) -> dict | str:
    """The report (file names aside) or the error message, with the fast backend from the first run, or without."""
    monkeypatch.setattr(reader, "BACKEND", "msgspec" if fast else "stdlib")
    monkeypatch.setattr(reader, "FAST_AFTER", 0)
    monkeypatch.setattr(reader, "_decode", None)
    try:
        d = analyze(paths, allow_partial=allow_partial, jobs=1).to_dict()
    except UsageError as exc:
        return str(exc)
    for rank in d["ranks"]:
        rank["file"] = None
    return d


def test_the_stdlib_path_runs_without_the_backend():
    env = {**os.environ, "MBRIDGE_TRACE_JSON": "stdlib"}
    code = ("import sys; from mbridge_overlap.trace import analyze, reader; analyze(sys.argv[1]); "
            "print(reader.BACKEND, reader._decode, 'msgspec' in sys.modules)")
    big = real_traces()[0] if real_traces() else None
    if big is None:
        pytest.skip("no real traces")
    out = subprocess.run([sys.executable, "-c", code, str(big)], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["stdlib", "None", "False"], out.stderr
    default = subprocess.run([sys.executable, "-c", code, str(big)], cwd=REPO, capture_output=True, text=True)
    assert default.stdout.split()[0] == "msgspec" and default.stdout.split()[-1] == "True"  # over FAST_AFTER


@pytest.mark.parametrize("path", real_traces(), ids=[p.name for p in real_traces()])
def test_real_traces_read_the_same(path, monkeypatch):
    assert outcome(path, False, True, monkeypatch) == outcome(path, False, False, monkeypatch)


FILE_CASES = [c for c in hostile.ALL_CASES if c.stdout == "pipe" and not c.env]


@pytest.mark.parametrize("case", FILE_CASES, ids=[f"{c.kind}-{c.name}" for c in FILE_CASES])
def test_hostile_cases_read_the_same(case, tmp_path, monkeypatch):
    args = [str(a) for a in case.make(tmp_path)]
    flags = [a for a in args if a.startswith("--")]
    if set(flags) - {"--format", "--allow-partial"}:
        pytest.skip("a flag the library call does not take")
    paths = [a for a in args if not a.startswith("--") and a != "json"]
    allow = "--allow-partial" in flags
    assert outcome(paths, allow, True, monkeypatch) == outcome(paths, allow, False, monkeypatch)


NUMBERS = [str(2 ** 63), str(-2 ** 63 - 1), str(2 ** 64), str(2 ** 64 + 1), "9" * 4300, "9" * 4301, "1e308",
           "1e309", "-1e400", "4.9e-324", "1e-400", "0.1", "-0", "-0.0", "1E2", "123456789012345678901234.5e-3"]


@pytest.mark.parametrize("number", NUMBERS, ids=[n[:24] for n in NUMBERS])
@pytest.mark.parametrize("field", ["ts", "dur", "correlation", "stream", "External id", "unused"])
def test_numbers_read_the_same(number, field, tmp_path, monkeypatch):
    doc = hostile.trace(steps=6)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"])
    (kernel["args"] if field in ("correlation", "stream", "External id", "unused") else kernel)[field] = "@N@"
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc).replace('"@N@"', number))
    assert outcome(path, False, True, monkeypatch) == outcome(path, False, False, monkeypatch)
