"""`check-manifest`: SKILL.md against the Agent Skills rules."""

from __future__ import annotations

from .. import api, safeio
from . import options

HELP = "validate SKILL.md against the Agent Skills rules"


def add_arguments(p) -> None:
    p.add_argument("path", nargs="?", default=None, help="SKILL.md (default: the one beside this package)")
    p.add_argument("--check-dir", action="store_true", help="also require name to match the folder name, as when installed")
    options.output_flags(p)


def run(args) -> int:
    d = api.check_manifest(args.path, check_directory=args.check_dir)
    problems = d["problems"]
    if args.format == "json":
        options.emit(args, options.to_json(d))
    else:
        options.emit(args, "SKILL.md: ok\n" if not problems else "".join(f"SKILL.md: {safeio.esc(p)}\n" for p in problems))
    return 1 if problems else 0
