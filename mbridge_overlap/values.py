"""How a value is written in a message, a fix or an override: the one spelling the engine and the text output share
(the engine never imports text.py, the human-readable output)."""

from __future__ import annotations


def fmt(value, unset: bool = False) -> str:
    """A value as the command line and YAML write it: true/false, null (or "unset" for a key nobody set)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "unset" if unset else "null"
    return str(value)
