"""What the hostile suites share: payloads that run if any shell, Python or YAML takes them as code, the CLI runner,
and the assertions every bad input must meet (one line, exit 2, no traceback, no control character)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "PWNED"
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Characters that end a line somewhere: bash and Python (LF, CR), YAML 1.1 (NEL, LS, PS), str.splitlines (VT, FF).
LINE_BREAKS = {"lf": "\n", "cr": "\r", "crlf": "\r\n", "nel": "\x85", "ls": "\u2028", "ps": "\u2029", "vt": "\x0b", "ff": "\x0c"}


def payloads(marker: Path) -> dict[str, str]:
    """Text that creates `marker` if any of bash, Python or YAML/Hydra takes it as code or structure."""
    m = str(marker)
    sh, py = f"touch {m}", f"open({m!r}, 'w').close()"
    out = {f"break_{k}": f"x{b}{sh} #{b}{py} #{b}injected: 1{b}++injected=1" for k, b in LINE_BREAKS.items()}
    out["shell_quotes"] = f"x'; {sh}; '\"; {sh}; \"$({sh})`{sh}`"
    out["python_quotes"] = f"x'; {py}; '\"; {py}; \"\"\"\"; {py}; \"\"\"\\"
    out["ansi_and_surrogate"] = f"\x1b[31mx\x1b]0;title\x07\udcff\u202e{sh}"
    return out


def write(folder: Path, name: str, data) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def fifo(folder: Path, name: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


class Named:
    """A case's pytest id: its class and its name."""

    @property
    def id(self) -> str:
        return f"{self.cls}-{self.name}"


def registry(case_type) -> tuple[list, callable]:
    """A list of cases and the add(cls, name, make, **fields) that appends to it."""
    cases: list = []
    return cases, lambda cls, name, make, **kw: cases.append(case_type(cls, name, make, **kw))


_PYCACHE: list = []


def cli_env(**extra) -> dict:
    """The test's environment, with compiled modules cached outside the skill folder (0.05 s a run, not 0.2)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not _PYCACHE:
        _PYCACHE.append(tempfile.mkdtemp(prefix="mbridge-overlap-pycache-"))
    return {**env, "PYTHONPYCACHEPREFIX": _PYCACHE[0], **extra}


def run_all(base: Path, cases, run, workers: int = 4) -> dict:
    """Every case run as run(case, folder) in a fresh folder of its own under base, `workers` at a time, after one
    run that compiles the modules: {case id: (what run returned, the folder)}."""
    folders = {c.id: base / f"case{i}" for i, c in enumerate(cases)}
    for folder in folders.values():
        folder.mkdir()
    run_cli("explain", "x", env=cli_env())
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {c.id: pool.submit(run, c, folders[c.id]) for c in cases}
        return {k: (f.result(), folders[k]) for k, f in futures.items()}


def run_cli(*args, timeout: float = 30, **kw):
    argv = [a if isinstance(a, bytes) else str(a) for a in args]
    kw.setdefault("cwd", ROOT)
    return subprocess.run([sys.executable, "-m", "mbridge_overlap", *argv], capture_output=True, timeout=timeout, **kw)


def assert_one_line(proc) -> None:
    """Bad input: one escaped line on stderr, nothing on stdout."""
    err = proc.stderr.decode("utf-8")
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and not CONTROL.search(err[:-1]), err
    assert proc.stdout == b"", proc.stdout[:200]


def assert_clean_stderr(proc) -> None:
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and not CONTROL.search(err.replace("\n", "")), err


def count_findall(monkeypatch, module) -> list:
    """Count the module's re.findall calls (each appends to the list returned): how often a text is parsed."""
    calls, real = [], module.re

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def findall(self, *args):
            calls.append(1)
            return real.findall(*args)

    monkeypatch.setattr(module, "re", Counting())
    return calls
