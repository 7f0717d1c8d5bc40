"""`plan`: the overrides that enable every overlap mode a layout can use, as text, JSON or a paste-ready snippet."""

from __future__ import annotations

from .. import api, safeio
from ..output import snippets, text
from ..upstream import releases
from . import options

HELP = "the overrides that enable every overlap mode a layout can use"
SNIPPETS = ("python", "yaml", "hydra", "env", "env_vars", "nemo_run")


def add_arguments(p) -> None:
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="your own dotted overrides beside the flags (a fix of a finding), kept as given and written with the plan's")
    for flag in ("--tp", "--pp", "--cp"):
        p.add_argument(flag, type=options.gpu_count, help=f"{flag[2:].upper()} size (default: the recipe's, else 1)")
    p.add_argument("--ep", type=options.gpu_count, help="expert parallel size (default: the recipe's, else 1); an MoE "
                   "model's: the recipe's experts, else --shape num_moe_experts, else those of the model --model names")
    p.add_argument("--vpp", type=options.at_most("virtual_pipeline_model_parallel_size"),
                   help="virtual pipeline size (interleaved schedule; needs --pp > 1)")
    p.add_argument("--precision", help="compute precision: " + ", ".join(releases.data()["precisions"])
                   + " (or as recipe names write them: fp8cs, ...; default: the recipe's, else bf16)")
    p.add_argument("--hidden-size", type=options.at_most("hidden_size"),
                   help="model hidden size (to match a tuned TP preset; default: the recipe's, where known)")
    p.add_argument("--seq-length", type=options.at_most("seq_length"),
                   help="sequence length (to match a tuned TP preset, and the budget's; default: the recipe's)")
    p.add_argument("--micro-batch-size", type=options.at_most("micro_batch_size"),
                   help="micro batch size (to match a tuned TP preset, and the budget's; default: the recipe's)")
    p.add_argument("--global-batch-size", type=options.at_most("global_batch_size"),
                   help="global batch size, for the communication budget (micro-batches per iteration; default: the recipe's)")
    p.add_argument("--lora", action="store_true", help="LoRA fine-tuning (LoRA presets)")
    p.add_argument("--moe", action="store_true", default=None, help="an MoE model with expert parallelism (default: from the recipe)")
    p.add_argument("--moe-a2a-overlap", action="store_true",
                   help="turn on MoE all-to-all overlap (comm_overlap.overlap_moe_expert_parallel_comm; Bridge checks its prerequisites)")
    p.add_argument("--moe-flex-backend", help="MoE flex dispatcher backend: " + ", ".join(releases.data()["flex_dispatcher_backends"]))
    p.add_argument("--megatron-fsdp", action="store_true", help="Megatron-FSDP (ddp.use_megatron_fsdp) instead of DDP")
    options.scenario_flags(p)
    options.budget_flags(p)
    options.output_flags(p, formats=("text", "json") + SNIPPETS)


def run(args) -> int:
    result = api.plan(
        tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep, precision=args.precision, hidden_size=args.hidden_size,
        seq_length=args.seq_length, micro_batch_size=args.micro_batch_size, global_batch_size=args.global_batch_size, lora=args.lora, moe=args.moe,
        moe_a2a_overlap=args.moe_a2a_overlap, moe_flex_dispatcher_backend=args.moe_flex_backend, megatron_fsdp=args.megatron_fsdp,
        overrides=options.overrides_of(args.overrides),
        **options.budget_inputs(args), **options.inputs(args, gpus=args.gpus),
    )
    if args.format in SNIPPETS and result.errors:  # no paste-ready snippet of a config that Bridge or Megatron-Core rejects
        for f in result.errors:
            options.say(f"{options.PROG} plan: error: {f.id}: {safeio.message(f.message)}")
        options.say(f"{options.PROG} plan: no {args.format} snippet for a rejected plan; --format text or json shows every finding and its fix")
        return 1
    if args.format == "json":
        out = options.to_json(result.to_dict())
    elif args.format == "text":
        out = text.plan(result.to_dict())
    else:
        out = snippets.of_plan(args.format, result)
    options.emit(args, out)
    return 1 if result.errors else 0
