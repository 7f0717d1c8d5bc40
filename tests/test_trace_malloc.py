"""trace's command line keeps glibc from mapping freed memory again (trace/malloc.py): fewer page faults, the same
report; a library call leaves its caller's allocator alone; other C libraries and systems are left as they are."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mbridge_overlap import api
from mbridge_overlap.trace import cli, malloc
from trace_fixtures import TraceBuilder

REPO = Path(__file__).resolve().parent.parent
GLIBC = sys.platform.startswith("linux") and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")

MEASURE = """
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from mbridge_overlap.trace import analyze, malloc
kept = malloc.keep_freed_memory() if sys.argv[3] == "keep" else None
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
report = analyze(sys.argv[2]).to_dict()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"kept": kept, "faults": faults, "report": report}))
"""


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> Path:
    """About 12 MB of JSON: many chunks of the window, each allocated and freed."""
    b = TraceBuilder()
    b.step(1, 0, 10 ** 7).step(2, 10 ** 7, 2 * 10 ** 7)
    for i in range(20000):
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL" if i % 4 == 0 else "sm90_gemm", 10 * i, 10 * i + 5,
                 stream=7 + i % 2)
        b.noise(1)
    return b.write(tmp_path_factory.mktemp("malloc") / "rank-0.json.gz")


def _measure(path: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, str(REPO), str(path), mode], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_fewer_page_faults_and_the_same_report(big_trace):
    plain, kept = _measure(big_trace, "plain"), _measure(big_trace, "keep")
    assert kept["kept"] is True
    assert kept["report"] == plain["report"]
    assert kept["faults"] * 2 < plain["faults"], (kept["faults"], plain["faults"])


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(argv))


def test_the_command_line_sets_it_and_the_api_does_not(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(malloc, "keep_freed_memory", lambda: calls.append(1) or True)
    path = TraceBuilder().step(1, 0, 100).kernel("sm90_gemm", 10, 20).write(tmp_path / "rank-0.json")
    api.trace([str(path)])
    assert calls == []
    assert _cli([str(path), "--format", "json"]) == 0
    assert calls == [1]
    assert json.loads(capsys.readouterr().out) == api.trace([str(path)]).to_dict()
    _cli(["--snippet", "python"])  # profiling snippets read no trace
    assert calls == [1]


@pytest.mark.parametrize("where", ["platform", "confstr", "confstr_error", "ctypes", "mallopt"])
def test_elsewhere_it_does_nothing(where, monkeypatch):
    if where == "platform":
        monkeypatch.setattr(sys, "platform", "darwin")
    elif where == "confstr":
        monkeypatch.setattr(os, "confstr", lambda name: "musl 1.2")
    elif where == "confstr_error":
        def unknown(name):
            raise ValueError("unrecognized configuration name")

        monkeypatch.setattr(os, "confstr", unknown)
    elif where == "ctypes":
        monkeypatch.setitem(sys.modules, "ctypes", None)
    else:
        if not GLIBC:
            pytest.skip("glibc's mallopt")
        import ctypes

        class NoMallopt:
            def __init__(self, name):
                pass

        monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
        monkeypatch.setattr(sys, "platform", "linux")
    if where != "mallopt" and where != "platform":
        monkeypatch.setattr(sys, "platform", "linux")
    assert malloc.keep_freed_memory() is False
