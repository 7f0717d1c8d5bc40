"""Find the Bridge code SKILL.md cites, in the installed megatron-bridge or a source checkout, and tell by content
whether it is still the code of a verified release.

Each anchor names a scope (a function, a class, or a block inside one). The fingerprint of its normalised source
(fingerprint.py) is compared with those recorded for every verified release in data/fingerprints.yaml
(scripts/gen_release_data.py writes them). Reads files only: nothing is
imported from megatron, so this runs in a second without torch.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import releases, safeio
from .errors import UsageError
from .fingerprint import Measure, measure
from .releases import DATA_DIR, load_yaml, version_key

__all__ = ["measure", "report"]

DEFAULT_WINDOW = 20
MAX_SOURCE_BYTES = 4 * 1024 * 1024  # the largest Bridge file cited is about 100 kB
DIFF_LINES = 30


@dataclass
class Anchor:
    id: str
    what: str
    file: str
    status: str  # same | changed | missing | not_applicable | needs_source
    path: str | None = None
    start: int | None = None
    end: int | None = None
    note: str = ""
    same_as: str | None = None  # status same: the newest verified release with this fingerprint
    nearest: str | None = None  # status changed: the verified release the diff is against
    fingerprint: str | None = None
    diff: list = field(default_factory=list)
    steps_added: list = field(default_factory=list)
    steps_removed: list = field(default_factory=list)

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
            if safeio.kind(root / "src") == "dir":
                safeio.list_dir(root / "src")  # readable
        except (OSError, RuntimeError) as exc:  # a symlink loop is a RuntimeError before Python 3.13
            raise UsageError(f"--mbridge-src {safeio.shown(str(mbridge_src))}: {safeio.reason(exc) if isinstance(exc, OSError) else exc}") from None
        package = root / "src" / "megatron" / "bridge"
        if not package.is_dir():
            raise UsageError(f"--mbridge-src {root}: no src/megatron/bridge there; point it at a Megatron-Bridge checkout")
        return Location(package, root, _version(package))
    import importlib.util

    try:
        spec = importlib.util.find_spec("megatron.bridge")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        scripts = Path(__file__).resolve().parent.parent / "scripts"
        raise UsageError(
            "megatron-bridge is not installed in this Python; pass --mbridge-src CHECKOUT or run with the Bridge "
            f"venv's python: \"$({scripts}/bridge_env.sh --print-python)\" {scripts}/mbridge-overlap anchors"
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


def applies(spec: dict, version: str) -> bool:
    """An anchor applies from `since` (inclusive) up to `removed_in` (exclusive); any release when unknown."""
    if version == "unknown":
        return True
    key = version_key(version)
    since, removed = spec.get("since"), spec.get("removed_in")
    return (not since or key >= version_key(since)) and (not removed or key < version_key(removed))


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


# --- comparison with the verified releases ---------------------------------------------------------------------


@lru_cache(maxsize=None)
def fingerprints() -> dict:
    """data/fingerprints.yaml: {releases: {version: facts}, anchors: {id: [{fingerprint, releases, ...}]}}."""
    return load_yaml(DATA_DIR / "fingerprints.yaml")


def record(per_release: dict) -> dict:
    """The `anchors` table of fingerprints.yaml from {version: {anchor id: Measure}}: one entry per distinct
    fingerprint, with every release that has it."""
    out = {}
    for anchor_id in specs():
        entries = {}
        for version, measured in per_release.items():
            got = measured.get(anchor_id)
            if got is None:
                continue
            entry = entries.setdefault(got.fingerprint, {"fingerprint": got.fingerprint, "releases": []})
            entry["releases"].append(version)
            if got.steps is not None:
                entry["steps"] = got.steps
            entry["line_hashes"] = got.line_hashes
        out[anchor_id] = list(entries.values())
    return out


def nearest(version: str, candidates: list[str]) -> str | None:
    """The newest candidate not newer than `version`, else the oldest one (the newest of all when unknown)."""
    ordered = sorted(candidates, key=version_key)
    if not ordered:
        return None
    if version == "unknown":
        return ordered[-1]
    older = [r for r in ordered if version_key(r) <= version_key(version)]
    return older[-1] if older else ordered[0]


def compare(anchor: Anchor, got: Measure, recorded: list[dict], version: str) -> None:
    """Set same/changed on `anchor` from the recorded fingerprints of its scope."""
    anchor.fingerprint = got.fingerprint
    match = next((r for r in recorded if r["fingerprint"] == got.fingerprint), None)
    if match:
        anchor.status, anchor.same_as = "same", max(match["releases"], key=version_key)
        return
    by_release = {rel: r for r in recorded for rel in r["releases"]}
    ref = nearest(version, list(by_release))
    anchor.status = "changed"
    if ref is None:
        anchor.note = "no verified release has a fingerprint for this code"
        return
    anchor.nearest, old = ref, by_release[ref]
    anchor.diff = hash_diff(old["line_hashes"], got.line_hashes, got.lines, ref)
    if got.steps is not None and old.get("steps") is not None:
        anchor.steps_added, anchor.steps_removed = step_changes(old["steps"], got.steps)
    anchor.note = f"the code differs from Bridge {ref}: re-read it and check the rule in SKILL.md and the resolver"


def hash_diff(old_hashes: list, new_hashes: list, new_lines: list, ref: str, context: int = 2) -> list[str]:
    """A unified diff of normalised source where only the new side has text (no Bridge code is stored here):
    removed lines show as their line number in the `ref` release's normalised code."""
    out = []
    for group in difflib.SequenceMatcher(None, old_hashes, new_hashes, autojunk=False).get_grouped_opcodes(context):
        a0, b0 = group[0][1], group[0][3]
        a1, b1 = group[-1][2], group[-1][4]
        out.append(f"@@ -{a0 + 1},{a1 - a0} +{b0 + 1},{b1 - b0} @@ (normalised source, {ref} -> here)")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in new_lines[j1:j2]]
                continue
            out += [f"-[line {i + 1} of the {ref} code]" for i in range(i1, i2)]
            out += ["+" + line for line in new_lines[j1:j2]]
    if len(out) > DIFF_LINES:
        out = out[:DIFF_LINES] + [f"... {len(out) - DIFF_LINES} more diff lines"]
    return out


def step_changes(old: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """Calls added (each with the call it follows) and removed, in order."""
    added, removed = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            for j in range(j1, j2):
                added.append(f"{new[j]} (after {new[j - 1]})" if j else f"{new[j]} (first)")
        if tag in ("delete", "replace"):
            removed += old[i1:i2]
    return added, removed


# --- the report ------------------------------------------------------------------------------------------------------


def _read(path: Path) -> str:
    """A cited file that is there but is not a readable UTF-8 file: the checkout is broken (UsageError, one line)."""
    return safeio.read_text(path, limit=MAX_SOURCE_BYTES)


def check(anchor_id: str, spec: dict, location: Location, recorded: list) -> Anchor:
    a = Anchor(anchor_id, spec["what"], spec["file"], "missing")
    if not applies(spec, location.version):
        span = [f"since {spec['since']}"] if spec.get("since") else []
        span += [f"before {spec['removed_in']} (removed then)"] if spec.get("removed_in") else []
        a.status, a.note = "not_applicable", f"this code exists in Bridge {' and '.join(span)}, not {location.version}"
        return a
    if spec.get("source_only") and location.checkout is None:
        a.status, a.note = "needs_source", "in the repository's scripts/, not the installed package"
        return a
    path = (location.checkout if spec.get("source_only") else location.package) / spec["file"]
    a.path = str(path)
    if safeio.kind(path) == "missing":
        a.note = "the file is not there any more: find the code, then update SKILL.md and anchors.yaml"
        return a
    text = _read(path)
    try:
        got = measure(spec, text)
    except (SyntaxError, RecursionError, ValueError) as exc:
        a.note = f"cannot read {spec['file']}: {type(exc).__name__}: {exc}"
        return a
    if got is None:
        a.note = f"{spec['scope']} is not there any more: find the code, then update SKILL.md and anchors.yaml"
        return a
    span = find_lines(text, spec["lines"], spec.get("window", DEFAULT_WINDOW))
    a.start, a.end = span or (got.start, got.end)
    compare(a, got, recorded, location.version)
    if span is None:
        a.note = (a.note + "; " if a.note else "") + "the cited lines are gone from it"
    return a


def find(location: Location, table: dict) -> list[Anchor]:
    return [check(i, spec, location, table["anchors"].get(i) or []) for i, spec in specs().items()]


@lru_cache(maxsize=None)
def specs() -> dict:
    return load_yaml(DATA_DIR / "anchors.yaml")


def release_note(version: str) -> str | None:
    """What releases.yaml says about a yanked release."""
    facts = releases.data()["releases"].get(version) or {}
    if not facts.get("yanked"):
        return None
    same = f"; its code is {facts['same_as']}'s" if facts.get("same_as") else ""
    return f"Bridge {version} is yanked on PyPI ({facts['yanked']}){same}"


def report(mbridge_src: str | None = None, table: dict | None = None) -> dict:
    """Every anchor in the installed Bridge or a checkout, against `table` (default: data/fingerprints.yaml)."""
    table = table or fingerprints()
    location = locate(mbridge_src)
    anchors = find(location, table)
    counts = {}
    for a in anchors:
        counts[a.status] = counts.get(a.status, 0) + 1
    return {
        "bridge_version": location.version,
        "package": str(location.package),
        "checkout": str(location.checkout) if location.checkout else None,
        "verified_releases": sorted(table["releases"], key=version_key),
        "release_note": release_note(location.version),
        "anchors": [a.to_dict() for a in anchors],
        "counts": counts,
        "ok": not any(a.status in ("missing", "changed") for a in anchors),
    }
