"""Generate data/releases/<version>/flex_builders.json for the installed megatron-bridge: the recipes whose build
calls apply_flex_dispatcher_backend (bridge/flex_builders.py). Run with the Bridge venv's python:

    $(scripts/bridge_env.sh --print-python) tools/gen_flex_builders.py [--check]

--check compares with the shipped file (exit 1 on a difference); the Bridge test tier runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"  # read once when huggingface_hub is imported

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing it")
    args = ap.parse_args(argv)
    from mbridge_overlap.bridge import flex_builders
    from mbridge_overlap.run import flex

    with contextlib.redirect_stdout(sys.stderr):
        data = flex_builders.generate()
    path = flex.data_path(data["bridge_version"])
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    rel = path.relative_to(ROOT)
    if args.check:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        print(f"{'matches' if same else 'DIFFERS from'} {rel}: {len(data['recipes'])} recipes call apply_flex_dispatcher_backend")
        return 0 if same else 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {rel}: {len(data['recipes'])} recipes call apply_flex_dispatcher_backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
