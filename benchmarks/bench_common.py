"""What the benchmarks say about the machine they ran on: its CPU, its load average, and waiting for a quieter one;
and how they compare two measurements taken round by round on it."""

from __future__ import annotations

import datetime
import os
import platform
import re
import statistics
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU model unknown"


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def wait_for_load(below: float, deadline: float) -> None:
    """Sleep until the 1-minute load average is below `below`, or time.monotonic() reaches `deadline`."""
    while os.getloadavg()[0] >= below and time.monotonic() < deadline:
        time.sleep(5)


def paired_ratio(numerators, denominators) -> float:
    """The median of the rounds' own ratios (numerators[i] / denominators[i]): each round's pair met the same machine,
    whose speed drifts by tens of per cent from one second to the next on a shared host."""
    return statistics.median(n / d for n, d in zip(numerators, denominators))


def write_section(name: str, text: str) -> None:
    """Replace the text between `<!-- NAME -->` and `<!-- /NAME -->` in docs/benchmarks.md (the benchmarks write
    their own figures there; nobody types them), dated."""
    page = DOCS.read_text(encoding="utf-8")
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if start not in page or end not in page:
        raise SystemExit(f"{DOCS}: no {start} ... {end} section")
    body = f"Measured {datetime.date.today().isoformat()} with `benchmarks/{name}.py`:\n\n{text.strip()}\n"
    page = re.sub(re.escape(start) + r".*?" + re.escape(end), lambda m: f"{start}\n{body}{end}", page, flags=re.S)
    DOCS.write_text(page, encoding="utf-8")
