"""The optional fast JSON backend (msgspec) gives the stdlib scanner's report or error on every shared real trace
and every hostile case; the stdlib path is what runs without it (and with MBRIDGE_TRACE_JSON=stdlib)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mbridge_overlap.errors import UsageError
from mbridge_overlap.trace import analyze, kineto, reader
from trace_fixtures import REPO, real_traces

sys.path.insert(0, str(Path(__file__).parent / "hostile"))
import test_trace_hostile as hostile  # noqa: E402

msgspec = pytest.importorskip("msgspec", reason="msgspec (the optional fast JSON backend) is not installed")
pytestmark = pytest.mark.skipif(reader.BACKEND != "msgspec", reason="MBRIDGE_TRACE_JSON=stdlib is set")


def outcome(paths, allow_partial: bool, fast: bool, monkeypatch) -> dict | str:
    """The report (file names aside) or the error message, with the fast backend from the first run, or without."""
    monkeypatch.setattr(reader, "BACKEND", "msgspec" if fast else "stdlib")
    monkeypatch.setattr(reader, "FAST_AFTER", 0)
    monkeypatch.setattr(reader, "_decoders", {})
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
            "print(reader.BACKEND, len(reader._decoders), 'msgspec' in sys.modules)")
    big = real_traces()[0] if real_traces() else None
    if big is None:
        pytest.skip("no real traces")
    out = subprocess.run([sys.executable, "-c", code, str(big)], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["stdlib", "0", "False"], out.stderr
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


def test_the_fast_backend_decodes_only_the_keys_the_analysis_reads(monkeypatch):
    """The real traces above are read by the typed decoder (not each run left to the stdlib): it is what the
    analysis asked for, and an event reaches the adder with those keys alone."""
    paths = real_traces()
    if not paths:
        pytest.skip("no real traces")
    seen = []
    monkeypatch.setattr(reader, "BACKEND", "msgspec")
    monkeypatch.setattr(reader, "FAST_AFTER", 0)
    monkeypatch.setattr(reader, "_decoders", {})
    stats = reader.read(paths[0], seen.append, keys=kineto.EVENT_KEYS)
    assert list(reader._decoders) == [kineto.EVENT_KEYS]
    allowed = dict(kineto.EVENT_KEYS)
    assert len(seen) > stats.events * 0.9  # a few events at the window's ends go through the stdlib, whole
    typed = [e for e in seen if set(e) <= set(allowed) and set(e.get("args", {})) <= set(allowed["args"])]
    assert len(typed) > stats.events * 0.9 and any("args" in e for e in typed)


def _long_stretch(text: str, limit: int) -> bool:
    return any(len(m) > limit for m in re.findall("[0-9]+", text))


@pytest.mark.parametrize("seed", range(40))
def test_long_integers_are_found_exactly(seed, monkeypatch):
    """The check that sends a run with an integer the stdlib refuses to the stdlib finds every stretch of more
    digits than the limit, and no shorter one, wherever it lies in the run."""
    rng = random.Random(seed)
    limit = rng.choice([4300, 4301, 640, 641])
    monkeypatch.setattr(reader, "_int_digits", lambda: limit)
    for _ in range(50):
        parts = []
        while sum(map(len, parts)) < 3 * limit:
            parts += ["7" * rng.choice([rng.randint(0, 30), rng.randint(limit // 2 - 3, limit // 2 + 3),
                                        rng.randint(limit - 3, limit + 3), rng.randint(2 * limit - 3, 2 * limit + 3)]),
                      rng.choice(',x"] ')]
        text = "".join(parts)[rng.randint(0, limit):]
        text = text[:rng.randint(0, len(text))]
        assert reader._long_integer(text) == _long_stretch(text, limit), (limit, len(text))


def _event_text(inner: str) -> str:
    """A hostile trace whose NCCL kernel's JSON text gets `inner` spliced in before its first key."""
    doc = hostile.trace(steps=6)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"])
    kernel["@K@"] = 0
    return json.dumps(doc).replace('"@K@": 0', inner)


SPLICES = {
    "duplicate_name": '"name": "aten::mm", "name": "aten::mm"',
    "duplicate_args_object": '"args": {"stream": 99}',  # the kernel's own args come later and win
    "args_not_an_object": '"args": 7, "x": 1',
    "escaped_keys": '"n\\u0061me": "x", "\\u0061rgs": {"str\\u0065am": 7}',
    "nested_unused": '"unused": {"a": [1, {"b": [2.5e-3, null, true]}], "c": "\\ud83d\\ude00"}',
    "long_integer_unused": '"unused": ' + "9" * 4301,
    "long_float_unused": '"unused": ' + "9" * 5000 + ".5",
    "long_digit_string": '"unused": "' + "9" * 5000 + '"',
}


@pytest.mark.parametrize("inner", SPLICES.values(), ids=SPLICES.keys())
def test_odd_events_read_the_same(inner, tmp_path, monkeypatch):
    path = tmp_path / "rank-0.json"
    path.write_text(_event_text(inner))
    assert outcome(path, False, True, monkeypatch) == outcome(path, False, False, monkeypatch)


def test_nesting_near_the_recursion_limit_reads_the_same(tmp_path, monkeypatch):
    """Both decoders stop at the interpreter's recursion limit, which the call's own depth moves: around it, in
    every depth, the fast backend refuses at least what the stdlib refuses (and the stdlib decides)."""
    top = sys.getrecursionlimit()
    for depth in range(top - 120, top + 2):
        path = tmp_path / f"rank-{depth}.json"
        path.write_text(_event_text('"unused": ' + "[" * depth + "]" * depth))
        assert outcome(path, False, True, monkeypatch) == outcome(path, False, False, monkeypatch), depth


def test_a_msgspec_that_cannot_decode_typed_leaves_every_run_to_the_stdlib(monkeypatch):
    """An old or broken msgspec (its typed Decoder refused) costs the speed, never the answer or the command."""
    paths = real_traces()
    if not paths:
        pytest.skip("no real traces")

    def refuse(*args, **kwargs):
        raise TypeError("Type 'Event' is not supported")

    monkeypatch.setattr(msgspec.json, "Decoder", refuse)
    monkeypatch.setattr(reader, "FAST_AFTER", 0)
    broken = outcome(paths[-1], False, True, monkeypatch)
    assert reader._decoders[kineto.EVENT_KEYS] is reader._to_the_stdlib
    assert broken == outcome(paths[-1], False, False, monkeypatch)


def _imports_of_msgspec(own_process: bool) -> dict:
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from mbridge_overlap.trace import kineto, reader\n"
            + ("reader.own_process()\n" if own_process else "")
            + "decode = reader._decoder_of(kineto.EVENT_KEYS)\n"
            "events = decode('[{\"name\": \"k\", \"cat\": \"kernel\", \"ts\": 1, \"dur\": 2, \"pid\": 0, "
            "\"args\": {\"stream\": 7, \"correlation\": 3, \"grid\": [1]}}]')\n"
            "loaded = sorted({'typing_extensions', 'inspect'} & set(sys.modules))\n"
            "import typing_extensions\n"  # importable afterwards: nothing of the block is left behind
            "print(json.dumps({'typed': decode is not reader._to_the_stdlib, 'events': events, 'loaded': loaded}))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
