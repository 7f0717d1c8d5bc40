"""How diagnose does on the corpus of real users' error texts (tests/data/diagnose_corpus/corpus.yaml): each entry's
quote is given to `diagnose` as the whole log, as a user pastes it.

    python3 tools/corpus_rates.py [--split dev|held_out|all] [--corpus FILE] [--verbose]

An entry on the overlap path is named when a cause names one of the knobs its thread established (a config key, or
the variable of a launcher:NAME knob, in the cause's knobs or fix); where the thread established only hardware or
software, or no knob, when a cause is on the entry's parallel dimension. A negative control is kept when no overlap
cause is reported for it (a cause marked not overlap-related does not count against it). Prints the rate per split
and every miss and false match; exit 0 (a report, not a check: tests/test_diagnose_corpus.py holds the dev part).

Beside it, never in it: "knob among the settings named" counts the overlap entries one of whose config knobs (or a
launcher:NAME knob's env_vars.NAME) is among the keys of diagnose's settings_named section (the settings the text
names, diagnose/settings.py), and "controls with a settings section" the negative controls that get one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPUS = ROOT / "tests" / "data" / "diagnose_corpus" / "corpus.yaml"

# A knob's parallel dimension, by the words of its key (first match wins).
DIMENSIONS = (
    ("ep", ("expert", "moe", "dispatcher", "deepep", "a2a", "alltoall", "nvshmem")),
    ("cp", ("context_parallel", "cp_comm", "hierarchical_context")),
    ("pp", ("pipeline", "p2p", "virtual_pipeline", "variable_seq_lengths", "microbatch", "in_batch_packing")),
    ("tp", ("tp_comm", "tensor_model_parallel", "sequence_parallel", "ub_", "userbuffers", "UB_SKIPMC")),
    ("dp", ("overlap_grad_reduce", "overlap_param_gather", "distributed_optimizer", "bucket", "data_parallel",
            "grad_reduce", "param_gather", "fsdp", "average_in_collective", "ddp.")),
)


def dimension_of(knobs) -> set:
    out = set()
    for knob in knobs:
        for dim, words in DIMENSIONS:
            if any(w in knob for w in words):
                out.add(dim)
                break
    return out


def config_knobs(knobs: list[str]) -> list[str]:
    """What a cause can name: config keys, and the variables of launcher:NAME knobs."""
    return [k.partition(":")[2] if k.startswith("launcher:") else k for k in knobs
            if not k.startswith(("hardware:", "software:"))]


def judge(entry: dict, causes: list[dict]) -> tuple[bool, str]:
    """(right, what was reported) for one entry."""
    overlap = [c for c in causes if c.get("overlap_related", True)]
    shown = ", ".join(f"{c['id']}[{'/'.join(c.get('knobs') or [])}]" for c in causes) or "no cause"
    if not entry["overlap_related"]:
        return not overlap, shown
    wanted = config_knobs(entry["knobs"])
    if wanted:
        named = any(k in (c.get("knobs") or []) or k in (c.get("fix") or "") for c in overlap for k in wanted)
        return named, shown
    dims = {entry["dimension"]} if entry.get("dimension") not in (None, "none") else set()
    return bool(overlap) and (not dims or any(dimension_of(c.get("knobs") or []) & dims for c in overlap)), shown


def among_named(entry: dict, result: dict) -> bool:
    """Whether the settings the text names (settings_named, never a cause) hold a knob the entry's thread
    established; for a negative control, whether it has the section at all."""
    section = result.get("settings_named")
    if not section:
        return False
    if not entry["overlap_related"]:
        return True
    keys = {k for s in section["settings"] for k in s["keys"]}
    return any(k in keys or f"env_vars.{k}" in keys for k in config_knobs(entry["knobs"]))


def run(entries: list[dict]) -> list[tuple[dict, bool, str]]:
    """(entry, right, what was reported) of each entry."""
    return [(e, right, shown) for e, right, shown, _named in judged(entries)]


def judged(entries: list[dict]) -> list[tuple[dict, bool, str, bool]]:
    """run's, with whether among_named."""
    import io

    from mbridge_overlap import api

    out = []
    for e in entries:
        result = api.diagnose(["-"], stdin=io.BytesIO(e["quote"].encode("utf-8"))).to_dict()
        right, shown = judge(e, result["causes"])
        out.append((e, right, shown, among_named(e, result)))
    return out


def main(argv=None) -> int:
    import yaml

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--split", choices=("dev", "held_out", "all"), default="all")
    p.add_argument("--corpus", default=str(CORPUS))
    p.add_argument("--verbose", action="store_true", help="every entry, not only the misses and false matches")
    args = p.parse_args(argv)
    entries = yaml.safe_load(Path(args.corpus).read_text(encoding="utf-8"))["entries"]
    for split in (("dev", "held_out") if args.split == "all" else (args.split,)):
        part = [e for e in entries if e.get("split", "held_out") == split]
        results = judged(part)
        on = [(e, r, s) for e, r, s, _n in results if e["overlap_related"]]
        off = [(e, r, s) for e, r, s, _n in results if not e["overlap_related"]]
        print(f"{split}: named the knob for {sum(r for _, r, _ in on)} of {len(on)} on the overlap path; "
              f"no overlap cause for {sum(r for _, r, _ in off)} of {len(off)} negative controls")
        print(f"{split}: knob among the settings named for {sum(n for e, _r, _s, n in results if e['overlap_related'])} "
              f"of {len(on)} on the overlap path; controls with a settings section: "
              f"{sum(n for e, _r, _s, n in results if not e['overlap_related'])} of {len(off)}")
        for e, right, shown, among in results:
            if args.verbose or not right:
                mark = "ok  " if right else ("MISS" if e["overlap_related"] else "FALSE")
                print(f"  {mark} {e['id']} [{e['kind']}; wants {', '.join(e['knobs']) or e.get('dimension')}]: {shown}"
                      + ("; among the settings named" if among and e["overlap_related"] else
                         "; has a settings section" if among else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
