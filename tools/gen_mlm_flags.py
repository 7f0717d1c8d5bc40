"""Regenerate mbridge_overlap/data/megatron_lm_flags.json: Megatron-LM's command-line flags and the argparse dest each
sets (diagnose's "settings the text names" reads `--overlap-grad-reduce` as overlap_grad_reduce, and
`--no-overlap-p2p-communication` as overlap_p2p_comm=false), from the parser Megatron-LM itself builds
(megatron.training.arguments.add_megatron_arguments, which the megatron-core wheel of a Bridge release carries: part
of its flags come from dataclasses through ArgumentGroupFactory, so the source's add_argument calls alone miss them).
Names only; no Megatron-LM code is copied. Run with the Python of a Bridge release's venv:

    $(scripts/bridge_env.sh --print-python) tools/gen_mlm_flags.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "mbridge_overlap" / "data" / "megatron_lm_flags.json"


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
        for flag in action.option_strings:
            if flag.startswith("--"):
                flags[flag[2:]] = [action.dest, kind]
    return {"megatron_core_version": version("megatron-core"),
            "source": "megatron/training/arguments.py add_megatron_arguments (the parser's actions)",
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
    text = render(collect())
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.relative_to(ROOT)}: {'up to date' if same else 'OUT OF DATE'}")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.splitlines()) - 4} flags)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
