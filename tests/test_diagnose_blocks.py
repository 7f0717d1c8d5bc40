"""diagnose's prefilter (diagnose/shapes.py) and its workers (diagnose/parallel.py) give the answer of reading every
line in one process: the scan of every log of the test data, of every corpus text, of those lines with their digits
changed at random, in blocks of a few bytes (lines and summary blocks across block ends), and merged from workers."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from mbridge_overlap import api, pool
from mbridge_overlap.diagnose import messages, parallel, reader, shapes
from mbridge_overlap.diagnose.scan import Scan, read
from mbridge_overlap.diagnose.summary import Summary

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted(p for p in (ROOT / "tests" / "data" / "logs").rglob("*") if p.is_file() and p.suffix != ".yaml")
CORPUS = yaml.safe_load((ROOT / "tests" / "data" / "diagnose_corpus" / "corpus.yaml").read_text())["entries"]


def _every_line(sources: list) -> Scan:
    """The reference: each line fed in full (Scan.feed), each source a log of its own."""
    scan = Scan(messages.load("0.6.2"), summary=Summary())
    for source in sources:
        if not scan.summary.done:
            scan.summary = Summary()
        for line in reader.lines([source]):
            scan.feed(line)
        scan.finish(source)
    scan.finish()
    return scan


def _by_blocks(sources: list) -> Scan:
    scan = Scan(messages.load("0.6.2"), summary=Summary())
    read(scan, sources)
    scan.finish()
    return scan


def state(scan: Scan) -> dict:
    groups = [(gid, g.entry.id, g.findings, g.text, g.source, g.number, g.truncated, g.count, sorted(g.ranks),
               g.more_ranks, g.frame, g.groups, g.approximate) for gid, g in scan.groups.items()]
    s = scan.summary
    return {"lines": scan.lines, "groups": groups, "facts": scan.facts,
            "iterations": {k: list(v) for k, v in scan.iterations.items()},
            "sources": {k: (v["lines"], sorted(v["ranks"])) for k, v in scan.sources.items()},
            "frames": {k: v[:4] for k, v in scan._frames.items()},
            "summary": (s.done, repr(s.sections), s.blocks, s.truncated) if s is not None else None}


def _texts(tmp_path: Path) -> list:
    out = []
    for i, e in enumerate(CORPUS):
        p = tmp_path / f"corpus{i}.log"
        p.write_text(e["quote"])
        out.append(str(p))
    return out


def test_blocks_read_the_test_logs_as_every_line(tmp_path):
    sources = [str(p) for p in LOGS] + _texts(tmp_path)
    assert len(sources) > 150
    for source in sources:
        assert state(_by_blocks([source])) == state(_every_line([source])), source


@pytest.mark.parametrize("chunk, block", [(97, 1 << 18), (4096, 61)])
def test_blocks_across_block_ends(tmp_path, monkeypatch, chunk, block):
    """Blocks of a few bytes (reads of 97 bytes; or reads of 4 KiB cut into blocks of about 61 bytes, lines longer
    than that whole): lines, summary blocks and tracebacks cut across them; a line longer than 2 x MAX_LINE leaves the
    blocks for the line reader."""
    monkeypatch.setattr(reader, "CHUNK", chunk)
    monkeypatch.setattr(reader, "BLOCK", block)
    monkeypatch.setattr(reader, "MAX_LINE", 300)
    long = tmp_path / "long.log"
    long.write_bytes(b"x" * 5000 + b" AssertionError: Cannot specify both num_buckets and bucket_size\n"
                     + (LOGS[0].read_bytes()))
    # a frame's code line comes within CODE_WITHIN lines of it, other ranks' lines between; past that it is not its code
    late = tmp_path / "late.log"
    noise = "".join(f"[rank{i % 8}]: step {i}\n" for i in range(300))
    frame = '[rank1]:   File "/x/megatron/core/distributed/param_and_grad_buffer.py", line 9, in start_grad_sync\n'
    late.write_text(frame + noise[:2000] + "[rank1]:     start(x)\n[rank1]: AssertionError\n"
                    + frame + noise + "[rank1]:     start(x)\n")
    # a message wrapped over two lines (an exception line and its continuation) read as one, across block ends
    wrapped = tmp_path / "wrapped.log"
    pair = ("[rank2]: RuntimeError: Sizes of tensors must match except in dimension 2.\n"
            "[rank2]: Expected size 3904 but got size 1952 for tensor number 1 in the list.\n")
    wrapped.write_text("".join(noise[:k] + pair for k in (0, 61, 97, 130, 1000)))
    assert "SEQUENCE_SHARD_SIZE_MISMATCH" in {f for g in _by_blocks([str(wrapped)]).groups.values() for f in g.findings}
    sources = [str(p) for p in LOGS if p.stat().st_size < 200_000] + [str(long), str(late), str(wrapped)]
    summaries = 0
    for source in sources:
        got = state(_by_blocks([source]))
        assert got == state(_every_line([source])), source
        summaries += got["summary"][0]
    assert summaries >= 3  # configuration summary blocks read across block ends
    assert state(_by_blocks(sources)) == state(_every_line(sources))


def test_lines_with_other_digits_are_read_alike(tmp_path):
    """A shape decides for every line of it: the same logs with their digits changed at random (ranks, sizes, times,
    versions) read the same by blocks as line by line."""
    rng = random.Random(7)
    table = [str.maketrans("0123456789", "".join(rng.sample("0123456789", 10))) for _ in range(5)]
    sources = []
    for i, p in enumerate(LOGS):
        text = p.read_bytes().decode("utf-8", "replace")
        lines = text.split("\n")
        p2 = tmp_path / f"m{i}.log"
        p2.write_text("\n".join(line.translate(rng.choice(table)) if rng.random() < 0.7 else line for line in lines))
        sources.append(str(p2))
    for source in sources:
        assert state(_by_blocks([source])) == state(_every_line([source])), source


def test_cold_shapes_are_the_bulk_of_a_training_log():
    """The prefilter does its work: of a real Bridge log's lines, iteration records and NCCL INFO lines are cold
    (never decoded), and an error line is hot."""
    cat = messages.load("0.6.2")
    s = shapes.Shapes(cat, "Configuration Summary (Non-Default Values vs Megatron Core)")
    iteration = (b" [2026-12-01 12:00:01] iteration        1/  500000 | consumed samples:          512 | elapsed time per"
                 b" iteration (ms): 1503.7 | throughput per GPU (TFLOP/s/GPU): 412.3 | learning rate: 2.999998E-04 |"
                 b" global batch size:   512 | lm loss: 2.510000E+00 | loss scale: 1.0 | grad norm: 0.001 |")
    nccl = b"node-000:41000:41007 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read"
    error = b"[rank3]: AssertionError: Cannot specify both num_buckets and bucket_size"
    got = s.of({x.translate(shapes.MASK) for x in (iteration, nccl, error)})
    it = got[iteration.translate(shapes.MASK)]
    assert not it.hot and iteration[it.iteration[0]:it.iteration[1]] == b"1503.7"
    assert got[nccl.translate(shapes.MASK)] is shapes.COLD
    err = got[error.translate(shapes.MASK)]
    assert err.hot and shapes.rank_of(error, err.rank, None) == "3"


@pytest.mark.parametrize("pattern, blind", [
    (r"Sending process (\d+) closing signal (SIG\w+)", True),
    (r"NCCL WARN .* rc=[1-9]", False),
    (r"code 137", False),
    (r"(?!\d)foo[^0-9]", True),
    (r"foo[^5]", False),
])
def test_a_native_regex_is_run_on_shapes_only_when_it_cannot_tell_digits_apart(pattern, blind):
    assert shapes._digit_blind(pattern) is blind


def test_workers_answer_as_one_process(tmp_path, monkeypatch):
    """diagnose --jobs 2 over a folder of logs gives the one-process answer; logs of less than MIN_BYTES in all are
    read in this process."""
    monkeypatch.setattr(parallel, "cores", lambda: 4)  # the workers are used whatever this machine has
    folder = tmp_path / "logs"
    folder.mkdir()
    for i, p in enumerate(LOGS[:40]):
        (folder / f"rank{i}.log").write_bytes(p.read_bytes())
    one = api.diagnose([str(folder)], jobs=1).to_dict()
    total = sum(p.stat().st_size for p in folder.iterdir())
    monkeypatch.setattr(parallel, "MIN_BYTES", total + 1)  # too little to share: one process
    pools = []
    map_ordered = pool.map_ordered

    def recorded(func, items, jobs, costs=None):
        pools.append(jobs)
        return map_ordered(func, items, jobs, costs)

    monkeypatch.setattr(pool, "map_ordered", recorded)
    assert api.diagnose([str(folder)], jobs=2).to_dict() == one and pools == []
    monkeypatch.setattr(parallel, "MIN_BYTES", total)
    two = api.diagnose([str(folder)], jobs=2).to_dict()
    assert pools == [2] * -(-40 // (parallel.BATCH * 2))  # a pool for each BATCH x 2 files
    assert two == one
    monkeypatch.setattr(parallel, "BATCH", 4)  # scans merged batch by batch: the same answer
    pools.clear()
    assert api.diagnose([str(folder)], jobs=2).to_dict() == one and pools == [2] * 5
    assert one["causes"]
    # fuzzH H7: never more workers than cores (--jobs 1024 on 2 cores forked 1,024 processes), and the answer says so
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    pools.clear()
    many = api.diagnose([str(folder)], jobs=64).to_dict()
    assert set(pools) == {2} and any("--jobs 64: 2 worker processes" in n for n in many["notes"])
    assert {k: v for k, v in many.items() if k != "notes"} == {k: v for k, v in one.items() if k != "notes"}


def test_batches_cover_every_file_in_order_and_evenly():
    """The files go to the pool in batches of at most `most`, in order, none shorter than another by more than one
    file: a short last batch would run on fewer workers than there are."""
    for count in (1, 2, 63, 64, 65, 129, 1000):
        for most in (1, 2, 8, 64):
            got = parallel._batches(count, most)
            assert [s for s, _ in got] == [sum(n for _, n in got[:i]) for i in range(len(got))]
            assert sum(n for _, n in got) == count and max(n for _, n in got) <= most
            assert max(n for _, n in got) - min(n for _, n in got) <= 1
            assert len(got) == -(-count // most)


def test_workers_keep_the_same_other_failures_as_one_process(tmp_path, monkeypatch):
    """Exceptions nothing explains are kept up to MAX_UNEXPLAINED texts: merged from the workers' files, the same
    first ones as one process keeps (each file's scan keeps its own first ones)."""
    from mbridge_overlap.diagnose.scan import MAX_UNEXPLAINED

    monkeypatch.setattr(parallel, "cores", lambda: 4)

    folder = tmp_path / "logs"
    folder.mkdir()
    for i in range(12):
        (folder / f"rank{i}.log").write_text("".join(f"RuntimeError: failure {chr(97 + i)} {chr(97 + k)}\n" for k in range(10)))
    one = api.diagnose([str(folder)], jobs=1).to_dict()
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    two = api.diagnose([str(folder)], jobs=2).to_dict()
    assert len(one["other"]) == MAX_UNEXPLAINED and two == one
