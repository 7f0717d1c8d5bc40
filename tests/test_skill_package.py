"""The skill package in Megatron-Bridge's skills format: evals/evals.json and card.yaml against upstream's field lists
(references/schemas/skill-*.schema.json), every eval's ground truth checked by running its command
(evals/checks.yaml), and card.yaml equal to what tools/gen_card.py generates."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_schemas import errors

ROOT = Path(__file__).resolve().parent.parent
SKILL = "nemo-mbridge-perf-tp-dp-comm-overlap"
SHORT = "tp-dp-comm-overlap"
EVALS = json.loads((ROOT / "evals" / "evals.json").read_text(encoding="utf-8"))
UPSTREAM_KEYS = ["id", "question", "expected_skill", "expected_script", "ground_truth", "expected_behavior"]
# The neighbouring skills a negative task may route to: their names as NVIDIA-NeMo/Megatron-Bridge main spells them
# (skills/<name>/SKILL.md).
NEIGHBOURS = {
    "nemo-mbridge-perf-expert-parallel-overlap",
    "nemo-mbridge-perf-moe-comm-overlap",
    "nemo-mbridge-perf-activation-recompute",
    "nemo-mbridge-perf-cuda-graphs",
    "nemo-mbridge-perf-megatron-fsdp",
}
# card.yaml keys in the order upstream's fullest cards write them (cuda-graphs, activation-recompute, ...).
CARD_KEYS = ["title", "validated_on", "summary", "validation_status", "training_dimensions", "enable_when",
             "avoid_when", "interactions", "feature_meaning", "config_keys", "recommended_path", "expected_metric_change",
             "measured_results", "minimal_example", "failure_modes", "known_constraints", "known_limitations", "evidence",
             "follow_up_validation"]
# validation_status values upstream's cards use that say what proves a claim.
STATUSES = {"code_verified", "recipe_verified", "functional_verified", "parity_verified", "measured", "doc_only",
            "documented", "unclear", "known_failure"}
TRACES = Path(os.environ.get("MBRIDGE_SKILL_TRACES", ROOT.parent / "shared" / "data" / "traces"))


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML without silently repeated keys: a second `has(...)` line would otherwise replace the first."""


def _mapping(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    repeated = {k for k in keys if keys.count(k) > 1}
    if repeated:
        raise yaml.constructor.ConstructorError(None, None, f"repeated keys {sorted(repeated)}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
CHECKS = yaml.load((ROOT / "evals" / "checks.yaml").read_text(encoding="utf-8"), Loader=UniqueKeyLoader)
POSITIVE = [e for e in EVALS if e["expected_skill"] == SKILL]
NEGATIVE = [e for e in EVALS if e["expected_skill"] != SKILL]


# ------------------------------------------------------------------------------------------------ evals.json
def test_evals_have_upstreams_fields():
    assert errors("skill-evals.schema.json", EVALS) == []
    for e in EVALS:
        assert list(e) == UPSTREAM_KEYS, e["id"]


def test_eval_ids_are_unique_and_named_after_the_skill():
    ids = [e["id"] for e in EVALS]
    assert len(ids) == len(set(ids))
    assert all(i.startswith(f"{SHORT}-") for i in ids)


def test_ten_positive_and_three_negative_tasks():
    assert len(POSITIVE) >= 10 and len(NEGATIVE) >= 3


def test_positive_tasks_name_the_skill_and_its_script():
    for e in POSITIVE:
        assert e["question"].startswith(f"Use the {SKILL} skill. "), e["id"]
        assert e["expected_behavior"][0] == f"Read the {SKILL} skill before answering.", e["id"]
        prefix = f"skills/{SKILL}/"
        assert e["expected_script"].startswith(prefix), e["id"]
        script = ROOT / e["expected_script"][len(prefix):]
        assert script.is_file() and os.access(script, os.X_OK), e["expected_script"]
        assert "${CLAUDE_SKILL_DIR}/scripts/" + script.name in e["ground_truth"], e["id"]


def test_negative_tasks_route_to_a_neighbouring_skill():
    for e in NEGATIVE:
        assert e["expected_skill"] in NEIGHBOURS, e["id"]
        assert e["expected_script"] is None, e["id"]
        assert SKILL not in e["question"] and e["expected_skill"] in e["ground_truth"], e["id"]
        assert any(e["expected_skill"] in b for b in e["expected_behavior"]), e["id"]
    covered = {e["expected_skill"] for e in NEGATIVE}
    assert {"nemo-mbridge-perf-activation-recompute", "nemo-mbridge-perf-cuda-graphs"} <= covered
    assert covered & {"nemo-mbridge-perf-expert-parallel-overlap", "nemo-mbridge-perf-moe-comm-overlap"}


def test_positive_tasks_cover_every_verb_and_verify():
    verbs = {run["argv"][0] for e in POSITIVE for run in CHECKS[e["id"]] if "script" not in run}
    assert {"plan", "resolve", "lint", "diff", "trace", "recipes"} <= verbs, verbs
    assert any(e["expected_script"].endswith("/scripts/verify.sh") for e in POSITIVE)
    assert any("--recipe" in run["argv"] for e in POSITIVE for run in CHECKS[e["id"]])


def test_every_positive_task_has_checks_and_the_ground_truth_names_the_checked_command():
    assert set(CHECKS) <= {e["id"] for e in EVALS}
    for e in POSITIVE:
        runs = CHECKS.get(e["id"])
        assert runs, f"{e['id']}: no checks in evals/checks.yaml"
        first = runs[0]
        if "script" not in first:
            command = " ".join(str(a).replace("$TRACES/", "") for a in first["argv"])
            assert f"scripts/mbridge-overlap {command} --format json" in e["ground_truth"], e["id"]


# ------------------------------------------------------------------------------------------------ the checks
MISSING = object()
TOKEN = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


def literal(text: str):
    return yaml.safe_load(text)


def parse(path: str) -> list:
    out = []
    for bracket, name in TOKEN.findall(path):
        if name:
            out.append(("key", name))
        elif re.fullmatch(r"-?\d+", bracket):
            out.append(("index", int(bracket)))
        elif bracket.startswith("?"):
            field, op, value = re.fullmatch(r"\?([\w.]+)(=|>)(.*)", bracket).groups()
            out.append(("filter", field, op, literal(value)))
        elif "=" in bracket:
            field, value = bracket.split("=", 1)
            out.append(("pick", field, literal(value)))
        else:
            out.append(("key", bracket))
    return out


def dig(item, dotted: str):
    for part in dotted.split("."):
        if not isinstance(item, dict) or part not in item:
            return MISSING
        item = item[part]
    return item


def same(a, b) -> bool:
    """Equality that keeps JSON's types apart: true is not 1, "1" is not 1 (4 and 4.0 are the same number)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def step(node, token):
    kind = token[0]
    if kind in ("key", "index"):
        return node[token[1]]
    for item in node:
        if same(dig(item, token[1]), token[2]):
            return item
    raise AssertionError(f"no item with {token[1]}={token[2]!r}")


def select(data, path: str):
    node, many = data, False
    for token in parse(path):
        if token[0] == "filter":
            assert not many, f"{path}: one filter per path"
            _, field, op, value = token
            keep = (lambda v, value=value: same(v, value)) if op == "=" else (lambda v, value=value: isinstance(v, (int, float)) and v > value)
            node, many = [x for x in node if dig(x, field) is not MISSING and keep(dig(x, field))], True
        elif many:
            node = [step(x, token) for x in node]
        elif token[0] == "key" and isinstance(node, list):  # a key of a list: that key of every item
            node, many = [step(x, token) for x in node], True
        else:
            node = step(node, token)
    return node


def expect(data, key: str, want) -> None:
    m = re.fullmatch(r"(len|each|has)\((.+)\)", key)
    op, path = (m.group(1), m.group(2)) if m else ("equals", key)
    got = select(data, path)
    if op == "len":
        assert len(got) == want, f"{key}: {len(got)} items, expected {want}"
    elif op == "each":
        assert got and all(same(g, want) for g in got), f"{key}: {got}"
    elif op == "has":
        for text in want if isinstance(want, list) else [want]:
            assert text in got, f"{key}: {text!r} not in {got!r}"
    else:
        assert same(got, want), f"{key}: got {got!r}, expected {want!r}"


def command(evaluation: dict, run: dict) -> list[str]:
    script = run.get("script") or evaluation["expected_script"].split(f"skills/{SKILL}/", 1)[1]
    argv = [str(a).replace("$TRACES", str(TRACES)) for a in run["argv"]]
    if any("$TRACES" in str(a) for a in run["argv"]) and not TRACES.is_dir():
        pytest.skip(f"no traces at {TRACES} (set MBRIDGE_SKILL_TRACES)")
    return [sys.executable, str(ROOT / script), *argv, "--format", "json"]


RUNS = [(e, i) for e in EVALS for i in range(len(CHECKS.get(e["id"], [])))]


@pytest.mark.parametrize("evaluation,index", RUNS, ids=[f"{e['id']}-{i}" for e, i in RUNS])
def test_eval_ground_truth(evaluation, index):
    """Run the eval's command as an agent does (the skill's launcher, from the skill folder) and check each fact."""
    run = CHECKS[evaluation["id"]][index]
    proc = subprocess.run(command(evaluation, run), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == run.get("exit", 0), proc.stderr
    if "stderr" in run:
        assert run["stderr"] in proc.stderr and proc.stdout == "", proc.stderr
    if "expect" not in run and "absent" not in run:
        return
    data = json.loads(proc.stdout)
    for key, want in run.get("expect", {}).items():
        expect(data, key, want)
    present = {f["id"] for f in data.get("findings", [])}
    assert not present & set(run.get("absent", [])), present


def test_the_check_language_fails_on_a_wrong_value():
    data = {"a": [{"id": "X", "n": 1, "ok": True}, {"id": "Y", "n": 2, "ok": False}], "m": {"k.j": 1}}
    expect(data, "a[id=Y].n", 2)
    expect(data, "len(a[?n>1])", 1)
    expect(data, "each(a[?ok=true].id)", "X")
    expect(data, "m[k.j]", 1)
    for key, want in [("a[id=Y].n", 3), ("a[0].ok", 1), ("m[k.j]", "1"), ("len(a)", 3), ("each(a.ok)", True)]:
        with pytest.raises(AssertionError):
            expect(data, key, want)


# ------------------------------------------------------------------------------------------------ card.yaml
def load_generator():
    from tools import gen_card

    return gen_card


CARD_TEXT = (ROOT / "card.yaml").read_text(encoding="utf-8")
CARD = yaml.safe_load(CARD_TEXT)


def test_card_has_upstreams_fields_in_upstreams_order():
    assert errors("skill-card.schema.json", CARD) == []
    assert list(CARD) == [k for k in CARD_KEYS if k in CARD], list(CARD)
    assert CARD["title"] == SHORT.replace("-", "_")


def test_card_statuses_say_what_proves_each_claim():
    for claim, statuses in CARD["validation_status"].items():
        assert set(statuses) <= STATUSES, (claim, statuses)


def test_card_is_what_the_generator_writes():
    from conftest import generated

    ok, said = generated()["gen_card.py"]  # tools/gen_all.py --check, run once for the tier
    assert ok and "card.yaml is up to date" in said, said


def test_card_counts_are_the_data_and_the_tests():
    """The numbers the card states are the recipe catalog's, suites.yaml's and the Bridge tier's."""
    gen = load_generator()
    facts = gen.facts()
    assert facts["recipes_resolved"] == facts["recipes_agree"] > 900
    assert {k: v["passed"] for k, v in facts["suites"].items()} == {"test_comm_overlap.py": 37, "test_run_plugins.py": 25}
    assert f"conformance.run({facts['conformance_cases']}" in (ROOT / "tests" / "bridge" / "test_conformance.py").read_text()
    block = re.search(r"^validation_status:\n((?:[ ].*\n)+)", CARD_TEXT, re.M).group(1)
    assert f"{facts['recipes_agree']}/{facts['recipes_resolved']} " in block
    assert f"{facts['conformance_cases']} generated configs" in block
    assert "37 passed" in block and "25 passed" in block


# ------------------------------------------------------------------------------------------------ upstream's files
UPSTREAM = Path(os.environ.get("MBRIDGE_SRC", "")) / "skills"


@pytest.mark.skipif(not os.environ.get("MBRIDGE_SRC") or not UPSTREAM.is_dir(),
                    reason="set MBRIDGE_SRC to a Megatron-Bridge checkout with skills/ to check the field lists against it")
def test_upstreams_own_files_fit_the_field_lists():
    evals = sorted(UPSTREAM.glob("*/evals/evals.json"))
    cards = sorted(UPSTREAM.glob("*/card.yaml"))
    assert evals and cards
    for path in evals:
        tasks = json.loads(path.read_text(encoding="utf-8"))
        assert errors("skill-evals.schema.json", tasks) == [], path
        assert all(list(t) == UPSTREAM_KEYS for t in tasks), path
    for path in cards:
        assert errors("skill-card.schema.json", yaml.safe_load(path.read_text(encoding="utf-8"))) == [], path
    assert NEIGHBOURS <= {p.name for p in UPSTREAM.iterdir()}


def test_skill_md_first_screen_routes_moe_expert_parallel_overlap_to_its_skill():
    # The first screen after the front matter names the skill the registry's MoE expert-parallel findings route to, as
    # the folder name upstream ships it under skills/ (where the mirror is here).
    from mbridge_overlap import findings

    body = (ROOT / "SKILL.md").read_text().split("\n---\n", 1)[1]
    first_screen = " ".join(body.splitlines()[:20])
    routed = {rec["skill"] for rec in findings.records().values() if rec.get("skill") and "expert" in rec["skill"]}
    assert len(routed) == 1
    skill = routed.pop()
    assert f"`{skill}`" in first_screen and "MoE expert-parallel overlap" in first_screen
    mirror = Path(os.environ.get("MBRIDGE_SKILL_MIRROR", ROOT.parent / ".mirror" / "NVIDIA-NeMo+Megatron-Bridge" / "repo"))
    if not mirror.is_dir():
        pytest.skip(f"no Megatron-Bridge mirror at {mirror} (set MBRIDGE_SKILL_MIRROR)")
    listed = subprocess.run(["git", "-C", str(mirror), "ls-tree", "-d", "--name-only", "HEAD", "skills/"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert f"skills/{skill}" in listed
