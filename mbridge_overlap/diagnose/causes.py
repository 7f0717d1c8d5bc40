"""Which finding a logged message is: the `logged` selectors of the finding registry (data/findings.yaml), resolved
against a release's catalog of messages.

A selector is a message's text as the catalog holds it, from its start (`FSDP requires CUDA_DEVICE_MAX_CONNECTIONS`:
every catalog entry whose template starts so, in any of the three packages), or a catalog id (`native.ub_mc_...`,
`te.raise.ead3af5275`); the mapping form adds `line:`, a regular expression the logged line must show as well (one
native message, `CUDA Error: (.+)` from userbuffers-host.cpp, is several causes told apart by their text), and
`split_factor: true` that the sizes the line's groups `a` and `b` capture differ by a factor a parallel split makes,
`group: [dimensions]` that the process group the line describes is of one of them ("none": the line describes none;
diagnose/groups.py reads Megatron-Core's group descriptions).

A message no selector names but that Megatron-Bridge, Megatron-Core or Transformer Engine raises on the overlap path
is still reported (as OVERLAP_PATH_ERROR), with the config fields its code reads: `knobs_of`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .. import findings
from . import groups
from .messages import Catalog, Entry

OVERLAP_TOPICS = frozenset({"tp_overlap", "userbuffers", "dp_overlap", "distributed_optimizer", "pipeline", "fsdp",
                            "mixed_precision", "launch_env", "parallel_state", "moe_overlap", "context_parallel"})


@dataclass(frozen=True)
class Link:
    finding: str
    line: re.Pattern | None  # the logged line must show this too (None: any line of the message)
    split_factor: bool = False  # and its groups a and b differ by a factor a TP or CP split makes (split_factor())
    group: tuple | None = None  # and the process group the line describes is of these dimensions (groups.described)

    def holds(self, text: str) -> bool:
        if self.group is not None and groups.described(text) not in self.group:
            return False
        if self.line is None:
            return True
        m = self.line.search(text)
        if m is None or not self.split_factor:
            return m is not None
        a, b = number(m["a"]), number(m["b"])
        return a is not None and b is not None and split_factor(a, b) is not None


def number(text: str) -> int | None:
    """A size a line states: ASCII digits, below 2^40 (a longer run of digits is no tensor's size)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else None


SPLIT_FACTORS = (2, 4, 8, 16, 32, 64)  # TP, CP and TP x CP sizes
SPLIT_MIN = 64  # a sequence shard shorter than this is not what a mismatch of two small sizes is


def split_factor(a: int, b: int) -> int | None:
    """The factor between two sizes where it is one a TP or CP split of the sequence makes (a power of two up to 64,
    the smaller size a plausible shard), else None."""
    small, large = sorted((a, b))
    if small < SPLIT_MIN or large % small:
        return None
    return large // small if large // small in SPLIT_FACTORS else None


def selectors() -> dict:
    """finding id -> its `logged` selectors, as (text, line pattern or None, split_factor, group dimensions or None)."""
    out = {}
    for fid, rec in findings.records().items():
        for sel in rec.get("logged") or ():
            if isinstance(sel, str):
                out.setdefault(fid, []).append((sel, None, False, None))
            else:
                group = tuple(None if g == "none" else g for g in sel["group"]) if "group" in sel else None
                out.setdefault(fid, []).append((sel["message"], sel.get("line"), bool(sel.get("split_factor")), group))
    return out


@lru_cache(maxsize=None)
def index(cat: Catalog) -> dict:
    """catalog entry id -> [Link] for one catalog."""
    out: dict = {}
    for fid, sels in selectors().items():
        for text, line, factor, group in sels:
            rx = re.compile(line) if line else None
            for entry in entries_of(cat, text):
                out.setdefault(entry.id, []).append(Link(fid, rx, factor, group))
    for entry in cat.entries:
        if entry.releases and entry.id not in out and _same_place(entry, cat.by_id(entry.current or "")):
            out[entry.id] = out.get(entry.current, [])
    return out


def _same_place(variant: Entry, current: Entry | None) -> bool:
    """Whether another release's wording is the catalog's message in a later form: the nearest text (the variants'
    `current`) raised in the same file by the same function (its class may be renamed)."""
    return (current is not None and current.file == variant.file
            and _function_name(current) == _function_name(variant))


def _function_name(entry: Entry) -> str:
    return (entry.function or "").rsplit(".", 1)[-1]


def entries_of(cat: Catalog, text: str) -> list[Entry]:
    """The catalog entries a selector names."""
    by_id = cat.by_id(text)
    if by_id is not None:
        return [by_id]
    return [e for e in cat.entries if e.template and e.template.lstrip().startswith(text)]


def links(cat: Catalog, entry: Entry, line: str) -> list[str]:
    """The finding ids a logged line of `entry` is."""
    return [link.finding for link in index(cat).get(entry.id, ()) if link.holds(line)]


def conditional(cat: Catalog, entry: Entry) -> bool:
    """Whether a message's findings depend on the logged line's own text (a selector with `line`)."""
    return any(link.line is not None or link.group is not None for link in index(cat).get(entry.id, ()))


# Messages the catalog holds for their file's or function's sake (their own words name no overlap topic) whose text the
# package also writes off the overlap path: the text alone does not place the error there; a traceback's last frame in
# the entry's own file does. tools/gen_messages.py records it per release from the package's sources (every place
# writing the text: Entry.raised_elsewhere; Entry.off_path_too), e.g. Transformer Engine 2.20.2's "Missing quantizer
# for input tensor", raised by its userbuffers ops and, without userbuffers, by module/linear.py (both branches of its
# input all-gather), module/layernorm_linear.py and ops/basic/basic_linear.py.
def off_path_too(entry: Entry) -> str | None:
    """Where else the package writes this entry's text, off the overlap path ("file function, ..."); None: the
    text places the message on the path (nowhere else, or its own words name an overlap topic)."""
    if not entry.off_path_too:
        return None
    places = dict.fromkeys(f"{x[0]} {x[1]}" for x in entry.raised_elsewhere if not x[3])
    return ", ".join(places) or None


def overlap_related(entry: Entry) -> bool:
    return entry.topic in OVERLAP_TOPICS


# What a native error no finding names is still about, by its topic: Transformer Engine's userbuffers exist only for
# TP communication overlap (initialize_ub runs where model.tp_comm_overlap is on)
NATIVE_TOPIC_KNOBS = {"userbuffers": ["comm_overlap.tp_comm_overlap", "comm_overlap.tp_comm_overlap_cfg"]}


def native_knobs(entry: Entry) -> list[str]:
    return list(NATIVE_TOPIC_KNOBS.get(entry.topic, ())) if entry.origin == "native" else []


# The config fields a message's code may name, by the attribute it reads them from.
_FIELD = re.compile(r"\b(?:(?P<owner>[A-Za-z_][A-Za-z_0-9]*)\.)?(?P<name>[a-z][a-z0-9_]{2,})\b")
_OWNERS = {"ddp_config": "ddp", "ddp": "ddp", "optimizer_config": "optimizer", "optimizer": "optimizer",
           "config": "model", "model_cfg": "model", "model": "model", "transformer_config": "model",
           "comm_overlap": "comm_overlap", "train": "train", "dataset": "dataset", "checkpoint": "checkpoint"}
# TransformerConfig's callbacks Megatron installs at run time, no config field a user sets (evalAD AD2-2: model.no_sync_func
# was given as a knob): Bridge's training/setup.py _update_model_config_funcs assigns each once the model is wrapped
# (0.6.2 lines 560-578: no_sync_func right after asserting it is None, with ddp.overlap_grad_reduce on), Megatron-LM's
# training.py train() the same; tests/bridge/test_runtime_callbacks.py reads the assignments from the installed source
RUNTIME_FIELDS = frozenset({"no_sync_func", "grad_sync_func", "param_sync_func", "finalize_model_grads_func",
                            "grad_scale_func"})
# The sections a knob is looked for in, most likely first (a ConfigContainer's other sections are not on the path).
KNOB_SECTIONS = ("model", "ddp", "optimizer", "comm_overlap", "dist", "train", "checkpoint", "dataset", "mixed_precision")


def knobs_of(entry: Entry, version: str | None, branch: bool = True) -> list[str]:
    """The config fields (Bridge's dotted keys, in the release's ConfigContainer) an entry's code reads: the names in
    its assert condition and its message's fields, and the names with an underscore in its message's words
    (`overlap_grad_reduce` in "... when overlap_grad_reduce is True"); then the names in the tests of the if/elif
    branches it sits under (`branch`: a message whose words name no knob is raised because of them). A name that more
    than one section has is given for each, unless the code says whose it is (ddp_config., model_cfg., ...)."""
    out: list[str] = []
    code = " ".join(filter(None, (entry.condition, " ".join(entry.fields))))
    for text, any_name in ((code, True), (entry.template or "", False), (" ".join(entry.branch) if branch else "", True)):
        for m in _FIELD.finditer(text):
            if not any_name and "_" not in m["name"] or m["name"] in RUNTIME_FIELDS:
                continue
            for key in _keys(m["name"], _OWNERS.get(m["owner"] or ""), version):
                if key not in out:
                    out.append(key)
    return out


def runtime_fields(entry: Entry) -> list[str]:
    """The run-time callbacks (RUNTIME_FIELDS) an entry's assert condition names, in order."""
    return list(dict.fromkeys(m["name"] for m in _FIELD.finditer(entry.condition or "") if m["name"] in RUNTIME_FIELDS))


def under_setting(entry: Entry, version: str | None) -> list[str]:
    """The overlap settings a message runs under: the knobs read by the tests of the if/elif branches it sits in
    (`branch`, not an else's negated test) that are a communication-overlap setting (a comm_overlap field, a field
    named for an overlap) or the interleaved schedule (the virtual pipeline size: Megatron turns overlap_p2p_comm off
    without it). A message raised only where such a setting is on is about that setting, whatever its own words
    name."""
    out: list[str] = []
    for test in entry.branch:
        if test.startswith("not ("):
            continue
        for m in _FIELD.finditer(test):
            for key in _keys(m["name"], _OWNERS.get(m["owner"] or ""), version):
                if key not in out and (key.startswith("comm_overlap.") or "overlap" in key
                                       or key.endswith(".virtual_pipeline_model_parallel_size")):
                    out.append(key)
    return out


# Megatron-LM's arguments for what Bridge's config names otherwise: validate_args (megatron/training/arguments.py,
# yaml_arguments.py) derives args.virtual_pipeline_model_parallel_size from either
ARGUMENTS = {"num_layers_per_virtual_pipeline_stage": "virtual_pipeline_model_parallel_size",
             "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size"}


def _keys(name: str, owner: str | None, version: str | None) -> list[str]:
    sections = _sections_of(version).get(name, ())
    if not sections and name in ARGUMENTS:
        name = ARGUMENTS[name]
        sections = _sections_of(version).get(name, ())
    if owner in sections:
        return [f"{owner}.{name}"]
    return [f"{s}.{name}" for s in sections]


@lru_cache(maxsize=None)
def _sections_of(version: str | None) -> dict:
    """field name -> the ConfigContainer sections of the release that have it (KNOB_SECTIONS order)."""
    from ..upstream.releases import bridge_fields

    fields = bridge_fields(version)
    out: dict = {}
    for section in KNOB_SECTIONS:
        for name in sorted(fields.get(section) or ()):
            out.setdefault(name, []).append(section)
    return out
