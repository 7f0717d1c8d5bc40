"""Generate mbridge_overlap/data/message_variants.json: how older (and other) releases of Megatron-Bridge, Megatron-Core
and Transformer Engine word the messages of the overlap path, so that logs of any release are recognised, not only
those of the pinned packages (mbridge_overlap/data/releases/0.6.2/messages.json, tools/gen_messages.py).

    python3 tools/gen_variant_messages.py [--check] [--offline] [--discover]   # from the repository root

Each release of RELEASES is downloaded once with `pip download --no-deps` (a wheel where the index has one for the
release, else its sdist; no dependencies, nothing built or installed) into the cache,
${XDG_CACHE_HOME:-~/.cache}/nemo-mbridge-perf-tp-dp-comm-overlap/sources/DIST/VERSION/. Only the Python files that
gen_messages.SCAN names are extracted (to a temporary directory laid out like site-packages) and read with
gen_messages.scan: the same rules, topics and modes as the catalog, nothing imported from the packages (neither torch
nor Bridge is needed; the standard library only). Python 3.10 to 3.13 write the same file.

The file holds the messages of all those releases, deduplicated: one row per package and normalised message text
(whitespace folded, every field "{}"), carrying the location (file, function, line, package_version) of the newest
release that prints that text and `releases`, every scanned release that prints it ("megatron-core 0.12.3", ...).
Texts the 0.6.2 catalog already has (same package, same normalised text) are left out, and so are messages without
text (bare asserts and raises: no text to match a log line against). A row has the
fields of a catalog entry (mbridge_overlap/diagnose/messages.py `_entry` reads it unchanged; ids are
variant.SHORT.HASH of the package and the normalised text) plus `releases`, and `current`: the id of the 0.6.2
catalog entry whose text is nearest (difflib ratio >= CURRENT_RATIO in the same file, else >= CURRENT_RATIO_ELSEWHERE
in the package), where one is: most likely what the wording became (a hint, not a proof). The header names every
archive scanned, with its sha256, and the releases that could not be read.

--check regenerates in memory (downloading what the cache lacks, unless --offline) and exits 1 when the committed
file differs; --offline fails with one line when a release is not in the cache; --discover lists, per package, the
newest patch of each minor the index offers (to update RELEASES; it writes nothing). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
import zipfile
from pathlib import Path

sys.dont_write_bytecode = True
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import gen_messages as G  # noqa: E402
from tools import generated  # noqa: E402

G.WHOLE_PACKAGES = False  # only the SCAN files are extracted: a parameter's callers elsewhere are not seen

M = G.M
DATA = ROOT / "mbridge_overlap" / "data"
OUT = DATA / "message_variants.json"
CATALOG_RELEASE = "0.6.2"
CATALOG = DATA / "releases" / CATALOG_RELEASE / "messages.json"
CACHE = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
         / "nemo-mbridge-perf-tp-dp-comm-overlap" / "sources")

# The releases read: the newest patch of every minor the package index offers (yanked ones left out: megatron-core
# 0.18.1 and 0.19.1, megatron-bridge 0.6.1), and for Megatron-Bridge every release. Megatron-Core 0.5-0.7 predate the
# overlap options this skill covers; Transformer Engine has no 2.0 on the index; Megatron-Bridge 0.1 and 0.2 only
# published release candidates (the last of each is read).
RELEASES = {
    "megatron-bridge": ["0.1.0rc4", "0.2.0rc6", "0.3.0", "0.3.1", "0.4.0", "0.4.1", "0.4.2", "0.5.0", "0.5.1",
                        "0.6.0", "0.6.2"],
    "megatron-core": ["0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.3", "0.13.1", "0.14.0", "0.15.3", "0.16.1",
                      "0.17.1", "0.18.2", "0.19.2"],
    "transformer-engine": ["1.9.0.post1", "1.10.0", "1.11.0", "1.12.0", "1.13.0", "2.1.0", "2.2.0", "2.3.0", "2.4.0",
                           "2.5.0", "2.6.0.post1", "2.7.0", "2.8.0", "2.9.0", "2.10.0", "2.11.0", "2.12.0", "2.13.0",
                           "2.14.1", "2.15.0", "2.16.1", "2.17.1", "2.18.0", "2.19.0", "2.20.2"],
}
# The distributions that may hold a package's Python sources, tried in order until one holds MARKER. Transformer
# Engine's `transformer_engine` wheel (pure Python, under 1.5 MB) carries transformer_engine/pytorch/*.py for every
# release read; transformer_engine_torch (an sdist of the torch extension) is the fallback. The CUDA wheels
# (transformer_engine_cu12, hundreds of MB) are never fetched.
DISTS = {
    "megatron-bridge": ["megatron-bridge"],
    "megatron-core": ["megatron-core"],
    "transformer-engine": ["transformer-engine", "transformer-engine-torch"],
}
MARKER = {
    "megatron-bridge": "megatron/bridge/__init__.py",
    "megatron-core": "megatron/core/__init__.py",
    "transformer-engine": "transformer_engine/pytorch/module/base.py",
}
# pip download: wheels are tried for these interpreters (megatron-core < 0.14 has no cp312 wheel, >= 0.17 only
# cp311+), on this platform; then the sdist. --no-deps: nothing else is fetched.
PY_VERSIONS = ("3.12", "3.11", "3.10")
PLATFORM = "manylinux_2_28_x86_64"
ARCHIVES = (".whl", ".tar.gz", ".zip")
# How near (difflib ratio of the normalised texts) a catalog entry must be to be named as what a variant became:
# one in the same file, else one anywhere in the package (messages move: grad_comm_pgs checks went from
# distributed_data_parallel.py to process_groups_config.py). A hint for the reader, not a proof of identity.
CURRENT_RATIO = 0.75
CURRENT_RATIO_ELSEWHERE = 0.85


def log(msg: str) -> None:
    print(f"gen_variant_messages: {msg}", file=sys.stderr, flush=True)


def vkey(version: str) -> tuple:
    """Version order: numeric parts, then pre-releases (rcN) before the release, post-releases after."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)(?:(rc|a|b)(\d+))?(?:\.post(\d+))?", version)
    if not m:
        return (999, version)
    major, minor, patch, pre, pre_n, post = m.groups()
    return (int(major), int(minor), int(patch), (0, int(pre_n)) if pre else (1, 0), int(post or 0))


# -- downloads ----------------------------------------------------------------------------------------------------
class Missing(Exception):
    pass


def cached(dist: str, version: str) -> Path | None:
    d = CACHE / dist / version
    found = sorted(p for p in d.glob("*") if p.is_file() and p.name.endswith(ARCHIVES)) if d.is_dir() else []
    return found[0] if found else None


def pip_download(pip: list[str], dist: str, version: str) -> tuple[Path | None, str]:
    """Download DIST==VERSION (no dependencies) into the cache: a wheel for one of PY_VERSIONS, else the sdist.
    (archive or None, why not)."""
    dest = CACHE / dist / version
    dest.parent.mkdir(parents=True, exist_ok=True)
    attempts = [[*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", pv, "--platform", PLATFORM,
                 f"{dist}=={version}"] for pv in PY_VERSIONS]
    attempts.append([*pip, "download", "--no-deps", "--no-binary=:all:", f"{dist}=={version}"])
    why = ""
    for cmd in attempts:
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{version}-") as tmp:
            proc = subprocess.run([*cmd, "-d", tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            got = [p for p in Path(tmp).iterdir() if p.name.endswith(ARCHIVES)]
            if proc.returncode == 0 and len(got) == 1:
                dest.mkdir(parents=True, exist_ok=True)
                target = dest / got[0].name
                shutil.move(str(got[0]), target)
                return target, ""
            lines = [ln.strip() for ln in (proc.stderr or "").splitlines()
                     if ln.strip() and "is ignored: it is neither a file nor a directory" not in ln]
            why = lines[-1] if lines else f"pip exited {proc.returncode}"
    return None, why


def archive_of(pkg: str, version: str, pip: list[str], offline: bool) -> tuple[str, Path]:
    """(distribution, archive) of a release that holds MARKER[pkg]; Missing(reason) if none can be had."""
    reasons = []
    for dist in DISTS[pkg]:
        path = cached(dist, version)
        if path is None:
            if offline:
                reasons.append(f"{dist} {version} is not in the cache ({CACHE / dist / version})")
                continue
            log(f"downloading {dist}=={version}")
            path, why = pip_download(pip, dist, version)
            if path is None:
                reasons.append(f"{dist} {version}: {why}")
                continue
        if MARKER[pkg] in set(members(pkg, path)):
            return dist, path
        reasons.append(f"{dist} {version}: {path.name} holds no {MARKER[pkg]}")
    raise Missing("; ".join(reasons))


# -- extraction ---------------------------------------------------------------------------------------------------
def glob_rx(pattern: str) -> re.Pattern:
    """A SCAN glob as Path.glob reads it: `**` any number of directories, `*` and `?` within one name."""
    out = []
    for i, part in enumerate(pattern.split("/")):
        last = i == len(pattern.split("/")) - 1
        if part == "**":
            out.append("(?:[^/]+/)*")
            continue
        rx = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part)
        out.append(rx + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z")


_RX: dict = {}


def wanted(pkg: str, rel: str) -> bool:
    if pkg not in _RX:
        _RX[pkg] = [glob_rx(p) for p, _ in G.SCAN[pkg]] + [glob_rx(MARKER[pkg])]
    return rel.endswith(".py") and any(rx.match(rel) for rx in _RX[pkg])


def _names(path: Path) -> list[str]:
    if path.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as zf:
            return [i.filename for i in zf.infolist() if not i.is_dir()]
    with tarfile.open(path) as tf:
        return [m.name for m in tf.getmembers() if m.isfile()]


def _rel(pkg: str, name: str) -> str | None:
    """A member's path relative to site-packages: the part from the package's top directory on (an sdist nests it
    under name-version/)."""
    top = PACKAGES_TOP[pkg]
    parts = name.split("/")
    for i in range(min(3, len(parts))):
        if parts[i] == top:
            return "/".join(parts[i:])
    return None


PACKAGES_TOP = {pkg: marker.split("/")[0] for pkg, (marker, _) in G.PACKAGES.items()}


def members(pkg: str, path: Path) -> dict:
    """{relative path: member name} of the wanted Python files in an archive."""
    out = {}
    for name in _names(path):
        rel = _rel(pkg, name)
        if rel and wanted(pkg, rel) and ".." not in rel.split("/"):
            out.setdefault(rel, name)
    return out


def extract(pkg: str, path: Path, root: Path) -> int:
    want = members(pkg, path)
    if path.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as zf:
            for rel, name in want.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(zf.read(name))
    else:
        with tarfile.open(path) as tf:
            for rel, name in want.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(tf.extractfile(name).read())
    return len(want)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def scan_release(pkg: str, version: str, path: Path) -> tuple[list, dict]:
    """gen_messages.scan over the release's extracted files; a file this Python cannot parse is left out (named)."""
    unparsed = []
    with tempfile.TemporaryDirectory(prefix="mbo-variants-") as tmp:
        root = Path(tmp)
        extract(pkg, path, root)
        while True:
            try:
                with warnings.catch_warnings():  # old sources' invalid escapes ("\\i") are not this tool's business
                    warnings.simplefilter("ignore", SyntaxWarning)
                    rows, info = G.scan(pkg, root, version)
                break
            except SyntaxError as exc:
                bad = Path(exc.filename or "")
                target = root / bad if not bad.is_absolute() else bad
                if not target.is_file():
                    raise
                log(f"  {pkg} {version}: cannot parse {bad} ({exc.msg}); left out")
                unparsed.append(bad.as_posix())
                target.unlink()
    info = {"files": len(info["files"]), "missing": info["missing"], "skipped_non_literal": info["skipped_non_literal"]}
    if unparsed:
        info["unparsed"] = sorted(unparsed)
    return rows, info


# -- rows ---------------------------------------------------------------------------------------------------------
def norm_of(pattern: str) -> str:
    """A generated pattern's text, whitespace folded, every field "{}" (gen_messages.normalised)."""
    tokens = M.tokens_of(pattern)
    if tokens is None:
        raise ValueError(f"pattern not in generated form: {pattern!r}")
    return " ".join("".join("{}" if isinstance(t, M.Group) else t for t in tokens).split())


def nearest(norm: str, candidates: list, least: float) -> tuple[float, str | None]:
    """(ratio, id) of the candidate (normalised text, id) nearest in text, if at least `least`."""
    best = (0.0, None)
    sm = difflib.SequenceMatcher(autojunk=False)
    sm.set_seq2(norm)
    for text, cid in candidates:
        sm.set_seq1(text)
        if sm.real_quick_ratio() < max(least, best[0]) or sm.quick_ratio() < max(least, best[0]):
            continue
        r = sm.ratio()
        if r > best[0] or (r == best[0] and best[1] is not None and cid < best[1]):
            best = (r, cid)
    return best if best[0] >= least else (0.0, None)


def build(scans: dict, catalog: dict) -> tuple[list, dict]:
    """Rows of message_variants.json from {pkg: {version: rows}}, leaving out what the catalog has."""
    known = set()
    by_pkg: dict[str, list] = {}
    by_file: dict[tuple, list] = {}
    for e in catalog["entries"]:
        if e.get("pattern") is None:
            continue
        n = norm_of(e["pattern"])
        known.add((e["package"], n))
        by_pkg.setdefault(e["package"], []).append((n, e["id"]))
        by_file.setdefault((e["package"], e["file"]), []).append((n, e["id"]))
    groups: dict[tuple, list] = {}
    stats = {"without_text": 0, "in_catalog": 0}
    for pkg, releases in scans.items():
        for version, rows in releases.items():
            for e in rows:
                if e.get("pattern") is None:
                    stats["without_text"] += 1
                    continue
                key = (pkg, norm_of(e["pattern"]))
                if key in known:
                    stats["in_catalog"] += 1
                    continue
                groups.setdefault(key, []).append((vkey(version), version, e))
    out = []
    for (pkg, norm), found in groups.items():
        newest = max(v for v, _, _ in found)
        # the newest release's occurrence (the first in file order where it prints the text more than once)
        e = min((e for v, _, e in found if v == newest), key=lambda e: (e["file"], e["line"], e["id"]))
        versions = sorted({(v, ver) for v, ver, _ in found})
        row = {k: v for k, v in e.items()}
        short = G.PACKAGES[pkg][1]
        digest = hashlib.sha1((pkg + "\0" + norm).encode()).hexdigest()[:10]
        row["id"] = f"variant.{short}.{digest}"
        row["releases"] = [f"{pkg} {ver}" for _, ver in versions]
        _, cid = nearest(norm, by_file.get((pkg, e["file"]), []), CURRENT_RATIO)
        if cid is None:
            _, cid = nearest(norm, by_pkg.get(pkg, []), CURRENT_RATIO_ELSEWHERE)
        if cid is not None:
            row["current"] = cid
        out.append(row)
    ids = [r["id"] for r in out]
    if len(ids) != len(set(ids)):
        raise SystemExit("gen_variant_messages: variant id collision; lengthen the hash")
    order = {p: i for i, p in enumerate(G.PACKAGES)}
    out.sort(key=lambda r: (order[r["package"]], r["file"], r["function"], r["line"], r["id"]))
    return out, stats


def counts_of(rows: list) -> dict:
    by: dict = {"rows": len(rows), "by_package": {}}
    for r in rows:
        p = by["by_package"].setdefault(r["package"], {"rows": 0, "kind": {}, "topic": {}, "with_current": 0})
        p["rows"] += 1
        p["kind"][r["kind"]] = p["kind"].get(r["kind"], 0) + 1
        p["topic"][r["topic"]] = p["topic"].get(r["topic"], 0) + 1
        p["with_current"] += "current" in r
    return by


def generate(pip: list[str], offline: bool) -> tuple[str, dict]:
    catalog = json.loads(CATALOG.read_text(encoding="utf-8"))
    scans: dict = {}
    sources: dict = {}
    scanned: dict = {}
    failed: dict = {}
    for pkg, versions in RELEASES.items():
        scans[pkg] = {}
        for version in versions:
            try:
                dist, path = archive_of(pkg, version, pip, offline)
            except Missing as exc:
                if offline:
                    raise SystemExit(f"gen_variant_messages: --offline: {exc}") from None
                log(f"FAILED {pkg} {version}: {exc}")
                failed.setdefault(pkg, {})[version] = str(exc)
                continue
            log(f"scanning {pkg} {version} ({path.name})")
            rows, info = scan_release(pkg, version, path)
            scans[pkg][version] = rows
            sources.setdefault(pkg, []).append({"version": version, "distribution": dist, "archive": path.name,
                                                "sha256": sha256(path)})
            scanned.setdefault(pkg, {})[version] = {**info, "messages": len(rows)}
    rows, stats = build(scans, catalog)
    for r in rows:
        if r["pattern"] is not None:
            re.compile(r["pattern"])
    header = {
        "schema_version": M.SCHEMA_VERSION,
        "release": "variants",
        "catalog": f"releases/{CATALOG_RELEASE}/messages.json",
        "catalog_packages": catalog["header"].get("packages"),
        "generated_by": "tools/gen_variant_messages.py",
        "sources": sources,
        "failed": failed,
        "scanned": scanned,
        "left_out": stats,
        "counts": counts_of(rows),
    }
    text = "".join([
        '{"header": ', json.dumps(header, sort_keys=True, separators=(",", ":")), ",\n",
        '"entries": [\n', ",\n".join(json.dumps(r, sort_keys=True, separators=(",", ":")) for r in rows), "\n]}\n",
    ])
    M.Catalog(json.loads(text))  # the matcher reads it
    return text, header


def summary(header: dict, size: int) -> str:
    lines = [f"{header['counts']['rows']} variant rows, {size / 1e6:.2f} MB; left out: "
             f"{header['left_out']['in_catalog']} messages the catalog has, {header['left_out']['without_text']} "
             "without text"]
    for pkg, src in header["sources"].items():
        c = header["counts"]["by_package"].get(pkg, {"rows": 0, "with_current": 0})
        lines.append(f"  {pkg}: {len(src)} releases scanned ({', '.join(s['version'] for s in src)}); "
                     f"{c['rows']} rows, {c['with_current']} with a current entry")
    for pkg, fails in header["failed"].items():
        for version, why in fails.items():
            lines.append(f"  FAILED {pkg} {version}: {why}")
    return "\n".join(lines)


def discover(pip: list[str]) -> int:
    """The newest patch of each minor the index offers, per package, from the oldest minor RELEASES reads on (the
    union over PY_VERSIONS: megatron-core 0.8 and 0.9 have only cp310/cp311 wheels, 0.17+ only cp311+)."""
    for pkg in RELEASES:
        dist = DISTS[pkg][0]
        versions: set = set()
        for pv in PY_VERSIONS:
            proc = subprocess.run([*pip, "index", "versions", dist, "--pre", "--python-version", pv],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            m = re.search(r"Available versions: (.*)", proc.stdout)
            versions |= set(m.group(1).split(", ")) if m else set()
        floor = vkey(RELEASES[pkg][0])[:2]
        newest: dict = {}
        for v in versions:
            k = vkey(v)
            if k[0] == 999 or k[:2] < floor:
                continue
            if k[:2] not in newest or k > vkey(newest[k[:2]]):
                newest[k[:2]] = v
        offered = [newest[k] for k in sorted(newest)]
        print(f"{pkg}: index {offered}")
        print(f"{'':{len(pkg)}}  not in RELEASES: {[v for v in offered if v not in RELEASES[pkg]]}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    ap.add_argument("--offline", action="store_true", help="use the cache only; fail if a release is not there")
    ap.add_argument("--discover", action="store_true", help="list what the index offers per minor; write nothing")
    ap.add_argument("--pip", default=f"{sys.executable} -m pip", help="the pip command (default: %(default)s)")
    args = ap.parse_args(argv)
    if sys.version_info < (3, 10):
        raise SystemExit("gen_variant_messages: needs Python >= 3.10")
    pip = args.pip.split()
    if args.discover:
        return discover(pip)
    text, header = generate(pip, args.offline)
    rel = OUT.relative_to(ROOT)
    status = generated.check_or_write(OUT, text, args.check, wrote=f"wrote {rel}",
                                      verdict=lambda same: f"{'message variants match' if same else 'message variants DIFFER from'} {rel}")
    print(summary(header, len(text.encode())))
    return status


if __name__ == "__main__":
    sys.exit(main())
