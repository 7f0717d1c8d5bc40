"""The upstream overlap suites verify runs, and the pass count measured for each test file (by its sha256) against
each release: data/suites.yaml."""

from __future__ import annotations

from .releases import DATA_DIR, load_yaml


def table() -> dict:
    return load_yaml(DATA_DIR / "suites.yaml")


def expected_counts() -> dict:
    """The pass counts verify requires, by suite, test-file sha256 and installed release (data/suites.yaml)."""
    data = table()
    return {
        "suites": {name: {"path": s["path"], "needs_module": s.get("needs_module")} for name, s in data["suites"].items()},
        "expected": [dict(row) for row in data["measured"]],
        "otherwise": "a file and release not listed: verify requires passed == collected",
    }
