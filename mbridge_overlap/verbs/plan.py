"""Plan: the overrides that turn on every overlap mode a layout can use, checked by the resolver.

Without a recipe the plan starts from Bridge's baseline and sets the layout; with a full recipe name it starts from
that recipe, keeps its choices, and changes only what the layout flags change or what Bridge's rules require.
"""

from __future__ import annotations

import functools


from ..upstream import catalog, releases, presets as ub_presets
from .. import findings
from ..run import hydra, launch_env, layers, layout, request, scenario
from ..run.resolver import bucket_size_a_section_replaces
from ..run.peft import LORA
from .. import budget as budgets
from ..findings.analysis import Analysis, analyze
from ..findings.rules import declare
from ..errors import UsageError
from ..findings.proof import probe
from dataclasses import dataclass, field
from ..safeio import shown
from ..values import fmt

MOE_OVERLAP_DISPATCHERS = ("alltoall", "flex")  # what CommOverlapConfig accepts with overlap_moe_expert_parallel_comm
# What an expert TP size left at the TP size brings, that expert TP 1 does not
EXPERT_TP_BLOCKS = frozenset({"MOE_BIAS_NEEDS_EXPERT_TP_ONE", "EXPERT_GRID_NOT_DIVIDING_WORLD"})

declare("planner", ["TP_OVERLAP_NOT_RECOMMENDED", "TP_PRESET_MATCHED", "SHIPPED_RECIPES_DIFFER", "PLAN_LEAVES_KEY_AS_SHIPPED",
                    "PLAN_SETS_MOE_DISPATCHER", "PLAN_SETS_EXPERT_TP", "PLAN_TP_OVERLAP_COSTS_MORE",
                    "PLAN_PRECISION_DROPS_RECIPE_FIELDS"])

_OPTIONAL_SIZES = ("vpp",)


@dataclass
class PlanResult:
    """The JSON of `plan`: the analysis of the scenario its overrides make, plus the layout, the overrides and the
    plan's own notes (why it chose what it chose; the config's findings are the analysis's, as resolve gives them)."""

    analysis: Analysis
    layout: dict
    overrides: dict
    preset: str | None
    notes: list = field(default_factory=list)

    @property
    def resolution(self) -> Analysis:
        return self.analysis

    def to_dict(self) -> dict:
        out = self.analysis.to_dict()
        out.update(layout=self.layout, overrides=self.overrides, preset=self.preset,
                   plan_notes=[f.to_dict() for f in findings.sort(self.notes)])
        tp = (out.get("modes") or {}).get("tp")
        left = next((f for f in self.notes if f.id == "PLAN_LEAVES_KEY_AS_SHIPPED" and "comm_overlap.tp_comm_overlap" in f.knobs), None)
        if tp and not tp.get("enabled") and left is not None:  # the plan left it off: say why, not "not requested"
            tp["why"] = f"left off by the plan: {left.message}"
        return out

    @property
    def errors(self) -> list:
        return self.analysis.errors

    def perf_env_plugin_args(self) -> dict | None:
        """The PerfEnvPlugin arguments that set this plan's launch environment; None where the release has no plugin."""
        release = self.analysis.scenario.release
        if release.launch_env != "perf_env_plugin":
            return None
        return launch_env.perf_env_plugin_args(release, self.analysis.launch_layout)

    def perf_env_plugin_refused(self) -> str | None:
        """Why PerfEnvPlugin cannot set this plan's launch environment (the snippet then sets the executor's alone)."""
        release = self.analysis.scenario.release
        if release.launch_env != "perf_env_plugin":
            return None
        return launch_env.perf_env_plugin_refused(release, self.analysis.launch_layout)


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
    families = _families(release)
    if reference not in families:
        from ..suggest import closest

        hint = closest(reference, families)
        raise UsageError(f"--recipe: {shown(reference)} is neither a recipe function nor a model family of Megatron-Bridge "
                         f"{release.version}" + (f"; did you mean '{hint}'?" if hint else ""))
    return None, reference


def _family_of(model: str, family: str | None, release) -> str | None:
    """The family where --model names a known model and --recipe does not say it: Bridge's launcher rules key on it
    (its hidden size reaches the preset finder through scenario.with_model, as for every verb)."""
    from ..budget.shape import models

    if family is not None or model not in models() or model not in _families(release):
        return family  # an unknown name: the budget says so
    return model


def _families(release) -> list:
    """The model families of the catalog that stands for a release (catalog.release_of): the family only selects
    NCCL_P2P_NET_CHUNKSIZE, whose recipe list is release data."""
    return catalog.families(catalog.release_of(release))


def make_plan(
    *,
    tp: int | None = None,
    pp: int | None = None,
    vpp: int | None = None,
    cp: int | None = None,
    ep: int | None = None,
    precision: str | None = None,
    hidden_size: int | None = None,
    seq_length: int | None = None,
    micro_batch_size: int | None = None,
    lora: bool = False,
    moe: bool | None = None,
    moe_a2a_overlap: bool = False,
    moe_flex_dispatcher_backend: str | None = None,
    megatron_fsdp: bool = False,
    recipe: str | None = None,
    model: str | None = None,
    shape: dict[str, object] | None = None,
    global_batch_size: int | None = None,
    overrides: dict[str, object] | None = None,
    **inputs,
) -> PlanResult:
    """inputs: scenario.build's keywords (gpus, gpu, te, bridge_version, task, machine_facts, launcher_env); model,
    shape: the model's shape for the budget of the planned config (api.budget's), at global_batch_size and the
    sequence length and micro-batch size given where the config does not set them. overrides: KEY=VALUE the user asks
    for beside the flags (a fix of a plan's finding, evalT U10), kept as given and written with the plan's."""
    release = releases.get(inputs.get("bridge_version"))
    given = _given(overrides)
    entry, family = _recipe(recipe, release)
    if entry is None and model is not None:  # the model --model names: its family (launcher)
        family = _family_of(model, family, release)
    shape_given = dict(hidden_size=hidden_size, seq_length=seq_length, micro_batch_size=micro_batch_size)
    start = scenario.build(catalog_entry=entry, family=family, shape=shape_given, overrides=given, **inputs)
    given = _typed_given(start.request, given)
    scenario.with_model(start, model, shape)
    base = _recipe_layout(entry)
    tp, pp, cp, ep = (x if x is not None else base.get(k, 1) for x, k in ((tp, "tp"), (pp, "pp"), (cp, "cp"), (ep, "ep")))
    vpp = vpp if vpp is not None else base.get("vpp")
    _check_sizes(dict(tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep))
    gpu_info = releases.gpu(start.gpu)
    # --precision on a recipe of another precision: the recipe's mixed_precision is replaced (asked for, like the layout)
    other_precision = (precision is not None and entry is not None
                       and releases.precision(precision) != releases.precision(entry.get("precision") or "bf16"))
    precision = releases.precision(precision if precision is not None else (entry or {}).get("precision") or "bf16")
    prec = releases.precision_facts(precision)
    moe = bool(moe) if moe is not None else ep > 1
    if moe_flex_dispatcher_backend is not None:
        releases.flex_backend(moe_flex_dispatcher_backend)

    grid = layout.Layout(tp=tp, pp=pp, vpp=vpp, cp=cp, gpus=start.gpus)
    recipe_co = entry["request"]["comm_overlap"] if entry else None
    blocked = _blocked_precision(release, None if other_precision else entry, prec)
    notes: list = []
    if recipe_co is not None and layout.tp_overlap_applies(base.get("tp", 1), start.te):
        tp_on = bool(recipe_co["tp_comm_overlap"]) and not blocked  # the recipe's own choice stands, unless it cannot run
        # (a recipe at TP 1 made none: evalL L3, a LoRA recipe's off at TP 1 was kept at TP 4 with sequence parallel)
    else:
        # the MoE practice is that of recipes with expert parallelism; --moe on a layout without it is a dense one here
        # (as the config's own MODE_LEFT_OFF reads it)
        tp_on, notes = _tp_rule(tp, start.te, blocked, moe and ep > 1, layers.multi_latent_attention(start.request, family))
    rebuilt = _mtp_rebuilt_decoder(start.request, pp, vpp)
    if rebuilt and layout.tp_overlap_applies(tp, start.te) and (tp_on or not notes):
        # (TP_OVERLAP_OFF_MTP_DECODER: with PP 1 no layer gets userbuffers; turning it on would do nothing)
        tp_on, notes = False, [findings.make("TP_OVERLAP_NOT_RECOMMENDED", tp=tp, why=rebuilt)]
    sizes = {"tp": tp, "cp": cp, **start.shape}
    preset = None
    if tp_on:
        matched, _ = ub_presets.match(release, gpu_info, prec["preset"], sizes, lora)
        preset = matched.name if matched else None
        if entry is not None and _same_shape(entry, tp, cp, gpu_info["name"], precision):
            preset = (recipe_co or {}).get("tp_comm_overlap_cfg")  # the recipe's own, tuned by Bridge for this layout
        elif matched:
            via = "" if matched.gpu == gpu_info["name"] else f" (tuned on {matched.gpu}; Bridge's own {gpu_info['name']} perf recipes use it)"
            notes.append(findings.make("TP_PRESET_MATCHED", fix_overrides={"comm_overlap.tp_comm_overlap_cfg": matched.name},
                                       preset=matched.name, how=f"matches exactly{via}"))
        elif (shipped := catalog.shipped_preset(release.version, (entry or {}).get("model") or model, tp, cp, gpu_info["name"], precision)):
            preset, name = shipped  # no name matches, and Bridge runs this model at this TP and CP with one
            notes.append(findings.make("TP_PRESET_MATCHED", fix_overrides={"comm_overlap.tp_comm_overlap_cfg": preset}, preset=preset,
                                       how=f"is the one Bridge's own {name} runs at TP {tp}, CP {cp} on {gpu_info['name']} "
                                           "(no preset's name matches this shape exactly)"))

    overrides = {**_layout_overrides(base, tp, pp, vpp, cp, ep), **given}
    if tp >= 2 and not (entry and entry["request"]["model"]["sequence_parallel"]):
        overrides["model.sequence_parallel"] = True
    if recipe_co is None or recipe_co.get("tp_comm_overlap") != tp_on:
        overrides["comm_overlap.tp_comm_overlap"] = tp_on
    if entry is None or tp_on and ((recipe_co or {}).get("tp_comm_overlap_cfg") != preset
                                   or "comm_overlap.tp_comm_overlap" in overrides):
        # Always explicit without a recipe: null selects Transformer Engine's default even where a recipe carries a preset.
        # And wherever the plan turns TP overlap on: a YAML or Hydra merge of comm_overlap over a recipe's preset object
        # that the snippet does not restate leaves a mapping where Bridge's setup calls asdict() (TypeError)
        overrides["comm_overlap.tp_comm_overlap_cfg"] = preset if tp_on else None
    if grid.divisible and (grid.dp > 1 or cp > 1 and not megatron_fsdp):
        # ddp's flag always: CommOverlapConfig reads it, and only it, before validate() syncs the two
        overrides["ddp.use_distributed_optimizer"] = True
        if not start.request.optimizer["use_distributed_optimizer"]:
            overrides["optimizer.use_distributed_optimizer"] = True
    kept = grid.divisible and bucket_size_a_section_replaces(
        start.request, grid.dp * cp, bool(overrides.get("ddp.use_distributed_optimizer", start.request.ddp.get("use_distributed_optimizer"))))
    if kept and recipe_co is None:  # the recipe's own bucket size, which the section the plan creates would replace
        overrides["comm_overlap.bucket_size"] = kept
    if grid.divisible and grid.dp == 1 and cp > 1 and not megatron_fsdp:
        # the gradients reduce over the DP x CP ranks, which Bridge's DP overlap defaults leave out (DP_OVERLAP_OFF_WITH_CP)
        overrides.update({"comm_overlap.overlap_grad_reduce": True, "comm_overlap.overlap_param_gather": True})
    if prec["recipe"] and entry is None:
        overrides["mixed_precision"] = prec["recipe"]
    asked = dict(_layout_overrides(base, tp, pp, vpp, cp, ep))  # what the user's flags ask for, as opposed to the plan's choices
    from ..budget.shape import experts_of

    experts = experts_of(model, shape) if ep > 1 and not start.request.model.get("num_moe_experts") else None
    if experts:
        asked["model.num_moe_experts"] = experts
    elif ep > 1 and entry is None and not start.request.model.get("num_moe_experts"):  # no overrides Bridge rejects
        raise UsageError(f"--ep {ep}: expert parallelism needs the model's expert count, and neither the recipe, "
                         "--model nor --shape gives one: pass model.num_moe_experts=N, --shape num_moe_experts=N, "
                         "--model NAME of an MoE model or --recipe of one")
    if other_precision:
        asked["mixed_precision"] = prec["recipe"] or "bf16_mixed"
        notes += _precision_drops(entry, asked["mixed_precision"], release)
    if megatron_fsdp:
        asked.update({"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "fsdp_dtensor"})
        if str(start.request.env_vars.get("CUDA_DEVICE_MAX_CONNECTIONS")) == "1":  # a Hopper TP recipe's (recheck N1)
            overrides["env_vars.CUDA_DEVICE_MAX_CONNECTIONS"] = launch_env.FSDP_MAX_CONNECTIONS  # FSDP refuses 1
    if moe_flex_dispatcher_backend:  # as Bridge's apply_flex_dispatcher_backend sets it
        asked.update({"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": moe_flex_dispatcher_backend})
    if moe_a2a_overlap:
        asked["comm_overlap.overlap_moe_expert_parallel_comm"] = True
        dispatcher = start.request.model.get("moe_token_dispatcher_type")
        if not moe_flex_dispatcher_backend and dispatcher not in MOE_OVERLAP_DISPATCHERS:  # recheck45 N7
            overrides["model.moe_token_dispatcher_type"] = "alltoall"
            notes.append(findings.make("PLAN_SETS_MOE_DISPATCHER", fix_overrides={"model.moe_token_dispatcher_type": "alltoall"},
                                       origin=f"recipe {entry['name']}" if entry else "the recipe baseline", dispatcher=fmt(dispatcher)))
    asked.update(given)
    overrides.update(asked)

    @functools.cache
    def known() -> frozenset:  # the errors of the layout as asked (which, not their fixes): needed only where the plan has any
        return frozenset(f.id for f in probe(start.derive(request.as_overrides(asked)).resolve()) if f.severity == "error")

    if ep > 1 and tp > 1 and start.request.model.get("expert_tensor_parallel_size") is None and not release.expert_tp_one_with_ep:
        overrides["model.expert_tensor_parallel_size"] = 1  # what Bridge 0.6 defaults to, and its MoE recipes set
        notes.append(_expert_tp_note(start, asked, known(), tp, entry))

    overrides, an, kept = _no_new_errors(lambda chosen: analyze(start.derive(request.as_overrides(chosen))), overrides, asked, known, entry)
    notes = [n for n in notes if n.id != "PLAN_SETS_MOE_DISPATCHER" or "model.moe_token_dispatcher_type" in overrides] + kept
    notes += _shipped_recipes_differ(release, an, grid, gpu_info["name"], precision, moe, entry)
    eff = an.effective
    plan_layout = {"tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep, "gpus": start.gpus, **start.shape, "dp": grid.dp if grid.divisible else None,
                   "gpu": gpu_info["name"], "precision": precision, "lora": lora, "te": start.te, "moe": moe,
                   "megatron_fsdp": bool(eff["ddp"]["use_megatron_fsdp"]), "recipe": catalog.reference(entry, release.version) if entry else None,
                   "family": start.family, "task": start.task}
    flags = dict(seq_length=seq_length, micro_batch_size=micro_batch_size, global_batch_size=global_batch_size)
    an.budget = _budget(an, start.shape, flags, model, shape, lora)
    costs = next((f for f in (an.budget or {}).get("findings", ()) if f["id"] == "WORTH_OVERLAP_COSTS_MORE"
                  and "comm_overlap.tp_comm_overlap" in f["knobs"]), None)
    if costs is not None and overrides.get("comm_overlap.tp_comm_overlap") is True:  # (evalO O7)
        notes.append(findings.make("PLAN_TP_OVERLAP_COSTS_MORE", tp=tp, costs=costs["message"]))
    return PlanResult(analysis=an, layout=plan_layout, overrides=overrides, preset=preset, notes=notes)


def _expert_tp_note(start, asked: dict, errors: set, tp: int, entry):
    """Why the plan sets expert TP 1 on a release that leaves it at TP: what expert TP = TP brings that 1 does not
    (evalM M1: an expert grid that did not divide the world), else that a model with linear biases in its experts
    cannot run it, which a recipe that loads its model from a checkpoint does not show (recheck47 R1: GPT-OSS)."""
    one = request.as_overrides({**asked, "model.expert_tensor_parallel_size": 1})
    one = {f.id for f in probe(start.derive(one).resolve()) if f.severity == "error"}
    cleared = sorted((errors & EXPERT_TP_BLOCKS) - one)
    origin = f"recipe {entry['name']}" if entry else "the recipe baseline"
    why = (f", which {origin} could not run ({', '.join(cleared)})" if cleared else
           ", which Megatron-Core refuses where the experts have linear biases (GPT-OSS's; the model a recipe loads from "
           "a checkpoint is not known here)")
    return findings.make("PLAN_SETS_EXPERT_TP", fix_overrides={"model.expert_tensor_parallel_size": 1}, tp=tp, why=why)


def _budget(an: Analysis, given: dict, flags: dict, model, shape, lora: bool = False) -> dict:
    """The planned config's budget at the batch of the plan's flags (`flags`: seq_length, micro_batch_size,
    global_batch_size as given), over a recipe's own where it sets one (recheck46 N6: they were ignored), and, where
    neither does, at the shape the plan matched presets for (`given`). Not in the plan's overrides: they are the
    batch of the question, not a choice of the plan; the budget's assumptions say which of the recipe's it replaced."""
    section = {"model": an.state.model, "train": an.state.train}
    batch, replaced = {}, []
    for key in ("model.seq_length", "train.micro_batch_size", "train.global_batch_size"):
        part, name = key.split(".")
        current = section[part].get(name)
        value = flags.get(name) if flags.get(name) is not None else given.get(name) if current is None else None
        if value is not None and value != current:
            batch[key] = value
            if current is not None:
                replaced.append(f"{key} {fmt(value)} (the recipe's: {fmt(current)})")
    if "model.seq_length" in batch:
        req = an.state.request  # validate() holds the two equal
        batch[req.dataset_seq_word()] = batch["model.seq_length"]
    costed = analyze(an.scenario.derive(batch)) if batch else an
    new = [f for f in costed.errors if f.id not in {e.id for e in an.errors}]
    if new:  # resolve of the plan's overrides would not show it: the batch is not among them
        return {"unavailable": f"at the batch of the plan's flags {failing(new[0])}: {new[0].message}"}
    out = budgets.shown(costed, model, shape, LORA if lora else None)
    if costed is not an and "findings" in out:
        from ..budget.worth import reconcile

        reconcile(an, out)  # the plan's own answer, at the batch its budget is of
    if replaced and "assumptions" in out:
        out["assumptions"].insert(0, "the batch of the plan's flags, not the recipe's: " + ", ".join(replaced))
    return out


def failing(f) -> str:
    """Where an error finding stops the run, in its own words: Bridge's config step raises the config-time ones; the
    setup and step ones fail where their record's source says (evalAB AB2-6: "Bridge raises
    UB_TP_ACROSS_NVLINK_DOMAINS", which Transformer Engine's initialize_ub fails on at setup, base.py:305-317, while
    Bridge's runtime_config_update and validate() accept TP overlap at any TP: comm_overlap.py has no such check)."""
    when = getattr(f, "when", None) or "config"
    if when == "config":
        return f"Bridge raises {f.id} at its config step"
    try:
        where = str(findings.record(f.id).get("source") or "").split(";")[0].split(" (")[0].strip()
    except KeyError:
        where = ""
    at = "at setup" if when == "setup" else "in training (its first step)" if when == "step" else f"at {when}"
    return f"it fails {at}" + (f" in {where}" if where else "") + f" ({f.id})"


def _no_new_errors(resolve, overrides: dict, asked: dict, known_errors, entry) -> tuple[dict, Analysis, list]:
    """The plan's overrides without those of its own choices that make the run fail (Bridge's config step, setup or
    training) where the layout the user asked for does not (`known_errors()`: its error ids; a plan never breaks a recipe,
    or the baseline, that works as shipped): each such override is left out, with a note naming the error it would bring."""
    resolution, notes = resolve(overrides), []
    known = known_errors() if resolution.errors else set()
    while new := [f for f in resolution.errors if f.id not in known]:
        for key in reversed([k for k in overrides if k not in asked]):
            trial = {k: v for k, v in overrides.items() if k != key}
            tried = resolve(trial)
            left = [f for f in tried.errors if f.id not in known]
            if len(left) < len(new) and {f.id for f in left} <= {f.id for f in new}:
                origin = f"recipe {entry['name']}" if entry else "the recipe baseline"
                brought = sorted({f.id for f in new} - {f.id for f in left})
                notes.append(findings.make("PLAN_LEAVES_KEY_AS_SHIPPED", knobs=[key], key=key, value=fmt(overrides[key]),
                                           origin=origin, errors=", ".join(brought),
                                           fails="; ".join(failing(next(f for f in new if f.id == i)) for i in brought)))
                overrides, resolution = trial, tried
                break
        else:
            break  # no choice of the plan's brings it: the layout the user asked for does
    return overrides, resolution, notes


def _blocked_precision(release, entry, prec: dict) -> str | None:
    """NVFP4 or blockwise FP8 where the run's mixed precision (the recipe's own, whatever its name says, or the one
    --precision selects) is one Transformer Engine's userbuffers cannot carry."""
    from ..findings.rules.common import tp_overlap_precision_problem

    mp = entry["request"]["mixed_precision"] if entry else {"recipe": prec["recipe"] or "bf16_mixed"}
    if mp is None:
        return None  # the recipe runs without a mixed-precision config: BF16/FP32 tensors only
    fields = {**release.mixed_precision(mp["recipe"]), **(mp.get("fields") or {})}
    problem = tp_overlap_precision_problem(fields)
    return problem[0] if problem else None


def _tp_rule(tp: int, te: bool, blocked: str | None, moe: bool, mla: str | None = None) -> tuple[bool, list]:
    """TP overlap by Bridge's rules and its recipes' practice, with the note that says why when it stays off. mla: where
    the model is known to build multi-latent attention (layers.multi_latent_attention)."""
    if not layout.tp_overlap_applies(tp, te):
        return False, []
    if blocked:
        why = f"{blocked} cannot go through Transformer Engine's userbuffers (see explain TP_OVERLAP_UNSUPPORTED_PRECISION)"
    elif mla:
        why = (f"a multi-latent attention model ({mla}): Megatron-Core turns TP overlap off as it builds the first MLA "
               "layer, and every Bridge recipe of an MLA model leaves it off (see explain TP_OVERLAP_OFF_MLA)")
    elif moe:
        why = "an MoE model with expert parallelism: none of Bridge's MoE perf recipes with TP > 1 uses it (no code forbids it)"
    else:
        return True, []
    return False, [findings.make("TP_OVERLAP_NOT_RECOMMENDED", tp=tp, why=why)]


def _mtp_rebuilt_decoder(req, pp: int, vpp: int | None) -> str | None:
    """Why TP overlap would do nothing, where the run has MTP layers, PP 1 and no VPP, and its provider's model builds
    its decoder again after the MTP block (releases.decoder_rebuilt: TP_OVERLAP_OFF_MTP_DECODER); else None. With PP > 1
    the ranks without the MTP block keep their userbuffers, and plan turns it on as it would."""
    n = req.model.get("mtp_num_layers")
    if not n or pp != 1 or (vpp or 1) != 1:
        return None
    found = releases.decoder_rebuilt(req.release.version, req.recipe, req.model_target)
    if found is None:
        return None
    provider, at = found
    return (f"with {n} multi-token prediction layer(s) on {provider}, whose model ({at['model']}) builds its decoder again "
            f"after the MTP block ({at['file']}:{at['decoder_line']}), the MTP block's eh_proj turns TP overlap off "
            "before any decoder layer is built: with PP = 1 it would do nothing (see explain TP_OVERLAP_OFF_MTP_DECODER; "
            "model.mtp_num_layers=null keeps the decoder's userbuffers)")


def _recipe_layout(entry: dict | None) -> dict:
    if entry is None:
        return {}
    m = entry["request"]["model"]
    return {"tp": m["tensor_model_parallel_size"], "pp": m["pipeline_model_parallel_size"], "vpp": m["virtual_pipeline_model_parallel_size"],
            "cp": m["context_parallel_size"], "ep": m.get("expert_model_parallel_size", 1)}


def _precision_drops(entry: dict, name: str, release) -> list:
    """The fields the recipe's mixed precision sets that the named recipe replacing it sets otherwise (evalV Z1: a perf
    recipe's grad_reduce_in_fp32=False, which _perf_precision sets and bf16_with_mxfp8_mixed() has True)."""
    own = (entry["request"].get("mixed_precision") or {}).get("fields") or {}
    named = release.mixed_precision(name)
    lost = {k: v for k, v in own.items() if k in named and named[k] != v}
    if not lost:
        return []
    said = ", ".join(f"{k}={fmt(named[k])} (the recipe's: {fmt(v)})" for k, v in lost.items())
    keep = "; ".join(f"cfg.mixed_precision.{k} = {v!r}" for k, v in lost.items())
    return [findings.make("PLAN_PRECISION_DROPS_RECIPE_FIELDS", knobs=[f"mixed_precision.{k}" for k in lost], recipe=entry["name"],
                          name=name, fields=said, keep=keep)]


def _given(overrides: dict | None) -> dict:
    """The user's own overrides: any key but the layout's, which the flags set (one way to say each)."""
    flags = {"model.tensor_model_parallel_size": "--tp", "model.pipeline_model_parallel_size": "--pp",
             "model.virtual_pipeline_model_parallel_size": "--vpp", "model.context_parallel_size": "--cp",
             "model.expert_model_parallel_size": "--ep"}
    for key in overrides or {}:
        if key in flags:
            raise UsageError(f"{key}: plan takes the layout from its flags: use {flags[key]}")
    return dict(overrides or {})


def _typed_given(asked, given: dict) -> dict:
    """The user's overrides as the request typed them, else as Hydra types them; the whole-section word
    comm_overlap={...} (a fix's own, for a config without the section) as the fields it sets (fuzzT T3-6)."""
    typed = {}
    for key, value in given.items():
        if key == "comm_overlap" and key not in asked.explicit:
            typed.update({k: v for k, v in asked.explicit.items() if k.startswith("comm_overlap.")})
        else:
            typed[key] = asked.explicit[key] if key in asked.explicit else _hydra_value(key, value)
    return typed


def _hydra_value(key: str, value):
    """A command-line value the request keeps as given (a field no rule types), as Hydra types it: the snippets write
    it so (recheck56 AC2: '10' went out as a string; fuzzS S2-1: [p2p,a2a] as the text '[p2p,a2a]', a quoted 'a,b'
    with its quotes)."""
    return hydra.value_of(key, value) if isinstance(value, str) else value


def _layout_overrides(base: dict, tp: int, pp: int, vpp, cp: int, ep: int = 1) -> dict:
    """The parallel sizes, all of them without a recipe (but VPP none and EP 1: a CP of 1 is written, since a plan
    without a recipe is pasted over the user's, which may run CP 2: evalH H8); with one, those that differ from it."""
    wanted = {"model.tensor_model_parallel_size": (tp, "tp"), "model.pipeline_model_parallel_size": (pp, "pp"),
              "model.virtual_pipeline_model_parallel_size": (vpp, "vpp"), "model.context_parallel_size": (cp, "cp"),
              "model.expert_model_parallel_size": (ep, "ep")}
    out = {}
    for key, (value, name) in wanted.items():
        if not base:
            if name == "vpp" and value is None or name == "ep" and value == 1:
                continue
            out[key] = value
        elif base.get(name) != value:
            out[key] = value
    return out


def _same_shape(entry: dict, tp: int, cp: int, gpu: str, precision: str) -> bool:
    """Whether the plan keeps the recipe's layout, GPU and precision, so its own preset stands. A recipe whose name
    gives no GPU (0.5.x's llama3_70b_pretrain_config) runs its preset on the GPU the preset is tuned for, and one whose
    name gives no precision is BF16 (evalL L1: such a recipe's exact preset was replaced by TE's default)."""
    m = entry["request"]["model"]
    preset = str((entry["request"]["comm_overlap"] or {}).get("tp_comm_overlap_cfg"))
    own_gpu = entry.get("gpu") or (gpu if f"_{gpu}_" in preset else None)
    own_precision = releases.precision(entry.get("precision") or "bf16")
    return (m["tensor_model_parallel_size"], m["context_parallel_size"], own_gpu, own_precision) == (tp, cp, gpu, precision)


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
