"""Validate SKILL.md against the Agent Skills specification (agentskills.io/specification).

Frontmatter keys: name, description, license, compatibility, metadata, allowed-tools, plus one extension this
skill uses, when_to_use. The body should stay under 500 lines.
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import safeio
from ..errors import UsageError

ALLOWED_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
EXTENSION_KEYS = {"when_to_use"}
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\Z")
MAX_BODY_LINES = 500


def default_path() -> Path:
    return Path(__file__).resolve().parents[2] / "SKILL.md"


def split(text: str) -> tuple[str, str]:
    """(frontmatter, body); raises ValueError when the file does not open with a --- block."""
    text = text.replace("\r\n", "\n")  # a file saved with CRLF line ends (fuzzG G11)
    if not text.startswith("---\n"):
        raise ValueError("must start with a '---' line opening the YAML frontmatter")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise ValueError("frontmatter is not closed by a '---' line")
    return text[4:end], text[end + 5 :]


def check_text(text: str, directory: str | None = None) -> list[str]:
    try:
        front, body = split(text)
        meta = safeio.parse_yaml(front, "frontmatter")
    except (ValueError, UsageError) as exc:
        return [str(exc) if isinstance(exc, UsageError) else f"frontmatter: {exc}"]
    if not isinstance(meta, dict):
        return ["frontmatter: must be a YAML mapping"]
    problems = [f"frontmatter: unknown key '{k}'" for k in meta if k not in ALLOWED_KEYS | EXTENSION_KEYS]
    problems += _name(meta.get("name"), directory)
    problems += _text_field(meta, "description", 1024, required=True)
    problems += _text_field(meta, "when_to_use", 1024, required=False)
    problems += _text_field(meta, "compatibility", 500, required=False)
    if "license" in meta and not (isinstance(meta["license"], str) and meta["license"].strip()):
        problems.append("license: must be a non-empty string")
    problems += _metadata(meta.get("metadata"))
    tools = meta.get("allowed-tools")
    if tools is not None and not (isinstance(tools, str) or (isinstance(tools, list) and all(isinstance(t, str) for t in tools))):
        problems.append("allowed-tools: must be a space-delimited string or a list of strings")
    lines = body.count("\n")
    if lines >= MAX_BODY_LINES:
        problems.append(f"body: {lines} lines; keep it under {MAX_BODY_LINES} and move detail to references/")
    return problems


def _name(name, directory: str | None) -> list[str]:
    if not isinstance(name, str) or not name:
        return ["name: required, a non-empty string"]
    out = []
    if len(name) > 64:
        out.append(f"name: {len(name)} characters; at most 64")
    if not NAME.match(name):
        out.append("name: lowercase letters, digits and single hyphens only, not starting or ending with a hyphen")
    if directory is not None and directory != name:
        out.append(f"name: must match the skill's directory name ('{directory}')")
    return out


def _text_field(meta: dict, key: str, limit: int, required: bool) -> list[str]:
    if key not in meta:
        return [f"{key}: required"] if required else []
    value = meta[key]
    if not isinstance(value, str) or not value.strip():
        return [f"{key}: must be a non-empty string"]
    out = []
    if len(value) > limit:
        out.append(f"{key}: {len(value)} characters; at most {limit}")
    if "<" in value or ">" in value:
        out.append(f"{key}: must not contain angle brackets")
    return out


def _metadata(value) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, dict):
        return ["metadata: must be a mapping of string keys to string values"]
    return [f"metadata.{k}: value must be a string (quote it)" for k, v in value.items() if not isinstance(v, str)]


def check_file(path: str | Path | None = None, check_directory: bool = False) -> list[str]:
    p = Path(path) if path else default_path()
    if not path and not p.is_file():
        raise UsageError("no SKILL.md beside the package (an installed wheel carries none): give the path of the SKILL.md to check")
    try:
        if safeio.kind(p) == "missing":  # a missing input is a usage error, as for every verb (fuzzH H13)
            raise UsageError(f"{safeio.esc(str(p))}: no such file")
        directory = p.resolve().parent.name if check_directory else None
    except (OSError, RuntimeError) as exc:  # permission, name too long, a symlink loop
        raise UsageError(f"{p}: {safeio.reason(exc) if isinstance(exc, OSError) else exc}") from None
    return check_text(safeio.read_text(p), directory)
