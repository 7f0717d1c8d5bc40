"""Run configs for every verb: Bridge's saved run_config.yaml (a file, a checkpoint directory or an
iteration directory) or an override file `plan` emits.

A saved run config (`cfg.to_yaml()` in checkpointing) keeps the request in `comm_overlap` (with
`data_parallel_size`) and the effective values in `model`, `ddp` and `optimizer`; resolving it again gives
the same effective values (runtime_config_update() is a fixed point of its own output), and says why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from . import request, schema
from .. import safeio
from ..errors import UsageError
from dataclasses import dataclass, field

RUN_CONFIG = "run_config.yaml"  # training/utils/checkpoint_utils.py CONFIG_FILE
_ITER_DIR = re.compile(r"^iter_([0-9]{1,18})\Z")
_ITERATION = re.compile(r"^[0-9]{1,18}\Z")
TRACKER = "latest_checkpointed_iteration.txt"  # Megatron's checkpoint tracker
MAX_SIZE = 2**31  # a GPU count or parallel size beyond this is not a saved value
MODEL_IDENTITY = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "vocab_size")


@dataclass
class RunConfig:
    path: Path
    raw: dict
    saved: bool  # a dumped ConfigContainer (effective values saved) rather than an override file
    warnings: list = field(default_factory=list)

    @property
    def recorded_gpus(self) -> int | None:
        """GPU count from comm_overlap.data_parallel_size x TP x PP x CP, which Bridge saves with comm_overlap."""
        comm = self.raw.get("comm_overlap")
        model = self.raw.get("model") or {}
        if not isinstance(comm, dict) or comm.get("data_parallel_size") is None:
            return None
        gpus = self._size("comm_overlap", comm, "data_parallel_size")
        for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
            gpus *= self._size("model", model, k) if model.get(k) is not None else 1
        return gpus

    def _size(self, section: str, body: dict, name: str) -> int:
        """A saved size, type-checked before any arithmetic (a string times an int is a repeated string)."""
        value = body.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise UsageError(f"{self.path}: {section}.{name}: expected a positive integer, got {safeio.shown(value)}")
        return value

    @property
    def provider(self) -> str:
        """The model provider the config names in model._target_, module and class ("" where it names none)."""
        model = self.raw.get("model")
        target = model.get("_target_") if isinstance(model, dict) else None
        return target if isinstance(target, str) else ""

    def identity(self) -> dict:
        model = self.raw.get("model") or {}
        return {k: model.get(k) for k in ("_target_",) + MODEL_IDENTITY if k in model}

    def saved_effective(self) -> dict | None:
        if not self.saved:
            return None
        out = {}
        for section, names in schema.EFFECTIVE_FIELDS.items():
            body = self.raw.get(section) or {}
            out[section] = {n: body[n] for n in names if n in body}
        out["model"].pop("tp_comm_overlap_cfg", None)  # saved as the preset's fields; compared through the resolver
        return out


def find_file(path: str | Path) -> Path:
    """The YAML to read: the file itself, DIR/run_config.yaml, the one of the checkpoint Megatron's tracker names
    (DIR/iter_N or DIR/release), or the newest DIR/iter_*/run_config.yaml where there is no tracker."""
    p = Path(path)
    try:
        p = p.expanduser()
        what = safeio.kind(p)
        if what == "missing":
            raise UsageError(f"{p}: no such file or directory")
        if what != "dir":
            return p  # a file, or something read_bytes refuses with its reason
        if safeio.kind(p / RUN_CONFIG) != "missing":
            return p / RUN_CONFIG
        iters = sorted(
            (int(m.group(1)), p / name) for name in safeio.list_dir(p)
            if (m := _ITER_DIR.match(name)) and safeio.kind(p / name / RUN_CONFIG) == "file"
        )
        wanted = _tracked_iteration(p / TRACKER)
        if wanted == "release":  # Megatron's get_checkpoint_name(release=True): DIR/release
            if safeio.kind(p / "release" / RUN_CONFIG) == "file":
                return p / "release" / RUN_CONFIG
            raise UsageError(f"{p / TRACKER} names the release checkpoint, and {p / 'release'} holds no {RUN_CONFIG}")
    except (OSError, RuntimeError) as exc:  # permission, name too long, symlink loop, ~nobody
        raise UsageError(f"{p}: {safeio.reason(exc) if isinstance(exc, OSError) else exc}") from None
    if wanted is not None:
        tracked = [it for it in iters if it[0] == wanted]
        if not tracked:  # another checkpoint's config is not the tracked one's
            newest = f"; the newest that has one: {iters[-1][1] / RUN_CONFIG}" if iters else ""
            raise UsageError(f"{p / TRACKER} names iteration {wanted}, and no iter_{wanted:07d} under {p} holds a "
                             f"{RUN_CONFIG}{newest}")
        iters = tracked
    if not iters:
        raise UsageError(f"{p}: no {RUN_CONFIG} there, nor in an iter_* checkpoint folder under it")
    return iters[-1][1] / RUN_CONFIG


def _tracked_iteration(tracker: Path) -> int | str | None:
    """The iteration Megatron's tracker file names ('release' for the release checkpoint); None where there is none."""
    if safeio.kind(tracker) == "missing":
        return None
    text = safeio.read_text(tracker, limit=4096).strip()
    if text == "release":
        return text
    if not _ITERATION.match(text):
        raise UsageError(f"{tracker}: expected an iteration number, got {safeio.shown(text)}")
    return int(text)


def load(path: str | Path) -> RunConfig:
    file = find_file(path)
    raw = request.read_config_file(file, label="")
    return RunConfig(file, raw, is_saved(raw))


def from_mapping(raw: Mapping) -> RunConfig:
    """A ConfigContainer-shaped mapping given in Python, read like a file; named by its `label` attribute where it has
    one (a log's configuration summary: evalQ Q5), else <mapping>."""
    label = getattr(raw, "label", "<mapping>")
    safeio.check_config(raw, label)  # as a file's (fuzzV V2-13: an int key of a section was an AttributeError)
    return RunConfig(Path(label), dict(raw), is_saved(raw))


def is_saved(raw: Mapping) -> bool:
    """A dumped ConfigContainer (cfg.to_yaml(): effective values saved), not an override file."""
    model = raw.get("model")
    return str(raw.get("_target_", "")).endswith("ConfigContainer") or isinstance(model, Mapping) and isinstance(model.get("_target_"), str)


# In a saved run config these hold what runtime_config_update() wrote, not what was asked for: they are read as
# values (the resolver derives them again) but never as requests, so no finding asks to "restore" them.
WRITTEN_BY_COMM_OVERLAP = ("model.tp_comm_overlap", "model.tp_comm_bootstrap_backend", "model.overlap_p2p_comm", "model.batch_p2p_comm",
                           "model.defer_embedding_wgrad_compute", "model.wgrad_deferral_limit",
                           "model.overlap_moe_expert_parallel_comm", "model.delay_wgrad_compute")
WRITTEN_BY_DP_OVERLAP = ("ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.bucket_size", "ddp.align_param_gather",
                         "optimizer.overlap_param_gather_with_optimizer_step")
WRITTEN_BY_MIXED_PRECISION = ("ddp.grad_reduce_in_fp32", "ddp.fp8_param_gather", "ddp.reuse_grad_buf_for_mxfp8_param_ag",
                              "optimizer.reuse_grad_buf_for_mxfp8_param_ag")
WRITTEN_BY_MEGATRON_FSDP = ("ddp.use_megatron_fsdp", "dist.use_megatron_fsdp", "ddp.average_in_collective", "ddp.fsdp_manual_registration",
                            "ddp.use_distributed_optimizer", "ddp.reuse_grad_buf_for_mxfp8_param_ag",
                            "optimizer.reuse_grad_buf_for_mxfp8_param_ag")
MIRRORS = {"ddp.use_distributed_optimizer": "optimizer.use_distributed_optimizer", "ddp.overlap_param_gather": "optimizer.overlap_param_gather"}


def _saved(raw: dict, key: str):
    section, _, name = key.partition(".")
    body = raw.get(section)
    return body.get(name, _MISSING) if isinstance(body, dict) else _MISSING


def _baseline(key: str):
    section, _, name = key.partition(".")
    f = schema.SECTIONS.get(section, {}).get(name)
    return f.default if f is not None else _MISSING


_MISSING = object()


def written_by_bridge(rc: RunConfig) -> frozenset:
    """The dotted keys of a saved run config that hold Bridge's output rather than a request."""
    if not rc.saved:
        return frozenset()
    raw = rc.raw
    section = lambda name: raw.get(name) if isinstance(raw.get(name), dict) else {}  # noqa: E731
    derived = set(MIRRORS.values())
    if raw.get("comm_overlap") is not None:
        derived.update(WRITTEN_BY_COMM_OVERLAP)
        if section("ddp").get("use_distributed_optimizer"):
            derived.update(WRITTEN_BY_DP_OVERLAP)
        else:  # comm_overlap left them alone: a value of Bridge's baseline is what a config that never set it saves
            derived.update(k for k in WRITTEN_BY_DP_OVERLAP if _saved(raw, k) == _baseline(k))
    if raw.get("mixed_precision") is not None:
        derived.update(WRITTEN_BY_MIXED_PRECISION)
    if section("ddp").get("use_megatron_fsdp") or section("dist").get("use_megatron_fsdp"):
        derived.update(WRITTEN_BY_MEGATRON_FSDP)
    tp = section("model").get("tensor_model_parallel_size")
    if not isinstance(tp, int) or isinstance(tp, bool) or tp <= 1:
        derived.add("model.sequence_parallel")  # TransformerConfig.finalize turned it off
    return frozenset(derived)
