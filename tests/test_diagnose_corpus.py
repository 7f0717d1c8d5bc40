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
        assert e["url"].startswith("https://github.com/") and e["repo"] in e["url"], e["id"]
        assert e["quote"].strip() and e["cause"].strip() and e["kind"] in KINDS, e["id"]
        assert isinstance(e["knobs"], list) and isinstance(e["overlap_related"], bool), e["id"]
        assert (e["kind"] == "negative_control") == (not e["overlap_related"]), e["id"]
        assert e["overlap_related"] or e["knobs"] == [], e["id"]


def test_the_corpus_is_as_large_and_as_varied_as_promised():
    es = entries()
    assert len(es) >= 100 and len({e["repo"] for e in es}) >= 10
    counts = Counter((e["split"], e["overlap_related"]) for e in es)
    assert all(counts[split, related] >= 10 for split in ("dev", "held_out") for related in (True, False)), counts
