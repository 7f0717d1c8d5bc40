"""`diff`: the overlap-relevant changes between two scenarios (run configs, recipes, GPU counts), with causes, ranked."""

from __future__ import annotations

import os
import re

from .. import api
from ..errors import UsageError
from ..output import text
from . import options

HELP = "the overlap-relevant changes between two scenarios (run configs, recipes, GPU counts), with causes, ranked"


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="*", metavar="[BEFORE AFTER] [KEY=VALUE]",
                   help="the faster and the slower run's configs (files, checkpoint or iteration directories) or shipped recipe names; "
                   "overrides go on AFTER")
    p.add_argument("--recipe-before", type=options.RECIPE, help="BEFORE starts from this recipe")
    p.add_argument("--recipe-after", type=options.RECIPE, help="AFTER starts from this recipe")
    p.add_argument("--gpus", type=options.gpu_count, help="GPU count of both sides, where nothing else gives it")
    p.add_argument("--gpus-before", type=options.gpu_count, help="GPU count of BEFORE")
    p.add_argument("--gpus-after", type=options.gpu_count, help="GPU count of AFTER (diff --recipe R --gpus-after 32: what changes on 32 GPUs)")
    p.add_argument("--before", action="append", default=[], metavar="KEY=VALUE", help="an override on BEFORE (and AFTER, which starts from it)")
    options.scenario_flags(p, gpus=False)
    options.budget_flags(p)
    options.output_flags(p)


def run(args) -> int:
    paths, overrides = options.split_inputs(args.inputs, files=2)
    recipes = [_recipe_name(p) for p in paths]
    if any(recipes):  # a side named by a shipped recipe rather than a file
        if args.recipe or args.recipe_before or args.recipe_after:
            raise UsageError("diff: name the recipes as BEFORE and AFTER, or with --recipe/--recipe-before/--recipe-after, not both")
        args.recipe_before = recipes[0] or args.recipe_before
        args.recipe_after = (recipes[1] if len(recipes) > 1 else None) or args.recipe_after
        paths = [p for p, r in zip(paths, recipes) if not r]
        if len(recipes) > 1 and recipes[0] and not recipes[1]:
            raise UsageError("diff: a recipe BEFORE and a file AFTER: pass the file first with --recipe-after NAME instead")
    before_overrides = options.overrides_of(args.before)
    if len(paths) == 1 and not (overrides or before_overrides or args.gpus_after or args.recipe_after):
        raise UsageError("diff: give BEFORE and AFTER, or one config (or --recipe) with what changes: KEY=VALUE, --gpus-after, --recipe-after")
    result = api.diff(
        paths[0] if paths else None, paths[1] if len(paths) > 1 else None, overrides=overrides, before_overrides=before_overrides,
        recipe_before=args.recipe_before, recipe_after=args.recipe_after, gpus=args.gpus, gpus_before=args.gpus_before,
        gpus_after=args.gpus_after, **options.budget_inputs(args), **options.inputs(args),
    )
    d = result.to_dict()
    options.emit(args, options.to_json(d) if args.format == "json" else text.diff(d))
    return 1 if d["new_errors"] else 0  # AFTER fails where BEFORE did not, as resolve exits 1 on an error


def _recipe_name(token: str) -> str | None:
    """A positional that names no file but reads as a recipe function name: that recipe."""
    named = re.fullmatch(r"(?:(?:megatron\.bridge\.)?(?:recipes|perf_recipes)\.(?:[a-z0-9_]+\.)*)?[a-z0-9][a-z0-9_]*", token)
    return token if named and not os.path.exists(token) else None
