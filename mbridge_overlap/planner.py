"""Plan: the minimal override that turns on every overlap mode a layout can use, checked by the resolver."""

from __future__ import annotations

from . import findings, launch_env, releases
from .api import PlanResult, check_layout, resolve
from .errors import UsageError

_SIZES = ("tp", "pp", "cp", "gpus")
_OPTIONAL_SIZES = ("vpp", "hidden_size", "seq_length", "micro_batch_size")


def _check_sizes(sizes: dict) -> None:
    for name, value in sizes.items():
        if value is None and name in _OPTIONAL_SIZES:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"--{name.replace('_', '-')}: must be a positive integer, got {value!r}")


def make_plan(
    *,
    gpus: int,
    tp: int = 1,
    pp: int = 1,
    vpp: int | None = None,
    cp: int = 1,
    gpu: str = "h100",
    precision: str = "bf16",
    hidden_size: int | None = None,
    seq_length: int | None = None,
    micro_batch_size: int | None = None,
    lora: bool = False,
    te: bool = True,
    bridge_version: str | None = None,
    moe_a2a_overlap: bool = False,
    moe_flex_dispatcher_backend: str | None = None,
    recipe: str | None = None,
    task: str = "pretrain",
) -> PlanResult:
    sizes = dict(tp=tp, pp=pp, cp=cp, gpus=gpus, vpp=vpp, hidden_size=hidden_size, seq_length=seq_length, micro_batch_size=micro_batch_size)
    _check_sizes(sizes)
    release = releases.get(bridge_version)
    gpu_info = releases.gpu(gpu)
    prec = _precision(precision)
    if moe_flex_dispatcher_backend not in (None, "deepep", "hybridep"):
        raise UsageError(f"--moe-flex-backend: expected deepep or hybridep, got {moe_flex_dispatcher_backend!r}")
    if task not in ("pretrain", "sft", "peft"):
        raise UsageError(f"--task: expected pretrain, sft or peft, got {task!r}")
    check_layout(
        {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp, "virtual_pipeline_model_parallel_size": vpp},
        gpus,
    )
    dp = gpus // (tp * pp * cp)
    tp_applies = tp >= 2 and te
    preset, preset_notes = match_preset(release, gpu_info, prec["preset"], sizes, lora, tp_applies)

    overrides: dict = {"model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp}
    if vpp is not None:
        overrides["model.virtual_pipeline_model_parallel_size"] = vpp
    if cp > 1:
        overrides["model.context_parallel_size"] = cp
    if tp >= 2:
        overrides["model.sequence_parallel"] = True
    overrides["comm_overlap.tp_comm_overlap"] = tp_applies
    # Always explicit: null selects Transformer Engine's default even where the recipe carries a preset.
    overrides["comm_overlap.tp_comm_overlap_cfg"] = preset
    if dp > 1:
        overrides["ddp.use_distributed_optimizer"] = True
    if prec["recipe"]:
        overrides["mixed_precision"] = prec["recipe"]

    resolution = resolve(overrides, gpus=gpus, te=te, bridge_version=release.version)
    env_layout = launch_env.Layout(
        tp=tp, pp=pp, cp=cp, gpus=gpus, gpu=gpu_info["name"], moe_a2a_overlap=moe_a2a_overlap,
        moe_flex_dispatcher_backend=moe_flex_dispatcher_backend, recipe=recipe, task=task,
    )
    env_rules = launch_env.rules(release, env_layout)
    if preset_notes and not preset:
        resolution.findings = [f for f in resolution.findings if f.id != "TP_OVERLAP_DEFAULT_UB_CFG"]
    layout = {**sizes, "dp": dp, "gpu": gpu_info["name"], "precision": precision, "lora": lora, "te": te}
    return PlanResult(
        resolution=resolution,
        layout=layout,
        overrides=overrides,
        preset=preset,
        modes=_modes(resolution, tp, pp, vpp, dp),
        env={name: value for name, value, _ in env_rules},
        notes=preset_notes,
        env_why={name: why for name, _, why in env_rules},
    )


def _precision(name: str) -> dict:
    table = releases.data()["precisions"]
    if name not in table:
        raise UsageError(f"--precision: expected one of {', '.join(table)}, got {name!r}")
    return table[name]


def match_preset(release, gpu_info, precision, sizes, lora, tp_applies):
    """The preset whose name matches the layout exactly; else a note saying why none does."""
    if not tp_applies:
        return None, []
    want = dict(gpu=gpu_info["preset_gpu"], precision=precision, tp=sizes["tp"], cp=sizes["cp"], lora=lora)
    close = [p for p in release.presets() if all(getattr(p, k) == v for k, v in want.items())]
    exact = [
        p for p in close
        if (p.hidden_size, p.micro_batch_size, p.seq_length) == (sizes["hidden_size"], sizes["micro_batch_size"], sizes["seq_length"])
    ]
    if exact:
        p = exact[0]
        via = "" if p.gpu == gpu_info["name"] else f" (tuned on {p.gpu}; Bridge's own {gpu_info['name']} perf recipes use it)"
        return p.name, [findings.make("TP_PRESET_MATCHED", f"tuned userbuffers preset {p.name} matches exactly{via}", f"comm_overlap.tp_comm_overlap_cfg={p.name}", ["comm_overlap.tp_comm_overlap_cfg"])]
    missing = [f"--{k.replace('_', '-')}" for k in ("hidden_size", "seq_length", "micro_batch_size") if sizes[k] is None]
    if close:
        listed = ", ".join(f"{p.name} (hidden {p.hidden_size}, mbs {p.micro_batch_size}, seq {p.seq_length})" for p in close)
        why = f"give {' '.join(missing)} to match one of: {listed}" if missing else f"presets for this GPU, precision, TP and CP: {listed}"
    elif gpu_info["preset_gpu"] is None or precision is None:
        why = f"Bridge ships no preset for {gpu_info['name']}" if gpu_info["preset_gpu"] is None else "Bridge ships no preset for this precision"
    else:
        why = f"no preset for {want['gpu']} {precision} TP{sizes['tp']} CP{sizes['cp']}{' LoRA' if lora else ''}"
    return None, [findings.make(
        "TP_OVERLAP_DEFAULT_UB_CFG",
        f"no tuned userbuffers preset matches exactly, so Transformer Engine's default config is used: {why}",
        "nothing to do, or tune your own TransformerLayerTPOverlapCfg",
        ["comm_overlap.tp_comm_overlap_cfg"],
    )]


def _modes(resolution, tp, pp, vpp, dp) -> dict:
    eff = resolution.effective
    tp_on = eff["model"]["tp_comm_overlap"]
    if tp_on:
        tp_why = "TP >= 2 with sequence parallel and Transformer Engine: userbuffers overlap of the SP all-gather/reduce-scatter"
    elif tp < 2:
        tp_why = "TP = 1: no tensor-parallel communication to overlap"
    else:
        tp_why = "Transformer Engine is not available: Bridge would turn TP overlap off"
    pp_on = eff["model"]["overlap_p2p_comm"]
    if pp_on:
        pp_why = f"PP = {pp} with VPP = {vpp}: Bridge selects overlap_p2p_comm=true, batch_p2p_comm=false"
    elif pp > 1:
        pp_why = f"PP = {pp} without VPP > 1: Bridge selects batch_p2p_comm=true; interleaving (VPP >= 2) is needed for P2P overlap"
    else:
        pp_why = "PP = 1: no pipeline communication"
    dp_on = eff["ddp"]["overlap_grad_reduce"] and dp > 1
    if dp_on:
        dp_why = (
            f"DP = {dp} with the distributed optimizer: overlap_grad_reduce, overlap_param_gather, "
            f"bucket_size={eff['ddp']['bucket_size']} parameters"
            + (", align_param_gather" if eff["ddp"]["align_param_gather"] else "")
        )
    else:
        dp_why = "DP = 1: no data-parallel communication"
    return {
        "tp": {"enabled": bool(tp_on), "why": tp_why},
        "pp": {"enabled": bool(pp_on), "why": pp_why},
        "dp": {"enabled": bool(dp_on), "why": dp_why},
    }
