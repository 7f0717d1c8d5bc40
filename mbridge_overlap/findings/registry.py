"""The registry of checks and raisers: which function raises which finding ids (the ruff pattern: the finding is
the unit of change). It imports nothing of the package, so that the checks (mbridge_overlap.findings.rules), the proof
engine that runs them again (proof.collect) and the verbs that declare their own findings all depend on it and it
on none of them.

A check is a function of the resolver's State that yields findings and changes nothing; it declares the finding ids
it raises, and raising another is a bug (proof.collect). The verbs' own findings (plan's choices, lint's saved-versus-
computed, diff's rules, diagnose's log matches) are declared with `declare()`, so that every id of the registry has
exactly one raiser (tests/test_registry.py).
"""

from __future__ import annotations

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
