"""Run each eval question's command through the CLI and check its JSON against the ground truth."""

import re
from pathlib import Path

import pytest
import yaml

from conftest import run_cli

CASES = yaml.safe_load((Path(__file__).parent / "cases.yaml").read_text())


def lookup(data, path: str):
    """Dotted path into the JSON; `findings[ID]` selects a finding by id; dotted override keys stay whole."""
    m = re.match(r"findings\[(\w+)\]\.(\w+)$", path)
    if m:
        found = [f for f in data["findings"] if f["id"] == m.group(1)]
        assert found, f"no finding {m.group(1)}: {[f['id'] for f in data['findings']]}"
        return found[0][m.group(2)]
    head, _, rest = path.partition(".")
    if head == "overrides":
        return data["overrides"][rest]
    node = data
    for part in path.split("."):
        node = node[part]
    return node


def test_at_least_twelve_cases_with_negative_ones():
    assert len(CASES) >= 12
    negatives = [c for c in CASES if any(k.endswith("enabled") and v is False for k, v in c["expect"].items())
                 or any(k.endswith("tp_comm_overlap") and v is False for k, v in c["expect"].items())]
    assert len(negatives) >= 4


@pytest.mark.parametrize("case", CASES, ids=[c["question"][:60] for c in CASES])
def test_eval(case):
    proc = run_cli(*case["command"], "--format", "json")
    assert proc.returncode == case.get("exit", 0), proc.stderr
    import json

    data = json.loads(proc.stdout)
    for path, want in case["expect"].items():
        assert lookup(data, path) == want, f"{case['question']}: {path}"
    ids = {f["id"] for f in data["findings"]}
    assert not ids & set(case.get("absent", []))
