"""A later sentence of a catalog message that is distinctive alone (it names an identifier and has enough words) is
the message where a log shows it without the sentence before it (fresh20 F20-1: Transformer Engine 2.20.2
pytorch/module/base.py:221-224 raises "CUDA device, driver and/or toolkit version does not support comm+GEMM overlap
with CUDA Multicast. Launch app with UB_SKIPMC=1 to try CUDA IPC instead."; a paste elided its first words, a
terminal wrapped it). The forms below are those of the held-back batch (/work/scratch/corpus_fresh20) and wraps of
the same text."""


import pytest

from conftest import diagnose_causes
from mbridge_overlap.diagnose import messages as M

TE = ("CUDA device, driver and/or toolkit version does not support comm+GEMM overlap with CUDA Multicast. "
      "Launch app with UB_SKIPMC=1 to try CUDA IPC instead.")
SECOND = "Launch app with UB_SKIPMC=1 to try CUDA IPC instead."


def causes(text: str) -> list:
    return [c["id"] for c in diagnose_causes(text)]


@pytest.mark.parametrize("text", [
    TE,
    SECOND,
    "CUDA device... does not support comm+GEMM overlap with CUDA Multicast.\n" + SECOND,
    "# Job 190: 'CUDA device... does not support ...\n#          " + SECOND + "'",
    "RuntimeError: CUDA device, driver and/or\ntoolkit version does not support comm+GEMM overlap with CUDA Multicast. "
    + SECOND,
    "[rank0]: RuntimeError: CUDA device... overlap with CUDA Multicast. Launch app with\n[rank0]: UB_SKIPMC=1 to try "
    "CUDA IPC instead.",
])
def test_the_multicast_error_is_found_by_either_sentence(text):
    assert causes(text + "\n") == ["UB_NEEDS_MULTICAST"]


def test_the_whole_message_is_one_hit_and_a_setting_alone_is_none():
    cat = M.load("0.6.2")
    assert [h.entry.id for h in cat.match(TE)] == ["te.raise.ead3af5275"]
    (hit,) = cat.match("[default3]:" + SECOND)
    assert hit.entry.id == "te.raise.ead3af5275" and not hit.truncated
    for line in ("export UB_SKIPMC=1", "UB_SKIPMC=1 torchrun train.py", "Launch app with care."):
        assert not cat.match(line), line
    assert causes("export UB_SKIPMC=1\n") == []


def test_only_distinctive_later_sentences_are_matched_alone():
    toks = M.tokens_of(M.escape("Bad value. Try again later please now ok. Set FOO_BAR=1 to go on with it."))
    assert ["".join(s) for s in M._sentences(toks)] == ["Set FOO_BAR=1 to go on with it."]
    assert M._sentences(M.tokens_of(M.escape("Bad value. Set FOO_BAR=1 now."))) == []  # too few words
