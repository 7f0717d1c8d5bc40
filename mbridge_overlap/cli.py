"""Command line: a thin layer over the Python API, one subcommand per verb."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import api, releases, safeio, text
from .errors import UsageError
from .request import parse_override
from .trace import cli as trace_cli

PROG = "python -m mbridge_overlap"


def _positive_int(flag: str):
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}: expected a positive integer, got {safeio.shown(value)}") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"{flag}: must be a positive integer, got {number}")
        return number

    return parse


def _common(p: argparse.ArgumentParser, formats=("text", "json")) -> None:
    p.add_argument("--format", choices=formats, default="text", help="output format (default: text; json for agents)")
    p.add_argument("--output", metavar="PATH", help="write the output to PATH instead of stdout")
    p.add_argument("--force", action="store_true", help="overwrite --output PATH if it exists")


def _release_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bridge-version",
        metavar="V",
        help=f"target Megatron-Bridge release (default {releases.default_version()}; one of {', '.join(releases.versions())})",
    )


class _Parser(argparse.ArgumentParser):
    """Bad arguments get one line naming the problem (and --help for more), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {safeio.message(message)} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Megatron-Bridge TP/DP/PP communication overlap: what Bridge will do, and what to set.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("resolve", help="effective overlap settings Bridge will use for a requested config")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Bridge-style dotted overrides, e.g. model.sequence_parallel=true")
    p.add_argument("--gpus", type=_positive_int("--gpus"), required=True, help="total GPU count (world size)")
    p.add_argument("--no-te", dest="te", action="store_false", help="Transformer Engine not importable")
    p.add_argument("--config", metavar="FILE", help="YAML in the shape of Bridge's dumped ConfigContainer, applied before the overrides")
    p.add_argument("--launcher-env", action="store_true", help="check env_vars against this shell's environment (the launcher's wins)")
    _release_flags(p)
    _common(p)

    p = sub.add_parser("plan", help="the minimal override that enables every overlap mode a layout can use")
    for flag in ("--tp", "--pp", "--cp"):
        p.add_argument(flag, type=_positive_int(flag), default=1, help=f"{flag[2:].upper()} size (default 1)")
    p.add_argument("--vpp", type=_positive_int("--vpp"), help="virtual pipeline size (needs --pp > 1)")
    p.add_argument("--gpus", type=_positive_int("--gpus"), required=True, help="total GPU count")
    p.add_argument("--gpu", default="h100", help="GPU type: " + ", ".join(releases.data()["gpus"]) + " (default h100)")
    p.add_argument("--precision", default="bf16", help="compute precision: " + ", ".join(releases.data()["precisions"]) + " (default bf16)")
    p.add_argument("--hidden-size", type=_positive_int("--hidden-size"), help="model hidden size (to match a tuned TP preset)")
    p.add_argument("--seq-length", type=_positive_int("--seq-length"), help="sequence length (to match a tuned TP preset)")
    p.add_argument("--micro-batch-size", type=_positive_int("--micro-batch-size"), help="micro batch size (to match a tuned TP preset)")
    p.add_argument("--lora", action="store_true", help="LoRA fine-tuning (LoRA presets)")
    p.add_argument("--no-te", dest="te", action="store_false", help="Transformer Engine not available")
    p.add_argument("--moe-a2a-overlap", action="store_true", help="MoE all-to-all overlap on (affects CUDA_DEVICE_MAX_CONNECTIONS)")
    p.add_argument("--moe-flex-backend", choices=("deepep", "hybridep"), help="MoE flex dispatcher backend")
    p.add_argument("--recipe", type=safeio.name_arg(r"^[a-z0-9][a-z0-9_.]*$"), help="Bridge model recipe name, e.g. llama3_70b (for NCCL_P2P_NET_CHUNKSIZE)")
    p.add_argument("--task", choices=("pretrain", "sft", "peft"), default="pretrain", help="training task (default pretrain)")
    _release_flags(p)
    _common(p, formats=("text", "json", "python", "yaml", "hydra", "env", "env_vars"))

    p = sub.add_parser("lint", help="every finding for a run config, and the overlap it left on the table")
    p.add_argument("config", help="run_config.yaml, a checkpoint or iteration directory holding one, or a plan override file")
    p.add_argument("--gpus", type=_positive_int("--gpus"), help="GPU count (default: from the saved comm_overlap.data_parallel_size)")
    p.add_argument("--gpu", help="GPU type, to check the tuned preset and the launch environment")
    p.add_argument("--no-te", dest="te", action="store_false", help="Transformer Engine not importable")
    _release_flags(p)
    _common(p)

    p = sub.add_parser("diff", help="the overlap-relevant changes between two run configs, with causes, ranked")
    p.add_argument("before", help="the faster run's config (file, checkpoint or iteration directory)")
    p.add_argument("after", help="the slower run's config")
    p.add_argument("--gpus", type=_positive_int("--gpus"), help="GPU count of both runs, where a config does not record it")
    p.add_argument("--gpus-before", type=_positive_int("--gpus-before"), help="GPU count of BEFORE")
    p.add_argument("--gpus-after", type=_positive_int("--gpus-after"), help="GPU count of AFTER")
    p.add_argument("--no-te", dest="te", action="store_false", help="Transformer Engine not importable")
    _release_flags(p)
    _common(p)

    p = sub.add_parser("presets", help="the tuned TP userbuffers presets and what each was tuned for")
    _release_flags(p)
    _common(p)

    p = sub.add_parser("explain", help="the long form of a finding id")
    p.add_argument("id", help="finding id, e.g. TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL")
    _common(p)

    p = sub.add_parser("releases", help="per-release facts side by side")
    _common(p)

    p = sub.add_parser("anchors", help="where the Bridge code SKILL.md cites is now (file and line range)")
    p.add_argument("--mbridge-src", metavar="PATH", help="a Megatron-Bridge source checkout (default: the installed package)")
    _common(p)

    p = sub.add_parser("check-manifest", help="validate SKILL.md against the Agent Skills rules")
    p.add_argument("path", nargs="?", default=None, help="SKILL.md (default: the one beside this package)")
    p.add_argument("--check-dir", action="store_true", help="also require name to match the folder name, as when installed")
    _common(p)

    p = sub.add_parser("trace", help="hidden and exposed communication per parallel dimension from profiler traces")
    trace_cli.add_arguments(p)
    return parser


def _emit(args, payload: str) -> None:
    if not args.output:
        safeio.write_stdout(payload)
        return
    safeio.write_output(args.output, payload, args.force)
    print(f"wrote {safeio.esc(args.output)}", file=sys.stderr)


def _json(data) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"


def cmd_resolve(args) -> int:
    overrides = dict(parse_override(o) for o in args.overrides)
    result = api.resolve(
        overrides,
        gpus=args.gpus,
        te=args.te,
        bridge_version=args.bridge_version,
        config=args.config,
        launcher_env=dict(os.environ) if args.launcher_env else None,
    )
    d = result.to_dict()
    _emit(args, _json(d) if args.format == "json" else text.resolution(d))
    return 1 if result.errors else 0


def cmd_plan(args) -> int:
    from . import render

    result = api.plan(
        tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, gpus=args.gpus, gpu=args.gpu, precision=args.precision,
        hidden_size=args.hidden_size, seq_length=args.seq_length, micro_batch_size=args.micro_batch_size,
        lora=args.lora, te=args.te, bridge_version=args.bridge_version, moe_a2a_overlap=args.moe_a2a_overlap,
        moe_flex_dispatcher_backend=args.moe_flex_backend, recipe=args.recipe, task=args.task,
    )
    d = result.to_dict()
    if args.format == "json":
        out = _json(d)
    elif args.format == "text":
        out = text.plan(d)
    else:
        lay = d["layout"]
        purpose = f"Comm overlap for TP={lay['tp']} PP={lay['pp']} VPP={lay['vpp']} CP={lay['cp']} on {lay['gpus']} {lay['gpu']} GPUs"
        out = render.snippet(
            args.format, overrides=d["overrides"], env=d["env"], env_why=d["env_why"], purpose=purpose,
            release=d["bridge_version"], env_vars_field=releases.get(d["bridge_version"]).env_vars,
        )
    _emit(args, out)
    return 0


def cmd_lint(args) -> int:
    from .lint import lint

    result = lint(args.config, gpus=args.gpus, gpu=args.gpu, te=args.te, bridge_version=args.bridge_version)
    d = result.to_dict()
    _emit(args, _json(d) if args.format == "json" else text.lint(d))
    return 1 if result.errors else 0


def cmd_diff(args) -> int:
    from .diff import diff

    result = diff(
        args.before, args.after, gpus_before=args.gpus_before or args.gpus, gpus_after=args.gpus_after or args.gpus,
        te=args.te, bridge_version=args.bridge_version,
    )
    d = result.to_dict()
    _emit(args, _json(d) if args.format == "json" else text.diff(d))
    return 0


def cmd_presets(args) -> int:
    items = api.presets(args.bridge_version)
    _emit(args, _json(items) if args.format == "json" else text.presets(items))
    return 0


def cmd_explain(args) -> int:
    d = api.explain(args.id)
    _emit(args, _json(d) if args.format == "json" else text.explain(d))
    return 0


def cmd_releases(args) -> int:
    table = api.release_table()
    _emit(args, _json(table) if args.format == "json" else text.releases(table))
    return 0


def cmd_anchors(args) -> int:
    from .anchors import report

    d = report(args.mbridge_src)
    _emit(args, _json(d) if args.format == "json" else text.anchors(d))
    return 0 if d["ok"] else 1


def cmd_check_manifest(args) -> int:
    from .manifest import check_file

    problems = check_file(args.path, check_directory=args.check_dir)
    if args.format == "json":
        _emit(args, _json({"ok": not problems, "problems": problems}))
    else:
        _emit(args, "SKILL.md: ok\n" if not problems else "".join(f"SKILL.md: {safeio.esc(p)}\n" for p in problems))
    return 1 if problems else 0


def cmd_trace(args) -> int:
    return trace_cli.run(args)


COMMANDS = {
    "resolve": cmd_resolve,
    "plan": cmd_plan,
    "lint": cmd_lint,
    "diff": cmd_diff,
    "presets": cmd_presets,
    "explain": cmd_explain,
    "releases": cmd_releases,
    "anchors": cmd_anchors,
    "check-manifest": cmd_check_manifest,
    "trace": cmd_trace,
}


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        safeio.drop_stdout()
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed one usage line
        return int(exc.code or 0)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"{PROG} {args.command}: error: {safeio.message(exc)}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        safeio.drop_stdout()
        return 0
    except OSError as exc:  # a read or write the command did not expect to fail: still one line, naming the file
        print(f"{PROG} {args.command}: error: {safeio.message(f'{exc.filename}: {safeio.reason(exc)}')}", file=sys.stderr)
        return 2
