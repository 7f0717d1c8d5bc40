"""`trace` with the run's config: the communication budget's prediction per parallel dimension beside what the trace
measured, in milliseconds per iteration on one GPU.

A profiler step is one training iteration (Bridge's profiler steps once per train step). Measured, per dimension: each
traced rank's mean over its steps that count in the totals, then the median over the ranks (a straggler rank does
not move it). Predicted: budget.shown() for the config (`budget` explains every figure). The ratio is measured
exposed over predicted exposed; a dimension the trace cannot attribute (no process-group names) is listed as
"unattributed", never compared.
"""

from __future__ import annotations

from statistics import median

from .attribution import ORDER, UNATTRIBUTED

PER = ("ms per iteration on one GPU: measured, the median over the traced ranks of each rank's mean over its profiler "
       "steps; predicted, the communication budget of the config (an estimate: `budget` shows its sources)")


FAR = 5.0  # predicted and measured compute this far apart: the config is not the traced job's


def beside(report: dict, shown: dict, world_size: int | None) -> dict:
    """report: a TraceReport's to_dict(); shown: budget.shown() of the config's analysis; world_size: the config's
    GPU count."""
    if "unavailable" in shown:
        return {"unavailable": shown["unavailable"]}
    measured, steps = _measured(report["ranks"])
    if not steps:
        return {"unavailable": "the traces mark no profiler steps (ProfilerStep#N), so nothing is per iteration"}
    predicted = shown["dimensions"]
    rows = []
    for dim in ORDER:
        p, m = predicted.get(dim), measured.get(dim)
        if p is None and m is None:
            continue
        rows.append(_row(dim, p, m))
    notes = []
    another = False
    if report.get("world_size") and world_size and report["world_size"] != world_size:
        another = True
        notes.append(f"the traces are of a job of {report['world_size']} GPUs and the config runs on {world_size}: "
                     "the prediction is of another layout")
    # TP, PP and CP only: the expert groups (expert TP, the router's TP x CP, expert DP) count as EP or DP and have
    # traffic where the dense EP or DP size is 1 (recheck49 Q2)
    lay = shown.get("layout") or {}
    sizes = {"tp": lay.get("tp"), "pp": lay.get("pp"), "cp": lay.get("cp")}
    absent = [dim for dim in ORDER if sizes.get(dim) == 1 and predicted.get(dim) is None
              and (measured.get(dim) or {}).get("ms", 0) > 0]
    if absent:  # the trace's own groups show a layout the config does not have (evalO O3)
        another = True
        names = " and ".join(d.upper() for d in absent)
        notes.append(f"the traces ran {names} communication, which the config (its {names} size 1) has none of: the "
                     "prediction is of another layout")
    compute = (shown["compute_ms"] + shown["overlap_cost_ms"], measured.get("compute"))
    if compute[1] and compute[0] and max(compute) / min(compute) > FAR:
        another = True
        notes.append(f"the predicted compute ({compute[0]:,.1f} ms) is {max(compute) / min(compute):,.0f}x the measured "
                     f"({compute[1]:,.1f} ms): the config (its model shape, batch or layout) is not the traced job's, so "
                     "the dimensions' predictions are of another job")
    if another:  # a ratio of two jobs' times reads as an overlap that hid too little or too much (evalL L9)
        for row in rows:
            row["exposed_ratio"] = None
        notes.append("no exposed ratio is given: the prediction is not of the traced job")
    if UNATTRIBUTED in measured:
        notes.append("unattributed communication: it ran on no group whose description names a dimension (each rank's "
                     "notes say what the trace records for it: no group, the default group, or groups without a "
                     "description whose ranks are no single dimension's group in the config's layout), so no "
                     "dimension's prediction is set against it")
    return {"per": PER, "steps": steps, "ranks": len(report["ranks"]),
            "iteration_ms": {"predicted": shown["iteration_ms"]},
            # the trace's compute is every compute kernel's time, so the SMs overlap takes from GEMMs are in it
            "compute_ms": {"predicted": round(shown["compute_ms"] + shown["overlap_cost_ms"], 3),
                           "measured": measured.get("compute")},
            "dimensions": rows, "notes": notes}


def _row(dim: str, p: dict | None, m: dict | None) -> dict:
    row = {"dimension": dim,
           "predicted_ms": p["ms"] if p else None, "predicted_hidden_ms": p["hidden_ms"] if p else None,
           "predicted_exposed_ms": p["exposed_ms"] if p else None,
           "measured_ms": m["ms"] if m else None, "measured_hidden_ms": m["hidden_ms"] if m else None,
           "measured_exposed_ms": m["exposed_ms"] if m else None, "exposed_ratio": None}
    if p and m and p["exposed_ms"] > 0 and dim != UNATTRIBUTED:
        row["exposed_ratio"] = round(m["exposed_ms"] / p["exposed_ms"], 2)
    return row


def _measured(ranks: list) -> tuple[dict, int]:
    """(dimension -> {ms, hidden_ms, exposed_ms}, plus "compute" -> ms; the fewest steps a rank has)."""
    per_rank = []
    for r in ranks:
        steps = [s for s in r.get("steps") or () if s.get("in_totals")]
        if not steps:
            continue
        n = len(steps)
        dims: dict = {}
        for s in steps:
            for d in s["dimensions"]:
                acc = dims.setdefault(d["dimension"], [0, 0, 0])
                acc[0] += d["communication_us"]
                acc[1] += d["hidden_us"]
                acc[2] += d["exposed_us"]
        got = {k: {"ms": v[0] / n / 1000, "hidden_ms": v[1] / n / 1000, "exposed_ms": v[2] / n / 1000} for k, v in dims.items()}
        got["compute"] = sum(s["compute_us"] for s in steps) / n / 1000
        per_rank.append((got, n))
    if not per_rank:
        return {}, 0
    out: dict = {}
    names = {k for got, _ in per_rank for k in got if k != "compute"}
    for dim in names:
        values = [got.get(dim, {"ms": 0.0, "hidden_ms": 0.0, "exposed_ms": 0.0}) for got, _ in per_rank]
        out[dim] = {k: round(median(v[k] for v in values), 3) for k in ("ms", "hidden_ms", "exposed_ms")}
    out["compute"] = round(median(got["compute"] for got, _ in per_rank), 3)
    return out, min(n for _, n in per_rank)
