"""`presets`: the tuned TP userbuffers presets and what each was tuned for."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "the tuned TP userbuffers presets and what each was tuned for"


def add_arguments(p) -> None:
    options.release_flag(p)
    options.output_flags(p)


def run(args) -> int:
    d = api.presets(args.bridge_version)
    options.emit(args, options.to_json(d) if args.format == "json" else text.presets(d["presets"]))
    return 0
