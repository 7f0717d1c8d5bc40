"""Every check an analysis runs, in one registry (the ruff pattern: the finding is the unit of change).

A check is a function of the resolver's State that yields findings and changes nothing; it declares the finding ids it
raises, and raising another is a bug caught here. The verbs' own findings (plan's choices, lint's saved-versus-
computed, diff's rules, diagnose's log matches) are declared with `declare()`, so that every id of the registry has
exactly one raiser (tests/test_registry.py). Checks run in registration order: the modules below, top to bottom.
"""

from __future__ import annotations

from ..proof import one_value_per_key, probing

CHECKS: list = []  # (function, declared ids), in the order they run
RAISERS: dict = {}  # finding id -> the raisers that declare it


def declare(raiser: str, ids) -> None:
    for finding_id in ids:
        RAISERS.setdefault(finding_id, []).append(raiser)


def check(*ids: str):
    """Register a check that raises the findings `ids`."""
    def register(fn):
        declare(f"{fn.__module__}.{fn.__name__}", ids)
        CHECKS.append((fn, frozenset(ids)))
        return fn

    return register


def collect(state) -> list:
    """Every check's findings for a state; outside a proof, no two fixes of one config disagree (one_value_per_key)."""
    out = []
    for fn, ids in CHECKS:
        for finding in fn(state):
            if finding.id not in ids:
                raise RuntimeError(f"{fn.__name__} raised {finding.id}, which it does not declare")
            out.append(finding)
    return out if probing() else one_value_per_key(out)


from . import rejections, later, selection, left_off, run  # noqa: E402,F401  (registers them, in this order)
