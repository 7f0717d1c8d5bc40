"""`suites`: the upstream overlap test suites verify runs, with the pass counts it requires."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "the upstream overlap test suites verify runs, with the pass counts it requires"


def add_arguments(p) -> None:
    options.output_flags(p)


def run(args) -> int:
    d = api.suites()
    options.emit(args, options.to_json(d) if args.format == "json" else text.suites(d))
    return 0
