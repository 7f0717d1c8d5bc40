"""trace's command line keeps glibc from mapping freed memory again (mbridge_overlap/malloc.py): fewer page faults, the same
report; a library call leaves its caller's allocator alone; other C libraries and systems are left as they are."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mbridge_overlap import api, malloc
from mbridge_overlap.trace import cli, reader
from conftest import GLIBC
from trace_fixtures import TraceBuilder

REPO = Path(__file__).resolve().parent.parent

MEASURE = """
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from mbridge_overlap import malloc
from mbridge_overlap.trace import analyze
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


def _cli(argv: list[str], own_process: bool) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(argv)
    args.own_process = own_process  # as mbridge_overlap.cli.main sets it: True only from the launcher
    return cli.run(args)


def test_the_launchers_process_sets_it_and_no_other_does(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(malloc, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(reader, "_OWN_PROCESS", False)
    path = TraceBuilder().step(1, 0, 100).kernel("sm90_gemm", 10, 20).write(tmp_path / "rank-0.json")
    api.trace([str(path)])
    assert _cli([str(path), "--format", "json"], own_process=False) == 0  # a caller's (a test's) or the server's
    assert calls == [] and reader._OWN_PROCESS is False
    capsys.readouterr()
    assert _cli([str(path), "--format", "json"], own_process=True) == 0
    assert calls == [1] and reader._OWN_PROCESS is True
    assert json.loads(capsys.readouterr().out) == api.trace([str(path)]).to_dict()
    _cli(["--snippet", "python"], own_process=True)  # profiling snippets read no trace
    assert calls == [1]


def test_the_launcher_says_its_process_is_its_own(tmp_path):
    path = TraceBuilder().step(1, 0, 100).kernel("sm90_gemm", 10, 20).write(tmp_path / "rank-0.json")
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); sys.argv = ['mbridge-overlap', 'trace', sys.argv[2]]\n"
            "from mbridge_overlap import malloc\nfrom mbridge_overlap.trace import reader\n"
            "calls = []; malloc.keep_freed_memory = lambda: calls.append(1)\n"
            "from mbridge_overlap.launch import main\n"
            "fd = os.dup(1); os.dup2(os.open(os.devnull, os.O_WRONLY), 1); status = main(); os.dup2(fd, 1)\n"
            "print(status, calls, reader._OWN_PROCESS)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO), str(path)], capture_output=True, text=True,
                         check=True, env={**os.environ, "MBRIDGE_OVERLAP_SERVER": "0"}).stdout
    assert out.split() == ["0", "[1]", "True"]


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
