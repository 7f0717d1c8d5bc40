"""A requested config: Bridge's baseline, a ConfigContainer-shaped YAML file, then dotted overrides.

Overrides use the syntax of Bridge's own scripts (`section.field=value`, Hydra style). Values are typed by
the field they set; anything else is a UsageError that names the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from ..upstream import catalog
from .. import safeio
from . import hydra, schema
from ..errors import UsageError
from dataclasses import dataclass, field
from ..upstream.releases import (Release, bridge_fields, dataset_class, dataset_properties, dataset_seq_length_key,
                                 finetuning_dataset, model_provider, provider_seq_length,
                                 preset_content)
from .schema import BOOL, CHOICE, INT, OPT_BOOL, OPT_CHOICE, OPT_INT, OPT_PATH, PRESET, STR_LIST
from ..suggest import closest

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs a cold start about 2 ms
    from typing import Any

_NULLS = {"null", "none", "~"}
_INT = re.compile(r"^[+-]?[0-9]{1,%d}\Z" % safeio.MAX_INT_CHARS)  # ASCII digits: int() also takes "８" and "1_0"
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

# Why a section's key is not in Bridge's struct config before a bare word on it (Request.judge)
_WHOSE = {"model": "a model the config file's model._target_ builds holds only the file's keys",
          "comm_overlap": "a comm_overlap section the config file makes holds only its keys",
          "env_vars": "env_vars holds only the names the start config (the recipe's cfg.env_vars; Bridge's baseline has "
                      "none) and the config file set"}


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
    model_target: str | None = None  # a config's model._target_ (its provider class), where no recipe names one
    model_target_of: str = "the config"  # whose provider class model_target is
    model_seq_length_of: str | None = None  # the provider class whose default model.seq_length is (a config's _target_)
    dataset_target: str | None = None  # a config's dataset._target_ (its dataset config class)
    # the config file sets dataset.seq_length where it is a property over sequence_length (0.5.x's GPTDatasetConfig):
    # its key is then in Bridge's merged dict, so Hydra takes dataset.seq_length=, and apply_overrides writes it after
    # the dict's sequence_length (the base's key, ahead of the file's), so it wins over any sequence_length (evalAE AE2-1)
    dataset_seq_property: bool = False
    # the keys Bridge's merged config holds in the sections whose keys are a config file's own (held): a model that the
    # file's model._target_ builds (no recipe: the baseline's model is None), a comm_overlap section the file makes
    held_keys: set = field(default_factory=set)
    held_sections: frozenset = frozenset()  # which of model and comm_overlap hold only the file's keys
    file_keys: frozenset = frozenset()  # those the file holds (held_keys adds the + and ++ words' keys after them)

    def dataset_seq_word(self) -> str:
        """The override that sets the dataset length validate() compares, as this request's Bridge command line takes it."""
        return "dataset.seq_length" if self.dataset_seq_property else dataset_seq_length_key(
            self.release.version, self.recipe, self.dataset_target)

    def needs_append(self, key: str) -> bool:
        """Whether Bridge's command line takes `key` only as ++KEY=VALUE (evalAE AE2-2): a model built from a config
        file's model._target_ (no recipe) is in Bridge's struct config with the file's keys only, so Hydra refuses
        model.KEY=VALUE for a key the file does not hold (OverridesError: Could not override); so is a comm_overlap
        section only the file makes (tests/bridge/test_hydra_prefix.py). The file's keys, not the words': a plan's
        or a restore's words stand for the whole command line, the user's + and ++ words among them."""
        return key.partition(".")[0] in self.held_sections and key not in self.file_keys

    def held(self, key: str) -> bool | None:
        """Whether Bridge's config holds `key` where its command line meets it (process_config_with_overrides: the
        start config as a dict, the file merged, then Hydra's words in struct mode): in a section holding only a
        config file's keys, whether the file (or a + / ++ word before) holds it; env_vars, a dict, holds the start
        config's names (a recipe's cfg.env_vars; _pretrain_common's is empty), the file's and those of a + / ++ word
        before; elsewhere every field is held (a start config's dataclass); None for comm_overlap where no section
        is made (the note of scenario's _section_made says how Bridge takes those), and for env_vars in a release
        whose ConfigContainer has none (_set_env_var says so)."""
        section, dot, name = key.partition(".")
        if not dot:  # a section's own key: a ConfigContainer field, in the config whatever its value (fuzzA2)
            return True
        if section in self.held_sections:
            return key in self.held_keys
        if section == "env_vars":
            return name in self.env_vars if self.release.env_vars else None
        if section == "comm_overlap" and self.comm_overlap is None:
            return None
        return True

    def judge(self, key: str, value: Any) -> None:
        """A command-line word (a hydra.Key with its prefix) refused where Bridge's Hydra overrides refuse it
        (hydra's ConfigLoaderImpl._apply_overrides_to_config, in struct mode): a bare KEY=VALUE on a key the config
        does not hold (Could not override), +KEY=VALUE on one it holds with a value other than null (Could not
        append; a list or a mapping is merged); ++KEY=VALUE always taken. A plain key (the API's, a fix's) sets
        the field as asked."""
        prefix, name = hydra.prefixed(key)
        if not isinstance(key, hydra.Key) and not prefix:
            return
        if isinstance(key, hydra.Key) and key.value is not None:
            value = key.value  # (the first word on the key, as written: a later word's value replaced it)
        held = self.held(name)
        word = f"{prefix}{name}={value}"
        if prefix == "" and held is False:
            raise UsageError(f"{safeio.shown(word)}: Bridge's Hydra overrides refuse it (Could not override "
                             f"'{safeio.esc(name)}'. To append to your config use +{safeio.esc(word)}): "
                             f"{_WHOSE[name.partition('.')[0]]}; write ++{safeio.esc(word)}")
        if prefix == "+" and held and not hydra.merged(value) and self._current(name) is not None:
            raise hydra.append_refused(word, name)
        if prefix and held is False:
            self.held_keys.add(name)

    def _current(self, key: str) -> Any:
        """The value the config holds at `key` before the word, where this request knows it (None: null or unknown)."""
        section, dot, name = key.partition(".")
        if not dot:  # the section itself (fuzzA2: +comm_overlap=null over a section there was taken)
            return self.comm_overlap if section == "comm_overlap" else getattr(self, section, None)
        if section == "dataset" and key == dataset_seq_length_key(self.release.version, self.recipe, self.dataset_target):
            key, name = "dataset.seq_length", "seq_length"  # (0.5.x: sequence_length is the field, kept as seq_length)
        body = self.comm_overlap if section == "comm_overlap" else getattr(self, section, None)
        if isinstance(body, dict) and name in body:
            return body[name]
        return self.context.get(key)

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
                self.unmodeled += [key] if key not in self.unmodeled else []
                self.context[key] = value  # as given (not typed): read only where a rule names it (peft's regather)
                return
            hint = closest(section, list(_SETTERS) + list(bridge_fields(self.release.version)))
            raise UsageError(f"{key}: unknown config section '{section}'" + (f"; did you mean '{hint}'?" if hint else ""))
        if not name and section not in ("comm_overlap", "mixed_precision"):  # recheck N6: a section as a whole
            raise UsageError(f"{safeio.shown(key)}: name a field, {section}.FIELD=VALUE (a section is not set as a whole)")
        setter(self, key, name, value)


def convert(key: str, spec: schema.Field, value: Any, release: Release, command_line: bool = False) -> Any:
    """Type a value for a field, from Python or from its string (`command_line`: a KEY=VALUE word's, which Hydra reads
    for Bridge: a path's or a list's escapes and quotes undone, fuzzT T3-2)."""
    if isinstance(value, CustomUbCfg):
        return value  # a run config's own userbuffers config, read already
    raw = value
    _not_blank(key, value)
    if isinstance(value, str) and command_line and spec.kind in (OPT_PATH, STR_LIST):
        value = _hydra_text_or_list(key, spec, value)  # typed: no null or list is read into its text below
    elif isinstance(value, str):
        text = hydra.unquoted(value.strip())
        if text != value.strip() and spec.kind in (BOOL, OPT_BOOL, INT, OPT_INT):  # ('null' quoted too: AD2)
            # (fuzzS S2-3: 'false' quoted is the text "false" to Hydra, which Python reads as true)
            raise UsageError(f"{key}: {safeio.shown(value.strip())} is quoted, so text to Hydra where Bridge's field holds "
                             f"{'an integer' if spec.kind in (INT, OPT_INT) else 'true or false'}: write it without quotes")
        if spec.kind == STR_LIST and text.startswith("[") and text.endswith("]"):
            value = [item.strip().strip("'\"") for item in text[1:-1].split(",") if item.strip()]
        elif spec.kind in (CHOICE, OPT_CHOICE) and text in spec.choices:
            value = text  # a choice spelled like a null ("none" for cuda_graph_impl)
        elif command_line and text.lower() in _NULLS - {"null"} and text == value.strip():
            value = _hydra_null_spelling(key, spec, text)
        elif text.lower() in _NULLS:
            value = None
        elif spec.kind in (BOOL, OPT_BOOL):
            if text.lower() not in ("true", "false"):
                raise UsageError(f"{key}: expected true or false, got {safeio.shown(raw)}")
            value = text.lower() == "true"
        elif spec.kind in (INT, OPT_INT) and command_line:  # (recheck58 AE2: 08 is text to Hydra, 1_6 the number 16)
            if not (safeio.HYDRA_INT.match(text) and len(text) <= safeio.MAX_INT_CHARS):
                raise UsageError(f"{key}: expected an integer, got {safeio.shown(raw)}"
                                 + (" (text to Hydra, which Bridge's field refuses)" if _INT.match(text) else ""))
            value = hydra.number(text)
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
        if isinstance(value, str) and not spec.text:  # (set("mlp") is m, l, p to Megatron-Core's check)
            raise UsageError(f"{key}: {safeio.shown(value)} is one text to Bridge where Megatron-Core takes a list of "
                             f"names (it reads a text letter by letter): write [{safeio.esc(value)}]")
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


def _hydra_null_spelling(key: str, spec: schema.Field, text: str) -> str:
    """A command-line none or ~ as Hydra's override grammar reads it (stop 52's AD2 rest): null is its only null, so
    none is the text "none" (refused where Bridge's field holds a number or a bool) and ~ a word its lexer refuses
    (Bridge's parse_hydra_overrides raises)."""
    if text == "~":
        raise UsageError(f"{key}=~: Hydra's override grammar refuses '~' (Bridge's parse_hydra_overrides raises): "
                         "write null")
    if spec.kind in (BOOL, OPT_BOOL, INT, OPT_INT):
        raise UsageError(f"{key}: {safeio.shown(text)} is the text {safeio.shown(text)} to Hydra, not null, where "
                         f"Bridge's field holds {'an integer' if spec.kind in (INT, OPT_INT) else 'true or false'}: "
                         "write null")
    return text


def _hydra_text_or_list(key: str, spec: schema.Field, text: str) -> Any:
    """A path's or a list of names' command-line word as Hydra hands it to Bridge: a text, a list of texts or null;
    refused where Hydra gives another type (a number, a bool, a list for a path) or refuses the word."""
    value = hydra.value_of(key, text)
    items = value if isinstance(value, list) and spec.kind == STR_LIST else [value]
    if value is not None and not all(isinstance(v, str) for v in items):
        want = "a path" if spec.kind == OPT_PATH else "a list of names, e.g. [attn,mlp]"
        raise UsageError(f"{key}: Hydra reads {safeio.shown(text.strip())} as {_hydra_kind(value)}, where Bridge's field "
                         f"holds {want}" + (": quote it to give the text" if not isinstance(value, (list, dict)) else ""))
    return value


def _hydra_kind(value: Any) -> str:
    if isinstance(value, list):
        if any(isinstance(v, (list, dict)) for v in value):
            return "a list of lists or mappings"
        return "a list" if all(isinstance(v, str) for v in value) else "a list holding a number, bool or null"
    return {bool: "a bool", int: "a number", float: "a number", dict: "a mapping"}.get(type(value), "a value")


def _set_plain(req: Request, key: str, name: str, value: Any) -> None:
    section = key.partition(".")[0]
    if section == "dataset":
        origin = req.origin.get(key, "override")
        if not (key == "dataset.seq_length" and req.dataset_seq_property):  # the file's key: Hydra takes it (AE2-1)
            not_in_dataset_class(req.release, req.recipe, req.dataset_target, key, origin)
        if key == "dataset.sequence_length" == dataset_seq_length_key(req.release.version, req.recipe, req.dataset_target):
            if req.dataset_seq_property:  # the file's seq_length (the property) is written after it: it has no effect
                req.context["dataset.sequence_length.overwritten"] = True
                return
            key, name = "dataset.seq_length", "seq_length"  # the value validate() reads through 0.5.x's seq_length alias
            req.origin[key] = origin
    fields = schema.SECTIONS[section]
    if name not in fields or fields[name].since and name not in bridge_fields(req.release.version).get(section, ()):
        _unmodeled_or_unknown(req, key, section, name, {k: f for k, f in fields.items() if k != name}, value)
        return
    typed = convert(key, fields[name], value, req.release, command_line=req.origin.get(key) == "override")
    getattr(req, section)[name] = typed
    req.explicit[key] = typed


_COMM_OVERLAP_TARGET = "megatron.bridge.training.comm_overlap.CommOverlapConfig"
def _not_blank(key: str, value: Any) -> None:
    """An empty value is a mistake, never "unset" (fuzzH H9: '' became [''] or null for some kinds), quoted or not
    (fuzzI I4: "" and '' passed)."""
    if isinstance(value, str) and not hydra.unquoted(value.strip()).strip():
        raise UsageError(f"{key}: an empty value; write null to unset it")


def _set_comm_overlap(req: Request, key: str, name: str, value: Any) -> None:
    if not name:
        if is_null(value):
            req.comm_overlap = None
            req.explicit["comm_overlap"] = None
            return
        pairs = hydra.brace_fields(value)
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
    req.env_vars[name] = hydra.env_value(key, value, typed)
    req.explicit[key] = req.env_vars[name]


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
    if hydra.live_interpolation(value) and not key.startswith("env_vars."):  # (recheck55 AB10; env_value names env_vars')
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
    if isinstance(value, str) and hydra.live_interpolation(value):  # (fuzzQ Q5: "without quotes" said of none)
        return UsageError(f"{key}: the file holds the OmegaConf interpolation {safeio.shown(value)}, which Bridge "
                          f"resolves when it loads the config and this skill does not: write {want} itself")
    return UsageError(f"{key}: the file holds the text {safeio.shown(value)} where Bridge's config holds {want}: "
                      + ("write it in plain digits (YAML reads this form as text)" if plain else "write it without quotes"))


# numbers that PyYAML (YAML 1.1) reads as text even unquoted: an exponent without a dot, NaN, infinity, 0o octal
_YAML_TEXT_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)[eE][+-]?\d+|[+-]?\.?(?:nan|inf|infinity)|0o[0-7]+", re.I)


def is_null(value: Any) -> bool:
    """Null as the request reads it: None, or the text null, none or ~."""
    return value is None or (isinstance(value, str) and value.strip().lower() in _NULLS)


def as_overrides(values: Mapping[str, Any]) -> dict:
    """Typed values as the overrides that set them again (derive reads a text as a command-line word): the text of a
    launch variable or a path in Hydra's quoting, which reads back exactly ('a,b' bare is a sweep: fuzzT T3-5)."""
    return {k: safeio.hydra_quoted(v) if isinstance(v, str) and _read_by_hydra(k) else v for k, v in values.items()}


def _read_by_hydra(key: str) -> bool:
    section, _, name = key.partition(".")
    spec = schema.SECTIONS.get(section, {}).get(name)
    return section == "env_vars" or key == schema.LAYOUT_KEY or spec is not None and spec.kind == OPT_PATH



def _env_names() -> set:
    return set(schema.LAUNCH_ENV_NAMES.values())


def _unmodeled_or_unknown(req: Request, key: str, section: str, name: str, modeled: Mapping, value: Any = None) -> None:
    known = bridge_fields(req.release.version).get(section, ())
    provider = None
    if section == "model":  # (recheck59 AF5, recheck55 AB6: the recipe's or the config's own provider class, such as
        # MLAModelProvider's q_lora_rank or HybridModelProvider's hybrid_layer_pattern, which Bridge takes)
        provider, known = model_provider(req.release.version, req.recipe, req.model_target)
        provider = None if provider == "GPTModelProvider" else provider
    if name in known and key in schema.SET_OR_NOT:  # only whether it is None counts, as the catalog records it
        _set_or_not(req, key, value)
        return
    if name in known:
        if req.origin.get(key) != "config":
            _not_blank(key, value)
        if not (req.origin.get(key) == "config" and (name in schema.CONTEXT.get(section, ()) or key in schema.CONFIG_READ)
                or section == "model" and name in schema.PIPELINE_LAYOUT):
            req.unmodeled += [key] if key not in req.unmodeled else []  # (a config's own value of a field a rule reads is no request to flag, nor a
            # pipeline layout's field: the resolver checks it as Megatron-Core does, the budget costs its largest stage)
        if key == schema.LAYOUT_KEY and req.origin.get(key) == "override" and isinstance(value, str):
            value = hydra.value_of(key, value)  # Hydra's reading, as plan's (recheck61 AH1, fuzzV V2-4..V2-6)
        req.context[key] = value  # as given (not typed): read only where a rule or the budget names it
        return
    hint = closest(name, list(modeled) + list(known))
    whose = f" ({provider}, the model of {req.recipe['name'] if req.recipe else req.model_target_of})" if provider else ""
    raise UsageError(  # a look-alike letter would read as the suggestion itself (fuzzH H11): shown escaped, and said
        f"{safeio.shown(key)}: {safeio.shown(name)} is not a field of {section}{whose} in Megatron-Bridge {req.release.version}"
        + ("" if key.isascii() else " (it holds non-ASCII characters)")
        + (f"; did you mean '{section}.{hint}'?" if hint else "")
    )


def not_in_dataset_class(release: Release, recipe: dict | None, target, key: str, origin: str) -> None:
    """A dataset field the run's dataset config class lacks, though another class of the release has it, refused as
    Bridge refuses it (fuzzW W2-7: enable_offline_packing on the baseline's GPTDatasetConfig was taken, and the packing
    rules answered with a fix Bridge refuses too): an override Hydra cannot apply (Could not override), a config
    file's field apply_overrides sets on the object (AttributeError). The class is the config's dataset._target_, the
    recipe's, or the baseline's (releases.dataset_class); one the release does not define takes any class's field."""
    name = key.partition(".")[2].partition(".")[0]
    cls, fields = dataset_class(release.version, recipe, target)
    if fields is None or not name or name in fields or name not in bridge_fields(release.version).get("dataset", ()):
        return
    prop = name in dataset_properties(release.version, cls)
    if prop and origin != "override":
        return  # a property with a setter: apply_overrides sets a config file's (0.5.x GPTDatasetConfig.seq_length)
    short = cls.rsplit(".", 1)[-1]
    whose = ("the config's dataset._target_" if isinstance(target, str) and target.strip()
             else f"the dataset of {recipe['name']}" if recipe else "the dataset of Bridge's baseline")
    if prop:  # Hydra's command line sets the OmegaConf dict of the dataclass fields only
        word = dataset_seq_length_key(release.version, recipe, target) if name == "seq_length" else None
        raise UsageError(f"{safeio.shown(key)}: {name} is a property of {short} ({whose}) in Megatron-Bridge "
                         f"{release.version}, not a field: Bridge's override fails (Could not override '{key}')"
                         + (f"; write {word}=VALUE, the field it sets" if word and word != key else ""))
    said = (f"Bridge's override fails (Could not override '{key}')" if origin == "override"
            else f"Bridge's apply_overrides raises AttributeError: '{short}' object has no attribute '{name}'")
    others = sorted(c.rsplit(".", 1)[-1] for c, f in _dataset_classes_with(release.version, name))
    raise UsageError(f"{safeio.shown(key)}: {name} is not a field of {short} ({whose}) in Megatron-Bridge "
                     f"{release.version}: {said}; " + (f"{', '.join(others[:3])}{' ...' if len(others) > 3 else ''} "
                                                      "ha" + ("s" if len(others) == 1 else "ve") + " it" if others else ""))


def _dataset_classes_with(version: str, name: str) -> list:
    from ..upstream.releases import _bridge_data, get

    return [(c, f) for c, f in (_bridge_data(get(version).data_version).get("dataset_classes") or {}).items() if name in f]


def _set_or_not(req: Request, key: str, value: Any) -> None:
    """A field validate() reads as set unless it is None (offline_packing_specs, training/config.py: `is None`): a config
    file's value as YAML loaded it (null and ~ are None; false, 0, '' and the text 'null' are set), a command-line word
    as Hydra reads it (null is its only null: none is the text 'none'), a typed value as given (fuzzW W2-6: false and
    the texts null/none were read as unset). A set value Bridge then reads as specs (.pad_cu_seqlens) that is a scalar
    or a list, not specs (a mapping, or an object), is kept by its type name: validate() raises AttributeError on it."""
    config = req.origin.get(key) == "config"
    if not config:
        _not_blank(key, value)
    read = hydra.value_of(key, value) if isinstance(value, str) and not config else value
    req.context[key] = read is not None  # (a config's mapping, Hydra's null: evalAA AA-2)
    scalar = isinstance(read, (str, int, float, bool, list, tuple))
    req.context[f"{key}.not_specs"] = type(read).__name__ if scalar else None


def build(release: Release, overrides: Mapping[str, Any] | None = None, config: Mapping | None = None, strict: bool = True,
          base: dict | None = None, written=frozenset(), model_target: tuple[str, str] | None = None) -> Request:
    """The request: Bridge's baseline (or the recipe catalog entry `base`), then the config file's values, then the
    overrides, in that order.

    strict=False (a saved run config, maybe of another release) skips config sections and fields this release does
    not have instead of failing; they are listed in `request.skipped`. `written`: keys of the config that hold what
    Bridge wrote (a saved run config's outputs), taken as values but not as requests. model_target: (the model's
    provider class, whose it is) where no recipe or config names one (plan --model: the class its family's recipes build)."""
    req = Request.from_recipe(release, catalog.require_built(base)) if base is not None else Request.baseline(release)
    if base is None:
        model = config.get("model") if isinstance(config, Mapping) else None
        req.model_target = model.get("_target_") if isinstance(model, Mapping) else None
        if req.model_target is None and model_target is not None:
            req.model_target, req.model_target_of = model_target
    _held(req, config)
    dataset = config.get("dataset") if isinstance(config, Mapping) else None
    req.dataset_target = dataset.get("_target_") if isinstance(dataset, Mapping) else None
    items, req.skipped = flatten_config(config or {}, release, strict, recipe=req.recipe)
    req.dataset_seq_property = (isinstance(dataset, Mapping) and "seq_length" in dataset and dataset_seq_length_key(
        release.version, req.recipe, req.dataset_target) == "dataset.sequence_length")
    if req.dataset_seq_property:  # (after flatten_config: its sequence_length is dropped, the property sets the length)
        items = [(k, v) for k, v in items if k != "dataset.sequence_length"]
    for key, value in items:
        _as_yaml_typed(key, value)
        req.set(key, value, "config")
    if config and base is None and req.origin.get("dataset.seq_length") != "config" and not _baseline_dataset(release, dataset) \
            and not _override_file_without_dataset(config):
        for key in schema.BASELINE_CONTEXT:  # a config that holds no dataset (Bridge's summary prints none): not the baseline's
            req.context.pop(key, None)
    if base is None and req.model_target_of == "the config" and req.model["seq_length"] is None \
            and "model.seq_length" not in req.origin:
        known = provider_seq_length(release.version, req.model_target)
        if known is not None:  # (stop 56 left: unknown here, so a dataset length alone was never checked against it)
            req.model["seq_length"], req.model_seq_length_of = known[1], known[0]
    dataset = config.get("dataset") if isinstance(config, Mapping) else None
    sft = finetuning_dataset(release.version, dataset.get("_target_")) if isinstance(dataset, Mapping) else None
    if sft is not None:  # the config's dataset class, as validate()'s fine-tuning CP check reads it (evalAA AA-1)
        req.context["dataset.sft"] = sft
    for key in written:
        req.explicit.pop(key, None)
        req.origin.pop(key, None)
    for key, value in (overrides or {}).items():
        req.judge(key, value)
        req.set(hydra.prefixed(key)[1], value)
    return req


def _held(req: Request, config) -> None:
    """The sections whose keys are the config file's own, and those keys (Request.held)."""
    if not isinstance(config, Mapping):
        config = {}
    model, comm = config.get("model"), config.get("comm_overlap")
    sections = set()
    if req.recipe is None and isinstance(req.model_target, str) and req.model_target_of == "the config":
        sections.add("model")
    if req.comm_overlap is None and isinstance(comm, Mapping):
        sections.add("comm_overlap")
    req.held_sections = frozenset(sections)
    req.held_keys = {f"{s}.{k}" for s, body in (("model", model), ("comm_overlap", comm))
                     if s in sections and isinstance(body, Mapping) for k in body if k != "_target_"}
    req.file_keys = frozenset(req.held_keys)


def _override_file_without_dataset(config: Mapping) -> bool:
    """An override file (no ConfigContainer _target_ of its own: not a saved run config, nor a log's configuration
    summary, which prints no dataset) without a dataset section: Bridge's process_config_with_overrides merges it over
    the base config, whose dataset it keeps: _pretrain_common()'s GPTDatasetConfig(seq_length=4096) (recipes/common.py:95
    in 0.5.0 to 0.6.2), which validate() compares with the model's (recheck67 AN-1: a GPTModelProvider file's 1024, and a
    command-line dataset length, were compared with nothing)."""
    return "dataset" not in config and not str(config.get("_target_", "")).strip().endswith("ConfigContainer")


def _baseline_dataset(release: Release, dataset) -> bool:
    """A config's dataset section that leaves the baseline's dataset class (no _target_ or the baseline's own): the
    fields it does not set keep the baseline's values, its sequence length among them (recheck65 AL2: a config setting
    only sequence_length on 0.6.x, whose finalize() copies seq_length over it, was taken to hold no length at all)."""
    if not isinstance(dataset, Mapping):
        return False
    target = dataset.get("_target_")
    return target is None or (isinstance(target, str) and target.strip() == dataset_class(release.version)[0])


def flatten_config(config: Mapping, release: Release, strict: bool = True, recipe: dict | None = None) -> tuple[list, list]:
    """Dotted (key, value) pairs from a ConfigContainer-shaped mapping, `_target_` keys dropped, and the keys
    skipped because this release has no such section or field (strict: a UsageError instead).

    Only the sections the resolver models are read; a dumped run config carries every field of every section. recipe:
    the catalog entry the request starts from, whose provider class's fields the model section may hold."""
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
            items += _flatten_section(section, body, release, strict, skipped, recipe)
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


def _flatten_section(section: str, body: Mapping, release: Release, strict: bool, skipped: list, recipe: dict | None = None) -> list:
    modeled = {**schema.SECTIONS, "comm_overlap": schema.COMM_OVERLAP}[section]
    extra = set(schema.COMM_OVERLAP_COMPUTED) if section == "comm_overlap" else set()
    known = bridge_fields(release.version).get(section, frozenset())
    if section == "dataset":  # a field of another dataset class than the run's (fuzzW W2-7)
        for name in body:
            if name != "_target_":
                not_in_dataset_class(release, recipe, body.get("_target_"), f"dataset.{name}", "config")
        seq = dataset_seq_length_key(release.version, recipe, body.get("_target_")).partition(".")[2]
        extra = {seq}  # the length validate() compares, by this class's word (recheck65 AL1: 0.5.x's sequence_length)
    if section == "model":  # (recheck59 AF5: the recipe's own provider class's fields, or the config's own: U2-2)
        known = model_provider(release.version, recipe, body.get("_target_") if recipe is None else None)[1]
    out = []
    for name, value in body.items():
        if name == "_target_":
            continue
        if name not in modeled and name not in extra:
            if name not in known and name.lower() not in schema.LAUNCH_ENV_NAMES:
                _unknown(f"{section}.{name}", strict, skipped, list(modeled) + list(known))
                continue
            if name in schema.CONTEXT.get(section, ()) or f"{section}.{name}" in schema.CONFIG_READ:
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
