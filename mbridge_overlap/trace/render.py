"""Text output of `trace` and `trace --compare`: aligned tables, times in microseconds."""

from __future__ import annotations

import re
from pathlib import Path

from ..safeio import esc
from .report import ranks_said


def _lines(out: list[str]) -> str:
    """The output, one line each: whatever a cell or note above did not escape is escaped here."""
    return "".join(esc(line) + "\n" for line in "\n".join(out).split("\n"))


def us(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def pct(value) -> str:
    return "-" if value is None else f"{value:.2f}%"


def signed(value) -> str:
    return ("+" if value > 0 else "") + us(value)


_NUMERIC = re.compile(r"^[-+]?[\d,.]+%?$|^-$")


def table(headers: list[str], rows: list[list], indent: str = "  ") -> list[str]:
    """Numbers right-aligned, words left-aligned."""
    cells = [[esc(c) for c in row] for row in rows]  # names from a trace may hold control characters
    widths = [max(len(x) for x in col) for col in zip(headers, *cells)]
    right = [bool(col) and all(_NUMERIC.match(x) for x in col) for col in zip(*cells)] if cells else []

    def line(row):
        parts = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right or [False] * len(row))]
        return (indent + "  ".join(parts)).rstrip()

    return [line(headers), *[line(r) for r in cells]]


def _collectives(counts: dict) -> str:
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.items())) or "-"


def _rank_block(r: dict) -> list[str]:
    label = "rank ?" if r["rank"] is None else f"rank {r['rank']}"
    out = [f"{label} ({esc(Path(r['file']).name)}){'  PARTIAL' if r['partial'] else ''}"]
    out += table(
        ["dimension", "kernels", "communication", "hidden", "exposed", "hidden %", "collectives"],
        [[d["dimension"], d["kernels"], us(d["communication_us"]), us(d["hidden_us"]), us(d["exposed_us"]),
          pct(d["hidden_pct"]), _collectives(d["collectives"])] for d in r["dimensions"]],
    ) if r["dimensions"] else ["  no communication kernels in the totals"]
    if r["steps"]:
        steps = r["steps"][:SHOWN_STEPS]  # (fuzzR R5: 200,000 steps were 200,000 lines)
        out.append("")
        out += table(
            ["step", "in totals", "compute", "communication", "hidden", "exposed", "hidden %"],
            [[s["step"], "yes" if s["in_totals"] else "no", us(s["compute_us"]), us(s["communication_us"]),
              us(s["hidden_us"]), us(s["exposed_us"]), pct(s["hidden_pct"])] for s in steps],
        )
        rows = [[s["step"], d["dimension"], us(d["hidden_us"]), us(d["exposed_us"])]
                for s in steps for d in s["dimensions"]]
        if rows:
            out.append("")
            out += table(["step", "dimension", "hidden", "exposed"], rows)
        out += _more_steps(len(r["steps"]))
    out += [f"  note: {esc(n)}" for n in r["notes"]]
    return out


def report(d: dict) -> str:
    ranks = d["ranks"]
    world = "unknown" if d["world_size"] is None else d["world_size"]
    out = [
        f"trace: {len(ranks)} rank(s), world size {world}; times in us; hidden % as in {d['definition']}",
        *(["PARTIAL: a truncated trace was analysed; its figures cover only what was read"] if d["partial"] else []),
        "",
        *table(
            ["rank", "compute", "communication", "hidden", "exposed", "hidden %"],
            [["?" if r["rank"] is None else r["rank"], us(r["compute_us"]), us(r["communication_us"]),
              us(r["hidden_us"]), us(r["exposed_us"]), pct(r["hidden_pct"])] for r in ranks],
            indent="",
        ),
    ]
    for r in ranks:
        out += ["", *_rank_block(r)]
    out += [f"note: {esc(n)}" for n in d["notes"]]
    if d.get("predicted") is not None:
        out += ["", *_predicted(d["predicted"])]
    return _lines(out)


def _ms(value) -> str:
    return "-" if value is None else f"{value:,.3f}"


def _predicted(p: dict) -> list[str]:
    """The budget's prediction beside the measured figures (trace with the run's config)."""
    if "unavailable" in p:
        return [f"predicted: no budget for this config: {esc(p['unavailable'])}"]
    out = [f"predicted beside measured, {p['per']} ({p['steps']} step(s), {p['ranks']} rank(s)):",
           *table(["dimension", "predicted", "hidden", "exposed", "measured", "hidden", "exposed", "exposed x"],
                  [[r["dimension"], _ms(r["predicted_ms"]), _ms(r["predicted_hidden_ms"]), _ms(r["predicted_exposed_ms"]),
                    _ms(r["measured_ms"]), _ms(r["measured_hidden_ms"]), _ms(r["measured_exposed_ms"]),
                    "-" if r["exposed_ratio"] is None else f"{r['exposed_ratio']:g}"] for r in p["dimensions"]]),
           f"  compute: predicted {_ms(p['compute_ms']['predicted'])}, measured {_ms(p['compute_ms']['measured'])}; "
           f"predicted iteration {_ms(p['iteration_ms']['predicted'])}"]
    return out + [f"note: {esc(n)}" for n in p["notes"]]


SHOWN_STEPS = 100  # a profile window is a handful of steps: past this many the text shows the first


def _more_steps(count: int, what: str = "steps") -> list[str]:
    return [f"  ... {count - SHOWN_STEPS:,} more {what} (--format json has them all)"] if count > SHOWN_STEPS else []


def _side(s: dict) -> str:
    return f"ranks {ranks_said(s['ranks'])} (world size {s['world_size'] if s['world_size'] is not None else 'unknown'})"


def comparison(d: dict) -> str:
    b, a = d["before"], d["after"]
    out = [
        f"trace --compare: BEFORE {_side(b)} -> AFTER {_side(a)}; mean per rank, times in us",
        f"overall: exposed {us(b['exposed_us'])} -> {us(a['exposed_us'])} "
        f"({signed(round(a['exposed_us'] - b['exposed_us'], 1))}), hidden {pct(b['hidden_pct'])} -> {pct(a['hidden_pct'])}",
        "",
        "exposed communication by dimension, biggest change first",
        *table(
            ["dimension", "before", "after", "delta", "change", "hidden before", "hidden after"],
            [[r["dimension"], us(r["exposed_before_us"]), us(r["exposed_after_us"]), signed(r["exposed_delta_us"]),
              r["change"], us(r["hidden_before_us"]), us(r["hidden_after_us"])] for r in d["dimensions"]],
        ),
    ]
    if d["steps"]:
        out += [
            "",
            "per step (matched by position among the steps in the totals), biggest change first",
            *table(
                ["#", "step before", "step after", "dimension", "before", "after", "delta", "change"],
                [[r["position"], ",".join(map(str, r["steps_before"])), ",".join(map(str, r["steps_after"])),
                  r["dimension"], us(r["exposed_before_us"]), us(r["exposed_after_us"]), signed(r["exposed_delta_us"]),
                  r["change"]] for r in d["steps"][:SHOWN_STEPS]],
            ),
            *_more_steps(len(d["steps"]), "rows"),
        ]
    out += [f"note: {esc(n)}" for n in d["notes"]]
    return _lines(out)
