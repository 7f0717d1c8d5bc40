"""The generated reference pages are up to date with the registry, the release data and the recipe catalog, and the
lint calibration they publish holds: no warning or error on a shipped perf recipe without real Bridge's evidence."""

import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gen_references  # noqa: E402


def test_reference_pages_are_generated_from_the_data():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_references.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_finding_id_has_its_section():
    text = (ROOT / "references" / "findings.md").read_text()
    from mbridge_overlap.findings import registry

    assert all(f"### {fid}\n" in text for fid in registry())


def test_no_warning_on_a_shipped_perf_recipe_without_evidence():
    """Every warning or error lint raises on Bridge's own tuned perf recipes has real Bridge's answer behind it."""
    page = gen_references.lint_page()
    items = [line for line in page.splitlines() if line.startswith("- **")]
    evidence = [line for line in page.splitlines() if line.startswith("  Evidence: ")]
    assert len(items) == len(evidence) and items
    assert not [e for e in evidence if "effective values in the catalog." in e]
