"""diagnose reads a log of one JSON record a line (docker's json-file driver, fluentd, a structured logger) as the
records' text: the "log" / "message" value, JSON-unescaped (recheck62 AI4: a docker record's message glued to its
escaped newline and the JSON tail was matched by its words to another function's message)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import reader

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "logs"


def _diagnose(data: bytes) -> dict:
    return api.diagnose(["-"], stdin=io.BytesIO(data)).to_dict()


def _docker(line: str, stream: str = "stderr") -> str:
    return json.dumps({"log": line + "\n", "stream": stream, "time": "2025-01-01T00:00:00.000000000Z"},
                      separators=(",", ":")) + "\n"


def test_a_docker_record_is_its_message():
    """The record of recheck62 AI4: Megatron-Core's get_data_parallel_group assertion, matched verbatim, not by its
    words to get_tensor_and_data_parallel_group's; its rank from the [rank0]: inside the record."""
    plain = "[rank0]: AssertionError: data parallel group is not initialized"
    for data in (_docker(plain), plain + "\n"):
        (cause,) = _diagnose(data.encode())["causes"]
        ev = cause["evidence"][0]
        assert ev["function"] == "get_data_parallel_group" and ev["ranks"] == ["0"], ev
        assert ev["first_seen"]["line"] == 1 and ev["logged"] == plain[9:] and not ev.get("approximate"), ev
    # structured loggers' records: the key's value, escapes undone (a quote, a tab, \u escapes)
    line = json.dumps({"asctime": "12:00", "levelname": "ERROR", "message": 'x\t"q" \u00e9\n' + plain[10:]})
    got = list(reader.lines(["-"], stdin=io.BytesIO(line.encode() + b"\n")))
    assert [(g.number, g.text) for g in got] == [(1, 'x\t"q" \u00e9'), (1, plain[10:])]


def test_a_record_of_several_lines_is_read_line_by_line():
    """A record holding a whole traceback (a multi-line print): its frames are read as frames, each line numbered as
    the record's line; the lines after it keep their numbers."""
    frames = ["Traceback (most recent call last):",
              '  File "/opt/megatron-lm/megatron/core/distributed/param_and_grad_buffer.py", line 400, in start_grad_sync',
              "    torch.distributed.reduce_scatter_tensor(",
              "RuntimeError: unexpected tensor layout"]
    data = "starting\n" + json.dumps({"message": "\n".join(frames) + "\n", "level": "error"}) + "\nafter\n"
    (cause,) = _diagnose(data.encode())["causes"]
    assert cause["id"] == "OVERLAP_PATH_TRACEBACK" and "ddp.overlap_grad_reduce" in cause["knobs"]
    assert cause["evidence"][0]["first_seen"]["line"] == 2
    got = list(reader.lines(["-"], stdin=io.BytesIO(data.encode())))
    assert [g.number for g in got] == [1, 2, 2, 2, 2, 3] and got[-1].text == "after"


@pytest.mark.parametrize("name", ["bridge-0.6.2/distributed_optimizer_flags_disagree.log",
                                  "bridge-0.6.2/tp_overlap_no_sequence_parallel.log", "bridge-0.6.2/gpus_not_divisible.log",
                                  "bridge-0.6.2/fsdp_one_connection_launcher_export.log",
                                  "upstream/mlm1129_param_grad_none_overlap_grad_reduce.log"])
def test_a_log_through_docker_gives_the_plain_log_s_answer(name, tmp_path):
    """Every line of a real log written as docker's json-file driver writes it: the same causes, counts and ranks
    (read by blocks and by lines alike)."""
    text = (LOGS / name).read_text(encoding="utf-8")
    wrapped = tmp_path / "container-json.log"
    wrapped.write_text("".join(_docker(x) for x in text.splitlines()), encoding="utf-8")

    def answer(path):  # the whole answer but the file's name
        d = api.diagnose([str(path)]).to_dict()
        d.pop("sources")
        return json.loads(json.dumps(d).replace(json.dumps(str(path))[1:-1], "LOG"))

    plain = answer(LOGS / name)
    assert plain["causes"] and answer(wrapped) == plain
    assert [x.text for x in reader.lines([str(wrapped)])] == [x.text for x in reader.lines([str(LOGS / name)])]


@pytest.mark.parametrize("line", [
    '{"model": {"tensor_model_parallel_size": 2}, "log": 3}',  # JSON, but its keys' values are no text
    '{"config": "x"}',
    '{"log": ' + "[" * 100_000 + "]" * 100_000 + "}",  # past the JSON reader's depth
    '{"log": "a", "n": ' + "9" * 10_000 + "}",  # an integer of more digits than int() reads
    '{"log":"never closed',
    "{not json at all",
])
def test_other_json_and_broken_records(line):
    """Lines that are no record (or a record of no text) stay as they are; a record cut short gives its text as far
    as it goes; nothing raises."""
    got = list(reader.lines(["-"], stdin=io.BytesIO(line.encode() + b"\nnext\n")))
    assert [g.number for g in got] == [1, 2]
    record = {'{"log":"never closed': "never closed", '{"log": "a", "n": 9': "a"}
    assert got[0].text == next((v for k, v in record.items() if line.startswith(k)), line)
    d = _diagnose(line.encode() + b"\n")
    assert not d["causes"]


def test_the_block_reader_and_the_line_reader_read_a_record_alike():
    """Docker records are read from their bytes by blocks (reader._DOCKER, no JSON reader) and by the JSON reader
    line by line: the same texts for escaped quotes, an escaped backslash before an n (no newline), ANSI escapes, a
    surrogate pair, a record without its final newline, another key order, a nested value, a multi-line record. (The
    records without a final newline have no stream: docker's own are pieces of one line, tests/test_diagnose_partial_records.py.)"""
    values = ['say "hi"\n', "C:\\new\\n", "\x1b[31mred\x1b[0m\n", "emoji \U0001F600\n", "no newline", "a\nb\n", "tab\there\n"]
    lines = [_docker(v[:-1] if v.endswith("\n") else v).rstrip("\n") if v.endswith("\n") else
             json.dumps({"log": v, "time": "2025-01-01T00:00:00Z"}, separators=(",", ":")) for v in values]
    lines += ['{"stream":"stderr","log":"later key\\n"}', '{"log":"nested\\n","attrs":{"tag":"x"}}', "plain line"]
    block = ("\n".join(lines) + "\n").encode()
    by_blocks = []
    for part in reader._records("-", 1, block, None):
        by_blocks += [part.text] if isinstance(part, reader.Line) else part[1].decode().split("\n")[:-1]
    by_lines = [x.text for x in reader.lines(["-"], stdin=io.BytesIO(block))]
    assert by_blocks == by_lines
    assert by_lines[:8] == ['say "hi"', "C:\\new\\n", "\x1b[31mred\x1b[0m", "emoji \U0001F600", "no newline", "a", "b",
                            "tab\there"]
    assert by_lines[8:] == ["later key", "nested", "plain line"]


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_a_userbuffers_traceback_in_docker_records_keeps_its_frame(separators):
    """recheck63 AJ3: TE's 'Missing quantizer for input tensor' is the userbuffers path only with a frame in
    ops/fused/userbuffers_{forward,backward}_linear.py (off_path_too); in docker records the frame was quoted
    `File \\"path\\"` and never read, so the failure was reported nowhere. The records are read as their text (78c4dd8,
    985f26e): the traceback is an OVERLAP_PATH_ERROR as in the plain log; the ValueError alone is an other failure."""
    lines = ["Traceback (most recent call last):", '  File "/opt/megatron/pretrain.py", line 10, in <module>', "    main()",
             '  File "/usr/local/lib/python3.12/dist-packages/transformer_engine/pytorch/ops/fused/'
             'userbuffers_forward_linear.py", line 181, in _functional_forward',
             '    raise ValueError("Missing quantizer for input tensor")', "ValueError: Missing quantizer for input tensor"]

    def records(texts):
        return "".join(json.dumps({"log": f"[rank0]: {t}\n", "stream": "stderr", "time": "2025-01-01T00:00:00.0Z"},
                                  separators=separators) + "\n" for t in texts).encode()

    for data in (records(lines), "".join(f"[rank0]: {t}\n" for t in lines).encode()):
        d = _diagnose(data)
        (cause,) = [c for c in d["causes"] if c["overlap_related"]]
        assert cause["id"] == "OVERLAP_PATH_ERROR" and cause["evidence"][0]["file"].endswith("userbuffers_forward_linear.py")
    for data in (records(lines[-1:]), lines[-1].encode() + b"\n"):
        d = _diagnose(data)
        assert not d["causes"] and [o["logged"] for o in d["other"]] == [lines[-1]], d["other"]


_PRETRAIN = ("Pretrain failed on rank=0 with ValueError: Missing quantizer for input tensor. Bridge is aborting "
             "framework-owned distributed resources because peer ranks may be blocked in collectives.")
_UB_TRACEBACK = "\n".join([
    "Traceback (most recent call last):",
    '  File "/opt/Megatron-Bridge/src/megatron/bridge/training/pretrain.py", line 180, in pretrain', "    train(...)",
    '  File "/usr/local/lib/python3.12/dist-packages/transformer_engine/pytorch/ops/fused/userbuffers_forward_linear.py", '
    "line 181, in _functional_forward", '    raise ValueError("Missing quantizer for input tensor")',
    "ValueError: Missing quantizer for input tensor"])
_NAME = "megatron.bridge.training.pretrain"


@pytest.mark.parametrize("logger, record", [
    # python-json-logger's JsonFormatter: the traceback under exc_info (formatException), the text under message
    ("python-json-logger", {"asctime": "2025-01-01 00:00:00,000", "levelname": "ERROR", "name": _NAME,
                            "message": _PRETRAIN, "exc_info": _UB_TRACEBACK}),
    # its stack_info beside (formatStack) and exc_text where no exc_info was formatted
    ("python-json-logger exc_text", {"message": _PRETRAIN, "exc_text": _UB_TRACEBACK, "stack_info": "Stack (most recent call last):"}),
    # structlog's JSONRenderer: the text under event, format_exc_info's traceback under exception
    ("structlog", {"event": _PRETRAIN, "level": "error", "logger": _NAME, "exception": _UB_TRACEBACK + "\n"}),
    # loguru serialize=True: {"text": the formatted line with its traceback, "record": {...}}
    ("loguru", {"text": f"2025-01-01 00:00:00.000 | ERROR    | {_NAME}:pretrain:202 - {_PRETRAIN}\n{_UB_TRACEBACK}\n",
                "record": {"message": _PRETRAIN, "exception": {"type": "ValueError", "value": "Missing quantizer for input "
                                                                 "tensor", "traceback": True}}}),
    # a text that holds its traceback already, the traceback beside it too: read once
    ("both", {"message": f"{_PRETRAIN}\n{_UB_TRACEBACK}", "exc_info": _UB_TRACEBACK}),
])
def test_a_structured_logger_s_traceback_is_read_with_its_record(logger, record):
    """fuzzX X2-4: Bridge's pretrain() logs a failure with logger.exception (the traceback goes with the record); as
    a structured logger writes it, only the first text key was read: no frame, no cause, where the plain log's same
    text is an OVERLAP_PATH_ERROR. The text keys (structlog's event, loguru's text) and the traceback keys beside them
    (reader.TRACE_KEYS) are read as the record's lines."""
    for data in (json.dumps(record) + "\n", f"ERROR:{_NAME}:{_PRETRAIN}\n{_UB_TRACEBACK}\n"):
        d = _diagnose(data.encode())
        (cause,) = [c for c in d["causes"] if c["overlap_related"]]
        assert cause["id"] == "OVERLAP_PATH_ERROR" and cause["evidence"][0]["file"].endswith("userbuffers_forward_linear.py")
        assert cause["evidence"][0]["count"] == 1, cause["evidence"][0]
    got = [x.text for x in reader.lines(["-"], stdin=io.BytesIO(json.dumps(record).encode() + b"\n"))]
    assert got.count("ValueError: Missing quantizer for input tensor") == 1 and got[-1] != "", got
    assert all(x.number == 1 for x in reader.lines(["-"], stdin=io.BytesIO(json.dumps(record).encode() + b"\n")))


def test_a_traceback_key_of_no_text_is_not_read():
    """A traceback key whose value is no string (loguru's record.exception is a mapping; structlog's dict_tracebacks a
    list) or blank adds nothing."""
    for extra in ({"exception": {"type": "ValueError"}}, {"exception": [{"frames": []}]}, {"exc_info": "  "},
                  {"exc_info": None}):
        got = [x.text for x in reader.lines(["-"], stdin=io.BytesIO(json.dumps({"message": "hello", **extra}).encode() + b"\n"))]
        assert got == ["hello"], (extra, got)
