"""An exception that nothing else explains (no catalog message, no overlap-path frame) but whose own words name a
parallel dimension or an overlap mechanism: a framework's copy of a check ("Packed sequence length 4551 must be
divisible by 2 * CP size 1"), or its own assert around the distributed optimizer ("FSDP reduce-scatter expects uniform
gradient dtype"). Its words are the only evidence, and the cause says so.

Each term is Megatron's own name for a dimension or mechanism, in the spellings logs use (words, snake case,
the abbreviation with size/rank/group/degree). A line about a checkpoint, a dataset, an import or memory is left
alone: those name the dimensions for other reasons (resharding, file layout). Set on the development part of
tests/data/diagnose_corpus/corpus.yaml: no negative control holds a term.
"""

from __future__ import annotations

import re

from .frames import _CP, _DP, _EP, _PP, _TP, _UB

_SEP = r"[ _-]?"
_ABBREVIATED = rf"{_SEP}(?:size|rank|group|degree|world[ _-]?size)\b"
TERMS = [  # (name, regex, dimension, knobs): every term a line holds counts
    ("userbuffers", rf"\buserbuffers?\b|\btp{_SEP}comm{_SEP}overlap|\bub{_SEP}(?:cfg|overlap|comm)", "tp", _UB),
    ("sequence parallel", rf"\bsequence{_SEP}parallel", "tp", _TP),
    ("tensor parallel", rf"\btensor{_SEP}(?:model{_SEP})?parallel|\bTP{_ABBREVIATED}", "tp", list(reversed(_TP))),
    ("context parallel", rf"\bcontext{_SEP}parallel|\bCP{_ABBREVIATED}", "cp", _CP),
    ("expert parallel", rf"\bexpert{_SEP}(?:model{_SEP}|tensor{_SEP})?parallel|\bE(?:T)?P{_ABBREVIATED}", "ep",
     ["model.expert_model_parallel_size", "model.expert_tensor_parallel_size", *_EP[:2]]),
    ("pipeline parallel", rf"\b(?:virtual{_SEP})?pipeline{_SEP}(?:model{_SEP})?parallel|\bV?PP{_ABBREVIATED}|\bpipeline stages?\b",
     "pp", list(reversed(_PP))),
    ("reduce-scatter", rf"\breduce{_SEP}scatter", "dp", _DP),
    ("gradient buffer", rf"\bgrad(?:ient)?s?{_SEP}(?:buffer|bucket)s?\b", "dp", _DP),
    ("distributed optimizer", rf"\bdist(?:ributed)?{_SEP}opt(?:imizer)?\b", "dp", ["ddp.use_distributed_optimizer", *_DP[:2]]),
    ("data parallel", rf"\bdata[ _-]parallel|\bDP{_ABBREVIATED}", "dp", _DP),  # not torch's nn.DataParallel
]
_COMPILED = [(name, re.compile(rx, re.I), dim, knobs) for name, rx, dim, knobs in TERMS]
# the gradients' dtype beside a DP term: the reduce runs in FP32 or in the parameters' dtype (ddp.grad_reduce_in_fp32)
_DTYPE = re.compile(r"\bdtype|\bfp32\b|\bfloat32\b|\bbf16\b|\bbfloat16\b", re.I)
OTHER_REASONS = re.compile(r"\bcheckpoint(?:s|ed)?\b|\bckpt|\bstate[ _-]?dict|\bload(?:s|ed|ing)?\b(?! balanc)|"
                           r"\bsav(?:e|es|ed|ing)\b|\brestor|\bresum|\bdistcp\b|\bimport(?:s|ed|ing)?\b|ImportError|"
                           r"ModuleNotFound|module '[\w.]+' has no attribute|\btokeni[sz]|\bdataset|no module|"
                           r"out of memory|OutOfMemory|\bOOM\b|\bconvert|hugging ?face|\bhf\b|safetensors|\bbatch\b", re.I)
# an exception class's name: a class, not a word that merely starts so (ErrorHandler), nor what stops a run from outside
_CLASS = re.compile(r"\w*(?:Error|Exception)$")
MAX_TEXT = 600  # an exception line longer than this is a dump, not a check's message


def named(text: str, exception: str | None = None) -> tuple[list[str], str | None, list[str]]:
    """(the terms the line names, the first one's dimension, the knobs of all, deduplicated) of an exception line
    (of the class `exception` where known); ([], None, []) where it names none, is about a checkpoint, a dataset, an
    import, the batch sizes or memory, or its "exception" is no error class (ErrorHandler:, KeyboardInterrupt:)."""
    if len(text) > MAX_TEXT or OTHER_REASONS.search(text) or (exception is not None and not _CLASS.match(exception)):
        return [], None, []
    hits = [(name, dim, knobs) for name, rx, dim, knobs in _COMPILED if rx.search(text)]
    if not hits:
        return [], None, []
    knobs = [k for _n, _d, ks in hits for k in ks]
    if any(dim == "dp" for _n, dim, _k in hits) and _DTYPE.search(text):
        knobs.insert(0, "ddp.grad_reduce_in_fp32")
    return [n for n, _d, _k in hits], hits[0][1], list(dict.fromkeys(knobs))
