"""A small Megatron-Bridge-shaped checkout of our own test files, for the suite runner (CI has no real one)."""

from pathlib import Path

PASSING = "def test_a():\n    assert True\n\n\ndef test_b():\n    assert 1 + 1 == 2\n\n\ndef test_c():\n    pass\n"
FAILING = "def test_a():\n    pass\n\n\ndef test_b():\n    assert False, 'broken on purpose'\n"
SKIPPED = "import pytest\n\n\n@pytest.mark.skip(reason='fixture')\ndef test_a():\n    pass\n"
ERRORING = "import no_such_module_anywhere  # noqa: F401\n\n\ndef test_a():\n    pass\n"
EMPTY = "# no tests here\n"


def make(root: Path, comm_overlap: str = PASSING, run_plugins: str = PASSING) -> Path:
    files = {
        "tests/unit_tests/training/test_comm_overlap.py": comm_overlap,
        "tests/unit_tests/recipes/test_run_plugins.py": run_plugins,
        "src/megatron/bridge/__init__.py": "",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
