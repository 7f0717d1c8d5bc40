"""The generated reference pages are up to date with the registry, the release data and the recipe catalog, and the
lint calibration they publish holds: no warning or error on a shipped perf recipe without real Bridge's evidence."""

from conftest import ROOT, generated
from tools import gen_references


def test_reference_pages_are_generated_from_the_data():
    ok, said = generated()["gen_references.py"]  # tools/gen_all.py --check, run once for the tier
    assert ok, said


def test_every_finding_id_has_its_section():
    text = (ROOT / "references" / "findings.md").read_text()
    from mbridge_overlap.findings import records as registry

    assert all(f"### {fid}\n" in text for fid in registry())


def test_no_warning_on_a_shipped_perf_recipe_without_evidence():
    """Every warning or error lint raises on Bridge's own tuned perf recipes has real Bridge's answer behind it."""
    page = gen_references.lint_page()
    items = [line for line in page.splitlines() if line.startswith("- **")]
    evidence = [line for line in page.splitlines() if line.startswith("  Evidence: ")]
    assert len(items) == len(evidence) and items
    assert not [e for e in evidence if "effective values in the catalog." in e]


def test_the_index_lists_every_reference_and_skill_md_links_resolve():
    index = (ROOT / "references" / "README.md").read_text()
    for path in (ROOT / "references").iterdir():
        if path.name != "README.md":
            assert f"]({path.name}{'/' if path.is_dir() else ''})" in index, path.name
    import re

    for doc in ("SKILL.md", "references/README.md"):
        for link in re.findall(r"\]\(([^)#]+)\)", (ROOT / doc).read_text()):
            assert (ROOT / doc).parent.joinpath(link).exists(), f"{doc}: {link}"


def test_every_anchor_is_on_the_rules_page_with_the_findings_it_decides():
    from mbridge_overlap.upstream import anchors
    from mbridge_overlap.findings import records as registry

    rows = {line.split("|")[1].strip(" `"): line for line in (ROOT / "references" / "rules.md").read_text().splitlines()
            if line.startswith("| `")}
    assert set(rows) == set(anchors.specs())
    for fid, rec in registry().items():
        if rec.get("anchor"):
            assert f"`{fid}`" in rows[rec["anchor"]], fid
