"""Findings: every silent or surprising outcome of a request, from the one registry in data/findings.yaml.

A check raises a finding by id with the values its message and fix templates name, the typed overrides that fix it
(`fix_overrides`, Bridge's dotted keys; empty when only hardware, the launcher or a rewrite can), the knobs involved,
and the effective values its message states (`asserts`, checked against `effective` in tests).
"""

from __future__ import annotations

import re
import textwrap
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache

from dataclasses import dataclass, field

from ..errors import UsageError
from ..safeio import bare_word, override_arg, sh_quote
from ..suggest import closest
from ..upstream.releases import DATA_DIR, load_yaml
from ..values import fmt

SEVERITIES = ("error", "warning", "info")
WHEN = ("config", "setup", "step", "steady")
FIXABLE = ("always", "sometimes", "never")
# The fields of a registry record (data/findings.yaml says what each means); the first ones every record has.
REQUIRED = ("severity", "title", "message", "fix", "fixable", "example", "counter_example", "explain")
FIELDS = REQUIRED + ("knobs", "anchor", "source", "asserts", "when", "skill", "fix_overrides", "blocks", "logged", "shows", "log_fix",
                     "overlap_related", "explained_by", "log_fix_if", "implausible_if", "expected_if", "dp_keys")


@dataclass
class Finding:
    id: str
    severity: str
    message: str
    fix: str
    fix_overrides: dict = field(default_factory=dict)
    knobs: list = field(default_factory=list)
    when: str | None = None  # errors: where the run fails (config, setup, step)
    remove_keys: list = field(default_factory=list)  # keys of the request the fix drops (not settable to anything)
    asserts: dict = field(default_factory=dict)  # effective dotted key -> value the message states
    reason: str | None = None  # a rejection's own words: one id can refuse a config for another reason (proof.signature)

    def to_dict(self) -> dict:
        out = {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix,
               "fix_overrides": self.fix_overrides, "knobs": self.knobs}
        if self.when:
            out["when"] = self.when
        if self.remove_keys:
            out["remove_keys"] = self.remove_keys
        return out


# Inside a re-resolution that proves a fix (proof.probe): every check takes its first candidate unproven (no
# re-resolution in turn), and a finding made there is only compared (id, knobs, severity, fix_overrides): no text.
PROBING: ContextVar[bool] = ContextVar("probing", default=False)
# The answer's config has no comm_overlap section (recheck54 Y5): a fix of comm_overlap.* keys creates one, which
# Bridge's Hydra overrides do only as the whole ++comm_overlap={...} that plan --format hydra writes (they refuse
# comm_overlap.KEY=VALUE on a None section). Set by written_for: analyze() and the budget, while their findings are made.
SECTIONLESS: ContextVar[bool] = ContextVar("sectionless", default=False)
# Keys Bridge's struct config lacks, so the command line takes them only with ++ (evalAE AE2-2): a model that a config
# file's model._target_ builds holds only the file's keys (real 0.6.2: model.seq_length=8192 -> OverridesError "Could
# not override 'model.seq_length'"; ++model.seq_length=8192 is taken). Set by written_for: the request's predicate.
APPENDED: ContextVar = ContextVar("appended", default=None)


@contextmanager
def written_for(request):
    """Fix texts made inside are written for this request's config (SECTIONLESS where it has no comm_overlap)."""
    token = SECTIONLESS.set(request.comm_overlap is None)
    appended = APPENDED.set(getattr(request, "needs_append", None))
    try:
        yield
    finally:
        APPENDED.reset(appended)
        SECTIONLESS.reset(token)


@lru_cache(maxsize=None)
def records() -> dict:
    return load_yaml(DATA_DIR / "findings.yaml")


def record(finding_id: str) -> dict:
    return records()[finding_id]


def template_fields(text: str) -> set:
    import string

    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


class Shell(str):
    """Fix text that is safe to paste into a shell as it stands: every value in it is one shell word that the shell
    neither splits nor expands. Made only by shell() and overrides_text(); a plain str is never taken for one."""


def shell(template: str, **params) -> Shell:
    """`template` (our own prose) with each value as one quoted shell word: Shell text as it is, true/false/null
    for booleans and None, numbers as written, any other text through safeio.sh_quote."""
    return Shell(template.format(**{k: _shell_word(v) for k, v in params.items()}))


def _shell_word(value) -> str:
    if isinstance(value, Shell):
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return sh_quote(fmt(value))
    return sh_quote(str(value))


LAUNCHER = "launcher:"  # a fix's change to the launcher's environment (run.scenario.LAUNCHER): never in fix_overrides


def overrides_text(overrides: dict, sectionless: bool | None = None) -> Shell:
    """Overrides as the command line takes them, KEY=VALUE each one shell word: true/false/null, and a string in
    Hydra's quoting where it needs it (the one quoting of every fix; diff's restores use it too). A launcher change
    (`launcher:NAME`) is said as what to do in the launcher. sectionless (default: SECTIONLESS): the config has no
    comm_overlap section, so its keys go as the one ++comm_overlap={...} word that creates it."""
    config = {k: v for k, v in overrides.items() if not k.startswith(LAUNCHER)}
    comm = {k: config.pop(k) for k in list(config) if k.startswith("comm_overlap.")} \
        if (SECTIONLESS.get() if sectionless is None else sectionless) else {}
    words = [sh_quote(_section_made(comm))] if comm else []
    appended = APPENDED.get()
    words += [("++" if appended is not None and appended(k) else "") + override_arg(
        k, _list_text(v) if isinstance(v, list) else fmt(v), isinstance(v, str)) for k, v in config.items()]
    launcher = [(k[len(LAUNCHER):], v) for k, v in overrides.items() if k.startswith(LAUNCHER)]
    said = [f"unset {sh_quote(name)} in the launcher" if value is None else f"export {override_arg(name, fmt(value), False)} in the launcher"
            for name, value in launcher]
    return Shell("; ".join(([" ".join(words)] if words else []) + said))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _list_text(items: list) -> str:
    """A list of plain names as Hydra takes it, [a,b] (evalV Z2: recompute_modules' fix was left to the user)."""
    return "[" + ",".join(items) + "]"


def _section_made(comm: dict) -> str:
    """CommOverlapConfig has no default for tp_comm_overlap: a section without it is not instantiated, and Bridge keeps
    a dict that runtime_config_update() fails on (recheck56 AC1); where the fix does not set it, the section made gets
    the value the resolver's made section has (schema's default, false)."""
    from ..output.snippets import hydra_overrides
    from ..run.schema import COMM_OVERLAP

    return hydra_overrides({"comm_overlap.tp_comm_overlap": COMM_OVERLAP["tp_comm_overlap"].default, **comm})[0]


def config_part(overrides: dict) -> dict:
    """The part of a fix that is config (fix_overrides): its launcher changes are said in its text only."""
    return {k: v for k, v in overrides.items() if not k.startswith(LAUNCHER)}


def paste_safe(overrides: dict) -> bool:
    """Every value of a fix_overrides mapping is safe to paste into a shell as written (a number, true/false/null, or
    text that shlex.quote leaves bare)."""
    return all(v is None or isinstance(v, (bool, int)) or isinstance(v, float) and v == v and abs(v) != float("inf")
               or isinstance(v, str) and bare_word(v)
               or isinstance(v, list) and all(isinstance(i, str) and _NAME.match(i) for i in v) for v in overrides.values())


def when_said(when: str | None) -> str:
    """A finding's `when` as the text says it: where an error fails, or for steady, that the run costs time there."""
    if not when:
        return ""
    return "costs time in steady state" if when == "steady" else f"fails at {when}"


def make(finding_id: str, *, fix_overrides: dict | None = None, knobs=None, remove_keys=(), asserts=None, reason=None,
         **params) -> Finding:
    """A finding from its record: message and fix rendered with `params`; knobs default to the record's.

    The fix is paste-safe by construction: `fix` must be Shell text, every other value is quoted as one shell word
    in the fix template, and fix_overrides whose values are not all paste_safe are not offered (the fix then says to
    set those keys by hand)."""
    rec = record(finding_id)
    fix_overrides = dict(fix_overrides or {})
    wordless = PROBING.get()  # inside a fix proof only ids, knobs and fix_overrides count: no text is made
    if fix_overrides and not paste_safe(fix_overrides):
        keys = Shell(", ".join(_shell_word(k) for k in fix_overrides))
        params["fix"] = shell("set {keys} by hand: a value for it would hold characters a shell interprets", keys=keys)
        fix_overrides = {}
    if "fix" not in params and fix_overrides and not wordless:
        params["fix"] = overrides_text(fix_overrides)
    if "fix" in params and not isinstance(params["fix"], Shell):
        raise TypeError(f"{finding_id}: fix text must be built with findings.shell() or overrides_text()")
    if not wordless:  # a proof keeps the launcher changes it settles with; an answer's fix_overrides are config only
        fix_overrides = config_part(fix_overrides)
    return Finding(
        id=finding_id,
        severity=rec["severity"],
        message="" if wordless else rec["message"].format(**params),
        fix=Shell("") if wordless else shell(rec["fix"], **params),
        fix_overrides=fix_overrides,
        knobs=list(knobs if knobs is not None else rec.get("knobs") or []),
        when=rec.get("when"),
        remove_keys=list(remove_keys),
        asserts={**(rec.get("asserts") or {}), **(asserts or {})},
        reason=reason,
    )


def explain(finding_id: str) -> dict:
    entries = records()
    key = finding_id.strip().upper().replace("-", "_") if isinstance(finding_id, str) else ""
    if key not in entries:
        from ..safeio import shown

        hint = closest(key, entries)
        raise UsageError(f"explain: unknown finding id {shown(finding_id)}"
                         + ("" if str(finding_id).isascii() else " (it holds non-ASCII characters)")
                         + (f"; did you mean '{hint}'?" if hint else ""))
    rec = entries[key]
    from .example_command import command

    out = {"id": key, "severity": rec["severity"], "title": rec["title"], "when": rec.get("when"),
           "anchor": rec.get("anchor"), "source": rec.get("source"), "skill": rec.get("skill"),
           "knobs": rec.get("knobs") or [], "fixable": rec.get("fixable"), "example": command(rec["example"]),
           "counter_example": command(rec["counter_example"]), "explain": explanation(key)}
    out["location"] = _location(rec.get("anchor"))
    return out


def explanation(finding_id: str) -> str:
    """A record's explain text, with the paragraph generated from the release data where the record has one
    (_GENERATED): what explain prints and references/findings.md shows."""
    text = records()[finding_id]["explain"].strip()
    more = _GENERATED.get(finding_id)
    return text + "\n" + "\n".join(textwrap.wrap(more(), 116)) if more else text


def _mtp_unbuilt() -> str:
    """stop 56: the providers whose provide() builds no MTP block, per release (model_providers.json mtp_unbuilt),
    releases whose data say the same together."""
    from ..upstream import releases

    groups: dict = {}
    for version in sorted(releases.versions(), key=releases.version_key, reverse=True):
        at = releases._provider_key(releases.get(version).data_version, "mtp_unbuilt")
        said = ", ".join(f"{cls} ({v['model']}, {v['file'].rpartition('/')[2]} {v['line']})" for cls, v in sorted(at.items()))
        groups.setdefault(said or "none", []).append(version)
    each = "; ".join(f"Megatron-Bridge {' and '.join(vs) if len(vs) < 3 else ', '.join(vs[:-1]) + ' and ' + vs[-1]}: {said}"
                     for said, vs in groups.items())
    return ("Providers whose provide() builds no MTP block whatever model.mtp_num_layers says (no eh_proj: nothing is "
            "turned off, and this finding is not raised), read from each release's sources by tools/gen_bridge_data.py "
            f"(data/releases/VERSION/model_providers.json mtp_unbuilt; the model each builds, the file and line): {each}.")


_GENERATED = {"TP_OVERLAP_OFF_MTP": _mtp_unbuilt}


def _location(anchor_id: str | None) -> dict | None:
    """Where the anchored Bridge code is in the installed package, when one is importable here (None otherwise)."""
    if not anchor_id:
        return None
    from ..upstream import anchors

    spec = anchors.specs()[anchor_id]
    try:
        location = anchors.locate(None)
    except UsageError as exc:  # no Bridge here: where the code is from the anchor itself, its lines from `anchors`
        package = spec.get("package", anchors.BRIDGE).replace(".", "/")
        return {"status": "needs_bridge", "file": f"{package}/{spec['file']}", "scope": spec["scope"], "note": str(exc)}
    found = anchors.check(anchor_id, spec, location, anchors.fingerprints()["anchors"].get(anchor_id) or [])
    return {k: v for k, v in found.to_dict().items() if k in ("status", "path", "start", "end", "same_as", "nearest", "note")}


def sort(items: list[Finding]) -> list[Finding]:
    return sorted(items, key=lambda f: SEVERITIES.index(f.severity))
