"""Fill the generated blocks of the hand-written pages (README.md, SKILL.md, references/schemas/README.md) from the data:
every count or fact in their prose that restates the data (the recipe catalog, the release data, the suites' pass
counts, the messages catalog, the Bridge venv's pins) is a block, so it cannot drift from it (no Bridge needed):

    python3 tools/gen_docs.py [--check]

A block is `<!-- generated:NAME -->TEXT<!-- /generated -->` (on one line or over several); NAME is one of BLOCKS
below, and a page may hold one several times. SKILL.md's front matter cannot hold comments: its `verified-against`
and `releases` values are written whole (FRONT_MATTER). --check compares with the committed pages (exit 1 naming
each stale block); tools/gen_all.py runs it with every other generator's check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mbridge_overlap.upstream import catalog, releases  # noqa: E402
from mbridge_overlap.contract import SCHEMA_VERSION  # noqa: E402
from tools import generated  # noqa: E402

PAGES = ("README.md", "SKILL.md", "references/schemas/README.md")
BLOCK = re.compile(r"<!-- generated:([a-z0-9_]+) -->(.*?)<!-- /generated -->", re.S)


def _and(items) -> str:
    items = list(items)
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _default() -> str:
    return releases.default_version()


def _release(version: str) -> dict:
    return releases.data()["releases"][version]


def _checked() -> list[str]:
    """The releases run against installed packages (releases.yaml's `checked`), newest first."""
    return sorted((v for v, r in releases.data()["releases"].items() if r.get("checked")), key=releases.version_key, reverse=True)


def _pins() -> dict:
    """The Bridge venv's pins (scripts/requirements-bridge.txt): distribution name -> version."""
    out = {}
    for line in (ROOT / "scripts" / "requirements-bridge.txt").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;#]+)", line.strip())
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def _functions(version: str) -> list:
    return [e for e in catalog.entries(version) if not e.get("alias_of")]


def recipe_functions() -> str:
    return f"{len(_functions(_default())):,}"


def catalog_counts() -> str:
    out = []
    for version in sorted(catalog.versions(), key=releases.version_key, reverse=True):
        names, functions = len(catalog.entries(version)), len(_functions(version))
        out.append(f"{version}: {names:,} public names, {functions:,} functions" if names != functions else f"{version}: {functions:,}")
    return "; ".join(out)


def message_counts() -> str:
    version = _default()
    with open(releases.DATA_DIR / "releases" / version / "messages.json", encoding="utf-8") as fh:
        counts = json.load(fh)["header"]["counts"]
    by = counts["by_package"]
    return (f"{version}: {by['megatron-bridge']['entries']:,}, {by['megatron-core']['entries']:,} and "
            f"{by['transformer-engine']['entries']:,}, plus {counts['native']:,}")


def verified_packages() -> str:
    version = _default()
    r = _release(version)
    return f"megatron-bridge {version}, megatron-core {r['megatron_core']} and Transformer Engine {r['transformer_engine']}"


def other_releases() -> str:
    others = [v for v in _checked() if v != _default()]
    return " or ".join([f"`--release {others[0]}`"] + [f"`{v}`" for v in others[1:]])


def other_megatron_core() -> str:
    return ", ".join(f"{_release(v)['megatron_core']} for {v}" for v in _checked() if v != _default())


def nemo_run() -> str:
    return _pins()["nemo-run"]


def _suite_rows() -> list:
    from mbridge_overlap.upstream.suites import expected_counts

    return expected_counts()["expected"]


def suite_counts() -> str:
    """The default release's pass counts, with the upstream test files they were measured on."""
    version = _default()
    rows = [r for r in _suite_rows() if r["bridge"] == version]
    files = sorted({r["upstream"][0] for r in rows})
    counts = _and(f"`{r['suite']}` {r['passed']} passed" for r in rows)
    return f"with the {', '.join(files)} test files against megatron-bridge {version}, {counts}"


def suite_counts_by_release() -> str:
    """Every checked release's pass counts: the default release's by suite, the others grouped where they agree."""
    rows, version = _suite_rows(), _default()
    suites = [r["suite"] for r in rows if r["bridge"] == version]
    out = _and(f"`{r['suite']}` {r['passed']} passed" for r in rows if r["bridge"] == version) + f" on {version}"
    groups: dict = {}
    for other in (v for v in _checked() if v != version):
        counts = tuple(next((r["passed"] for r in rows if r["bridge"] == other and r["suite"] == s), None) for s in suites)
        groups.setdefault(counts, []).append(other)
    for counts, versions in groups.items():
        out += f", {_and(str(c) for c in counts)} on {_and(sorted(versions, key=releases.version_key))}"
    return out


def conformance_cases() -> str:
    from mbridge_overlap.bridge import verify

    return f"{verify.parser().get_default('cases'):,}"


def newer_releases() -> str:
    return ", ".join(sorted(releases.data()["newer_releases"], key=releases.version_key))


def default_release() -> str:
    return _default()


def schema_version() -> str:
    return str(SCHEMA_VERSION)


HOSTILE = {  # the hostile suites (tests/hostile) and what README calls their inputs
    "test_config_hostile": "config inputs", "test_round_two": "round-two cases",
    "test_trace_hostile": "trace inputs", "test_diagnose_hostile": "logs for diagnose", "test_round_three": "round-three cases",
}


def hostile_counts() -> str:
    """The hostile suites' cases by class (each suite's CASES), imported from tests/hostile."""
    import importlib

    sys.path[:0] = [str(ROOT / "tests" / "hostile"), str(ROOT / "tests")]  # as pytest finds their kits
    out = []
    for module, what in HOSTILE.items():
        cases = importlib.import_module(module).CASES
        classes = ", ".join(f"{name.replace('_', ' ')} {n:,}" for name, n in cases.items())
        out.append(f"{sum(cases.values()):,} {what} ({classes})")
    return "; ".join(out)


BLOCKS = {f.__name__: f for f in (recipe_functions, catalog_counts, message_counts, verified_packages, other_releases,
                                   other_megatron_core, nemo_run, suite_counts, suite_counts_by_release, conformance_cases,
                                   newer_releases, default_release, schema_version, hostile_counts)}


def _verified_against() -> str:
    version = _default()
    r = _release(version)
    return f"megatron-bridge {version}, megatron-core {r['megatron_core']}, transformer-engine {r['transformer_engine']}"


def _releases_line() -> str:
    table = releases.data()["releases"]
    listed = ", ".join(f"{v} (yanked)" if table[v].get("yanked") else v for v in sorted(table, key=releases.version_key))
    checked = _and(_checked())
    return f"{listed}; {checked} run against installed packages; newer: {_default()}'s rules, unverified"


FRONT_MATTER = {"SKILL.md": {"verified-against": _verified_against, "releases": _releases_line}}


def render(name: str, text: str, values: dict) -> tuple[str, list]:
    """The page with every block filled; (text, [(block, what the page had, what it gets), ...] for each block that
    changed)."""
    changed = []

    def fill(m):
        if m.group(1) not in BLOCKS:
            raise SystemExit(f"{name}: unknown generated block {m.group(1)!r} (known: {', '.join(BLOCKS)})")
        value = values[m.group(1)]
        if m.group(2) != value:
            changed.append((m.group(1), m.group(2), value))
        return f"<!-- generated:{m.group(1)} -->{value}<!-- /generated -->"

    text = BLOCK.sub(fill, text)
    for key, make in FRONT_MATTER.get(name, {}).items():
        head, sep, body = text.partition("\n---\n")
        rx = re.compile(rf'^(  {re.escape(key)}: )"([^"\n]*)"$', re.M)
        m = rx.search(head)
        if not m:
            raise SystemExit(f"{name}: no front-matter key {key!r}")
        value = make()
        if m.group(2) != value:
            changed.append((key, m.group(2), value))
        text = head[:m.start(2)] + value + head[m.end(2):] + sep + body
    return text, changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed pages instead of writing them")
    args = ap.parse_args(argv)
    values = {name: make() for name, make in BLOCKS.items()}
    stale = []  # each block that changes, as the verdict names it

    def pages():
        for name in PAGES:
            path = ROOT / name
            old = path.read_text(encoding="utf-8")
            text, changed = render(name, old, values)
            if not BLOCK.search(old) and name not in FRONT_MATTER:
                raise SystemExit(f"{name}: no generated block")
            stale.extend(f"{name} ({block}: {was.strip()!r} -> {now!r})" for block, was, now in changed)
            yield path, text

    generated.check_or_write_all(pages(), args.check, changed_only=True, wrote=lambda path: f"wrote {path.relative_to(ROOT)}")
    if not args.check:
        return 0
    return generated.verdict(stale, "out of date: " + "; ".join(stale) + " (run tools/gen_docs.py)", "generated blocks up to date")


if __name__ == "__main__":
    sys.exit(main())
