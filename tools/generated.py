"""The tail every generator ends with: under --check, compare what it generated with the committed file(s), print a
verdict and return 1 when one differs; else write them. Standard library only (gen_messages.py runs with a bare
python3 too); the tools import it as `from tools import generated`, with the repository root on sys.path, as they
import each other (gen_all.py loads the generators by file, so each puts the root there itself).

    current(path, text)                      path holds text exactly (UTF-8); a missing file does not
    check_or_write(path, text, check, ...)   one file: the verdict and 0/1 under check, else write it: 0
    check_or_write_all(files, check, ...)    several: the stale ones under check (none written), else write them: []
    verdict(stale, differs, matches)         the end of a check of several: print differs and 1 when any is stale
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path


def current(path: Path, text: str) -> bool:
    """Whether path holds text, byte for byte as UTF-8 (a missing file does not)."""
    return path.is_file() and path.read_text(encoding="utf-8") == text


def _write(path: Path, text: str, mkdir: bool) -> None:
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def check_or_write(path: Path, text: str, check: bool, *, verdict: Callable[[bool], str], wrote: str | None,
                   mkdir: bool = False, then: Callable[[Path], object] | None = None, file=None) -> int:
    """One generated file. Under check: print verdict(whether path holds text) and return 0 when it does, else 1.
    Otherwise write text to path (making its folder first with mkdir), print wrote (unless None), call then(path)
    (what the write brings along: a JSON twin) and return 0. file: where to print (None: sys.stdout at the call)."""
    if check:
        same = current(path, text)
        print(verdict(same), file=file)
        return 0 if same else 1
    _write(path, text, mkdir)
    if wrote is not None:
        print(wrote, file=file)
    if then is not None:
        then(path)
    return 0


def check_or_write_all(files: Iterable[tuple[Path, str]], check: bool, *, wrote: Callable[[Path], str] | None = None,
                       changed_only: bool = False, mkdir: bool = False, then: Callable[[Path], object] | None = None,
                       file=None) -> list[Path]:
    """Several generated files, (path, text) pairs taken one at a time (a text may read what the one before wrote).
    Under check: the paths that do not hold their text, in order; nothing is written. Otherwise each is written
    (with changed_only, only one whose file differs), then wrote(path) printed and then(path) called; returns []."""
    stale = []
    for path, text in files:
        if check:
            if not current(path, text):
                stale.append(path)
            continue
        if changed_only and current(path, text):
            continue
        _write(path, text, mkdir)
        if wrote is not None:
            print(wrote(path), file=file)
        if then is not None:
            then(path)
    return stale


def verdict(stale: list, differs: str, matches: str | None = None, file=None) -> int:
    """The end of a check of several outputs: print differs and return 1 when any is stale; else print matches (when
    given) and return 0."""
    if stale:
        print(differs, file=file)
        return 1
    if matches is not None:
        print(matches, file=file)
    return 0
