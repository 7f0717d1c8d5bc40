"""`diagnose`: the overlap cause and fix behind a crashed, hung or slower run's logs."""

from __future__ import annotations

from .. import api
from ..output import text
from . import options

HELP = "the overlap cause and fix behind a crashed, hung or slower run's logs"


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="*", metavar="LOG | KEY=VALUE",
                   help="log files, folders of per-rank logs, or - for standard input; KEY=VALUE overrides on --config/--recipe")
    p.add_argument("--compare", action="store_true", help="two logs, BEFORE and AFTER: the iteration-time change and the config changes")
    p.add_argument("--config", metavar="FILE", help="the run's run_config.yaml (or checkpoint folder): analysed and linked to each cause")
    p.add_argument("--jobs", type=options.jobs, metavar="N",
                   help="worker processes reading the log files (default: every core; 1: this process alone)")
    options.scenario_flags(p)
    options.output_flags(p)


def run(args) -> int:
    logs, overrides = options.split_overrides(args.inputs)
    result = api.diagnose(logs, compare=args.compare, config=args.config, overrides=overrides, jobs=args.jobs,
                          **options.inputs(args, gpus=args.gpus))
    d = result.to_dict()
    options.emit(args, options.to_json(d) if args.format == "json" else text.diagnosis(d))
    return 1 if result.found else 0
