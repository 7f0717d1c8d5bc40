"""`lint`: every finding for a run config or a shipped recipe, and the overlap it left on the table."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "every finding for a run config or a shipped recipe, and the overlap it left on the table"


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="*", metavar="[CONFIG] [KEY=VALUE]",
                   help="run_config.yaml, a checkpoint or iteration directory holding one, or an override file; then overrides")
    options.scenario_flags(p)
    options.budget_flags(p)
    options.output_flags(p)


def run(args) -> int:
    paths, overrides = options.split_inputs(args.inputs, files=1)
    result = api.lint(paths[0] if paths else None, overrides, **options.budget_inputs(args), **options.inputs(args, gpus=args.gpus))
    d = result.to_dict()
    options.emit(args, options.to_json(d) if args.format == "json" else text.lint(d))
    return 1 if result.errors else 0
