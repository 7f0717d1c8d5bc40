"""The rows of Megatron-Bridge's published performance tables (docs/performance-summary.md and
docs/performance-summary-archive.md), read from a git mirror of NVIDIA-NeMo/Megatron-Bridge with `git show`.

Each row: section (the container release), task (pretrain, sft or peft: the table's subsection, "Pre-Training",
"SFT" or "LoRA" Performance, named as Bridge's recipes name it), system (H100, B200, GB200, ...), model, GPUs, precision, GBS, MBS,
sequence length, FSDP, TP, PP, CP, VP, EP, tokens/s/GPU and model TFLOP/s/GPU, with the file and line it came from.
A cell written "a (b)" holds two measurements; only the first (a) is kept. Tables without a precision column (the
25.09 section) give precision "".
"""

from __future__ import annotations

import re
import subprocess

FILES = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
COLUMNS = {"system": "system", "model": "model", "#-gpus": "gpus", "precision": "precision", "gbs": "gbs", "mbs": "mbs",
           "sequence length": "seq_length", "fsdp": "fsdp", "tp": "tp", "pp": "pp", "cp": "cp", "vp": "vp", "ep": "ep",
           "etp": "etp", "ga": "ga", "tokens / sec / gpu": "tokens_per_sec_per_gpu", "model tflop / sec / gpu": "model_tflops_per_gpu"}
_FOOTNOTE = re.compile(r"\[\^[^\]]+\]")
_PAREN = re.compile(r"^\s*(.*?)\s*\((.*?)\)\s*$")


TASKS = {"pre-training": "pretrain", "sft": "sft", "lora": "peft"}  # a subsection's first words -> the recipes' word


def rows(mirror: str, rev: str = "HEAD", tasks: tuple = ("pretrain",)) -> list[dict]:
    out = []
    for path in FILES:
        text = subprocess.run(["git", "-C", mirror, "show", f"{rev}:{path}"], capture_output=True, text=True, check=True).stdout
        out += [r for r in parse(text, path) if r["task"] in tasks]
    return out


def task_of(subsection: str) -> str | None:
    words = subsection.lower()
    return next((task for lead, task in TASKS.items() if words.startswith(lead + " ")), None)


def parse(text: str, path: str) -> list[dict]:
    out: list[dict] = []
    section = subsection = heading = ""
    header = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            section, subsection, heading, header = re.sub(r"\s*NeMo Container\s*$", "", line[3:].strip()), "", "", None
        elif line.startswith("### "):
            subsection, heading, header = line[4:].strip(), "", None
        elif line.startswith("#### "):
            heading, header = line[5:].strip(), None
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                continue
            if header is None:
                header = [COLUMNS.get(c.lower(), "other") for c in cells]
                continue
            task = task_of(subsection)
            if task is None:
                continue
            row = {k: _first(_FOOTNOTE.sub("", v)) for k, v in zip(header, cells) if k != "other"}
            if heading.startswith("Model:"):
                row.setdefault("model", heading.split(":", 1)[1].strip())
            if heading.startswith("System:"):
                row.setdefault("system", heading.split(":", 1)[1].strip())
            row["model"] = re.sub(r"\s*\(.*\)\s*$", "", row.get("model", "")).strip()
            row["system"] = re.sub(r"^DGX-", "", row.get("system", "")).strip()
            row.update(section=section, task=task, source=f"{path}:{number}", precision=row.get("precision", ""))
            out.append(row)
    return out


def _first(cell: str) -> str:
    m = _PAREN.match(cell)
    return m.group(1).strip() if m and m.group(1) else cell.strip()


def number(cell: str | None) -> int | None:
    """A whole-number cell; None for n/a or empty."""
    try:
        return int(float(cell))
    except (TypeError, ValueError):
        return None
