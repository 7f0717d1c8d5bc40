"""'Did you mean' suggestions for mistyped keys and names."""

from __future__ import annotations


def closest(word: str, choices, cutoff: float = 0.6) -> str | None:
    import difflib  # only when a name is wrong

    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return matches[0] if matches else None
