"""Generate (or --check) one of the per-release records that are built by importing the installed megatron-bridge:
data/releases/<version>/<record>.json. The tools gen_flex_builders.py and gen_vpp_refused.py call main() with their
record; run them with the Bridge venv's python."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"  # read once when huggingface_hub is imported

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import generated  # noqa: E402

# record -> (the bridge module that generates it, the run module that reads it, what its recipes are)
RECORDS = {
    "flex_builders": ("flex_builders", "flex", "recipes call apply_flex_dispatcher_backend"),
    "vpp_refused": ("vpp_refused", "vpp", "recipes build a provider that refuses VPP"),
}


def main(record: str, doc: str, argv=None) -> int:
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing it")
    args = ap.parse_args(argv)
    maker, reader, what = RECORDS[record]
    generator = importlib.import_module(f"mbridge_overlap.bridge.{maker}")
    with contextlib.redirect_stdout(sys.stderr):
        data = generator.generate()
    path = importlib.import_module(f"mbridge_overlap.run.{reader}").data_path(data["bridge_version"])
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    said = f"{path.relative_to(ROOT)}: {len(data['recipes'])} {what}"
    return generated.check_or_write(path, text, args.check, verdict=lambda same: f"{'matches' if same else 'DIFFERS from'} {said}",
                                    wrote=f"wrote {said}")
