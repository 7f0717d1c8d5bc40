"""The tuned userbuffers presets against a run's shape: which one matches, and how a preset in use differs.

A preset's name spells what it was tuned for (GPU, precision, hidden size, TP, CP, micro batch, sequence, LoRA); a name
without `_cp` is tuned for CP = 1. A shape the run does not make known (a recipe whose model comes from a Hugging Face
config offline) is unknown, never a mismatch.
"""

from __future__ import annotations

from . import releases

DIMENSIONS = (("hidden_size", "hidden"), ("tp", "TP"), ("cp", "CP"), ("micro_batch_size", "micro batch"), ("seq_length", "sequence"))
# Transformer Engine's userbuffers method per GEMM where a preset names none (pytorch/module/base.py initialize_ub,
# `methods`); Bridge's presets lay their own over it per GEMM (get_default_config).
TE_DEFAULT_METHODS = {
    "qkv_fprop": "ring_exchange", "fc1_fprop": "ring_exchange", "proj_dgrad": "ring_exchange",
    "fc2_dgrad": "ring_exchange", "proj_fprop": "pipeline", "fc2_fprop": "pipeline",
    "qkv_dgrad": "bulk", "qkv_wgrad": "bulk", "fc1_dgrad": "bulk", "fc1_wgrad": "bulk",
}
# The model dimensions a run may leave unknown: how to say them, and how to give them.
SIZES = {"hidden_size": ("hidden size", "model.hidden_size=N, plan --hidden-size N"),
         "seq_length": ("sequence length", "model.seq_length=N, plan --seq-length N"),
         "micro_batch_size": ("micro batch size", "train.micro_batch_size=N, plan --micro-batch-size N")}


def shape(state) -> dict:
    """What the run makes known of the dimensions a preset is tuned for (None: unknown): TP and CP as resolved, the
    model's size and batch shape from the scenario."""
    model = state.model
    return {"tp": model["tensor_model_parallel_size"], "cp": model["context_parallel_size"], **state.scenario.shape}


def ub_config(preset: str | None, gemm: str) -> dict:
    """A GEMM's userbuffers settings under a preset (its fields where it names the GEMM, else none) with the method
    it runs: the preset's, else Transformer Engine's default."""
    own = getattr(preset, "fields", None)  # a run config's own tuned config (request.CustomUbCfg)
    mine = dict(((own if own is not None else releases.preset_content().get(preset) or {}) if preset else {}).get(gemm) or {})
    return {**mine, "method": mine.get("method") or TE_DEFAULT_METHODS[gemm]}


def precision_class(precision: dict) -> str | None:
    """The precision a preset name carries (bf16 or fp8) for the resolved mixed-precision fields; None for NVFP4."""
    if precision.get("fp4"):
        return None
    return "fp8" if precision.get("fp8") else "bf16"


def match(release, gpu_info: dict, precision: str | None, sizes: dict, lora: bool, needs_append=None):
    """(the preset whose name matches the shape exactly or None, why none does: a clause, '' when one does).
    needs_append: the request's (Request.needs_append), so a KEY=N hint is the word Bridge's command line takes."""
    want = dict(gpu=gpu_info["preset_gpu"], precision=precision, tp=sizes["tp"], cp=sizes["cp"], lora=lora)
    close = release.presets_for(**want)
    exact = [p for p in close
             if (p.hidden_size, p.micro_batch_size, p.seq_length) == (sizes["hidden_size"], sizes["micro_batch_size"], sizes["seq_length"])]
    if exact:
        return exact[0], ""
    missing = [key for key in SIZES if sizes[key] is None]
    if close:
        listed = ", ".join(f"{p.name} (hidden {p.hidden_size}, mbs {p.micro_batch_size}, seq {p.seq_length})" for p in close)
        if not missing:
            return None, f"presets for this GPU, precision, TP and CP: {listed}"
        unknown = " and ".join(SIZES[k][0] for k in missing)
        how = ", ".join(("++" if needs_append and needs_append(SIZES[k][1].partition("=")[0]) else "") + SIZES[k][1]
                        for k in missing)
        return None, (f"this run's {unknown} {'is' if len(missing) == 1 else 'are'} not known ({how}); "
                      f"presets for this GPU, precision, TP and CP: {listed}")
    if gpu_info["preset_gpu"] is None:
        return None, f"Bridge ships no preset for {gpu_info['name']}"
    if precision is None:
        return None, "Bridge ships no preset for this precision"
    return None, f"no preset for {want['gpu']} {precision} TP{sizes['tp']} CP{sizes['cp']}{' LoRA' if lora else ''}"


def mismatches(name: str, gpu_info: dict, precision: str | None, sizes: dict, lora: bool) -> list[str]:
    """How a preset's name differs from the run's known shape, one phrase each ('hidden 8192, this run 16384')."""
    p = releases.Preset.parse(name)
    out = []
    if gpu_info["preset_gpu"] != p.gpu:
        out.append(f"{p.gpu}, this run {gpu_info['name']}")
    if precision is not None and precision != p.precision:
        out.append(f"{p.precision}, this run {precision}")
    for key, label in DIMENSIONS:
        run = sizes[key]
        if run is not None and getattr(p, key) != run:
            tuned = f"{label} {getattr(p, key)}" + (" (a name without _cp is tuned for CP = 1)" if key == "cp" and "_cp" not in name else "")
            out.append(f"{tuned}, this run {run}")
    if p.lora != lora:
        out.append("LoRA, this run without" if p.lora else "training without LoRA, this run LoRA")
    return out
