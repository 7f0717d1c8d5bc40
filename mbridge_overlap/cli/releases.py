"""`releases`: per-release facts side by side."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "per-release facts side by side"


def add_arguments(p) -> None:
    options.output_flags(p)


def run(args) -> int:
    table = api.release_table()
    options.emit(args, options.to_json(table) if args.format == "json" else text.releases(table))
    return 0
