"""diagnose --jobs N: the log files go to N worker processes (mbridge_overlap.pool, the one trace uses: forked, the
largest file first, none left behind by a time-out or Ctrl-C), each scanning whole files; their scans are merged in
the order of the files, so that the answer is the one a single process gives.

A pool costs a process start per worker (a fork: the catalog already loaded is shared, not read again), so it is used
only where there is work to share: two files or more and MIN_BYTES of logs in all. Standard input is always read
here.
"""

from __future__ import annotations

import os
from functools import partial

from ..errors import UsageError
from ..safeio import esc
from . import messages, shapes
from .scan import Scan, read

MIN_BYTES = 16 << 20  # logs smaller than this in all are read in this process
BATCH = 32  # files a worker takes per pool: the scans of BATCH x jobs files (each up to 0.8 MB) are held, then merged


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def scan_all(catalog: messages.Catalog, sources: list, summary, jobs: int | None = None, stdin=None,
             notes: list | None = None) -> Scan:
    """One Scan of every source, in order; `summary`: a fresh diagnose.summary.Summary, or None. At most one worker
    per core this process may use: more only add processes and memory (fuzzH H7: --jobs 1024 on 2 cores took 8 GB)."""
    available = cores()
    if jobs is not None and jobs > available and notes is not None:
        notes.append(f"--jobs {jobs}: {available} worker processes, one per core this process may use")
    jobs = available if jobs is None else min(jobs, available)
    sizes = [_size(s) for s in sources]
    if jobs < 2 or len(sources) < 2 or "-" in sources or sum(sizes) < MIN_BYTES:
        scan = Scan(catalog, summary=summary)
        read(scan, sources, stdin=stdin, notes=notes)
        scan.finish()
        return scan
    from .. import pool

    shapes.for_catalog(catalog, shapes.title_of(summary))  # made once, before the workers are forked
    scan = Scan(catalog, summary=summary)
    for start, step in _batches(len(sources), BATCH * jobs):
        batch = sources[start:start + step]
        try:
            parts = pool.map_ordered(partial(_scan_one, catalog, summary is not None), batch, jobs, sizes[start:start + step])
        except pool.WorkerDied as exc:
            code = exc.exitcode
            how = "exit status unknown" if code is None else f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            raise UsageError(f"{esc(exc.item)}: the process reading it died ({how}; out of memory?); pass --jobs 1") from None
        for part, part_notes in parts:
            part.catalog = catalog
            scan.merge(part)
            if notes is not None:
                notes.extend(part_notes)
    return scan


def _batches(count: int, most: int) -> list[tuple[int, int]]:
    """(start, length) of the batches `count` files are read in: at most `most` files each (their scans are held at
    once: memory stays bounded), as equal as they can be, so that no short last batch runs on fewer workers than
    there are (65 files on 2 workers: 33 and 32, not 64 and 1)."""
    n = -(-count // most)
    sizes = [count // n + (i < count % n) for i in range(n)]
    return [(sum(sizes[:i]), size) for i, size in enumerate(sizes)]


def _scan_one(catalog: messages.Catalog, with_summary: bool, source: str) -> tuple[Scan, list]:
    """A worker's scan of one file, without what the parent has (the catalog) or what only reading needed."""
    if with_summary:
        from .summary import Summary

        summary = Summary()
    else:
        summary = None
    scan = Scan(catalog, summary=summary)
    notes: list = []
    read(scan, [source], notes=notes)
    scan.finish()
    scan.catalog = None
    scan._shapes, scan._memo, scan._repeats, scan._frames, scan._on_path, scan._awaiting = None, {}, {}, {}, {}, {}
    return scan, notes


def _size(source: str) -> int:
    try:
        return os.stat(source).st_size
    except OSError:  # standard input, or a file the reader will say is wrong
        return 0
