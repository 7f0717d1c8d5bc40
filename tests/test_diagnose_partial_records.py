"""diagnose joins a line its writer split into partial records, per stream, before matching (issue 31): Kubernetes' CRI
lines (`<time> stderr P <text>` continued by the stream's next records up to the one tagged F: containerd cuts at
max_container_log_line_size, 16 KiB by default; CRI-O's conmon at its read buffer) and docker json-file records of a
line over 16 KiB (every piece but the last without the final "\\n"). The records here are written as those writers
write them (reader.py cites their sources): _cri as containerd's redirectLogs (conmon's time with a numeric offset),
_docker as moby's copier and json-file driver."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import reader

LOGS = Path(__file__).resolve().parent / "data" / "logs"
CONTAINERD_TIME = "2025-03-04T05:06:07.123456789Z"  # time.RFC3339Nano
CONMON_TIME = "2025-03-04T05:06:07.123456789+00:00"  # set_k8s_timestamp: a numeric UTC offset
DOCKER_BUF = 16 * 1024  # moby daemon/logger/copier.go defaultBufSize


def _cut(line: bytes, size: int) -> list[bytes]:
    return [line[i:i + size] for i in range(0, len(line), size)] or [b""]


def _cri(stream: str, line: str, size: int, time: str = CONTAINERD_TIME) -> list[bytes]:
    """One line as CRI records: pieces of at most `size` bytes, tag P but the last (F)."""
    pieces = _cut(line.encode(), size)
    return [f"{time} {stream} {'P' if i < len(pieces) - 1 else 'F'} ".encode() + p + b"\n" for i, p in enumerate(pieces)]


def _docker(stream: str, line: str, size: int = DOCKER_BUF, end: bool = True) -> list[bytes]:
    """One line as json-file records: pieces of `size` bytes, the final newline in the last one's "log" only (none
    where the stream ended without one: `end` False)."""
    pieces = _cut(line.encode(), size)
    out = []
    for i, p in enumerate(pieces):
        text = p.decode() + ("\n" if end and i == len(pieces) - 1 else "")
        out.append(json.dumps({"log": text, "stream": stream, "time": "2025-03-04T05:06:07.123456789Z"},
                              separators=(",", ":")).encode() + b"\n")
    return out


def _interleave(err: list[list[bytes]], out: list[list[bytes]]) -> bytes:
    """The records of stderr's lines with stdout's between each two of them (two goroutines, one file)."""
    err_records = [r for line in err for r in line]
    out_records = [r for line in out for r in line]
    data = []
    for i, r in enumerate(err_records):
        data.append(r)
        if i < len(out_records):
            data.append(out_records[i])
    return b"".join(data + out_records[len(err_records):])


def _both(data: bytes) -> list[tuple[int, str | None, str]]:
    """(number, rank, text) of every line, by the line reader; the block reader (what diagnose reads by) gives the
    same."""
    by_lines = [(x.number, x.rank, x.text) for x in reader.lines(["-"], stdin=io.BytesIO(data))]
    by_blocks = []
    for part in reader.blocks("-", stdin=io.BytesIO(data)):
        if isinstance(part, reader.Line):
            by_blocks.append((part.number, part.rank, part.text))
            continue
        number, block = part
        texts = block.decode("utf-8", "replace").split("\n")
        for i, text in enumerate(texts[:-1] if block.endswith(b"\n") else texts):
            rank, text = reader.split_prefix(text)
            by_blocks.append((number + i, rank, text))
    assert sorted(by_blocks) == sorted(by_lines)
    return by_lines


def _causes(data: bytes) -> list:
    d = api.diagnose(["-"], stdin=io.BytesIO(data)).to_dict()
    return [(c["id"], c["knobs"], [(e["message_id"], e["logged"], e["ranks"], e["count"]) for e in c["evidence"]])
            for c in d["causes"]]


REAL = ["upstream/mlm1129_param_grad_none_overlap_grad_reduce.log", "upstream/te994_ub_init_tp_smaller_than_world.log",
        "bridge-0.6.2/tp_overlap_no_sequence_parallel.log",
        "upstream/mlm935_reduce_scatter_timeout_distributed_optimizer.log"]


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("size,time", [(24, CONTAINERD_TIME), (61, CONMON_TIME)])
def test_a_real_log_split_over_cri_partial_records_gives_the_plain_answer(name, size, time):
    """Every line of a real log on stderr, cut into P records of `size` bytes (containerd takes any positive
    max_container_log_line_size), a piece of a stdout line between each two: the plain log's causes, evidence and
    ranks (Megatron-Core's assert, TE's userbuffers message, Bridge's warning behind torchrun's [default0]:, the
    watchdog's timeout); before the join each piece was a line and the assert was read in pieces."""
    text = (LOGS / name).read_text(encoding="utf-8")
    lines = text.splitlines()
    err = [_cri("stderr", x, size, time) for x in lines]
    out = [_cri("stdout", f"progress {i} of {len(lines)}: all is well so far", 10, time) for i in range(len(lines))]
    data = _interleave(err, out)
    plain = _causes(text.encode())
    assert plain and _causes(data) == plain
    got = [t for _, _, t in _both(data) if not t.startswith("progress ")]
    assert got == [reader.split_prefix(x)[1] for x in lines]


def test_a_megatron_assert_split_over_p_records_is_numbered_as_its_first_record():
    """Megatron-Core's assert from a real report, cut into three P records and an F between stdout records: one
    line, numbered as its first record's line, its rank from the [rank3]: in the first piece."""
    line = "[rank3]: AssertionError: param.grad being None is not safe when overlap_grad_reduce is True"
    data = b"".join([*_cri("stdout", "iteration 10 | lm loss 2.31", 64), *_cri("stderr", line, 25)[:2],
                     *_cri("stdout", "iteration 11 | lm loss 2.30", 64), *_cri("stderr", line, 25)[2:]])
    assert _both(data) == [(1, None, "iteration 10 | lm loss 2.31"), (4, None, "iteration 11 | lm loss 2.30"),
                           (2, "3", line[8:])]
    d = api.diagnose(["-"], stdin=io.BytesIO(data)).to_dict()
    (cause,) = d["causes"]
    ev = cause["evidence"][0]
    assert cause["id"] == "GRAD_NONE_WITH_OVERLAP_GRAD_REDUCE" and ev["ranks"] == ["3"] and ev["first_seen"]["line"] == 2


def _long_assert(split_in: str) -> str:
    """Bridge's CommOverlapConfig assert (bridge.assert.4286c9923b) with its model_cfg field filled past 16 KiB, the
    piece boundary at DOCKER_BUF falling inside `split_in` of the message's words after the field."""
    head = "[rank0]: AssertionError: model_cfg: "
    tail = " does not have overlap_moe_expert_parallel_comm"
    fields = "GPTModelProvider(" + ", ".join(f"field_{i}={i}" for i in range(2000))
    filler = DOCKER_BUF - len(head) - (tail.index(split_in) + len(split_in) // 2)
    line = head + fields[:filler - 1] + ")" + tail
    assert split_in in line[DOCKER_BUF - len(split_in):DOCKER_BUF + len(split_in)] and len(line.encode()) > DOCKER_BUF
    return line


@pytest.mark.parametrize("write", ["docker", "containerd"])
def test_a_line_over_16_kib_split_by_docker_or_containerd(write):
    """A line of over 16 KiB cut at 16 KiB, the cut inside the message's words (docker json-file: a piece without its
    final newline, then the rest; containerd's default max_container_log_line_size: P, then F), a stdout record
    between: the assert is read whole (before: its first piece matched nothing, its second was an other text)."""
    line = _long_assert("overlap_moe_expert")
    records = _docker("stderr", line) if write == "docker" else _cri("stderr", line, DOCKER_BUF)
    assert len(records) == 2
    between = (_docker if write == "docker" else _cri)("stdout", "saving checkpoint", 64)
    data = b"".join([records[0], *between, records[1]])
    texts = _both(data)
    assert texts == [(2, None, "saving checkpoint"), (1, "0", line[8:])]
    d = api.diagnose(["-"], stdin=io.BytesIO(data)).to_dict()
    (cause,) = [c for c in d["causes"] if c["overlap_related"]]
    ev = cause["evidence"][0]
    assert ev["message_id"] == "bridge.assert.4286c9923b" and ev["ranks"] == ["0"] and ev["first_seen"]["line"] == 1
    assert not ev["truncated"]  # (before: matched from its first piece's head alone, "truncated")
    assert _causes(data) == _causes(line.encode() + b"\n")


def test_stdout_and_stderr_are_joined_apart():
    """Interleaved streams: each run is its own stream's, in both formats; a stream's F with no run under way is a
    line as it is; a piece of one stream never ends the other's run."""
    for fmt in (_cri, _docker):
        a, b = "A" * 24 + " stderr line", "B" * 24 + " stdout line"  # three pieces each
        ra, rb = fmt("stderr", a, 12), fmt("stdout", b, 12)
        data = b"".join([ra[0], rb[0], ra[1], rb[1], rb[2], *fmt("stdout", "whole", 64), ra[2]])
        assert _both(data) == [(2, None, b), (6, None, "whole"), (1, None, a)], fmt


@pytest.mark.parametrize("fmt", [_cri, _docker])
def test_a_run_with_no_end_is_read_at_the_end(fmt):
    """A stream that ended without a newline (the container exited mid-line): its pieces are read at the end as one
    line; a short one by itself too."""
    line = "[rank1]: AssertionError: param.grad being None is not safe when overlap_grad_reduce is True"
    if fmt is _cri:
        pieces = [r.replace(b" F ", b" P ", 1) if i == 3 else r for i, r in enumerate(_cri("stderr", line, 23))]
    else:
        pieces = _docker("stderr", line, 23, end=False)
    data = b"".join([pieces[0], *fmt("stdout", "still training", 64), *pieces[1:]])
    assert _both(data) == [(2, None, "still training"), (1, "1", line[8:])]
    (cause,) = _causes(data)
    assert cause[0] == "GRAD_NONE_WITH_OVERLAP_GRAD_REDUCE" and cause[2][0][2] == ["1"]


@pytest.mark.parametrize("fmt", ["cri", "docker"])
def test_hostile_pieces_that_never_end_are_bounded(fmt):
    """A stream of partial records and no end (12 MiB): one line kept to reader.MAX_LINE bytes at each end, the
    bytes left out said where they were, the reader's memory bounded; an assert at its start is still found, and the
    other stream's lines go on being read."""
    line = "[rank2]: AssertionError: param.grad being None is not safe when overlap_grad_reduce is True "
    junk = "0123456789abcdef" * 256  # 4 KiB a record
    n = 3 * 1024
    if fmt == "cri":
        def record(stream, text, tag="P"):
            return f"{CONTAINERD_TIME} {stream} {tag} {text}\n".encode()
    else:
        def record(stream, text, tag="P"):
            value = text + ("\n" if tag == "F" else "")
            return json.dumps({"log": value, "stream": stream, "time": "2025-03-04T05:06:07Z"}).replace(", ", ",").encode() + b"\n"
    parts = [record("stderr", line)]
    for i in range(n):
        parts.append(record("stderr", junk))
        if i % 1024 == 0:
            parts.append(record("stdout", f"step {i}", "F"))
    data = b"".join(parts)
    assert len(data) > 12 * 2**20
    tracemalloc.start()
    try:
        got = [(x.number, x.rank, x.text, x.cut) for x in reader.lines(["-"], stdin=io.BytesIO(data))]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak  # (the data, made before, is not counted; a join without the cap holds all 12 MiB)
    assert [g[2] for g in got[:3]] == ["step 0", "step 1024", "step 2048"]
    number, rank, text, cut = got[3]
    dropped = len(line) + n * len(junk) - 2 * reader.MAX_LINE
    assert (number, rank, cut) == (1, "2", dropped)
    assert text.startswith(line[8:]) and reader.CUT.format(n=dropped) in text
    assert len(text) == 2 * reader.MAX_LINE - 8 + len(reader.CUT.format(n=dropped))
    (cause,) = _causes(data)
    assert cause[0] == "GRAD_NONE_WITH_OVERLAP_GRAD_REDUCE" and cause[2][0][2] == ["2"]


def test_mixed_with_plain_lines():
    """Plain lines between CRI records (a launcher's own output appended to the file, a kubelet line) stay as they
    are, and a run goes on across them; a plain log that quotes a CRI record's words is read as it is; docker records
    of no stream (not docker's: a structured logger's) are never joined."""
    line = "[rank0]: AssertionError: param.grad being None is not safe when overlap_grad_reduce is True"
    recs = _cri("stderr", line, 30)
    data = b"".join([b"+ torchrun --nproc-per-node 8 pretrain.py\n", recs[0], b"plain line between\n", *recs[1:],
                     *_cri("stdout", "done", 64)])
    assert _both(data) == [(1, None, "+ torchrun --nproc-per-node 8 pretrain.py"), (3, None, "plain line between"),
                           (2, "0", line[8:]), (7, None, "done")]
    assert _causes(data) == _causes(line.encode() + b"\n")
    quoted = (f"grep found: {CONTAINERD_TIME} stdout P half a line\nnext\n"
              f"{CONTAINERD_TIME} stderr WARNING a plain log's own time and words (no P or F tag)\n").encode()
    assert [t for _, _, t in _both(quoted)] == quoted.decode().splitlines()
    structured = (json.dumps({"message": "first", "level": "info"}) + "\n" + json.dumps({"log": "no end"}) + "\n"
                  + json.dumps({"message": "second"}) + "\n").encode()
    assert [t for _, _, t in _both(structured)] == ["first", "no end", "second"]
