"""`resolve`: the effective overlap settings Bridge will use for a requested config, and every finding."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "effective overlap settings Bridge will use for a requested config, and every finding"


def add_arguments(p) -> None:
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Bridge-style dotted overrides, e.g. model.sequence_parallel=true")
    p.add_argument("--config", metavar="FILE",
                   help="a saved run_config.yaml (or checkpoint folder) or an override YAML, applied before the overrides")
    options.scenario_flags(p)
    options.budget_flags(p)
    options.output_flags(p)


def run(args) -> int:
    result = api.resolve(options.overrides_of(args.overrides), config=args.config, **options.budget_inputs(args),
                         **options.inputs(args, gpus=args.gpus))
    d = result.to_dict()
    options.emit(args, options.to_json(d) if args.format == "json" else text.resolution(d))
    return 1 if result.errors else 0
