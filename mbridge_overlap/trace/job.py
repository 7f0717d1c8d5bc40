"""The traces of one job: find the files, pick ranks, check they belong together, analyse each rank."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from collections.abc import Iterable

from ..errors import UsageError
from ..safeio import esc
from . import analysis, kineto, reader
from .report import RankReport, TraceReport

PathLike = "str | Path"  # for annotations only (typing's import costs a start 2.4 ms)
SUFFIXES = (".json", ".json.gz")
MAX_JOBS = 8  # worker processes at most; each holds one rank's trace data


def default_jobs(ranks: int) -> int:
    """One worker process per rank, at most one per core this process may use and MAX_JOBS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(ranks, cores, MAX_JOBS))


def trace_files(paths: Iterable[PathLike]) -> list[Path]:
    """Files as given, and the .json / .json.gz files directly inside any directory given (Bridge writes
    <tensorboard_dir>/../torch_profile/rank-<R>.json.gz)."""
    files: list[Path] = []
    for p in map(Path, paths):
        try:
            if p.is_dir():
                found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(SUFFIXES))
                if not found:
                    raise UsageError(f"{esc(p)}: no .json or .json.gz trace files in this directory")
                files.extend(found)
            elif p.is_file():
                files.append(p)
            elif p.exists():  # reading a FIFO or a device could block or never end
                raise UsageError(f"{esc(p)}: not a regular file (a FIFO, device or socket), so not a trace file")
            else:
                if p.is_symlink():
                    os.stat(p)  # a loop or a dangling link: the OSError below says which
                raise UsageError(f"{esc(p)}: no such file or directory")
        except OSError as exc:
            raise UsageError(f"{esc(p)}: cannot read ({esc(exc.strerror or exc)})") from None
    if not files:
        raise UsageError("no trace files given")
    return list(dict.fromkeys(files))


def _identity(path: Path) -> tuple[str, int | None, int | None]:
    """(file, rank, world size) from the header, where Kineto writes distributedInfo; cheap."""
    trace = kineto.RankTrace(path, meta=kineto.read_header(path))
    return str(path), trace.rank, trace.world_size


def _analyze_file(path: Path, allow_partial: bool, layout: dict | None = None) -> RankReport:
    return analysis.analyze(kineto.load(path, allow_partial), layout)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _analyze_all(files: list[Path], allow_partial: bool, jobs: int | None, layout: dict | None = None) -> list[RankReport]:
    """Each file's report, in order; on worker processes when jobs > 1 (the same reports and errors as serially)."""
    jobs = default_jobs(len(files)) if jobs is None else jobs
    sizes = [_size(f) for f in files]
    if jobs > 1 and len(files) > 1 and sum(sizes) > reader.FAST_AFTER // 8:  # else each worker imports it again
        reader.use_fast_now(kineto.EVENT_KEYS)
    run = partial(_analyze_file, allow_partial=allow_partial, layout=layout)
    if jobs <= 1 or len(files) <= 1:
        return [run(f) for f in files]  # pool.map_ordered's serial case, without importing it (5 ms a start)
    from .. import pool

    try:
        return pool.map_ordered(run, files, jobs, sizes)
    except pool.WorkerDied as exc:
        code = exc.exitcode
        how = "exit status unknown" if code is None else f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        raise UsageError(
            f"{esc(exc.item)}: the process analysing it died ({how}; out of memory?); analyse fewer ranks at once "
            "(--rank) or pass --jobs 1"
        ) from None


def check_one_job(identities: list[tuple[str, int | None, int | None]]) -> None:
    """(file, rank, world size) of each trace: different world sizes, or one rank twice, mean the traces are not
    the ranks of one job."""
    sizes: dict[int, str] = {}
    ranks: dict[int, str] = {}
    for file, rank, size in identities:
        if size is not None:
            if sizes and size not in sizes:
                other_size, other = next(iter(sizes.items()))
                raise UsageError(
                    f"{esc(file)}: rank {rank} of a {size}-rank job, but {esc(other)} is from a {other_size}-rank job: "
                    "traces of two different jobs; analyse one job at a time"
                )
            sizes.setdefault(size, file)
        if rank is None:
            continue
        if rank in ranks:
            raise UsageError(
                f"{esc(file)}: rank {rank} again (also in {esc(ranks[rank])}): traces of two different jobs "
                "or two captures; analyse one job's capture at a time"
            )
        ranks[rank] = file
        if size is not None and rank >= size:
            raise UsageError(f"{esc(file)}: rank {rank} but world size {size}: the trace contradicts itself")


def analyze(paths: PathLike | Iterable[PathLike], ranks: Iterable[int] | None = None,
            allow_partial: bool = False, jobs: int | None = None, layout: tuple[int, dict] | None = None) -> TraceReport:
    """Analyse the traces of one job: files, or directories of them, one file per rank; `jobs` worker processes
    (default: default_jobs; 1: one file after another in this process). layout: (world size, the run's groups by
    their ranks), used where every trace records that world size."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = trace_files(paths)
    identities = [_identity(f) for f in files]
    if ranks is not None:
        wanted = set(ranks)
        missing = wanted - {rank for _f, rank, _s in identities}
        if missing:
            have = sorted({rank for _f, rank, _s in identities if rank is not None})
            raise UsageError(
                f"--rank {','.join(map(str, sorted(missing)))}: not in the traces given (ranks there: "
                f"{', '.join(map(str, have)) or 'none recorded'})"
            )
        identities = [i for i in identities if i[1] in wanted]
    check_one_job(identities)
    sizes = {size for _f, _r, size in identities}
    groups = layout[1] if layout and sizes == {layout[0]} else None  # another job's layout places nothing
    reports = _analyze_all([Path(f) for f, _r, _s in identities], allow_partial, jobs, groups)
    check_one_job([(r.file, r.rank, r.world_size) for r in reports])  # distributedInfo may follow the events
    reports.sort(key=lambda r: (r.rank is None, r.rank or 0, r.file))
    return TraceReport(reports, notes=job_notes(reports))


def job_notes(reports: list[RankReport]) -> list[str]:
    """What makes several files doubtful as one capture of one job, though each reads well: a file without the
    distributedInfo its neighbours have (whose rank and job are unknown), and ranks that recorded different
    ProfilerSteps (two captures, or a profiler started at different steps)."""
    if len(reports) < 2:
        return []
    notes = []
    known = [r for r in reports if r.rank is not None]
    unknown = [r for r in reports if r.rank is None]
    if known and unknown:
        notes.append(f"{', '.join(r.file for r in unknown)}: no distributedInfo, so neither its rank nor its job is known, "
                     f"beside {len(known)} trace(s) that record theirs; it may not belong to this job (--rank picks ranks)")
    steps = {r.file: tuple(s.step for s in r.steps) for r in reports if r.steps}
    if len(set(steps.values())) > 1:
        shown = "; ".join(f"{f}: {_step_range(s)}" for f, s in list(steps.items())[:4])
        notes.append(f"the ranks recorded different ProfilerSteps ({shown}{'; ...' if len(steps) > 4 else ''}): not one capture; "
                     "their figures are not of the same iterations")
    return notes


def _step_range(steps: tuple) -> str:
    return f"ProfilerStep#{steps[0]}" if len(steps) == 1 else f"ProfilerStep#{steps[0]}..#{steps[-1]}"
