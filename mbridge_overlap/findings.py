"""Findings: every silent or surprising outcome of a request, from the one registry in data/findings.yaml.

A check raises a finding by id with the values its message and fix templates name, the typed overrides that fix it
(`fix_overrides`, Bridge's dotted keys; empty when only hardware, the launcher or a rewrite can), the knobs involved,
and the effective values its message states (`asserts`, checked against `effective` in tests).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from functools import lru_cache

from .errors import UsageError
from .releases import DATA_DIR, load_yaml
from .suggest import closest

SEVERITIES = ("error", "warning", "info")
WHEN = ("config", "setup", "step")
_FIELDS = {"severity", "title", "message", "fix", "knobs", "anchor", "explain", "asserts", "when", "source", "skill"}


@dataclass
class Finding:
    id: str
    severity: str
    message: str
    fix: str
    fix_overrides: dict = field(default_factory=dict)
    knobs: list = field(default_factory=list)
    when: str | None = None  # errors: where the run fails (config, setup, step)
    remove_keys: list = field(default_factory=list)  # keys of the request the fix drops (not settable to anything)
    asserts: dict = field(default_factory=dict)  # effective dotted key -> value the message states

    def to_dict(self) -> dict:
        out = {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix,
               "fix_overrides": self.fix_overrides, "knobs": self.knobs}
        if self.when:
            out["when"] = self.when
        if self.remove_keys:
            out["remove_keys"] = self.remove_keys
        return out


@lru_cache(maxsize=None)
def registry() -> dict:
    return load_yaml(DATA_DIR / "findings.yaml")


def record(finding_id: str) -> dict:
    return registry()[finding_id]


def template_fields(text: str) -> set:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def make(finding_id: str, *, fix_overrides: dict | None = None, knobs=None, remove_keys=(), asserts=None, **params) -> Finding:
    """A finding from its record: message and fix rendered with `params`; knobs default to the record's."""
    rec = record(finding_id)
    if "fix" not in params and fix_overrides:
        params["fix"] = overrides_text(fix_overrides)
    return Finding(
        id=finding_id,
        severity=rec["severity"],
        message=rec["message"].format(**params),
        fix=rec["fix"].format(**params),
        fix_overrides=dict(fix_overrides or {}),
        knobs=list(knobs if knobs is not None else rec.get("knobs") or []),
        when=rec.get("when"),
        remove_keys=list(remove_keys),
        asserts={**(rec.get("asserts") or {}), **(asserts or {})},
    )


def overrides_text(overrides: dict) -> str:
    """Overrides as the command line writes them: key=value, true/false/null."""
    from .text import fmt

    return " ".join(f"{k}={fmt(v)}" for k, v in overrides.items())


def explain(finding_id: str) -> dict:
    entries = registry()
    key = finding_id.strip().upper().replace("-", "_") if isinstance(finding_id, str) else ""
    if key not in entries:
        from .safeio import shown

        hint = closest(key, entries)
        raise UsageError(f"explain: unknown finding id {shown(finding_id)}" + (f"; did you mean '{hint}'?" if hint else ""))
    rec = entries[key]
    out = {"id": key, "severity": rec["severity"], "title": rec["title"], "when": rec.get("when"),
           "anchor": rec.get("anchor"), "source": rec.get("source"), "skill": rec.get("skill"),
           "knobs": rec.get("knobs") or [], "explain": rec["explain"].strip()}
    out["location"] = _location(rec.get("anchor"))
    return out


def _location(anchor_id: str | None) -> dict | None:
    """Where the anchored Bridge code is in the installed package, when one is importable here (None otherwise)."""
    if not anchor_id:
        return None
    from . import anchors

    try:
        location = anchors.locate(None)
    except UsageError as exc:
        return {"status": "needs_bridge", "note": str(exc)}
    spec = anchors.specs()[anchor_id]
    found = anchors.check(anchor_id, spec, location, anchors.fingerprints()["anchors"].get(anchor_id) or [])
    return {k: v for k, v in found.to_dict().items() if k in ("status", "path", "start", "end", "same_as", "nearest", "note")}


def sort(items: list[Finding]) -> list[Finding]:
    return sorted(items, key=lambda f: SEVERITIES.index(f.severity))
