"""Regenerate mbridge_overlap/data/megatron_lm_flags.json: Megatron-LM's command-line flags and the argparse dest each
sets (diagnose's "settings the text names" reads `--overlap-grad-reduce` as overlap_grad_reduce, and
`--no-overlap-p2p-communication` as overlap_p2p_comm=false), from the parser Megatron-LM itself builds
(megatron.training.arguments.add_megatron_arguments, which the megatron-core wheel of a Bridge release carries: part
of its flags come from dataclasses through ArgumentGroupFactory, so the source's add_argument calls alone miss them).
A flag whose dest is not the config field it sets (recap AM-1: `--ddp-bucket-size` sets DDP's bucket_size,
`--accumulate-allreduce-grads-in-fp32` its grad_reduce_in_fp32) is mapped by hand in Megatron-LM's
megatron/training/training.py get_megatron_ddp_config (`kwargs["bucket_size"] = args.ddp_bucket_size`): those
assignments are read from that function's source (ast, not imported) into "dest_fields" (dest -> ddp.field). A flag
taking several values (nargs '+', '*' or a count: `--cp-comm-type p2p a2a`) is of kind "values".
Names only; no Megatron-LM code is copied. Run with the Python of a Bridge release's venv:

    $(scripts/bridge_env.sh --print-python) tools/gen_mlm_flags.py [--check]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import generated  # noqa: E402

OUT = ROOT / "mbridge_overlap" / "data" / "megatron_lm_flags.json"


def dest_fields() -> dict:
    """{argparse dest: "ddp.<field>"} of get_megatron_ddp_config's `kwargs["<field>"] = args.<dest>` (or a call of
    one argument, `tuple(args.<dest>)`) where the two names differ."""
    path = importlib.util.find_spec("megatron.training.training").origin
    tree = ast.parse(open(path, encoding="utf-8").read())
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_megatron_ddp_config")
    out = {}
    for node in ast.walk(func):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)):
            continue
        target, value = node.targets[0], node.value
        if not (isinstance(target.value, ast.Name) and target.value.id == "kwargs"
                and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)):
            continue
        if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
            value = value.args[0]
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "args":
            if value.attr != target.slice.value:
                out[value.attr] = f"ddp.{target.slice.value}"
    return dict(sorted(out.items()))


def collect() -> dict:
    from importlib.metadata import version

    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    flags = {}
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        # what the flag alone sets: true (store_true), false (store_false), or the value that follows it
        kind = {"_StoreTrueAction": "true", "_StoreFalseAction": "false"}.get(type(action).__name__, "value")
        if kind == "value" and (action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1)):
            kind = "values"  # several words follow it
        for flag in action.option_strings:
            if flag.startswith("--"):
                flags[flag[2:]] = [action.dest, kind]
    return {"megatron_core_version": version("megatron-core"),
            "source": "megatron/training/arguments.py add_megatron_arguments (the parser's actions); dest_fields: "
                      "megatron/training/training.py get_megatron_ddp_config (its kwargs[field] = args.dest)",
            "dest_fields": dest_fields(),
            "flags": dict(sorted(flags.items()))}


def render(data: dict) -> str:
    head = {k: v for k, v in data.items() if k != "flags"}
    lines = ["{", *(f"{json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()), '"flags": {']
    items = list(data["flags"].items())
    lines += [f"{json.dumps(k)}: {json.dumps(v)}{',' if i < len(items) - 1 else ''}" for i, (k, v) in enumerate(items)]
    return "\n".join(lines + ["}}"]) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the shipped file differs from the installed package")
    args = p.parse_args(argv)
    data = collect()
    rel = OUT.relative_to(ROOT)
    return generated.check_or_write(OUT, render(data), args.check,
                                    verdict=lambda same: f"{rel}: {'up to date' if same else 'OUT OF DATE'}",
                                    wrote=f"wrote {rel} ({len(data['flags'])} flags, {len(data['dest_fields'])} dest renames)")


if __name__ == "__main__":
    sys.exit(main())
