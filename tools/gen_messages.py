"""Generate mbridge_overlap/data/releases/VERSION/messages.json, the catalog of messages the `diagnose` verb matches
log lines against (mbridge_overlap/diagnose/messages.py reads it), from the installed packages' Python sources:

    $(scripts/bridge_env.sh [--release VERSION] --print-python) tools/gen_messages.py [--check]
    python3 tools/gen_messages.py --release 0.5.1 [--check]    # runs itself again with that release's venv

Every raise, assert, warnings.warn / warn_rank_0, logger call (logger.warning|error|info|debug, log_single_rank,
log_on_each_pipeline_stage) and print / print_rank_0 / print_rank_last / barrier_and_log in the files of SCAN whose
message is a literal, an f-string, a .format() or %-format of a literal, or a concatenation (f-string fields become
pattern groups), read with `ast` (nothing is imported from the packages); raises and asserts without a message, or with
one computed at run time, are recorded too (template null), since a traceback's last frame names them. Each entry
records the tests of the if/elif statements it sits under in its function (`branch`, outermost first; in an else or
elif branch the tests before it as `not (TEST)`), as an assert records its own test (`condition`): the config fields
that decide whether it runs, where its words name none. Each entry gets a topic; files marked "topic" keep only the
messages that fall in an overlap topic. A message whose text starts with a field of any text records the values its
code can put there where the source says (`lead_values`: literals, a conditional of literals, a literal table, a
parameter every call in the package passes a literal for), else `lead_open`. Each entry records every other place of
its package writing the same text (`raised_elsewhere`: file, function, line, whether the catalog keeps it there, i.e.
on the overlap path; in a site-packages scan every file of the package is read for it), and `off_path_too` where one
is off the path while the message's topic is the path's and its own words name no overlap topic (the text alone does
not place it: diagnose/causes.py off_path_too). The native messages of mbridge_overlap/data/native_messages.yaml (not in Python
source) are checked (each example matches its pattern, each cites a source) and copied in. The file holds message
templates, patterns and locations only, no source code.
--check regenerates in memory and exits 1 when the committed file differs (tests/bridge/test_messages_catalog.py).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import importlib.util
import json
import re
import string
import subprocess
import sys
import warnings
from pathlib import Path

sys.dont_write_bytecode = True
ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "mbridge_overlap" / "data"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import generated  # noqa: E402  (standard library only)

NATIVE = DATA / "native_messages.yaml"

_spec = importlib.util.spec_from_file_location("_mbo_messages", ROOT / "mbridge_overlap" / "diagnose" / "messages.py")
M = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = M  # dataclasses look their module up while the class is built
_spec.loader.exec_module(M)
_fspec = importlib.util.spec_from_file_location("_mbo_frames", ROOT / "mbridge_overlap" / "diagnose" / "frames.py")
_frames = importlib.util.module_from_spec(_fspec)
_fspec.loader.exec_module(_frames)
TE_CP_FUNCTIONS = _frames.TE_CP_FUNCTIONS  # Transformer Engine's context-parallel attention functions

# The installed packages, by the directory that marks each in site-packages, and the short name ids use.
PACKAGES = {
    "megatron-bridge": ("megatron/bridge", "bridge"),
    "megatron-core": ("megatron/core", "mcore"),
    "transformer-engine": ("transformer_engine", "te"),
}
# What is read, relative to site-packages (globs). "all": every message of the file is kept, with topic "other" where
# no overlap topic fits (the file is on the overlap path as a whole); "all:REGEX": the same for the functions whose
# qualified name REGEX matches, "topic" elsewhere in the file; "only:REGEX": those functions' messages and no other;
# "topic": only messages whose text names a topic
# (keywords; the file's default topic does not count); "overlap": only those whose text names a communication-overlap
# topic (not mixed_precision or parallel_state alone). The first pattern that names a file decides. A pattern a
# release lacks is listed in the header's `scanned.PACKAGE.missing`.
SCAN = {
    "megatron-bridge": [
        ("megatron/bridge/training/comm_overlap.py", "all"),
        ("megatron/bridge/training/config.py", r"all:^(ConfigContainer\.|[a-z_]+$)"),
        ("megatron/bridge/training/initialize.py", "all"),
        ("megatron/bridge/training/mixed_precision.py", "all"),
        ("megatron/bridge/training/train.py", "all"),
        ("megatron/bridge/training/setup.py", "all"),
        ("megatron/bridge/training/pretrain.py", "all"),
        ("megatron/bridge/training/optim.py", "all"),
        ("megatron/bridge/training/flex_dispatcher_backend.py", "all"),
        ("megatron/bridge/models/transformer_config.py", "all"),
        ("megatron/bridge/models/gpt_provider.py", "overlap"),
        ("megatron/bridge/models/mla_provider.py", "overlap"),
        ("megatron/bridge/models/hybrid/*.py", "overlap"),
        ("megatron/bridge/models/mamba/mamba_provider.py", "overlap"),
        ("megatron/bridge/training/gpt_step.py", "overlap"),
        ("megatron/bridge/training/checkpointing.py", "overlap"),
        ("megatron/bridge/training/utils/*.py", "overlap"),
        ("megatron/bridge/utils/common_utils.py", "overlap"),
        ("megatron/bridge/peft/lora_layers.py", "overlap"),
        ("megatron/bridge/peft/utils.py", "overlap"),
        ("megatron/bridge/recipes/run_plugins.py", "overlap"),
    ],
    "megatron-core": [
        ("megatron/core/distributed/*.py", "all"),
        ("megatron/core/distributed/fsdp/*.py", "all"),
        ("megatron/core/distributed/fsdp/src/**/*.py", "all"),
        ("megatron/core/optimizer/distrib_optimizer.py", "all"),
        ("megatron/core/optimizer/__init__.py", "all"),
        ("megatron/core/optimizer/optimizer_config.py", "all"),
        ("megatron/core/optimizer/*.py", "overlap"),
        ("megatron/core/pipeline_parallel/schedules.py", "all"),
        ("megatron/core/pipeline_parallel/p2p_communication.py", "all"),
        ("megatron/core/pipeline_parallel/utils.py", "all"),
        ("megatron/core/pipeline_parallel/combined_1f1b.py", "all"),
        ("megatron/core/parallel_state.py", "all"),
        ("megatron/core/model_parallel_config.py", "all"),
        ("megatron/core/transformer/transformer_config.py", "topic"),
        ("megatron/core/transformer/transformer_block.py", "overlap"),
        ("megatron/core/models/hybrid/hybrid_layer_allocation.py", "topic"),  # a hybrid model's pipeline split (recheck55 AB5)
        ("megatron/core/transformer/transformer_layer.py", "overlap"),
        ("megatron/core/transformer/moe/token_dispatcher.py", "all"),  # the EP exchange itself: every message is EP's
        ("megatron/core/transformer/moe/fused_a2a.py", "all"),
        # Megatron-Core 0.9-0.12's alltoall_seq dispatcher (MoEAlltoAllSEQTokenDispatcher, moe_token_dispatcher_type
        # "alltoall_seq"): the same EP all-to-all over get_expert_model_parallel_group(), every message is EP's
        ("megatron/core/transformer/moe/legacy_a2a_token_dispatcher.py", "all"),
        ("megatron/core/transformer/moe/*.py", "overlap"),
        ("megatron/core/models/common/model_chunk_schedule_plan.py", "overlap"),
        ("megatron/core/extensions/transformer_engine.py", "overlap"),
        ("megatron/core/tensor_parallel/layers.py", "overlap"),
        ("megatron/core/tensor_parallel/mappings.py", "all"),  # sequence parallel's collectives: every message is TP's
        ("megatron/core/nccl_allocator.py", "all"),
        ("megatron/core/fp8_utils.py", "overlap"),
        ("megatron/core/utils.py", "overlap"),
        ("megatron/core/hyper_comm_grid.py", "topic"),
        ("megatron/core/process_groups_config.py", "topic"),
        ("megatron/core/_rank_utils.py", "overlap"),
        # Megatron-LM's own training loop (shipped in the megatron-core wheel; Bridge does not run it): its overlap
        # messages, so that logs of Megatron-LM runs quoted upstream are recognised too
        ("megatron/training/arguments.py", "overlap"),
        ("megatron/training/yaml_arguments.py", "overlap"),  # Megatron-LM's YAML argument path: the same checks, older wording
        ("megatron/training/initialize.py", "overlap"),
        # the rest of its training code (training.py's loop and data setup, checkpointing.py, ...; the wheel carries
        # megatron/training from Megatron-Core 0.17 on): the messages whose words or assert condition name an overlap
        # topic, e.g. training.py's "vp_stage must be a kwarg in train_valid_test_dataset_provider when using virtual
        # pipeline parallelism" (raised only with virtual_pipeline_model_parallel_size set)
        ("megatron/training/*.py", "overlap"),
    ],
    "transformer-engine": [
        ("transformer_engine/pytorch/module/base.py", "all"),
        ("transformer_engine/pytorch/module/linear.py", "overlap"),
        ("transformer_engine/pytorch/module/layernorm_linear.py", "overlap"),
        ("transformer_engine/pytorch/module/layernorm_mlp.py", "overlap"),
        ("transformer_engine/pytorch/module/grouped_linear.py", "overlap"),
        ("transformer_engine/pytorch/module/_common.py", "overlap"),
        ("transformer_engine/pytorch/distributed.py", "overlap"),
        ("transformer_engine/pytorch/ops/fused/userbuffers_*.py", "all"),
        ("transformer_engine/pytorch/ops/basic/basic_linear.py", "overlap"),
        ("transformer_engine/pytorch/cpp_extensions/gemm.py", "overlap"),
        ("transformer_engine/pytorch/transformer.py", "overlap"),
        ("transformer_engine/pytorch/utils.py", "overlap"),
        # context parallelism's exchange in attention (ring P2P, all-gather, a2a, a2a+p2p): every message is CP's; TE
        # 2.2 and older kept it in attention.py beside everything else attention does, so there only its CP functions
        ("transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py", "all"),
        ("transformer_engine/pytorch/attention.py", "only:" + TE_CP_FUNCTIONS),
    ],
}
TOPICS = ("tp_overlap", "userbuffers", "dp_overlap", "distributed_optimizer", "pipeline", "fsdp", "mixed_precision",
          "launch_env", "parallel_state", "moe_overlap", "context_parallel", "other")

# Keyword rules over a message's text (template, fields, condition) and its function's name; the first that fires.
RULES = [
    ("userbuffers", r"userbuffer|Userbuffer|\bUB\b|UBuf|\bub_|_ub\b|initialize_ub|UB_SKIPMC|[Mm]ulticast|"
                    r"[Bb]ootstrap(?:ping)? Userbuffers|bootstrap backend|tp_comm_bootstrap"),
    ("launch_env", r"CUDA_DEVICE_MAX_CONNECTIONS|\bNVTE_[A-Z_]+|\bNCCL_[A-Z_]+|TORCH_NCCL|MASTER_PORT|MASTER_ADDR|"
                   r"\bRANK\b|LOCAL_RANK|WORLD_SIZE|SLURM_[A-Z]+|"
                   r"environment variable|[Ee]nv var|[Ff]light recorder|PYTORCH_CUDA_ALLOC_CONF"),
    ("moe_overlap", r"overlap_moe_expert_parallel_comm|[Dd]elay(?:ed)?[ _]wgrad|A2A [Oo]verlap|EP A2A|a2a overlap|"
                    r"\bEP\b[^.]*overlap|overlap[^.]*\bEP\b|[Ff]lex.?(?:token )?dispatch|deepep|DeepEP|hybridep|HybridEP|NCCL EP|"
                    r"combined_1f1b|ep_overlap|moe_shared_expert_overlap|shared.expert.overlap|moe_expert_rank_capacity_factor"),
    ("tp_overlap", r"tp_comm|tp-comm|[Tt]ensor [Pp]arallel [Cc]ommunication|[Cc]omm\+GEMM|GEMM overlap|"
                   r"sequence[ _-]parallel|tp_comm_buffer_name|TP overlap|[Tt]ensor parallel overlap|overlap_rs_dgrad|"
                   r"symmetric_ar|async grad allreduce|comm_overlap|CommOverlap"),
    ("pipeline", r"p2p|P2P|[Pp]ipeline|virtual_pipeline|micro-?batch(?!-size)|microbatch|vp_stage|vp_size|"
                 r"interleaved (?:schedule|pipeline|1F1B)|interleaving|send_next|"
                 r"recv_prev|send_prev|recv_next|tensor_shape|variable_seq_lengths"),
    ("fsdp", r"fsdp|FSDP|[Ff]ully[ _][Ss]hard"),
    ("distributed_optimizer", r"[Dd]istributed [Oo]ptimizer|distributed_optimizer|DistributedOptimizer|distrib_optim|"
                              r"param_gather|param all-gather|parameter all-gather|precision_aware_optimizer|"
                              r"optimizer instances|num_distributed_optimizer_instances|Setting up optimizer with config"),
    ("dp_overlap", r"overlap_grad_reduce|grad_reduce|grad reduce|[Bb]ucket|grad_sync|grad sync|all-?reduce|"
                   r"reduce-?scatter|nccl_ub|average_in_collective|DistributedDataParallel|\bddp\b|\bDDP\b|main_grad|"
                   r"param\.grad|gradient reduction|data[ _-]parallel|no_sync"),
    ("mixed_precision", r"fp8|FP8|fp4|FP4|mxfp8|MXFP8|nvfp4|NVFP4|bf16|fp16|[Pp]recision|grad_scaler|loss scal"),
    ("parallel_state", r"tensor[ _-]model[ _-]parallel|pipeline[ _-]model[ _-]parallel|context[ _-]parallel|"
                       r"expert[ _-](?:model[ _-])?parallel|process group|ProcessGroup|parallel_state|world[ _]size|"
                       r"HyperCommGrid|model[ _-]parallel"),
]
RULES = [(t, re.compile(rx)) for t, rx in RULES]
# A keyword topic these override a file's own topic; any other keyword topic yields to it.
STRONG = {"userbuffers", "launch_env", "moe_overlap", "fsdp"}
# Files (prefixes) whose every message has one topic, and files whose messages default to one.
FORCED = {
    "megatron/core/distributed/fsdp/": "fsdp",
    "megatron/core/distributed/torch_fully_sharded": "fsdp",
    "transformer_engine/pytorch/ops/fused/userbuffers_": "userbuffers",
}
FORCED_FUNCTIONS = {  # (file, function prefix) -> topic
    ("transformer_engine/pytorch/module/base.py", "initialize_ub"): "userbuffers",
    ("transformer_engine/pytorch/module/base.py", "get_ub"): "userbuffers",
    ("transformer_engine/pytorch/module/base.py", "destroy_ub"): "userbuffers",
    ("transformer_engine/pytorch/module/base.py", "fill_userbuffers"): "userbuffers",
    ("megatron/bridge/training/initialize.py", "_initialize_tp_communicators"): "userbuffers",
    ("megatron/bridge/training/config.py", "ConfigContainer._validate_and_apply_megatron_fsdp_configs"): "fsdp",
}
DEFAULTS = {
    "megatron/bridge/training/comm_overlap.py": "tp_overlap",
    "megatron/bridge/training/mixed_precision.py": "mixed_precision",
    "megatron/bridge/training/flex_dispatcher_backend.py": "moe_overlap",
    "megatron/core/distributed/": "dp_overlap",
    "megatron/core/nccl_allocator.py": "dp_overlap",
    "megatron/core/optimizer/distrib_optimizer.py": "distributed_optimizer",
    "megatron/core/pipeline_parallel/combined_1f1b.py": "moe_overlap",
    "megatron/core/pipeline_parallel/": "pipeline",
    "megatron/core/parallel_state.py": "parallel_state",
    "megatron/core/hyper_comm_grid.py": "parallel_state",
    "megatron/core/process_groups_config.py": "parallel_state",
    "megatron/core/model_parallel_config.py": "parallel_state",
    "megatron/core/models/common/model_chunk_schedule_plan.py": "moe_overlap",
    "megatron/core/tensor_parallel/mappings.py": "tp_overlap",  # the TP / sequence-parallel collectives themselves
    "megatron/core/transformer/moe/token_dispatcher.py": "moe_overlap",  # the expert-parallel token exchange
    "megatron/core/transformer/moe/fused_a2a.py": "moe_overlap",
    "megatron/core/transformer/moe/legacy_a2a_token_dispatcher.py": "moe_overlap",  # Megatron-Core 0.9-0.12's EP exchange
    "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py": "context_parallel",
    "transformer_engine/pytorch/attention.py": "context_parallel",  # its CP functions only (SCAN)
}

LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "fatal"}
WARN_CALLS = {"warn_rank_0", "warning_rank_0", "_compile_safe_warn"}
PRINT_CALLS = {"print", "print_rank_0", "print_rank_last", "barrier_and_log"}
LEVELS = {"DEBUG": "debug", "INFO": "info", "WARNING": "warning", "WARN": "warning", "ERROR": "error",
          "CRITICAL": "critical", "FATAL": "critical"}
MAX_EXPR = 80
MAX_CONDITION = 200  # an assert's condition and an enclosing if's test are recorded up to this many characters


# -- message text from the AST ------------------------------------------------------------------------------------
def _expr(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= MAX_EXPR else text[: MAX_EXPR - 3] + "..."


def _fmt_kind(spec: str, conversion: int = -1) -> str:
    if conversion not in (-1, None):
        return "any"
    spec = spec.strip()
    if not spec:
        return "any"
    last = spec[-1]
    if last in "dn" and not any(c in spec for c in ".eEfFgG%"):
        return "int"
    if last in "eEfFgG":
        return "float"
    if last in "xX":
        return "hex"
    return "any"


_PERCENT = re.compile(r"%(?:\((?P<key>[^)]*)\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?(?P<conv>[diouxXeEfFgGcrsa%])")
_PERCENT_KIND = {**dict.fromkeys("diu", "int"), **dict.fromkeys("xXo", "hex"), **dict.fromkeys("eEfFgG", "float")}


def _percent(text: str, args: list) -> list | None:
    """Tokens of a %-format string applied to `args` (a list of nodes, or one Dict node)."""
    out: list = []
    pos = 0
    i = 0
    for m in _PERCENT.finditer(text):
        out.append(("L", text[pos:m.start()]))
        pos = m.end()
        if m["conv"] == "%":
            out.append(("L", "%"))
            continue
        if m["key"] is not None:
            expr = m["key"]
            if args and isinstance(args[0], ast.Dict):
                for k, v in zip(args[0].keys, args[0].values):
                    if isinstance(k, ast.Constant) and k.value == m["key"]:
                        expr = _expr(v)
        else:
            expr = _expr(args[i]) if i < len(args) else "?"
            i += 1
        out.append(("P", expr, _PERCENT_KIND.get(m["conv"], "any")))
    out.append(("L", text[pos:]))
    return out


def _brace(text: str, args: list, keywords: list) -> list | None:
    """Tokens of a str.format() string."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return None
    kw = {k.arg: k.value for k in keywords if k.arg}
    out: list = []
    auto = 0
    for literal, name, spec, conv in parsed:
        out.append(("L", literal))
        if name is None:
            continue
        base = re.split(r"[.\[]", name, maxsplit=1)[0]
        if base == "":
            node = args[auto] if auto < len(args) else None
            auto += 1
        elif base.isdigit():
            node = args[int(base)] if int(base) < len(args) else None
        else:
            node = kw.get(base)
        expr = (_expr(node) + name[len(base):]) if node is not None else name
        out.append(("P", expr, _fmt_kind(spec or "", -1 if not conv else 1)))
    return out


MAX_LEAD_DEPTH = 4  # names and tables followed to a leading field's literals


def lead_values(function, name: str) -> list | None:
    """The strings a function's local `name` (a message's leading field) can hold, where the function writes them all
    out: assigned literals (or conditionals of literals), or unpacked from the tuples of a literal table
    (`group, description = group_table[key]`, Megatron-Core's get_data_parallel_group); a parameter's, where every
    call of the function in the package's sources passes a literal or leaves its literal default (CALLS); None where
    a loop or any other assignment, or a call with another value, gives it one (fuzzV V2-9)."""
    values = _assigned(function, name, None, 0)
    return sorted(values) if values else None


def lead_of(function, expr: str) -> list | None:
    """The strings a message's leading field can be (its expression as the message's tokens hold it, written out in
    `function`, None at a module's level): lead_values for a name; the literals of a literal or a conditional of
    literals (TE's `'AG+GEMM' if ... else 'GEMM+RS'`); None where the source does not say (open: an attribute, a
    call's result, a class's name, an expression cut at MAX_EXPR characters)."""
    if len(expr) >= MAX_EXPR:
        return None
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Name):
        return lead_values(function, node.id) if function is not None else None
    values = _literals(node)
    return sorted(values) if values else None


def _literals(node) -> set | None:
    """The strings a literal, or a conditional expression of literals, can be; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        a, b = _literals(node.body), _literals(node.orelse)
        return None if a is None or b is None else a | b
    return None


class Calls:
    """The package sources under a site-packages root (every .py file of its megatron/ and transformer_engine/
    folders: the three packages and Megatron-LM's training code beside Megatron-Core), parsed on demand, to find every
    use of a function by its name."""

    FOLDERS = ("megatron", "transformer_engine")

    def __init__(self, root: Path):
        self.root = root
        self._texts: dict | None = None
        self._trees: dict = {}

    def texts(self) -> dict:
        if self._texts is None:
            self._texts = {}
            for folder in self.FOLDERS:
                for p in sorted((self.root / folder).rglob("*.py")):
                    if "__pycache__" in p.parts:
                        continue
                    try:
                        self._texts[p.relative_to(self.root).as_posix()] = p.read_text(encoding="utf-8")
                    except (OSError, UnicodeDecodeError):
                        self._texts[p.relative_to(self.root).as_posix()] = None  # unread: its uses are unknown
        return self._texts

    def trees(self, name: str):
        """The parsed files whose text holds `name` (None for one that cannot be read or parsed)."""
        for rel, text in self.texts().items():
            if text is not None and name not in text:
                continue
            if rel not in self._trees:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", SyntaxWarning)
                        self._trees[rel] = ast.parse(text, filename=rel) if text is not None else None
                except SyntaxError:
                    self._trees[rel] = None
            yield self._trees[rel]


CALLS: Calls | None = None  # the package sources of the scan under way (scan() sets it)
# Whether a scan sees every source file of its packages (a site-packages install); tools/gen_variant_messages.py reads
# only the SCAN files it extracts from an archive, and turns it off: a call from another file would go unseen there
WHOLE_PACKAGES = True


def _parameter(function, name: str) -> set | None:
    """The strings a parameter can hold: the literal each call of the function passes for it (positionally, past
    self or cls where a method is called on an object, or by keyword), or its literal default where a call leaves it
    out; None where any use of the function's name is not a plain call (passed on, stored: who calls it is not seen),
    a call passes anything else or unpacks *args / **kwargs, or no call is found (a public function a user calls)."""
    if CALLS is None or not WHOLE_PACKAGES or any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                            for n in ast.walk(function)):
        return None
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    names = [a.arg for a in positional]
    defaults = dict(zip(names[len(names) - len(args.defaults):], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    index = names.index(name) if name in names else None
    bound = bool(names) and names[0] in ("self", "cls")
    fname = function.name
    values: set = set()
    calls = 0
    for tree in CALLS.trees(fname):
        if tree is None:
            return None
        callees = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and (isinstance(n.func, ast.Name) and n.func.id == fname
                                            or isinstance(n.func, ast.Attribute) and n.func.attr == fname):
                callees.add(id(n.func))
                if any(isinstance(a, ast.Starred) for a in n.args) or any(k.arg is None for k in n.keywords):
                    return None
                given = next((k.value for k in n.keywords if k.arg == name), None)
                at = None if index is None else index - (1 if bound and isinstance(n.func, ast.Attribute) else 0)
                if given is None and at is not None and 0 <= at < len(n.args):
                    given = n.args[at]
                if given is None:
                    given = defaults.get(name)
                got = _literals(given) if given is not None else None
                if got is None:
                    return None
                values |= got
                calls += 1
        for n in ast.walk(tree):
            if (isinstance(n, ast.Name) and n.id == fname or isinstance(n, ast.Attribute) and n.attr == fname) \
                    and id(n) not in callees:
                return None  # a use that is no call: passed on or stored, called where this does not see
    return values if calls else None


def _assigned(function, name: str, index, depth: int) -> set | None:
    args = function.args
    if depth > MAX_LEAD_DEPTH or name in {a.arg for a in (args.vararg, args.kwarg) if a is not None}:
        return None
    if name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}:
        return _parameter(function, name) if index is None else None
    stores = sum(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(function))
    found: list = []
    for n in ast.walk(function):
        if isinstance(n, ast.Assign):
            for target in n.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    found.append((n.value, index))
                elif isinstance(target, (ast.Tuple, ast.List)) and index is None:
                    found += [(n.value, i) for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == name]
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == name and n.value:
            found.append((n.value, index))
    if not found or len(found) != stores:  # bound otherwise too (a loop, a with, +=, a walrus)
        return None
    out: set = set()
    for value, i in found:
        got = _strings(function, value, i, depth + 1)
        if got is None:
            return None
        out |= got
    return out


def _strings(function, node, index, depth: int) -> set | None:
    """The strings an expression can be (its `index`-th element, where it is a tuple), or None."""
    if depth > MAX_LEAD_DEPTH:
        return None
    if isinstance(node, ast.Name):
        return _assigned(function, node.id, index, depth)
    if isinstance(node, ast.Subscript):
        elements = _elements(function, node.value, depth)
        parts = [_strings(function, e, index, depth + 1) for e in elements or ()]
        return None if not parts or None in parts else set().union(*parts)
    if index is not None:
        return _strings(function, node.elts[index], None, depth + 1) \
            if isinstance(node, (ast.Tuple, ast.List)) and index < len(node.elts) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        a, b = _strings(function, node.body, None, depth + 1), _strings(function, node.orelse, None, depth + 1)
        return None if a is None or b is None else a | b
    return None


def _elements(function, node, depth: int) -> list | None:
    """The values of a literal table (a dict's values, a list's or tuple's elements), or of every table a local name
    is assigned."""
    if isinstance(node, ast.Dict):
        return None if None in node.keys else list(node.values)
    if isinstance(node, (ast.List, ast.Tuple)):
        return None if any(isinstance(e, ast.Starred) for e in node.elts) else list(node.elts)
    if isinstance(node, ast.Name) and depth <= MAX_LEAD_DEPTH:
        tables = [n.value for n in ast.walk(function) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)]
        stores = sum(isinstance(n, ast.Name) and n.id == node.id and isinstance(n.ctx, ast.Store) for n in ast.walk(function))
        parts = [_elements(function, t, depth + 1) for t in tables] if tables and len(tables) == stores else [None]
        return None if None in parts else [e for p in parts for e in p]
    return None


class Text:
    """Builds a message's tokens from an expression: ("L", text) literals and ("P", expr, kind) placeholders."""

    def __init__(self, env: dict):
        self.env = env  # name -> tokens of a message assigned to that local name earlier in the function

    def of(self, node) -> list | None:
        if isinstance(node, ast.Constant):
            return [("L", node.value)] if isinstance(node.value, str) else None
        if isinstance(node, ast.JoinedStr):
            out = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    out.append(("L", str(v.value)))
                elif isinstance(v, ast.FormattedValue):
                    spec = ""
                    if isinstance(v.format_spec, ast.JoinedStr):
                        spec = "".join(str(x.value) if isinstance(x, ast.Constant) else "{}" for x in v.format_spec.values)
                    out.append(("P", _expr(v.value), _fmt_kind(spec, v.conversion)))
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.of(node.left), self.of(node.right)
            if left is None and right is None:
                return None
            return (left or [("P", _expr(node.left), "any")]) + (right or [("P", _expr(node.right), "any")])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
                right = node.right
                args = list(right.elts) if isinstance(right, ast.Tuple) else [right]
                return _percent(node.left.value, args)
            return None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
                and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
            return _brace(node.func.value.value, node.args, node.keywords)
        if isinstance(node, ast.Name) and node.id in self.env:
            return self.env[node.id]
        return None


def _merge(tokens: list) -> list:
    out: list = []
    for t in tokens:
        if t[0] == "L":
            if not t[1]:
                continue
            if out and out[-1][0] == "L":
                out[-1] = ("L", out[-1][1] + t[1])
                continue
        out.append(t)
    return out


class Scanner(ast.NodeVisitor):
    def __init__(self, rel: str, source: str):
        self.rel = rel
        self.source = source
        self.stack: list[str] = []
        self.functions: list = []  # the function nodes around the one being visited (lead_values reads the innermost)
        self.envs: list[dict] = [{}]
        self.lists: list[dict] = [{}]  # name -> [(node, tokens)] of a list of lines later written out "\n".join()ed
        self.sites: list[dict] = []
        self.skipped = 0  # messages that are neither literal nor recoverable (a variable, a call's result)
        self.warn_names: set[str] = set()
        # the tests of the if/elif statements around the node being visited, outermost first, per function (a
        # message in an else or elif branch is under the tests before it too: they decide that it runs)
        self.branches: list[list[str]] = [[]]

    # scopes
    def _fn(self) -> str:
        return ".".join(self.stack) or "<module>"

    def visit_Module(self, node):
        for n in ast.walk(node):
            if isinstance(n, ast.ImportFrom) and n.module == "warnings":
                self.warn_names |= {a.asname or a.name for a in n.names if a.name == "warn"}
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        self.stack.append(node.name)
        self.functions.append(node)
        self.envs.append({})
        self.lists.append({})
        self.branches.append([])
        self.generic_visit(node)
        self.branches.pop()
        self.lists.pop()
        self.envs.pop()
        self.functions.pop()
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    # messages kept in a local name: msg = f"..."; msg += "..."; raise X(msg)
    def visit_Assign(self, node):
        self.generic_visit(node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.List):
            text = Text(self.envs[-1])
            self.lists[-1][node.targets[0].id] = [(node, t) for t in map(text.of, node.value.elts) if t is not None]
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            tokens = Text(self.envs[-1]).of(node.value)
            if tokens is not None:
                self.envs[-1][node.targets[0].id] = tokens
            else:
                self.envs[-1].pop(node.targets[0].id, None)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        if isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add) and node.target.id in self.envs[-1]:
            tokens = Text(self.envs[-1]).of(node.value)
            if tokens is None:
                self.envs[-1].pop(node.target.id)
            else:
                self.envs[-1][node.target.id] = self.envs[-1][node.target.id] + tokens

    def visit_If(self, node):
        self.visit(node.test)
        test = self._code(node.test)
        for part, branch in ((node.body, test), (node.orelse, f"not ({test})")):
            self.branches[-1].append(branch)
            for child in part:
                self.visit(child)
            self.branches[-1].pop()

    def _code(self, node) -> str:
        """An expression as written, whitespace folded, at most MAX_CONDITION characters."""
        code = " ".join((ast.get_source_segment(self.source, node) or ast.unparse(node)).split())
        return code if len(code) <= MAX_CONDITION else code[:MAX_CONDITION - 3] + "..."

    def add(self, node, kind: str, tokens, **kw):
        branch = list(dict.fromkeys(self.branches[-1]))
        tokens = _merge(tokens) if tokens is not None else None
        if tokens and tokens[0][0] == "P" and tokens[0][2] == "any":  # a message led by a field of any text
            kw["lead_values"] = lead_of(self.functions[-1] if self.functions else None, tokens[0][1])
            kw["lead_open"] = not kw["lead_values"]
        self.sites.append(dict(line=node.lineno, col=node.col_offset, function=self._fn(), kind=kind,
                               tokens=tokens, branch=branch, **kw))

    def visit_Raise(self, node):
        exc = node.exc
        if isinstance(exc, ast.Call):
            name = _expr(exc.func)
            if exc.args:
                tokens = Text(self.envs[-1]).of(exc.args[0])
                self.add(node, "raise", tokens, exception=name, dynamic=tokens is None)
            else:
                self.add(node, "raise", None, exception=name)
        elif isinstance(exc, (ast.Name, ast.Attribute)) and re.search(r"(Error|Exception|Interrupt|Exit)$", _expr(exc)):
            self.add(node, "raise", None, exception=_expr(exc))
        self.generic_visit(node)

    def visit_Assert(self, node):
        # the condition as written (a traceback shows the source line), whitespace folded
        cond = self._code(node.test)
        if node.msg is None:
            self.add(node, "assert", None, exception="AssertionError", condition=cond)
        else:
            tokens = Text(self.envs[-1]).of(node.msg)
            self.add(node, "assert", tokens, exception="AssertionError", condition=cond, dynamic=tokens is None)
        self.generic_visit(node)

    def visit_Call(self, node):
        self._call(node)
        self.generic_visit(node)

    def _call(self, node):
        func = node.func
        base = _expr(func.value) if isinstance(func, ast.Attribute) else None
        name = func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else None)
        if name is None:
            return
        args = node.args
        text = Text(self.envs[-1])
        if name == "append" and isinstance(func.value, ast.Name) and func.value.id in self.lists[-1] and args:
            tokens = text.of(args[0])
            if tokens is not None:
                self.lists[-1][func.value.id].append((node, tokens))
            return
        if (base == "warnings" and name in ("warn", "warn_explicit")) or (base is None and name in self.warn_names):
            if args:
                cat = args[1] if len(args) > 1 else next((k.value for k in node.keywords if k.arg == "category"), None)
                self._emit(node, "warn", text.of(args[0]), call=f"warnings.{name}", msg=args[0],
                           level=_expr(cat) if cat is not None else "UserWarning")
            return
        if base is None and name in WARN_CALLS:
            if args:
                self._emit(node, "warn", text.of(args[0]), call=name, level="UserWarning", msg=args[0])
            return
        if base is None and name in ("log_single_rank", "log_on_each_pipeline_stage") and len(args) >= 3:
            level = LEVELS.get(_expr(args[1]).rsplit(".", 1)[-1], _expr(args[1]))
            self._emit(node, "log", self._logged(text, args[2], args[3:]), call=name, level=level, msg=args[2])
            return
        if base is not None and "log" in base.lower() and name in LOG_METHODS | {"log"}:
            if name == "log":
                if len(args) < 2:
                    return
                level = LEVELS.get(_expr(args[0]).rsplit(".", 1)[-1], _expr(args[0]))
                msg, rest = args[1], args[2:]
            else:
                if not args:
                    return
                level = {"warn": "warning", "fatal": "critical"}.get(name, name)
                msg, rest = args[0], args[1:]
            self._emit(node, "log", self._logged(text, msg, rest), call=f"{base}.{name}", level=level, msg=msg)
            return
        if name == "validate_result":  # Megatron-Core's rerun state machine: its message= is raised as "Unexpected result ..."
            msg = next((k.value for k in node.keywords if k.arg == "message"), None)
            if msg is not None:
                self._emit(node, "raise", text.of(msg), call=name, msg=msg, exception="RuntimeError")
            return
        if base is None and name in PRINT_CALLS and args:
            if name == "print":
                sep = next((k.value for k in node.keywords if k.arg == "sep"), None)
                sep_text = sep.value if isinstance(sep, ast.Constant) and isinstance(sep.value, str) else " "
                parts = [text.of(a) for a in args if not isinstance(a, ast.Starred)]
                if len(parts) != len(args) or all(p is None for p in parts):
                    tokens = None
                else:
                    tokens = []
                    for j, (a, p) in enumerate(zip(args, parts)):
                        if j:
                            tokens.append(("L", sep_text))
                        tokens += p if p is not None else [("P", _expr(a), "any")]
            else:
                tokens = text.of(args[0])
            self._emit(node, "print", tokens, call=name, msg=args[0])

    @staticmethod
    def _logged(text: Text, msg, rest) -> list | None:
        if rest and isinstance(msg, ast.Constant) and isinstance(msg.value, str) and "%" in msg.value:
            return _percent(msg.value, list(rest))
        return text.of(msg)

    def _emit(self, node, kind, tokens, msg=None, **kw):
        if tokens is None and self._joined(msg) is not None:
            # log_strs = [...]; log_strs.append(f"..."); log(..., "\n".join(log_strs)): one entry per line, where appended
            for item, item_tokens in self._joined(msg):
                self.add(item, kind, item_tokens, **kw)
            return
        if tokens is None:
            self.skipped += 1
            return
        self.add(node, kind, tokens, **kw)

    def _joined(self, msg):
        if (isinstance(msg, ast.Call) and isinstance(msg.func, ast.Attribute) and msg.func.attr == "join"
                and isinstance(msg.func.value, ast.Constant) and msg.func.value.value == "\n" and len(msg.args) == 1
                and isinstance(msg.args[0], ast.Name) and msg.args[0].id in self.lists[-1]):
            return self.lists[-1][msg.args[0].id]
        return None


# -- entries ------------------------------------------------------------------------------------------------------
def template_of(tokens: list) -> str:
    out = []
    for t in tokens:
        out.append(t[1].replace("{", "{{").replace("}", "}}") if t[0] == "L" else "{" + t[1] + "}")
    return "".join(out)


def normalised(tokens: list) -> str:
    return " ".join("".join(t[1] if t[0] == "L" else "{}" for t in tokens).split())


def pattern_tokens(tokens: list) -> list:
    """Tokens for messages.pattern_of: the first field one token after a delimiter, the last open-ended."""
    groups = {"int": M.G_INT, "float": M.G_FLOAT, "hex": M.G_HEX}
    out = []
    for i, t in enumerate(tokens):
        if t[0] == "L":
            out.append(t[1])
            continue
        g = groups.get(t[2])
        if g is None:
            g = M.G_HEAD if i == 0 else (M.G_TAIL if i == len(tokens) - 1 else M.G_ANY)
        out.append(M.Group(g))
    return out


OVERLAP_TOPICS = {"tp_overlap", "userbuffers", "dp_overlap", "distributed_optimizer", "pipeline", "fsdp", "launch_env",
                  "moe_overlap"}
# The topics diagnose reports as the overlap path's (mbridge_overlap/diagnose/causes.py OVERLAP_TOPICS): a message whose
# own words name one is about it wherever it is written (not off_path_too)
DIAGNOSED_TOPICS = OVERLAP_TOPICS | {"parallel_state", "mixed_precision", "context_parallel"}


def words_topic(function: str, tokens, condition) -> str | None:
    """The topic a message's own words name (its text, its assert's condition, its function's name), or None."""
    words = " ".join(filter(None, [
        " ".join(t[1] for t in tokens) if tokens else None, condition, function.rsplit(".", 1)[-1]]))
    return next((t for t, rx in RULES if rx.search(words)), None)


def topic_of(rel: str, function: str, tokens, condition) -> tuple[str, str | None]:
    """(topic, the topic the message's own words name or None): a forced file or function topic; else a strong
    keyword topic; else the file's default; else the keyword topic; else "other"."""
    keyword = words_topic(function, tokens, condition)
    for prefix, topic in FORCED.items():
        if rel.startswith(prefix):
            return topic, topic
    for (f, fn), topic in FORCED_FUNCTIONS.items():
        if rel == f and (function == fn or function.startswith(fn)):
            return topic, topic
    default = next((t for prefix, t in DEFAULTS.items() if rel.startswith(prefix)), None)
    if default and keyword and keyword in STRONG:
        return keyword, keyword
    return default or keyword or "other", keyword


def keep(mode: str, function: str, keyword: str | None) -> bool:
    """Whether a message stays in the catalog under its file's SCAN mode."""
    if mode.startswith("only:"):
        return re.search(mode[5:], function) is not None
    if mode.startswith("all:"):
        mode = "all" if re.search(mode[4:], function) else "topic"
    if mode == "all":
        return True
    if mode == "topic":
        return keyword is not None
    return keyword in OVERLAP_TOPICS


def site_packages() -> dict:
    """{package: (site-packages root, version)} for the running Python, found as an import would (sys.path)."""
    out = {}
    for pkg, (marker, _) in PACKAGES.items():
        for entry in sys.path:
            if entry and (Path(entry) / marker / "__init__.py").is_file():
                out[pkg] = (Path(entry), importlib.metadata.version(pkg))
                break
        else:
            raise SystemExit(f"gen_messages.py: {pkg} is not installed for {sys.executable}; run it with a Bridge "
                             "venv's python (scripts/bridge_env.sh --print-python) or pass --release VERSION")
    return out


def scan(pkg: str, root: Path, version: str) -> tuple[list, dict]:
    global CALLS
    if CALLS is None or CALLS.root != root:
        CALLS = Calls(root)
    short = PACKAGES[pkg][1]
    seen_files: dict[str, str] = {}
    missing = []
    for pattern, mode in SCAN[pkg]:
        found = sorted(p for p in root.glob(pattern) if p.is_file() and "__pycache__" not in p.parts)
        if not found:
            missing.append(pattern)
        for p in found:
            rel = p.relative_to(root).as_posix()
            if "/tests/" in rel:
                continue
            seen_files.setdefault(rel, mode)  # the first (most specific) rule for a file wins
    entries = []
    skipped = 0
    texts: dict = {}  # a message's normalised text -> every site that writes it: [file, function, line, on the path]
    for rel, mode in sorted(seen_files.items()):
        source = (root / rel).read_text(encoding="utf-8")
        sc = Scanner(rel, source)
        sc.visit(ast.parse(source, filename=rel))
        skipped += sc.skipped
        for s in sc.sites:
            tokens = s["tokens"]
            if tokens is not None and not any(t[0] == "L" and t[1].strip() for t in tokens):
                tokens = None  # only fields: nothing to match, like a computed message
                s["dynamic"] = True
            topic, keyword = topic_of(rel, s["function"], tokens, s.get("condition"))
            kept = keep(mode, s["function"], keyword)
            if tokens:
                texts.setdefault(normalised(tokens), []).append([rel, s["function"], s["line"], kept])
            if not kept:
                continue
            entry = {
                "package": pkg,
                "package_version": version,
                "file": rel,
                "function": s["function"],
                "line": s["line"],
                "kind": s["kind"],
                "exception": s.get("exception"),
                "level": s.get("level"),
                "call": s.get("call"),
                "topic": topic,
                "template": template_of(tokens) if tokens else None,
                "fields": [t[1] for t in tokens if t[0] == "P"] if tokens else [],
                "pattern": M.pattern_of(pattern_tokens(tokens)) if tokens else None,
            }
            if s.get("condition") is not None:
                entry["condition"] = s["condition"]
            if s["branch"]:
                entry["branch"] = s["branch"]
            if tokens and s.get("lead_values"):
                entry["lead_values"] = s["lead_values"]
            elif tokens and s.get("lead_open") and tokens[0][0] == "P":
                entry["lead_open"] = True  # led by a field whose values the source does not say: any word there
            if s.get("dynamic") and not tokens:
                entry["dynamic"] = True
            text = normalised(tokens) if tokens else ("assert " + s["condition"] if s.get("condition")
                                                       else "raise " + (s.get("exception") or ""))
            entry["fingerprint"] = hashlib.sha1(f"{s['kind']}\0{text}".encode()).hexdigest()[:16]
            where = hashlib.sha1(f"{rel}\0{s['function']}\0{s['kind']}\0{text}".encode()).hexdigest()[:10]
            entry["id"] = f"{short}.{s['kind']}.{where}"
            entry["_order"] = (rel, s["line"], s["col"])
            entry["_text"] = text
            entry["_own"] = words_topic(s["function"], tokens, s.get("condition"))
            entries.append(entry)
    unread = _off_scan_sites(pkg, root, seen_files, texts)
    for e in entries:  # where else the package writes the message's text, and whether that place is on the path
        if e["template"]:
            here = [e["file"], e["function"], e["line"]]
            others = sorted(x for x in texts[e["_text"]] if x[:3] != here)
            if others:
                e["raised_elsewhere"] = others
            # the text alone does not place the message on the path diagnose reports it on (its topic): it is
            # written off the path too, and its own words name no overlap topic (it is in the catalog for its file's
            # or function's sake)
            if e["topic"] in DIAGNOSED_TOPICS and any(not x[3] for x in others) and e["_own"] not in DIAGNOSED_TOPICS:
                e["off_path_too"] = True
        del e["_text"], e["_own"]
    # the same message twice in one function: number them in source order
    entries.sort(key=lambda e: e["_order"])
    counts: dict[str, int] = {}
    for e in entries:
        n = counts.get(e["id"], 0) + 1
        counts[e["id"]] = n
        if n > 1:
            e["id"] = f"{e['id']}.{n}"
        del e["_order"]
    info = {"files": dict(sorted(seen_files.items())), "missing": missing, "skipped_non_literal": skipped}
    if unread:
        info["unread"] = unread
    return entries, info


# The folders of a package's own sources (Megatron-LM's training code ships in the megatron-core wheel)
PACKAGE_FOLDERS = {"megatron-bridge": ("megatron/bridge/",), "megatron-core": ("megatron/core/", "megatron/training/"),
                   "transformer-engine": ("transformer_engine/",)}


def _off_scan_sites(pkg: str, root: Path, seen_files: dict, texts: dict) -> list:
    """Add to `texts` the sites of the package's files that SCAN does not read (off the overlap path: the catalog does
    not know them) writing a text the catalog keeps, where the scan sees the whole package (WHOLE_PACKAGES); returns
    the files that could not be parsed."""
    if not WHOLE_PACKAGES or CALLS is None:
        return []
    unread = []
    kept = {t for t, sites in texts.items() if any(x[3] for x in sites)}
    for rel, source in CALLS.texts().items():
        if not rel.startswith(PACKAGE_FOLDERS[pkg]) or rel in seen_files or "/tests/" in rel:
            continue
        if source is None:
            unread.append(rel)
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)
                tree = ast.parse(source, filename=rel)
        except SyntaxError:
            unread.append(rel)
            continue
        sc = Scanner(rel, source)
        sc.visit(tree)
        for s in sc.sites:
            if s["tokens"] and any(t[0] == "L" and t[1].strip() for t in s["tokens"]):
                text = normalised(s["tokens"])
                if text in kept:
                    texts[text].append([rel, s["function"], s["line"], False])
    return sorted(unread)


# -- native messages ----------------------------------------------------------------------------------------------
NATIVE_KINDS = {"error", "warning", "info", "symptom"}
SOURCE_TYPES = {"source", "thread"}


def _parser():
    try:
        import re._parser as sre_parse  # Python >= 3.11
    except ImportError:  # pragma: no cover
        import sre_parse
    return sre_parse


def required_words(pattern: str) -> list[str]:
    """Whitespace-delimited pieces that every match of `pattern` shows, as a cover for the prefilter (each match
    shows one of them): the longest usable piece the top-level sequence requires, bounded by whitespace of the
    pattern on both sides; else, for a group or an alternation, the union over its branches' covers."""
    sp = _parser()
    tree = sp.parse(pattern)
    if tree.state.flags & re.IGNORECASE:
        raise ValueError("native patterns are matched case-sensitively: no (?i)")

    def cover(seq, left_safe: bool, right_safe: bool) -> list[str] | None:
        seq = list(seq)
        # literal runs, with None for any other element
        parts: list = []
        cur: list[str] = []
        for op, av in seq:
            if op is sp.LITERAL:
                cur.append(chr(av))
                continue
            if cur:
                parts.append("".join(cur))
                cur = []
            parts.append(None)
        if cur:
            parts.append("".join(cur))
        found = []
        for i, run in enumerate(parts):
            if run is None:
                continue
            for m in re.finditer(r"\S+", run):
                left = m.start() > 0 or (i == 0 and left_safe)
                right = m.end() < len(run) or (i == len(parts) - 1 and right_safe)
                if left and right and M.usable(m.group()):
                    found.append(m.group())
        if found:
            return [max(found, key=len)]
        for j, (op, av) in enumerate(seq):
            before = seq[j - 1] if j else None
            after = seq[j + 1] if j + 1 < len(seq) else None
            ls = (left_safe if before is None else before[0] is sp.LITERAL and chr(before[1]).isspace())
            rs = (right_safe if after is None else after[0] is sp.LITERAL and chr(after[1]).isspace())
            if op is sp.SUBPATTERN:
                c = cover(av[-1], ls, rs)
                if c:
                    return c
            elif op is sp.BRANCH:
                covers = [cover(b, ls, rs) for b in av[1]]
                if all(covers):
                    return sorted({w for c in covers for w in c})
            elif op in (sp.MAX_REPEAT, sp.MIN_REPEAT) and av[0] >= 1:
                c = cover(av[2], False, False)
                if c:
                    return c
        return None

    # a log prefix may be glued to the pattern's start ([default0]:!!! [UB] ...) and its end may be followed by more
    # text ("timing out" then "."): neither end bounds a piece
    return cover(tree, False, False) or []


def native_entries() -> list[dict]:
    import yaml

    rows = yaml.safe_load(NATIVE.read_text(encoding="utf-8"))["messages"]
    out = []
    ids = set()
    for row in rows:
        rid = row.get("id")
        where = f"{NATIVE.name}: {rid}"
        for key in ("id", "pattern", "example", "source", "topic", "kind"):
            if not row.get(key):
                raise SystemExit(f"{where}: missing {key}")
        if rid in ids:
            raise SystemExit(f"{where}: duplicate id")
        ids.add(rid)
        if row["kind"] not in NATIVE_KINDS or row["topic"] not in TOPICS:
            raise SystemExit(f"{where}: kind must be one of {sorted(NATIVE_KINDS)}, topic one of {TOPICS}")
        src = row["source"]
        if not isinstance(src, dict) or src.get("type") not in SOURCE_TYPES:
            raise SystemExit(f"{where}: source must say type: source (a file at a version) or thread (a URL)")
        if src["type"] == "thread" and not str(src.get("url", "")).startswith("https://"):
            raise SystemExit(f"{where}: a thread source needs its url")
        if src["type"] == "source" and not (src.get("repo") and src.get("file") and src.get("version")):
            raise SystemExit(f"{where}: a source file needs repo, file and version")
        rx = re.compile(row["pattern"])
        examples = [row["example"]] + list(row.get("more_examples") or [])
        for ex in examples:
            if not rx.search(M.clean(ex)):
                raise SystemExit(f"{where}: the example does not match the pattern: {ex!r}")
        contains = list(row.get("contains") or [])
        anchors = list(row.get("anchors") or []) or ([] if contains else required_words(row["pattern"]))
        if not anchors and not contains:
            raise SystemExit(f"{where}: the pattern requires no word the prefilter can index (give anchors or contains)")
        for ex in examples:
            pieces = set(M.clean(ex).split())
            if not pieces.intersection(anchors) and not any(c in M.clean(ex) for c in contains):
                raise SystemExit(f"{where}: the example holds none of the anchors {anchors} / contains {contains}")
        entry = {
            "id": "native." + rid,
            "kind": row["kind"],
            "topic": row["topic"],
            "pattern": row["pattern"],
            "example": row["example"],
            "source": src,
            "package": row.get("package", ""),
            "file": src.get("file"),
            "function": row.get("function"),
            "anchors": anchors,
            "contains": contains,
            "fingerprint": hashlib.sha1(f"{row['kind']}\0{row['pattern']}".encode()).hexdigest()[:16],
        }
        if row.get("note"):
            entry["note"] = " ".join(str(row["note"]).split())
        if row.get("more_examples"):
            entry["more_examples"] = list(row["more_examples"])
        if row.get("cause"):
            entry["cause"] = " ".join(str(row["cause"]).split())
        for key in ("example_kind", "legacy"):
            if row.get(key) is not None:
                entry[key] = row[key]
        out.append(entry)
    return out


# -- the file -----------------------------------------------------------------------------------------------------
def stands_for(release: str) -> list[str]:
    """The listed releases whose data this release's catalog stands for (releases.yaml data_of), itself included."""
    import yaml

    releases = yaml.safe_load((DATA / "releases.yaml").read_text(encoding="utf-8"))["releases"]
    return sorted((v for v, r in releases.items() if (r.get("data_of") or v) == release),
                  key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)[:3]))


def counts_of(entries: list, natives: list) -> dict:
    by: dict = {"entries": len(entries), "native": len(natives), "by_package": {}}
    for e in entries:
        p = by["by_package"].setdefault(e["package"], {"entries": 0, "kind": {}, "topic": {}, "no_message": 0})
        p["entries"] += 1
        p["kind"][e["kind"]] = p["kind"].get(e["kind"], 0) + 1
        p["topic"][e["topic"]] = p["topic"].get(e["topic"], 0) + 1
        if e["template"] is None:
            p["no_message"] += 1
    by["native_topic"] = {}
    for e in natives:
        by["native_topic"][e["topic"]] = by["native_topic"].get(e["topic"], 0) + 1
    return by


def generate() -> tuple[str, str, dict]:
    sites = site_packages()
    release = sites["megatron-bridge"][1]
    entries = []
    scanned = {}
    for pkg, (root, version) in sites.items():
        rows, info = scan(pkg, root, version)
        entries += rows
        scanned[pkg] = info
    natives = native_entries()
    ids = [e["id"] for e in entries] + [e["id"] for e in natives]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for e in entries:  # every generated pattern compiles and reads back as the tokens it was built from
        if e["pattern"] is not None:
            re.compile(e["pattern"])
            assert M.tokens_of(e["pattern"]) is not None, e["id"]
    header = {
        "schema_version": M.SCHEMA_VERSION,
        "release": release,
        "stands_for": stands_for(release),
        "packages": {pkg: v for pkg, (_, v) in sites.items()},
        "generated_by": "tools/gen_messages.py",
        "scanned": scanned,
        "counts": counts_of(entries, natives),
    }
    text = "".join([
        '{"header": ', json.dumps(header, sort_keys=True, separators=(",", ":")), ",\n",
        '"entries": [\n', ",\n".join(json.dumps(e, sort_keys=True, separators=(",", ":")) for e in entries), "\n],\n",
        '"native": [\n', ",\n".join(json.dumps(e, sort_keys=True, separators=(",", ":")) for e in natives), "\n]}\n",
    ])
    M.Catalog(json.loads(text))  # the matcher reads it
    return release, text, header["counts"]


def summary(counts: dict) -> str:
    lines = [f"{counts['entries']} entries from Python sources, {counts['native']} native"]
    for pkg, c in sorted(counts["by_package"].items()):
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(c["kind"].items()))
        topics = ", ".join(f"{k} {n}" for k, n in sorted(c["topic"].items(), key=lambda x: -x[1]))
        lines.append(f"  {pkg}: {c['entries']} ({kinds}; {c['no_message']} without a message); topics: {topics}")
    return "\n".join(lines)


def reexec(release: str, argv: list[str]) -> int:
    py = subprocess.run([str(ROOT / "scripts" / "bridge_env.sh"), "--release", release, "--print-python"],
                        stdout=subprocess.PIPE, text=True, check=True).stdout.strip().splitlines()[-1]
    return subprocess.run([py, str(Path(__file__).resolve()), *argv]).returncode


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed catalog instead of writing it")
    ap.add_argument("--release", help="the Megatron-Bridge release to generate for (runs in that release's venv)")
    args = ap.parse_args(argv)
    if args.release:
        try:
            installed = importlib.metadata.version("megatron-bridge")
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != args.release:
            rest = [a for i, a in enumerate(argv) if a != "--release" and (i == 0 or argv[i - 1] != "--release")
                    and not a.startswith("--release=")]
            return reexec(args.release, rest)
    release, text, counts = generate()
    path = DATA / "releases" / release / "messages.json"
    rel = path.relative_to(ROOT)
    status = generated.check_or_write(path, text, args.check, mkdir=True, wrote=f"wrote {rel} ({len(text.encode()) / 1e6:.2f} MB)",
                                      verdict=lambda same: f"{'messages catalog matches' if same else 'messages catalog DIFFERS from'} {rel}")
    print(summary(counts))
    return status


if __name__ == "__main__":
    sys.exit(main())
