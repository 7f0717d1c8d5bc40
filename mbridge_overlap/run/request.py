"""A requested config: Bridge's baseline, a ConfigContainer-shaped YAML file, then dotted overrides.

Overrides use the syntax of Bridge's own scripts (`section.field=value`, Hydra style). Values are typed by
the field they set; anything else is a UsageError that names the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

from ..upstream import catalog
from .. import safeio
from . import schema
from ..errors import UsageError
from dataclasses import dataclass, field
from ..upstream.releases import Release, bridge_fields, preset_content
from .schema import BOOL, CHOICE, INT, OPT_BOOL, OPT_CHOICE, OPT_INT, OPT_PATH, PRESET, STR_LIST
from ..suggest import closest

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs a cold start about 2 ms
    from typing import Any

_NULLS = {"null", "none", "~"}
_INT = re.compile(r"^[+-]?[0-9]{1,%d}\Z" % safeio.MAX_INT_CHARS)  # ASCII digits: int() also takes "８" and "1_0"
_DIGITS = re.compile(r"^[+-]?[0-9]+\Z")
_HYDRA_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*[ \t]*\(")  # int(1), glob(x): Hydra's grammar functions
# the rest of an unquoted value: escape runs (each unescaped to every other character), interpolations, and the
# characters Hydra's lexer takes outside quotes (VALUE_MODE's ID, UNQUOTED_CHAR, COLON, WS); anything else it refuses
# (one escape a token, and a backslash that escapes nothing apart: no two ways to read a text, which made the match
# exponential in a run of escapes before a refused character: fuzzQ Q1)
_HYDRA_ESC = re.compile(r"\\[()\[\]{}:=, \t\\]")
_HYDRA_UNQUOTED = re.compile(r"(?:" + _HYDRA_ESC.pattern + r"|\\(?![()\[\]{}:=, \t\\])|\$\{[^}]+\}|[A-Za-z0-9_/+.$%*@?|: \t-])*\Z")
_FLOAT = re.compile(r"^[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?\Z")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class MixedPrecision:
    """A mixed-precision recipe by name, with fields set on top of it."""

    recipe: str | None
    fields: dict = field(default_factory=dict)

    def values(self, release: Release) -> dict:
        base = release.mixed_precision(self.recipe) if self.recipe else {}
        return {**base, **self.fields}


# What a catalog entry records of the offline build's stand-in model, not of the recipe's real one.
STAND_IN = ("model.hidden_size",)


@dataclass
class Request:
    release: Release
    model: dict
    ddp: dict
    optimizer: dict
    dist: dict = field(default_factory=dict)
    checkpoint: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    validation: dict = field(default_factory=dict)
    rerun_state_machine: dict = field(default_factory=dict)
    dataset: dict = field(default_factory=dict)
    comm_overlap: dict | None = None
    mixed_precision: MixedPrecision | None = None
    env_vars: dict = field(default_factory=dict)
    explicit: dict = field(default_factory=dict)  # dotted key -> value the user set
    unmodeled: list = field(default_factory=list)  # real Bridge keys the resolver does not model
    skipped: list = field(default_factory=list)  # config keys this release does not have (strict=False)
    launch_env_fields: list = field(default_factory=list)  # (comm_overlap.<env knob>, value) the user tried
    context: dict = field(default_factory=dict)  # dotted key -> value a recipe records but the resolver does not set
    origin: dict = field(default_factory=dict)  # dotted key -> who set it: "recipe", "config" or "override"
    recipe: dict | None = None  # the catalog entry the request starts from (None: Bridge's _pretrain_common baseline)

    @classmethod
    def baseline(cls, release: Release) -> "Request":
        sections = {s: {k: f.default for k, f in fields.items()} for s, fields in schema.SECTIONS.items()}
        req = cls(release=release, mixed_precision=MixedPrecision(schema.BASELINE_MIXED_PRECISION), **sections)
        req.context.update(schema.BASELINE_CONTEXT)
        return req

    @classmethod
    def from_recipe(cls, release: Release, entry: dict) -> "Request":
        """A shipped recipe's request as the catalog records it (values as the recipe function set them)."""
        req = cls.baseline(release)
        recorded = entry["request"]
        for section, fields in schema.SECTIONS.items():
            for name, value in (recorded.get(section) or {}).items():
                if name in fields and f"{section}.{name}" not in STAND_IN:
                    getattr(req, section)[name] = value
        for section, names in schema.CONTEXT.items():
            req.context.update({f"{section}.{n}": v for n, v in (recorded.get(section) or {}).items() if n in names})
        comm = recorded.get("comm_overlap")
        req.comm_overlap = None if comm is None else {k: comm.get(k, f.default) for k, f in schema.COMM_OVERLAP.items()}
        req.origin = {f"comm_overlap.{k}": "recipe" for k, v in (req.comm_overlap or {}).items() if v is not None}
        mp = recorded.get("mixed_precision")
        req.mixed_precision = None if mp is None else MixedPrecision(mp["recipe"], dict(mp.get("fields") or {}))
        req.env_vars = dict(recorded.get("env_vars") or {})
        req.recipe = entry
        return req

    def section(self, name: str) -> dict:
        return getattr(self, name)

    def derive(self, overrides: Mapping[str, Any], remove=()) -> "Request":
        """A copy with some keys dropped (ones that name no real field) and `overrides` applied on top."""
        new = object.__new__(type(self))  # copy.copy's shallow copy, without importing copy (1.3 ms a cold start)
        new.__dict__.update(self.__dict__)
        for name in [*schema.SECTIONS, "explicit", "env_vars", "context", "origin"]:
            setattr(new, name, dict(getattr(self, name)))
        new.comm_overlap = dict(self.comm_overlap) if self.comm_overlap is not None else None
        if self.mixed_precision is not None:
            new.mixed_precision = MixedPrecision(self.mixed_precision.recipe, dict(self.mixed_precision.fields))
        new.unmodeled = [k for k in self.unmodeled if k not in remove]
        for key in remove:
            new.context.pop(key, None)
        new.launch_env_fields = [(k, v) for k, v in self.launch_env_fields if k not in remove]
        for key, value in overrides.items():
            if key.startswith("env_vars.") and value is None:
                new.env_vars.pop(key.partition(".")[2], None)  # an unset variable
                continue
            new.set(key, value)
        return new

    def set(self, key: str, value: Any, origin: str = "override") -> None:
        """Apply one dotted override; value may be typed or the string form of the command line."""
        self.origin[key] = origin
        section, _, name = key.partition(".")
        setter = _SETTERS.get(section)
        if setter is None:
            known = bridge_fields(self.release.version)
            if section in known:
                # a section the resolver does not model: its field must still be one Bridge has (a section whose
                # class varies, such as peft, lists none: any field goes)
                if known[section] and name.partition(".")[0] not in known[section]:
                    hint = closest(name, list(known[section]))
                    raise UsageError(f"{key}: '{safeio.esc(name)}' is not a field of {section} in Megatron-Bridge "
                                     f"{self.release.version}" + (f"; did you mean '{section}.{hint}'?" if hint else ""))
                self.unmodeled.append(key)
                self.context[key] = value  # as given (not typed): read only where a rule names it (peft's regather)
                return
            hint = closest(section, list(_SETTERS) + list(bridge_fields(self.release.version)))
            raise UsageError(f"{key}: unknown config section '{section}'" + (f"; did you mean '{hint}'?" if hint else ""))
        if not name and section not in ("comm_overlap", "mixed_precision"):  # recheck N6: a section as a whole
            raise UsageError(f"{safeio.shown(key)}: name a field, {section}.FIELD=VALUE (a section is not set as a whole)")
        setter(self, key, name, value)


def parse_override(text: str) -> tuple[str, str]:
    """Split `section.field=value` (a leading '+' or '++' as Hydra allows) into key and raw value."""
    body = text[2:] if text.startswith("++") else text[1:] if text.startswith("+") else text
    key, sep, value = body.partition("=")
    if not sep or not key or " " in key.strip():
        raise UsageError(f"override {safeio.shown(text)}: expected KEY=VALUE, e.g. model.tensor_model_parallel_size=4")
    value = value.lstrip(" \t")
    if value[:1] in ("'", '"') and _BLANKS_AFTER_QUOTE.search(value):  # (fuzzQ Q6: Hydra's lexer refuses them)
        raise UsageError(f"override {safeio.shown(text)}: blanks after a quoted value are refused by Hydra's override "
                         "grammar (Bridge refuses the override): drop them")
    return key.strip(), _trailing_dropped(value).strip("\r\n\f\v")


_BLANKS_AFTER_QUOTE = re.compile(r"['\"][ \t]+\Z")


def hydra_value(key: str, text: str) -> Any:
    """A command-line value as Hydra types it for Bridge: null, a number or a bool, a quoted text, a list of such
    (one level), or an unquoted text with its escapes undone; refused in one line where Hydra's grammar refuses it."""
    plain = text.strip()
    if plain[:1] in ("'", '"'):
        if not (len(plain) >= 2 and plain[-1] == plain[0] and _one_quoted(plain)):
            raise UsageError(f"{key}: {safeio.shown(plain)} is not one quoted value to Hydra (Bridge refuses the override)")
        return safeio.hydra_unquoted(plain)
    if plain[:1] == "[":
        inner = plain[1:-1] if plain.endswith("]") else None
        if inner is None or "[" in inner or "]" in inner:
            raise UsageError(f"{key}: {safeio.shown(plain)} is not a list Hydra's grammar takes (one level, [a,b]): Bridge "
                             "refuses the override")
        return [hydra_value(key, item) for item in inner.split(",")] if inner.strip() else []
    if not plain:
        raise UsageError(f"{key}: an empty item is not a value Hydra takes (Bridge refuses the override)")
    if plain.lower() == "null":  # (Hydra's only null: ~ and none are not)
        return None
    if plain.lower() in ("true", "false"):
        return plain.lower() == "true"
    if safeio.HYDRA_INT.match(plain) or safeio.HYDRA_FLOAT.match(plain):
        return hydra_number(plain)
    if safeio.HYDRA_NOT_FINITE.match(plain):  # (recheck57 AD3: nan and inf are Hydra's floats)
        return float(plain)
    return _hydra_text(key, plain)


def hydra_number(text: str):
    """A number Hydra reads, as its int or float."""
    return int(text.replace("_", "")) if safeio.HYDRA_INT.match(text) else float(text.replace("_", ""))


_HYDRA_DIGITS = 4300  # sys.get_int_max_str_digits()'s default, which Hydra's int() of a token meets


def command_line_value(key: str, text: str) -> str:
    """A command-line value as Hydra and OmegaConf leave it for Bridge, or refused in one line: a number past Hydra's
    digit limit, and for any key but a launch variable's (env_value reads those) a sweep, a function call, an
    interpolation or a malformed list or quote (fuzzR R7: model.cp_comm_type=p2p,a2a and model.fp8_recipe=${x} were
    answered; Bridge's parse_hydra_overrides refuses the first, OmegaConf resolves the second where Bridge runs)."""
    if not isinstance(text, str):
        return text
    digits = text.strip().lstrip("+-").replace("_", "")
    if len(digits) > _HYDRA_DIGITS and safeio.HYDRA_INT.match(text.strip()):  # (recheck55 AB9)
        raise UsageError(f"{key}: a number of {len(digits):,} digits, which Hydra refuses past {_HYDRA_DIGITS:,} (Python's "
                         "integer conversion limit): Bridge's overrides refuse it")
    if key.startswith("env_vars."):
        return text
    if live_interpolation(text):
        raise UsageError(f"{key}: {safeio.shown(text)} holds an OmegaConf interpolation, which Bridge resolves where it "
                         "runs and this skill does not: give the value itself")
    plain = text.strip()
    if plain[:1] in ("'", '"', "["):
        hydra_value(key, plain)  # refused where Hydra's grammar refuses it (fuzzS S2-2: '[p2p,a2a' was answered)
        return text
    if plain[:1] == "{":
        return text
    if _HYDRA_FUNCTION.match(plain):
        raise UsageError(f"{key}: {safeio.shown(plain)} is a Hydra function call, which Bridge evaluates and this skill "
                         "does not: give the value itself")
    if "," in _HYDRA_ESC.sub("", plain):
        raise UsageError(f"{key}: {safeio.shown(plain)} is a sweep to Hydra, which Bridge's overrides refuse; a list is "
                         "written [a,b], a text with a comma quoted")
    return text


# trailing blanks Hydra drops: not an escaped one (`Ring\\ ` is "Ring ": fuzzQ Q3)
_BLANKS_AT_END = re.compile(r"[ \t]+\Z")


def _trailing_dropped(text: str) -> str:
    """Hydra's trailing blanks dropped: not an escaped one (`Ring\\ ` is "Ring ": fuzzQ Q3), which an odd run of
    backslashes makes, nor those after an unescaped colon, which its lexer keeps (VALUE_COLON: WS? ':' WS?;
    recheck55 AB2)."""
    m = _BLANKS_AT_END.search(text)
    if m is None:
        return text
    head = text[:m.start()]
    if _backslashes_before(head, len(head)) % 2:
        return head + m[0][0]
    if head.endswith(":") and _backslashes_before(head, len(head) - 1) % 2 == 0:
        return text
    return head


def _backslashes_before(text: str, end: int) -> int:
    return end - len(text[:end].rstrip("\\"))


def convert(key: str, spec: schema.Field, value: Any, release: Release) -> Any:
    """Type a value for a field, from Python or from its command-line string."""
    if isinstance(value, CustomUbCfg):
        return value  # a run config's own userbuffers config, read already
    raw = value
    _not_blank(key, value)
    if isinstance(value, str):
        text = _unquoted(value.strip())
        if text != value.strip() and spec.kind in (BOOL, OPT_BOOL, INT, OPT_INT):  # ('null' quoted too: AD2)
            # (fuzzS S2-3: 'false' quoted is the text "false" to Hydra, which Python reads as true)
            raise UsageError(f"{key}: {safeio.shown(value.strip())} is quoted, so text to Hydra where Bridge's field holds "
                             f"{'an integer' if spec.kind in (INT, OPT_INT) else 'true or false'}: write it without quotes")
        if spec.kind == STR_LIST and text.startswith("[") and text.endswith("]"):
            value = [item.strip().strip("'\"") for item in text[1:-1].split(",") if item.strip()]
        elif spec.kind in (CHOICE, OPT_CHOICE) and text in spec.choices:
            value = text  # a choice spelled like a null ("none" for cuda_graph_impl)
        elif text.lower() in _NULLS:
            value = None
        elif spec.kind in (BOOL, OPT_BOOL):
            if text.lower() not in ("true", "false"):
                raise UsageError(f"{key}: expected true or false, got {safeio.shown(raw)}")
            value = text.lower() == "true"
        elif spec.kind in (INT, OPT_INT):
            if not _INT.match(text):
                raise UsageError(f"{key}: expected an integer, got {safeio.shown(raw)}")
            value = int(text)
        else:
            value = text
    if value is None:
        if spec.kind in (OPT_INT, OPT_BOOL, OPT_CHOICE, PRESET, OPT_PATH, STR_LIST):
            return None
        raise UsageError(f"{key}: cannot be null")
    if spec.kind in (BOOL, OPT_BOOL) and not isinstance(value, bool):
        raise UsageError(f"{key}: expected true or false, got {safeio.shown(raw)}")
    if spec.kind in (INT, OPT_INT):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{key}: expected an integer, got {safeio.shown(raw)}")
        if spec.minimum is not None and value < spec.minimum:
            kind = "a positive integer" if spec.minimum == 1 else f"an integer >= {spec.minimum}"
            raise UsageError(f"{key}: must be {kind}, got {value}")
    if spec.kind in (CHOICE, OPT_CHOICE) and value not in spec.choices:
        raise UsageError(f"{key}: expected one of {', '.join(spec.choices)}, got {safeio.shown(raw)}")
    if spec.kind == STR_LIST:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{key}: expected a list of names, e.g. [attn,mlp]")
    if spec.kind == OPT_PATH and not isinstance(value, str):
        raise UsageError(f"{key}: expected a path or null, got {safeio.shown(raw)}")
    if spec.kind == PRESET:
        if not isinstance(value, str):
            raise UsageError(f"{key}: expected a preset name, got {safeio.shown(raw)}")
        if value != CUSTOM_UB_CFG:
            release.preset(value)
    return value


def _set_plain(req: Request, key: str, name: str, value: Any) -> None:
    section = key.partition(".")[0]
    fields = schema.SECTIONS[section]
    if name not in fields or fields[name].since and name not in bridge_fields(req.release.version).get(section, ()):
        _unmodeled_or_unknown(req, key, section, name, {k: f for k, f in fields.items() if k != name}, value)
        return
    typed = convert(key, fields[name], value, req.release)
    getattr(req, section)[name] = typed
    req.explicit[key] = typed


_COMM_OVERLAP_TARGET = "megatron.bridge.training.comm_overlap.CommOverlapConfig"
_SCALAR_END = re.compile(r"[,}\]]")
_BRACE_DEPTH = 4  # comm_overlap > tp_comm_overlap_cfg > a GEMM's config > a list: as plan --format hydra nests them


def _brace_fields(value: Any) -> list[tuple[str, Any]] | None:
    """The KEY:VALUE pairs of a Hydra brace value as plan --format hydra writes comm_overlap ({_target_:...,k:v}, a
    preset's fields nested as {...} and [...]); a top-level value stays text, a nested one is typed. None where the
    value is not one (fuzzH H8, recheck N2: the tool's own hydra lines were refused)."""
    text = value.strip() if isinstance(value, str) else ""
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        pairs, end = _brace_pairs(text, 1, 1)
    except (IndexError, ValueError):
        pairs, end = None, -1
    if pairs is None or end != len(text):
        raise UsageError(f"comm_overlap={safeio.shown(text)}: expected {{KEY:VALUE,...}} as plan --format hydra writes it")
    return pairs


def _brace_pairs(text: str, i: int, depth: int) -> tuple[list | None, int]:
    """KEY:VALUE pairs from text[i] (after a '{') to the matching '}'; (pairs, the index after it)."""
    pairs = []
    while text[i] != "}":
        colon = text.index(":", i)
        name = text[i:colon].strip()
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            return None, -1
        value, i = _brace_value(text, colon + 1, depth)
        pairs.append((name, value))
        if text[i] == ",":
            i += 1
        elif text[i] != "}":
            return None, -1
    return pairs, i + 1


def _brace_value(text: str, i: int, depth: int) -> tuple[Any, int]:
    while text[i] == " ":
        i += 1
    if text[i] in "{[":
        if depth >= _BRACE_DEPTH:
            raise ValueError("nested too deep")
        if text[i] == "{":
            pairs, end = _brace_pairs(text, i + 1, depth + 1)
            if pairs is None:
                raise ValueError("not KEY:VALUE pairs")
            return dict(pairs), end
        items, i = [], i + 1
        while text[i] != "]":
            item, i = _brace_value(text, i, depth + 1)
            items.append(item)
            if text[i] == ",":
                i += 1
            elif text[i] != "]":  # an item must end at "," or "]" (fuzzK K1: "[}" looped on the "}" for ever)
                raise ValueError("a list item not followed by ',' or ']'")
        return items, i + 1
    found = _SCALAR_END.search(text, i)  # the nearest, so a long line is read once (three finds would rescan it)
    end = found.start() if found else len(text)
    raw = text[i:end].strip()
    return (raw if depth == 1 else _typed(raw)), end


def _not_blank(key: str, value: Any) -> None:
    """An empty value is a mistake, never "unset" (fuzzH H9: '' became [''] or null for some kinds), quoted or not
    (fuzzI I4: "" and '' passed)."""
    if isinstance(value, str) and not _unquoted(value.strip()).strip():
        raise UsageError(f"{key}: an empty value; write null to unset it")


def _unquoted(text: str) -> str:
    """The text inside one matching pair of quotes around it (an unmatched quote stays: Hydra refuses it)."""
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def _one_quoted(text: str) -> bool:
    """Whether the quoted text is one QUOTED_VALUE to Hydra's lexer: its first quote after the opening one that an
    even run of backslashes precedes is the closing one."""
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == text[0]:
            return i == len(text) - 1
        else:
            i += 1
    return False


def _typed(raw: str) -> Any:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in _NULLS:
        return None
    return int(raw) if _INT.match(raw) else raw


def _set_comm_overlap(req: Request, key: str, name: str, value: Any) -> None:
    if not name:
        if is_null(value):
            req.comm_overlap = None
            req.explicit["comm_overlap"] = None
            return
        pairs = _brace_fields(value)
        if pairs is None:
            raise UsageError("comm_overlap: only comm_overlap=null or {KEY:VALUE,...} can be set as a whole; set its fields instead")
        for field_name, text in pairs:
            if field_name != "_target_":  # the section's origin is its fields' (evalW W2-7: "set by the default")
                req.origin[f"comm_overlap.{field_name}"] = req.origin.get("comm_overlap", "override")
            if field_name == "_target_":
                if text != _COMM_OVERLAP_TARGET:
                    raise UsageError(f"comm_overlap._target_: expected {_COMM_OVERLAP_TARGET}, got {safeio.shown(text)}")
            elif isinstance(text, dict) and field_name == "tp_comm_overlap_cfg":  # a preset's fields: its name
                _set_comm_overlap(req, f"comm_overlap.{field_name}", field_name, preset_name_of(text, req.release))
            elif isinstance(text, (dict, list)):
                raise UsageError(f"comm_overlap.{field_name}: expected a value, not a {{...}} or [...]")
            else:
                _set_comm_overlap(req, f"comm_overlap.{field_name}", field_name, text)
        return
    if name.lower() in schema.LAUNCH_ENV_NAMES or name.upper() in _env_names():
        req.launch_env_fields.append((key, value))
        return
    if name in schema.COMM_OVERLAP_COMPUTED:
        return  # set by Bridge from the world size; a dumped run config carries it
    if name not in schema.COMM_OVERLAP:
        _unmodeled_or_unknown(req, key, "comm_overlap", name, schema.COMM_OVERLAP, value)
        return
    typed = convert(key, schema.COMM_OVERLAP[name], value, req.release)
    if typed == CUSTOM_UB_CFG and name == "tp_comm_overlap_cfg" and key not in req.unmodeled:
        req.unmodeled.append(key)  # its SM counts and methods are not modelled: the answer says so
    if req.comm_overlap is None:
        req.comm_overlap = {k: f.default for k, f in schema.COMM_OVERLAP.items()}
    req.comm_overlap[name] = typed
    req.explicit[key] = typed


def _set_mixed_precision(req: Request, key: str, name: str, value: Any) -> None:
    if not name:
        if is_null(value):
            req.mixed_precision = None
        elif isinstance(value, str):
            req.release.mixed_precision(value.strip())  # validates the name
            req.mixed_precision = MixedPrecision(value.strip().replace("-", "_"))
        else:
            raise UsageError(f"mixed_precision: expected a recipe name or null, got {safeio.shown(value)}")
        req.explicit["mixed_precision"] = req.mixed_precision.recipe if req.mixed_precision else None
        return
    if name not in schema.MIXED_PRECISION:
        _unmodeled_or_unknown(req, key, "mixed_precision", name, schema.MIXED_PRECISION, value)
        return
    typed = convert(key, schema.MIXED_PRECISION[name], value, req.release)
    if req.mixed_precision is None:
        raise UsageError(f"{key}: mixed_precision is null; set mixed_precision=RECIPE first")
    req.mixed_precision.fields[name] = typed
    req.explicit[key] = typed


def _set_env_var(req: Request, key: str, name: str, value: Any) -> None:
    if not req.release.env_vars:
        raise UsageError(
            f"{key}: ConfigContainer has no env_vars in Megatron-Bridge {req.release.version} "
            f"(added in 0.6.0); launch environment there is set by {req.release.launch_env_where}"
        )
    if not _ENV_NAME.match(name):
        raise UsageError(f"{key}: '{name}' is not an environment variable name")
    typed = req.origin.get(key) in ("config", "recipe")  # YAML typed it: "none" and a quoted 'true' are text (fuzzO F1)
    if isinstance(value, str) and "\x00" in value:  # (fuzzQ Q7)
        raise UsageError(f"{key}: the value holds a NUL byte, which the environment cannot hold (Bridge's os.environ "
                         "raises ValueError: embedded null byte)")
    req.env_vars[name] = env_value(key, value, typed)
    req.explicit[key] = req.env_vars[name]


def env_value(key: str, value: Any, typed: bool = False) -> Any:
    """Type an env_vars value as Hydra's override grammar would (null, in any case, is its only null: "none" and "~"
    are text), unless YAML already typed it (`typed`); Bridge stores str(value) in os.environ."""
    text = None
    if isinstance(value, str) and typed:
        return _interpolated(key, value)  # (OmegaConf resolves a config file's too: recheck54 Y3)
    if isinstance(value, str) and _unquoted(value.strip()) != value.strip():
        if not _one_quoted(value.strip()):  # (fuzzQ Q6: """ and 'a\' were read as text; Hydra's lexer refuses them)
            raise UsageError(f"{key}: {safeio.shown(value.strip())} is not one quoted value to Hydra (a quote inside it "
                             "ends it: Bridge refuses the override); escape the quote with a backslash")
        return _interpolated(key, safeio.hydra_unquoted(value.strip()))  # quoted: text, as Hydra reads it
    if isinstance(value, str):
        text = _trailing_dropped(value.strip("\r\n\f\v").lstrip(" \t"))
        if text.lower() == "null":
            value = None
        elif text.lower() in ("true", "false"):
            return text.lower() == "true"
        elif text[:1] in ("[", "{") or "," in _HYDRA_ESC.sub("", text):  # (recheck52 W5: a list, a mapping, a sweep)
            raise UsageError(f"{key}: {safeio.shown(text)} is a list, a mapping or a sweep to Hydra, which Bridge "
                             "refuses (environment values must be scalars); quote it to give the text")
        elif safeio.HYDRA_INT.match(text):  # (010 is text to Hydra, 1_000 the number 1000)
            digits = text.replace("_", "").lstrip("+")
            return int(digits) if len(digits) <= 18 else digits  # (past 18 digits no count: its text, as Bridge exports it)
        elif safeio.HYDRA_FLOAT.match(text):
            value = float(text.replace("_", ""))
        elif safeio.HYDRA_NOT_FINITE.match(text):
            value = float(text)  # ("NaN" goes as nan, below)
        else:
            return _hydra_text(key, text)
    if value is None or not isinstance(value, (str, int, float, bool)):
        raise UsageError(f"{key}: environment values must be scalars (Bridge raises TypeError otherwise)")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # what Bridge exports: str() of it (a config's .inf, 1e999; fuzzQ Q8)
    return value


def _hydra_text(key: str, text: str) -> str:
    """An unquoted value's text as Hydra reads it (escapes undone: a\\ b is "a b"), or refused as Hydra's lexer
    refuses it (~, a=b, a quote inside, a non-ASCII letter: Bridge's parse_hydra_overrides raises)."""
    if _HYDRA_FUNCTION.match(text):  # (fuzzP P2: taken as their text)
        raise UsageError(f"{key}: {safeio.shown(text)} is a Hydra function call, which Bridge evaluates before it "
                         "exports the value and this skill does not: give the value itself")
    if not _HYDRA_UNQUOTED.match(text):
        raise UsageError(f"{key}: {safeio.shown(text)} is not a value Hydra's override grammar takes unquoted (Bridge "
                         "refuses the override); quote it to give the text")
    return _interpolated(key, _HYDRA_ESC.sub(lambda m: m[0][1], text))


# a ${ after a run of backslashes: OmegaConf reads each \\ before it as one backslash, and a ${ after an odd run as
# the literal ${ (recheck55 AB1: \\${x} is a backslash and a live interpolation)
_INTERPOLATION = re.compile(r"(?<!\\)((?:\\\\)*)(\\?)\$\{")


def live_interpolation(text: str) -> bool:
    return any(not m[2] for m in _INTERPOLATION.finditer(text))


def _interpolated(key: str, text: str) -> str:
    """A launch variable's text as OmegaConf leaves it (Bridge resolves the config with to_container(resolve=True)):
    an escaped \\${ is a literal ${; an interpolation is refused, for it is resolved where Bridge runs (fuzzP P2,
    recheck54 Y3: a quoted one, or a config file's, was taken as its text)."""
    if live_interpolation(text):
        raise UsageError(f"{key}: {safeio.shown(text)} holds an OmegaConf interpolation, which Bridge resolves where it "
                         "runs and this skill does not: give the value itself (\\${ for a literal ${)")
    return _INTERPOLATION.sub(lambda m: "\\" * (len(m[1]) // 2) + "${", text)


_SETTERS = {
    "model": _set_plain,
    "ddp": _set_plain,
    "optimizer": _set_plain,
    "dist": _set_plain,
    "checkpoint": _set_plain,
    "train": _set_plain,
    "validation": _set_plain,
    "rerun_state_machine": _set_plain,
    "dataset": _set_plain,
    "comm_overlap": _set_comm_overlap,
    "mixed_precision": _set_mixed_precision,
    "env_vars": _set_env_var,
}


def _as_yaml_typed(key: str, value: Any) -> None:
    """A config file's value is what YAML makes of it: quoted digits or true/false are text, which Bridge's loader
    (instantiate) hands to the dataclass as they are, not an integer or a bool; refused for every such field alike
    (fuzzF F16). A command line's KEY=VALUE is text and is converted."""
    if not isinstance(value, str) or is_null(value):
        return
    if live_interpolation(value) and not key.startswith("env_vars."):  # (recheck55 AB10; env_value names env_vars')
        raise UsageError(f"{key}: the file holds the OmegaConf interpolation {safeio.shown(value)}, which Bridge resolves "
                         "when it loads the config and this skill does not: write the value itself")
    section, _, name = key.partition(".")
    fields = {**schema.SECTIONS, "comm_overlap": schema.COMM_OVERLAP, "mixed_precision": schema.MIXED_PRECISION}
    spec = (fields.get(section) or {}).get(name)
    if spec is not None and spec.kind in (INT, OPT_INT, BOOL, OPT_BOOL):
        raise quoted_in_file(key, value, "an integer" if spec.kind in (INT, OPT_INT) else "true or false")


def quoted_in_file(key: str, value: Any, want: str) -> UsageError:
    """The one line for a file's text where Bridge's config holds a number or a bool (_as_yaml_typed, and the shape
    keys only the budget reads: budget.shape.in_config)."""
    plain = isinstance(value, str) and _YAML_TEXT_NUMBER.fullmatch(value.strip())  # unquoted, yet text to YAML 1.1
    if isinstance(value, str) and live_interpolation(value):  # (fuzzQ Q5: "without quotes" said of none)
        return UsageError(f"{key}: the file holds the OmegaConf interpolation {safeio.shown(value)}, which Bridge "
                          f"resolves when it loads the config and this skill does not: write {want} itself")
    return UsageError(f"{key}: the file holds the text {safeio.shown(value)} where Bridge's config holds {want}: "
                      + ("write it in plain digits (YAML reads this form as text)" if plain else "write it without quotes"))


# numbers that PyYAML (YAML 1.1) reads as text even unquoted: an exponent without a dot, NaN, infinity, 0o octal
_YAML_TEXT_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)[eE][+-]?\d+|[+-]?\.?(?:nan|inf|infinity)|0o[0-7]+", re.I)


def is_null(value: Any) -> bool:
    """Null as the request reads it: None, or the text null, none or ~."""
    return value is None or (isinstance(value, str) and value.strip().lower() in _NULLS)


def _env_names() -> set:
    return set(schema.LAUNCH_ENV_NAMES.values())


def _unmodeled_or_unknown(req: Request, key: str, section: str, name: str, modeled: Mapping, value: Any = None) -> None:
    known = bridge_fields(req.release.version).get(section, ())
    if name in known:
        if req.origin.get(key) != "config":
            _not_blank(key, value)
        if not (req.origin.get(key) == "config" and name in schema.CONTEXT.get(section, ())
                or section == "model" and name in schema.PIPELINE_LAYOUT):
            req.unmodeled.append(key)  # (a config's own value of a field a rule reads is no request to flag, nor a
            # pipeline layout's field: the resolver checks it as Megatron-Core does, the budget costs its largest stage)
        req.context[key] = value  # as given (not typed): read only where a rule or the budget names it
        return
    hint = closest(name, list(modeled) + list(known))
    raise UsageError(  # a look-alike letter would read as the suggestion itself (fuzzH H11): shown escaped, and said
        f"{safeio.shown(key)}: {safeio.shown(name)} is not a field of {section} in Megatron-Bridge {req.release.version}"
        + ("" if key.isascii() else " (it holds non-ASCII characters)")
        + (f"; did you mean '{section}.{hint}'?" if hint else "")
    )


def build(release: Release, overrides: Mapping[str, Any] | None = None, config: Mapping | None = None, strict: bool = True,
          base: dict | None = None, written=frozenset()) -> Request:
    """The request: Bridge's baseline (or the recipe catalog entry `base`), then the config file's values, then the
    overrides, in that order.

    strict=False (a saved run config, maybe of another release) skips config sections and fields this release does
    not have instead of failing; they are listed in `request.skipped`. `written`: keys of the config that hold what
    Bridge wrote (a saved run config's outputs), taken as values but not as requests."""
    req = Request.from_recipe(release, catalog.require_built(base)) if base is not None else Request.baseline(release)
    items, req.skipped = flatten_config(config or {}, release, strict)
    for key, value in items:
        _as_yaml_typed(key, value)
        req.set(key, value, "config")
    if config and base is None and req.origin.get("dataset.seq_length") != "config":
        for key in schema.BASELINE_CONTEXT:  # a config that holds no dataset (Bridge's summary prints none): not the baseline's
            req.context.pop(key, None)
    for key in written:
        req.explicit.pop(key, None)
        req.origin.pop(key, None)
    for key, value in (overrides or {}).items():
        req.set(key, value)
    return req


def flatten_config(config: Mapping, release: Release, strict: bool = True) -> tuple[list, list]:
    """Dotted (key, value) pairs from a ConfigContainer-shaped mapping, `_target_` keys dropped, and the keys
    skipped because this release has no such section or field (strict: a UsageError instead).

    Only the sections the resolver models are read; a dumped run config carries every field of every section."""
    if not isinstance(config, Mapping):
        raise UsageError("config: expected a mapping of sections (model:, ddp:, ...) at the top level")
    items, skipped = [], []
    known = bridge_fields(release.version)
    for section, body in config.items():
        if section == "_target_":
            continue
        if section not in _SETTERS:
            if section not in known:
                _unknown(f"{section}", strict, skipped, list(_SETTERS) + list(known))
            elif isinstance(body, Mapping) and known[section]:
                for name in body:
                    if name != "_target_" and name not in known[section]:
                        _unknown(f"{section}.{name}", strict, skipped, list(known[section]))
            continue  # a real section that takes no part in overlap selection
        if section == "mixed_precision" and isinstance(body, Mapping):
            for name in body:  # fuzzQ Q9: a field MixedPrecisionConfig lacks was taken silently
                if name != "_target_" and name not in known.get(section, ()) and name not in schema.MIXED_PRECISION:
                    _unknown(f"{section}.{name}", strict, skipped, list(schema.MIXED_PRECISION) + list(known.get(section, ())))
            items += _flatten_mixed_precision(body)
        elif section == "env_vars" and isinstance(body, Mapping):
            items += [(f"env_vars.{k}", v) for k, v in body.items()]
        elif isinstance(body, Mapping):
            items += _flatten_section(section, body, release, strict, skipped)
        elif section in ("comm_overlap", "mixed_precision") or body is not None:
            items.append((section, body))
    return items, skipped


def _unknown(key: str, strict: bool, skipped: list, choices) -> None:
    """A key this release's config does not have: refused (strict), else skipped and noted (a saved run config of
    another release). No release has a field whose name is not ASCII: such a key is a lookalike, refused (fuzzG G5)."""
    if strict or not key.isascii():
        section, _, name = key.partition(".")
        hint = closest(name or section, choices)
        shown = safeio.esc(key.encode("ascii", "backslashreplace").decode("ascii"))
        raise UsageError(f"config: '{shown}' is not in Megatron-Bridge's config"
                         + ("" if key.isascii() else " (it holds non-ASCII characters)")
                         + (f"; did you mean '{hint}'?" if hint else ""))
    skipped.append(key)


def _flatten_section(section: str, body: Mapping, release: Release, strict: bool, skipped: list) -> list:
    modeled = {**schema.SECTIONS, "comm_overlap": schema.COMM_OVERLAP}[section]
    extra = set(schema.COMM_OVERLAP_COMPUTED) if section == "comm_overlap" else set()
    known = bridge_fields(release.version).get(section, frozenset())
    out = []
    for name, value in body.items():
        if name == "_target_":
            continue
        if name not in modeled and name not in extra:
            if name not in known and name.lower() not in schema.LAUNCH_ENV_NAMES:
                _unknown(f"{section}.{name}", strict, skipped, list(modeled) + list(known))
                continue
            if name in schema.CONTEXT.get(section, ()):
                out.append((f"{section}.{name}", value))  # read where a rule names it (the layer split, CP, sequence length)
                continue
            if name.lower() not in schema.LAUNCH_ENV_NAMES:
                continue  # a real field that takes no part in overlap selection
        if section == "comm_overlap" and name == "tp_comm_overlap_cfg" and isinstance(value, Mapping):
            value = preset_name_of(value, release)
        out.append((f"{section}.{name}", value))
    return out


def _flatten_mixed_precision(body: Mapping) -> list:
    """A dumped MixedPrecisionConfig: the bf16 or fp16 base recipe with every modeled field as saved."""
    out = [("mixed_precision", "bf16_mixed" if body.get("bf16", True) else "fp16_mixed")]
    return out + [(f"mixed_precision.{name}", body[name]) for name in schema.MIXED_PRECISION if name in body]


# A saved run config's tp_comm_overlap_cfg that is none of the presets (a tuned SM count, a release's new field): Bridge
# runs it as it is; the answer stands for it with this name and says it does not model its fields (UNMODELED_OVERLAP_KEY)
CUSTOM_UB_CFG = "custom"


class CustomUbCfg(str):
    """CUSTOM_UB_CFG with the config's own per-GEMM fields (the budget prices its methods and SM counts)."""

    fields: dict

    def __new__(cls, fields: dict):
        out = super().__new__(cls, CUSTOM_UB_CFG)
        out.fields = fields
        return out

    def __reduce__(self):
        return CustomUbCfg, (self.fields,)


def preset_name_of(value: Mapping, release: Release) -> str:
    """The preset whose fields a dumped tp_comm_overlap_cfg mapping holds, else CUSTOM_UB_CFG with the fields."""
    strip = lambda d: {k: strip(v) if isinstance(v, Mapping) else v for k, v in d.items() if k != "_target_"}  # noqa: E731
    wanted = strip(value)
    for name, fields in preset_content().items():
        if strip(fields) == wanted:
            return name
    return CustomUbCfg({k: v for k, v in wanted.items() if isinstance(v, dict)})


def read_config_file(path: str | Path, label: str = "--config") -> dict:
    """A YAML file in the shape of Bridge's dumped ConfigContainer (run_config.yaml) or an override file."""
    return safeio.load_config(path, label)
