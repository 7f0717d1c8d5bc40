"""A ready snippet that turns on Megatron-Bridge's PyTorch profiler for a few steps on chosen ranks.

What Bridge 0.6.2 does with it (megatron/bridge/training/profiling.py, train.py): on each rank in profile_ranks
(an empty list means every rank) it builds torch.profiler.schedule(wait=start-1, warmup=1, active=end-start,
repeat=1) and steps it once per training iteration, so a fresh run records ProfilerStep#start .. #end-1 (the
profiler counts iterations of this run from 1, also after a resume) and export_chrome_trace writes
<logger.tensorboard_dir>/../torch_profile/rank-<global rank>.json.gz.
"""

from __future__ import annotations

import re

from ..errors import UsageError
from ..contract import SCHEMA_VERSION
from ..safeio import MAX_GPUS, shown

RELEASE = "0.6.2"
FORMS = {"python": "profiler.py.j2", "yaml": "profiler.yaml.j2", "hydra": "profiler.hydra.j2"}
DEFAULT_STEPS = "10-13"
_STEPS = re.compile(r"^\s*([0-9]{1,9})\s*-\s*([0-9]{1,9})\s*\Z")  # ASCII digits: \d also takes "١"


def parse_steps(text: str) -> tuple[int, int]:
    """'START-END' as Bridge's profile_step_start / profile_step_end (END not recorded)."""
    m = _STEPS.match(text or "")
    if not m:
        raise UsageError(f"--steps {shown(text)}: expected START-END, e.g. {DEFAULT_STEPS} (Bridge's profile_step_start-end)")
    start, end = int(m.group(1)), int(m.group(2))
    if start < 1:
        raise UsageError(f"--steps {shown(text)}: START must be 1 or more (with 0 the profiler also records the set-up)")
    if end <= start:
        raise UsageError(f"--steps {shown(text)}: END must be greater than START (END itself is not recorded)")
    return start, end


def parse_ranks(text: str | None, allow_all: bool) -> tuple[int, ...] | None:
    """'0,8' -> (0, 8); 'all' -> () where allowed; None -> None."""
    if text is None:
        return None
    if text.strip().lower() == "all":
        if not allow_all:
            raise UsageError("--rank all: only with --snippet; to analyse every rank, leave --rank out")
        return ()
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or not all(re.fullmatch(r"[0-9]{1,8}", part) for part in parts):  # ASCII digits: int() takes "١" too
        raise UsageError(f"--rank {shown(text)}: expected comma-separated global ranks (ASCII digits), e.g. 0,8")
    ranks = sorted({int(part) for part in parts})
    if ranks[-1] >= MAX_GPUS:
        raise UsageError(f"--rank {shown(text)}: a rank below {MAX_GPUS:,}, the most GPUs any machine has")
    return tuple(ranks)


def describe(start: int, end: int, ranks: tuple[int, ...]) -> tuple[str, str]:
    who = "every rank" if not ranks else ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
    steps = f"ProfilerStep#{start}" if end - start == 1 else f"ProfilerStep#{start}..#{end - 1}"
    purpose = f"Turn on the PyTorch profiler for {steps} on {who}"
    if end - start == 1:
        totals = "One step only: `trace` figures then cover the whole trace; record 3 or more steps to drop the last."
    else:
        totals = f"`trace` totals cover ProfilerStep#{start}..#{end - 2}; the last recorded step is left out, as HTA does."
    return purpose, totals


def render(form: str, start: int, end: int, ranks: tuple[int, ...]) -> str:
    if form not in FORMS:
        raise UsageError(f"--snippet {shown(form)}: expected one of {', '.join(FORMS)}")
    if not all(isinstance(r, int) and r >= 0 for r in ranks) or not (1 <= start < end):
        raise UsageError("profiler snippet: steps or ranks out of range")
    from ..output import snippets  # Jinja: not for a trace's analysis, which parses --rank here

    purpose, totals = describe(start, end, ranks)
    return snippets.render(
        FORMS[form], purpose=purpose, totals=totals, release=RELEASE, start=int(start), end=int(end),
        ranks=[int(r) for r in ranks],
    )


def to_dict(form: str, start: int, end: int, ranks: tuple[int, ...]) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "profiler_snippet",
        "bridge_version": RELEASE,
        "form": form,
        "profile_step_start": start,
        "profile_step_end": end,
        "profile_ranks": list(ranks),
        "recorded_steps": list(range(start, end)),
        "trace_files": "<logger.tensorboard_dir>/../torch_profile/rank-<global rank>.json.gz",
        "snippet": render(form, start, end, ranks),
    }
