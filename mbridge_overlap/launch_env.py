"""The launch environment Bridge's own launchers use for a layout, by release.

0.6: scripts/performance/utils/overrides.py `_apply_flat_cli_environment_compatibility` (CUDA_DEVICE_MAX_CONNECTIONS,
     NCCL_P2P_NET_CHUNKSIZE) and the flat perf recipes' env_vars (the LayerNorm SM margins).
0.5: megatron/bridge/recipes/run_plugins.py `PerfEnvPlugin` (all three).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import releases


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    gpus: int = 1
    gpu: str = "h100"
    moe_a2a_overlap: bool = False
    moe_flex_dispatcher_backend: str | None = None
    recipe: str | None = None  # Bridge model recipe name, e.g. llama3_70b
    task: str = "pretrain"

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)


def rules(release: releases.Release, layout: Layout) -> list[tuple[str, str, str]]:
    """(name, value, why) for each variable Bridge's launcher would set for this layout."""
    cfg = releases.data()["launch_env"]
    style = cfg[release.launch_env]
    out = [("CUDA_DEVICE_MAX_CONNECTIONS", *_max_connections(release, style, layout))]
    margin = str(style["layernorm_sm_margin"])
    why = f"SM margin for TE LayerNorm so overlapped communication kernels get SMs ({_where(release)})"
    out += [("NVTE_FWD_LAYERNORM_SM_MARGIN", margin, why), ("NVTE_BWD_LAYERNORM_SM_MARGIN", margin, why)]
    chunk = _p2p_chunksize(cfg, layout)
    if chunk:
        out.append(("NCCL_P2P_NET_CHUNKSIZE", chunk, f"PP>1 for {layout.recipe} {layout.task}: larger P2P chunks ({_where(release)})"))
    return out


def _where(release: releases.Release) -> str:
    return "PerfEnvPlugin" if release.launch_env == "perf_env_plugin" else "Bridge 0.6 perf recipes"


def _max_connections(release: releases.Release, style: dict, layout: Layout) -> tuple[str, str]:
    tp_or_cp = layout.tp > 1 or layout.cp > 1
    value = 32 if layout.moe_flex_dispatcher_backend in ("deepep", "hybridep") else 8
    why = "default queue depth" if value == 8 else "DeepEP/HybridEP dispatcher"
    if release.launch_env == "perf_env_plugin":
        if layout.gpu in style["sm100_gpus"]:
            if tp_or_cp and (layout.dp > 1 or layout.pp > 1):
                value, why = 32, "Blackwell with TP/CP and DP/PP: extra connections avoid serializing streams"
        elif tp_or_cp and not layout.moe_a2a_overlap:
            value, why = 1, "Hopper with TP/CP: queue the communication kernel before the overlapping GEMM"
    elif layout.gpu in style["blackwell_gpus"]:
        value, why = 32, "Blackwell: extra connections avoid serializing streams"
    elif tp_or_cp and not layout.moe_a2a_overlap:
        value, why = 1, "TP/CP > 1 (not Blackwell): queue the communication kernel before the overlapping GEMM"
    return str(value), why


def _p2p_chunksize(cfg: dict, layout: Layout) -> str | None:
    if layout.pp <= 1 or not layout.recipe:
        return None
    family_sft = layout.task == "sft" and layout.recipe.startswith(cfg["nccl_p2p_chunksize_sft_family"])
    pretrain = layout.task == "pretrain" and layout.recipe in cfg["nccl_p2p_chunksize_pretrain_recipes"]
    return str(cfg["nccl_p2p_net_chunksize"]) if family_sft or pretrain else None
