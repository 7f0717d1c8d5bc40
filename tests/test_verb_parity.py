"""Every verb that views the same scenario reports the same findings (issue 16's headline), over every shipped recipe
of the catalog that builds offline: resolve --recipe X and lint --recipe X; plan --recipe X and resolve of the same
recipe with the plan's overrides; diff's two sides and resolve of each (the same recipe on both sides, and one recipe
at two GPU counts). Through the Python API, one pass over the catalog shared by the tests."""

from functools import lru_cache

import pytest

import mbridge_overlap.api as api
import mbridge_overlap.verbs.diff
from mbridge_overlap.upstream import catalog, releases

VERSION = releases.get(None).version


def _built() -> list[str]:
    return [f"{e['package']}.{e['name']}" for e in catalog.entries(VERSION) if e.get("builds")]


def _findings(result) -> list[dict]:
    return [f.to_dict() for f in result.findings]


@lru_cache(maxsize=None)
def _resolved(ref: str, gpus: int | None = None):
    return api.resolve(recipe=ref, gpus=gpus)


def _disagreeing(pairs) -> list:
    return [(ref, sorted({f["id"] for f in a} ^ {f["id"] for f in b}) or "same ids, other text") for ref, a, b in pairs if a != b]


def test_catalog_has_the_recipes_the_issue_counts():
    # issue 16 counted 933 shipped recipes that real Bridge resolves; the parity below covers those and every other
    # recipe that builds offline (Bridge's rejections included: they resolve to an error finding).
    entries = catalog.entries(VERSION)
    accepted = [e for e in entries if e.get("builds") and e["bridge"]["error"] is None]
    assert len(accepted) >= 933 and len(_built()) >= len(accepted)


def test_resolve_and_lint_report_the_same_findings_for_every_recipe():
    refs = _built()
    pairs = []
    for ref in refs:
        r, li = _resolved(ref), api.lint(recipe=ref)
        pairs.append((ref, _findings(r), _findings(li)))
        # lint's payload is resolve's plus its own keys: nothing resolve says is said differently by lint
        rd, ld = r.to_dict(), li.to_dict()
        assert {k: v for k, v in ld.items() if k in rd} == rd, ref
    assert _disagreeing(pairs) == [], f"{len(_disagreeing(pairs))} of {len(refs)} recipes"


def test_plan_analyses_what_resolve_gives_for_its_overrides():
    pairs = []
    for ref in _built():
        p = api.plan(recipe=ref)
        pairs.append((ref, _findings(p.analysis), _findings(api.resolve(p.overrides, recipe=ref))))
    assert _disagreeing(pairs) == []


@pytest.fixture
def diff_sides(monkeypatch):
    """The two sides diff analyses, as it built them from its inputs."""
    seen = []
    side = mbridge_overlap.verbs.diff.side

    def recording(label, sc):
        seen.append(side(label, sc))
        return seen[-1]

    monkeypatch.setattr(mbridge_overlap.verbs.diff, "side", recording)
    return seen


def test_diff_sides_are_what_resolve_gives(diff_sides):
    same, doubled = [], []
    for ref in _built():
        diff_sides.clear()
        d = api.diff(recipe=ref).to_dict()
        assert d["overlap_changes"] == [] and d["changed_keys"] == 0, ref
        want = _findings(_resolved(ref))
        same += [(ref, want, _findings(s.analysis)) for s in diff_sides]
        gpus = _resolved(ref).scenario.gpus * 2
        diff_sides.clear()
        api.diff(recipe=ref, gpus_after=gpus)
        before, after = diff_sides
        doubled += [(ref, want, _findings(before.analysis)), (ref, _findings(api.resolve(recipe=ref, gpus=gpus)), _findings(after.analysis))]
    assert _disagreeing(same) == [] and _disagreeing(doubled) == []


def test_diff_of_two_recipes_counts_each_changed_input_once():
    # Two recipes with a comm_overlap section and mixed-precision recipes of their own: the section's fields and the
    # mixed-precision recipe's name are inputs, each one changed key (a section's presence and its fields collided
    # before: TypeError). The keys that differ, read from the two catalog entries' requests.
    before, after = "llama3_70b_pretrain_64gpu_h100_bf16_config", "llama3_70b_pretrain_64gpu_h100_fp8cs_config"
    a, b = (catalog.lookup(n, VERSION)["request"] for n in (before, after))
    differ = set()
    for section in set(a) | set(b):
        x, y = a.get(section) or {}, b.get(section) or {}
        differ |= {f"{section}.{k}" for k in set(x) | set(y) if x.get(k) != y.get(k)}
    differ = {"mixed_precision" if k == "mixed_precision.recipe" else k for k in differ}
    assert {"mixed_precision", "comm_overlap.tp_comm_overlap_cfg"} <= differ
    # a field the recipe sets over its mixed-precision recipe is an input of its own; one that moves no overlap setting
    # (the FP8 perf recipe's first_last_layers_bf16=false, against BF16's unset) is counted and ignored
    fields_a, fields_b = a["mixed_precision"]["fields"], b["mixed_precision"]["fields"]
    fields = {k for k in set(fields_a) | set(fields_b) if fields_a.get(k) != fields_b.get(k)}
    differ.discard("mixed_precision.fields")
    d = api.diff(recipe_before=before, recipe_after=after).to_dict()
    counted = set(d["explained_changes"]) | {c["key"] for c in d["unmodeled_changes"]} | set(d["same_effect_changes"])
    assert d["changed_keys"] == len(differ) + len(fields) and counted == differ
    assert d["ignored_changes"] == len(fields) and d["ignored_by_section"] == ({"mixed_precision": len(fields)} if fields else {})
