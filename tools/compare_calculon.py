"""The budget beside Calculon (calculon-ai/calculon, SC'23), a published analytical model of Megatron training, on the
same models and layouts: per-dimension communication time on the links (TP, PP, DP) and the step-time ratio with
overlap on and off. The reference runs are held back, outside this repository: a JSON file written by running
Calculon (`calculon llm`) on each layout with overlap off, TP only, DP only and on, with each layout's inputs
(its model's hidden, feedforward, seq_size, attn_heads, attn_size and num_blocks) and its stats.

    python3 tools/compare_calculon.py --reference calculon_reference.json [--write-docs]

tools/run_calculon.py writes the reference (it runs Calculon on the layouts; keep its output outside the repository).
With --once FILE (tools/run_calculon.py --count-recompute-once: Calculon with its open issue #5 corrected), the doc
also sets the budget beside that run.

Only the H100 layouts are compared (the budget's data has no A100). Differences that are the models', not the
numbers': Calculon has no grouped-query attention, FlashAttention, CP or EP; it keeps a vocabulary out of its time
model (the budget is given 51,200, GPT-3's); its TP overlap is its own "ring" scheme. Each layout's activation
recompute is given to the budget as Megatron-Core's: Calculon's attn_only as selective recompute of core_attn, its
full as full recompute of every layer (method uniform, one layer a chunk); Calculon's TP time of a recomputed forward
(its recomm_link_time and recomm_exposed_time) is added to its TP time, where the budget counts it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = {"off": (False, False), "tp_only": (True, False), "dp_only": (False, True), "on": (True, True)}


# Calculon's activation_recompute as Megatron-Core's recompute settings
RECOMPUTE = {"none": {}, "attn_only": {"model.recompute_granularity": "selective", "model.recompute_modules": ["core_attn"]},
             "full": {"model.recompute_granularity": "full", "model.recompute_method": "uniform",
                      "model.recompute_num_layers": 1}}
# Calculon's network ops for the budget's collectives (it has no all-to-all: these layouts have no EP)
CALCULON_OPS = {"all_gather": "all_gather", "reduce_scatter": "reduce_scatter", "all_reduce": "all_reduce", "send_recv": "p2p"}


def calculon_system(cfg: dict):
    """budget.system.get for Calculon's own constants (its system file): GEMMs at its matrix rate times its
    efficiency for large operations, and each collective timed as its Network.time does: latency + the buffer (scaled,
    plus its per-op offset share) over bandwidth x efficiency, on its first network inside the NVLink domain and its
    second across it."""
    from mbridge_overlap.budget import system

    class CalculonSystem(system.System):
        def seconds(self, collective: str, size: int, group: int, link: str, local: int | None = None) -> float:
            # (local, the group's ranks per NVLink domain, is not Calculon's: its second network is one rate per GPU)
            if group < 2 or size <= 0:
                return 0.0
            net = cfg["networks"][0 if link == "nvlink" else 1]
            scalar, offset = net["ops"][CALCULON_OPS[collective]]
            moved = size * scalar + size / group * (offset or 0)
            return net["latency"] + moved / (net["bandwidth"] * 1e9 * net["efficiency"])

    matrix = cfg["matrix"]
    large = max(matrix["float16"]["gflops_efficiency"])[1]  # its efficiency for the largest operations
    real = system.get

    def get(gpu: str, domain: int = 8):
        base = real(gpu, domain)
        record = {**base.record, "gemm_tflops": {"bf16": {"value": matrix["float16"]["tflops"]},
                                                 "fp8": {"value": matrix["float8"]["tflops"]}},
                  "efficiency": {"value": large}}
        return CalculonSystem(base.name, record, domain)

    return get


def ours(layout: dict, model: dict, tp_on: bool, dp_on: bool, calculon_inputs: bool = False, recompute: str = "none") -> dict:
    """The budget of a Calculon layout; calculon_inputs: as Calculon models it (gradients reduced in BF16, not the
    FP32 Bridge's bf16_mixed reduces them in); recompute: Calculon's activation_recompute of the layout."""
    from mbridge_overlap import api

    tp, pp, dp = layout["tp"], layout["pp"], layout["dp"]
    vp = layout.get("vp") or 1
    overrides = {"model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp,
                 "model.virtual_pipeline_model_parallel_size": vp if vp > 1 else None, "model.sequence_parallel": tp > 1,
                 "model.seq_length": model["seq_size"], "dataset.seq_length": model["seq_size"], "train.micro_batch_size": layout["mbs"],
                 "train.global_batch_size": layout["gbs"], "comm_overlap.tp_comm_overlap": tp_on and tp > 1,
                 "comm_overlap.overlap_grad_reduce": dp_on, "comm_overlap.overlap_param_gather": dp_on,
                 "comm_overlap.overlap_p2p_comm": vp > 1, "mixed_precision": "bf16_mixed"}
    if calculon_inputs:
        overrides["mixed_precision.grad_reduce_in_fp32"] = False
    overrides.update(RECOMPUTE[recompute])
    shape = {"num_layers": model["num_blocks"], "hidden_size": model["hidden"], "ffn_hidden_size": model["feedforward"],
             "num_attention_heads": model["attn_heads"], "kv_channels": model["attn_size"], "vocab_size": 51200,
             "gated_linear_unit": False}
    return api.budget(overrides, shape=shape, gpus=tp * pp * dp, gpu="h100").to_dict()["budget"]


def compare(reference: dict, calculon_src: Path | None = None) -> list[dict]:
    """Each H100 layout and variant, ours beside Calculon's; with calculon_src (a checkout at the reference's commit),
    the budget runs on Calculon's own system constants and inputs instead of its own."""
    if calculon_src is None:
        return _compare(reference, False)
    from mbridge_overlap.budget import system

    real = system.get
    try:
        files = {item["system_file"] for item in reference["layouts"] if str(item["layout"]["system"]).startswith("h100")}
        if len(files) != 1:
            raise SystemExit(f"compare_calculon: expected one H100 system file, got {sorted(files)}")
        system.get = calculon_system(json.loads((calculon_src / files.pop()).read_text(encoding="utf-8")))
        return _compare(reference, True)
    finally:
        system.get = real


def _compare(reference: dict, calculon_inputs: bool) -> list[dict]:
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
                mine = ours(lay, item["calculon_model"], tp_on, dp_on, calculon_inputs, item.get("recompute", "none"))
            except Exception as exc:  # a layout the resolver refuses: reported, not compared
                out.append({"name": lay["name"], "variant": variant, "error": str(exc)})
                continue
            dims = mine["dimensions"]
            row = {"name": lay["name"], "variant": variant, "recompute": item["recompute"],
                   "step_s": (mine["iteration_ms"] / 1e3, theirs["total_time"])}
            for dim in ("tp", "pp", "dp"):
                # Calculon counts a recomputed forward's TP collectives apart (recomm_*); the budget's TP has them
                again = (theirs.get("recomm_link_time") or 0.0, theirs.get("recomm_exposed_time") or 0.0) if dim == "tp" else (0.0, 0.0)
                row[dim] = ((dims.get(dim) or {}).get("ms", 0.0) / 1e3, theirs[f"{dim}_comm_link_time"] + again[0])
                row[dim + "_exposed"] = ((dims.get(dim) or {}).get("exposed_ms", 0.0) / 1e3,
                                         theirs[f"{dim}_comm_exposed_time"] + again[1])
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


def best_overlap(rows: list[dict]) -> list[tuple]:
    """(layout, ours, Calculon's): which overlap alone shortens the step more, "tp" or "dp", where both ran."""
    by = {(r["name"], r["variant"]): r for r in rows if "error" not in r}
    out = []
    for (name, variant), off in by.items():
        if variant != "off" or (name, "tp_only") not in by or (name, "dp_only") not in by:
            continue
        tp, dp = by[name, "tp_only"]["step_s"], by[name, "dp_only"]["step_s"]
        out.append((name, *("tp" if off["step_s"][i] - tp[i] > off["step_s"][i] - dp[i] else "dp" for i in (0, 1))))
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
        if within < len(ratios):
            lines.append(f"\nThe step time on / off more than 25 % apart: {', '.join(ratios_apart(rows))}.")
    order = best_overlap(rows)
    if order:
        same = sum(ours == theirs for _, ours, theirs in order)
        differ = "; differs: " + ", ".join(n for n, o, t in order if o != t) if same < len(order) else ""
        lines.append(f"\nWhich overlap buys more step time, TP's or DP's: the same in {same} of {len(order)} layouts{differ}.")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines.append(f"\n{len(errors)} runs not compared (the resolver refused the layout): "
                     + "; ".join(sorted({r['error'][:120] for r in errors})))
    return lines


def ratios_apart(rows: list[dict]) -> list[str]:
    """The layouts whose on/off step ratio is more than 25 % from Calculon's."""
    return [name for name, a, b in ratio_rows(rows) if abs(a / b - 1) > 0.25]


def recompute_overcount(reference: dict) -> list[tuple[str, float]]:
    """(layout, Calculon's recompute memory time over its block forward's) where the recompute's is the larger, from
    its stats with overlap off: a recompute re-runs part of the forward, never more (calculon-ai/calculon#5)."""
    out = []
    for item in reference["layouts"]:
        stats = (item["results"].get("off") or {}).get("stats") or {}
        again, forward = stats.get("block_re_mem_time") or 0.0, stats.get("block_fw_mem_time") or 0.0
        if forward and again > forward * (1 + 1e-9):
            out.append((item["layout"]["name"], again / forward))
    return out


def dp_overlap_slower(reference: dict) -> list[str]:
    """The layouts where Calculon's step is longer with DP overlap alone than with no overlap."""
    out = []
    for item in reference["layouts"]:
        res = item["results"]
        off, dp = ((res.get(v) or {}).get("stats") or {} for v in ("off", "dp_only"))
        if off.get("total_time") and dp.get("total_time", 0.0) > off["total_time"]:
            out.append(item["layout"]["name"])
    return out


def _issue5(reference: dict, rows: list[dict]) -> str:
    """The doc's paragraph on calculon-ai/calculon#5, its counts read from the reference (rows: compare's on
    Calculon's constants)."""
    over = recompute_overcount(reference)
    apart = ratios_apart(rows) + [name for name, o, t in best_overlap(rows) if o != t]
    among = ("The layouts whose on/off step ratio differs by more than 25 % and those where the order differs are "
             "all among them. " if apart and set(apart) <= {n for n, _ in over} else "")
    recomputing = sum(item.get("recompute", "none") != "none" for item in reference["layouts"])
    slower = dp_overlap_slower(reference)
    worst = max((r for _, r in over), default=0.0)
    return (
        "- Calculon's DP overlap is wrong where it recomputes, by its open issue #5 (calculon-ai/calculon#5): for each "
        "recomputed layer its `_compute_block_stats` (calculon/llm/llm.py:1219-1223 at this commit) adds the block's "
        "forward flops and memory time so far, not the layer's own (line 1224, the recompute's time, adds the layer's "
        f"own), so a block's recompute memory time comes out above its whole forward's: {len(over)} of the "
        f"{recomputing} recomputing layouts, up to {worst:.1f} x. Its DP overlap window is the block's backward less "
        "that memory time (llm.py:1613-1618), and what the window lacks is exposed (llm.py:1793-1806): the window "
        "shrinks with selective recompute and goes below zero with full recompute, where DP overlap lengthens "
        f"Calculon's step ({len(slower)} layouts: {', '.join(slower)}). Megatron-Core dispatches a bucket's reduce "
        "as soon as the last micro-batch's backward, recompute included, has made its gradients "
        "(Megatron-Core 0.19.2 core/distributed/distributed_data_parallel.py:468-499, "
        "param_and_grad_buffer.py:857-880), "
        "asynchronously (async_op with overlap_grad_reduce, param_and_grad_buffer.py:676-679), no later than the "
        "reduce without overlap starts (after the backward, in "
        f"finish_grad_sync), whatever the memory traffic. {among}"
    ).rstrip()


def exposed_by_variant(rows: list[dict]) -> list[str]:
    """Where the exposed times part: within 25 % per overlap variant."""
    out = []
    for key in ("tp_exposed", "dp_exposed"):
        parts = []
        for variant in VARIANTS:
            pairs = [r[key] for r in rows if "error" not in r and r["variant"] == variant and r[key][1] > 1e-6 and r[key][0] > 0]
            if pairs:
                parts.append(f"{variant} {sum(abs(a / b - 1) <= 0.25 for a, b in pairs)}/{len(pairs)}")
        out.append(f"- {key} within 25 % by variant: {', '.join(parts)}")
    return out


def _dp_apart(rows: list[dict]) -> str:
    """Where DP's link times part by more than 25 %: the layouts, and why (the two models place DP differently)."""
    apart = sorted({r["name"] for r in rows if "error" not in r and r["dp"][1] and abs(r["dp"][0] / r["dp"][1] - 1) > 0.25})
    if not apart:
        return ""
    return (f" but for DP on {', '.join(apart)}: Megatron-Core orders ranks tp-cp-ep-dp-pp, so a DP group can lie inside a "
            "node (NVLink) in the budget, where Calculon places data parallelism outermost, across the network")


def _dp_by_tp(rows: list[dict]) -> str:
    """The median of our DP link time over Calculon's, per TP size of the layouts (the NICs a DP group's rings get)."""
    by: dict = {}
    for r in rows:
        m = re.search(r"\|tp(\d+)pp", r["name"])
        if "error" not in r and r["dp"][1] and m:
            by.setdefault(int(m[1]), []).append(r["dp"][0] / r["dp"][1])
    return ", ".join(f"{statistics.median(v):.2f} at TP {tp}" for tp, v in sorted(by.items(), reverse=True))


def _median(rows: list[dict], key: str) -> float:
    """The median of our value over Calculon's for one quantity, where Calculon's is not zero."""
    return statistics.median(r[key][0] / r[key][1] for r in rows if "error" not in r and r[key][1])


def _once(path, reference: dict):
    """The corrected runs (None without a path), or a line saying why they cannot be used."""
    if not path:
        return None
    if not Path(path).is_file():
        return f"{path}: no such file (--once: tools/run_calculon.py --count-recompute-once writes it)"
    try:
        once = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"{path}: not a Calculon reference ({exc.__class__.__name__})"
    if not isinstance(once, dict) or once.get("count_recompute_once") is not True:
        return f"{path}: not written with tools/run_calculon.py --count-recompute-once"
    if once.get("calculon_commit") != reference.get("calculon_commit"):
        return f"{path}: Calculon commit {once.get('calculon_commit')}, the reference's is {reference.get('calculon_commit')}"
    return once


def _once_section(once, rows: list[dict]) -> list[str]:
    if not once:
        return []
    return ["## Beside Calculon with its issue #5 corrected", "",
            "The same, on Calculon's constants and inputs, beside Calculon run with each recomputed layer's own forward "
            "counted once (`tools/run_calculon.py --count-recompute-once`; nothing else of Calculon changed):", "",
            *summary(rows), "", *exposed_by_variant(rows), ""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", default=os.environ.get("MBRIDGE_SKILL_CALCULON_REF"))
    p.add_argument("--calculon-src", type=Path, default=os.environ.get("MBRIDGE_SKILL_CALCULON_SRC"),
                   help="a Calculon checkout at the reference's commit (its system files): the second table runs the budget "
                        "on Calculon's own constants (default: calculon-src beside the reference)")
    p.add_argument("--once", type=Path, default=os.environ.get("MBRIDGE_SKILL_CALCULON_ONCE"),
                   help="Calculon's runs with its issue #5 corrected (tools/run_calculon.py --count-recompute-once): "
                        "the doc sets the budget beside them too")
    p.add_argument("--write-docs", action="store_true", help="write docs/budget-calculon.md")
    args = p.parse_args(argv)
    if not args.reference or not Path(args.reference).is_file():
        print("compare_calculon: the held-back Calculon runs are needed (--reference FILE or MBRIDGE_SKILL_CALCULON_REF)",
              file=sys.stderr)
        return 2
    src = args.calculon_src or Path(args.reference).resolve().parent / "calculon-src"
    if not (Path(src) / "systems").is_dir():
        print(f"compare_calculon: {src}: no Calculon checkout (its systems/ folder); pass --calculon-src", file=sys.stderr)
        return 2
    reference = json.loads(Path(args.reference).read_text(encoding="utf-8"))
    once = _once(args.once, reference)
    if isinstance(once, str):
        print(f"compare_calculon: {once}", file=sys.stderr)
        return 2
    rows = compare(reference)
    lines = summary(rows)
    theirs = compare(reference, Path(src))
    same = summary(theirs)
    corrected = compare(once, Path(src)) if once else []
    print("\n".join(["the budget's own constants:", *lines, "", "Calculon's constants and inputs:", *same,
                      *exposed_by_variant(theirs)]
                     + (["", "Calculon's constants, its issue #5 corrected:", *summary(corrected), *exposed_by_variant(corrected)]
                        if once else [])))
    if args.write_docs:
        doc = ROOT / "docs" / "budget-calculon.md"
        from mbridge_overlap.upstream.releases import preset_content

        presets = preset_content()
        pipelined = sum((p.get("proj_fprop") or {}).get("method") == "pipeline" for p in presets.values())
        doc.write_text("\n".join([
            "# The budget beside Calculon", "",
            "Written by `tools/compare_calculon.py --write-docs` (do not edit) from held-back Calculon runs (commit "
            f"{reference.get('calculon_commit', '?')}) on the same models and layouts: our value over Calculon's, per "
            "quantity, over every H100 layout and overlap variant (off, TP only, DP only, on). Times are per step; tp, pp "
            "and dp are the communication time on the links, `_exposed` what compute does not hide.", "",
            "## On Calculon's own system constants and inputs", "",
            "The budget run with Calculon's H100 system file (`h100_80g_nvl8.json`: GEMMs at its 1,000 TFLOP/s times its "
            "0.95 efficiency for large operations; each collective timed as its `Network.time`: 10 or 20 us latency plus "
            "the buffer over 450 GB/s x 0.65 inside the NVLink domain, 50 GB/s x 0.9 across it) and its inputs (gradients "
            "reduced in BF16): what is left is the two models' structure, the collectives, their sizes and counts and what "
            "hides them.", "", *same, "", *exposed_by_variant(theirs), "",
            "- Communication on the links agrees (TP, PP, DP)" + _dp_apart(theirs) + ". The budget's TP time is about "
            f"{_median(theirs, 'tp'):.2f} "
            "of Calculon's: with sequence parallel it counts 10 collectives per layer, Transformer Engine's 10 userbuffers "
            "GEMMs (QKV's and fc1's inputs are all-gathered again in the backward for wgrad: module/linear.py and "
            "layernorm_linear.py, backward_input_needs_gather), where these Calculon runs count 8 (seq_par_ag_redo "
            "false: the gathered input kept), and 9 where they recompute the attention (attn_only re-gathers its input, "
            "counted with the recompute's communication, which is added here).",
            "- TP exposed time differs by design, in both directions. With TP overlap off, Transformer Engine issues the "
            "column-parallel layers' backward all-gather and reduce-scatter (4 of the 10) async beside their dgrad and "
            "wgrad GEMMs (async_op=True), hidden whatever tp_comm_overlap says; Calculon exposes every TP collective. "
            "With it on, the pipeline method (Transformer Engine's default for proj_fprop and fc2_fprop, kept by "
            f"{pipelined} of Bridge's {len(presets)} presets) leaves the last of its 4 chunks of each reduce-scatter exposed, where Calculon's ring "
            "scheme hides it all behind a long enough GEMM.",
            "- DP exposed time: Calculon's DP overlap hides a chunk of gradient reduce per block and leaves a tail, the "
            "budget hides buckets under the last micro-batch's backward and leaves the last bucket (with VPP a chunk's "
            "reduce behind the other chunks' backward still to run, and chunk 0's exposed). Either can be right "
            "for a given run: `trace --config` measures it. Two differences are what Megatron-Core 0.19.2 and Bridge "
            "0.6.2 do: Calculon hides the parameter all-gather with the reduce-scatter, behind the backward (a block's "
            "DP time is both, llm.py:1696-1706), where Megatron-Core gathers in the next forward, each bucket group's "
            "forward pre-hook waiting for its own and dispatching the next (core/distributed/"
            "distributed_data_parallel.py:432-466, param_and_grad_buffer.py:532-567), so only the first "
            "micro-batch's forward hides it; and the budget's "
            "bucket is Bridge's: with a comm_overlap section and DP > 1, CommOverlapConfig._get_optimizer_overlap_cfgs "
            "sets ddp.bucket_size to 128 Mi parameters (training/comm_overlap.py) where the config sets none, where "
            "Calculon's unit is one block.",
            _issue5(reference, theirs),
            "- The step time is not compared for itself: Calculon times vector operations and memory traffic, the budget "
            f"GEMMs at a calibrated efficiency (about {_median(theirs, 'step_s'):.2f} of Calculon's step on its constants). The overlap on/off step "
            "ratio, what overlap is worth, agrees.", "",
            *_once_section(once, corrected),
            "## On the budget's own constants", "",
            "The budget as it answers users (its measured H100 rates, Bridge's FP32 gradient reduce):", "", *lines, "",
            "Why the per-dimension times differ (the constants', not the structure's: the table above):", "",
            "- TP: the budget moves all-gather and reduce-scatter at 370 GB/s on NVLink (the NCCL maintainer's measured "
            "figure), Calculon at 450 GB/s x 0.65 = 256 GB/s (its assumption): a collective takes about 0.7 of its "
            "time, the 10 collectives of a layer against its 8 about 0.9.",
            "- DP: the budget reduces gradients in FP32 where the mixed-precision recipe says so (Bridge's bf16_mixed "
            "does) and gathers BF16 parameters, 6 bytes a parameter; Calculon moves 2 bytes each way, 4: about 1.5. "
            "Across the network the budget runs a DP group's rings over the NICs of every GPU it has in a node (NCCL's "
            "rings, a channel a NIC: 8 / TP of them on these 8-GPU nodes, at 47 GB/s each, up to NVLink's 370), "
            "Calculon every group larger than a node at its second network's 50 GB/s x 0.9 a GPU, one NIC: about "
            "1.5 x 45 / (8 / TP x 47), " + _dp_by_tp(rows) + ".",
            "- PP: the same message sizes and counts, across the network: both price a message at the NIC's rate plus a "
            "fixed cost, the budget's the measured NVLink curve's cost above its line rate at that size (about 40 us for "
            "a few MiB), Calculon's 20 us: about 1.1 at these sizes.",
            "- The step-time ratio with overlap on and off is what overlap is worth; the two agree on it.", ""]),
            encoding="utf-8")
        print(f"wrote {doc.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
