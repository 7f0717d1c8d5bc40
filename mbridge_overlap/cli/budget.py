"""`budget`: milliseconds per iteration of communication per parallel dimension, and what each overlap setting hides."""

from __future__ import annotations

from .. import api
from ..errors import UsageError
from ..output import text
from . import options

HELP = "communication per iteration per parallel dimension (ms), and what each overlap setting hides"


def add_arguments(p) -> None:
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Bridge-style dotted overrides, e.g. train.global_batch_size=512")
    p.add_argument("--config", metavar="FILE", help="a saved run_config.yaml or an override YAML, applied before the overrides")
    p.add_argument("--model", help="a known model's shape: " + ", ".join(sorted(_models())))
    p.add_argument("--shape", action="append", default=[], metavar="KEY=VALUE",
                   help="a shape key (num_layers, hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups, "
                        "vocab_size, ...): repeatable; wins over --model")
    options.scenario_flags(p)
    options.output_flags(p)


def _models() -> list:
    from ..budget import shape

    return list(shape.models())


def run(args) -> int:
    result = api.budget(options.overrides_of(args.overrides), config=args.config, model=args.model,
                        shape=_shape(args.shape), **options.inputs(args, gpus=args.gpus))
    d = result.to_dict()
    options.emit(args, options.to_json(d) if args.format == "json" else text.budget(d))
    return 0


def _shape(tokens: list[str]) -> dict:
    out = {}
    for token in tokens:
        key, eq, value = token.partition("=")
        if not eq or not key:
            raise UsageError(f"--shape: expected KEY=VALUE, got {token!r}")
        if value.lower() in ("true", "false"):
            out[key] = value.lower() == "true"
        elif value.isascii() and value.isdigit() and len(value) <= 9:
            out[key] = int(value)
        else:
            raise UsageError(f"--shape {key}: expected a whole number or true/false, got {value!r}")
    return out
