"""Findings: every silent or surprising outcome of a request, with a stable id, the knobs and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from .errors import UsageError
from .releases import DATA_DIR, load_yaml
from .suggest import closest

SEVERITIES = ("error", "warning", "info")


@dataclass
class Finding:
    id: str
    severity: str
    message: str
    fix: str
    knobs: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix, "knobs": self.knobs}


@lru_cache(maxsize=None)
def catalog() -> dict:
    return load_yaml(DATA_DIR / "findings.yaml")


def make(finding_id: str, message: str, fix: str, knobs=()) -> Finding:
    entry = catalog()[finding_id]
    return Finding(finding_id, entry["severity"], message, fix, list(knobs))


def explain(finding_id: str) -> dict:
    entries = catalog()
    key = finding_id.strip().upper().replace("-", "_")
    if key not in entries:
        hint = closest(key, entries)
        raise UsageError(
            f"explain: unknown finding id '{finding_id}'"
            + (f"; did you mean '{hint}'?" if hint else f"; known: {', '.join(entries)}")
        )
    entry = entries[key]
    return {"id": key, **{k: " ".join(v.split()) if k != "explain" else v.strip() for k, v in entry.items()}}


def sort(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
