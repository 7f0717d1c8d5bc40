"""SKILL.md against the Agent Skills rules, and the checker itself on broken manifests."""

import pytest
import yaml

from conftest import ROOT
from mbridge_overlap.verbs.check_manifest import check_file, check_text, split


def test_skill_md_is_valid():
    assert check_file(ROOT / "SKILL.md") == []


def test_skill_md_frontmatter_says_what_the_design_requires():
    front, body = split((ROOT / "SKILL.md").read_text())
    meta = yaml.safe_load(front)
    assert meta["name"] == "nemo-mbridge-perf-tp-dp-comm-overlap"
    assert meta["license"] == "Apache-2.0"
    for trigger in ("overlap_param_gather", "overlap_grad_reduce", "sequence-parallel overlap", "TP overlap", "DP overlap",
                    "PP overlap", "comm overlap", "throughput"):
        assert trigger in meta["when_to_use"], trigger
    assert {"author", "tags", "version", "verified-against"} <= set(meta["metadata"])
    assert "0.6.2" in meta["metadata"]["verified-against"]
    for section in ("## Instructions", "## Example", "## Pitfalls", "## Verification"):
        assert section in body
    assert body.count("\n") < 500


GOOD = "---\nname: my-skill\ndescription: Does things. Use when things.\n---\nbody\n"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("no frontmatter\n", "must start with a '---' line"),
        ("---\nname: x\n", "not closed"),
        (GOOD.replace("my-skill", "My_Skill"), "lowercase letters"),
        (GOOD.replace("my-skill", "my--skill"), "single hyphens"),
        (GOOD.replace("my-skill", "-my-skill"), "single hyphens"),
        (GOOD.replace("my-skill", "a" * 65), "at most 64"),
        (GOOD.replace("Does things. Use when things.", "x" * 1025), "description: 1025 characters"),
        (GOOD.replace("Does things.", "Does <b>things</b>."), "angle brackets"),
        (GOOD.replace("name: my-skill\n", ""), "name: required"),
        (GOOD.replace("description: Does things. Use when things.\n", ""), "description: required"),
        (GOOD.replace("---\nbody", "triggers: x\n---\nbody"), "unknown key 'triggers'"),
        (GOOD.replace("---\nbody", "metadata:\n  version: 1.0\n---\nbody"), "metadata.version: value must be a string"),
        (GOOD.replace("---\nbody", "compatibility: " + "c" * 501 + "\n---\nbody"), "compatibility: 501 characters"),
        (GOOD.replace("body\n", "line\n" * 500), "keep it under 500"),
    ],
)
def test_checker_catches(text, problem):
    problems = check_text(text)
    assert any(problem in p for p in problems), problems


def test_when_to_use_is_the_one_extension():
    assert check_text(GOOD.replace("---\nbody", "when_to_use: Use it.\nlicense: MIT\nallowed-tools: Bash Read\n---\nbody")) == []


def test_directory_name_must_match_when_asked(tmp_path):
    folder = tmp_path / "other-name"
    folder.mkdir()
    (folder / "SKILL.md").write_text(GOOD)
    assert check_file(folder / "SKILL.md") == []
    assert any("directory name" in p for p in check_file(folder / "SKILL.md", check_directory=True))
