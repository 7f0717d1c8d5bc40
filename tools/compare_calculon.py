"""The budget beside Calculon (calculon-ai/calculon, SC'23), a published analytical model of Megatron training, on the
same models and layouts: per-dimension communication time on the links (TP, PP, DP) and the step-time ratio with
overlap on and off. The reference runs are held back, outside this repository: a JSON file written by running
Calculon (`calculon llm`) on each layout with overlap off, TP only, DP only and on, with each layout's inputs
(its model's hidden, feedforward, seq_size, attn_heads, attn_size and num_blocks) and its stats.

    python3 tools/compare_calculon.py --reference calculon_reference.json [--write-docs]

Only the H100 layouts are compared (the budget's data has no A100). Differences that are the models', not the
numbers': Calculon has no grouped-query attention, FlashAttention, CP or EP; it keeps a vocabulary out of its time
model (the budget is given 51,200, GPT-3's); its TP overlap is its own "ring" scheme; it models activation
recompute (the budget does not: layouts with recompute show the difference in compute, not in communication).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = {"off": (False, False), "tp_only": (True, False), "dp_only": (False, True), "on": (True, True)}


def ours(layout: dict, model: dict, tp_on: bool, dp_on: bool) -> dict:
    from mbridge_overlap import api

    tp, pp, dp = layout["tp"], layout["pp"], layout["dp"]
    vp = layout.get("vp") or 1
    overrides = {"model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp,
                 "model.virtual_pipeline_model_parallel_size": vp if vp > 1 else None, "model.sequence_parallel": tp > 1,
                 "model.seq_length": model["seq_size"], "train.micro_batch_size": layout["mbs"],
                 "train.global_batch_size": layout["gbs"], "comm_overlap.tp_comm_overlap": tp_on and tp > 1,
                 "comm_overlap.overlap_grad_reduce": dp_on, "comm_overlap.overlap_param_gather": dp_on,
                 "comm_overlap.overlap_p2p_comm": vp > 1, "mixed_precision": "bf16_mixed"}
    shape = {"num_layers": model["num_blocks"], "hidden_size": model["hidden"], "ffn_hidden_size": model["feedforward"],
             "num_attention_heads": model["attn_heads"], "kv_channels": model["attn_size"], "vocab_size": 51200,
             "gated_linear_unit": False}
    return api.budget(overrides, shape=shape, gpus=tp * pp * dp, gpu="h100").to_dict()["budget"]


def compare(reference: dict) -> list[dict]:
    out = []
    for item in reference["layouts"]:
        lay = item["layout"]
        if not str(lay["system"]).startswith("h100"):
            continue
        for variant, (tp_on, dp_on) in VARIANTS.items():
            theirs = (item["results"].get(variant) or {}).get("stats")
            if not theirs:
                continue
            try:
                mine = ours(lay, item["calculon_model"], tp_on, dp_on)
            except Exception as exc:  # a layout the resolver refuses: reported, not compared
                out.append({"name": lay["name"], "variant": variant, "error": str(exc)})
                continue
            dims = mine["dimensions"]
            row = {"name": lay["name"], "variant": variant, "recompute": item["recompute"],
                   "step_s": (mine["iteration_ms"] / 1e3, theirs["total_time"])}
            for dim in ("tp", "pp", "dp"):
                row[dim] = ((dims.get(dim) or {}).get("ms", 0.0) / 1e3, theirs[f"{dim}_comm_link_time"])
                row[dim + "_exposed"] = ((dims.get(dim) or {}).get("exposed_ms", 0.0) / 1e3, theirs[f"{dim}_comm_exposed_time"])
            out.append(row)
    return out


def ratio_rows(rows: list[dict]) -> list[tuple]:
    """(layout, our on/off step ratio, Calculon's) where both variants ran."""
    by = {(r["name"], r["variant"]): r for r in rows if "error" not in r}
    out = []
    for (name, variant), r in by.items():
        if variant == "on" and (name, "off") in by:
            off = by[name, "off"]
            out.append((name, r["step_s"][0] / off["step_s"][0], r["step_s"][1] / off["step_s"][1]))
    return out


def summary(rows: list[dict]) -> list[str]:
    lines = ["| quantity | layouts x variants | within 25 % | median ours / Calculon |", "| --- | ---: | ---: | ---: |"]
    ok = [r for r in rows if "error" not in r]
    for key in ("tp", "pp", "dp", "tp_exposed", "dp_exposed", "step_s"):
        pairs = [r[key] for r in ok if r[key][1] > 1e-6 and r[key][0] > 0]
        if not pairs:
            continue
        within = sum(abs(a / b - 1) <= 0.25 for a, b in pairs)
        lines.append(f"| {key} | {len(pairs)} | {within} ({within / len(pairs) * 100:.0f} %) | "
                     f"{statistics.median(a / b for a, b in pairs):.2f} |")
    ratios = ratio_rows(rows)
    if ratios:
        within = sum(abs(a / b - 1) <= 0.25 for _, a, b in ratios)
        lines.append(f"| step time on / off | {len(ratios)} | {within} ({within / len(ratios) * 100:.0f} %) | "
                     f"{statistics.median(a / b for _, a, b in ratios):.2f} |")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines.append(f"\n{len(errors)} runs not compared (the resolver refused the layout): "
                     + "; ".join(sorted({r['error'][:120] for r in errors})))
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", default=os.environ.get("MBRIDGE_SKILL_CALCULON_REF"))
    p.add_argument("--write-docs", action="store_true", help="write docs/budget-calculon.md")
    args = p.parse_args(argv)
    if not args.reference or not Path(args.reference).is_file():
        print("compare_calculon: the held-back Calculon runs are needed (--reference FILE or MBRIDGE_SKILL_CALCULON_REF)",
              file=sys.stderr)
        return 2
    reference = json.loads(Path(args.reference).read_text(encoding="utf-8"))
    rows = compare(reference)
    lines = summary(rows)
    print("\n".join(lines))
    if args.write_docs:
        doc = ROOT / "docs" / "budget-calculon.md"
        doc.write_text("\n".join([
            "# The budget beside Calculon", "",
            "Written by `tools/compare_calculon.py --write-docs` (do not edit) from held-back Calculon runs (commit "
            f"{reference.get('calculon_commit', '?')}, its own H100 system constants) on the same models and layouts: "
            "our value over Calculon's, per quantity, over every H100 layout and overlap variant (off, TP only, DP only, on).",
            "", *lines, "", "Why the per-dimension times differ (the models', not the data's):", "",
            "- TP: the budget moves all-gather and reduce-scatter at 370 GB/s on NVLink (the NCCL maintainer's measured "
            "figure), Calculon at 450 GB/s x 0.65 = 256 GB/s (its assumption): ours is about 0.7 of its time.",
            "- DP: the budget reduces gradients in FP32 where the mixed-precision recipe says so (Bridge's bf16_mixed "
            "does) and gathers BF16 parameters, 6 bytes a parameter; Calculon moves 2 bytes each way, 4: about 1.5.",
            "- PP: the same message sizes and counts; the budget's bandwidth falls for messages of a few MiB (the measured "
            "bus bandwidth by size), Calculon's is flat with a 20 us latency: about 2 at these sizes.",
            "- The step-time ratio with overlap on and off is what overlap is worth; the two agree on it.", ""]),
            encoding="utf-8")
        print(f"wrote {doc.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
