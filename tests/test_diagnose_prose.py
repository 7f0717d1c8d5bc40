"""Texts that name a message's words without being the message (fresh16 F16-2), and messages quoted in the forms a
thread or a log carries them (F16-1, F16-5): the texts here are written for these tests."""

import io

from mbridge_overlap import api
from mbridge_overlap.diagnose import fuzzy, messages


def causes(text: str) -> list[dict]:
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode("utf-8"))).to_dict()["causes"]


def ids(text: str) -> list[str]:
    return [c["id"] for c in causes(text)]


def test_prose_naming_the_flags_of_a_check_is_not_the_check():
    """A sentence that names both flags of "Must use --overlap-param-gather with --overlap-grad-reduce" (and reads as
    an error by its "expected") carries no exception's or level's mark and is not worded as the message."""
    text = ("We use --overlap-grad-reduce and --overlap-param-gather with the distributed optimizer, but the expected "
            "overlap does not show up in the profile.\n")
    assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" not in ids(text)


def test_the_same_words_with_an_exception_s_mark_or_in_the_message_s_order_still_match():
    cat = messages.load()
    fz = fuzzy.for_catalog(cat)
    marked = fz.match("AssertionError: You must use --overlap-param-gather together with --overlap-grad-reduce")
    assert marked and cat.by_id(marked[0].id).template.startswith("Must use --overlap-param-gather")
    ordered = fz.match("must use overlap param gather only with overlap grad reduce")
    assert ordered and ordered[0].id == marked[0].id
    assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" in ids("AssertionError: You must use --overlap-param-gather together with "
                                                   "--overlap-grad-reduce\n")


def test_a_message_raised_without_a_setting_is_not_a_text_that_shows_it_on():
    """The check's condition is overlap_grad_reduce (under overlap_param_gather): a line that shows the setting on
    (a command line's flags, name=true, Megatron-LM's arguments dump) is not that failure."""
    cat = messages.load()
    entry = next(e for e in cat.entries if e.template == "Must use --overlap-param-gather with --overlap-grad-reduce")
    assert fuzzy.required(entry) == ("overlap_grad_reduce",)
    assert fuzzy.contradicted(entry, entry.template) is None  # its own "with --overlap-grad-reduce" says nothing
    for shown in ("launched: torchrun train.py --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather",
                  "config has overlap_grad_reduce=True", "overlap_grad_reduce: true",
                  "  overlap_grad_reduce ........................ True"):
        assert fuzzy.contradicted(entry, shown) == "overlap_grad_reduce", shown
        line = f"AssertionError: must use overlap-param-gather with overlap-grad-reduce ({shown.strip()})"
        assert fz_match(line) is None, line
    for off in ("overlap_grad_reduce=False", "--overlap-grad-reduce"):
        assert fuzzy.contradicted(entry, off) is None, off
    # exact text: what lies beside the message on its line decides
    assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" not in ids(
        "args: --overlap-grad-reduce --overlap-param-gather AssertionError: Must use --overlap-param-gather with "
        "--overlap-grad-reduce\n")
    assert "PARAM_GATHER_NEEDS_GRAD_REDUCE" in ids("AssertionError: Must use --overlap-param-gather with --overlap-grad-reduce\n")


def fz_match(line: str):
    return fuzzy.for_catalog(messages.load()).match(line)


def test_a_raise_under_a_negated_test_requires_that_setting_off():
    entry = messages.Entry(id="x", origin="python", kind="raise", severity="error", topic="dp_overlap",
                           template="a message", branch=("args.overlap_param_gather and not args.overlap_grad_reduce",))
    assert fuzzy.required(entry) == ("overlap_grad_reduce",)
    local = messages.Entry(id="y", origin="python", kind="assert", severity="error", topic="dp_overlap",
                           template="a message", condition="ok or HAVE_TE")
    assert fuzzy.required(local) == ()
