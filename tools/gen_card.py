#!/usr/bin/env python3
"""Write card.yaml, this skill's card in Megatron-Bridge's skills format (skills/<name>/card.yaml), with every
claim's validation_status computed from what the package's data and tests prove:

  code_verified        the Bridge code the rule mirrors has a fingerprint recorded for the release
                       (data/fingerprints.yaml; tests/bridge/test_release_data.py measures it in the wheel, and
                       `mbridge-overlap anchors` finds it in any install)
  recipe_verified      the resolver agrees field by field with what real Bridge did with the shipped recipes
                       (data/releases/<v>/recipes.json, recorded with real Bridge by tools/gen_recipe_catalog.py);
                       counted here, now, by resolving each recipe
  functional_verified  applied to a real ConfigContainer by the Bridge test tier and scripts/verify.sh (the snippet
                       forms, and the conformance set of verify's --cases default size)
  measured             a pass count measured against the release (data/suites.yaml)
  parity_verified      agrees with HolisticTraceAnalysis on real traces (tests/test_trace_hta.py)
  doc_only             nothing in this package measures it
  known_failure        a check above found a disagreement (the comment says how many)

    python3 tools/gen_card.py            write card.yaml
    python3 tools/gen_card.py --check    exit 1 when card.yaml is not what this writes
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from mbridge_overlap.upstream import catalog, releases  # noqa: E402
from mbridge_overlap.run import flex  # noqa: E402
from mbridge_overlap import findings  # noqa: E402
from mbridge_overlap import resolve as resolve_request  # noqa: E402
from mbridge_overlap.upstream.releases import DATA_DIR, load_yaml  # noqa: E402
from tools import generated  # noqa: E402

CARD = ROOT / "card.yaml"
# The day scripts/verify.sh --conformance last passed in full (PASS: every snippet form, the anchors, 2000/2000
# conformance, 37 and 25 suite passes) against megatron-bridge 0.6.2 with the v0.6.0 test files. Change it when
# verify is run again.
VALIDATED_ON = "2026-11-30"
WHEN = {
    "config": "Bridge raises in runtime_config_update()",
    "setup": "the run fails at setup (process groups, model or optimizer)",
    "step": "the run fails at the first training step",
}

# (claim, the anchors.yaml ids of the Bridge code it mirrors, the effective fields the recipe catalog checks it by)
RULES = [
    ("tp_overlap_gating", ["tp_overlap_gating", "sequence_parallel_reset"], ["model.tp_comm_overlap"]),
    ("pp_overlap_selection", ["pp_overlap_selection"], ["model.overlap_p2p_comm", "model.batch_p2p_comm"]),
    ("dp_overlap_defaults", ["dp_overlap_defaults", "dp_overlap_needs_distributed_optimizer"],
     ["ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.bucket_size", "ddp.align_param_gather"]),
    ("user_overrides_win", ["user_overrides_win", "comm_overlap_setup"], []),
    ("distributed_optimizer_sync", ["distributed_optimizer_sync"],
     ["ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"]),
    ("mixed_precision_overwrites", ["mixed_precision_overwrites"], ["ddp.grad_reduce_in_fp32", "ddp.fp8_param_gather"]),
    ("launch_env_wiring", ["launch_env_wiring", "runtime_config_update_order"], ["environment"]),
    ("megatron_fsdp_validation", ["megatron_fsdp_validation"], ["ddp.use_megatron_fsdp"]),
    ("userbuffers_precision_limits", ["userbuffers_registration"], []),
]


@lru_cache(maxsize=None)
def agreement(version: str) -> dict:
    """Resolve every shipped recipe real Bridge resolved and compare with what it did: disagreements per field, the
    recipes that agree on everything, how often each field was on (truthy) in Bridge's result, and how many of
    Bridge's rejections the resolver predicts with Bridge's own message."""
    entries = catalog.entries(version)
    resolved = [e for e in entries if e["builds"] and e["bridge"]["error"] is None]
    rejected = [e for e in entries if e["builds"] and e["bridge"]["error"] is not None]
    differs: Counter = Counter()
    on: Counter = Counter()
    agree = 0
    for e in resolved:
        bridge, mine = flex.on_a_gpu_node(e, version), _resolve(e, version)
        wrong = [f"{s}.{n}" for s, values in mine.effective.items() for n, v in values.items()
                 if not _same(v, bridge["effective"][s][n])]
        wrong += ["data_parallel_size"] * (mine.data_parallel_size != bridge["data_parallel_size"])
        wrong += ["environment"] * (mine.state.environ != bridge["env"])
        differs.update(wrong)
        agree += not wrong
        on.update(f"{s}.{n}" for s, values in bridge["effective"].items() for n, v in values.items() if v)
        on["environment"] += bool(bridge["env"])
    predicted = outside = 0
    for e in rejected:
        mine = _resolve(e, version)
        first = mine.state.rejections[:1]
        if first and first[0].message in e["bridge"]["error"]:
            predicted += 1
        elif any(f.id == "RECIPE_REJECTED_OUTSIDE_OVERLAP" for f in mine.findings):
            outside += 1
    return {"names": len(entries), "resolved": len(resolved), "agree": agree, "differs": differs, "on": on,
            "rejected": len(rejected), "predicted": predicted, "outside": outside}


def _resolve(entry: dict, version: str):
    return resolve_request(recipe=f"{entry['package']}.{entry['name']}", gpus=entry["bridge"]["gpus"], gpu=entry.get("gpu"),
                           bridge_version=version)


def _same(mine, theirs) -> bool:
    return mine in theirs if isinstance(theirs, list) else mine == theirs  # identical presets: Bridge's is a list


def anchored(anchor_ids: list, version: str) -> tuple[bool, str]:
    """Whether each anchor's code has a fingerprint recorded for `version`, and the files it cites."""
    specs = load_yaml(DATA_DIR / "anchors.yaml")
    prints = load_yaml(DATA_DIR / "fingerprints.yaml")["anchors"]
    ok = all(any(version in entry["releases"] for entry in prints.get(a, [])) for a in anchor_ids)
    files = sorted({specs[a]["file"] for a in anchor_ids})
    return ok, ", ".join(files)


def suites() -> dict:
    """The pass count data/suites.yaml requires per upstream suite against the default release, and whose file."""
    from mbridge_overlap.upstream.suites import expected_counts

    rows = expected_counts()["expected"]
    return {r["suite"]: {"passed": r["passed"], "file": r["upstream"][0]} for r in rows if r["bridge"] == releases.default_version()}


def conformance_cases() -> int:
    from mbridge_overlap.bridge import verify

    return verify.parser().get_default("cases")


def facts() -> dict:
    version = releases.default_version()
    a = agreement(version)
    return {"version": version, "recipes_resolved": a["resolved"], "recipes_agree": a["agree"], "recipe_names": a["names"],
            "rejected": a["rejected"], "predicted": a["predicted"], "outside": a["outside"], "suites": suites(),
            "conformance_cases": conformance_cases(), "forms": _forms()}


def _forms() -> list:
    from mbridge_overlap.bridge import verify

    return list(verify.SNIPPET_FILES)


def validation_status() -> list[tuple[str, list[tuple[str, str]]]]:
    """[(claim, [(status, comment), ...])] in card order."""
    f = facts()
    version, a = f["version"], agreement(f["version"])
    out = []
    for claim, anchor_ids, fields in RULES:
        ok, files = anchored(anchor_ids, version)
        statuses = [("code_verified" if ok else "unclear",
                     f"{files}: fingerprint recorded for {version}" if ok else f"{files}: no fingerprint for {version}")]
        if fields:
            wrong = sum(a["differs"][k] for k in fields)
            shown = "; ".join(f"{k} on/set in {a['on'][k]}" for k in fields if k != "environment")
            shown = shown or f"env_vars in {a['on']['environment']}"
            statuses.append(("known_failure", f"{wrong} disagreements on {', '.join(fields)}") if wrong else
                            ("recipe_verified", f"{a['resolved']}/{a['resolved']} shipped recipes real Bridge resolved agree ({shown})"))
        out.append((claim, statuses))
    agree = f"{f['recipes_agree']}/{f['recipes_resolved']}"
    out += [
        ("shipped_recipes_resolved", [("recipe_verified" if f["recipes_agree"] == f["recipes_resolved"] else "known_failure",
                                       f"{agree} recipe names real Bridge resolved (of {f['recipe_names']} shipped) agree on "
                                       "every effective field, DP size and environment")]),
        ("shipped_recipes_rejected", [("recipe_verified" if f["predicted"] + f["outside"] == f["rejected"] else "known_failure",
                                       f"of {f['rejected']} rejections, {f['predicted']} predicted with Bridge's message and {f['outside']} "
                                       "reported as off the overlap path (RECIPE_REJECTED_OUTSIDE_OVERLAP)")]),
        ("snippet_forms_apply", [("functional_verified", f"{', '.join(f['forms'])} applied to a real ConfigContainer "
                                                         "(tests/bridge/test_apply.py, scripts/verify.sh)")]),
        ("resolver_conformance", [("functional_verified", f"{f['conformance_cases']} generated configs against real Bridge "
                                                          "(tests/bridge/test_conformance.py, verify.sh --conformance)")]),
    ]
    for suite, row in f["suites"].items():
        comment = f"{row['passed']} passed, the {row['file']} file against {version} (data/suites.yaml)"
        out.append((f"upstream_suite_{suite.removesuffix('.py')}", [("measured", comment)]))
    out += [
        ("trace_overlap_metric", [("parity_verified", "HolisticTraceAnalysis get_comm_comp_overlap within 0.1 pp (tests/test_trace_hta.py)")]),
        ("overlap_step_time_gains", [("doc_only", "no step-time measurement in this package")]),
    ]
    return out


def failure_modes() -> list[dict]:
    """The error findings this skill owns (the neighbouring skills' own are left to them)."""
    out = []
    for finding_id, rec in findings.records().items():
        if rec["severity"] == "error" and not rec.get("skill") and rec.get("when"):  # OVERLAP_PATH_ERROR: any message, no phase
            out.append({"name": finding_id.lower(), "symptom": rec["title"], "likely_cause": WHEN[rec["when"]],
                        "fix": f"mbridge-overlap explain {finding_id}; the finding's fix override"})
    return out


HEAD = f"""\
# Generated by tools/gen_card.py from the package's data and tests; do not edit by hand.
title: tp_dp_comm_overlap
validated_on: "{VALIDATED_ON}"
summary: >
  Megatron-Bridge exposes tensor, data and pipeline parallel communication
  overlap through CommOverlapConfig, and runtime_config_update() decides what
  actually runs: TP overlap is silently turned off without sequence parallel,
  with TP < 2 or without Transformer Engine; PP overlap is selected only with
  PP > 1 and VPP > 1; the DP overlap defaults apply only with the distributed
  optimizer and DP > 1, and overwrite the ddp knobs. This skill computes that
  outcome without torch, names every silent or failing case with a fix, and
  proves its rules against the installed release.
"""

BODY = """\
training_dimensions:
  speed:
    effect: "+ when communication is exposed"
    confidence: medium
    rationale: >
      Overlap hides the TP all-gather and reduce-scatter, the DP reduce-scatter
      and all-gather and the PP send and receive behind compute. The gain is the
      exposed communication a profile shows (the trace command); this package
      does not measure step time.
  memory:
    effect: "+/- small"
    confidence: medium
    rationale: Userbuffers and the DP buckets (bucket_size parameters) hold extra buffers.
  convergence:
    effect: "0"
    confidence: high
    rationale: Overlap reorders communication; the arithmetic is the same.
  stability:
    effect: "-"
    confidence: high
    rationale: >
      Some combinations fail at setup or at the first step: NVFP4 or blockwise
      FP8 with TP overlap, VPP without PP, overlap_p2p_comm without an
      interleaved schedule.
enable_when:
  - TP >= 2 with sequence parallel and Transformer Engine (TP overlap)
  - PP > 1 with VPP > 1 (PP overlap)
  - DP > 1 with the distributed optimizer (DP overlap)
  - a profile shows exposed TP, DP or PP communication
avoid_when:
  - NVFP4 or blockwise FP8 with TP overlap (Transformer Engine's userbuffers cannot carry them)
  - Megatron-FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1
  - overlap_p2p_comm without an interleaved (VPP > 1) schedule
interactions:
  required:
    - model.sequence_parallel for TP overlap
    - ddp.use_distributed_optimizer for the DP overlap defaults
  conditional:
    - CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 before Blackwell, 32 on Blackwell
    - a variable the launcher exports wins over cfg.env_vars (os.environ.setdefault)
    - with a comm_overlap section, ddp.overlap_grad_reduce, overlap_param_gather, bucket_size and align_param_gather are overwritten
  incompatible:
    - TP overlap with NVFP4 or blockwise FP8
    - Megatron-FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1
    - ddp.num_buckets with a comm_overlap section and DP > 1
feature_meaning:
  tp_overlap: >
    Transformer Engine userbuffers overlap of the sequence-parallel all-gather
    and reduce-scatter with the GEMMs.
  dp_overlap: >
    Overlap of the gradient reduce-scatter and the parameter all-gather with
    backward and forward on the distributed-optimizer path.
  pp_overlap: >
    Overlap of pipeline send and receive with compute in the interleaved
    (VPP > 1) schedule.
config_keys:
  - comm_overlap.tp_comm_overlap
  - comm_overlap.tp_comm_overlap_cfg
  - comm_overlap.overlap_p2p_comm
  - comm_overlap.batch_p2p_comm
  - comm_overlap.overlap_grad_reduce
  - comm_overlap.overlap_param_gather
  - comm_overlap.bucket_size
  - comm_overlap.align_param_gather
  - model.sequence_parallel
  - ddp.use_distributed_optimizer
  - env_vars.CUDA_DEVICE_MAX_CONNECTIONS
recommended_path:
  comm_overlap.tp_comm_overlap: true_when_tp_ge_2_with_sequence_parallel_and_not_nvfp4
  comm_overlap.tp_comm_overlap_cfg: the_tuned_preset_when_one_matches_else_null
  ddp.use_distributed_optimizer: true_for_dp_overlap
  model.virtual_pipeline_model_parallel_size: greater_than_1_for_pp_overlap
  acceptance: plan_then_scripts_verify_sh_then_trace_of_a_real_run
"""

TAIL = """\
known_constraints:
  - TP overlap requires tensor_model_parallel_size >= 2, sequence_parallel=True and Transformer Engine; otherwise Bridge turns it off
    with only a log line.
  - PP overlap (overlap_p2p_comm) is selected only with PP > 1 and VPP > 1.
  - The DP overlap defaults apply only when ddp.use_distributed_optimizer is True at setup and DP > 1.
  - bucket_size counts parameters, not bytes.
  - CUDA_DEVICE_MAX_CONNECTIONS and the LayerNorm SM margins are launch environment, not CommOverlapConfig fields.
known_limitations:
  - The resolver is proven field by field against megatron-bridge 0.6.2 only; other releases use rules read from their wheels.
  - Step-time gains are not measured by this package; the trace command shows the hidden and exposed communication of a real run.
  - Attributing traced communication to TP, DP or PP needs process-group records in the profile.
evidence:
  - src/megatron/bridge/training/comm_overlap.py
  - src/megatron/bridge/training/config.py
  - src/megatron/bridge/training/mixed_precision.py
  - src/megatron/bridge/training/initialize.py
  - src/megatron/bridge/training/profiling.py
  - src/megatron/bridge/models/transformer_config.py
  - tests/unit_tests/training/test_comm_overlap.py
  - tests/unit_tests/recipes/test_run_plugins.py
  - scripts/performance/utils/overrides.py
follow_up_validation:
  - Measure step time with and without each overlap mode on a multi-node run and record it as measured_results.
  - Prove the resolver field by field against the next Bridge release.
"""


class _IndentedDumper(yaml.SafeDumper):
    """Lists indented under their key, as upstream's cards write them."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def render() -> str:
    lines = ["validation_status:"]
    for claim, statuses in validation_status():
        lines.append(f"  {claim}:")
        lines += [f"    - {status}  # {comment}" for status, comment in statuses]
    modes = yaml.dump({"failure_modes": failure_modes()}, Dumper=_IndentedDumper, sort_keys=False, width=1000)
    return HEAD + "\n".join(lines) + "\n" + BODY + modes + TAIL


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when card.yaml is not what this would write")
    args = p.parse_args(argv)
    return generated.check_or_write(CARD, render(), args.check, wrote=f"wrote {CARD}", file=sys.stderr,
                                    verdict=lambda same: "card.yaml is up to date" if same else "card.yaml is stale: run python3 tools/gen_card.py")


if __name__ == "__main__":
    sys.exit(main())
