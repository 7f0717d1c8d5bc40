"""`trace`: hidden and exposed communication per parallel dimension from profiler traces.

    trace TRACE... [--jobs N]          analyse one job's traces (files, or directories of rank files)
    trace --compare BEFORE AFTER       which dimension's exposed communication grew or shrank, per step
    trace --snippet python|yaml|hydra  turn on Bridge's PyTorch profiler (--steps START-END, --rank R,R|all)

Exit status: 0, or 1 when a truncated trace was analysed with --allow-partial (the output says PARTIAL);
bad input raises UsageError (one line, status 2).
"""

from __future__ import annotations

import argparse

from .. import safeio
from ..errors import UsageError
from ..trace import render, snippet
from . import options

HELP = "hidden and exposed communication per parallel dimension from profiler traces"


EXAMPLES = """examples:
  python -m mbridge_overlap trace torch_profile/                  hidden and exposed time per rank, dimension and step
  python -m mbridge_overlap trace --compare before/ after/        which dimension's exposed time grew or shrank
  python -m mbridge_overlap trace --snippet python --steps 10-13 --rank 0,8   turn on Bridge's PyTorch profiler
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "traces", nargs="*", metavar="TRACE | KEY=VALUE",
        help="PyTorch profiler traces (.json or .json.gz), one file per rank, or directories of them; KEY=VALUE "
        "overrides on --config/--recipe",
    )
    parser.add_argument(
        "--config", metavar="FILE",
        help="the run's run_config.yaml: the communication budget's prediction per dimension beside the measured one "
        "(or --recipe with --gpus and KEY=VALUE overrides)",
    )
    parser.add_argument(
        "--compare", action="store_true",
        help="compare two captures: the two TRACE arguments are BEFORE and AFTER (each a file or a directory)",
    )
    parser.add_argument(
        "--rank", "--ranks", dest="rank", metavar="R[,R...]",
        help="global ranks to analyse (default: all in the traces); with --snippet, the ranks to profile or 'all' "
        "(default 0)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    parser.add_argument(
        "--allow-partial", action="store_true",
        help="analyse what a truncated trace holds instead of refusing it; the output is marked PARTIAL",
    )
    parser.add_argument(
        "--jobs", type=options.jobs, metavar="N",
        help="worker processes analysing rank files at once (default: one per rank, at most one per core and 8; "
        "1: one after another in this process); the report is the same",
    )
    parser.add_argument(
        "--snippet", choices=tuple(snippet.FORMS), metavar="FORM",
        help="print a snippet that turns on Bridge's PyTorch profiler: python, yaml or hydra",
    )
    # the config's inputs (a few of scenario_flags': building them all would load the release data into every trace)
    parser.add_argument("--recipe", type=options.RECIPE, help="with --gpus: the shipped recipe the run used (instead of --config)")
    parser.add_argument("--gpus", type=options.gpu_count, help="with --recipe: " + options.GPUS_HELP)
    parser.add_argument("--gpu", help="with --config/--recipe: the GPU type (default: the recipe's, else h100)")
    options.budget_flags(parser)
    parser.add_argument(
        "--steps", metavar="START-END",
        help=f"with --snippet: Bridge's profile_step_start-profile_step_end, END not recorded (default {snippet.DEFAULT_STEPS})",
    )


def _print(text: str) -> None:
    try:
        safeio.write_stdout(text)
    except UsageError:  # closed or full: drop what stdout still buffers, so that exiting does not fail again
        safeio.drop_stdout()
        raise


def _snippet(args) -> int:
    if args.traces or args.compare or args.jobs or args.config or args.recipe:
        raise UsageError("--snippet takes no traces, --compare, --jobs, --config or --recipe")
    from .. import api

    made = api.trace_snippet(args.snippet, steps=args.steps, ranks=args.rank)
    _print(options.to_json(made, compact_over=None) if args.format == "json" else made["snippet"])
    return 0


def _config_flags(args, overrides) -> None:
    """--model, --shape, --gpu and --gpus describe the run's config: without one they would be ignored (fuzzG G4)."""
    given = [flag for flag, value in (("--model", args.model), ("--shape", args.shape), ("--gpu", args.gpu),
                                      ("--gpus", args.gpus)) if value]
    if given and not (args.config or args.recipe or overrides):
        raise UsageError(f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with --config or --recipe (the run's "
                         "config), not traces alone")


def run(args) -> int:
    if args.snippet:
        return _snippet(args)
    if args.steps:
        raise UsageError("--steps goes with --snippet")
    from .. import api

    ranks = snippet.parse_ranks(args.rank, allow_all=False)
    _config_flags(args, options.split_overrides(args.traces)[1] if not args.compare else {})
    if args.compare and (args.config or args.recipe):
        raise UsageError("--config and --recipe go with the traces of one run, not --compare")
    if args.compare:
        if len(args.traces) != 2:
            raise UsageError(f"--compare takes exactly two traces, BEFORE and AFTER (got {len(args.traces)})")
        result = api.compare_traces(args.traces[0], args.traces[1], ranks=ranks, allow_partial=args.allow_partial,
                                    jobs=args.jobs)
        data = result.to_dict()
        partial = result.before.partial or result.after.partial
        text = render.comparison
    else:
        traces, overrides = options.split_overrides(args.traces)
        if not traces:
            raise UsageError("give at least one trace file or directory (or --snippet FORM)")
        result = api.trace(traces, ranks=ranks, allow_partial=args.allow_partial, jobs=args.jobs, config=args.config,
                           overrides=overrides, **options.budget_inputs(args),
                           **{k: v for k, v in (("recipe", args.recipe), ("gpus", args.gpus), ("gpu", args.gpu)) if v is not None})
        # (the scenario's keywords only where given: their check reads scenario.build, which a trace alone never imports)
        data, partial, text = result.to_dict(), result.partial, render.report
    _print(options.to_json(data, compact_over=None) if args.format == "json" else text(data))
    return 1 if partial else 0
