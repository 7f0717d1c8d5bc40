"""`anchors`: where the Bridge code the rules cite is now (file and line range)."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "where the Bridge code the rules cite is now (file and line range)"


def add_arguments(p) -> None:
    p.add_argument("--mbridge-src", metavar="PATH", help="a Megatron-Bridge source checkout (default: the installed package)")
    options.output_flags(p)


def run(args) -> int:
    d = api.anchors(args.mbridge_src)
    options.emit(args, options.to_json(d) if args.format == "json" else text.anchors(d))
    return 0 if d["ok"] else 1
