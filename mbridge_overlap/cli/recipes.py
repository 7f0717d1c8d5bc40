"""`recipes`: Bridge's shipped recipes with their effective overlap state."""

from __future__ import annotations

from .. import api
from ..output import text
from ..upstream import releases
from . import options

HELP = "Bridge's shipped recipes with their effective overlap state"


def add_arguments(p) -> None:
    p.add_argument("--model", help="model family, or part of it (llama3_70b, qwen3)")
    p.add_argument("--gpu", help="GPU type: " + ", ".join(releases.gpu_types()))
    p.add_argument("--gpus", type=options.gpu_count, help="GPU count in the name")
    p.add_argument("--task", help=", ".join(releases.data()["tasks"]))
    p.add_argument("--precision", help=", ".join(releases.data()["precisions"]) + " (or as the name writes it: fp8cs, ...)")
    p.add_argument("--name", help="part of the function name")
    p.add_argument("--package", help="recipes or perf_recipes")
    options.release_flag(p)
    options.output_flags(p)


def run(args) -> int:
    listing = api.recipes(model=args.model, gpu=args.gpu, gpus=args.gpus, task=args.task, precision=args.precision, name=args.name,
                          package=args.package, bridge_version=args.bridge_version)
    d = listing.to_dict()
    options.emit(args, options.to_json(d) if args.format == "json" else text.recipes(d))
    return 0
