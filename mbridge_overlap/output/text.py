"""Human-readable output of the API results (the JSON is the agent contract; this is for people).

Each line is escaped as a whole on the way out (_lines): a value from a config file or the command line
cannot start a line of its own or send a control sequence to the terminal."""

from __future__ import annotations

from .. import findings
from ..safeio import esc
from ..values import fmt


def _lines(lines: list[str]) -> str:
    return "".join(esc(line) + "\n" for line in lines)


def _findings(items: list[dict]) -> list[str]:
    if not items:
        return ["findings: none"]
    lines = ["findings:"]
    for f in items:
        when = f" ({findings.when_said(f['when'])})" if f.get("when") and f["when"] != "config" else ""
        lines.append(f"  {f['severity'].upper():7} {f['id']}{when}: {f['message']}")
        lines.append(f"          fix: {f['fix']}")
    return lines


def _effective(effective: dict) -> list[str]:
    lines = []
    for section, values in effective.items():
        lines.append(f"{section}:")
        width = max(len(k) for k in values)
        lines.extend(f"  {k:<{width}}  {fmt(v)}" for k, v in values.items())
    return lines


def _modes(modes: dict) -> list[str]:
    return ["overlap modes:"] + [f"  {name.upper()}: {'on ' if m['enabled'] else 'off'}  {m['why']}" for name, m in modes.items()]


def _env(d: dict) -> list[str]:
    lines = []
    if d["env_vars"]:
        lines += ["", "env_vars the config sets (os.environ.setdefault: the launcher's values win):"]
        lines += [f"  {k}={v}" for k, v in d["env_vars"].items()]
    lines += ["", f"launch environment Bridge's launchers use for this layout on {d['gpu']} (--format env or env_vars with plan):"]
    lines += [f"  {k}={r['value']}  # {r['why']}" for k, r in d["launch_env"].items()]
    return lines


def _head(d: dict, what: str) -> str:
    start = f" from recipe {d['recipe']}" if d.get("recipe") else ""
    verified = "" if d.get("verified", True) else " (not the verified release)"
    batch = d.get("batch") or {}
    micro = (f", {batch['micro_batches_per_iteration']} micro-batches per iteration (GBS {batch['global_batch_size']}, "
             f"MBS {batch['micro_batch_size']})" if batch.get("micro_batches_per_iteration") else "")
    return (f"{what}{start}: {d['gpus']} {d['gpu']} GPUs, data_parallel_size={d['data_parallel_size']}{micro}, "
            f"Megatron-Bridge {d['bridge_version']}{verified}")


def _requested(d: dict) -> list[str]:
    req = d["requested"]
    if req["comm_overlap"] is None:
        return ["requested: no comm_overlap section" + (f" (set by the {req['set_by']['comm_overlap']})" if "comm_overlap" in req["set_by"] else "")]
    asked = {k: v for k, v in req["comm_overlap"].items() if v is not None}
    lines = ["requested in comm_overlap (unset fields: Bridge picks):"]
    lines += [f"  {k}={fmt(v)}  (set by the {req['set_by'].get('comm_overlap.' + k, 'default')})" for k, v in asked.items()]
    return lines


def _inputs(d: dict) -> list[str]:
    inputs = d["inputs"]
    assumed = inputs["assumed"]
    guessed = [f"{k} from {v}" for k, v in assumed.items() if v != "given"]
    lines = [f"config: {inputs['config']}" if inputs.get("config") else "", "assumed: " + "; ".join(guessed) if guessed else ""]
    m = inputs["machine"]
    lines.append(f"machine: {m['gpu']}, {m['gpus_per_node']} GPUs per node, NVLink domain of {m['nvlink_domain']} GPUs"
                 + (" (multi-node NVLink)" if m["mnnvl"] else "") + f", multicast {'yes' if m['multicast'] else 'no'}, "
                 f"Transformer Engine {m['te_version']}")
    return [line for line in lines if line] + [f"note: {n}" for n in d.get("notes", [])]


def resolution(d: dict) -> str:
    lines = [_head(d, "resolve")] + _inputs(d) + [""] + _modes(d["modes"]) + [""] + _requested(d) + [""] + _effective(d["effective"]) + _env(d)
    # (no budget because the config does not run: budget.needs's first reason, an error of the answer other than the
    # budget's own refusal of the shape, which none of the fixes changes: recheck58 AE3)
    budgetless = "unavailable" in (d.get("budget") or {}) and any(
        f["severity"] == "error" and f["id"] != "SHAPE_REFUSED_BY_MEGATRON_CORE" for f in d["findings"])
    fixes = _all_fixes(d.get("all_fixes"), budgetless)
    return _lines(lines + [""] + _findings(d["findings"]) + fixes + _budget_brief(d.get("budget")))


def _all_fixes(a: dict | None, budgetless: bool = False) -> list[str]:
    if not a:
        return []
    # the one quoting of every fix (fuzzP P3: this line wrote env_vars.NAME=V, which struct mode refuses for a new name;
    # recheck54 Y5: comm_overlap.KEY=V, which Hydra refuses where the config has no comm_overlap section; evalAF AF-6:
    # a key a file-built model lacks, ++: the words all_fixes wrote for the request, as each finding's fix)
    given = [a["fix"]]
    if a["then"] is None:
        then = "this release refuses them together: apply them one at a time"
    else:
        then = ("then: " + ", ".join(f"{t['id']} ({t['severity']})" for t in a["then"]) + " (resolve again to read them)"
                if a["then"] else "nothing new comes with them")
    still = [f"  still: {', '.join(a['still'])} (no config change fixes them, or resolve again)"] if a.get("still") else []
    # (evalW W2-2: a worth warning came, and MODE_LEFT_OFF went, once the budget could be priced)
    later = ["  and the budget, which needs a config that runs, may add or settle findings: resolve again with them"] if budgetless else []
    return ["", f"every fix at once: {' '.join(given)}", f"  {then}"] + still + later


def plan(d: dict) -> str:
    lay = d["layout"]
    head = (
        f"Plan for TP={lay['tp']} PP={lay['pp']} VPP={fmt(lay['vpp'])} CP={lay['cp']} "
        + (f"EP={lay['ep']} " if lay.get("ep", 1) > 1 else "") + f"on {lay['gpus']} {lay['gpu']} GPUs "
        f"({lay['precision']}), DP={fmt(lay['dp'])}, Megatron-Bridge {d['bridge_version']}"
        + (f", starting from {lay['recipe']}" if lay.get("recipe") else "")
    )
    lines = [head] + [f"note: {n}" for n in d.get("notes", [])] + [""] + _modes(d["modes"])  # (recheck53 X5)
    lines += ["", f"tuned TP preset: {d['preset'] or 'none (Transformer Engine default)' if d['modes']['tp']['enabled'] else 'n/a'}"]
    lines += ["", "overrides (plan ... --format python|yaml|hydra for a snippet):"]
    lines += [f"  {k}={fmt(v)}" for k, v in d["overrides"].items()] or ["  none: the recipe already has them"]
    lines += _env(d)
    lines += ["", "effective after runtime_config_update():"] + ["  " + x for x in _effective(d["effective"])]
    notes = d.get("plan_notes") or []
    if notes:
        lines += ["", "why the plan chose so:"] + [f"  {n['id']}: {n['message']}" for n in notes]
    return _lines(lines + [""] + _findings(d["findings"]) + _budget_brief(d.get("budget")))


def presets(items: list[dict]) -> str:
    cols = ("name", "gpu", "precision", "hidden_size", "tp", "cp", "micro_batch_size", "seq_length", "lora")
    widths = {c: max(len(c), *(len(fmt(p[c])) for p in items)) for c in cols}
    rows = ["  ".join(c.ljust(widths[c]) for c in cols)]
    rows += ["  ".join(fmt(p[c]).ljust(widths[c]) for c in cols) for p in items]
    rows += ["", "fields per GEMM (method/num_sm, +fp8_buf where set): --format json has every field"]
    for p in items:
        gemms = p.get("gemms") or {}
        rows.append(f"  {p['name']}: " + ", ".join(
            f"{g} not overlapped" if f is None else f"{g} {f.get('method')}/{f.get('num_sm')}{'+fp8_buf' if f.get('fp8_buf') else ''}"
            for g, f in sorted(gemms.items())))
    return _lines(rows)


def explain(d: dict) -> str:
    lines = [f"{d['id']} ({d['severity']}{', ' + findings.when_said(d['when']) if d.get('when') else ''}): {d['title']}"]
    loc = d.get("location") or {}
    if d.get("anchor") and loc.get("status") == "needs_bridge":  # one quiet line: where, not why the lines are unknown
        lines.append(f"decided by: {loc['scope']} in {loc['file']} (anchor {d['anchor']}; line numbers: mbridge-overlap anchors, "
                     "with megatron-bridge installed)")
    elif d.get("anchor"):
        where = f"{loc['path']}:{loc['start']}-{loc['end']}" if loc.get("start") else loc.get("note", "")
        lines.append(f"decided by: anchor {d['anchor']} (mbridge-overlap anchors){': ' + where if where else ''}")
    if d.get("source"):
        lines.append(f"source: {d['source']}")
    if d.get("skill"):
        lines.append(f"tuning it belongs to the {d['skill']} skill")
    return _lines(lines + [""] + d["explain"].splitlines())


def releases(table: dict) -> str:
    keys = ["verified", "checked", "rules_of", "megatron_core", "env_vars_field", "launch_env_set_by", "mixed_precision_recipes",
            "launch_env_where", "yanked", "same_as", "changed_rules"]
    lines = []
    for version, facts in table["releases"].items():
        lines.append(f"{version}:")
        for k in keys:
            v = facts[k]
            if v is None and k in ("yanked", "same_as"):
                continue
            v = f"{len(v)} recipes" if k == "mixed_precision_recipes" else fmt(v)
            lines.append(f"  {k}: {v}")
    return _lines(lines)


def recipes(d: dict) -> str:
    lines = [f"{d['count']} recipe(s) of Megatron-Bridge {d['bridge_version']} (overlap state as real Bridge resolved each at the GPU count "
             "in its name; pass the name to --recipe)"]
    if d["catalog_version"] != d["bridge_version"]:
        lines.append(f"  as Megatron-Bridge {d['catalog_version']} ships them: this skill has no catalog of {d['bridge_version']}'s recipes")
    if d.get("closest"):
        lines.append(f"  no model family has {d['filters']['model']!r} in its name; closest: {', '.join(d['closest'])}")
    for r in d["recipes"]:
        if r["status"] == "not_built":
            lines.append(f"  {r['reference']}: not built offline ({r['build_error']})")
            continue
        lay = r["layout"]
        shape = (f"TP{lay['tp']} PP{lay['pp']} VPP{fmt(lay['vpp'])} CP{lay['cp']} EP{lay['ep']} DP{fmt(lay['dp'])} "
                 f"on {lay['gpus_resolved']} {r['gpu'] or 'GPUs'}")
        if r["status"] == "rejected":
            state = f"REJECTED by Bridge: {r['bridge_error']}"
        elif r["status"] == "fails_at_setup":
            state = f"FAILS AT SETUP (Megatron-Core): {r['setup_error']}"
        else:
            state = " ".join(f"{k.upper()}:{'on' if m['enabled'] else 'off'}" for k, m in r["modes"].items())
        env = " ".join([f"{k}={v}" for k, v in r["env_vars"].items()] + ([f"(+{r['env_vars_not_shown']} more env_vars)"]
                                                                           if r["env_vars_not_shown"] else []))
        stand_ins = f"  [offline stand-ins: {', '.join(r['fixups'])}]" if r["fixups"] else ""
        lines.append(f"  {r['reference']}  [{r['precision'] or '-'}] {shape}  {state}" + (f"  {env}" if env else "") + stand_ins)
    if any(r["status"] != "not_built" for r in d["recipes"]):
        lines += ["", f"env_vars: {d['about']['env_vars']}", f"offline stand-ins (fixups): {d['about']['fixups']}"]
    return _lines(lines)


def suites(d: dict) -> str:
    lines = ["upstream suites verify runs (pass counts required per test-file sha256 and installed release):"]
    for name, s in d["suites"].items():
        lines.append(f"  {name}: {s['path']}" + (f" (skipped without {s['needs_module']})" if s.get("needs_module") else ""))
    for row in d["expected"]:
        lines.append(f"  {row['suite']} sha256 {row['sha256'][:16]}... against {row['bridge']}: {row['passed']} passed "
                     f"({', '.join(row['upstream'])})")
    lines.append(f"  otherwise: {d['otherwise']}")
    return _lines(lines)


def anchors(d: dict) -> str:
    where = d["checkout"] or d["package"]
    lines = [f"Megatron-Bridge {d['bridge_version']} at {where} (verified: {', '.join(d['verified_releases'])})"]
    if d["release_note"]:
        lines.append(f"  note: {d['release_note']}")
    for a in d["anchors"]:
        if a["status"] in ("same", "changed"):
            since = f"same as {a['same_as']}" if a["status"] == "same" else f"CHANGED since {a['nearest']}"
            lines.append(f"  {a['status']:<8} {a['id']}: {a['path']}:{a['start']}-{a['end']}  ({since})")
        else:
            lines.append(f"  {a['status']:<8} {a['id']}: {a['file']}")
        if a["note"]:
            lines.append(f"           {a['note']}")
        lines += [f"           step added: {s}" for s in a["steps_added"]]
        lines += [f"           step removed: {s}" for s in a["steps_removed"]]
        lines += [f"           | {line}" for line in a["diff"]]
    counts = ", ".join(f"{n} {status}" for status, n in d["counts"].items())
    lines.append(f"anchors: {'ok' if d['ok'] else 'CHANGED OR MISSING (see above)'}: {counts}")
    return _lines(lines)


def lint(d: dict) -> str:
    lay = d["layout"]
    kind = "saved run config" if d["saved_run_config"] else "override file"
    what = f"{d['config']} ({kind})" if d["config"] else f"recipe {d['recipe']}"
    lines = [
        f"lint {what}, Megatron-Bridge {d['bridge_version']}",
        f"layout: TP={lay['tp']} PP={lay['pp']} VPP={fmt(lay['vpp'])} CP={lay['cp']} on {lay['gpus']} {lay['gpu']} GPUs, DP={fmt(lay['dp'])}",
        *_inputs(d),
        "",
    ]
    return _lines(lines + _findings(d["findings"]) + _budget_brief(d.get("budget")))


def diff(d: dict) -> str:
    lines = [f"diff {d['before']} -> {d['after']} (Megatron-Bridge {d['bridge_version']})"]
    lines += [f"WARNING: {w}" for w in d["warnings"]]
    for e in d.get("new_errors") or ():
        lines += [f"ERROR   AFTER fails at {e['when']} where BEFORE does not: {e['id']}: {e['message']}",
                  f"        fix: {e['fix']}" + (" (or the restores below, which clear it too: one way or the other, not both)"
                                                 if e.get("cleared_by_restores") else "")]
    changes = d["overlap_changes"]
    lines += ["", "TP, DP and PP overlap settings that changed, most step-time impact first:" if changes
              else "TP, DP and PP overlap settings: no change"]
    for i, c in enumerate(changes, 1):
        side = [("unset" if v is None and c["key"].startswith("env_vars.") else fmt(v)) for v in (c["before"], c["after"])]
        lines.append(f"  {i}. {c['key']}: {side[0]} -> {side[1]}")  # (a launch variable not set is unset: recheck53 X9)
        lines.append(f"     why: {c['message']} [{c['finding_id']}]")
        lines.append(f"     restore: {c['fix'] or 'no config override restores it'}")
    every = d.get("restore_all")
    if every:
        restored = [c for c in changes if c.get("fix_overrides") or c.get("remove_keys")]
        back = len(restored) - len(every["not_restored"])
        said = [f"all restores together, re-resolved on AFTER: {back} of {len(restored)} "
                "settings back to BEFORE's"]
        said += [f"not {', '.join(every['not_restored'])}"] if every["not_restored"] else []
        said += [f"clears {', '.join(every['clears'])}"] if every["clears"] else []
        said += [f"brings {', '.join(every['brings'])} (neither side has it)"] if every["brings"] else []
        lines.append("  " + "; ".join(said))
    other = d["other_changes"]
    lines += ["", "other communication-relevant changes:" if other else "other communication-relevant changes: none"]
    lines += [f"  {o['label']} ({o['key']}): {fmt(o['before'])} -> {fmt(o['after'])}" for o in other]
    if d["unmodeled_changes"]:
        lines += ["", "changed on the overlap path but not modelled (their effect is not explained here):"]
        lines += [f"  {u['key']}: {fmt(u['before'])} -> {fmt(u['after'])}" for u in d["unmodeled_changes"]]
    if d["same_effect_changes"]:
        lines += ["", f"written differently, resolved the same: {', '.join(d['same_effect_changes'])}"]
    sections = ", ".join(f"{s} {n}" for s, n in d["ignored_by_section"].items())
    lines += ["", f"{d['ignored_changes']} of {d['changed_keys']} changed keys have no bearing on communication and are ignored"
              + (f" ({sections})" if sections else "")]
    return _lines(lines + _budget_change(d.get("budget")))


def _share(predicted: dict, observed: float | None, span=None) -> str:
    if not observed or not predicted["iteration_ms_before"]:
        return ""
    shares = sorted(ms / predicted["iteration_ms_before"] / observed for ms in (span or [predicted["iteration_change_ms"]]))
    if shares[-1] <= 0:
        return ": it does not explain it"
    if len(shares) == 1 or f"{shares[0] * 100:.0f}" == f"{shares[-1] * 100:.0f}":
        return f": it explains about {shares[-1] * 100:.0f}% of it"
    low = "none" if shares[0] <= 0 else f"{shares[0] * 100:.0f}%"  # (evalAA AA-3: one share of a range's one end)
    return f": it explains from {low} to about {shares[-1] * 100:.0f}% of it, as the preset decides"


def _budget_change(c: dict | None) -> list[str]:
    if c is None:
        return []
    if "unavailable" in c:
        return ["", f"communication budget: not shown: {c['unavailable']}"]
    shapes = " / ".join(dict.fromkeys(c["shape_from"]))
    lines = ["", f"what the change does to the communication budget (an estimate on {' / '.join(dict.fromkeys(c['system']))}; "
             f"shape: {shapes}):",
             f"  iteration about {c['iteration_ms_before']:,.1f} -> {c['iteration_ms_after']:,.1f} ms "
             f"({c['iteration_change_ms']:+,.1f} ms, {_pct(c['iteration_change_ms'], c['iteration_ms_before'])}); "
             f"exposed communication {c['exposed_ms_before']:,.1f} -> {c['exposed_ms_after']:,.1f} ms"]
    parts = [f"{name.replace('_', ' ')} {v['change_ms']:+,.1f}" for name, v in c["parts"].items() if abs(v["change_ms"]) >= 0.05]
    if parts:
        lines.append(f"  the change, in parts: {', '.join(parts)} ms" + (" (overlap cost: GEMMs on the SMs TP overlap's "
                     "communication takes)" if abs(c["parts"]["overlap_cost"]["change_ms"]) >= 0.05 else ""))
    lines += [f"  {dim.upper()} exposed {v['exposed_ms_before']:,.1f} -> {v['exposed_ms_after']:,.1f} ms ({v['change_ms']:+,.1f})"
              for dim, v in c["dimensions"].items() if v["change_ms"]]
    for s in c["settings_flipped"]:
        verb = "exposes" if s["exposed_change_ms"] >= 0 else "hides"
        parts = _flip_parts(s["overlap_cost_change_ms"], s["bubble_change_ms"])
        net = (f"; with {' and '.join(parts)} the iteration changes by about "
               f"{s['iteration_change_ms']:+,.1f} ms ({_pct(s['iteration_change_ms'], c['iteration_ms_before'])})"
               if parts else "")
        where = "on BEFORE" if s["estimated_on"] == "before" else "estimated on AFTER (BEFORE does not apply it)"
        lines.append(f"  {s['setting']} {'on' if s['before'] else 'off'} -> {'on' if s['after'] else 'off'}: alone, {where}, {verb} "
                     f"about {abs(s['exposed_change_ms']):,.1f} ms per iteration (about {_pct(s['exposed_change_ms'], c['iteration_ms_before'])} "
                     f"of BEFORE's iteration){net}")
    if c["settings_flipped"] and any(v["change_ms"] for k, v in c["parts"].items() if k != "exposed_communication"):
        lines.append("  (a setting's 'alone' is its worth with nothing else changed; the parts above are the whole change)")
    return lines + [f"  note: {c['note']}"]


def _ranks(ranks: list, count: int) -> str:
    """'ranks 0-7', 'ranks 0, 3 and 2 more', 'local ranks 0-1'."""
    if not count:
        return "rank unknown"
    nums = [int(r) for r in ranks if r.isdigit()]
    if nums and len(nums) == len(ranks) and nums == list(range(nums[0], nums[0] + len(nums))) and len(nums) > 2:
        shown = f"{nums[0]}-{nums[-1]}" + (f" and {count - len(nums):,} more" if count > len(nums) else "")
    else:
        shown = ", ".join(ranks[:6]) + (f" and {count - 6} more" if count > 6 else "")
    return f"{'rank' if count == 1 else f'{count} ranks'}: {shown}"


def _evidence(e: dict) -> list[str]:
    logged = e["logged"] if len(e["logged"]) <= 160 else e["logged"][:157] + "..."
    where = " ".join(filter(None, (e.get("file"), e.get("function")))) or ("native code" if e.get("package") else "where the log does not say")
    version = f" ({e['package']} {e['package_version']})" if e.get("package_version") else f" ({e['package']})" if e.get("package") else ""
    return [f"    logged  {logged}",
            f"            {e['count']} line{'s' if e['count'] != 1 else ''}, {_ranks(e['ranks'], e['rank_count'])}; first at "
            f"{e['first_seen']['source']}:{e['first_seen']['line']}",
            # (evalAD AD2-2: the catalog's condition is its own copy's, not the printing frame's code)
            (f"    raised  {e['printed_by']} (the same words are {where}{version}"
             + (f", which asserts {e['condition']}" if e.get("condition") else "") + ")" if e.get("printed_by") else
             f"    raised  {where}{version}" + (f": assert {e['condition']}" if e.get("condition") else ""))
            + (f": reads {', '.join(e['reads'])}" if e.get("reads") else "")
            ] + _also(e) + _group(e) + _wording(e)


def _also(e: dict) -> list[str]:
    """Every other place that writes the same text (another package's copy of the check, another function)."""
    return [f"    also    {x['file']} {x['function']}" + (f" ({x['package']} {x['package_version']})" if x.get("package_version")
                                                           else f" ({x['package']})" if x.get("package") else "")
            for x in e.get("also_raised") or ()]


def _group(e: dict) -> list[str]:
    """A watchdog all-gather's or reduce-scatter's group size, from its element counts."""
    n = e.get("group_ranks")
    return [f"    group   {n} ranks (NumelIn / NumelOut)"] if n else []


def _wording(e: dict) -> list[str]:
    """Where the line is another release's text of the message, or the catalog's message matched by its words."""
    out = []
    if e.get("wording_of"):
        first, last = e["wording_of"][0], e["wording_of"][-1]
        out.append(f"    wording of {first}" + (f" to {last.rsplit(' ', 1)[-1]}" if last != first else ""))
    if e.get("approximate") is not None:
        text = e.get("catalog_text") or ""
        text = text if len(text) <= 120 else text[:117] + "..."
        out.append(f"    matched by its words ({e['approximate']:.2f}), not verbatim; the release's text: {text}")
    return out


def diagnosis(d: dict) -> str:
    sources = d["sources"]
    ranks = sorted({r for s in sources for r in s["ranks"]}, key=lambda r: (not r.isdigit(), int(r) if r.isdigit() else 0, r))
    lines = [f"diagnose: {len(sources)} log{'s' if len(sources) != 1 else ''}, {d['lines']:,} line{'s' if d['lines'] != 1 else ''}"
             + (f", {_ranks(ranks, len(ranks))}" if ranks else "")
             + f" (messages of Megatron-Bridge {d['catalog']['release']}'s packages: {d['catalog']['messages']:,}"
             + f", other releases' wordings: {d['catalog'].get('other_wordings', 0):,})"]
    cfg = d["config"]
    if cfg.get("from"):
        lacks = f"; it does not print {', '.join(cfg['not_printed'])}" if cfg.get("not_printed") else ""
        if cfg.get("printed_invalid"):
            lacks += "; it prints what Bridge's config does not take: " + ", ".join(
                f"{k} ({why})" for k, why in cfg["printed_invalid"].items())
        lines.append(f"config: {cfg['from']} ({cfg['gpus']} GPUs){lacks}")
    if d.get("compare"):
        c = d["compare"]
        change = _change_unknown(c) if c["change"] is None else f"{c['change'] * 100:+.1f}%"
        median = [("unknown" if side["median_ms"] is None else side["median_ms"]) for side in (c["before"], c["after"])]
        lines.append(f"compare: median ms per iteration {median[0]} -> {median[1]} ({change})")
        for ch in c.get("config_changes") or []:
            lines.append(f"  changed {ch['key']}: {fmt(ch['before'])} -> {fmt(ch['after'])}: {ch['message']}")
        if c.get("settings_changed"):
            lines.append("  settings that changed between the summaries: " + ", ".join(
                f"{o['key']} {fmt(o['before'])} -> {fmt(o['after'])}" for o in c["settings_changed"]))
        if c.get("unmodeled_changes"):
            lines.append("  changed on the overlap path but not modelled (the budget does not see them): " + ", ".join(
                f"{u['key']} {fmt(u['before'])} -> {fmt(u['after'])}" for u in c["unmodeled_changes"]))
        predicted = c.get("budget")
        if predicted and "unavailable" not in predicted:
            before, span = predicted["iteration_ms_before"], c.get("predicted_range_ms")
            # one preset on both sides where the summaries show TP and TP overlap unchanged: the point estimate
            # leads, the preset's range is the assumption's caveat (evalAB AB2-2)
            span = None if c.get("preset_same_both_sides") else span
            said = (f"between {span[0]:+,.1f} and {span[1]:+,.1f} ms per iteration ({_pct(span[0], before)} to "
                    f"{_pct(span[1], before)}: the userbuffers preset, which the summaries do not print, decides where"
                    if span else  # (evalT U9: the headline was one end, of the opposite sign to diff's)
                    f"{predicted['iteration_change_ms']:+,.1f} ms per iteration ({_pct(predicted['iteration_change_ms'], before)}")
            lines.append(f"  the config change predicts {said}, an estimate: "
                         f"communication budget {predicted['iteration_ms_before']:,.1f} -> {predicted['iteration_ms_after']:,.1f} ms) "
                         f"beside the observed {change}" + _share(predicted, c["change"], span))
            if c.get("assumption"):
                lines.append(f"  assumption: {c['assumption']}")
            if c.get("preset_same_both_sides") and c.get("predicted_range_ms"):
                low, high = c["predicted_range_ms"]
                lines.append(f"  caveat: if the userbuffers preset also changed between the runs (the summaries cannot "
                             f"show it), the change lies between {low:+,.1f} and {high:+,.1f} ms ({_pct(low, before)} to "
                             f"{_pct(high, before)})" + _share(predicted, c["change"], [low, high]).replace(
                                 ": it explains", ", which explains"))
            if (c.get("gpus") or {}).get("from", "").startswith("--gpus"):
                lines.append(f"  both runs costed at {c['gpus']['before']} GPUs (--gpus: a log does not print its world size, "
                             "so a change of GPU count is not seen; diff BEFORE AFTER --gpus-before N --gpus-after M costs it)")
        elif predicted:
            lines.append(f"  predicted change: not known: {predicted['unavailable']}")
    lines += ["", "causes:" if d["causes"] else "causes: none on the overlap path"]
    for c in d["causes"]:
        scope = "" if c["overlap_related"] else " [not an overlap setting]"
        lines += ["", f"  {c['severity'].upper():7} {c['id']}{scope}: {c['title']}", f"    {c['message']}"]
        for e in c["evidence"]:
            lines += _evidence(e)
        if c["knobs"]:
            lines.append(f"    knobs   {', '.join(c['knobs'])}")
        if c.get("analysis"):
            lines.append(f"    config  {c['analysis']}")
        lines.append(f"    fix     {c['fix']}")
    for title, items in (("overlap-path messages without a cause of their own", d["messages"]),
                         ("other failures (not overlap settings)", d["other"])):
        if items:
            lines += ["", f"{title}:"]
            for m in items:
                lines += [f"  {m['severity'].upper():7} {m['topic']}"] + _evidence(m)
    lines += _settings_named(d.get("settings_named"))
    if d["notes"]:
        lines += [""] + [f"note: {n}" for n in d["notes"]]
    return _lines(lines)


def _settings_named(n: dict | None) -> list[str]:
    """diagnose's "settings the text names" (diagnose/settings.py): never a cause."""
    if not n:
        return []
    lines = ["", "settings the text names (not causes: the text names them, nothing here says one is wrong):"]
    for e in n["settings"]:
        value = f" = {' / '.join(e['values'])}" if e["values"] else ""
        lines.append(f"  {', '.join(e['spelled'])}{value}  ->  {', '.join(e['keys'])}  ({', '.join(e['families'])}; "
                     f"first at {e['first_seen']['source']}:{e['first_seen']['line']})")
    if n["more_settings"]:
        lines.append(f"  and {n['more_settings']:,} more")
    if n["findings"]:
        lines.append("  findings that involve these settings: run resolve/lint with them to check:")
        lines += [f"    {f['id']} (reads {', '.join(f['reads'])}): {f['title']}" for f in n["findings"]]
        if n["more_findings"]:
            lines.append(f"    and {n['more_findings']:,} more")
    if n["lines_cut"]:
        lines.append(f"  (looked for in the first {n['lines_read']:,} lines only)")
    return lines


def _trains(lay: dict) -> str:
    """What the layout line adds for a PEFT run and for activation recompute (the config's own words, escaped)."""
    out = ""
    peft, rec = lay.get("peft"), lay.get("recompute")
    if peft:
        names = [esc(t[:80]) for t in peft["target_modules"][:6]]
        more = len(peft["target_modules"]) - len(names)
        out += (f"; {esc(peft['scheme'][:80])} on {', '.join(names) or 'no module'}{f' (+{more} more)' if more > 0 else ''} "
                f"(rank {peft['dim']}), base weights frozen")
    if rec and rec["granularity"] == "full":
        out += f"; recompute full ({esc(rec['method'] or 'no method')}, {rec['num_layers']} layers)"
    elif rec:
        out += f"; recompute selective ({', '.join(esc(m) for m in rec['modules'])})"
    return out


def budget(d: dict) -> str:
    b = d["budget"]
    lay = b["layout"]
    lines = [f"budget: one iteration on one {d['gpu']} GPU of {d['gpus']} (Megatron-Bridge {d['bridge_version']}"
             + (f", {d['recipe']}" if d.get("recipe") else "") + ")",
             f"layout: TP {lay['tp']}, PP {lay['pp']} (VP {lay['vp']}), CP {lay['cp']}, EP {lay['ep']}, DP {lay['dp']}; "
             f"sequence parallel {'on' if lay['sequence_parallel'] else 'off'}; seq {lay['seq_length']}, micro-batch "
             f"{lay['micro_batch_size']}, global batch {lay['global_batch_size']} ({lay['micro_batches']} micro-batches); "
             f"{lay['precision']}" + _trains(lay),
             _placement(lay),
             f"shape: {b['shape_from']}",
             "",
             _iteration(b),
             ""] + _dimensions(b)
    lines += ["", "collectives:"]
    for c in b["collectives"]:
        size = ("up to " if c.get("bytes_vary") else "") + _bytes(c["bytes"])
        lines.append(f"  {c['dimension'].upper():<3} {c['collective']:<15} {c['count']:>6,} x {size:>9} over "
                     f"{c['group']} ranks ({c['link']}): {c['ms']:,.1f} ms, exposed {c['exposed_ms']:,.1f} ({c['what']})")
    lines += _worth(b)
    lines += ["", "assumptions:"] + [f"  - {a}" for a in b["assumptions"]]
    lines += ["", f"note: {d['note']}"]
    return _lines(lines)


def _placement(lay: dict) -> str:
    place = lay["placement"]
    out = f"placement ({place['from']}): {place['said']}"
    if "ep_ms_in_one_domain" in place:
        out += (f"; it decides EP's {place['ep_ms']:,.1f} ms of the {place['iteration_ms']:,.1f} ms iteration: placed so that "
                f"every EP group lies in one domain (domains of {place['nvlink_domain_in_one_domain']} GPUs), EP takes "
                f"{place['ep_ms_in_one_domain']:,.1f} ms and the iteration {place['iteration_ms_in_one_domain']:,.1f} ms")
    return out


def _iteration(b: dict) -> str:
    # the range spreads the communication time only; the model's own error on published runs is larger (evalR S5)
    return (f"iteration  about {b['iteration_ms']:,.1f} ms (communication's range {b['range_ms'][0]:,.1f} to "
            f"{b['range_ms'][1]:,.1f}; the estimate against Bridge's published runs: docs/budget.md): "
            f"compute {b['compute_ms']:,.1f}, pipeline bubble {b['bubble_ms']:,.1f}, exposed communication {b['exposed_ms']:,.1f}"
            + (f", overlap's own cost {b['overlap_cost_ms']:,.1f} (GEMMs on the SMs communication leaves them)"
               if b.get("overlap_cost_ms") else "")
            + f"; about {b['tokens_per_sec_per_gpu']:,.0f} tokens/s/GPU")


def _dimensions(b: dict) -> list[str]:
    lines = ["  dimension        total ms    hidden ms   exposed ms"]
    for dim, v in b["dimensions"].items():
        lines.append(f"  {dim.upper():<12} {v['ms']:>12,.1f} {v['hidden_ms']:>12,.1f} {v['exposed_ms']:>12,.1f}")
    return lines if b["dimensions"] else lines + ["  (no collectives: every parallel size is 1)"]


def _worth(b: dict) -> list[str]:
    lines = []
    for f in b.get("findings") or []:
        lines += ["", f"{f['severity'].upper()} {f['id']}: {f['message']}", f"  fix: {f['fix']}"]
    if not b["settings"]:
        return lines
    lines += ["", "what each overlap setting is worth here (ms per iteration if flipped):"]
    for name, s in b["settings"].items():
        change, exposed = s["iteration_change_ms_if_flipped"], s["exposed_change_ms_if_flipped"]
        cost = "".join("; " + part for part in _flip_parts(s["overlap_cost_change_ms_if_flipped"], s["bubble_change_ms_if_flipped"]))
        flip = s.get("flip") or {"holds": True}
        would = "changes" if flip["holds"] else "would change"
        lines.append(f"  {name}={'true' if s['effective'] else 'false'} (as Bridge leaves it): turning it "
                     f"{'off' if s['effective'] else 'on'} {would} the iteration by {change:+,.1f} ms "
                     f"({_pct(change, b['iteration_ms'])}): exposed communication {exposed:+,.1f} ms{cost}")
        if not flip["holds"]:
            lines.append(f"    but on this config {flip['fix']} brings {', '.join(flip['because'])} (resolve with it says why)")
        elif flip.get("with"):
            lines.append(f"    with {flip['fix']}: it brings {', '.join(w['id'] for w in flip['with'])}, whose launch "
                         "setting the fix includes (resolve with it says why)")
    return lines


def _flip_parts(cost: float, bubble: float) -> list[str]:
    """What a flip changes besides the exposed communication: the setting's own cost, and the pipeline bubble, whose
    fill and drain carry the stages' exposed communication (evalAG AG-1: not GEMM time)."""
    return ([f"its own cost {cost:+,.1f} ms (GEMMs on fewer SMs)"] if abs(cost) >= 0.05 else []) + (
        [f"pipeline bubble {bubble:+,.1f} ms"] if abs(bubble) >= 0.05 else [])


def _pct(ms: float, of_ms: float) -> str:
    return f"{ms / of_ms * 100:+.1f}%" if of_ms else "n/a"


def _budget_brief(b: dict | None) -> list[str]:
    """The budget under resolve's and plan's answer: the iteration, the dimensions, what each setting is worth."""
    if b is None:
        return []
    if "unavailable" in b:
        return ["", f"communication budget: not shown: {b['unavailable']}"]
    lay = b["layout"]
    batch = (f"sequence {lay['seq_length']:,}, micro-batch {lay['micro_batch_size']:,}, global batch "
             f"{lay['global_batch_size']:,}")
    lines = ["", f"communication budget (an estimate on {b['system']}; shape: {b['shape_from']}; {batch}):", "  " + _iteration(b)]
    lines += ["  " + x for x in _dimensions(b)] + ["  " + x if x else x for x in _worth(b)]
    return lines + ["", "  `budget` with the same inputs lists the collectives, sources and assumptions; the truth needs a GPU: "
                    "compare with `trace` of a profiled run"]


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _change_unknown(c: dict) -> str:
    """Why compare has no change to show: which log has no iteration times past the first (fuzzK K7)."""
    missing = [name for name in ("before", "after") if c[name]["median_ms"] is None]
    if not missing:
        return "no change to compute"
    return f"no change to compute: the {' and the '.join(missing)} log {'have' if len(missing) > 1 else 'has'} no iteration times past the first"
