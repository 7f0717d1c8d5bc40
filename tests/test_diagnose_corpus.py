"""The corpus of real users' error texts (tests/data/diagnose_corpus/corpus.yaml): texts quoted in public upstream
threads, each with the thread, what the thread established and the knob behind it, negative controls included. It
was split into a development part and a held-out part by a fixed rule on the entry's id, in the commit that added it,
before diagnose's matcher was changed for it: the held-out part measures the matcher, it never tunes it."""

import hashlib
from collections import Counter

import yaml

from conftest import ROOT

CORPUS = ROOT / "tests" / "data" / "diagnose_corpus" / "corpus.yaml"
KINDS = {"other_release_wording", "traceback_through_overlap_code", "wrapper_framework", "symptom", "direct_message",
         "negative_control"}


def entries() -> list[dict]:
    return yaml.safe_load(CORPUS.read_text(encoding="utf-8"))["entries"]


def split_of(entry_id: str) -> str:
    return "dev" if hashlib.sha256(entry_id.encode()).hexdigest()[0] in "0123456789" else "held_out"


def test_every_entry_is_split_by_the_rule_on_its_id():
    assert all(e["split"] == split_of(e["id"]) for e in entries())
    assert len({e["id"] for e in entries()}) == len(entries())


def test_every_entry_cites_its_thread_and_says_what_it_established():
    for e in entries():
        # a thread of the repository, or a public page with the log pasted (batch 18: a blog's NeMo Automodel timeout)
        github = e["url"].startswith("https://github.com/")
        assert e["url"].startswith("https://") and (e["repo"] in e["url"] or not github), e["id"]
        assert e["quote"].strip() and e["cause"].strip() and e["kind"] in KINDS, e["id"]
        assert isinstance(e["knobs"], list) and isinstance(e["overlap_related"], bool), e["id"]
        assert (e["kind"] == "negative_control") == (not e["overlap_related"]), e["id"]
        assert e["overlap_related"] or e["knobs"] == [], e["id"]


def test_the_corpus_is_as_large_and_as_varied_as_promised():
    es = entries()
    assert len(es) >= 100 and len({e["repo"] for e in es}) >= 10
    counts = Counter((e["split"], e["overlap_related"]) for e in es)
    assert all(counts[split, related] >= 10 for split in ("dev", "held_out") for related in (True, False)), counts


def _judged(split: str) -> list:
    from tools.corpus_rates import run

    return run([e for e in entries() if e["split"] == split])


def test_no_negative_control_gets_an_overlap_cause():
    """Both parts: an overlap cause for a text that is not an overlap problem is invented, whichever part it is in."""
    for split in ("dev", "held_out"):
        wrong = [(e["id"], shown) for e, right, shown in _judged(split) if not e["overlap_related"] and not right]
        assert not wrong, wrong


def test_every_cause_of_a_corpus_text_names_knobs_of_its_bridge_release():
    """What diagnose names for a user's text is a config key that Megatron-Bridge 0.6.2 has (or a section of its
    ConfigContainer, or a launch variable)."""
    import io

    from mbridge_overlap import api
    from mbridge_overlap.upstream.releases import bridge_fields

    fields = bridge_fields("0.6.2")
    for e in entries():
        for c in api.diagnose(["-"], stdin=io.BytesIO(e["quote"].encode())).to_dict()["causes"]:
            for knob in c["knobs"]:
                section, _, name = knob.partition(".")
                # a whole section (peft: the adapter config) is a ConfigContainer field too
                assert section == "env_vars" or name in (fields.get(section) or ()) or (not name and section in fields), (e["id"], knob)
