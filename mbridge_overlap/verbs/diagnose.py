"""The `diagnose` verb: logs in, causes out.

    diagnose(["run.log"])                                  causes, from the log alone (and the config Bridge printed)
    diagnose(["logs/"], config="run_config.yaml")          the analysis of the run's own config linked to each cause
    diagnose(["fast.log", "slow.log"], compare=True)       and the iteration-time change between two runs

The config comes from, first: what the caller gives (config, recipe, overrides: a scenario as every verb takes it),
else Bridge's configuration summary in the log (printed by rank 0 after runtime_config_update), else none.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, BinaryIO, Mapping

from .. import findings
from ..upstream import releases
from ..errors import UsageError
from ..safeio import esc, same_files, shown
from ..values import fmt
from ..diagnose import messages, parallel, reader, report, settings
from ..diagnose.summary import MAX_BLOCK_LINES
from ..diagnose.scan import MAX_RANKS, MAX_SIZES, MAX_TRACEBACKS, MAX_UNEXPLAINED, FATAL, Scan


def diagnose(logs, *, compare: bool = False, config=None, recipe: str | None = None, overrides: Mapping[str, Any] | None = None,
             gpus: int | None = None, bridge_version: str | None = None, stdin: BinaryIO | None = None, jobs: int | None = None,
             **inputs) -> report.Diagnosis:
    """logs: file paths, directories of per-rank logs, "-" for standard input (stdin: a binary stream to read for
    it). compare: the first log (or directory) is BEFORE, the second AFTER. jobs: worker processes reading the files
    (None: every core; parallel.py). The other keywords are scenario.build's (gpu, te, task, machine_facts,
    launcher_env)."""
    logs = [releases.given("log", p) for p in (logs or ())]
    if not logs:
        raise UsageError("diagnose: name a log file, a folder of per-rank logs, or - for standard input")
    if compare and logs.count("-") > 1:  # (without --compare, - named twice is read once, as a file named twice)
        raise UsageError("--compare: standard input (-) is one log, not BEFORE and AFTER")
    if compare and len(logs) != 2:
        raise UsageError(f"diagnose --compare: give exactly two logs (BEFORE AFTER), got {len(logs)}")
    release = releases.get(bridge_version)
    from ..run import scenario

    scenario.check(release, gpus=gpus, **inputs)  # (whether or not a config is linked: fuzzX X2-3)
    catalog = messages.load(release.version)
    sides = [[p] for p in logs] if compare else [logs]
    tee = _tee(logs, stdin)
    stdin = tee or stdin
    scans, read_notes, listed = [], [], []
    for label, paths in zip(("before", "after") if compare else ("log",), sides):
        listed.append(reader.files(paths, read_notes))
        scan = parallel.scan_all(catalog, listed[-1], _summary(), jobs=jobs, stdin=stdin, notes=read_notes)
        read_notes.extend(_empty(listed[-1], scan, label if compare else None))
        scans.append((label, scan))
    diag = report.Diagnosis(catalog, scans)
    diag.notes.extend(read_notes)
    for _label, scan in scans:
        diag.facts.update(_facts(scan))
    if diag.facts.get("tracebacks_dropped"):
        diag.notes.append(f"{diag.facts['tracebacks_dropped']:,} tracebacks through overlap-path code in further places were "
                          f"counted, not listed: the first {MAX_TRACEBACKS} places are")
    if diag.facts.get("unexplained_dropped"):
        diag.notes.append(f"{diag.facts['unexplained_dropped']:,} further exception lines that nothing explains were counted, "
                          f"not listed: the first {MAX_UNEXPLAINED} kinds are (and as many whose words name a dimension)")
    if any(len(s["ranks"]) >= MAX_RANKS for _label, scan in scans for s in scan.sources.values()):
        diag.notes.append(f"rank labels past {MAX_RANKS:,} a log are not kept: the rank counts shown stop there, the line "
                          "counts go on")
    if diag.facts.get("sizes_merged"):
        diag.notes.append(f"{diag.facts['sizes_merged']:,} watchdog lines of further group sizes are one group: the first "
                          f"{MAX_SIZES} sizes are told apart (a run has a few group sizes; this many is not one run's log)")
    for _label, scan in scans:
        diag.notes.extend(_summaries_differ(scan))
    report.classify(diag)
    _tp_across_domains(diag, scans)
    _ub_setup_crashed(diag, scans)
    if compare:
        same = same_files(*listed)  # one file (or folder) as BEFORE and AFTER (fuzzH H12), or some files of both
        if same:
            diag.notes.append(same.format(kind="log"))
        diag.compare, drop = report.compare(scans[0][1], scans[1][1])
        if drop is not None:
            diag.causes.insert(0, report.Cause(drop, [], True))
        _config_changes(diag, scans, release, gpus, inputs)
    _link_config(diag, scans[-1][1], release, config, recipe, overrides, gpus, inputs)
    if compare:
        _drop_beside_changes(diag)
    report.p2p_op_type(diag)
    report.unnamed_group(diag)
    report.after_failure(diag)
    if not diag.found:  # a fallback for a text with no cause (prose, other spellings): a log with one is not read twice
        kept = bytes(tee.kept) if tee else None
        diag.settings_named = settings.named([p for paths in listed for p in paths], release.version, kept)
    return diag


def _tee(logs: list, stdin):
    """Standard input, keeping its start for the settings the text names (diagnose/settings.py); None without "-"
    (or with standard input closed: the reader says so)."""
    import sys

    if "-" not in logs or (stdin is None and sys.stdin is None):
        return None
    return settings.Tee(stdin if stdin is not None else sys.stdin.buffer)


def _empty(paths: list[str], scan: Scan, side: str | None) -> list[str]:
    """An empty log (no bytes, or blank lines only: recheck50 R8) is no log (fuzzM M7: "0 logs, 0 lines ... causes:
    none", exit 0): refused where it is all that was named (a side of --compare), noted where a folder holds others."""
    empty = [p for p in paths if not scan.sources.get(p, {}).get("text")]
    if not empty:
        return []
    if len(empty) == len(paths):
        what = f"{side.upper()} ({esc(paths[0])})" if side and len(paths) == 1 else esc(paths[0]) if len(paths) == 1 else (
            f"{side.upper() if side else 'the logs'}: all {len(paths):,} files")
        raise UsageError(f"{what}: empty, no log lines to read (blank lines at most)")
    named = ", ".join(esc(p) for p in empty[:5]) + (f" and {len(empty) - 5:,} more" if len(empty) > 5 else "")
    return [f"{len(empty):,} of the {len(paths):,} log files are empty (blank lines at most), nothing read from them: {named}"]


def _summaries_differ(scan: Scan) -> list[str]:
    """fuzzF F13: a log set with two different configuration summaries (two runs' logs, or a rank started with other
    arguments) is analysed with the first one read; said, with the fields that differ."""
    out = []
    for used, other, fields in scan.summaries_differ:
        shown = ", ".join(fields[:6]) + (f" and {len(fields) - 6} more" if len(fields) > 6 else "")
        where = f"{esc(other)}'s" if other != used else "a later one in the same log"
        out.append(f"two configuration summaries differ ({shown}): {esc(used)}'s is the one analysed, not {where}; "
                   "give diagnose one run's logs (or --config) to analyse the other")
    return out


def _summary():
    from ..diagnose.summary import Summary

    return Summary()


def _facts(scan: Scan) -> dict:
    out = {k: v for k, v in scan.facts.items() if k != "ub_domains"}
    domains = scan.facts.get("ub_domains")
    tp = scan.facts.get("tp_size")
    if domains:
        out["nvlink_domains"] = {str(k): v for k, v in sorted(domains.items())}
        if tp:
            out["tp_groups_across_domains"] = _across(domains, tp)
    return out


def _across(domains: dict, tp: int) -> list:
    """The TP groups (consecutive blocks of tp ranks, Megatron-Core's default order) whose ranks sit in more than one
    of the NVLink domains Transformer Engine listed."""
    where = {r: d for d, ranks in domains.items() for r in ranks}
    groups: dict = {}
    for r in sorted(where):  # only the groups that hold a listed rank: the ranks a log states may be far apart
        groups.setdefault(r // tp, []).append(r)
    return [g for _, g in sorted(groups.items()) if len({where[r] for r in g}) > 1][:64]


def _tp_across_domains(diag, scans) -> None:
    """Transformer Engine's `!!! [UB] Global ranks on domain N: [...]` lines with TP groups across them: the
    userbuffers of such a group cannot reach each other (UB_TP_ACROSS_NVLINK_DOMAINS)."""
    if not diag.facts.get("tp_groups_across_domains"):
        return
    groups = [g for _l, scan in scans for g in scan.groups.values() if g.entry.id == "native.ub_domain_ranks_legacy"]
    finding = report.generic("UB_TP_ACROSS_NVLINK_DOMAINS")
    diag.causes.insert(0, report.Cause(finding, groups, True, how=f"TP groups across the domains the log lists: "
                                       f"{diag.facts['tp_groups_across_domains'][:4]}"))


def _tail(path: str, keep: int = 76) -> str:
    """A long path's end, where its file name is (fuzzU U2-5: shown() keeps a text's start)."""
    return shown(path) if len(path) <= keep else "..." + shown(path[-keep:])


def _not_bridge(driver: str) -> str:
    """evalY Y3-1: a verl run's fix was given as Bridge's comm_overlap.overlap_grad_reduce=false, with nothing said."""
    return (f"not a Bridge run as far as the log shows: its tracebacks reach Megatron-Core from other code (first: "
            f"{_tail(driver)}), through no Megatron-Bridge frame, and it prints no Bridge configuration "
            "summary. There the knobs are Megatron-Core's own fields, set through that framework's config: ddp.NAME and "
            "comm_overlap.overlap_grad_reduce or overlap_param_gather are DistributedDataParallelConfig.NAME, model.NAME "
            "and comm_overlap.tp_comm_overlap TransformerConfig.NAME; the fixes are written in Bridge's keys")


def _ub_setup_crashed(diag, scans) -> None:
    """A process that died in native code after the userbuffers start-up lines and before any iteration: the
    userbuffers setup of TP overlap (UB_SETUP_CRASHED; corpus batch 13's TE #3199)."""
    for _label, scan in scans:
        crashes = scan.ub_crashes()
        if crashes and not scan.times and not scan.facts.get("setup_done"):
            what = "; ".join(esc(t) for t in list(dict.fromkeys(crashes))[:2])  # the fatal error's words (fuzzV V2-14)
            finding = report.generic("UB_SETUP_CRASHED")
            finding = replace(finding, message=findings.record("UB_SETUP_CRASHED")["message"].format(fatal=what))
            diag.causes.insert(0, report.Cause(finding, [g for g in scan.groups.values() if g.entry.id in FATAL], True))
            return


def _link_config(diag, scan: Scan, release, config, recipe, overrides, gpus, inputs) -> None:
    from ..run import scenario

    given = config is not None or recipe is not None or bool(overrides)
    summary = scan.summary
    if given:
        world = gpus or (None if config is not None or recipe is not None else _world(scan))
        if world is None and config is None and recipe is None:
            raise UsageError("diagnose KEY=VALUE: overrides on Bridge's recipe baseline need the world size, which the log does not "
                             "state: pass --gpus N (or --config run_config.yaml, or --recipe NAME)")
        sc = scenario.build(config=config, recipe=recipe, overrides=overrides, gpus=world, bridge_version=release.version, **inputs)
        origin = ("the given config" + (" and recipe" if recipe else "") if config is not None or recipe is not None
                  else "Bridge's recipe baseline with the given overrides")
        unknown, invalid = (), {}
    elif summary is not None and summary.done:
        mapping = summary.config(release)
        world = gpus or _world(scan)
        if world is None:
            diag.config = {"from": None}
            diag.notes.append("the log holds Bridge's configuration summary but not the world size: pass --gpus N to analyse "
                              "the config it prints")
            return
        sc = scenario.build(config=mapping, gpus=world, bridge_version=release.version, **inputs)
        origin, unknown = "Bridge's configuration summary in the log", tuple(summary.unknown)
        invalid = {k: why for k, why in summary.why.items() if why.startswith("printed")}  # fuzzF F13: said as such
    else:
        diag.config = {"from": None}
        cut = summary is not None and (summary.sections or summary.truncated)  # begun, never finished (fuzzG G10)
        diag.notes.append(("no config: the log's Bridge configuration summary is cut off"
                           + (f" after {MAX_BLOCK_LINES:,} lines" if summary.truncated else "") if cut else
                           "no config: the log holds no Bridge configuration summary")
                          + "; pass --config run_config.yaml or --recipe to link each cause to the config analysis")
        if scan.driver and scan.megatron_frames and not scan.bridge_frames:
            diag.notes.append(_not_bridge(scan.driver))
        return
    report.link(diag, sc, origin, unknown)
    diag.notes.extend(sc.notes)  # what the scenario says of itself (recheck53 X5: a recipe's dispatcher by the GPU)
    if invalid:
        diag.config["not_printed"] = [k for k in diag.config["not_printed"] if k not in invalid]
        diag.config["printed_invalid"] = invalid


def _world(scan: Scan) -> int | None:
    """The world size the log states (Megatron-LM's "using world size: N", Bridge's HyperCommGrid line); the
    configuration summary does not print it (its dataset.data_parallel_size is the dataset config's own field). A size
    no machine has is not taken (the log's causes stand; only the config link goes)."""
    from ..safeio import MAX_GPUS

    world = scan.facts.get("world_size")
    return world if world is None or world <= MAX_GPUS else None


def _config_changes(diag, scans, release, gpus, inputs=None) -> None:
    """With both runs' configuration summaries: diff's overlap-relevant changes between them, and the iteration-time
    change the budget predicts for them beside the one the logs show. Each side is built as every verb builds a
    scenario (the GPU type, TE and machine facts given: evalAB AB2-2, --gpu b200 was costed on H100)."""
    from ..run import scenario
    from .diff import diff

    sides, shapes, worlds, stated = [], [], [], []
    for _label, scan in scans:
        s, said = scan.summary, _world(scan)
        world = gpus or said
        if s is None or not s.done or world is None:
            return
        sides.append(scenario.build(config=s.config(release), gpus=world, bridge_version=release.version, **(inputs or {})))
        shapes.append(_shape(s))
        worlds.append(world)
        stated.append(said)
    # (evalL L7: one --gpus costs both sides; a log that states no world size cannot show a change of it)
    diag.compare["gpus"] = {"before": worlds[0], "after": worlds[1],
                            "from": "the logs" if gpus is None or stated == [gpus, gpus] else "--gpus, for both runs"}
    same = shapes[0] == shapes[1]
    preset = _recipe_preset(sides, scans, shapes[0], release) if same else None
    result = diff(*sides, labels=("before", "after"), shape=shapes[0] if same else None, sections_known=False,
                  preset=preset[0] if preset else None)
    if preset:
        diag.compare["preset"] = {"costed": preset[0], "recipes": preset[1]}
    _bridge_said_why(result, diag.causes)
    diag.compare["config_changes"] = [c.to_dict() for c in result.changes]
    # (evalAA AA-3: TP 4 -> 8 and CP 2 -> 1 are not overlap settings, and "which one" went unanswered)
    diag.compare["settings_changed"] = [{k: o[k] for k in ("key", "label", "before", "after")} for o in result.other]
    diag.compare["unmodeled_changes"] = _unmodeled(scans, result)
    said = _releases_differ(scans, release)
    if said:
        diag.compare["releases"] = said[0]
        diag.notes.append(said[1])
    moved = {c.key for c in result.changes}
    derived = sorted({x["key"] for c in result.changes for x in c.causes if x["key"] in moved and x["key"] != c.key})
    if derived:  # (evalO O5: a VPP removal's batch_p2p_comm was named a cause of align_param_gather, and restored)
        diag.notes.append(
            f"the summaries print what Bridge's config step derived as they print what was asked, so {', '.join(derived)}, "
            "which moved with the other changes, is named among their causes and its restores go through it; `diff` of the "
            "two runs' run_config.yaml tells what was asked from what Bridge derived")
    diag.compare["budget"] = (result.budget if same else
                              {"unavailable": "the two runs' configuration summaries print different model shapes"})
    _preset_unseen(diag, scans, release)


def _unmodeled(scans, result) -> list:
    """evalAF AF-3: the fields on the overlap path the two summaries print differently that the resolver does not
    model (so the budget does not see them): the summaries' config is the modelled fields only, so the diff of it
    never lists them as `diff` of the two run configs does. A field one block leaves out is, under
    [model]/[ddp]/[optimizer], the Megatron-Core default the other block prints beside it; elsewhere None (the block
    lists every value but None). The diff's own unmodelled changes come first."""
    from ..diagnose.summary import MCORE_SECTIONS, _same
    from ..findings.rules.common import on_overlap_path
    from ..run import schema

    a, b = (scan.summary for _label, scan in scans)
    out = list(result.accounting.get("unmodeled") or ())
    skip = {u["key"] for u in out} | {c.key for c in result.changes} | {o["key"] for o in result.other}

    def value(mine, other, section: str, name: str):
        if name in mine.sections.get(section, {}):
            return mine.sections[section][name]
        return other.defaults.get(section, {}).get(name) if section in MCORE_SECTIONS else None

    for section in sorted(set(a.sections) | set(b.sections)):
        for name in sorted(set(a.sections.get(section, {})) | set(b.sections.get(section, {}))):
            key = f"{section}.{name}"
            if key in skip or name in schema.SECTIONS.get(section, {}) or not on_overlap_path(key):
                continue
            old, new = value(a, b, section, name), value(b, a, section, name)
            if not _same(old, new):
                out.append({"key": key, "before": old, "after": new})
    return out


def _releases_differ(scans, release) -> tuple[dict, str] | None:
    """evalAF AF-3: the known releases each summary can be of, by the fields it prints in the sections Bridge lists
    whole (train, checkpoint, logger, tokenizer, ...: every value but None, config.py log_non_default_values): a
    field printed that a release's ConfigContainer lacks rules that release out, and so does a true/false field the
    other summary prints in a section both print and this one leaves out (a boolean is not None: this release has no
    such field). (releases, note) where no release fits both; None otherwise."""
    from ..diagnose.summary import MCORE_SECTIONS
    from ..upstream import releases as rels

    whole = [{(s, n): v for s, names in scan.summary.sections.items() if s not in MCORE_SECTIONS
              for n, v in names.items()} for _label, scan in scans]
    fits, only = [], []
    for mine, other in ((whole[0], whole[1]), (whole[1], whole[0])):
        sections = {s for s, _n in mine}
        left_out = {k for k, v in other.items() if isinstance(v, bool) and k[0] in sections and k not in mine}
        only += [f"{s}.{n}" for s, n in sorted(left_out)]
        fits.append([v for v in rels.versions()
                     if all(n in rels.bridge_fields(v).get(s, ()) for s, n in mine)
                     and not any(n in rels.bridge_fields(v).get(s, ()) for s, n in left_out)])
    if not fits[0] or not fits[1] or set(fits[0]) & set(fits[1]):
        return None
    said = {"before": fits[0], "after": fits[1]}
    return said, (
        f"the two configuration summaries are of different Bridge releases: BEFORE's fields fit "
        f"{' or '.join(fits[0])}, AFTER's {' or '.join(fits[1])} (Bridge lists every value of its own sections but "
        f"None, and one summary's true/false fields are missing from the other's: {', '.join(only[:5])}"
        f"{f' and {len(only) - 5} more' if len(only) > 5 else ''}); both are read with release {release.version}'s "
        "fields and Megatron-Core defaults (--bridge-version), so what a summary leaves out may be read wrong for the "
        "other release, and what changed with the release (its defaults, its Megatron-Core) is no config change the "
        "budget sees: `diff` of the two runs' run_config.yaml with --bridge-version says more")


# The shape fields a summary's model is matched to a known model's by (the vocabulary is padded per run)
_SHAPE_KEYS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups")


def _recipe_preset(sides, scans, shape: dict, release) -> tuple[str, list] | None:
    """The userbuffers preset of Bridge's perf recipes that the two summaries match, where the summaries do not
    print one (they never do: model.tp_comm_overlap_cfg is no Megatron-Core field): TP overlap on and TP, CP,
    micro-batch size and sequence length (what a preset is tuned for) the same on both sides, a known model of the
    summary's shape, and the recipes of that model at either side's TP, PP, VPP, CP, GPU count, GPU type and precision
    class all naming one preset (a change of PP, VPP or the GPU count leaves the recipe's preset in place: evalAC
    AC2-2). (preset, recipe names), else None. So a compare costs a recipe's run as `budget --recipe` and `diff
    --recipe` do (evalAB AB2-2: the compare costed TE's default, 35,861.9 ms where budget said 34,125.7)."""
    from ..budget.shape import models
    from ..findings.analysis import state_of
    from ..upstream import catalog

    if any("model.tp_comm_overlap_cfg" not in scan.summary.unknown for _l, scan in scans):
        return None
    states = [state_of(sc) for sc in sides]
    tuned = [(st.model.get("tensor_model_parallel_size"), st.model.get("context_parallel_size"),
              st.model.get("tp_comm_overlap"), st.train.get("micro_batch_size"), st.model.get("seq_length"))
             for st in states]
    if tuned[0] != tuned[1] or not tuned[0][2] or release.version not in catalog.versions():
        return None
    if not {"num_layers", "hidden_size"} <= set(shape):
        return None
    families = {name for name, rec in models().items()
                if all(rec["shape"].get(k) == shape[k] for k in _SHAPE_KEYS if k in shape and k in rec["shape"])}
    found: dict = {}
    for side, st in zip(sides, states):
        for name, preset in _presets_at(st, side.gpu, families, release):
            names = found.setdefault(preset, [])
            names += [] if name in names else [name]
    if len(found) != 1 or None in found or not isinstance(next(iter(found)), str):
        return None
    (name, names), = found.items()
    return name, names


def _presets_at(st, gpu, families: set, release) -> list:
    """(recipe name, its userbuffers preset) of the recipes of these model families at one side's layout, GPU count,
    GPU type, precision class, micro-batch size and sequence length."""
    from ..upstream import catalog
    from ..upstream.presets import precision_class

    m = st.model
    layout = tuple(m.get(k) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                      "virtual_pipeline_model_parallel_size", "context_parallel_size"))
    kind = lambda name: "fp8" if str(name).startswith("fp8") else str(name)  # noqa: E731 (as catalog.shipped_preset)
    precision = precision_class(st.precision or {"bf16": True})
    rows = [r for r in catalog.index(release.version) if r.model in families and r.layout
            and tuple(r.layout[:6]) == (*layout, st.gpus, gpu) and kind(r.precision) == precision]
    out = []
    for e in catalog.entries_of(release.version, rows):
        req = e["request"]
        run = (req.get("train") or {}).get("micro_batch_size"), (req.get("model") or {}).get("seq_length")
        if run == (st.train.get("micro_batch_size"), m.get("seq_length")):
            out.append((e["name"], (req.get("comm_overlap") or {}).get("tp_comm_overlap_cfg")))
    return out


def _preset_unseen(diag, scans, release) -> None:
    """Bridge's summary does not print comm_overlap.tp_comm_overlap_cfg, so neither run's userbuffers preset, nor
    whether it changed, is seen: the budget costs both runs with the preset of Bridge's recipes the summaries match
    (_recipe_preset), else Transformer Engine's default (its SM margins). With TP overlap on in either run, each run's
    overlap cost lies between none (a preset that leaves every GEMM its SMs) and the costed one's: were the preset
    changed between the runs, the predicted change is a range, from BEFORE at the costed preset and AFTER at none to
    the reverse (evalAA AA-3: a preset dropped between the runs was costed 0 and the one number explained 19 %). The
    bubble, the compute and the exposed communication stay (evalH H2). Where TP and TP overlap are the same in both
    summaries, nothing the logs show moved the preset: the answer leads with the change at one preset on both sides
    and gives the range as a caveat (evalAB AB2-2: "explains from none to 109 %" where diff said +55.1 ms); where
    either changed, the preset may well have changed with it, and the range leads."""
    b = diag.compare["budget"]
    tp_on = any((scan.summary.config(release).get("model") or {}).get("tp_comm_overlap") for _l, scan in scans)
    unseen = any("model.tp_comm_overlap_cfg" in scan.summary.unknown for _l, scan in scans)
    if "unavailable" in b or not tp_on or not unseen:
        return
    cost = b.get("parts", {}).get("overlap_cost", {})
    before, after = cost.get("before", 0.0), cost.get("after", 0.0)
    rest = b["iteration_change_ms"] - (after - before)  # the change with no overlap cost on either side
    default = b.get("overlap_cost_at_te_default") or {}  # a costed preset's run may have run TE's default instead
    most = max(before, default.get("before", 0.0)), max(after, default.get("after", 0.0))
    low, high = round(rest - most[0], 3), round(rest + most[1], 3)
    if high - low < 0.05:
        return
    moved = {o["key"] for o in diag.compare.get("settings_changed") or ()} | {
        c["key"] for c in diag.compare.get("config_changes") or ()}
    same = not moved & {"model.tensor_model_parallel_size", "model.tp_comm_overlap"}
    preset = (diag.compare.get("preset") or {}).get("costed")
    recipes = (diag.compare.get("preset") or {}).get("recipes") or []
    diag.compare["predicted_range_ms"] = [low, high]
    diag.compare["preset_same_both_sides"] = same
    costed = (f"the preset of Bridge's recipes of this model at the runs' layouts, {preset} ({', '.join(recipes[:3])}"
              f"{f' and {len(recipes) - 3} more' if len(recipes) > 3 else ''}: what budget --recipe costs them with)"
              if preset else "Transformer Engine's default config (16-SM margins on the bulk and pipeline GEMMs; no "
              "recipe of Bridge's catalog at this model and either run's layout names one preset for the TP, CP, micro-batch and "
              "sequence length both runs have)")
    diag.compare["assumption"] = (
        "Bridge's summary does not print comm_overlap.tp_comm_overlap_cfg, so this compare cannot see which userbuffers "
        f"preset either run used, nor whether it changed between them: the budget costs both with {costed}: TP "
        f"overlap's own cost {before:,.1f} ms before, {after:,.1f} ms after"
        + (f" (at TE's default {most[0]:,.1f} and {most[1]:,.1f} ms)" if default else "")
        + "; another preset costs otherwise, a light one down to none"
        + ("; TP and TP overlap are the same in both summaries, so the change above is at one preset on both sides "
           "(the caveat below: the range were the preset changed too)" if same else
           "; TP or TP overlap changed between the summaries, so the preset may have changed with them: the predicted "
           f"change lies between {low:+,.1f} ms (BEFORE at the costliest preset, AFTER at none) and {high:+,.1f} ms "
           "(the reverse)")
        + ". `diff` of the two runs' run_config.yaml, or `budget` with each run's preset, settles it")


def _drop_beside_changes(diag) -> None:
    """THROUGHPUT_DROP beside the config changes the compare found between the summaries: its config line names them
    and what the budget predicts of them (evalAB AB2-2: "no config rule decides this" under a costed change)."""
    c = diag.compare or {}
    changes = [f"{ch['key']} {fmt(ch['before'])} -> {fmt(ch['after'])} [{ch['finding_id']}]" for ch in c.get("config_changes") or ()]
    changes += [f"{o['key']} {fmt(o['before'])} -> {fmt(o['after'])}" for o in c.get("settings_changed") or ()]
    changes += [f"{u['key']} {fmt(u['before'])} -> {fmt(u['after'])} (not modelled)" for u in c.get("unmodeled_changes") or ()]
    drop = next((x for x in diag.causes if x.finding.id == "THROUGHPUT_DROP"), None)
    if drop is None or not changes:
        return
    b = c.get("budget") or {}
    said = ""
    if "iteration_change_ms" in b:
        share = (f": {b['iteration_change_ms'] / b['iteration_ms_before'] / c['change'] * 100:.0f}% of the observed "
                 f"{c['change'] * 100:+.1f}%" if c.get("change") and b["iteration_ms_before"] else "")
        said = (f"; the budget predicts {b['iteration_change_ms']:+,.1f} ms per iteration for them "
                f"({b['iteration_change_ms'] / b['iteration_ms_before'] * 100:+.1f}%{share}"
                + (", at one userbuffers preset on both sides" if c.get("predicted_range_ms") else "") + ")"
                if b["iteration_ms_before"] else "")
    if changes and all(x.endswith("(not modelled)") for x in changes):
        said = ("; the budget does not model " + ("it" if len(changes) == 1 else "them")
                + (f" (its {b['iteration_change_ms']:+,.1f} ms sees no change)" if "iteration_change_ms" in b else ""))
    drop.how = (f"the summaries differ in {len(changes)} communication setting{'s' if len(changes) != 1 else ''}: "
                + "; ".join(changes[:6]) + (f" and {len(changes) - 6} more" if len(changes) > 6 else "") + said
                + " (compare: above; each change's restore is in config_changes)")


def _bridge_said_why(result, log_causes) -> None:
    """evalI D1: Bridge's summary prints what its comm_overlap setup wrote onto the model (model.tp_comm_overlap, ...),
    never the request, so diff reads a change of one as asked for. Where a cause the log shows (Bridge's own line)
    names that setting and another key that changed between the summaries, the change is that cause's, restored
    through that key (as resolve's fix for the finding is), not by asking again for what Bridge turned off."""
    from ..findings import overrides_text
    from ..run.runconfig import WRITTEN_BY_COMM_OVERLAP

    other = {o["key"]: o for o in result.other}
    for change in result.changes:
        if change.rule != "REQUESTED_CHANGE" or change.key not in WRITTEN_BY_COMM_OVERLAP:
            continue
        setting = "." + change.key.partition(".")[2]
        for cause in log_causes:
            keys = [k for k in cause.finding.knobs if k in other]
            if keys and any(k.endswith(setting) for k in cause.finding.knobs):
                change.causes = [{"key": k, "before": other[k]["before"], "after": other[k]["after"]} for k in keys]
                change.rule, change.message = cause.finding.id, cause.finding.message
                change.fix_overrides = {k: other[k]["before"] for k in keys}
                change.fix = overrides_text(change.fix_overrides)
                break


def _shape(summary) -> dict:
    """The model's shape as Bridge's configuration summary prints it: [model]'s shape fields (a field it does not
    list equals Megatron-Core's default: gated_linear_unit False), the vocabulary from [tokenizer]."""
    from ..budget import shape

    keys = shape.in_config(summary.sections.get("model"))
    vocab = summary.sections.get("tokenizer", {}).get("vocab_size")
    if isinstance(vocab, int) and not isinstance(vocab, bool):
        keys.setdefault("vocab_size", vocab)
    keys.setdefault("gated_linear_unit", False)
    return keys
