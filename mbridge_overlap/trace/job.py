"""The traces of one job: find the files, pick ranks, check they belong together, analyse each rank."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Union

from ..errors import UsageError
from . import analysis, kineto
from .escape import shown
from .report import RankReport, TraceReport

PathLike = Union[str, Path]
SUFFIXES = (".json", ".json.gz")
MAX_WORKERS = 4  # each worker holds one rank's trace data


def trace_files(paths: Iterable[PathLike]) -> list[Path]:
    """Files as given, and the .json / .json.gz files directly inside any directory given (Bridge writes
    <tensorboard_dir>/../torch_profile/rank-<R>.json.gz)."""
    files: list[Path] = []
    for p in map(Path, paths):
        try:
            if p.is_dir():
                found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(SUFFIXES))
                if not found:
                    raise UsageError(f"{shown(p)}: no .json or .json.gz trace files in this directory")
                files.extend(found)
            elif p.is_file():
                files.append(p)
            elif p.exists():  # reading a FIFO or a device could block or never end
                raise UsageError(f"{shown(p)}: not a regular file (a FIFO, device or socket), so not a trace file")
            else:
                raise UsageError(f"{shown(p)}: no such file or directory")
        except OSError as exc:
            raise UsageError(f"{shown(p)}: cannot read ({shown(exc.strerror or exc)})") from None
    if not files:
        raise UsageError("no trace files given")
    return list(dict.fromkeys(files))


def _identity(path: Path) -> tuple[str, int | None, int | None]:
    """(file, rank, world size) from the header, where Kineto writes distributedInfo; cheap."""
    trace = kineto.RankTrace(path, meta=kineto.read_header(path))
    return str(path), trace.rank, trace.world_size


def _analyze_file(path: Path, allow_partial: bool) -> RankReport:
    return analysis.analyze(kineto.load(path, allow_partial))


def _analyze_all(files: list[Path], allow_partial: bool) -> list[RankReport]:
    workers = min(len(files), os.cpu_count() or 1, MAX_WORKERS)
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        from concurrent.futures.process import BrokenProcessPool

        try:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                return list(pool.map(_analyze_file, files, [allow_partial] * len(files)))
        except BrokenProcessPool:
            raise UsageError(
                f"a process analysing one of {len(files)} traces died (out of memory?); pass fewer with --rank"
            ) from None
        except (OSError, NotImplementedError, PermissionError):
            pass  # no process pool here (sandbox): one after another
    return [_analyze_file(f, allow_partial) for f in files]


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
                    f"{shown(file)}: rank {rank} of a {size}-rank job, but {shown(other)} is from a {other_size}-rank job: "
                    "traces of two different jobs; analyse one job at a time"
                )
            sizes.setdefault(size, file)
        if rank is None:
            continue
        if rank in ranks:
            raise UsageError(
                f"{shown(file)}: rank {rank} again (also in {shown(ranks[rank])}): traces of two different jobs "
                "or two captures; analyse one job's capture at a time"
            )
        ranks[rank] = file
        if size is not None and rank >= size:
            raise UsageError(f"{shown(file)}: rank {rank} but world size {size}: the trace contradicts itself")


def analyze(paths: PathLike | Iterable[PathLike], ranks: Iterable[int] | None = None,
            allow_partial: bool = False) -> TraceReport:
    """Analyse the traces of one job: files, or directories of them, one file per rank."""
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
    reports = _analyze_all([Path(f) for f, _r, _s in identities], allow_partial)
    check_one_job([(r.file, r.rank, r.world_size) for r in reports])  # distributedInfo may follow the events
    reports.sort(key=lambda r: (r.rank is None, r.rank or 0, r.file))
    return TraceReport(reports)
