"""The launch environment Bridge's own launchers use for a layout, by release.

0.6: the flat perf recipes' env_vars, which all follow the perf launcher's rules (scripts/performance/utils/
     overrides.py): CUDA_DEVICE_MAX_CONNECTIONS, NCCL_P2P_NET_CHUNKSIZE, the LayerNorm SM margins,
     TORCH_NCCL_HIGH_PRIORITY, and NCCL_NVLS_ENABLE / NCCL_CTA_POLICY by nccl_ub.
0.5: megatron/bridge/recipes/run_plugins.py `PerfEnvPlugin` (CUDA_DEVICE_MAX_CONNECTIONS, the margins, the chunk size).
"""

from __future__ import annotations


from ..upstream import releases
from dataclasses import dataclass, replace


# What Megatron-FSDP is launched with where a rule would give 1, which its check refuses: Bridge 0.6's FSDP perf
# recipes' value (FSDP_WITH_ONE_CONNECTION's fix and the plan use it too)
FSDP_MAX_CONNECTIONS = 32


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1
    gpu: str = "h100"
    moe_a2a_overlap: bool = False
    moe_flex_dispatcher_backend: str | None = "deepep"  # Megatron-Core's default, also for dense models
    flex_in_use: bool = False  # the model runs the flex dispatcher (0.5's PerfEnvPlugin is told the backend only then)
    megatron_fsdp: bool = False
    nccl_ub: bool = False
    ep: int = 1
    recipe: str | None = None  # Bridge model family, e.g. llama3_70b
    task: str = "pretrain"

    @classmethod
    def of(cls, effective: dict, dp: int, gpu: str, recipe: str | None = None, task: str = "pretrain", moe_a2a_overlap: bool = False) -> "Layout":
        model, ddp = effective["model"], effective["ddp"]
        return cls(
            tp=model["tensor_model_parallel_size"], pp=model["pipeline_model_parallel_size"],
            cp=model["context_parallel_size"], dp=dp, gpu=gpu,
            moe_a2a_overlap=moe_a2a_overlap or bool(model.get("overlap_moe_expert_parallel_comm")),
            moe_flex_dispatcher_backend=model.get("moe_flex_dispatcher_backend", "deepep"),
            flex_in_use=model.get("moe_token_dispatcher_type") == "flex",
            megatron_fsdp=bool(ddp.get("use_megatron_fsdp")), nccl_ub=bool(ddp.get("nccl_ub")), recipe=recipe, task=task,
            ep=model.get("expert_model_parallel_size") or 1,
        )


# The variables a launcher's environment can change the answer with (what runtime_config_update() installs, what the
# checks and Transformer Engine read); --shell-env takes only these from the shell.
LAUNCH_PREFIXES = ("CUDA_", "NCCL_", "NVTE_", "NVSHMEM_", "UB_", "TORCH_", "PYTORCH_", "NUM_OF_HYBRID_EP")


def from_shell(environ) -> dict:
    """The launch variables of an environment (LAUNCH_PREFIXES), nothing else of it."""
    return {k: v for k, v in environ.items() if k.startswith(LAUNCH_PREFIXES)}


def layout_of(state) -> Layout:
    """The launch layout of a resolved state: its effective config, DP size, GPU type, and the scenario's model family
    and task."""
    scenario = state.scenario
    return Layout.of(state.effective(), max(state.data_parallel_size, 1), state.gpu, scenario.family, scenario.task)


def env_value(value):
    """A launch variable's value as Bridge's recipes write it in env_vars: digits as an int, anything else as is."""
    # past 18 digits no launch variable is a count: kept as text (and int() of 4,300+ digits raises)
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18 else value


def rules(release: releases.Release, layout: Layout) -> list[tuple[str, str, str]]:
    """(name, value, why) for each variable Bridge's launcher would set for this layout."""
    cfg = releases.data()["launch_env"]
    style = cfg[release.launch_env]
    out = [("CUDA_DEVICE_MAX_CONNECTIONS", *_max_connections(release, style, layout))]
    margin = str(_layernorm_sm_margin(style, layout))
    why = (f"Bridge's perf recipes set it, TP overlap on or off (a few MoE recipes tune a value of their own): TE's LayerNorm "
           f"leaves that many SMs to the communication kernels running beside it (userbuffers with TP overlap, NCCL's DP "
           f"and PP collectives) ({_where(release)})")
    out += [("NVTE_FWD_LAYERNORM_SM_MARGIN", margin, why), ("NVTE_BWD_LAYERNORM_SM_MARGIN", margin, why)]
    chunk = _p2p_chunksize(cfg, layout)
    if chunk:
        out.append(("NCCL_P2P_NET_CHUNKSIZE", chunk, f"PP>1 for {layout.recipe} {layout.task}: larger P2P chunks ({_where(release)})"))
    for name, value in (style.get("common") or {}).items():
        out.append((name, str(value), f"every Bridge perf recipe sets it: NCCL runs on its high-priority stream ({_where(release)})"))
    nccl = style.get("nccl_ub" if layout.nccl_ub else "no_nccl_ub") or {}
    for name, value in nccl.items():
        why = "with ddp.nccl_ub, as every nccl_ub perf recipe" if layout.nccl_ub else "without ddp.nccl_ub, as every other perf recipe"
        out.append((name, str(value), f"{why} ({_where(release)})"))
    return out + _hybridep(release, style, layout)


def _hybridep(release: releases.Release, style: dict, layout: Layout) -> list:
    """HybridEP's NVLink topology, as the 0.6 perf launcher sets it where the model's flex backend is hybridep, whatever
    the dispatcher type (apply_target_topology_environment; recheck53 X3): the domain's size and whether it spans nodes
    by the GPU type, and EP ranks per domain (at most 8 on an 8-GPU domain; EP on an NVL72 one, where EP > 72 makes
    the launcher raise: then no ranks are given, and hybridep_ep_refused() says why)."""
    if style.get("hybridep_env") is None or layout.moe_flex_dispatcher_backend != "hybridep":
        return []
    gpu = releases.gpu(layout.gpu)
    why = f"the hybridep backend on {gpu['name']}: its NVLink domain's topology ({_where(release)})"
    out = [("NVLINK_DOMAIN_SIZE", str(gpu["nvlink_domain"]), why), ("USE_MNNVL", str(int(gpu["mnnvl"])), why)]
    if hybridep_ep_refused(release, layout) is None:
        out.append(("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", str(min(layout.ep, gpu["nvlink_domain"])),
                    f"the hybridep backend at EP={layout.ep}: EP ranks per NVLink domain of {gpu['nvlink_domain']} ({_where(release)})"))
    if not layout.flex_in_use:  # (the combine chunk is the flex dispatcher's: recipes running alltoall set none)
        return out
    why = (f"the flex dispatcher's hybridep combine: tokens per chunk, as every hybridep perf recipe sets it (a few tune a "
           f"value of their own) ({_where(release)})")
    return out + [(k, str(v), why) for k, v in style["hybridep_env"].items()]


# HybridEP's topology variables: the 0.6 perf launcher writes them for the hybridep backend except where an explicit
# env_vars override names them (apply_target_topology_environment's protected names), and drops them for another
TOPOLOGY = ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", "NVLINK_DOMAIN_SIZE", "USE_MNNVL")


def hybridep_ep_refused(release: releases.Release, layout: Layout) -> str | None:
    """The 0.6 perf launcher's refusal of a hybridep EP group larger than a multi-node NVLink domain (None: none)."""
    style = releases.data()["launch_env"].get(release.launch_env, {})
    if style.get("hybridep_env") is None or layout.moe_flex_dispatcher_backend != "hybridep":
        return None
    gpu = releases.gpu(layout.gpu)
    if gpu["mnnvl"] and layout.ep > gpu["nvlink_domain"]:
        return "HybridEP expert parallel size must not exceed the 72-rank NVLink domain."
    return None


def executor_note(release: releases.Release) -> str | None:
    """What the 0.5 perf launcher's executor exports beside PerfEnvPlugin (not in rules(): the plugin does not set
    it, and a run launched otherwise gets none of it)."""
    env = releases.data()["launch_env"].get(release.launch_env, {}).get("executor_env")
    if not env:
        return None
    return ("Bridge " + release.version + "'s perf launcher also exports, for every perf run, from its Slurm executor "
            "(scripts/performance/utils/executors.py PERF_ENV_VARS), not from PerfEnvPlugin: "
            + " ".join(f"{k}={v}" for k, v in env.items()) + "; export them yourself where you launch otherwise")


def perf_env_plugin_refused(release: releases.Release, layout: Layout) -> str | None:
    """Why PerfEnvPlugin cannot set this layout's launch environment (None where it can): it knows nothing of
    Megatron-FSDP, and writes CUDA_DEVICE_MAX_CONNECTIONS=1 for Hopper with TP/CP, which Megatron-FSDP's check refuses
    (evalJ D1: run_plugins.py _set_num_cuda_device_max_connections against config.py's assert, Bridge 0.5.1)."""
    style = releases.data()["launch_env"]["perf_env_plugin"]
    plugin = _max_connections(release, style, replace(layout, megatron_fsdp=False))[0]
    if layout.megatron_fsdp and plugin == "1":
        return ("for Hopper with TP/CP it writes CUDA_DEVICE_MAX_CONNECTIONS=1 when the experiment is set up, and "
                "Megatron-FSDP then fails at config (FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.)")
    return None


def perf_env_plugin_args(release: releases.Release, layout: Layout) -> dict:
    """The PerfEnvPlugin keyword arguments (0.5.x) under which the plugin sets exactly what rules() gives."""
    style = releases.data()["launch_env"]["perf_env_plugin"]
    args = {"tp_size": layout.tp, "pp_size": layout.pp, "cp_size": layout.cp,
            "num_gpus": layout.tp * layout.pp * layout.cp * layout.dp, "gpu_sm100_or_newer": layout.gpu in sm100_gpus(release),
            "layernorm_sm_margin": _layernorm_sm_margin(style, layout),
            "moe_flex_dispatcher_backend": layout.moe_flex_dispatcher_backend if layout.flex_in_use else None,
            "a2a_overlap": layout.moe_a2a_overlap}
    chunk = _p2p_chunksize(releases.data()["launch_env"], layout)
    if chunk:
        args["nccl_pp_comm_chunksize"] = int(chunk)
    return args


def sm100_gpus(release: releases.Release) -> list[str]:
    """The GPU types the release's perf launcher counts as SM100 or newer (gpu_sm100_or_newer): the release's list, or
    the newest listed release's for one read from another's rules."""
    by_release = releases.data()["launch_env"]["perf_env_plugin"]["sm100_gpus"]
    return by_release.get(release.version) or by_release[max(by_release, key=releases.version_key)]


def _layernorm_sm_margin(style: dict, layout: Layout) -> int:
    """The release's LayerNorm SM margin; 0.5's perf launcher raises it with a DeepEP or HybridEP flex backend (evalH H9)."""
    flex = style.get("layernorm_sm_margin_flex")
    if flex and layout.flex_in_use and layout.moe_flex_dispatcher_backend in flex["backends"]:
        return flex["value"]
    return style["layernorm_sm_margin"]


def _where(release: releases.Release) -> str:
    return "PerfEnvPlugin" if release.launch_env == "perf_env_plugin" else "Bridge 0.6 perf recipes"


# The launcher rule as it reads (Bridge 0.6.0 scripts/performance/utils/overrides.py:257-263, 0.5.0 and 0.5.1
# scripts/performance/perf_plugins.py:260-278; the 0.6.2 wheel carries no scripts/): 32 for a DeepEP/HybridEP
# backend, else 8; Blackwell 32; else, with TP or CP > 1 and MoE all-to-all overlap off, 1. So on Hopper with TP/CP the
# backend's 32 stands only while MoE all-to-all overlap is on (evalAB AB2-5: "hybridep needs the extra queues" was
# said of a 32 that the overlap, not hybridep, decides: with it off the same recipe gets 1).
_A2A_EXEMPT = ("; on Hopper with TP or CP > 1 the rule gives 1 unless MoE all-to-all overlap "
               "(overlap_moe_expert_parallel_comm) is on, as it is here")


def _max_connections(release: releases.Release, style: dict, layout: Layout) -> tuple[str, str]:
    tp_or_cp = layout.tp > 1 or layout.cp > 1
    if release.launch_env == "perf_env_plugin":
        flex = layout.moe_flex_dispatcher_backend if layout.flex_in_use else None
        value = 32 if flex in ("deepep", "hybridep") else 8
        why = "CUDA's default queue depth" if value == 8 else "DeepEP/HybridEP dispatcher"
        if layout.gpu in sm100_gpus(release):
            if tp_or_cp and (layout.dp > 1 or layout.pp > 1):
                value, why = 32, "Blackwell with TP/CP and DP/PP: extra connections avoid serializing streams"
            elif value != style["perf_launcher_sm100_connections"]:
                why += (" (the library's PerfEnvPlugin, run_plugins.py, gives 32 on sm100 only with TP/CP > 1 and DP/PP > 1; "
                        f"Bridge {release.version}'s own perf launcher, scripts/performance/perf_plugins.py, sets "
                        f"{style['perf_launcher_sm100_connections']} on every sm100 GPU)")
        elif tp_or_cp and not layout.moe_a2a_overlap and layout.megatron_fsdp:
            value, why = FSDP_MAX_CONNECTIONS, ("not PerfEnvPlugin's 1 for Hopper with TP/CP: Megatron-FSDP asserts "
                                                "CUDA_DEVICE_MAX_CONNECTIONS != 1 (FSDP_WITH_ONE_CONNECTION); "
                                                f"{FSDP_MAX_CONNECTIONS} as Bridge 0.6's Megatron-FSDP recipes")
        elif tp_or_cp and layout.moe_a2a_overlap and not layout.megatron_fsdp:
            why += _A2A_EXEMPT
        elif tp_or_cp and not layout.moe_a2a_overlap:
            which = "Hopper" if layout.gpu == "h100" else (f"{layout.gpu}, which Bridge {release.version}'s perf launcher leaves out "
                                                           "of its SM100 list (its rule for Hopper and older),")
            value, why = 1, (f"{which} with TP/CP: one queue starts each TP/SP or CP collective before the GEMM it overlaps, as "
                             "Transformer Engine and Megatron-Core ask (userbuffers TP overlap or not)")
        return str(value), why
    backend = layout.moe_flex_dispatcher_backend
    if backend in ("deepep", "hybridep") and layout.flex_in_use:
        value, why = 32, f"Bridge's launcher rule gives 32 where the flex dispatcher's backend is {backend} (8 otherwise)"
    elif backend in ("deepep", "hybridep"):
        value, why = 32, (f"Bridge's launcher rule keys on moe_flex_dispatcher_backend={backend}, Megatron-Core's default even for a "
                          "model that does not run the flex dispatcher; this model needs only a value above 1 (CUDA's default 8 "
                          "serves as well): one queue would serialise the DP collectives behind the backward pass")
    else:
        value, why = 8, f"CUDA's default queue depth (moe_flex_dispatcher_backend={backend}: no DeepEP/HybridEP)"
    if layout.gpu in style["blackwell_gpus"]:
        value, why = 32, "Blackwell: extra connections avoid serializing streams"
    elif tp_or_cp and layout.moe_a2a_overlap:
        why += _A2A_EXEMPT
    elif tp_or_cp and not layout.moe_a2a_overlap:
        if layout.megatron_fsdp:
            why += "; not 1 (the Hopper TP/CP rule): Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1"
        else:
            value, why = 1, ("TP/CP > 1 (not Blackwell): one queue starts each TP/SP or CP collective before the GEMM it "
                             "overlaps, as Transformer Engine and Megatron-Core ask (userbuffers TP overlap or not)")
    return str(value), why


def _p2p_chunksize(cfg: dict, layout: Layout) -> str | None:
    if layout.pp <= 1 or not layout.recipe:
        return None
    family_sft = layout.task == "sft" and layout.recipe.startswith(cfg["nccl_p2p_chunksize_sft_family"])
    pretrain = layout.task == "pretrain" and layout.recipe in cfg["nccl_p2p_chunksize_pretrain_recipes"]
    return str(cfg["nccl_p2p_net_chunksize"]) if family_sft or pretrain else None
