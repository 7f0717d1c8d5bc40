"""Other releases' wordings (mbridge_overlap/data/message_variants.json, tools/gen_variant_messages.py): a log of an
older Megatron-Core, Transformer Engine or Bridge is read message by message, and the report says whose wording it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mbridge_overlap.diagnose import causes, messages as M

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = json.loads((ROOT / "mbridge_overlap/data/message_variants.json").read_text(encoding="utf-8"))


def _diagnose(tmp_path, text: str) -> dict:
    log = tmp_path / "run.log"
    log.write_text(text + "\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "mbridge_overlap", "diagnose", str(log), "--format", "json"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def test_the_file_holds_only_wordings_the_pinned_catalog_lacks():
    # (a native entry may hold an older release's text too, with the thread it was seen in: the catalog keeps that one)
    own = {(e.package, e.pattern) for e in M.load("0.6.2").entries if not e.releases and e.origin == "python"}
    rows = VARIANTS["entries"]
    assert rows and len({r["id"] for r in rows}) == len(rows)
    pinned = {f"{p} {v}" for p, v in VARIANTS["header"]["catalog_packages"].items()}
    for r in rows:
        assert r["pattern"] is None or (r["package"], r["pattern"]) not in own, r["id"]
        assert r["releases"] and not set(r["releases"]) & pinned, r["id"]


@pytest.mark.parametrize("release", ["0.5.1", "0.6.2"])
def test_each_catalog_adds_the_wordings_it_does_not_print(release):
    cat = M.load(release)
    own = [e for e in cat.entries if not e.releases]
    added = [e for e in cat.entries if e.releases]
    assert len(own) == cat.own_count and added
    patterns = {e.pattern for e in own}
    assert not any(e.pattern in patterns for e in added)


def test_a_variant_takes_its_later_form_s_findings_only_in_the_same_place():
    cat = M.load("0.6.2")
    index = causes.index(cat)
    inherited = 0
    for e in cat.entries:
        if not e.releases or not e.current:
            continue
        current = cat.by_id(e.current)
        same = (current is not None and current.file == e.file
                and current.function.rsplit(".", 1)[-1] == e.function.rsplit(".", 1)[-1])
        own_selectors = any(e.template and e.template.startswith(text) for sels in causes.selectors().values()
                            for text, *_ in sels)
        if not own_selectors:
            want = [link.finding for link in index.get(e.current, ())] if same else []
            assert [link.finding for link in index.get(e.id, ())] == want, e.id
            inherited += bool(want)
    assert inherited > 0


def test_megatron_core_0_14_wording_is_read_and_named(tmp_path):
    # megatron/core/model_parallel_config.py in megatron-core 0.8.0 to 0.14.0 (0.15 made it a warning, reworded)
    d = _diagnose(tmp_path, "ValueError: When using expert parallelism and tensor parallelism, sequence parallelism "
                            "must be used")
    cause = next(c for c in d["causes"] if c["id"] == "MOE_TP_WITHOUT_SEQUENCE_PARALLEL")
    ev = cause["evidence"][0]
    assert ev["wording_of"][0] == "megatron-core 0.8.0" and "megatron-core 0.14.0" in ev["wording_of"]
    assert "model.sequence_parallel" in cause["knobs"]
    assert d["catalog"]["other_wordings"] > 0


def test_an_older_typo_is_read_as_its_own_release_s_message(tmp_path):
    # Megatron-Core 0.8 to 0.14: "paralllelism" (three l); the pinned release spells it right
    d = _diagnose(tmp_path, "AssertionError: Can not use sequence paralllelism without tensor parallelism")
    evidence = [ev for c in d["causes"] for ev in c["evidence"]] + d["messages"] + d["other"]
    assert any("megatron-core 0.8.0" in (ev.get("wording_of") or ()) for ev in evidence), d


def test_the_pinned_wording_carries_no_release_list(tmp_path):
    d = _diagnose(tmp_path, "AssertionError: First dimension of the tensor should be divisible by tensor parallel size")
    evidence = [ev for c in d["causes"] for ev in c["evidence"]]
    assert evidence and all("wording_of" not in ev for ev in evidence)
