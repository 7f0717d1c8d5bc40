"""diagnose --jobs N: the log files go to N worker processes (the standard library's pool), each scanning whole files;
their scans are merged in the order of the files, so that the answer is the one a single process gives.

A pool costs a process start per worker (a fork on Linux: the catalog already loaded is shared, not read again), so
it is used only where there is work to share: two files or more and MIN_BYTES of logs in all. Standard input is
always read here.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from . import messages
from .scan import Scan, read

MIN_BYTES = 16 << 20  # logs smaller than this in all are read in this process


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def scan_all(catalog: messages.Catalog, sources: list, summary, jobs: int | None = None, stdin=None,
             notes: list | None = None) -> Scan:
    """One Scan of every source, in order; `summary`: a fresh diagnose.summary.Summary, or None."""
    jobs = cores() if jobs is None else jobs
    workers = min(jobs, len(sources))
    if workers < 2 or "-" in sources or _size(sources) < MIN_BYTES:
        scan = Scan(catalog, summary=summary)
        read(scan, sources, stdin=stdin, notes=notes)
        scan.finish()
        return scan
    scan = Scan(catalog, summary=summary)
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    args = [(catalog.requested, source, summary is not None) for source in sources]
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for part, part_notes in pool.map(_scan_one, args):
            part.catalog = catalog
            scan.merge(part)
            if notes is not None:
                notes.extend(part_notes)
    return scan


def _scan_one(args) -> tuple[Scan, list]:
    version, source, with_summary = args
    if with_summary:
        from .summary import Summary

        summary = Summary()
    else:
        summary = None
    scan = Scan(messages.load(version), summary=summary)
    notes: list = []
    read(scan, [source], notes=notes)
    scan.finish()
    scan.catalog = None  # the parent has it
    scan._shapes, scan._memo, scan._repeats, scan._frames, scan._on_path, scan._awaiting = None, {}, {}, {}, {}, {}
    return scan, notes


def _size(sources: list) -> int:
    total = 0
    for source in sources:
        try:
            total += os.stat(source).st_size
        except OSError:
            pass  # the reader says what is wrong with it
    return total
