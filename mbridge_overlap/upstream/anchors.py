"""Find the code SKILL.md cites, in the installed Megatron-Bridge, Megatron-Core and Transformer Engine (or a Bridge
source checkout), and tell by content whether it is still the code of a verified release.

Each anchor names a package (megatron.bridge by default, megatron.core or transformer_engine), a file in it and a
scope (a function, a class, a block or chosen statements inside one). The fingerprint of its normalised source
(fingerprint.py) is compared with those recorded for every verified version of that package in
data/fingerprints.yaml (tools/gen_release_data.py writes them). Reads files only: nothing is imported from
megatron or Transformer Engine (their directories are found with importlib's find_spec, which runs no package code),
so this runs in a second without torch.
"""

from __future__ import annotations

import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path

from . import releases
from .. import safeio
from ..errors import UsageError
from dataclasses import dataclass, field
from .releases import DATA_DIR, load_yaml, version_key

__all__ = ["measure", "report"]

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from .fingerprint import Measure


def measure(spec: dict, text: str):
    """fingerprint.measure (ast, hashlib: imported when some code is read)."""
    from .fingerprint import measure as measure_code

    return measure_code(spec, text)

DEFAULT_WINDOW = 20
MAX_SOURCE_BYTES = 4 * 1024 * 1024  # the largest file cited (Megatron-Core's distrib_optimizer.py) is about 160 kB
DIFF_LINES = 30
BRIDGE = "megatron.bridge"
# The packages an anchor may name: how they are called, and where their version is written when they are installed
# (`dist`: the *.dist-info folder beside the package) and in fingerprints.yaml's `releases` rows (`field`).
PACKAGES = {
    BRIDGE: {"label": "Bridge", "dist": "megatron_bridge", "field": None},
    "megatron.core": {"label": "Megatron-Core", "dist": "megatron_core", "field": "megatron_core"},
    "transformer_engine": {"label": "Transformer Engine", "dist": "transformer_engine", "field": "transformer_engine"},
}
# The pinned Bridge venv scripts/bridge_env.sh builds (its --print-python), named here without running the script,
# which would build a missing venv.
VENV_CACHE = "nemo-mbridge-perf-tp-dp-comm-overlap"
FIND_TIMEOUT_S = 20


@dataclass
class Anchor:
    id: str
    what: str
    file: str  # relative to the package directory
    status: str  # same | changed | missing | not_applicable | needs_source
    package: str = BRIDGE  # megatron.bridge | megatron.core | transformer_engine
    version: str | None = None  # of that package where it was found (None: not found)
    path: str | None = None
    start: int | None = None
    end: int | None = None
    note: str = ""
    same_as: str | None = None  # status same: the newest verified version of the package with this fingerprint
    nearest: str | None = None  # status changed: the verified version the diff is against
    fingerprint: str | None = None
    diff: list = field(default_factory=list)
    steps_added: list = field(default_factory=list)
    steps_removed: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Package:
    """Where one package an anchor names is, and its version; path None: not found (note says where it was looked for)."""

    name: str
    path: Path | None
    version: str | None
    found_in: str | None  # this Python | the checkout | the checkout's 3rdparty/Megatron-LM | the Bridge venv PYTHON
    note: str = ""

    def to_dict(self) -> dict:
        return {"path": str(self.path) if self.path else None, "version": self.version, "found_in": self.found_in,
                "note": self.note}


@dataclass
class Location:
    package: Path  # .../megatron/bridge
    checkout: Path | None  # repository root when reading a source checkout
    version: str
    packages: dict = field(default_factory=dict)  # name -> Package, found on first use (package())


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
            raise UsageError(f"--mbridge-src {safeio.shown(str(mbridge_src))}: no src/megatron/bridge there; point it at a "
                             "Megatron-Bridge checkout")
        return Location(package, root, _version(package))
    package = _spec_dir(BRIDGE)
    if package is None:
        raise UsageError("megatron-bridge is not installed in this Python; pass --mbridge-src CHECKOUT or run with the Bridge "
                         f"venv's python: {_with_bridge_python()}")
    return Location(package, None, _version(package))


def _with_bridge_python() -> str:
    """How to run `anchors` with the Bridge venv's python: from a checkout, its scripts; installed (a wheel carries
    no scripts/), the module under the Bridge venv's python (evalH H7)."""
    scripts = Path(__file__).resolve().parents[2] / "scripts"
    if (scripts / "bridge_env.sh").is_file():
        return f"\"$({scripts}/bridge_env.sh --print-python)\" {scripts}/mbridge-overlap anchors"
    return ("PYTHON -m mbridge_overlap anchors, where PYTHON has megatron-bridge and this package installed (a checkout's "
            "scripts/bridge_env.sh builds such a venv: --print-python names it)")


def _version(package: Path) -> str:
    """A megatron package's version from its package_info.py (MAJOR, MINOR, PATCH)."""
    info = package / "package_info.py"
    text = safeio.read_text(info) if safeio.kind(info) != "missing" else ""
    parts = [re.search(rf"^{k}\s*=\s*(\d+)", text, re.M) for k in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        return "unknown"
    return ".".join(m.group(1) for m in parts)


def package_version(name: str, path: Path) -> str:
    """The version of the package at `path`: megatron's package_info.py, else the *.dist-info folder beside it, else a
    Transformer Engine checkout's build_tools/VERSION.txt; "unknown" when none says."""
    if name.startswith("megatron."):
        found = _version(path)
        if found != "unknown":
            return found
    depth = name.count(".")
    site = path.parents[depth] if len(path.parents) > depth else path
    dist = PACKAGES[name]["dist"] + "-"
    try:
        names = [n for n in os.listdir(site) if n.startswith(dist) and n.endswith(".dist-info")]
    except OSError:
        names = []
    versions = [n[len(dist):-len(".dist-info")] for n in names]
    if versions:
        return max(versions, key=version_key)
    text_file = site / "build_tools" / "VERSION.txt"
    if name == "transformer_engine" and safeio.kind(text_file) == "file":
        found = safeio.read_text(text_file, limit=4096).strip()
        if re.fullmatch(r"\d+\.\d+\.\d+[\w.+-]*", found):
            return found
    return "unknown"


def _spec_dir(name: str) -> Path | None:
    """The package directory `name` imports from in this Python, without importing it (find_spec runs no code of
    the package; for megatron.core it imports the `megatron` namespace, which has none)."""
    from importlib.util import find_spec

    try:
        spec = find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def bridge_python(version: str) -> Path | None:
    """The python of the pinned Bridge venv that scripts/bridge_env.sh --print-python names (that release's venv when
    it has one here, else the default release's: $MBRIDGE_VENV or the cache's venv-mbridge-DEFAULT), when it is
    built; None otherwise. The script is not run (it builds a missing venv, which takes minutes)."""
    try:
        cache = Path(safeio.cache_home()) / VENV_CACHE
    except RuntimeError:  # no home directory
        return None
    default = releases.default_version()
    venvs = [cache / f"venv-mbridge-{version}"] if version != default and re.fullmatch(r"\d+\.\d+\.\d+", version) else []
    venvs.append(Path(os.environ.get("MBRIDGE_VENV") or cache / f"venv-mbridge-{default}"))
    for venv in venvs:
        python = venv / "bin" / "python"
        if os.access(python, os.X_OK) and python.is_file():
            return python
    return None


_FIND = (
    "import importlib.util, json, sys\n"
    "out = {}\n"
    "for n in sys.argv[1:]:\n"
    "    try:\n"
    "        s = importlib.util.find_spec(n)\n"
    "    except Exception:\n"
    "        s = None\n"
    "    out[n] = list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else None\n"
    "print(json.dumps(out))\n"
)


@lru_cache(maxsize=8)
def _dirs_in(python: str) -> dict:
    """{package name: directory} as another interpreter finds them (find_spec, isolated mode: no PYTHON* variables, no
    user site, not the working directory); {} when it cannot tell."""
    import subprocess

    names = [n for n in PACKAGES if n != BRIDGE]
    try:
        run = subprocess.run([python, "-I", "-c", _FIND, *names], capture_output=True, text=True, timeout=FIND_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
        found = json.loads(run.stdout) if run.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    return {n: Path(p) for n, p in found.items() if isinstance(p, str) and n in names} if isinstance(found, dict) else {}


def _find(location: Location, name: str) -> Package:
    label = PACKAGES[name]["label"]
    if name == BRIDGE:
        return Package(name, location.package, location.version, "the checkout" if location.checkout else "this Python")
    looked = []
    if location.checkout is not None and name == "megatron.core":
        sub = location.checkout / "3rdparty" / "Megatron-LM" / "megatron" / "core"
        if safeio.kind(sub / "package_info.py") == "file":
            return Package(name, sub, package_version(name, sub), "the checkout's 3rdparty/Megatron-LM")
        looked.append("the checkout's 3rdparty/Megatron-LM")
    here = _spec_dir(name)
    if here is not None:
        return Package(name, here, package_version(name, here), "this Python")
    looked.append(f"this Python ({sys.executable})")
    if location.checkout is not None:  # Bridge is not installed here: the pinned Bridge venv's packages stand in
        python = bridge_python(location.version)
        there = _dirs_in(str(python)).get(name) if python else None
        if there is not None:
            return Package(name, there, package_version(name, there), f"the Bridge venv {python}")
        looked.append(f"the Bridge venv ({python})" if python else "a Bridge venv (none built: scripts/bridge_env.sh)")
    where = ", ".join(looked[:-1]) + (" or " if len(looked) > 1 else "") + looked[-1]
    return Package(name, None, None, None, f"{label} ({name}) is not in {where}: its code cannot be checked here")


def package(location: Location, name: str) -> Package:
    """The package `name` for the Bridge at `location`: Bridge itself; Megatron-Core from a checkout's
    3rdparty/Megatron-LM when it is filled; else this Python's; else, when Bridge is read from a checkout (so it is
    not installed here), the pinned Bridge venv's (scripts/bridge_env.sh)."""
    if name not in location.packages:
        location.packages[name] = _find(location, name)
    return location.packages[name]


def applies(spec: dict, version: str | None) -> bool:
    """An anchor applies from `since` (inclusive) up to `removed_in` (exclusive), versions of its own package; any
    version when unknown."""
    if version in (None, "unknown"):
        return True
    key = version_key(version)
    since, removed = spec.get("since"), spec.get("removed_in")
    return (not since or key >= version_key(since)) and (not removed or key < version_key(removed))


def package_of(spec: dict) -> str:
    return spec.get("package", BRIDGE)


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
    """data/fingerprints.yaml: {releases: {version: facts}, packages: {name: {version: facts}},
    anchors: {id: [{fingerprint, releases, versions, ...}]}}."""
    return load_yaml(DATA_DIR / "fingerprints.yaml")


def record(per_release: dict, per_package: dict | None = None, pairs: dict | None = None) -> dict:
    """The `anchors` table of fingerprints.yaml: one entry per distinct fingerprint of each anchor. A Bridge anchor's
    entry lists the releases that have it (from per_release: {version: {anchor id: Measure}}); an anchor of another
    package lists that package's `versions` that have it (per_package: {name: {version: {anchor id: Measure}}}) and
    the Bridge `releases` paired with one of them (pairs: {release: {package name: version}})."""
    out = {}
    for anchor_id, spec in specs().items():
        name = package_of(spec)
        measured = per_release if name == BRIDGE else (per_package or {}).get(name, {})
        entries = {}
        for version in sorted(measured, key=version_key):
            got = measured[version].get(anchor_id)
            if got is None:
                continue
            entry = entries.setdefault(got.fingerprint, {"fingerprint": got.fingerprint, "releases": []} if name == BRIDGE
                                       else {"fingerprint": got.fingerprint, "versions": [], "releases": []})
            entry["releases" if name == BRIDGE else "versions"].append(version)
            if got.steps is not None:
                entry["steps"] = got.steps
            entry["line_hashes"] = got.line_hashes
        for entry in entries.values() if name != BRIDGE else ():
            entry["releases"] = [r for r in sorted(pairs or {}, key=version_key) if (pairs[r] or {}).get(name) in entry["versions"]]
        out[anchor_id] = list(entries.values())
    return out


def verified_versions(table: dict, name: str) -> list[str]:
    """The versions of a package the table has fingerprints of (Bridge: its verified releases)."""
    known = table["releases"] if name == BRIDGE else (table.get("packages") or {}).get(name) or {}
    return sorted(known, key=version_key)


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
    """Set same/changed on `anchor` from the recorded fingerprints of its scope: Bridge anchors by release, the others
    by their own package's versions."""
    key = "releases" if anchor.package == BRIDGE else "versions"
    label = PACKAGES[anchor.package]["label"]
    anchor.fingerprint = got.fingerprint
    match = next((r for r in recorded if r["fingerprint"] == got.fingerprint), None)
    if match:
        anchor.status, anchor.same_as = "same", max(match[key], key=version_key)
        return
    by_version = {v: r for r in recorded for v in r.get(key) or []}
    ref = nearest(version, list(by_version))
    anchor.status = "changed"
    if ref is None:
        anchor.note = f"no verified {'release' if anchor.package == BRIDGE else label + ' version'} has a fingerprint for this code"
        return
    anchor.nearest, old = ref, by_version[ref]
    anchor.diff = hash_diff(old["line_hashes"], got.line_hashes, got.lines, ref)
    if got.steps is not None and old.get("steps") is not None:
        anchor.steps_added, anchor.steps_removed = step_changes(old["steps"], got.steps)
    anchor.note = f"the code differs from {label} {ref}: re-read it and check the rule in SKILL.md and the resolver"


def hash_diff(old_hashes: list, new_hashes: list, new_lines: list, ref: str, context: int = 2) -> list[str]:
    """A unified diff of normalised source where only the new side has text (no upstream code is stored here):
    removed lines show as their line number in the `ref` release's normalised code."""
    import difflib

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
    import difflib

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
    name = package_of(spec)
    found = package(location, name)
    label = PACKAGES[name]["label"]
    a = Anchor(anchor_id, spec["what"], spec["file"], "missing", package=name, version=found.version)
    if found.path is None:
        a.status, a.note = "needs_source", found.note
        return a
    if not applies(spec, found.version):
        span = [f"since {spec['since']}"] if spec.get("since") else []
        span += [f"before {spec['removed_in']} (removed then)"] if spec.get("removed_in") else []
        a.status, a.note = "not_applicable", f"this code exists in {label} {' and '.join(span)}, not {found.version}"
        return a
    if spec.get("source_only") and location.checkout is None:
        a.status, a.note = "needs_source", "in the repository's scripts/, not the installed package"
        return a
    path = (location.checkout if spec.get("source_only") else found.path) / spec["file"]
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
        from .fingerprint import missing

        a.note = f"{missing(spec, text)} is not there any more: find the code, then update SKILL.md and anchors.yaml"
        return a
    span = find_lines(text, spec["lines"], spec.get("window", DEFAULT_WINDOW))
    a.start, a.end = span or (got.start, got.end)
    compare(a, got, recorded, found.version)
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


def report(mbridge_src: str | None = None, table: dict | None = None, package_dirs: dict | None = None) -> dict:
    """Every anchor in the installed Bridge or a checkout, against `table` (default: data/fingerprints.yaml).
    package_dirs: {package name: its directory} to read instead of finding it (megatron.core, transformer_engine)."""
    table = table or fingerprints()
    location = locate(mbridge_src)
    for name, where in (package_dirs or {}).items():
        if name not in PACKAGES or name == BRIDGE:
            raise UsageError(f"package_dirs: {safeio.shown(name)} is not one of {', '.join(n for n in PACKAGES if n != BRIDGE)}")
        path = Path(where).expanduser().resolve()
        location.packages[name] = (Package(name, path, package_version(name, path), "given") if path.is_dir() else
                                   Package(name, None, None, None, f"{PACKAGES[name]['label']} ({name}): no folder {path}"))
    anchors = find(location, table)
    counts = {}
    for a in anchors:
        counts[a.status] = counts.get(a.status, 0) + 1
    used = [n for n in PACKAGES if any(package_of(spec) == n for spec in specs().values())]
    return {
        "bridge_version": location.version,
        "package": str(location.package),
        "checkout": str(location.checkout) if location.checkout else None,
        "verified_releases": verified_versions(table, BRIDGE),
        "release_note": release_note(location.version),
        "packages": {n: {**package(location, n).to_dict(), "verified_versions": verified_versions(table, n)} for n in used},
        "anchors": [a.to_dict() for a in anchors],
        "counts": counts,
        "ok": not any(a.status in ("missing", "changed") for a in anchors),
    }
