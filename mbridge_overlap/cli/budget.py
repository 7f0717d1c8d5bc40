"""`budget`: milliseconds per iteration of communication per parallel dimension, and what each overlap setting hides."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "communication per iteration per parallel dimension (ms), and what each overlap setting hides"


def add_arguments(p) -> None:
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Bridge-style dotted overrides, e.g. train.global_batch_size=512")
    p.add_argument("--config", metavar="FILE", help="a saved run_config.yaml or an override YAML, applied before the overrides")
    options.budget_flags(p, models=_models())
    options.scenario_flags(p)
    options.output_flags(p)


def _models() -> list:
    from ..budget import shape

    return sorted(shape.models())


def run(args) -> int:
    result = api.budget(options.overrides_of(args.overrides), config=args.config, **options.budget_inputs(args),
                        **options.inputs(args, gpus=args.gpus))
    d = result.to_dict()
    options.emit(args, options.to_json(d) if args.format == "json" else text.budget(d))
    return 0
