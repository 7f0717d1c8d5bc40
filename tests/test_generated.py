"""One generation harness: tools/gen_all.py --check runs every generator that needs no Bridge once for the tier (the
tests of each generated file read its line through conftest.generated()), and the counts and facts the hand-written
pages take from the data are generated blocks (tools/gen_docs.py) that say what the data says."""

import json
import re

import pytest
import yaml

from conftest import ROOT, generated
from mbridge_overlap.upstream import catalog, releases

from tools import gen_docs  # noqa: E402

HARNESS = ("gen_compiled_data.py", "gen_recipe_catalog.py", "gen_references.py", "gen_card.py", "gen_docs.py")


def test_every_generator_without_bridge_is_in_the_harness_and_up_to_date():
    results = generated()
    assert sorted(results) == sorted(HARNESS)
    assert {name: said for name, (ok, said) in results.items() if not ok} == {}


def test_the_generated_blocks_are_up_to_date():
    ok, said = generated()["gen_docs.py"]
    assert ok, said


def _page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _blocks(name: str) -> dict:
    out: dict = {}
    for block, value in gen_docs.BLOCK.findall(_page(name)):
        out.setdefault(block, set()).add(value)
    return out


def _prose(name: str) -> str:
    """A page without its generated blocks and (SKILL.md) its front matter."""
    text = gen_docs.BLOCK.sub("", _page(name))
    return text.split("\n---\n", 1)[1] if name == "SKILL.md" else text


def test_a_stale_block_is_named_and_filled_again():
    values = {name: make() for name, make in gen_docs.BLOCKS.items()}
    text = _page("README.md")
    block = next(iter(_blocks("README.md")))
    stale = re.sub(rf"(<!-- generated:{block} -->).*?(<!-- /generated -->)", r"\g<1>999\g<2>", text, count=1, flags=re.S)
    assert stale != text
    filled, changed = gen_docs.render("README.md", stale, values)
    assert filled == text and [(b, was) for b, was, _ in changed] == [(block, "999")]
    skill = _page("SKILL.md")
    wrong = re.sub(r'^(  verified-against: )".*"$', r'\g<1>"megatron-bridge 0.0.1"', skill, count=1, flags=re.M)
    filled, changed = gen_docs.render("SKILL.md", wrong, values)
    assert wrong != skill and filled == skill and [(b, was) for b, was, _ in changed] == [("verified-against", "megatron-bridge 0.0.1")]
    with pytest.raises(SystemExit, match="unknown generated block"):
        gen_docs.render("README.md", text + "<!-- generated:no_such_block -->1<!-- /generated -->\n", values)


def test_the_pages_state_what_the_data_says():
    # each fact read here from the data files themselves, not through the generator
    version = yaml.safe_load((releases.DATA_DIR / "releases.yaml").read_text())["default_release"]
    rel = yaml.safe_load((releases.DATA_DIR / "releases.yaml").read_text())["releases"][version]
    recipes = json.loads(catalog.catalog_path(version).read_text())["recipes"]
    functions = sum(1 for e in recipes if not e.get("alias_of"))
    readme = _blocks("README.md")
    assert readme["recipe_functions"] == {f"{functions:,}"}
    assert f"{version}: {len(recipes):,} public names, {functions:,} functions" in readme["catalog_counts"].pop()
    assert readme["verified_packages"] == {f"megatron-bridge {version}, megatron-core {rel['megatron_core']} and "
                                           f"Transformer Engine {rel['transformer_engine']}"}
    suites = yaml.safe_load((releases.DATA_DIR / "suites.yaml").read_text())["measured"]
    (readme_suites,), (skill_suites,) = readme["suite_counts"], _blocks("SKILL.md")["suite_counts_by_release"]
    for row in (r for r in suites if r["bridge"] == version):
        assert f"`{row['suite']}` {row['passed']} passed" in readme_suites and f"`{row['suite']}` {row['passed']} passed" in skill_suites
    header = json.loads((releases.DATA_DIR / "releases" / version / "messages.json").read_text())["header"]["counts"]
    assert readme["message_counts"] == {f"{version}: {header['by_package']['megatron-bridge']['entries']:,}, "
                                        f"{header['by_package']['megatron-core']['entries']:,} and "
                                        f"{header['by_package']['transformer-engine']['entries']:,}, plus {header['native']:,}"}
    front = yaml.safe_load(_page("SKILL.md").split("---\n")[1])["metadata"]
    assert front["verified-against"] == f"megatron-bridge {version}, megatron-core {rel['megatron_core']}, " \
                                        f"transformer-engine {rel['transformer_engine']}"
    listed = front["releases"].split(";")[0].split(", ")
    every = yaml.safe_load((releases.DATA_DIR / "releases.yaml").read_text())["releases"]
    assert sorted(listed) == sorted(f"{v} (yanked)" if r.get("yanked") else v for v, r in every.items())


def test_counts_from_the_data_are_not_restated_outside_the_blocks():
    version = releases.default_version()
    recipes = catalog.entries(version)
    functions = sum(1 for e in recipes if not e.get("alias_of"))
    rel = releases.data()["releases"][version]
    suites = yaml.safe_load((releases.DATA_DIR / "suites.yaml").read_text())["measured"]
    facts = {f"{functions:,} ", f"{len(recipes):,} public", rel["megatron_core"], rel["transformer_engine"],
             *(f"{r['passed']} passed" for r in suites), *releases.data()["newer_releases"]}
    for name in gen_docs.PAGES:
        prose = _prose(name)
        assert [f for f in facts if f in prose] == [], name
