"""Compile the package's YAML data into the JSON twins the skill loads (mbridge_overlap/data/compiled/):

    python3 tools/gen_compiled_data.py [--check]

Every YAML file under mbridge_overlap/data/ (releases, findings, anchors, fingerprints, presets, suites, each
release's field names, ...) gets data/compiled/<its path>.json: a header line naming the source file, its size and
CRC-32, then the same values as one line of JSON, which loads in about a millisecond where the YAML takes tens. The
YAML stays the source: edit it, then run this (tools/gen_bridge_data.py and gen_release_data.py run it after
writing theirs); a twin whose header does not match its YAML's bytes is never read (the YAML is). --check compares
the twins with what this would write, and reports a twin without its YAML (exit 1 on any difference); tier 1 runs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mbridge_overlap.upstream import releases  # noqa: E402  (pyyaml only)
from tools import generated  # noqa: E402


def sources() -> list[Path]:
    return sorted(p for p in releases.DATA_DIR.rglob("*.yaml") if releases.COMPILED_DIR not in p.parents)


def expected() -> dict[Path, str]:
    return {releases.compiled_path(p): releases.compile_yaml(p) for p in sources()}


def check() -> list[str]:
    """What differs: a twin missing, out of date, or left without its YAML."""
    want = expected()
    problems = [f"{p.relative_to(ROOT)}: missing" if not p.is_file() else f"{p.relative_to(ROOT)}: out of date"
                for p, text in want.items() if not generated.current(p, text)]
    problems += [f"{p.relative_to(ROOT)}: its YAML is gone" for p in sorted(releases.COMPILED_DIR.rglob("*.json")) if p not in want]
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed twins instead of writing them")
    args = ap.parse_args(argv)
    if args.check:
        problems = check()
        said = f"{len(sources())} YAML files"
        return generated.verdict(problems, "\n".join([*(f"gen_compiled_data: {line} (run tools/gen_compiled_data.py)" for line in problems),
                                                      f"compiled data DIFFERS: {said}"]), f"compiled data matches: {said}")
    changed = [t for t in map(releases.write_compiled, sources()) if t is not None]
    stale = [p for p in sorted(releases.COMPILED_DIR.rglob("*.json")) if p not in {releases.compiled_path(s) for s in sources()}]
    for p in stale:
        p.unlink()
    print(f"compiled {len(sources())} YAML files: {len(changed)} written, {len(stale)} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
