"""Command line: a thin layer over the Python API, one subcommand per verb."""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys

from . import safeio
from .errors import UsageError

PROG = "mbridge-overlap"


class _OnFirstUse:
    """A module imported when a command first uses it: a cold start imports only what the verb asked for needs."""

    def __init__(self, load):
        self._load = load

    def __getattr__(self, name):
        return getattr(self._load(), name)


def _api():
    from . import api

    return api


def _text():
    from . import text

    return text


def _releases():
    from . import releases

    return releases


api, text, releases = _OnFirstUse(_api), _OnFirstUse(_text), _OnFirstUse(_releases)  # a trace loads neither text nor releases


def parse_override(token: str):
    from .request import parse_override as parse

    return parse(token)


def _positive_int(value: str) -> int:
    """An argparse type (argparse names the flag in its message)."""
    if not re.fullmatch(r"[+-]?[0-9]{1,%d}" % safeio.MAX_INT_CHARS, value.strip()):  # int() also takes "８" and "1_0"
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {safeio.shown(value)}")
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {number}")
    return number


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, learning the terminal's width only when it formats: argparse makes one for every
    add_argument (to check the metavar), and the width costs a cold start shutil's import (with zlib, bz2 and lzma)."""

    def __init__(self, prog, *args, **kwargs):
        self._size_later = None
        if len(args) < 3 and "width" not in kwargs:  # (indent_increment, max_help_position, width)
            self._size_later = (prog, args, dict(kwargs))
            kwargs["width"] = 80
        super().__init__(prog, *args, **kwargs)

    def format_help(self):
        if self._size_later:
            prog, args, kwargs = self._size_later
            sized = argparse.HelpFormatter(prog, *args, **kwargs)  # the width and help position argparse itself picks
            self._width, self._max_help_position = sized._width, sized._max_help_position
            self._size_later = None
        return super().format_help()


class _Parser(argparse.ArgumentParser):
    """Bad arguments get one line naming the problem (and --help for more), exit status 2; help goes through the
    same stdout writer as every answer (a closed or full stdout is an error, not a silent exit 0)."""

    def __init__(self, *args, formatter_class=_Formatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {safeio.message(message)} (see --help)\n")

    def print_help(self, file=None):
        if file is None:
            safeio.write_stdout(self.format_help())
        else:
            super().print_help(file)


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


# --- the parser: one table of verbs; only the verb asked for gets its arguments (a cold start builds one) ------------


def _common(p: argparse.ArgumentParser, formats=("text", "json")) -> None:
    p.add_argument("--format", choices=formats, default="text", help="output format (default: text; json for agents)")
    p.add_argument("--output", metavar="PATH", help="write the output to PATH instead of stdout")
    p.add_argument("--force", action="store_true", help="overwrite --output PATH if it exists")


def _release_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bridge-version", metavar="V", help=f"target Megatron-Bridge release (default {releases.default_version()}; "
                   f"one of {', '.join(releases.versions())}, or a newer one, answered unverified)")


_RECIPE = safeio.name_arg(r"^[a-z0-9][a-z0-9_.]*\Z")
_GPUS_HELP = ("total GPU count (world size); default: the saved run config's, else the count in the recipe's name, else the "
              "recipe's smallest layout")


def _scenario_flags(p: argparse.ArgumentParser, gpus: bool = True) -> None:
    """The inputs every verb about a config takes (scenario.build's keywords), with the same defaults everywhere."""
    p.add_argument("--recipe", type=_RECIPE, help="start from this shipped recipe function (see the recipes command) instead of the "
                   "baseline; plan also takes a model family such as llama3_70b (for NCCL_P2P_NET_CHUNKSIZE)")
    if gpus:
        p.add_argument("--gpus", type=_positive_int, help=_GPUS_HELP)
    p.add_argument("--gpu", help="GPU type: " + ", ".join(releases.gpu_types()) + " (default: the recipe's, else h100)")
    p.add_argument("--task", help="training task: " + ", ".join(releases.data()["tasks"]) + " (default: the recipe's, else pretrain)")
    p.add_argument("--no-te", dest="te", action="store_false", help="Transformer Engine not importable")
    p.add_argument("--launcher-env", action="store_true", help="take this shell's environment as the launcher's (its values win over env_vars)")
    m = p.add_argument_group("the machine (defaults from the GPU type and the installed packages; shown under inputs.machine)")
    m.add_argument("--nvlink-domain", type=_positive_int, metavar="N", help="GPUs per NVLink domain (8 on H100/B200/B300 nodes, 72 in an NVL72 rack)")
    m.add_argument("--gpus-per-node", type=_positive_int, metavar="N", help="GPUs per node")
    m.add_argument("--multicast", choices=("yes", "no"), help="CUDA multicast available (driver >= 12.1 on an NVSwitch system; default yes)")
    m.add_argument("--torch-mpi", choices=("yes", "no"), help="torch.distributed has MPI (default: read from the Bridge venv's torch)")
    m.add_argument("--te-version", metavar="V", help="Transformer Engine version (default: the release's pinned one)")
    _release_flag(p)


def _inputs(args, **extra) -> dict:
    yes = {"yes": True, "no": False, None: None}
    machine = {"nvlink_domain": args.nvlink_domain, "gpus_per_node": args.gpus_per_node, "multicast": yes[args.multicast],
               "torch_mpi": yes[args.torch_mpi], "te_version": args.te_version}
    return dict(recipe=args.recipe, gpu=args.gpu, task=args.task, te=args.te, bridge_version=args.bridge_version,
                launcher_env=dict(os.environ) if args.launcher_env else None,
                machine_facts={k: v for k, v in machine.items() if v is not None}, **extra)


def _resolve_args(p):
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Bridge-style dotted overrides, e.g. model.sequence_parallel=true")
    p.add_argument("--config", metavar="FILE",
                   help="a saved run_config.yaml (or checkpoint folder) or an override YAML, applied before the overrides")
    _scenario_flags(p)
    _common(p)


def _plan_args(p):
    for flag in ("--tp", "--pp", "--cp"):
        p.add_argument(flag, type=_positive_int, help=f"{flag[2:].upper()} size (default: the recipe's, else 1)")
    p.add_argument("--vpp", type=_positive_int, help="virtual pipeline size (interleaved schedule; needs --pp > 1)")
    p.add_argument("--precision", help="compute precision: " + ", ".join(releases.data()["precisions"])
                   + " (or as recipe names write them: fp8cs, ...; default: the recipe's, else bf16)")
    p.add_argument("--hidden-size", type=_positive_int, help="model hidden size (to match a tuned TP preset; default: the recipe's, where known)")
    p.add_argument("--seq-length", type=_positive_int, help="sequence length (to match a tuned TP preset; default: the recipe's)")
    p.add_argument("--micro-batch-size", type=_positive_int, help="micro batch size (to match a tuned TP preset; default: the recipe's)")
    p.add_argument("--lora", action="store_true", help="LoRA fine-tuning (LoRA presets)")
    p.add_argument("--moe", action="store_true", default=None, help="an MoE model with expert parallelism (default: from the recipe)")
    p.add_argument("--moe-a2a-overlap", action="store_true",
                   help="turn on MoE all-to-all overlap (comm_overlap.overlap_moe_expert_parallel_comm; Bridge checks its prerequisites)")
    p.add_argument("--moe-flex-backend", help="MoE flex dispatcher backend: " + ", ".join(releases.data()["flex_dispatcher_backends"]))
    p.add_argument("--megatron-fsdp", action="store_true", help="Megatron-FSDP (ddp.use_megatron_fsdp) instead of DDP")
    _scenario_flags(p)
    _common(p, formats=("text", "json", "python", "yaml", "hydra", "env", "env_vars", "nemo_run"))


def _lint_args(p):
    p.add_argument("inputs", nargs="*", metavar="[CONFIG] [KEY=VALUE]",
                   help="run_config.yaml, a checkpoint or iteration directory holding one, or an override file; then overrides")
    _scenario_flags(p)
    _common(p)


def _diff_args(p):
    p.add_argument("inputs", nargs="*", metavar="[BEFORE AFTER] [KEY=VALUE]",
                   help="the faster and the slower run's configs (files, checkpoint or iteration directories); overrides go on AFTER")
    p.add_argument("--recipe-before", type=_RECIPE, help="BEFORE starts from this recipe")
    p.add_argument("--recipe-after", type=_RECIPE, help="AFTER starts from this recipe")
    p.add_argument("--gpus", type=_positive_int, help="GPU count of both sides, where nothing else gives it")
    p.add_argument("--gpus-before", type=_positive_int, help="GPU count of BEFORE")
    p.add_argument("--gpus-after", type=_positive_int, help="GPU count of AFTER (diff --recipe R --gpus-after 32: what changes on 32 GPUs)")
    p.add_argument("--before", action="append", default=[], metavar="KEY=VALUE", help="an override on BEFORE (and AFTER, which starts from it)")
    _scenario_flags(p, gpus=False)
    _common(p)


def _diagnose_args(p):
    p.add_argument("inputs", nargs="*", metavar="LOG | KEY=VALUE",
                   help="log files, folders of per-rank logs, or - for standard input; KEY=VALUE overrides on --config/--recipe")
    p.add_argument("--compare", action="store_true", help="two logs, BEFORE and AFTER: the iteration-time change and the config changes")
    p.add_argument("--config", metavar="FILE", help="the run's run_config.yaml (or checkpoint folder): analysed and linked to each cause")
    _scenario_flags(p)
    _common(p)


def _recipes_args(p):
    p.add_argument("--model", help="model family, or part of it (llama3_70b, qwen3)")
    p.add_argument("--gpu", help="GPU type: " + ", ".join(releases.gpu_types()))
    p.add_argument("--gpus", type=_positive_int, help="GPU count in the name")
    p.add_argument("--task", help=", ".join(releases.data()["tasks"]))
    p.add_argument("--precision", help=", ".join(releases.data()["precisions"]) + " (or as the name writes it: fp8cs, ...)")
    p.add_argument("--name", help="part of the function name")
    p.add_argument("--package", help="recipes or perf_recipes")
    _release_flag(p)
    _common(p)


def _release_args(p):
    _release_flag(p)
    _common(p)


def _explain_args(p):
    p.add_argument("id", help="finding id, e.g. TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL")
    _common(p)


def _anchors_args(p):
    p.add_argument("--mbridge-src", metavar="PATH", help="a Megatron-Bridge source checkout (default: the installed package)")
    _common(p)


def _manifest_args(p):
    p.add_argument("path", nargs="?", default=None, help="SKILL.md (default: the one beside this package)")
    p.add_argument("--check-dir", action="store_true", help="also require name to match the folder name, as when installed")
    _common(p)


def _trace_args(p):
    from .trace import cli as trace_cli

    trace_cli.add_arguments(p)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line. With `argv`, only the verb it names gets a parser (without one, or naming no verb, every verb
    is listed for --help and the usage error); a verb's parser is built once a process (the answer server's too)."""
    asked = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    return _parser_of(asked if asked in VERBS else None, argv is None)


@functools.lru_cache(maxsize=None)
def _parser_of(asked: str | None, every: bool) -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Megatron-Bridge TP/DP/PP communication overlap: what Bridge will do, and what to set.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog=PROG)  # the prog argparse would format usage for
    for name, (help_text, add, _run) in VERBS.items():
        if asked is not None and name != asked:
            continue  # a verb was asked for: the others' parsers are never built
        p = sub.add_parser(name, help=help_text)
        if every or name == asked:
            add(p)
    return parser


def _split_inputs(tokens: list[str], files: int) -> tuple[list[str], dict]:
    """Positional inputs: up to `files` file paths first, then KEY=VALUE overrides (a token with '=' after a dotted
    key, or naming no file, is an override)."""
    paths, overrides = [], {}
    for token in tokens:
        key = token.partition("=")[0]
        if "=" in token and ("." in key or key in ("comm_overlap", "mixed_precision")) and not os.path.exists(token):
            k, v = parse_override(token)
            overrides[k] = v
        elif overrides or len(paths) >= files:
            raise UsageError(f"{safeio.shown(token)}: expected KEY=VALUE here (files come first, at most {files})")
        else:
            paths.append(token)
    return paths, overrides


def _emit(args, payload: str) -> None:
    if args.output is None:
        safeio.write_stdout(payload)
        return
    safeio.write_output(args.output, payload, args.force)
    print(f"wrote {safeio.esc(args.output)}", file=sys.stderr)


def _json(data) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"


def cmd_resolve(args) -> int:
    overrides = dict(parse_override(o) for o in args.overrides)
    result = api.resolve(overrides, config=args.config, **_inputs(args, gpus=args.gpus))
    d = result.to_dict()
    _emit(args, _json(d) if args.format == "json" else text.resolution(d))
    return 1 if result.errors else 0


def cmd_plan(args) -> int:
    result = api.plan(
        tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, precision=args.precision, hidden_size=args.hidden_size,
        seq_length=args.seq_length, micro_batch_size=args.micro_batch_size, lora=args.lora, moe=args.moe,
        moe_a2a_overlap=args.moe_a2a_overlap, moe_flex_dispatcher_backend=args.moe_flex_backend, megatron_fsdp=args.megatron_fsdp,
        **_inputs(args, gpus=args.gpus),
    )
    d = result.to_dict()
    if args.format == "json":
        out = _json(d)
    elif args.format == "text":
        out = text.plan(d)
    elif result.errors:  # no paste-ready snippet of a config that Bridge or Megatron-Core rejects
        for f in result.errors:
            _say(f"{PROG} plan: error: {f.id}: {safeio.message(f.message)}")
        _say(f"{PROG} plan: no {args.format} snippet for a rejected plan; --format text or json shows every finding and its fix")
        return 1
    else:
        lay = d["layout"]
        start = f" on {lay['recipe']}" if lay["recipe"] else ""
        purpose = f"Comm overlap for TP={lay['tp']} PP={lay['pp']} VPP={lay['vpp']} CP={lay['cp']} on {lay['gpus']} {lay['gpu']} GPUs{start}"
        env = {name: rule["value"] for name, rule in d["launch_env"].items()}
        why = {name: rule["why"] for name, rule in d["launch_env"].items()}
        release = result.analysis.scenario.release
        from . import render

        out = render.snippet(args.format, overrides=d["overrides"], env=env, env_why=why, purpose=purpose, release=release.version,
                             env_vars_field=release.env_vars, plugin_args=result.perf_env_plugin_args(),
                             tp_comm_overlap=bool(d["effective"]["model"]["tp_comm_overlap"]))
    _emit(args, out)
    return 1 if result.errors else 0


def cmd_lint(args) -> int:
    paths, overrides = _split_inputs(args.inputs, files=1)
    result = api.lint(paths[0] if paths else None, overrides, **_inputs(args, gpus=args.gpus))
    d = result.to_dict()
    _emit(args, _json(d) if args.format == "json" else text.lint(d))
    return 1 if result.errors else 0


def cmd_diff(args) -> int:
    paths, overrides = _split_inputs(args.inputs, files=2)
    before_overrides = dict(parse_override(o) for o in args.before)
    if len(paths) == 1 and not (overrides or before_overrides or args.gpus_after or args.recipe_after):
        raise UsageError("diff: give BEFORE and AFTER, or one config (or --recipe) with what changes: KEY=VALUE, --gpus-after, --recipe-after")
    result = api.diff(
        paths[0] if paths else None, paths[1] if len(paths) > 1 else None, overrides=overrides, before_overrides=before_overrides,
        recipe_before=args.recipe_before, recipe_after=args.recipe_after, gpus=args.gpus, gpus_before=args.gpus_before,
        gpus_after=args.gpus_after, **_inputs(args),
    )
    d = result.to_dict()
    _emit(args, _json(d) if args.format == "json" else text.diff(d))
    return 0


def cmd_diagnose(args) -> int:
    logs, overrides = _split_logs(args.inputs)
    result = api.diagnose(logs, compare=args.compare, config=args.config, overrides=overrides, **_inputs(args, gpus=args.gpus))
    d = result.to_dict()
    _emit(args, _json(d) if args.format == "json" else text.diagnosis(d))
    return 1 if result.found else 0


def _split_logs(tokens: list[str]) -> tuple[list[str], dict]:
    """Logs and KEY=VALUE overrides, in any order: a token is an override when it reads as one and names no file."""
    logs, overrides = [], {}
    for token in tokens:
        key = token.partition("=")[0]
        if "=" in token and "." in key and "/" not in key and not os.path.exists(token):
            k, v = parse_override(token)
            overrides[k] = v
        else:
            logs.append(token)
    return logs, overrides


def cmd_presets(args) -> int:
    d = api.presets(args.bridge_version)
    _emit(args, _json(d) if args.format == "json" else text.presets(d["presets"]))
    return 0


def cmd_explain(args) -> int:
    d = api.explain(args.id)
    _emit(args, _json(d) if args.format == "json" else text.explain(d))
    return 0


def cmd_releases(args) -> int:
    table = api.release_table()
    _emit(args, _json(table) if args.format == "json" else text.releases(table))
    return 0


def cmd_recipes(args) -> int:
    listing = api.recipes(model=args.model, gpu=args.gpu, gpus=args.gpus, task=args.task, precision=args.precision, name=args.name,
                          package=args.package, bridge_version=args.bridge_version)
    _emit(args, _json(listing.to_dict()) if args.format == "json" else text.recipes(listing.to_dict()))
    return 0


def cmd_suites(args) -> int:
    d = api.suites()
    _emit(args, _json(d) if args.format == "json" else text.suites(d))
    return 0


def cmd_anchors(args) -> int:
    d = api.anchors(args.mbridge_src)
    _emit(args, _json(d) if args.format == "json" else text.anchors(d))
    return 0 if d["ok"] else 1


def cmd_check_manifest(args) -> int:
    d = api.check_manifest(args.path, check_directory=args.check_dir)
    problems = d["problems"]
    if args.format == "json":
        _emit(args, _json(d))
    else:
        _emit(args, "SKILL.md: ok\n" if not problems else "".join(f"SKILL.md: {safeio.esc(p)}\n" for p in problems))
    return 1 if problems else 0


def cmd_trace(args) -> int:
    from .trace import cli as trace_cli

    return trace_cli.run(args)


# name: (help, arguments, command)
VERBS = {
    "resolve": ("effective overlap settings Bridge will use for a requested config, and every finding", _resolve_args, cmd_resolve),
    "plan": ("the overrides that enable every overlap mode a layout can use", _plan_args, cmd_plan),
    "lint": ("every finding for a run config or a shipped recipe, and the overlap it left on the table", _lint_args, cmd_lint),
    "diff": ("the overlap-relevant changes between two scenarios (run configs, recipes, GPU counts), with causes, ranked",
             _diff_args, cmd_diff),
    "diagnose": ("the overlap cause and fix behind a crashed, hung or slower run's logs", _diagnose_args, cmd_diagnose),
    "presets": ("the tuned TP userbuffers presets and what each was tuned for", _release_args, cmd_presets),
    "explain": ("the long form of a finding id, with its example", _explain_args, cmd_explain),
    "releases": ("per-release facts side by side", _common, cmd_releases),
    "anchors": ("where the Bridge code the rules cite is now (file and line range)", _anchors_args, cmd_anchors),
    "recipes": ("Bridge's shipped recipes with their effective overlap state", _recipes_args, cmd_recipes),
    "suites": ("the upstream overlap test suites verify runs, with the pass counts it requires", _common, cmd_suites),
    "check-manifest": ("validate SKILL.md against the Agent Skills rules", _manifest_args, cmd_check_manifest),
    "trace": ("hidden and exposed communication per parallel dimension from profiler traces", _trace_args, cmd_trace),
}
COMMANDS = {name: run for name, (_help, _add, run) in VERBS.items()}


REQUIRED_PACKAGES = (("yaml", "pyyaml"), ("jinja2", "jinja2"))  # module, what pip installs it as


def _missing_packages() -> list[str]:
    from importlib.util import find_spec

    return [pip for module, pip in REQUIRED_PACKAGES if find_spec(module) is None]


def main(argv: list[str] | None = None) -> int:
    """Run one command (sys.argv[1:] by default); its exit status."""
    missing = _missing_packages()
    if missing:
        print(f"{PROG}: this Python ({sys.executable}) lacks {' and '.join(missing)}: "
              f"{sys.executable} -m pip install {' '.join(missing)}", file=sys.stderr)
        return 2
    _terminate_on_signals()
    try:
        return _main(argv)
    except KeyboardInterrupt:
        safeio.drop_stdout()
        _say(f"{PROG}: interrupted")
        return 130


def _terminate_on_signals() -> None:
    """SIGTERM and SIGHUP (a harness's time-out, a closed terminal) end the command as SystemExit(128 + signal) in
    the main thread, so every `finally` runs: no temporary --output file is left, worker processes are stopped."""
    try:
        import _signal as signal  # what signal.signal calls; the signal module's enums cost a cold start 0.6 ms
    except ImportError:
        import signal

    def handler(signum, frame):
        signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once
        raise SystemExit(128 + signum)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), handler)


def _say(line: str) -> None:
    """One line on stderr; nothing where stderr itself is closed."""
    try:
        print(line, file=sys.stderr)
    except (OSError, AttributeError, ValueError):
        pass


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed its one usage line (or the help it was asked for)
        return int(exc.code or 0)
    except UsageError as exc:  # --help into a closed or full stdout
        _say(f"{PROG}: error: {safeio.message(exc)}")
        return exc.exit_code
    if not args.command:
        _say(f"{PROG}: error: a command is required: {', '.join(COMMANDS)} (see --help)")
        return 2
    empty = _empty_values(parser, args)
    if empty:
        _say(f"{PROG} {args.command}: error: {safeio.message(empty)}: empty; leave it out for the default")
        return 2
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        _say(f"{PROG} {args.command}: error: {safeio.message(exc)}")
        return exc.exit_code
    except BrokenPipeError:
        safeio.drop_stdout()
        return 0
    except MemoryError:
        _say(f"{PROG} {args.command}: error: out of memory (an input too large for this process's memory limit)")
        return 2
    except OSError as exc:  # a read or write the command did not expect to fail: still one line, naming the file
        where = exc.filename or "output"
        _say(f"{PROG} {args.command}: error: {safeio.message(f'{where}: {safeio.reason(exc)}')}")
        return 2
