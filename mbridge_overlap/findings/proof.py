"""Fixes proven by re-resolution: the one proof engine every finding's `fix_overrides` goes through.

A fix is proven before it is offered: the scenario is analysed again with it, through the same path every verb takes,
and it must remove its finding and raise no warning or error that was not there. A candidate that brings in findings
of its own (a request it leaves overwritten, a dormant setting it turns on) is tried again together with their fixes.
A finding whose candidates all fail gets no `fix_overrides`, only the text; so does one whose fix would set a key that
a more severe (or earlier) finding's fix sets otherwise: no two fixes of one config disagree.
"""

from __future__ import annotations

from .. import findings
from . import registry
from ..errors import UsageError
from . import PROBING as _probing
from . import Finding, Shell, overrides_text, shell
from dataclasses import replace
from ..run.resolver import State

BLOCKING = ("warning", "error")


def one_value_per_key(found: list[Finding]) -> list[Finding]:
    """Where two findings' fixes set one key to different values (requests that contradict each other, each fix
    reading them its own way), the error's fix, else the first one's, stands; the other waits for it."""
    out, claimed = list(found), {}
    for i in sorted(range(len(out)), key=lambda i: findings.SEVERITIES.index(out[i].severity)):
        f = out[i]
        clash = next((claimed[k][0] for k, v in f.fix_overrides.items() if k in claimed and claimed[k][1] != v), None)
        if clash is not None:
            out[i] = replace(f, fix_overrides={}, fix=shell("after the fix of {clash}, resolve again ({fix})", clash=clash, fix=Shell(f.fix)))
        else:
            claimed.update({k: (f.id, v) for k, v in f.fix_overrides.items() if k not in claimed})
    return out


def collect(state: State) -> list[Finding]:
    """Every registered check's findings for a state (mbridge_overlap.findings.rules registers them); outside a proof, no two
    fixes of one config disagree (one_value_per_key)."""
    out = []
    for fn, ids in registry.CHECKS:
        for finding in fn(state):
            if finding.id not in ids:
                raise RuntimeError(f"{fn.__name__} raised {finding.id}, which it does not declare")
            out.append(finding)
    return out if probing() else coherent(state, one_value_per_key(out))


def coherent(state: State, found: list[Finding]) -> list[Finding]:
    """Every fix of one answer holds with the others. Taken together (first the fixes that clear the most of the
    answer's warnings and errors, then the most severe), a fix whose overrides bring, with the ones kept, a warning or
    error that was not there, or leave a finding they fix, is not offered as it is: where the kept fixes clear its
    finding already, they are its fix; else its text says to resolve again after them. So the answer's fix_overrides
    applied all at once raise nothing new."""
    fixes = [i for i, f in enumerate(found) if f.fix_overrides]
    if len(fixes) < 2:
        return found
    before = {signature(f) for f in probe(state) if f.severity in BLOCKING}

    def blocking(overrides):
        after = rerun(state, overrides)
        return None if after is None else {signature(f) for f in probe(after) if f.severity in BLOCKING}

    alone = {i: blocking(found[i].fix_overrides) for i in fixes}
    clears = {i: 0 if alone[i] is None else len(before - alone[i]) for i in fixes}
    fixes.sort(key=lambda i: (-clears[i], findings.SEVERITIES.index(found[i].severity)))
    out, kept, union, targets = list(found), {}, {}, set()

    def holds(overrides, aimed):
        now = blocking(overrides)
        return now is not None and not (now - before) and not ({s[:2] for s in now} & aimed)  # nothing new, aims gone

    def cleared_by(overrides, f):
        after = rerun(state, overrides)
        return after is not None and aim(f) not in {aim(g) for g in probe(after)}

    for i in fixes:
        f = found[i]
        if kept and cleared_by(union, f):  # moot: the fixes kept already clear it (evalAA AA-2: packing set back to fixed
            # widths clears the variable token count, and TP overlap was turned off for nothing)
            first = next((k.id for k in kept.values() if cleared_by(k.fix_overrides, f)), next(iter(kept.values())).id)
            out[i] = replace(f, fix_overrides=dict(union), fix=shell("{fix} (the fix of {first} clears it too: its own "
                                                                    "change is not needed then)", fix=overrides_text(union),
                                                                    first=first))
            continue
        trial, aimed = {**union, **f.fix_overrides}, targets | {aim(f)}
        if holds(trial, aimed):
            kept[i] = f  # by index: one id can be several findings (a launch variable each)
            union, targets = trial, aimed
            continue
        # the kept fix it clashes with: the one whose overrides (and aim), left out, let it hold with the others
        clash = next((k for k in kept.values() if holds({**{x: v for x, v in union.items() if x not in k.fix_overrides},
                                                         **f.fix_overrides}, aimed - {aim(k)})),
                     next(iter(kept.values()), None))
        first = clash.id if clash is not None else next(found[j].id for j in fixes if j != i)
        settled = rerun(state, union) if union else None
        if settled is not None and aim(f) not in {aim(g) for g in probe(settled)}:
            out[i] = replace(f, fix_overrides=dict(union), fix=shell("{fix} (the fix of {first} clears it too; its own, {own}, "
                                                                    "would clash with that one)", fix=overrides_text(union),
                                                                    first=first, own=Shell(f.fix)))
        else:
            out[i] = replace(f, fix_overrides={}, fix=shell("after the fix of {first}, resolve again: {fix} (with the other "
                                                            "fixes of this answer it brings a new warning or error)",
                                                            first=first, fix=Shell(f.fix)))
    return out


def signature(f: Finding) -> tuple:
    """What identifies a finding across re-resolutions: its id, the knobs it is about, and a rejection's reason (a fix
    that leaves a config refused for another reason than before brings an error). aim() is the finding a fix is for,
    whatever its reason."""
    return f.id, tuple(sorted(f.knobs)), f.reason


def aim(f: Finding) -> tuple:
    return signature(f)[:2]


def rerun(state: State, overrides: dict, remove=()) -> State | None:
    """The state of the same scenario with `overrides`: through the one path every verb takes (Scenario.resolve,
    which analysis.state_of is)."""
    try:
        return state.scenario.derive(overrides, remove).resolve()
    except UsageError:
        return None


def probe(state: State) -> list[Finding]:
    """The findings of a state, every check unproven (its first candidate taken as it is): computed once a state,
    which no longer changes once resolved (each finding that proves its fix asks for those of the same state)."""
    if state._probed is None:
        token = _probing.set(True)
        try:
            state._probed = collect(state)
        finally:
            _probing.reset(token)
    return list(state._probed)


def probing() -> bool:
    return _probing.get()


def proven(state: State, finding_id: str, candidates: list[dict], knobs=None, remove=()) -> dict:
    """The first candidate that removes the finding (id and knobs) without a warning or error that was not there,
    settled with the fixes of the findings it brings in; {} when none does."""
    candidates = [c for c in candidates if c]
    if _probing.get():
        return candidates[0] if candidates else {}
    target = (finding_id, tuple(sorted(knobs if knobs is not None else findings.record(finding_id).get("knobs") or [])))
    before = {signature(f) for f in probe(state) if f.severity in BLOCKING}
    return next((p for p in (_settle(state, dict(c), remove, target, before) for c in candidates) if p is not None), {})


def _settle(state: State, overrides: dict, remove, target: tuple, before: set) -> dict | None:
    """The overrides, with the fixes of the warnings and errors they bring in and of the errors left whose fix would
    undo a value they set (an error's fix wins: no fix sets what Bridge rejects; a warning's must agree). None when
    that does not settle in three rounds."""
    for _ in range(3):
        after = rerun(state, overrides, remove)
        if after is None:
            return None
        found = probe(after)
        blocking = [f for f in found if f.severity in BLOCKING]
        undoing = [f for f in blocking if any(k in overrides and overrides[k] != v for k, v in f.fix_overrides.items())]
        if any(f.severity != "error" for f in undoing):
            return None  # a warning left or brought in wants another value of a key this sets
        brought = [f for f in blocking if signature(f) not in before or f in undoing]
        if not brought and target not in {aim(f) for f in found}:
            return overrides
        merged = dict(overrides)
        for f in sorted(brought, key=lambda f: f.severity == "error"):
            for key, value in f.fix_overrides.items():
                if f.severity != "error" and merged.get(key, value) != value:
                    return None  # two warnings it brings in want different values of one key
                merged[key] = value
        if merged == overrides:
            return None
        overrides = merged
    return None


def fixed(state: State, finding_id: str, candidates: list[dict], otherwise: Shell | None = None, knobs=None) -> tuple[dict, Shell]:
    """The proven fix and its text. Where no candidate holds: `otherwise` (a change outside the config: hardware, a
    rewrite, the user's choice), after what each candidate would cost (unproven); never a candidate as if it held."""
    o = proven(state, finding_id, candidates, knobs)
    if _probing.get():
        return o, Shell("")  # a proof's findings carry no text (findings.make)
    return o, overrides_text(o) if o else unproven(state, candidates, otherwise or Shell(""), finding_id, knobs)


def fails(state: State, overrides: dict) -> bool:
    """Whether the scenario with `overrides` is refused or brings an error that was not there."""
    after = rerun(state, overrides)
    if after is None:
        return True
    before = {signature(f) for f in probe(state) if f.severity == "error"}
    return any(f.severity == "error" and signature(f) not in before for f in probe(after))


def unproven(state: State, candidates: list[dict], otherwise: Shell, finding_id: str | None = None, knobs=None) -> Shell:
    """The text of a fix that re-resolution did not prove: no single change settles it, and each candidate with
    what it brings (the warnings and errors of the whole analysis that were not there), then `otherwise`."""
    candidates = [c for c in candidates if c]
    if not candidates:  # nothing before it: an alternative's "or ..." stands alone (evalW W2-6)
        return Shell(otherwise[3:]) if otherwise.startswith("or ") else otherwise
    target = None
    if finding_id is not None:
        target = (finding_id, tuple(sorted(knobs if knobs is not None else findings.record(finding_id).get("knobs") or [])))
    before = {signature(f) for f in probe(state) if f.severity in BLOCKING}
    choices = []
    for c in candidates:
        after = rerun(state, c)
        if after is None:
            cost = "is an input this release refuses"
        else:
            found = probe(after)
            brought = sorted({f"{f.id} ({f.severity})" for f in found if f.severity in BLOCKING and signature(f) not in before})
            cost = ("brings " + ", ".join(brought) if brought else
                    "leaves it as it is" if target in {aim(f) for f in found} else "needs a further change")
        choices.append(shell("{fix} {cost}", fix=overrides_text(c), cost=Shell(cost)))
    said = shell("no single change settles it: {choices}", choices=Shell("; ".join(choices)))
    return shell("{said}; {otherwise}", said=said, otherwise=otherwise) if otherwise else said
