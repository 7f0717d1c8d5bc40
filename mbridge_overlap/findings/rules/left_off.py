"""What a run leaves on the table against what Bridge would choose for its own layout: overlap modes that apply but
were off, the tuned preset, the launch environment of Bridge's own launchers; and the release the answer is for."""

from __future__ import annotations

from ...run import launch_env, layers, layout, peft
from ...upstream import catalog, releases, presets as ub_presets
from .. import make, overrides_text, shell
from ..proof import fails, fixed, probing, proven
from ...run.request import CUSTOM_UB_CFG
from ...run.resolver import State
from ...safeio import shown
from ..registry import check
from .common import adopt_dp_knobs, tp_overlap_precision_problem


@check("MODE_LEFT_OFF")
def modes_left_off(state: State):
    """Overlap modes that apply to the run's layout but were off, each with a fix proven by re-resolution (the
    re-resolved run is checked for this too, so a fix that leaves the mode off or brings a warning is not offered)."""
    eff = state.effective()
    model, ddp = eff["model"], eff["ddp"]
    requested_tp = (state.request.comm_overlap or {}).get("tp_comm_overlap")
    moe = model.get("expert_model_parallel_size", 1) > 1 or (state.request.model.get("expert_model_parallel_size") or 1) > 1
    blocked = tp_overlap_precision_problem(state.model)
    if layout.tp_overlap_applies(model["tensor_model_parallel_size"], state.te) and not model["tp_comm_overlap"] and not requested_tp \
            and not blocked and not moe and layers.multi_latent_attention(state.request, state.scenario.family) is None \
            and not _tp_does_nothing_with_mtp(state):
        o = {"comm_overlap.tp_comm_overlap": True}  # (an MLA model runs none: TP_OVERLAP_OFF_MLA)
        if not model["sequence_parallel"]:
            o["model.sequence_parallel"] = True
        if state.request.comm_overlap is None:
            o.update(adopt_dp_knobs(state))
        yield from _left_off(state, "TP", f"TP={model['tensor_model_parallel_size']}", "it was not requested", [o], list(o))
    # PP left off is PP_OVERLAP_NOT_SELECTED, with the fix for its cause
    dp = state.data_parallel_size
    if dp > 1 and not (ddp["overlap_grad_reduce"] and ddp["overlap_param_gather"]) and not ddp["use_megatron_fsdp"]:
        off = [n for n in ("overlap_grad_reduce", "overlap_param_gather") if not ddp[n]]
        knobs = [f"ddp.{n}" for n in off]
        both_on = {"ddp.use_distributed_optimizer": True, "optimizer.use_distributed_optimizer": True}
        on = {f"comm_overlap.{n}": True for n in off}
        if not state.dp_overlap_applied:  # CommOverlapConfig skipped DP overlap: the distributed optimizer was off
            candidates = [both_on, {**both_on, **on}, {**both_on, **on, **adopt_dp_knobs(state)}]
        elif state.request.comm_overlap is not None:
            candidates = [on]
        else:
            plain = {f"ddp.{n}": True for n in off}
            candidates = [{**plain, **({"optimizer.overlap_param_gather": True} if "overlap_param_gather" in off else {})}]
        what = f"{' and '.join(off)} {'was' if len(off) == 1 else 'were'} off{_set_off_by(state, off)}"
        yield from _left_off(state, "DP", f"DP={dp}", what, candidates, knobs)


def _tp_does_nothing_with_mtp(state: State) -> bool:
    """PP 1, no VPP, MTP layers, and a provider whose model builds its decoder again after the MTP block: TP overlap
    would do nothing (TP_OVERLAP_OFF_MTP_DECODER), so it is not left on the table."""
    model = state.model
    if model["pipeline_model_parallel_size"] != 1 or (model["virtual_pipeline_model_parallel_size"] or 1) != 1:
        return False
    req = state.request
    return bool(layers.multi_token_prediction(req, model)) and releases.decoder_rebuilt(
        req.release.version, req.recipe, req.model_target) is not None


_SET_BY = {"override": "your override", "config": "your config file", "recipe": "the recipe"}


def _set_off_by(state: State, off: list[str]) -> str:
    """Who set each DP knob off, where a request did (the key that wins: comm_overlap's once it applies), so that an
    off the user chose (a fix of DP_OVERLAP_KNOB_OVERWRITTEN, say) reads as that choice (evalM M8)."""
    keys = ("comm_overlap",) if state.dp_overlap_applied else ("ddp", "optimizer")
    set_off = [next((k for k in (f"{s}.{name}" for s in keys) if state.request.explicit.get(k) is False), None) for name in off]
    said = [f"{k}=false by {_SET_BY.get(state.request.origin.get(k), 'the request')}" for k in set_off if k]
    return f" ({'; '.join(said)})" if said else ""


def _left_off(state, mode: str, why: str, what: str, candidates: list[dict], knobs: list):
    """The mode left off, with its proven fix; nothing where every way to turn it on makes Bridge, Megatron-Core or
    the machine fail (TP overlap across NVLink domains, say): a mode that cannot run here is not left on the table."""
    o, fix = fixed(state, "MODE_LEFT_OFF", candidates, knobs=knobs)
    if not o and not probing() and all(fails(state, c) for c in candidates):
        return
    yield make("MODE_LEFT_OFF", fix_overrides=o, fix=fix, knobs=knobs, mode=mode, why=why, what=what)


@check("TP_OVERLAP_DEFAULT_UB_CFG", "PRESET_NOT_USED", "PRESET_NOT_FOR_LAYOUT")
def preset(state: State):
    """With TP overlap on: the tuned preset that matches the run's known shape, the one it uses, and how they differ."""
    model = state.model
    if not model["tp_comm_overlap"] or layers.multi_latent_attention(state.request, state.scenario.family):
        return  # (MLA: Megatron-Core turns it off at the model build, TP_OVERLAP_OFF_MLA: no preset to tune; recheck60 AG5)
    release, gpu_info = state.request.release, releases.gpu(state.gpu)
    precision, sizes, lora = ub_presets.precision_class(state.precision or {"bf16": True}), ub_presets.shape(state), peft.of(state) is not None
    best, why = ub_presets.match(release, gpu_info, precision, sizes, lora, state.request.needs_append)
    used = model["tp_comm_overlap_cfg"]
    if used == CUSTOM_UB_CFG:
        return  # the run's own tuned config (UNMODELED_OVERLAP_KEY says the answer does not model it)
    if best is not None and used != best.name:
        c = {"comm_overlap.tp_comm_overlap_cfg": best.name}
        yield make("PRESET_NOT_USED", fix_overrides=proven(state, "PRESET_NOT_USED", [c]), preset=best.name, used=used or "the TE default")
    elif used is None:
        yield make("TP_OVERLAP_DEFAULT_UB_CFG", why=f"; no tuned preset matches exactly: {why}",
                   fix=shell("nothing to do, or tune your own TransformerLayerTPOverlapCfg"))
    elif best is None:
        differ = ub_presets.mismatches(used, gpu_info, precision, sizes, lora)
        if differ and not _bridge_runs(state, used, sizes, gpu_info["name"], precision):
            yield make("PRESET_NOT_FOR_LAYOUT", used=used, differ="; ".join(differ))


def _bridge_runs(state: State, preset: str, sizes: dict, gpu: str, precision: str | None) -> bool:
    """Whether Bridge's own perf recipes of the run's model run this preset at its TP and CP on this GPU: their
    choice for the shape, not a preset for another layout."""
    model = (state.request.recipe or {}).get("model") or state.scenario.family
    shipped = catalog.shipped_preset(state.request.release.version, model, sizes["tp"], sizes["cp"], gpu, precision or "")
    return shipped is not None and shipped[0] == preset


# Launch variables whose value decides whether overlap happens; the others are tuning (a differing value is info).
_DECISIVE_ENV = ("CUDA_DEVICE_MAX_CONNECTIONS", "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", "NVLINK_DOMAIN_SIZE", "USE_MNNVL")


@check("LAUNCH_ENV_DIFFERS_FROM_BRIDGE", "LAUNCH_ENV_TUNED_DIFFERENTLY", "LAUNCH_ENV_NOT_SET", "LAUNCHER_ENV_DIFFERS_FROM_BRIDGE")
def launch_environment(state: State):
    """The config's env_vars against what Bridge's own launchers set for this layout."""
    have, release = state.request.env_vars, state.request.release
    for name, value, why in launch_env.rules(release, launch_env.layout_of(state)):
        set_to = {f"env_vars.{name}": launch_env.env_value(value)} if release.env_vars else {}
        if name in launch_env.TOPOLOGY and state.request.origin.get(f"env_vars.{name}") == "override":
            continue  # the 0.6 launcher keeps an explicit env_vars override of the topology (recheck54 Y4)
        if name in have and str(have[name]) != value:
            fid = "LAUNCH_ENV_DIFFERS_FROM_BRIDGE" if name in _DECISIVE_ENV else "LAUNCH_ENV_TUNED_DIFFERENTLY"
            if fid == "LAUNCH_ENV_TUNED_DIFFERENTLY" and _recipe_s_own(state, name):
                continue  # the shipped recipe tunes it so itself: Bridge's choice, not a departure from it
            yield make(fid, fix_overrides=proven(state, fid, [set_to], knobs=[f"env_vars.{name}"]), knobs=[f"env_vars.{name}"],
                       name=name, have=have[name], value=value, why=why)
        elif name not in have and release.env_vars:
            yield from _not_set(state, name, value, why, set_to)
        elif not release.env_vars and name in _DECISIVE_ENV and state.launcher_env.get(name) not in (None, str(value)):
            # recheck53 X4 (0.5): no cfg.env_vars, so the launcher's environment is the run's
            yield _launcher_differs(state, name, value, why, f"Megatron-Bridge {release.version} has no cfg.env_vars")


def _not_set(state: State, name: str, value: str, why: str, set_to: dict):
    """LAUNCH_ENV_NOT_SET; where the launcher exports the variable, its value runs (env_vars is installed with
    setdefault): nothing where it is Bridge's, else the export is the fix (fuzzO F5: env_vars.X was offered, a no-op)."""
    knobs, launcher = [f"env_vars.{name}"], state.launcher_env.get(name)
    if launcher is None:
        o = proven(state, "LAUNCH_ENV_NOT_SET", [set_to], knobs=knobs)
        fix = shell("{asked} (or export it in the launcher)", asked=overrides_text(o or set_to))
        yield make("LAUNCH_ENV_NOT_SET", fix_overrides=o, fix=fix, knobs=knobs, name=name, value=value, why=why, exported="")
    elif launcher != str(value) and name in _DECISIVE_ENV:  # (recheck53 X4: info, where env_vars' 8 was a warning)
        yield _launcher_differs(state, name, value, why, "cfg.env_vars does not set it")
    elif launcher != str(value):
        o, fix = fixed(state, "LAUNCH_ENV_NOT_SET", [{f"launcher:{name}": str(value)}], knobs=knobs)
        yield make("LAUNCH_ENV_NOT_SET", fix_overrides=o, fix=fix, knobs=knobs, name=name, value=value, why=why,
                   exported=f", and the launcher exports {shown(launcher)}, which runs (env_vars is installed with setdefault)")


def _launcher_differs(state: State, name: str, value: str, why: str, unset: str):
    knobs = [f"env_vars.{name}"]
    o, fix = fixed(state, "LAUNCHER_ENV_DIFFERS_FROM_BRIDGE", [{f"launcher:{name}": str(value)}], knobs=knobs)
    return make("LAUNCHER_ENV_DIFFERS_FROM_BRIDGE", fix_overrides=o, fix=fix, knobs=knobs, name=name, value=value, why=why,
                launcher=shown(state.launcher_env[name]), unset=unset)


def _recipe_s_own(state: State, name: str) -> bool:
    """Whether a launch variable's value is the shipped recipe's own (not an override's or a config file's)."""
    req = state.request
    own = ((req.recipe or {}).get("request") or {}).get("env_vars") or {}
    return req.origin.get(f"env_vars.{name}") is None and name in own and str(own[name]) == str(req.env_vars.get(name))


@check("HYBRIDEP_EP_BEYOND_NVLINK_DOMAIN")
def hybridep_ep_beyond_domain(state: State):
    """The 0.6 perf launcher raises for a hybridep EP group larger than an NVL72 domain (recheck53 X3: the skill gave
    ranks per domain of 72 and a fix to set them)."""
    layout = launch_env.layout_of(state)
    said = launch_env.hybridep_ep_refused(state.request.release, layout)
    if said:
        yield make("HYBRIDEP_EP_BEYOND_NVLINK_DOMAIN", ep=layout.ep, gpu=state.gpu, said=said)


@check("LAUNCHER_ENV_WINS")
def launcher_env_wins(state: State):
    """cfg.env_vars is installed with os.environ.setdefault: the launcher's value runs. The fix that holds for the
    whole analysis: the config saying what runs, where the launcher's value is sound for this layout; else the
    config's value in the launcher (unset there, or exported)."""
    ruled = {name: value for name, value, _ in launch_env.rules(state.request.release, launch_env.layout_of(state))}
    for name, value in state.request.env_vars.items():
        launcher = state.launcher_env.get(name)
        if launcher is not None and launcher != str(value):
            knobs = [f"env_vars.{name}"]
            candidates = [{f"env_vars.{name}": launch_env.env_value(launcher)}, {f"launcher:{name}": None},
                          {f"launcher:{name}": str(value)}]
            if name in ruled and launcher != ruled[name]:  # (evalT U7: the config was steered to a value against the rule)
                candidates = candidates[1:] + candidates[:1]
            o, fix = fixed(state, "LAUNCHER_ENV_WINS", candidates, knobs=knobs)
            yield make("LAUNCHER_ENV_WINS", fix_overrides=o, fix=fix, knobs=knobs, name=name, value=str(value), launcher=launcher)


@check("RELEASE_NOT_VERIFIED", "RELEASE_READ_FROM_SOURCE")
def release(state: State):
    rel = state.request.release
    if rel.rules_of != rel.version:
        changed = rel.changed_rules
        if changed is None:
            what = "Nobody has compared its code with ours yet."
        elif changed:
            what = "Rules whose code changed: " + "; ".join(f"{k}: {v}" for k, v in changed.items())
        else:
            what = "Its code was compared with ours: no anchored rule changed."
        yield make("RELEASE_NOT_VERIFIED", version=rel.version, rules_of=rel.rules_of, changed=what)
    elif not rel.verified:
        yield make("RELEASE_READ_FROM_SOURCE", version=rel.version, data_of=rel.data_version)
