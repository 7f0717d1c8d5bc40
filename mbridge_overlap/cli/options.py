"""What the verbs' command lines share: the parser (one line per usage error), the flags every verb about a config
takes, how an answer is written (stdout or --output), and the positional KEY=VALUE overrides."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

from .. import safeio
from ..errors import UsageError
from ..run import hydra
from ..run.hydra import command_line_value, parse_override

PROG = "mbridge-overlap"  # the name every message starts with


def count(value: str) -> int:
    """An argparse type: a whole number in ASCII digits alone, as the README promises (int() also takes "８", "1_0",
    " 8", "+8" and "8\n": fuzzH H10)."""
    if not re.fullmatch(r"[0-9]{1,%d}" % safeio.MAX_INT_CHARS, value):
        raise argparse.ArgumentTypeError(f"expected a whole number in ASCII digits, got {safeio.shown(value)}")
    return int(value)


def positive_int(value: str) -> int:
    """An argparse type (argparse names the flag in its message)."""
    if not re.fullmatch(r"-?[0-9]{1,%d}" % safeio.MAX_INT_CHARS, value):
        raise argparse.ArgumentTypeError(f"expected a positive integer in ASCII digits, got {safeio.shown(value)}")
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {number}")
    return number


def at_most(key: str):
    """An argparse type: a positive integer within the budget's bound for a size (budget/shape.py BOUNDS, the run
    sizes of budget/layout.py RUN_BOUNDS), read when the flag is given."""
    def parse(value: str) -> int:
        from ..budget.layout import RUN_BOUNDS
        from ..budget.shape import BOUNDS

        number = positive_int(value)
        bound = {**BOUNDS, **{k.partition(".")[2]: v for k, v in RUN_BOUNDS.items()}}[key]
        if number > bound:
            raise argparse.ArgumentTypeError(f"at most {bound:,}, got {safeio.shown(number)}")
        return number

    parse.__name__ = key  # argparse's own messages name the type
    return parse


def gpu_count(value: str) -> int:
    """A GPU count (a world size, GPUs per node or NVLink domain): a positive integer up to safeio.MAX_GPUS."""
    number = positive_int(value)
    if number > safeio.MAX_GPUS:
        raise argparse.ArgumentTypeError(f"{number:,} GPUs is more than any machine has (at most {safeio.MAX_GPUS:,})")
    return number


class Parser(argparse.ArgumentParser):
    """Bad arguments get one line naming the problem (and --help for more), exit status 2; help goes through the
    same stdout writer as every answer (a closed or full stdout is an error, not a silent exit 0)."""

    def error(self, message):
        # status 2 whether or not stderr takes the line (fuzzI I5: a closed stderr made it 1, a broken pipe 0)
        say(f"{self.prog}: error: {safeio.message(message)} (see --help)")
        raise SystemExit(2)

    def print_help(self, file=None):
        if file is None:
            safeio.write_stdout(self.format_help())
        else:
            super().print_help(file)


def jobs(value: str) -> int:
    """--jobs: a number of worker processes, 1 to 1024."""
    if not re.fullmatch(r"[0-9]{1,4}", value) or not 1 <= int(value) <= 1024:
        raise argparse.ArgumentTypeError(f"expected a number of processes from 1 to 1024, got {safeio.shown(value)}")
    return int(value)


def output_flags(p: argparse.ArgumentParser, formats=("text", "json")) -> None:
    p.add_argument("--format", choices=formats, default="text", help="output format (default: text; json for agents)")
    p.add_argument("--output", metavar="PATH", help="write the output to PATH instead of stdout")
    p.add_argument("--force", action="store_true", help="overwrite --output PATH if it exists")


def release_flag(p: argparse.ArgumentParser) -> None:
    from ..upstream import releases

    p.add_argument("--bridge-version", metavar="V", help=f"target Megatron-Bridge release (default {releases.default_version()}; "
                   f"one of {', '.join(releases.versions())}, or a newer one, answered unverified)")


RECIPE = safeio.name_arg(r"^[a-z0-9][a-z0-9_.]*\Z")
GPUS_HELP = ("total GPU count (world size); default: the saved run config's, else the count in the recipe's name, else the "
             "recipe's smallest layout")


def scenario_flags(p: argparse.ArgumentParser, gpus: bool = True) -> None:
    """The inputs every verb about a config takes (scenario.build's keywords), with the same defaults everywhere."""
    from ..upstream import releases

    p.add_argument("--recipe", type=RECIPE, help="start from this shipped recipe function (see the recipes command) instead of the "
                   "baseline; plan also takes a model family such as llama3_70b (for NCCL_P2P_NET_CHUNKSIZE)")
    if gpus:
        p.add_argument("--gpus", type=gpu_count, help=GPUS_HELP)
    p.add_argument("--gpu", help="GPU type: " + ", ".join(releases.gpu_types()) + " (default: the recipe's, else h100)")
    p.add_argument("--task", help="training task: " + ", ".join(releases.data()["tasks"]) + " (default: the recipe's, else pretrain)")
    p.add_argument("--no-te", dest="te", action="store_false", help="Transformer Engine not importable")
    p.add_argument("--launcher-env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable the job's launcher exports (repeatable; it wins over cfg.env_vars), e.g. CUDA_DEVICE_MAX_CONNECTIONS=32")
    p.add_argument("--shell-env", action="store_true",
                   help="take this shell's launch variables (CUDA_*, NCCL_*, NVTE_*, UB_*, TORCH_*, ...) as the launcher's; nothing else of it")
    m = p.add_argument_group("the machine (defaults from the GPU type and the installed packages; shown under inputs.machine)")
    m.add_argument("--nvlink-domain", type=gpu_count, metavar="N",
                   help="GPUs per NVLink domain (8 on H100/B200/B300 nodes, or the --gpus-per-node given where fewer: "
                        "their NVLink is the node; 72 in an NVL72 rack)")
    m.add_argument("--gpus-per-node", type=gpu_count, metavar="N", help="GPUs per node")
    m.add_argument("--multicast", choices=("yes", "no"), help="CUDA multicast available (driver >= 12.1 on an NVSwitch system; default yes)")
    m.add_argument("--torch-mpi", choices=("yes", "no"), help="torch.distributed has MPI (default: read from the Bridge venv's torch)")
    m.add_argument("--te-version", metavar="V", help="Transformer Engine version (default: the release's pinned one)")
    release_flag(p)


def budget_flags(p: argparse.ArgumentParser, models: list | None = None) -> None:
    """--model and --shape: the model's shape, for the communication budget (budget, and resolve/plan/diff beside
    their answer). models: the names to list in the help (the budget verb's; the others point to it)."""
    known = ": " + ", ".join(models) if models else " (`budget --help` lists them)"
    p.add_argument("--model", help="the model's shape for the communication budget, by a known model's name" + known
                   + "; default: the recipe's model where known")
    p.add_argument("--shape", action="append", default=[], type=_shape_key, metavar="KEY=VALUE",
                   help="a shape key (num_layers, hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups, "
                        "vocab_size, ...): repeatable; wins over --model and the config's")


def _shape_key(token: str) -> tuple:
    key, eq, value = token.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {safeio.shown(token)}")
    from ..budget.shape import value_of

    try:
        return key, value_of(key, value)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def budget_inputs(args) -> dict:
    return {"model": args.model, "shape": dict(args.shape)}


def inputs(args, **extra) -> dict:
    yes = {"yes": True, "no": False, None: None}
    machine = {"nvlink_domain": args.nvlink_domain, "gpus_per_node": args.gpus_per_node, "multicast": yes[args.multicast],
               "torch_mpi": yes[args.torch_mpi], "te_version": args.te_version}
    return dict(recipe=args.recipe, gpu=args.gpu, task=args.task, te=args.te, bridge_version=args.bridge_version,
                launcher_env=launcher_env(args.launcher_env, args.shell_env),
                machine_facts={k: v for k, v in machine.items() if v is not None}, **extra)


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


def launcher_env(given: list[str], shell: bool) -> dict | None:
    """The launcher's environment: this shell's launch variables where asked (launch_env.from_shell), then each
    NAME=VALUE given; None where nothing is known."""
    from ..run.launch_env import from_shell

    out = {k: v for k, v in from_shell(os.environ).items() if ENV_NAME.match(k)} if shell else {}  # (fuzzO F5: no `NCCL_A B`)
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME.match(name):
            raise UsageError(f"--launcher-env {safeio.shown(item)}: expected NAME=VALUE, an environment variable's name and its value")
        out[name] = value
    return out if (given or shell) else None


# whole sections an override can set (comm_overlap=null, comm_overlap={...} as plan --format hydra writes it,
# mixed_precision=NAME): every verb that takes KEY=VALUE reads them so (fuzzL L3: diagnose and trace took them for files)
_SECTION_KEYS = ("comm_overlap", "mixed_precision")


def _is_override(token: str) -> bool:
    """A KEY=VALUE token that names no file: a dotted key, or a whole section; or a Hydra deletion of one (~KEY,
    refused by parse_override: it was a file name, 'Could not determine home directory')."""
    key = token.partition("=")[0].lstrip("+")  # (fuzzT T3-6: ++comm_overlap={...}, a fix's own word, was a file)
    if key.startswith("~"):
        key = key[1:]
    elif "=" not in token:
        return False
    return ("." in key or key in _SECTION_KEYS) and "/" not in key and not os.path.exists(token)


def split_inputs(tokens: list[str], files: int) -> tuple[list[str], dict]:
    """Positional inputs: up to `files` file paths first, then KEY=VALUE overrides (a token with '=' after a dotted
    key, or naming no file, is an override)."""
    paths, overrides = [], {}
    for token in tokens:
        if _is_override(token):
            _add(overrides, *override_of(token))
        elif overrides or len(paths) >= files:
            raise UsageError(f"{safeio.shown(token)}: expected KEY=VALUE here (files come first, at most {files})")
        else:
            paths.append(token)
    return paths, overrides


def override_of(token: str) -> tuple[str, str]:
    """One command-line KEY=VALUE as the request takes it: split as Hydra splits it, and refused where Hydra or
    OmegaConf would not pass it to Bridge as its text (hydra.command_line_value)."""
    key, value = parse_override(token)
    return key, command_line_value(key, value)


def overrides_of(tokens: list[str]) -> dict:
    out: dict = {}
    for token in tokens:
        _add(out, *override_of(token))
    return out


def _add(overrides: dict, key: str, value) -> None:
    """One word after the words before it, as Hydra applies them in turn: +KEY=VALUE after a word that set KEY to a
    value (not null) is refused as Hydra refuses it (fuzzA2: the first word's prefix stayed with the last value, and
    ++KEY=a +KEY=b was taken). The first word's key (its prefix) stays: Request.judge judges it against the config."""
    if key in overrides and hydra.prefixed(key)[0] == "+" and not hydra.merged(value) \
            and str(overrides[key]).strip().lower() != "null":
        raise hydra.append_refused(f"+{key}={value}", str(key))
    overrides[key] = value


def emit(args, payload: str) -> None:
    """The answer on stdout, or in --output PATH (atomically; an existing file only with --force)."""
    if args.output is None:
        safeio.write_stdout(payload)
        return
    safeio.write_output(args.output, payload, args.force)
    print(f"wrote {safeio.esc(args.output)}", file=sys.stderr)


COMPACT_OVER = 256 * 1024  # bytes: a larger payload is written on one line


# A lone surrogate as json.dumps escapes it (a file name's undecodable bytes, os.fsdecode): not Unicode, and strict
# JSON readers refuse it
_LONE_SURROGATE = re.compile(r"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}")


def to_json(data, compact_over: int | None = COMPACT_OVER) -> str:
    """Indented JSON; one line when it is over compact_over bytes (the standard library indents in Python, ten times
    slower than its C encoder: a 1.4 MB recipe listing took 200 ms to indent; None: always indented). Always valid
    JSON: a number that is not finite is its text (inf, -inf, nan: what Hydra reads back as it, and Bridge exports;
    recheck58 AE4: an override optimizer.clip_grad=inf was null), a lone surrogate the bytes it stands for, escaped as
    text (\\xff)."""
    try:
        compact = json.dumps(data, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:
        compact = None
    if compact is None or _LONE_SURROGATE.search(compact):
        data = _valid(data)
        compact = json.dumps(data, separators=(",", ":"), default=str, allow_nan=False)
    indented = compact_over is None or len(compact) <= compact_over
    return (json.dumps(data, indent=2, default=str) if indented else compact) + "\n"


def _valid(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_valid(k) if isinstance(k, str) else k: _valid(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_valid(v) for v in value]
    return value


def say(line: str) -> None:
    """One line on stderr; nothing where stderr itself is closed."""
    try:
        print(line, file=sys.stderr)
    except (OSError, AttributeError, ValueError):
        pass


def split_overrides(tokens: list[str]) -> tuple[list[str], dict]:
    """Paths and KEY=VALUE overrides, in any order: a token is an override when it reads as one and names no file."""
    paths, overrides = [], {}
    for token in tokens:
        if _is_override(token):
            _add(overrides, *override_of(token))
        else:
            paths.append(token)
    return paths, overrides
