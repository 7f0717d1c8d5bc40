"""Human-readable output of the API results (the JSON is the agent contract; this is for people).

Each line is escaped as a whole on the way out (_lines): a value from a config file or the command line
cannot start a line of its own or send a control sequence to the terminal."""

from __future__ import annotations

from .safeio import esc


def _lines(lines: list[str]) -> str:
    return "".join(esc(line) + "\n" for line in lines)


def fmt(value, unset: bool = False) -> str:
    """A value as the command line and YAML write it: true/false, null (or "unset" for a key nobody set)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "unset" if unset else "null"
    return str(value)


def _findings(items: list[dict]) -> list[str]:
    if not items:
        return ["findings: none"]
    lines = ["findings:"]
    for f in items:
        lines.append(f"  {f['severity'].upper():7} {f['id']}: {f['message']}")
        lines.append(f"          fix: {f['fix']}")
    return lines


def _effective(effective: dict) -> list[str]:
    lines = []
    for section, values in effective.items():
        lines.append(f"{section}:")
        width = max(len(k) for k in values)
        lines.extend(f"  {k:<{width}}  {fmt(v)}" for k, v in values.items())
    return lines


def resolution(d: dict) -> str:
    lines = [f"Megatron-Bridge {d['bridge_version']}: data_parallel_size={d['data_parallel_size']}", ""]
    lines += _effective(d["effective"])
    if d["env"]:
        lines += ["env_vars (os.environ.setdefault: the launcher's values win):"]
        lines += [f"  {k}={v}" for k, v in d["env"].items()]
    return _lines(lines + [""] + _findings(d["findings"]))


def plan(d: dict) -> str:
    lay = d["layout"]
    head = (
        f"Plan for TP={lay['tp']} PP={lay['pp']} VPP={fmt(lay['vpp'])} CP={lay['cp']} on {lay['gpus']} {lay['gpu']} GPUs "
        f"({lay['precision']}), DP={lay['dp']}, Megatron-Bridge {d['bridge_version']}"
    )
    lines = [head, "", "overlap modes:"]
    for name, mode in d["modes"].items():
        lines.append(f"  {name.upper()}: {'on ' if mode['enabled'] else 'off'}  {mode['why']}")
    lines += ["", f"tuned TP preset: {d['preset'] or 'none (Transformer Engine default)' if d['modes']['tp']['enabled'] else 'n/a'}"]
    lines += ["", "overrides (python -m mbridge_overlap plan ... --format python|yaml|hydra for a snippet):"]
    lines += [f"  {k}={fmt(v)}" for k, v in d["overrides"].items()]
    lines += ["", "launch environment (--format env for exports, env_vars for cfg.env_vars):"]
    lines += [f"  {k}={v}  # {d['env_why'].get(k, '')}" for k, v in d["env"].items()]
    lines += ["", "effective after runtime_config_update():"] + ["  " + x for x in _effective(d["effective"])]
    return _lines(lines + [""] + _findings(d["findings"]))


def presets(items: list[dict]) -> str:
    cols = ("name", "gpu", "precision", "hidden_size", "tp", "cp", "micro_batch_size", "seq_length", "lora")
    widths = {c: max(len(c), *(len(fmt(p[c])) for p in items)) for c in cols}
    rows = ["  ".join(c.ljust(widths[c]) for c in cols)]
    rows += ["  ".join(fmt(p[c]).ljust(widths[c]) for c in cols) for p in items]
    return _lines(rows)


def explain(d: dict) -> str:
    return (
        f"{d['id']} ({d['severity']}): {d['title']}\n"
        f"decided by: {d['bridge']}\n\n{d['explain']}\n"
    )


def releases(table: dict) -> str:
    keys = ["verified", "env_vars", "launch_env", "mixed_precision_recipes", "launch_env_where"]
    lines = []
    for version, facts in table.items():
        lines.append(f"{version}:")
        for k in keys:
            v = facts[k]
            v = f"{len(v)} recipes" if k == "mixed_precision_recipes" else fmt(v)
            lines.append(f"  {k}: {v}")
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
    lines = [
        f"lint {d['config']} ({kind}), Megatron-Bridge {d['bridge_version']}",
        f"layout: TP={lay['tp']} PP={lay['pp']} VPP={fmt(lay['vpp'])} CP={lay['cp']} on {lay['gpus']} GPUs, DP={lay['dp']}",
        "",
    ]
    lines += _findings(d["findings"])
    lines += [f"note: {n}" for n in d["notes"]]
    return _lines(lines)


def diff(d: dict) -> str:
    lines = [f"diff {d['before']} -> {d['after']} (Megatron-Bridge {d['bridge_version']})"]
    lines += [f"WARNING: {w}" for w in d["warnings"]]
    changes = d["overlap_changes"]
    lines += ["", "overlap settings that changed, most step-time impact first:" if changes else "overlap settings: no change"]
    for i, c in enumerate(changes, 1):
        lines.append(f"  {i}. {c['key']}: {fmt(c['before'])} -> {fmt(c['after'])}")
        lines.append(f"     why: {c['message']} [{c['rule']}]")
        lines.append(f"     restore: {c['fix'] or 'no config override restores it'}")
    other = d["other_changes"]
    lines += ["", "other communication-relevant changes:" if other else "other communication-relevant changes: none"]
    lines += [f"  {o['label']} ({o['key']}): {fmt(o['before'])} -> {fmt(o['after'])}" for o in other]
    lines += ["", f"{d['ignored_changes']} changed keys with no bearing on communication (paths, logging, ...) ignored"]
    return _lines(lines)
