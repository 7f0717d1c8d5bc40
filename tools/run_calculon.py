"""Runs Calculon (calculon-ai/calculon, SC'23) on the comparison's layouts and writes the reference that
tools/compare_calculon.py reads: each layout's model, its activation recompute, the system file, and Calculon's stats
with overlap off, TP only, DP only and on. Calculon imports pandas and psutil (its all_executions module): run this
with a Python that has them.

    python tools/run_calculon.py --calculon-src CHECKOUT --out calculon_reference.json [--count-recompute-once]

--count-recompute-once corrects Calculon's open issue #5 (calculon-ai/calculon#5): for each recomputed layer of a block
llm.py's _compute_block_stats (lines 1219-1223 at caa4b11) adds the block's forward flops, flop time, bytes and memory
time so far, not the layer's own (its line 1224, the recompute's time, adds the layer's own), so the recompute's
memory time comes out above the whole block forward's. With the flag each recomputed layer counts its own forward
once; nothing else of Calculon changes.

The layouts: Megatron's published GPT-3 175B and 1T runs' shapes (Calculon's models/), and two Llama-like shapes
(Calculon has no grouped-query attention: multi-head, with the Llama FFN), on H100 (its h100_80g_nvl8 system), with
sequence parallel (reduce-scatter/all-gather TP), the distributed optimizer and TP inside the NVLink domain.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path

MODELS = {
    "gpt3-175B": {"hidden": 12288, "feedforward": 49152, "seq_size": 2048, "attn_heads": 96, "attn_size": 128, "num_blocks": 96},
    "megatron-1T": {"hidden": 25600, "feedforward": 102400, "seq_size": 2048, "attn_heads": 160, "attn_size": 160, "num_blocks": 128},
    "llama2-70B-like": {"hidden": 8192, "feedforward": 28672, "seq_size": 4096, "attn_heads": 64, "attn_size": 128, "num_blocks": 80},
    "llama3-8B-like": {"hidden": 4096, "feedforward": 14336, "seq_size": 8192, "attn_heads": 32, "attn_size": 128, "num_blocks": 32},
}
# (model, tp, pp, dp, mbs, gbs, vp, recompute)
LAYOUTS = [
    ("gpt3-175B", 8, 8, 16, 1, 1536, 1, "attn_only"), ("gpt3-175B", 4, 8, 32, 1, 1536, 1, "full"),
    ("gpt3-175B", 2, 8, 64, 1, 1536, 1, "full"), ("gpt3-175B", 8, 16, 8, 1, 1536, 1, "attn_only"),
    ("gpt3-175B", 8, 8, 16, 1, 1536, 2, "attn_only"), ("gpt3-175B", 4, 16, 16, 1, 1536, 1, "full"),
    ("megatron-1T", 8, 8, 16, 1, 3072, 1, "full"), ("megatron-1T", 8, 16, 8, 1, 3072, 1, "full"),
    ("megatron-1T", 8, 32, 8, 1, 3072, 1, "attn_only"),
    ("llama2-70B-like", 4, 4, 16, 1, 512, 1, "attn_only"), ("llama2-70B-like", 4, 8, 8, 1, 512, 1, "attn_only"),
    ("llama2-70B-like", 2, 8, 16, 1, 512, 1, "full"), ("llama2-70B-like", 4, 8, 32, 1, 1024, 1, "attn_only"),
    ("llama2-70B-like", 8, 4, 8, 1, 512, 1, "none"), ("llama2-70B-like", 8, 2, 16, 1, 512, 1, "attn_only"),
    ("llama2-70B-like", 4, 4, 16, 1, 512, 5, "attn_only"), ("llama2-70B-like", 1, 16, 16, 1, 512, 1, "full"),
    ("llama2-70B-like", 1, 8, 64, 1, 1024, 1, "full"),
    ("llama3-8B-like", 2, 1, 32, 1, 512, 1, "attn_only"), ("llama3-8B-like", 2, 1, 512, 1, 1024, 1, "attn_only"),
    ("llama3-8B-like", 2, 2, 64, 1, 512, 1, "full"), ("llama3-8B-like", 4, 1, 16, 1, 512, 1, "attn_only"),
    ("llama3-8B-like", 1, 1, 64, 1, 512, 1, "full"), ("llama3-8B-like", 1, 2, 32, 1, 512, 1, "full"),
    ("llama3-8B-like", 1, 4, 16, 2, 512, 1, "full"), ("llama3-8B-like", 8, 1, 8, 2, 512, 1, "attn_only"),
    ("llama3-8B-like", 2, 4, 8, 1, 256, 2, "full"), ("llama3-8B-like", 1, 1, 128, 2, 1024, 1, "full"),
]
VARIANTS = {"off": ("none", False), "tp_only": ("ring", False), "dp_only": ("none", True), "on": ("ring", True)}
SYSTEM = "systems/h100_80g_nvl8.json"


def execution(model: str, tp: int, pp: int, dp: int, mbs: int, gbs: int, vp: int, recompute: str, variant: str) -> dict:
    tp_overlap, dp_overlap = VARIANTS[variant]
    tp_overlap = tp_overlap if tp > 1 else "none"  # Calculon asserts TP > 1 for its TP overlap
    return {"num_procs": tp * pp * dp, "tensor_par": tp, "pipeline_par": pp, "data_par": dp, "tensor_par_net": 0,
            "pipeline_par_net": 1, "data_par_net": 1, "batch_size": gbs, "microbatch_size": mbs, "datatype": "float16",
            "fused_activation": True, "attention_type": "multihead", "activation_recompute": recompute,
            "pipeline_interleaving": vp, "optimizer_sharding": True, "tensor_par_comm_type": "rs_ag",
            "tensor_par_overlap": tp_overlap, "seq_par_ag_redo": False, "data_par_overlap": dp_overlap,
            "weight_offload": False, "activations_offload": False, "optimizer_offload": False, "training": True}


def once(llm_class):
    """Calculon's Llm with calculon-ai/calculon#5 corrected: after _compute_block_stats, a block's recompute flops,
    flop time, memory bytes and memory time are the sums of its recomputed layers' own forward ones."""

    class Once(llm_class):
        def _compute_block_stats(self):
            super()._compute_block_stats()
            if not self.exe.training:
                return
            again = [layer for layer in self._llm_block if layer.get_recompute_flag()]
            self._block_re_flops = sum(layer.get_fw_flops() for layer in again)
            self._block_re_flops_time = sum(layer.compute_flops_time("fw") for layer in again)
            self._block_re_mem_accessed = sum(layer.get_fw_mem_accessed() for layer in again)
            self._block_re_mem_time = sum(layer.compute_mem_time("fw") for layer in again)

    return Once


def run(src: Path, recompute_once: bool = False) -> dict:
    sys.path.insert(0, str(src))
    from calculon.llm import Llm
    from calculon.system import System

    model_class = once(Llm) if recompute_once else Llm

    logger = logging.getLogger("calculon")
    system = System(json.loads((src / SYSTEM).read_text()))
    out = []
    for model, tp, pp, dp, mbs, gbs, vp, recompute in LAYOUTS:
        name = f"{model}|h100_80g_nvl8|tp{tp}pp{pp}dp{dp}" + (f"vp{vp}" if vp > 1 else "") + f"|mbs{mbs}gbs{gbs}"
        results = {}
        for variant in VARIANTS:
            if variant == "tp_only" and tp == 1:  # no TP to overlap: "on" is DP overlap alone, as "dp_only"
                continue
            exe = execution(model, tp, pp, dp, mbs, gbs, vp, recompute, variant)
            try:
                llm = model_class(Llm.Application(MODELS[model]), logger)
                llm.compile(system, Llm.Execution.from_json(exe))
                llm.run(system)
                results[variant] = {"stats": llm.get_stats_json(False), "execution": exe}
            except Llm.Error as exc:
                results[variant] = {"error": str(exc), "execution": exe}
        out.append({"layout": {"name": name, "system": "h100_80g_nvl8", "tp": tp, "pp": pp, "dp": dp, "vp": vp, "mbs": mbs,
                               "gbs": gbs}, "calculon_model": MODELS[model], "system_file": SYSTEM, "recompute": recompute,
                    "results": results})
    commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"calculon_commit": commit, "count_recompute_once": recompute_once, "layouts": out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calculon-src", required=True, type=Path, help="a checkout of calculon-ai/calculon")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--count-recompute-once", action="store_true",
                   help="correct calculon-ai/calculon#5: a recomputed layer's own forward, not the block's so far")
    args = p.parse_args(argv)
    ref = run(args.calculon_src.resolve(), args.count_recompute_once)
    failed = [(item["layout"]["name"], v, r["error"]) for item in ref["layouts"] for v, r in item["results"].items() if "error" in r]
    args.out.write_text(json.dumps(ref, indent=1), encoding="utf-8")
    print(f"{len(ref['layouts'])} layouts written to {args.out}; {len(failed)} runs Calculon refused")
    for f in failed:
        print("  refused:", *f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
