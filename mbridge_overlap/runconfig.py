"""Run configs for lint and diff: Bridge's saved run_config.yaml (a file, a checkpoint directory or an
iteration directory) or an override file `plan` emits.

A saved run config (`cfg.to_yaml()` in checkpointing) keeps the request in `comm_overlap` (with
`data_parallel_size`) and the effective values in `model`, `ddp` and `optimizer`; resolving it again gives
the same effective values (runtime_config_update() is a fixed point of its own output), and says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from . import api, releases, request, schema
from .errors import UsageError

RUN_CONFIG = "run_config.yaml"  # training/utils/checkpoint_utils.py CONFIG_FILE
_ITER_DIR = re.compile(r"^iter_(\d+)$")
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
        if not isinstance(comm, dict) or not isinstance(comm.get("data_parallel_size"), int):
            return None
        sizes = [model.get(k, 1) or 1 for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")]
        return comm["data_parallel_size"] * sizes[0] * sizes[1] * sizes[2]

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
    """The YAML to read: the file itself, DIR/run_config.yaml, or the newest DIR/iter_*/run_config.yaml."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UsageError(f"{p}: no such file or directory")
    if p.is_file():
        return p
    if (p / RUN_CONFIG).is_file():
        return p / RUN_CONFIG
    iters = sorted(
        (int(m.group(1)), child) for child in p.iterdir() if (m := _ITER_DIR.match(child.name)) and (child / RUN_CONFIG).is_file()
    )
    tracker = p / "latest_checkpointed_iteration.txt"
    if tracker.is_file() and tracker.read_text().strip().isdigit():
        wanted = int(tracker.read_text().strip())
        iters = [it for it in iters if it[0] == wanted] or iters
    if not iters:
        raise UsageError(f"{p}: no {RUN_CONFIG} there, nor in an iter_* checkpoint folder under it")
    return iters[-1][1] / RUN_CONFIG


def load(path: str | Path) -> RunConfig:
    file = find_file(path)
    raw = request.read_config_file(file)
    saved = str(raw.get("_target_", "")).endswith("ConfigContainer") or isinstance((raw.get("model") or {}).get("_target_"), str)
    return RunConfig(file, raw, saved)


def resolve(rc: RunConfig, gpus: int | None, te: bool, bridge_version: str | None, flag: str = "--gpus") -> api.Resolution:
    """The resolver on a run config; sections and fields the release lacks become warnings, not errors."""
    gpus = gpus or rc.recorded_gpus
    if gpus is None:
        raise UsageError(f"{flag}: {rc.path} does not record the GPU count (it has no comm_overlap section); pass {flag} N")
    release = releases.get(bridge_version)
    req = request.build(release, None, rc.raw, strict=False)
    if req.skipped:
        rc.warnings.append(
            f"{rc.path}: not in Megatron-Bridge {release.version}'s config, ignored: {', '.join(req.skipped[:6])}"
            + (f" and {len(req.skipped) - 6} more" if len(req.skipped) > 6 else "")
            + " (saved by another release?)"
        )
    return api.resolve_request(req, gpus=gpus, te=te)
