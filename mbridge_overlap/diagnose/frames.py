"""Where a traceback runs through code on the overlap path: the files (and functions) of Megatron-Bridge,
Megatron-Core, Transformer Engine, DeepEP and the distributed optimizers of the frameworks built on them, each with the
parallel dimension it serves and the config fields (Bridge's dotted keys) its code reads. diagnose names the innermost
such frame of a traceback whose exception no catalog message explains (a TypeError, an AttributeError, a bare assert).

Each row was read from the file at the release the catalog is of (Megatron-Bridge 0.6.2, Megatron-Core 0.19.2,
Transformer Engine 2.20.2; DeepEP main; torch 2.11.0): the fields are the ones the code reads there.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache

_DP = ["ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.bucket_size", "ddp.use_distributed_optimizer"]
_PP = ["comm_overlap.overlap_p2p_comm", "comm_overlap.batch_p2p_comm", "model.virtual_pipeline_model_parallel_size",
       "model.pipeline_model_parallel_size"]
_TP = ["model.sequence_parallel", "model.tensor_model_parallel_size"]
_UB = ["comm_overlap.tp_comm_overlap", "comm_overlap.tp_comm_overlap_cfg", "comm_overlap.tp_comm_bootstrap_backend"]
_EP = ["model.moe_token_dispatcher_type", "model.moe_flex_dispatcher_backend", "model.expert_model_parallel_size"]
_EP_OVERLAP = ["comm_overlap.overlap_moe_expert_parallel_comm", "comm_overlap.delay_wgrad_compute", *_EP]
_CP = ["model.context_parallel_size", "model.cp_comm_type"]
_FSDP = ["ddp.use_megatron_fsdp", "ddp.data_parallel_sharding_strategy", "ddp.average_in_collective"]
_GRID = ["model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size",
         "model.expert_model_parallel_size"]  # what sizes the process grid (parallel_state.initialize_model_parallel)
DP_FIELDS, PP_FIELDS, TP_FIELDS, CP_FIELDS, EP_FIELDS = _DP, _PP, _TP, _CP, _EP  # each dimension's, as the groups' (groups.py)
GRID_FIELDS = _GRID

# Transformer Engine's context-parallel attention functions (AttnFuncWithCPAndKVP2P, attn_forward_func_with_cp,
# flash_attn_p2p_communicate, get_cu_seqlens_on_cp_rank, ...); tools/gen_messages.py catalogs their messages
TE_CP_FUNCTIONS = r"WithCP|with_cp|(?:^|[._])cp_|_cp(?:$|[._])|flash_attn_(?:p2p|a2a)_communicate"
NAMES = {"tp": "TP", "pp": "PP", "dp": "DP", "ep": "EP (MoE)", "cp": "CP", "grid": "process-grid",
         "p2p": "PP or CP"}  # the dimensions, as shown; p2p: a send or receive of torch (isend, irecv), either one's
# (path regex, function regex or None, dimension, fields): the first row that a frame matches decides
ROWS = [
    (r"megatron/bridge/training/comm_overlap\.py$", None, "tp", _UB + ["comm_overlap.overlap_p2p_comm", "comm_overlap.overlap_grad_reduce"]),
    (r"megatron/bridge/training/initialize\.py$", r"_initialize_tp_communicators", "tp", _UB),
    (r"megatron/core/distributed/fsdp/", None, "dp", _FSDP),
    (r"megatron/core/distributed/(?:param_and_grad_buffer|distributed_data_parallel|finalize_model_grads|data_parallel_base)\.py$",
     None, "dp", _DP),
    (r"megatron/core/optimizer/distrib_optimizer\.py$", None, "dp", ["ddp.use_distributed_optimizer", "ddp.overlap_param_gather"]),
    (r"(?:apex/contrib/optimizers|nemo/core/optim)/distributed_fused_adam\.py$", None, "dp",
     ["optimizer.use_distributed_optimizer", "ddp.overlap_grad_reduce", "ddp.overlap_param_gather"]),
    (r"megatron/core/pipeline_parallel/(?:combined_1f1b|utils)\.py$", None, "ep", _EP_OVERLAP),
    (r"megatron/core/models/common/model_chunk_schedule_plan\.py$", None, "ep", _EP_OVERLAP),
    (r"megatron/core/pipeline_parallel/(?:schedules|p2p_communication)\.py$", None, "pp", _PP + ["model.variable_seq_lengths"]),
    (r"megatron/core/tensor_parallel/(?:mappings|layers)\.py$", None, "tp", _TP),
    # legacy_a2a_token_dispatcher.py: Megatron-Core 0.9-0.12's alltoall_seq dispatcher, the same EP all-to-all
    (r"megatron/core/transformer/moe/(?:token_dispatcher|legacy_a2a_token_dispatcher|fused_a2a|moe_layer|moe_utils)\.py$",
     None, "ep", _EP),
    (r"(?:^|/)(?:deep_ep|hybrid_ep|DeepEP)/", None, "ep", _EP),
    (r"transformer_engine/pytorch/module/base\.py$", r"(?:initialize_ub|get_ub|destroy_ub|fill_userbuffers)", "tp", _UB),
    (r"transformer_engine/pytorch/(?:cpp_extensions/gemm|module/(?:linear|layernorm_linear|layernorm_mlp))\.py$", None, "tp",
     _UB + _TP),
    (r"transformer_engine/pytorch/(?:attention/dot_product_attention/context_parallel|dot_product_attention/context_parallel)\.py$",
     None, "cp", _CP),
    (r"transformer_engine/pytorch/attention\.py$", TE_CP_FUNCTIONS, "cp", _CP),  # TE 2.2 and older: CP inside attention.py
    # torch's async TP (micro-pipeline TP, torch._inductor's fx_passes/micro_pipeline_tp.py rewrites a TP all-gather or
    # reduce-scatter and its matmul into these fused ops, torchtitan's enable_async_tensor_parallel): the TP
    # collectives of sequence parallel overlapped with the GEMM over symmetric memory, userbuffers' counterpart
    (r"torch/distributed/_symmetric_memory/__init__\.py$",
     r"fused_all_gather|fused_matmul_reduce_scatter|fused_scaled_matmul_reduce_scatter|_pipelined_|all_gather_and_consume"
     r"|produce_and_all2all", "tp", _TP),
    (r"megatron/core/parallel_state\.py$", None, "grid", _GRID),
]
_COMPILED = [(re.compile(p), re.compile(f) if f else None, dim, fields) for p, f, dim, fields in ROWS]
# Frames of torch that only the overlap path reaches in a Megatron run, taken where no frame above them is on the path
# (a paste that starts inside torch), the outermost first: Megatron-Core batches the pipeline's sends and receives with
# batch_isend_irecv (pipeline_parallel/p2p_communication.py), which enters _coalescing_manager itself; it issues the
# DP buckets' reduce-scatter and all-gather through _coalescing_manager (distributed/param_and_grad_buffer.py);
# Transformer Engine's quantized sequence-parallel all-gathers also do, from its module frames, which are on the path
# as TP rows above
FALLBACK = [(re.compile(r"torch/distributed/distributed_c10d\.py$"), re.compile(r"^batch_isend_irecv$"), "pp", _PP,
             "as Megatron-Core's pipeline sends and receives call it (p2p_communication.py)"),
            (re.compile(r"torch/distributed/distributed_c10d\.py$"), re.compile(r"^_coalescing_manager$"), "dp", _DP,
             "as Megatron-Core's DP buckets call it, overlap on or off (param_and_grad_buffer.py start_grad_sync)"),
            (re.compile(r"torch/distributed/distributed_c10d\.py$"), re.compile(r"^(?:isend|irecv)$"), "p2p", _PP + _CP,
             "as Megatron-Core's unbatched pipeline sends and receives call it (p2p_communication.py _p2p_ops, "
             "batch_p2p_comm false), and Transformer Engine's context-parallel ring (cp_comm_type p2p, "
             "flash_attn_p2p_communicate: unbatched unless NVTE_BATCH_MHA_P2P_COMM=1, or CP = 2 on a GPU of compute "
             "capability below 10.0)")]
# torch's isend and irecv on a group, as a traceback's code line shows them where a paste kept the code and left out
# the frame's `File "..."` line (Megatron-LM #792): the statement -> the function it is the body of. torch 2.11.0
# distributed_c10d.py:2552 (isend) and :2597 (irecv); torch 1.x-2.4 spelled the rank group_dst_rank / group_src_rank
# and irecv's group pg. The WORLD group's forms (`default_pg.send(...)`, `pg.recv([tensor], src, tag)`) are no subgroup's.
TORCH_P2P_CODE = {"return group.send([tensor], group_dst, tag)": "isend",
                  "return group.send([tensor], group_dst_rank, tag)": "isend",
                  "return group.recv([tensor], group_src, tag)": "irecv",
                  "return pg.recv([tensor], group_src_rank, tag)": "irecv"}
TORCH_C10D = "torch/distributed/distributed_c10d.py"
# Exceptions that say the raising code itself is wrong (a name it never bound): raised in torch's own frame (a FALLBACK
# one, no Megatron frame on the path above), a bug of torch's that no overlap setting explains (fresh19 F19-2: torch
# 2.7.1's _coalescing_manager with NCCL's socket transport, reached with overlap_grad_reduce false too)
TORCH_BUG = re.compile(r"^(?:UnboundLocalError|NameError)$")

# Frames that run the model for the pipeline schedule or for DDP (whose files are on the path for what else they
# do): what is raised below them is the model's, unless a deeper frame is on the path again
MODEL_CALLS = [(re.compile(r"megatron/core/pipeline_parallel/schedules\.py$"),
                re.compile(r"^(?:forward_step|forward_step_calc_loss|backward_step|custom_backward)$")),
               (re.compile(r"megatron/core/distributed/distributed_data_parallel\.py$"), re.compile(r"^forward$"))]
# Code that code on the path calls without the exception becoming another's: torch, the Python standard library,
# Megatron-Core's decorators, Transformer Engine's collective helpers. Any other frame below the innermost one on
# the path (the model's own layers, a framework's step function) means the exception was raised there.
# Code of Megatron's family: a frame of it makes a traceback's words about a dimension Megatron's (terms.py). The
# frameworks that train through Megatron-Core (slime, FlagScale, NeMo's libraries) count whole; those whose own
# trainers have their own sequence parallelism (verl's FSDP workers, ms-swift's HF trainer) only where the path
# names megatron.
MEGATRON_FAMILY = re.compile(r"megatron|mcore|transformer_engine|(?:^|/)nemo(?:_\w+)?/|(?:^|/)apex/|(?:^|/)slime(?:_plugins)?/"
                             r"|(?:^|/)flagscale/", re.I)
# Megatron-Core's own code and what it calls (Transformer Engine, apex), and Bridge's: a traceback through Megatron-Core
# from code of neither is a run another framework drives (evalY Y3-1: verl's Megatron workers), not Bridge's.
CORE = re.compile(r"megatron/core/|(?:^|/)transformer_engine/|(?:^|/)apex/")
BRIDGE = re.compile(r"megatron/bridge/")
NEUTRAL = re.compile(r"(?:^|/)torch/|(?:^|/)bin/torchrun$|/lib/python3[\d.]*/(?!(?:site|dist)-packages/)|^<|megatron/core/utils\.py$"
                     r"|transformer_engine/pytorch/distributed\.py$")

# Attributes whose absence (AttributeError: ... has no attribute 'X') is an overlap setting or structure another
# release or framework lacks: the field it names, and its dimension.
ATTRIBUTES = {
    "overlap_p2p_comm": ("pp", ["comm_overlap.overlap_p2p_comm"]),
    "batch_p2p_comm": ("pp", ["comm_overlap.batch_p2p_comm"]),
    "overlap_grad_reduce": ("dp", ["ddp.overlap_grad_reduce"]),
    "overlap_param_gather": ("dp", ["ddp.overlap_param_gather"]),
    "tp_comm_overlap": ("tp", ["comm_overlap.tp_comm_overlap"]),
    "overlap_moe_expert_parallel_comm": ("ep", ["comm_overlap.overlap_moe_expert_parallel_comm"]),
    "grad_data_size": ("dp", _DP),
    "grad_data": ("dp", _DP),
    "main_grad": ("dp", ["ddp.overlap_grad_reduce", "model.gradient_accumulation_fusion"]),
    "no_sync_func": ("dp", ["ddp.overlap_grad_reduce"]),
    "param_and_grad_buffer": ("dp", _DP),
    "use_distributed_optimizer": ("dp", ["ddp.use_distributed_optimizer"]),
}
_ATTRIBUTE = re.compile(r"AttributeError: [^\n]{0,400}?has no attribute '(\w+)'")
# A call whose keywords another release or framework of the overlap code does not take (or no longer takes): the
# keyword, when it is an overlap field; else the callee, when it is a class of the overlap path
_KEYWORD = re.compile(r"TypeError: ([\w.<>]+)\(\) got an unexpected keyword argument '(\w+)'")
CLASSES = [
    (re.compile(r"DistributedOptimizer$"), "dp", ["ddp.use_distributed_optimizer", "ddp.overlap_param_gather"]),
    (re.compile(r"^(?:DistributedDataParallel|_?ParamAndGradBuffer|_?ParamAndGradBucketGroup)$"), "dp", _DP),
    (re.compile(r"^(?:CommOverlapConfig|TransformerLayerTPOverlapCfg|_CommOverlapConfig)$"), "tp", _UB),
]


# Megatron-Core's tensor-parallel communication functions that models call (megatron/core/tensor_parallel/mappings.py
# of 0.19.2, lines 492-595): a traceback's code line calling one is on the TP path as a frame inside it would be
MAPPINGS = "megatron/core/tensor_parallel/mappings.py"
MAPPING_FUNCTIONS = ("copy_to_tensor_model_parallel_region", "reduce_from_tensor_model_parallel_region",
                     "scatter_to_tensor_model_parallel_region", "gather_from_tensor_model_parallel_region",
                     "scatter_to_sequence_parallel_region", "gather_from_sequence_parallel_region",
                     "reduce_scatter_to_sequence_parallel_region", "all_gather_last_dim_from_tensor_parallel_region",
                     "reduce_scatter_last_dim_to_tensor_parallel_region", "all_to_all_sp2hp", "all_to_all_hp2sp")
_CALL = re.compile(r"(?:([A-Za-z_]\w{0,80})\.)?([A-Za-z_]\w{5,80})\s*\(")
# torch.distributed's collectives, which Megatron-Core's functions share names with (torch's own calls are no path's)
TORCH_NAMES = frozenset({"all_to_all", "all_to_all_single", "all_gather_into_tensor", "reduce_scatter_tensor",
                         "all_gather_object", "batch_isend_irecv"})
MIN_CALLED = 10  # a function name this long (with an underscore) names one function, not a common word (forward)


@lru_cache(maxsize=8)
def called_functions(catalog) -> dict:
    """Function name -> (file, dimension, fields) of the functions on the overlap path that a model's code calls by
    name: MAPPING_FUNCTIONS, and the catalog's functions in files on the path (ROWS) whose name is distinctive (an
    underscore, MIN_CALLED characters, one file only). Built once a catalog (as fuzzy.for_catalog is)."""
    out: dict = {}
    seen: dict = {}
    for e in catalog.entries:
        if e.origin != "python" or not e.file or not e.function:
            continue
        name = e.function.rsplit(".", 1)[-1]
        if len(name) < MIN_CALLED or "_" not in name.strip("_") or name.startswith("__") or name in TORCH_NAMES:
            continue
        seen.setdefault(name, set()).add(e.file)
    for name, files in seen.items():
        if len(files) == 1 and (where := overlap_frame(next(iter(files)), name)) is not None:
            out[name] = (next(iter(files)), *where)
    for name in MAPPING_FUNCTIONS:
        out[name] = (MAPPINGS, *overlap_frame(MAPPINGS, name))
    return out


def call_on_path(code: str, catalog) -> tuple[str, str, str, list] | None:
    """(file, function, dimension, fields) of the first function on the overlap path (called_functions) that a
    traceback's code line calls (fresh16 F16-5: `embeddings = tensor_parallel.scatter_to_sequence_parallel_region(x)`
    in a model's frame): a MAPPING_FUNCTIONS name however called, another only through its module or package's name
    (`parallel_state.initialize_model_parallel(`); None when it calls none."""
    if "(" not in code:
        return None
    known = called_functions(catalog)
    if not any(m[2] in known for m in _CALL.finditer(code)):  # (the raw line names none: no need to read it as code)
        return None
    for owner, name in calls(code):
        got = known.get(name)
        if got is None:
            continue
        # a name the catalog knows a function of, called through its module (`parallel_state.f(`, `tensor_parallel.f(`):
        # a bare or a method's call of the name may be another package's function of that name
        if got[0] != MAPPINGS or name not in MAPPING_FUNCTIONS:
            if owner is None or owner not in got[0].rsplit(".", 1)[0].split("/")[-2:]:
                continue
        return got[0], name, got[1], list(got[2])
    return None


def calls(code: str) -> list[tuple[str | None, str]]:
    """(the name before the dot or None, the function's name) of every call a traceback's code line makes, in the
    line's order: read by Python's own parser where the line parses alone (fuzzY Y2-2: a name in a comment or inside
    a string is no call: `x = my_fn(x)  # was tensor_parallel.scatter_to_sequence_parallel_region(x)`); where it does
    not (a statement's first line, `if f(x):`), its comments and string literals are taken out first."""
    try:
        tree = ast.parse(code.strip())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [(m[1], m[2]) for m in _CALL.finditer(_code_only(code))]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                found.append((f.lineno, f.col_offset, None, f.id))
            elif isinstance(f, ast.Attribute):
                v = f.value
                owner = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else None
                found.append((f.lineno, f.col_offset, owner, f.attr))
    return [(owner, name) for _, _, owner, name in sorted(found, key=lambda x: x[:2])]


_STRING_OR_COMMENT = re.compile(r"[rRbBuUfF]{0,2}(?:'''(?:[^\\]|\\.)*?(?:'''|$)"
                                r'|"""(?:[^\\]|\\.)*?(?:"""|$)'
                                r"""|'(?:[^'\\\n]|\\.)*'?|"(?:[^"\\\n]|\\.)*"?)|#.*""", re.S)


def _code_only(code: str) -> str:
    """A code line without its comment and with each string literal's inside taken out (an unclosed one to the
    line's end, a triple quote as an empty string): what is left are the names and operators Python runs."""
    return _STRING_OR_COMMENT.sub(lambda m: "" if m[0].startswith("#") else '""', code)


def overlap_frame(path: str, function: str) -> tuple[str, list] | None:
    """(dimension, fields) of a traceback frame on the overlap path; None for a frame elsewhere."""
    path = path.replace("\\", "/")
    if any(rx.search(path) and fn.search(function or "") for rx, fn in MODEL_CALLS):
        return None
    for rx, fn, dim, fields in _COMPILED:
        if rx.search(path) and (fn is None or fn.search(function or "")):
            return dim, list(fields)
    return None


def shortened_frame(path: str, function: str, catalog) -> tuple[str, str, list] | None:
    """(the file, dimension, fields) of a frame of a condensed chain or rich's panel (messages.parse_condensed), whose
    function may be unknown ("") and whose path may be cut to its last parts (`param_and_grad_buffer.py`): as
    overlap_frame, except that with no function a file of MODEL_CALLS is not placed (its model call is not the path),
    and that a relative path no row matches stands for the catalog's files that end with it, where its name is
    distinctive (an underscore and MIN_CALLED characters: `module.py` is torch's too) and every such file is on the
    path in one dimension (their fields together: Megatron-Core's and Megatron FSDP's param_and_grad_buffer.py)."""
    path = path.replace("\\", "/")
    where = _placed(path, function)
    if where is not None:
        return (path, *where)
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    if path.startswith(("/", "~", ".")) or ":" in path or len(stem) < MIN_CALLED or "_" not in stem.strip("_"):
        return None
    files = [f for f in catalog.files_named(path.rsplit("/", 1)[-1]) if f == path or f.endswith("/" + path)]
    found = [_placed(f, function) for f in files]
    if not found or None in found or len({dim for dim, _ in found}) > 1:
        return None
    return files[0], found[0][0], list(dict.fromkeys(f for _, fields in found for f in fields))


def _placed(path: str, function: str) -> tuple[str, list] | None:
    """overlap_frame of a frame whose function may be unknown (""): then a file of MODEL_CALLS is not placed."""
    if not function and any(rx.search(path) for rx, _ in MODEL_CALLS):
        return None
    return overlap_frame(path, function)


def fallback_frame(path: str, function: str) -> tuple[str, str, list] | None:
    """(how the path reaches it, dimension, fields) of a FALLBACK frame: on the path where no frame above it is."""
    path = path.replace("\\", "/")
    return next(((via, dim, list(fields)) for rx, fn, dim, fields, via in FALLBACK
                 if rx.search(path) and fn.search(function or "")), None)


def neutral(path: str) -> bool:
    """Whether a frame below one on the overlap path leaves the exception that path's (NEUTRAL)."""
    return bool(NEUTRAL.search(path.replace("\\", "/")))


def missing_attribute(line: str) -> tuple[str, str, list, str | None] | None:
    """(attribute, dimension, fields, callee) of an AttributeError that names an overlap attribute (callee None), or
    of a TypeError whose call passes an overlap field as a keyword the callee does not take, or calls a class of the
    overlap path so (callee: what was called)."""
    m = _ATTRIBUTE.search(line)
    if m and m[1] in ATTRIBUTES:
        dim, fields = ATTRIBUTES[m[1]]
        return m[1], dim, list(fields), None
    m = _KEYWORD.search(line)
    if m is None:
        return None
    if m[2] in ATTRIBUTES:
        dim, fields = ATTRIBUTES[m[2]]
        return m[2], dim, list(fields), m[1]
    for owner in m[1].split(".")[-2:]:  # Class.method() or Class()
        for rx, dim, fields in CLASSES:
            if rx.search(owner):
                return owner, dim, list(fields), m[1]
    return None


_NONE_ATTRIBUTE = re.compile(r"AttributeError: 'NoneType' object has no attribute '(size|rank)'")


def none_process_group(exception: str, code: str | None) -> str | None:
    """The process group a failing code line calls .size() or .rank() on (ProcessGroup's own methods), where the
    exception says that object is None: the expression, as the code names it (a *_group / *_pg / pg / process_group
    attribute or a get_*_group() call), or None (fix21 C: a group never initialized, like Megatron-Core's "... parallel
    group is not initialized" asserts, is no overlap setting)."""
    m = _NONE_ATTRIBUTE.search(exception)
    if m is None or not code:
        return None
    call = re.search(r"((?:\w+\.)*(?:\w*_group|\w*_pg|pg|process_group|get_\w*group\(\)))\." + m[1] + r"\(\)", code)
    return call[1] if call else None

