"""Plan: the overrides that turn on every overlap mode a layout can use, checked by the resolver.

Without a recipe the plan starts from Bridge's baseline and sets the layout; with a full recipe name it starts from
that recipe, keeps its choices, and changes only what the layout flags change or what Bridge's rules require.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import catalog, findings, launch_env, layout, releases, request
from .errors import UsageError
from .resolution import Resolution, resolve_request
from .safeio import shown
from .text import fmt

_SIZES = ("tp", "pp", "cp", "gpus")
_OPTIONAL_SIZES = ("vpp", "hidden_size", "seq_length", "micro_batch_size")


@dataclass
class PlanResult:
    """The JSON of `plan`: a Resolution of the recommended overrides, plus the layout and why."""

    resolution: Resolution
    layout: dict
    overrides: dict
    preset: str | None
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        out = self.resolution.to_dict()
        out["findings"] = [f.to_dict() for f in findings.sort(self.notes + self.resolution.findings)]
        out.update(layout=self.layout, overrides=self.overrides, preset=self.preset)
        return out

    @property
    def errors(self) -> list:
        return [f for f in self.notes + self.resolution.findings if f.severity == "error"]

    def perf_env_plugin_args(self) -> dict | None:
        """The PerfEnvPlugin arguments that set this plan's launch environment; None where the release has no plugin."""
        release = releases.get(self.resolution.bridge_version)
        if release.launch_env != "perf_env_plugin":
            return None
        return launch_env.perf_env_plugin_args(release, self.resolution.launch_layout)


def _check_sizes(sizes: dict) -> None:
    for name, value in sizes.items():
        if value is None and name in _OPTIONAL_SIZES:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"--{name.replace('_', '-')}: must be a positive integer, got {shown(value)}")


def _recipe(reference: str | None, release) -> tuple[dict | None, str | None]:
    """(catalog entry, model family): a full recipe function name, or a family name such as llama3_70b."""
    if reference is None:
        return None, None
    if not isinstance(reference, str) or not reference:
        raise UsageError("--recipe: expected a recipe function or model family name")
    if reference.endswith("_config") or "." in reference:
        entry = catalog.require_built(catalog.lookup(reference, release.version))
        return entry, entry["model"]
    # A release without a catalog of its own (0.6.0, a newer one) takes its data_of release's family names: the family
    # only selects NCCL_P2P_NET_CHUNKSIZE, whose recipe list is release data.
    families = catalog.families(release.version if release.version in catalog.versions() else release.data_version)
    if reference not in families:
        from .suggest import closest

        hint = closest(reference, families)
        raise UsageError(f"--recipe: {shown(reference)} is neither a recipe function nor a model family of Megatron-Bridge "
                         f"{release.version}" + (f"; did you mean '{hint}'?" if hint else ""))
    return None, reference


def make_plan(
    *,
    gpus: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    vpp: int | None = None,
    cp: int | None = None,
    gpu: str | None = None,
    precision: str | None = None,
    hidden_size: int | None = None,
    seq_length: int | None = None,
    micro_batch_size: int | None = None,
    lora: bool = False,
    te: bool = True,
    bridge_version: str | None = None,
    moe: bool | None = None,
    moe_a2a_overlap: bool = False,
    moe_flex_dispatcher_backend: str | None = None,
    megatron_fsdp: bool = False,
    recipe: str | None = None,
    task: str | None = None,
) -> PlanResult:
    release = releases.get(bridge_version)
    entry, family = _recipe(recipe, release)
    base = _recipe_layout(entry)
    tp, pp, cp = (x if x is not None else base.get(k, 1) for x, k in ((tp, "tp"), (pp, "pp"), (cp, "cp")))
    vpp = vpp if vpp is not None else base.get("vpp")
    gpus = gpus if gpus is not None else (entry or {}).get("gpus")
    if gpus is None:
        raise UsageError("--gpus: required" + (f" (recipe {entry['name']} has no GPU count in its name)" if entry else ""))
    gpu_info = releases.gpu(gpu or (entry or {}).get("gpu") or "h100")
    precision = precision or (entry or {}).get("precision") or "bf16"
    prec = _precision(precision)
    task = task or (entry or {}).get("task") or "pretrain"
    if task not in catalog.TASKS:
        raise UsageError(f"--task: expected one of {', '.join(catalog.TASKS)}, got {shown(task)}")
    moe = bool(moe) if moe is not None else base.get("ep", 1) > 1
    sizes = dict(tp=tp, pp=pp, cp=cp, gpus=gpus, vpp=vpp, hidden_size=hidden_size, seq_length=seq_length, micro_batch_size=micro_batch_size)
    _check_sizes(sizes)
    if moe_flex_dispatcher_backend not in (None, "deepep", "hybridep", "ncclep"):
        raise UsageError(f"--moe-flex-backend: expected deepep, hybridep or ncclep, got {shown(moe_flex_dispatcher_backend)}")

    shape = layout.Layout(tp=tp, pp=pp, vpp=vpp, cp=cp, gpus=gpus)
    recipe_co = entry["request"]["comm_overlap"] if entry else None
    blocked = _blocked_precision(release, entry, prec)
    notes: list = []
    if recipe_co is not None:  # the recipe's own choice stands, unless it cannot run
        tp_on = bool(recipe_co["tp_comm_overlap"]) and not blocked
    else:
        tp_on, notes = _tp_rule(tp, te, blocked, moe)
    preset, preset_notes = match_preset(release, gpu_info, prec["preset"], sizes, lora, tp_on)
    if entry is not None and tp_on and _same_shape(entry, tp, cp, gpu_info["name"], precision):
        preset, preset_notes = (entry["request"]["comm_overlap"] or {}).get("tp_comm_overlap_cfg"), []
    notes += preset_notes

    overrides = _layout_overrides(base, tp, pp, vpp, cp)
    if tp >= 2 and not (entry and entry["request"]["model"]["sequence_parallel"]):
        overrides["model.sequence_parallel"] = True
    if recipe_co is None or recipe_co.get("tp_comm_overlap") != tp_on:
        overrides["comm_overlap.tp_comm_overlap"] = tp_on
    if entry is None or tp_on and (recipe_co or {}).get("tp_comm_overlap_cfg") != preset:
        # Always explicit without a recipe: null selects Transformer Engine's default even where a recipe carries a preset.
        overrides["comm_overlap.tp_comm_overlap_cfg"] = preset if tp_on else None
    if shape.divisible and shape.dp > 1:
        start = request.Request.from_recipe(release, entry) if entry else request.Request.baseline(release)
        # ddp's flag always: CommOverlapConfig reads it, and only it, before validate() syncs the two
        overrides["ddp.use_distributed_optimizer"] = True
        if not start.optimizer["use_distributed_optimizer"]:
            overrides["optimizer.use_distributed_optimizer"] = True
    if prec["recipe"] and entry is None:
        overrides["mixed_precision"] = prec["recipe"]
    if megatron_fsdp:
        overrides.update({"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "fsdp_dtensor"})
    if moe_flex_dispatcher_backend:  # as Bridge's apply_flex_dispatcher_backend sets it
        overrides.update({"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": moe_flex_dispatcher_backend})

    hints = {"moe_a2a_overlap": True} if moe_a2a_overlap else {}  # the MoE skill's setting: only the launch env reads it here

    def resolve(chosen: dict) -> Resolution:
        return resolve_request(request.build(release, chosen, base=entry), gpus=gpus, te=te, gpu=gpu_info["name"], family=family,
                               task=task, launch_hints=hints)

    asked = [k for k in overrides if k in _layout_overrides(base, tp, pp, vpp, cp) or not _chosen_by_plan(k)]
    overrides, resolution, kept = _no_new_errors(resolve, overrides, asked, entry)
    notes += kept
    if preset_notes and not preset:
        resolution.findings = [f for f in resolution.findings if f.id != "TP_OVERLAP_DEFAULT_UB_CFG"]
    notes += _shipped_recipes_differ(release, resolution, shape, gpu_info["name"], precision, moe, entry)
    plan_layout = {**sizes, "dp": shape.dp if shape.divisible else None, "gpu": gpu_info["name"], "precision": precision,
                   "lora": lora, "te": te, "moe": moe, "megatron_fsdp": megatron_fsdp, "recipe": entry["name"] if entry else None,
                   "family": family, "task": task}
    return PlanResult(resolution=resolution, layout=plan_layout, overrides=overrides, preset=preset, notes=notes)


# What the plan itself chooses (the rest comes from the layout flags the user gave: sizes, --megatron-fsdp, --moe-flex-backend).
_PLAN_CHOICES = ("comm_overlap.", "model.sequence_parallel", "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer",
                 "mixed_precision")


def _chosen_by_plan(key: str) -> bool:
    return key.startswith(_PLAN_CHOICES)


def _no_new_errors(resolve, overrides: dict, asked: list, entry) -> tuple[dict, Resolution, list]:
    """The plan's overrides without those of its own choices that make Bridge raise where the layout the user asked
    for does not (a plan never breaks a recipe, or the baseline, that works as shipped): each such override is left
    out, with a note naming the error it would bring."""
    known = {f.id for f in resolve({k: overrides[k] for k in asked}).errors}
    resolution, notes = resolve(overrides), []
    while new := [f for f in resolution.errors if f.id not in known]:
        for key in reversed([k for k in overrides if k not in asked]):
            trial = {k: v for k, v in overrides.items() if k != key}
            tried = resolve(trial)
            left = [f for f in tried.errors if f.id not in known]
            if len(left) < len(new) and {f.id for f in left} <= {f.id for f in new}:
                origin = f"recipe {entry['name']}" if entry else "the recipe baseline"
                notes.append(findings.make("PLAN_LEAVES_KEY_AS_SHIPPED", knobs=[key], key=key, value=fmt(overrides[key]),
                                           origin=origin, errors=", ".join(sorted({f.id for f in new} - {f.id for f in left}))))
                overrides, resolution = trial, tried
                break
        else:
            break  # no choice of the plan's brings it: the layout the user asked for does
    return overrides, resolution, notes


def _blocked_precision(release, entry, prec: dict) -> str | None:
    """NVFP4 or blockwise FP8 where the run's mixed precision (the recipe's own, whatever its name says, or the one
    --precision selects) is one Transformer Engine's userbuffers cannot carry."""
    from .checks import tp_overlap_precision_problem

    mp = entry["request"]["mixed_precision"] if entry else {"recipe": prec["recipe"] or "bf16_mixed"}
    if mp is None:
        return None  # the recipe runs without a mixed-precision config: BF16/FP32 tensors only
    fields = {**release.mixed_precision(mp["recipe"]), **(mp.get("fields") or {})}
    problem = tp_overlap_precision_problem(fields)
    return problem[0] if problem else None


def _tp_rule(tp: int, te: bool, blocked: str | None, moe: bool) -> tuple[bool, list]:
    """TP overlap by Bridge's rules and its recipes' practice, with the note that says why when it stays off."""
    if not layout.tp_overlap_applies(tp, te):
        return False, []
    if blocked:
        why = f"{blocked} cannot go through Transformer Engine's userbuffers (see explain TP_OVERLAP_UNSUPPORTED_PRECISION)"
    elif moe:
        why = "an MoE model with expert parallelism: none of Bridge's MoE perf recipes with TP > 1 uses it (no code forbids it)"
    else:
        return True, []
    return False, [findings.make("TP_OVERLAP_NOT_RECOMMENDED", tp=tp, why=why)]


def _recipe_layout(entry: dict | None) -> dict:
    if entry is None:
        return {}
    m = entry["request"]["model"]
    return {"tp": m["tensor_model_parallel_size"], "pp": m["pipeline_model_parallel_size"], "vpp": m["virtual_pipeline_model_parallel_size"],
            "cp": m["context_parallel_size"], "ep": m.get("expert_model_parallel_size", 1)}


def _layout_overrides(base: dict, tp: int, pp: int, vpp, cp: int) -> dict:
    """The parallel sizes, all of them without a recipe; with one, those that differ from it."""
    wanted = {"model.tensor_model_parallel_size": (tp, "tp"), "model.pipeline_model_parallel_size": (pp, "pp"),
              "model.virtual_pipeline_model_parallel_size": (vpp, "vpp"), "model.context_parallel_size": (cp, "cp")}
    out = {}
    for key, (value, name) in wanted.items():
        if not base:
            if name == "vpp" and value is None or name == "cp" and value == 1:
                continue
            out[key] = value
        elif base.get(name) != value:
            out[key] = value
    return out


def _same_shape(entry: dict, tp: int, cp: int, gpu: str, precision: str) -> bool:
    m = entry["request"]["model"]
    return (m["tensor_model_parallel_size"], m["context_parallel_size"], entry.get("gpu"), entry.get("precision")) == (tp, cp, gpu, precision)


def _precision(name: str) -> dict:
    table = releases.data()["precisions"]
    if name not in table:
        raise UsageError(f"--precision: expected one of {', '.join(table)}, got {shown(name)}")
    return table[name]


def match_preset(release, gpu_info, precision, sizes, lora, tp_applies):
    """The preset whose name matches the layout exactly; else a note saying why none does."""
    if not tp_applies:
        return None, []
    want = dict(gpu=gpu_info["preset_gpu"], precision=precision, tp=sizes["tp"], cp=sizes["cp"], lora=lora)
    close = [p for p in release.presets() if all(getattr(p, k) == v for k, v in want.items())]
    exact = [p for p in close
             if (p.hidden_size, p.micro_batch_size, p.seq_length) == (sizes["hidden_size"], sizes["micro_batch_size"], sizes["seq_length"])]
    if exact:
        p = exact[0]
        via = "" if p.gpu == gpu_info["name"] else f" (tuned on {p.gpu}; Bridge's own {gpu_info['name']} perf recipes use it)"
        return p.name, [findings.make("TP_PRESET_MATCHED", fix_overrides={"comm_overlap.tp_comm_overlap_cfg": p.name}, preset=p.name, via=via)]
    missing = [f"--{k.replace('_', '-')}" for k in ("hidden_size", "seq_length", "micro_batch_size") if sizes[k] is None]
    if close:
        listed = ", ".join(f"{p.name} (hidden {p.hidden_size}, mbs {p.micro_batch_size}, seq {p.seq_length})" for p in close)
        why = f"give {' '.join(missing)} to match one of: {listed}" if missing else f"presets for this GPU, precision, TP and CP: {listed}"
    elif gpu_info["preset_gpu"] is None or precision is None:
        why = f"Bridge ships no preset for {gpu_info['name']}" if gpu_info["preset_gpu"] is None else "Bridge ships no preset for this precision"
    else:
        why = f"no preset for {want['gpu']} {precision} TP{sizes['tp']} CP{sizes['cp']}{' LoRA' if lora else ''}"
    return None, [findings.make("TP_OVERLAP_DEFAULT_UB_CFG", why=f"; no tuned preset matches exactly: {why}",
                                fix=findings.shell("nothing to do, or tune your own TransformerLayerTPOverlapCfg"))]


# What plan compares with the shipped recipes of the same layout: effective settings and the launch environment.
_COMPARED = ("model.tp_comm_overlap", "model.overlap_p2p_comm", "ddp.overlap_grad_reduce", "ddp.overlap_param_gather")


def _shipped_recipes_differ(release, resolution, shape, gpu: str, precision: str, moe: bool, entry) -> list:
    if release.version not in catalog.versions() or entry is not None:
        return []
    differences, names = {}, []
    for other in catalog.same_layout(release.version, shape, gpu, precision, moe):
        theirs = other["bridge"]
        diffs = [f"{key}={_get(theirs['effective'], key)}" for key in _COMPARED
                 if _get(theirs["effective"], key) != _get(resolution.effective, key)]
        cdmc = (theirs.get("env") or {}).get("CUDA_DEVICE_MAX_CONNECTIONS")
        if cdmc is not None and cdmc != resolution.launch_env["CUDA_DEVICE_MAX_CONNECTIONS"]["value"]:
            diffs.append(f"CUDA_DEVICE_MAX_CONNECTIONS={cdmc}")
        if diffs:
            names.append(other["name"])
            for d in diffs:
                differences.setdefault(d, []).append(other["name"])
    if not names:
        return []
    text = "; ".join(f"{d} in {len(n)}" for d, n in sorted(differences.items()))
    shown_names = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return [findings.make("SHIPPED_RECIPES_DIFFER", count=len(names), names=shown_names, differences=text)]


def _get(effective: dict, key: str):
    section, _, name = key.partition(".")
    return effective[section][name]
