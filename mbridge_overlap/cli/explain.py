"""`explain`: the long form of a finding id, with its example."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "the long form of a finding id, with its example"


def add_arguments(p) -> None:
    p.add_argument("id", help="finding id, e.g. TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL")
    options.output_flags(p)


def run(args) -> int:
    d = api.explain(args.id)
    options.emit(args, options.to_json(d) if args.format == "json" else text.explain(d))
    return 0
