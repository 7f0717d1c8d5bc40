"""Find the Bridge code SKILL.md cites, in the installed megatron-bridge or a source checkout, by content.

Reads files only: nothing is imported from megatron, so this runs in a second without torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import safeio
from .errors import UsageError
from .releases import DATA_DIR, load_yaml

DEFAULT_WINDOW = 20


@dataclass
class Anchor:
    id: str
    what: str
    file: str
    status: str  # found | missing | not_applicable | needs_source
    path: str | None = None
    start: int | None = None
    end: int | None = None
    note: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Location:
    package: Path  # .../megatron/bridge
    checkout: Path | None  # repository root when reading a source checkout
    version: str


def locate(mbridge_src: str | None = None) -> Location:
    """The megatron/bridge package directory: from a checkout (--mbridge-src) or the installed package."""
    if mbridge_src:
        try:
            root = Path(mbridge_src).expanduser().resolve()
            found = safeio.kind(root / "src" / "megatron" / "bridge")
        except (OSError, RuntimeError) as exc:  # permission, name too long, a symlink loop
            raise UsageError(f"--mbridge-src {mbridge_src}: {safeio.reason(exc) if isinstance(exc, OSError) else exc}") from None
        package = root / "src" / "megatron" / "bridge"
        if found != "dir":
            raise UsageError(f"--mbridge-src {root}: no src/megatron/bridge there; point it at a Megatron-Bridge checkout")
        return Location(package, root, _version(package))
    import importlib.util

    try:
        spec = importlib.util.find_spec("megatron.bridge")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            "megatron-bridge is not installed in this Python; pass --mbridge-src CHECKOUT or run with the Bridge "
            "venv's python ($(scripts/bridge_env.sh --print-python) -m mbridge_overlap anchors)"
        )
    package = Path(list(spec.submodule_search_locations)[0])
    return Location(package, None, _version(package))


def _version(package: Path) -> str:
    info = package / "package_info.py"
    text = safeio.read_text(info) if safeio.kind(info) != "missing" else ""
    parts = [re.search(rf"^{k}\s*=\s*(\d+)", text, re.M) for k in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        return "unknown"
    return ".".join(m.group(1) for m in parts)


def _family(version: str) -> str:
    return ".".join(version.split(".")[:2])


def find_lines(text: str, lines: list[str], window: int) -> tuple[int, int] | None:
    """1-based (start, end) of the first place where `lines` occur in order, each within `window` lines."""
    source = [line.strip() for line in text.splitlines()]
    for first, line in enumerate(source):
        if line != lines[0].strip() and lines[0].strip() not in line:
            continue
        at, ok = first, True
        for wanted in lines[1:]:
            nxt = next((i for i in range(at + 1, min(at + 1 + window, len(source))) if wanted.strip() in source[i]), None)
            if nxt is None:
                ok = False
                break
            at = nxt
        if ok:
            return first + 1, at + 1
    return None


def find(location: Location) -> list[Anchor]:
    out = []
    for anchor_id, spec in load_yaml(DATA_DIR / "anchors.yaml").items():
        families = spec.get("families")
        base = Anchor(anchor_id, spec["what"], spec["file"], "missing")
        if families and _family(location.version) not in families:
            base.status, base.note = "not_applicable", f"exists in Bridge {', '.join(families)} only"
            out.append(base)
            continue
        if spec.get("source_only"):
            if location.checkout is None:
                base.status, base.note = "needs_source", "in the repository's scripts/, not the installed package"
                out.append(base)
                continue
            path = location.checkout / spec["file"]
        else:
            path = location.package / spec["file"]
        base.path = str(path)
        if safeio.kind(path) != "missing":
            span = find_lines(safeio.read_text(path), spec["lines"], spec.get("window", DEFAULT_WINDOW))
            if span:
                base.status, (base.start, base.end) = "found", span
        if base.status == "missing":
            base.note = "the cited code is not there any more: re-read the file and update SKILL.md and anchors.yaml"
        out.append(base)
    return out


def report(mbridge_src: str | None = None) -> dict:
    location = locate(mbridge_src)
    anchors = find(location)
    return {
        "bridge_version": location.version,
        "package": str(location.package),
        "checkout": str(location.checkout) if location.checkout else None,
        "anchors": [a.to_dict() for a in anchors],
        "ok": all(a.status != "missing" for a in anchors),
    }
