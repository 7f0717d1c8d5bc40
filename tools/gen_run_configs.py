"""Save real run configs with Megatron-Bridge for the lint/diff tests: each run is Bridge's _pretrain_common()
baseline with a GPT-3 175B-shaped model provider, the overrides below, runtime_config_update(), then
cfg.to_yaml() exactly as Bridge writes run_config.yaml into a checkpoint. Run with the Bridge venv's python:

    $(scripts/bridge_env.sh --print-python) tools/gen_run_configs.py [--check]

Writes tests/data/run_configs/<name>.yaml; --check compares instead of writing (tests/bridge runs it).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import generated  # noqa: E402

OUT = ROOT / "tests" / "data" / "run_configs"

MODEL = dict(num_layers=96, hidden_size=12288, ffn_hidden_size=49152, num_attention_heads=96, seq_length=2048, vocab_size=51200)
BASE = {
    "model.tensor_model_parallel_size": 4,
    "model.sequence_parallel": True,
    "model.pipeline_model_parallel_size": 4,
    "model.virtual_pipeline_model_parallel_size": 2,
    "comm_overlap.tp_comm_overlap": True,
    "comm_overlap.tp_comm_overlap_cfg": "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048",
    "ddp.use_distributed_optimizer": True,
    "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1,
    "env_vars.NVTE_FWD_LAYERNORM_SM_MARGIN": 20,
    "env_vars.NVTE_BWD_LAYERNORM_SM_MARGIN": 20,
}
# name: (overrides on top of BASE, GPUs). The pairs the diff tests use are (baseline, each other run).
RUNS = {
    "baseline": ({}, 64),
    "sequence_parallel_off": ({"model.sequence_parallel": False}, 64),
    "vpp_removed": ({"model.virtual_pipeline_model_parallel_size": None}, 64),
    "dp1": ({}, 16),
    "distributed_optimizer_off": ({"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False}, 64),
    "fp8_param_gather": ({"mixed_precision": "bf16_with_fp8_current_scaling_mixed"}, 64),
    "tp1": ({"model.tensor_model_parallel_size": 1}, 64),
    "no_comm_overlap": ({"comm_overlap": None}, 64),
    "other_model": ({"model.hidden_size": 8192, "model.ffn_hidden_size": 28672, "model.num_attention_heads": 64, "model.num_layers": 80}, 64),
}


def build(name: str, overrides: dict, gpus: int, folder: Path) -> Path:
    from megatron.bridge.models import GPTModelProvider
    from mbridge_overlap.bridge import adapter

    cfg = adapter.baseline_config()
    cfg.model = GPTModelProvider(**MODEL)
    cfg.train.micro_batch_size = 1
    cfg.dataset.seq_length = MODEL["seq_length"]
    cfg.checkpoint.save = cfg.checkpoint.load = f"/checkpoints/{name}"
    cfg.logger.tensorboard_dir = f"/checkpoints/{name}/tb_logs"
    full = {**BASE, **overrides}
    if full.get("comm_overlap", "") is None:
        full = {k: v for k, v in full.items() if not k.startswith("comm_overlap.")}
    adapter.apply_overrides(cfg, full)
    tp, pp = cfg.model.tensor_model_parallel_size, cfg.model.pipeline_model_parallel_size
    cfg.train.global_batch_size = gpus // (tp * pp) * pp * 2  # 2 x PP micro-batches: the interleaved schedule's groups fit
    error, _ = adapter.runtime_config_update(cfg, gpus)
    if error:
        raise SystemExit(f"{name}: Bridge raised {error}")
    path = folder / f"{name}.yaml"
    cfg.to_yaml(str(path))
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare with the files in tests/data/run_configs")
    args = p.parse_args()
    from mbridge_overlap.bridge import adapter

    adapter.quiet()
    os.chdir(tempfile.mkdtemp())  # nothing the run writes lands in the repository
    folder = Path(tempfile.mkdtemp()) if args.check else OUT
    folder.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, (overrides, gpus) in RUNS.items():
        path = build(name, overrides, gpus, folder)
        if args.check:
            old = (OUT / path.name).read_text() if (OUT / path.name).exists() else ""
            if old != path.read_text():
                stale.append(name)
                changed = difflib.unified_diff(old.splitlines(True), path.read_text().splitlines(True), str(OUT / path.name), "regenerated")
                sys.stderr.writelines(list(changed)[:40])
    if generated.verdict(stale, f"stale run configs: {', '.join(stale)}; rerun tools/gen_run_configs.py", file=sys.stderr):
        return 1
    print(f"{'checked' if args.check else 'wrote'} {len(RUNS)} run configs in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
