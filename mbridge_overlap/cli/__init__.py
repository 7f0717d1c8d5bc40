"""The command line: one module per verb (its options and a run(args) that calls the API function of the same name),
and main(), which parses the arguments of the verb asked for and turns every error into one line and a status.

Exit status: 0 an answer; 1 an answer with an error finding, a failed check or a cause found; 2 bad input or usage;
130 Ctrl-C; 128 + N for SIGTERM / SIGHUP.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .options import PROG
# verb -> its module in this package, in the order --help lists them
VERBS = {
    "resolve": "resolve", "plan": "plan", "budget": "budget", "lint": "lint", "diff": "diff", "diagnose": "diagnose", "presets": "presets",
    "explain": "explain", "releases": "releases", "anchors": "anchors", "recipes": "recipes", "suites": "suites",
    "check-manifest": "check_manifest", "trace": "trace",
}
REQUIRED_PACKAGES = (("yaml", "pyyaml"), ("jinja2", "jinja2"))  # module, what pip installs it as


def verb_module(verb: str):
    return importlib.import_module(f"{__name__}.{VERBS[verb]}")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line. With `argv`, only the verb it names gets its arguments (without one, or naming no verb,
    every verb does, for --help and the usage error)."""
    from .options import Parser

    asked = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    parser = Parser(prog=PROG, description="Megatron-Bridge TP/DP/PP communication overlap: what Bridge will do, and what to set.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog=PROG)
    for verb in VERBS:
        if asked in VERBS and verb != asked:
            continue
        module = verb_module(verb)
        module.add_arguments(sub.add_parser(verb, help=module.HELP))
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments, a verb's positionals (logs, KEY=VALUE overrides) taken wherever they stand among its options:
    `diagnose LOG --recipe R KEY=VALUE` as well as `diagnose LOG KEY=VALUE --recipe R` (argparse alone stops at the
    first option after them)."""
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    sub = _subparser(parser, args.command)
    listed = [a for a in (sub._actions if sub else ()) if not a.option_strings and a.nargs == "*"]
    if not listed or any(x.startswith("-") for x in extra):
        (sub or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    getattr(args, listed[0].dest).extend(extra)
    return args


def _subparser(parser: argparse.ArgumentParser, command: str | None):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return None


def main(argv: list[str] | None = None) -> int:
    """Run one command (sys.argv[1:] by default); its exit status."""
    from importlib.util import find_spec

    missing = [pip for module, pip in REQUIRED_PACKAGES if find_spec(module) is None]
    if missing:
        print(f"{PROG}: this Python ({sys.executable}) lacks {' and '.join(missing)}: "
              f"{sys.executable} -m pip install {' '.join(missing)}", file=sys.stderr)
        return 2
    from .. import safeio
    from .options import say

    _terminate_on_signals()
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        safeio.drop_stdout()
        say(f"{PROG}: interrupted")
        return 130


def _terminate_on_signals() -> None:
    """SIGTERM and SIGHUP (a harness's time-out, a closed terminal) end the command as SystemExit(128 + signal) in
    the main thread, so every `finally` runs: no temporary --output file is left, worker processes are stopped."""
    import signal

    def handler(signum, frame):
        signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once
        raise SystemExit(128 + signum)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), handler)


def _main(argv: list[str]) -> int:
    from .. import safeio
    from ..errors import UsageError
    from .options import say

    parser = build_parser(argv)
    try:
        args = _parse(parser, argv)
    except SystemExit as exc:  # argparse printed its one usage line (or the help it was asked for)
        return int(exc.code or 0)
    except UsageError as exc:  # --help into a closed or full stdout
        say(f"{PROG}: error: {safeio.message(exc)}")
        return exc.exit_code
    except BrokenPipeError:  # --help into a pipe whose reader went away: nothing to report, as for an answer
        safeio.drop_stdout()
        return 0
    if not args.command:
        say(f"{PROG}: error: a command is required: {', '.join(VERBS)} (see --help)")
        return 2
    empty = _empty_values(parser, args)
    if empty:  # a flag's default is what leaving it out gives; an argument has none (fuzzO F8: explain '')
        say(f"{PROG} {args.command}: error: {safeio.message(empty)}: empty"
            + ("; leave it out for the default" if empty.startswith("-") else ""))
        return 2
    try:
        return verb_module(args.command).run(args)
    except UsageError as exc:
        say(f"{PROG} {args.command}: error: {safeio.message(exc)}")
        return exc.exit_code
    except BrokenPipeError:
        safeio.drop_stdout()
        return 0
    except MemoryError:
        say(f"{PROG} {args.command}: error: out of memory (an input too large for this process's memory limit)")
        return 2
    except OSError as exc:  # a read or write the command did not expect to fail: still one line, naming the file
        where = exc.filename or "output"
        say(f"{PROG} {args.command}: error: {safeio.message(f'{where}: {safeio.reason(exc)}')}")
        return 2


def _empty_values(parser: argparse.ArgumentParser, args) -> str | None:
    """The flag (or argument) given an empty value: an empty --gpu, --output or file name is a mistake, never "the
    default" (which is what leaving the option out means)."""
    for action in _actions(parser, args):
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            return action.option_strings[0] if action.option_strings else action.metavar or action.dest
    return None


def _actions(parser: argparse.ArgumentParser, args):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                yield from _actions(chosen, args)
        else:
            yield action
