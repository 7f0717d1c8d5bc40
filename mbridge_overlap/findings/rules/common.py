"""What several checks share: where a request was made, where a value must move to win, the DP knobs, bucket sizes."""

from __future__ import annotations

from ...budget.shape import Shape
from ...run import layout
from ...run.resolver import DP_BUCKET_SIZE, State, bucket_size_a_section_replaces
from ...upstream.releases import version_key

MIB = 2**20
# Model fields CommOverlapConfig writes; a value set on the model is overwritten, one set on comm_overlap wins.
COMM_OVERLAP_MODEL_FIELDS = ("tp_comm_overlap", "tp_comm_bootstrap_backend", "overlap_p2p_comm", "batch_p2p_comm",
                             "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "overlap_moe_expert_parallel_comm",
                             "delay_wgrad_compute")
DP_KNOBS = ("overlap_grad_reduce", "overlap_param_gather", "overlap_param_gather_with_optimizer_step", "align_param_gather", "bucket_size")


def asked(state: State, key: str):
    """What the user asked for at a dotted key (None: nothing, or null)."""
    return state.request.explicit.get(key)


def moved(state: State, owner: str, key: str, value, effective) -> list[dict]:
    """Fixes for a request overwritten by `owner` (comm_overlap.X, mixed_precision.X): carry `value` there (and onto
    `key` too when it is carried converted), or set `key` to what runs; the latter first when the user already asked
    for something at `owner` (that request won). value None: nothing to carry (null on comm_overlap means "Bridge
    picks")."""
    align = {key: effective}
    if value is None:
        return [align]
    move = {owner: value, **({key: value} if value != asked(state, key) else {})}
    return [align, move] if asked(state, owner) is not None else [move, align]


def deferral_kept(state: State) -> dict | None:
    """Embedding wgrad deferral as the user asked for it (comm_overlap's or the model's request), on comm_overlap
    with a limit Megatron-Core takes: the one asked, else 0 (its default: every micro-batch deferred), for
    CommOverlapConfig writes -1 where none is set (evalT U3). None where deferral was not asked for."""
    defer = next((v for v in (asked(state, f"{s}.defer_embedding_wgrad_compute") for s in ("comm_overlap", "model"))
                  if v is not None), None)
    if defer is not True:
        return None
    limit = next((v for v in (asked(state, f"{s}.wgrad_deferral_limit") for s in ("comm_overlap", "model"))
                  if isinstance(v, int) and not isinstance(v, bool) and v >= 0), 0)
    return {"comm_overlap.defer_embedding_wgrad_compute": True, "comm_overlap.wgrad_deferral_limit": limit}


def every_request(state: State, name: str, value) -> dict:
    """`name` set to `value` wherever it is requested (comm_overlap, optimizer, ddp), and where it takes effect."""
    out = {f"{s}.{name}": value for s in ("comm_overlap", "ddp", "optimizer") if asked(state, f"{s}.{name}") is not None}
    owner = "comm_overlap" if state.dp_overlap_applied else "optimizer"
    out.setdefault(f"{owner}.{name}", value)
    return out


def intended(state: State, name: str):
    """The value the user asked for a DP overlap knob: comm_overlap's when it has one (it wins once CommOverlapConfig
    applies), else ddp's or optimizer's; for overlap_param_gather asked both ways, on (as validate() does)."""
    values = [asked(state, f"{s}.{name}") for s in ("comm_overlap", "ddp", "optimizer")]
    if values[0] is not None:
        return values[0]
    values = [v for v in values[1:] if v is not None]
    if name == "overlap_param_gather" and len(values) == 2:
        return any(values)
    return values[0] if values else None


def owner_key(state: State, name: str, section: str = "model") -> str:
    """Where a comm_overlap-written field is requested: comm_overlap when the request has one, else the section."""
    return f"comm_overlap.{name}" if state.request.comm_overlap is not None else f"{section}.{name}"


def adopt_dp_knobs(state: State) -> dict:
    """The ddp/optimizer DP overlap values the user set, moved onto comm_overlap (where they win once
    CommOverlapConfig applies its DP settings); not where comm_overlap already requests that knob, nor a bucket size
    whose reading is ambiguous; a value that works against itself on this layout is dropped (set false) instead. And
    the config's own bucket size where the section is created over it (bucket_size_a_section_replaces)."""
    out = {}
    for name in DP_KNOBS:
        if (state.request.comm_overlap or {}).get(name) is not None:
            continue
        value = intended(state, name)
        if value is True and _works_against_itself(state, name):
            # another finding says it fails or hides nothing here: no fix carries it over, a move drops it
            out.update({f"{section}.{name}": False for section in ("ddp", "optimizer") if name in getattr(state.request, section)})
            continue
        if name == "bucket_size":
            value = bucket_to_move(state, value)
        if value is not None:
            out[f"comm_overlap.{name}"] = value
    if state.request.comm_overlap is None and state.data_parallel_size == 1 and state.model["context_parallel_size"] > 1 \
            and state.ddp["use_distributed_optimizer"]:
        # at DP 1 the section writes DP overlap off, though gradients reduce over the CP ranks (DP_OVERLAP_OFF_WITH_CP):
        # the config's own on is kept (recheck51 T5)
        out.update({f"comm_overlap.{name}": True for name in ("overlap_grad_reduce", "overlap_param_gather")
                    if state.ddp[name] and f"comm_overlap.{name}" not in out})
    kept = bucket_size_a_section_replaces(state.request, state.data_parallel_size * state.model["context_parallel_size"],
                                          state.ddp["use_distributed_optimizer"])
    if kept is not None and "comm_overlap.bucket_size" not in out:
        out["comm_overlap.bucket_size"] = kept
    return out


def _works_against_itself(state: State, name: str) -> bool:
    """overlap_param_gather without the distributed optimizer (PARAM_GATHER_WITHOUT_DISTRIBUTED_OPTIMIZER),
    align_param_gather without the interleaved schedule (ALIGN_PARAM_GATHER_WITHOUT_INTERLEAVING)."""
    if name == "overlap_param_gather":
        return not state.ddp["use_distributed_optimizer"]
    if name == "align_param_gather":
        return not layout.Layout.of(state.model, state.gpus).interleaved
    return False


def tp_overlap_precision_problem(model: dict) -> tuple[str, str] | None:
    """(precision, what fails) when Transformer Engine's userbuffers cannot carry this precision's tensors."""
    if model.get("fp4") and not model.get("fp8"):
        return "NVFP4", ("Bridge registers userbuffers for BF16 only (model.fp8 is unset) and the first TP-overlapped forward fails in "
                         "Transformer Engine (get_ub: 'UB for ... with use_fp8=True is not registered.'; TE 2.20 has no NVFP4 userbuffers path)")
    if model.get("fp8") and model.get("fp8_recipe") == "blockwise":
        return "blockwise FP8", ("Transformer Engine 2.20's userbuffers all-gather has no path for the blockwise FP8 quantizer "
                                 "('Unsupported quantizer for Userbuffers') at the first TP-overlapped forward")
    return None


def _bucket_fix(state: State, key: str) -> dict:
    """The bytes reading of a requested bucket size, where it takes effect; {} when that reading is ambiguous too.
    Beside the user's own comm_overlap.bucket_size (which wins once DP overlap applies) ddp's says the same."""
    winner = asked(state, "comm_overlap.bucket_size")
    if key == "ddp.bucket_size" and winner is not None:
        return {key: winner}
    params = bucket_to_move(state, state.request.explicit[key])
    if params is None:
        return {}
    if key == "ddp.bucket_size" and state.dp_overlap_applied:
        return {"comm_overlap.bucket_size": params, key: params}
    return {key: params}


def gradient_bytes(state: State) -> int:
    return 4 if state.ddp["grad_reduce_in_fp32"] else 2


def looks_like_bytes(value: int) -> bool:
    """A megabyte count (below 1 Mi), or a whole number of MiB up to 1 GiB other than Bridge's own 128 Mi default:
    figures people write when they think in bytes (26214400 = 25 MiB, PyTorch DDP's bucket_cap_mb)."""
    return value < MIB or (value % MIB == 0 and value <= 2**30 and value != DP_BUCKET_SIZE)


def bucket_parameters(state: State, value: int) -> int:
    """The parameter count of a bucket size that looks like bytes (or megabytes); the value itself otherwise."""
    if value is None or not looks_like_bytes(value):
        return value
    return (value * MIB if value < MIB else value) // gradient_bytes(state)


def bucket_to_move(state: State, value: int | None) -> int | None:
    """The bucket size to carry to where it wins: its parameter count; None when there is none, or when the bytes
    reading of it looks like bytes again (32 MiB read as bytes is 8 Mi parameters, itself a whole number of MiB), so
    that no fix guesses twice."""
    params = bucket_parameters(state, value)
    return None if params is None or (params != value and looks_like_bytes(params)) else params


_OVERLAP_WORDS = ("overlap", "p2p", "tp_comm", "cuda_graph", "dispatcher", "expert", "bucket", "fsdp", "sharding",
                  "distributed_optimizer", "param_gather", "grad_reduce", "nccl", "sharp", "ub_", "userbuffer",
                  "pipeline", "context_parallel", "cp_comm", "microbatch_group", "a2a", "deferral", "wgrad",
                  "communication", "high_priority", "decentralized")


_OFF_PATH_DDP = ("check_for_nan_in_grad", "check_for_large_grads")


SHAPE_KEYS = frozenset(f"model.{f}" for f in Shape.__dataclass_fields__)


def accounted_for(state: State, key: str) -> bool:
    """A field the resolver does not model but the answer accounts for all the same: every field of the model's
    shape, which the budget prices (budget/shape.py in_config reads them all; evalAH AH2: an answer never calls a key
    it prices read past); the CP exchange when it is the ring (p2p, the budget's; validate() checks the type), and the
    hierarchical CP sizes, which only a2a+p2p reads (validate() checks them, and that type is itself not modelled);
    the op fuser where TP_OVERLAP_OFF_MTP reads it (MTP layers with TP overlap); the CP exchange's type where
    validate() refuses the run on the hierarchical sizes it needs (CP_HIERARCHICAL_SIZES_INVALID reads it);
    DDP's reduce_scatter_with_fp32_accumulation, which the budget prices (budget/dp.py), but where Megatron-Core 0.18
    (Bridge 0.5.x) runs it on the all-reduce path with overlap_grad_reduce: its start_grad_sync then asserts a handle
    only the reduce-scatter branch sets (param_and_grad_buffer.py:705-712), which the answer does not say."""
    if key == "ddp.reduce_scatter_with_fp32_accumulation":
        return bool(state.ddp["use_distributed_optimizer"] or not state.ddp["overlap_grad_reduce"]
                    or version_key(state.request.release.megatron_core) >= (0, 19))
    if key in ("model.hierarchical_context_parallel_sizes", "dataset.seq_length") or key in SHAPE_KEYS:
        return True
    if key == "model.use_transformer_engine_op_fuser":
        return bool(state.model["tp_comm_overlap"] and state.model.get("mtp_num_layers"))
    if key == "model.cp_comm_type" and any(r.id == "CP_HIERARCHICAL_SIZES_INVALID" for r in state.rejections):
        return True  # validate() refuses the run on it: the answer's error reads it, no exchange runs (evalAE AE2-6)
    return key == "model.cp_comm_type" and str(state.request.context.get(key)).strip().lower() in ("p2p", "none", "null")


def on_overlap_path(key: str) -> bool:
    """A field that takes part in communication or its overlap: everything on ddp (but its NaN checks) and
    comm_overlap, and fields elsewhere whose name says so."""
    section, _, name = key.partition(".")
    if section == "ddp":
        return name not in _OFF_PATH_DDP
    return section == "comm_overlap" or any(w in name for w in _OVERLAP_WORDS)
