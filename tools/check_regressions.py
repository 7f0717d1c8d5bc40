"""`diff` on published before/after measurements: each held-back case (a public thread or PR that measured one training
setup with an overlap-related setting changed) costed by `mbridge-overlap diff`, its predicted iteration-time change
beside the measured one. The cases are held back, outside this repository (a YAML file of `cases:`, each with its
source url and quote, gpu, gpus, model shape, layout, precision, and the settings and measurements of both sides).

    python3 tools/check_regressions.py --cases cases.yaml [--write-docs]

A case is costed where its GPU is in the budget's data and its shape and layout are stated; else it is listed with
why not. Settings the budget does not model (CUDA graphs, permute fusion, ...) are listed beside the case: a measured
change that they explain is not the budget's to predict.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "budget-regressions.md"
# a case's setting -> the Bridge key that asks for it (overlap settings through comm_overlap, as users set them)
KEYS = {
    "overlap_grad_reduce": "comm_overlap.overlap_grad_reduce", "overlap_param_gather": "comm_overlap.overlap_param_gather",
    "use_distributed_optimizer": "ddp.use_distributed_optimizer", "tp_comm_overlap": "comm_overlap.tp_comm_overlap",
    "sequence_parallel": "model.sequence_parallel", "overlap_p2p_comm": "comm_overlap.overlap_p2p_comm",
    "overlap_moe_expert_parallel_comm": "comm_overlap.overlap_moe_expert_parallel_comm",
    "delay_wgrad_compute": "comm_overlap.delay_wgrad_compute",
    "moe_token_dispatcher_type": "model.moe_token_dispatcher_type", "moe_flex_dispatcher_backend": "model.moe_flex_dispatcher_backend",
    "recompute_granularity": "model.recompute_granularity", "recompute_method": "model.recompute_method",
    "recompute_num_layers": "model.recompute_num_layers", "recompute_modules": "model.recompute_modules",
}
SHAPE = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "vocab_size",
         "kv_channels", "moe_router_topk", "moe_ffn_hidden_size")
LAYOUT_SPLIT = {"pipeline_layout": "model.pipeline_model_parallel_layout",
                "account_for_embedding_in_pipeline_split": "model.account_for_embedding_in_pipeline_split",
                "account_for_loss_in_pipeline_split": "model.account_for_loss_in_pipeline_split"}
PRECISION = {"bf16": "bf16_mixed", "fp8_mx": "bf16_with_mxfp8_mixed", "fp8_cs": "bf16_with_fp8_current_scaling_mixed"}


def measured_ms(side: dict) -> tuple[float | None, str]:
    """A side's iteration time in ms, or its inverse's stand-in (1 / throughput, same work per iteration)."""
    m = side.get("measured") or {}
    for key, scale in (("iter_time_ms", 1.0), ("iter_time_s", 1e3)):
        if m.get(key):
            return float(m[key]) * scale, "time"
    for key in ("tflops_per_gpu", "tokens_per_s_per_gpu"):
        if m.get(key):
            return 1e6 / float(m[key]), "throughput"
    return None, ""


def setup(case: dict) -> tuple[dict, dict, dict, list[str]] | str:
    """(before overrides, after overrides, shape, settings not modelled), or why the case cannot be costed."""
    from mbridge_overlap.budget import system

    gpu, lay, model = case.get("gpu"), case.get("layout") or {}, case.get("model") or {}
    if not gpu or not case.get("gpus"):
        return "GPU type or count not stated"
    try:
        system.get(str(gpu).lower())
    except Exception:
        return f"no bandwidth and GEMM data for {gpu}"
    shape = {k: model[k] for k in SHAPE if model.get(k) is not None}
    if model.get("num_experts"):
        shape["num_moe_experts"] = model["num_experts"]
    missing = [k for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size") if k not in shape]
    needed = [k for k in ("tp", "pp", "mbs", "gbs") if lay.get(k) is None] + ([] if model.get("seq_length") else ["seq_length"])
    if missing or needed:
        return "not stated: " + ", ".join(missing + needed)
    base = {"model.tensor_model_parallel_size": lay["tp"], "model.pipeline_model_parallel_size": lay["pp"],
            "model.virtual_pipeline_model_parallel_size": lay.get("vpp"), "model.context_parallel_size": lay.get("cp") or 1,
            "model.expert_model_parallel_size": lay.get("ep") or 1, "model.seq_length": model["seq_length"],
            "dataset.seq_length": model["seq_length"], "train.micro_batch_size": lay["mbs"], "train.global_batch_size": lay["gbs"],
            "mixed_precision": PRECISION.get(case.get("precision") or "bf16", "bf16_mixed")}
    if model.get("num_experts"):
        base["model.num_moe_experts"] = model["num_experts"]
    for key, bridge_key in LAYOUT_SPLIT.items():  # how the layers split over the stages, where the case states it
        if lay.get(key) is not None:
            base[bridge_key] = lay[key]
    if lay.get("etp"):
        base["model.expert_tensor_parallel_size"] = lay["etp"]
    sides, unmodelled = [], []
    for label in ("before", "after"):
        out = {}
        for k, v in ((case.get(label) or {}).get("settings") or {}).items():
            if k in KEYS and v is not None:
                out[KEYS[k]] = v.split()[0] if isinstance(v, str) else v  # "alltoall (flex backend unset)" -> alltoall
            elif v is not None:
                unmodelled.append(f"{k}: {v}")
        sides.append(out)
    before, after = sides
    return {**base, **before}, after, shape, sorted(set(unmodelled))


def cost(case: dict) -> dict:
    """One case: its measured and predicted iteration-time change, or why it is not costed."""
    from mbridge_overlap import api

    row = {"id": case["id"], "url": case.get("url", ""), "confidence": case.get("confidence", "")}
    (b_ms, kind), (a_ms, kind_a) = measured_ms(case.get("before") or {}), measured_ms(case.get("after") or {})
    if b_ms is None or a_ms is None or kind != kind_a:
        return {**row, "not_costed": "both sides' time or throughput not stated alike"}
    row["measured_pct"] = (a_ms / b_ms - 1) * 100
    made = setup(case)
    if isinstance(made, str):
        return {**row, "not_costed": made}
    before, after, shape, unmodelled = made
    with tempfile.TemporaryDirectory() as tmp:
        import yaml

        from tools.examples import nested

        path = Path(tmp) / "before.yaml"
        path.write_text(yaml.safe_dump(nested(before)), encoding="utf-8")
        try:
            d = api.diff(str(path), overrides=after, gpus=case["gpus"], gpu=str(case["gpu"]).lower(), shape=shape).to_dict()
        except Exception as exc:  # a setup the resolver refuses: reported, not costed
            return {**row, "not_costed": f"refused: {exc}"}
    b = d.get("budget") or {}
    if "unavailable" in b:
        return {**row, "not_costed": b["unavailable"]}
    return {**row, "predicted_pct": b["iteration_change_pct"], "predicted_ms": (b["iteration_ms_before"], b["iteration_ms_after"]),
            "measured_ms": (b_ms, a_ms) if kind == "time" else None, "unmodelled": unmodelled,
            "errors": [e["id"] for e in d["new_errors"]]}


def report(rows: list[dict]) -> list[str]:
    costed = [r for r in rows if "predicted_pct" in r]
    lines = ["| case | confidence | measured change | predicted change | sign | measured ms before -> after | predicted ms "
             "before -> after | not modelled |", "| --- | --- | ---: | ---: | --- | --- | --- | --- |"]
    for r in costed:
        same = "same" if (r["measured_pct"] >= 0) == (r["predicted_pct"] >= 0) or abs(r["measured_pct"]) < 1 else "differs"
        m = " -> ".join(f"{v:,.0f}" for v in r["measured_ms"]) if r["measured_ms"] else "(throughput)"
        lines.append(f"| [{r['id']}]({r['url']}) | {r['confidence']} | {r['measured_pct']:+.1f} % | {r['predicted_pct']:+.1f} % | "
                     f"{same} | {m} | {' -> '.join(f'{v:,.0f}' for v in r['predicted_ms'])} | {'; '.join(r['unmodelled']) or '-'} |")
    if costed:
        errs = [abs(r["predicted_pct"] - r["measured_pct"]) for r in costed]
        lines += ["", f"{len(costed)} cases costed; the predicted change's distance from the measured one: median "
                  f"{statistics.median(errs):.1f} points, worst {max(errs):.1f}."]
    lines += ["", "Not costed:"] + [f"- [{r['id']}]({r['url']}): {r['not_costed']}" for r in rows if "not_costed" in r]
    return lines


def main(argv=None) -> int:
    import yaml

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=os.environ.get("MBRIDGE_SKILL_REGRESSION_CASES"))
    p.add_argument("--write-docs", action="store_true", help=f"write {DOC.relative_to(ROOT)}")
    args = p.parse_args(argv)
    if not args.cases or not Path(args.cases).is_file():
        print("check_regressions: the held-back cases are needed (--cases FILE or MBRIDGE_SKILL_REGRESSION_CASES)", file=sys.stderr)
        return 2
    cases = yaml.safe_load(Path(args.cases).read_text(encoding="utf-8"))["cases"]
    lines = report([cost(c) for c in cases])
    print("\n".join(lines))
    if args.write_docs:
        head = ["# The budget on published before/after measurements", "",
                "Written by `tools/check_regressions.py --write-docs` (do not edit) from held-back cases (kept outside this "
                "repository): public threads and PRs that measured one training setup with one overlap-related setting "
                "changed, each costed by `mbridge-overlap diff` with the setup the source states (fields it does not state "
                "are the public model config's or the Bridge preset's at the source's commit, as the case notes say). The "
                "change is in iteration time (a throughput's inverse where only throughput is published). Settings the "
                "budget does not model are listed beside the case.", "",
                "What the budget cannot see, and these cases show: the all-to-all is priced at its bus bandwidth whatever "
                "the dispatcher's kernels (HybridEP's gain is over-predicted, a change of dispatcher at the same copies per "
                "token is priced at nothing); the CPU time EP overlap's scheduling costs (a run where turning it off was "
                "faster); MoE's own compute overheads (its iteration times are lower bounds, docs/budget.md). A case that "
                "released Bridge refuses is not costed: its `resolve` finding is the answer there.", ""]
        DOC.write_text("\n".join(head + lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
