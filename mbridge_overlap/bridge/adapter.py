"""Adapter to the real Megatron-Bridge. Imported only by verify, conformance and anchors: megatron and torch are
imported inside these functions, never when the skill starts."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import warnings

from ..run import schema

# A small GPT that satisfies Megatron-Core's checks for every layout the conformance set generates:
# heads divisible by TP <= 8, layers divisible by PP x VPP <= 32, sequence divisible by 2 x CP.
MODEL_KWARGS = dict(
    num_layers=96,
    hidden_size=128,
    ffn_hidden_size=256,
    num_attention_heads=16,
    seq_length=4096,
    vocab_size=1024,
    make_vocab_size_divisible_by=128,
)


class BridgeUnavailable(RuntimeError):
    """megatron.bridge cannot be imported in this Python."""


def import_bridge():
    """The Bridge modules the adapter uses; BridgeUnavailable with the reason if they do not import."""
    try:
        import torch  # noqa: F401  (loads libnccl before Transformer Engine)
        from megatron.bridge.training import comm_overlap, config, mixed_precision
    except Exception as exc:  # ImportError, or a missing shared library
        raise BridgeUnavailable(f"megatron.bridge does not import here: {type(exc).__name__}: {exc}") from exc
    return comm_overlap, config, mixed_precision


def bridge_version() -> str:
    from importlib.metadata import version

    return version("megatron-bridge")


def baseline_config():
    """Bridge's recipe baseline, _pretrain_common(), with a model provider (no Hugging Face download)."""
    import_bridge()
    from megatron.bridge.models import GPTModelProvider
    from megatron.bridge.recipes.common import _pretrain_common
    from megatron.bridge.training.config import TokenizerConfig

    cfg = _pretrain_common()
    cfg.model = GPTModelProvider(**MODEL_KWARGS)
    cfg.tokenizer = TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=MODEL_KWARGS["vocab_size"])
    return cfg


def apply_overrides(cfg, overrides: dict) -> None:
    """Apply typed dotted overrides the way a user does in Python (the ground truth for a request)."""
    comm_overlap_mod, _, mixed_precision_mod = import_bridge()
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if section == "comm_overlap":
            _apply_comm_overlap(cfg, comm_overlap_mod, name, value)
        elif section == "mixed_precision":
            if not name:
                cfg.mixed_precision = value
            else:
                cfg.mixed_precision = mixed_precision_mod.get_mixed_precision_config(cfg.mixed_precision)
                setattr(cfg.mixed_precision, name, value)
        elif section == "env_vars":
            cfg.env_vars[name] = value
        else:
            setattr(getattr(cfg, section), name, value)


def _apply_comm_overlap(cfg, module, name, value) -> None:
    if not name:
        cfg.comm_overlap = value
        return
    if cfg.comm_overlap is None:
        cfg.comm_overlap = module.CommOverlapConfig(tp_comm_overlap=False)
    if name == "tp_comm_overlap_cfg" and value is not None:
        value = getattr(module, value)
    setattr(cfg.comm_overlap, name, value)


@contextlib.contextmanager
def runtime(world_size: int, te: bool = True):
    """WORLD_SIZE for get_world_size_safe(), HAVE_TE patched as Bridge's own tests do, os.environ restored."""
    comm_overlap_mod, _, _ = import_bridge()
    saved_env, saved_te = dict(os.environ), comm_overlap_mod.HAVE_TE
    os.environ["WORLD_SIZE"] = str(world_size)
    comm_overlap_mod.HAVE_TE = te
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        comm_overlap_mod.HAVE_TE = saved_te
        os.environ.clear()
        os.environ.update(saved_env)


def quiet() -> None:
    """Silence Bridge's per-config log lines (it warns on every disabled overlap)."""
    logging.disable(logging.WARNING)


def runtime_config_update(cfg, world_size: int, te: bool = True) -> tuple[str | None, dict]:
    """Run Bridge's runtime_config_update(); (error message or None, the environment it left)."""
    _, config_mod, _ = import_bridge()
    with runtime(world_size, te):
        before = dict(os.environ)
        try:
            config_mod.runtime_config_update(cfg)
        except Exception as exc:  # Bridge raises AssertionError, ValueError, TypeError
            return f"{type(exc).__name__}: {exc}".strip(), {}
        env = {k: v for k, v in os.environ.items() if before.get(k) != v}
    return None, env


def effective(cfg) -> dict:
    """The resolver's effective fields, read off a ConfigContainer after runtime_config_update()."""
    out = {}
    for section, names in schema.EFFECTIVE_FIELDS.items():
        obj = getattr(cfg, section)
        out[section] = {n: getattr(obj, n, None) for n in names}  # a model provider without the field: None
    out["model"]["tp_comm_overlap_cfg"] = preset_name(out["model"]["tp_comm_overlap_cfg"])
    return out


def preset_name(value):
    """A model's tp_comm_overlap_cfg as preset names: None; the name of a preset object; or, for the dict
    setup() makes of it, the sorted names of every preset with that content (some presets are identical)."""
    if value is None:
        return None
    module, _, _ = import_bridge()
    names = [n for n in dir(module) if n.startswith("userbuffers_")]
    for name in names:
        if value is getattr(module, name):
            return name
    content = _plain(value if isinstance(value, dict) else dataclasses.asdict(value) if dataclasses.is_dataclass(value) else None)
    if content is not None:
        same = [n for n in names if content == _plain({k: v for k, v in dataclasses.asdict(getattr(module, n)).items() if v is not None})]
        if same:
            return same
    return f"<custom {type(value).__name__}>"


def _plain(value):
    """Content for comparison: None-valued GEMMs dropped, tuples as lists (YAML has no tuples; PipelineOverlapCfg's
    fp8_buf default is the tuple (False,))."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
