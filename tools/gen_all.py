"""Every generator that needs no Bridge, in one run: write everything they write, or check it all at once.

    python3 tools/gen_all.py [--check]

In order (each reads what the ones before write): the JSON twins of the YAML data (gen_compiled_data.py), the recipe
catalogs' indexes (gen_recipe_catalog.py --index), the reference pages (gen_references.py), card.yaml (gen_card.py)
and the generated blocks of README.md, SKILL.md and references/schemas/README.md (gen_docs.py). They run in this one
process, so the data each loads is loaded once. --check runs every check, prints one line per generator and exits 1
when any is out of date (tests/test_generated.py runs it once for the whole tier). The generators that need the
Bridge venv (the catalog itself, release data, field names, run configs, messages, Bridge logs) are tier 2's.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import sys
from pathlib import Path

# gen_recipe_catalog.py re-runs its interpreter unless the hash seed is fixed (its regenerations compare byte for
# byte): fix it here, before it is loaded, so that it is this process that runs on.
if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

SCRIPTS = Path(__file__).resolve().parent
if str(SCRIPTS.parent) not in sys.path:
    sys.path.insert(0, str(SCRIPTS.parent))

from tools import generated  # noqa: E402

# (script, its arguments): in the order they must write
GENERATORS = [
    ("gen_compiled_data.py", []),
    ("gen_recipe_catalog.py", ["--index"]),
    ("gen_references.py", []),
    ("gen_card.py", []),
    ("gen_docs.py", []),
]


def load(script: str):
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), SCRIPTS / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(script: str, args: list[str]) -> tuple[int, str]:
    """A generator's main(args) in this process: (exit status, what it printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = load(script).main(args)
        except SystemExit as exc:  # a generator that stops on bad data
            code = exc.code if isinstance(exc.code, int) else 1
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code)
    return code or 0, out.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="check every generator's output instead of writing it")
    args = ap.parse_args(argv)
    failed = []
    for script, extra in GENERATORS:
        code, printed = run(script, extra + (["--check"] if args.check else []))
        said = " ".join(printed.split()) or ("up to date" if args.check else "nothing to write")
        print(f"{script}: {'ok' if code == 0 else 'OUT OF DATE' if args.check else 'FAILED'}: {said}")
        if code != 0:
            failed.append(script)
    return generated.verdict(failed, f"gen_all: {', '.join(failed)} {'out of date' if args.check else 'failed'} (run python3 tools/gen_all.py)")


if __name__ == "__main__":
    sys.exit(main())
