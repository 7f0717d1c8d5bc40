"""The check-or-write tail every generator ends with (tools/generated.py): a generator run as a script, as the docs
and CI run them, exits 1 with its message on a stale committed file and 0 on a fresh one, and writes what it checks;
and the helper's own contract (a missing file is stale, nothing is written under check, the messages it is given)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import generated

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """tools/ and mbridge_overlap/ in a temp dir: the generator's ROOT there, so its files are the copy's."""
    root = tmp_path_factory.mktemp("checkout")
    for name in ("tools", "mbridge_overlap"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "tools" / "gen_recipe_catalog.py"), "--index", *args],
                          cwd=root, capture_output=True, text=True, timeout=300)


def test_a_script_check_fails_on_a_stale_file_and_passes_on_a_fresh_one(copy):
    fresh = _run(copy, "--check")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert fresh.stdout.startswith("indexes match their catalogs: "), fresh.stdout

    index = copy / "mbridge_overlap" / "data" / "releases" / "0.6.2" / "recipes.index.json"
    good = index.read_text(encoding="utf-8")
    index.write_text(good.replace("]", "] ", 1), encoding="utf-8")  # one byte more: stale
    stale = _run(copy, "--check")
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert stale.stdout == ("index DIFFERS from its catalog: mbridge_overlap/data/releases/0.6.2/recipes.index.json "
                            "(run tools/gen_recipe_catalog.py --index)\n"), stale.stdout
    assert index.read_text(encoding="utf-8") != good  # --check writes nothing

    index.unlink()  # a missing file is stale too
    assert _run(copy, "--check").returncode == 1

    wrote = _run(copy)  # without --check: writes it back
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    assert wrote.stdout == "wrote mbridge_overlap/data/releases/0.6.2/recipes.index.json\n"
    assert index.read_text(encoding="utf-8") == good
    assert _run(copy, "--check").returncode == 0


def test_check_or_write_one_file(tmp_path, capsys):
    path = tmp_path / "sub" / "out.txt"
    said = lambda same: f"out.txt {'matches' if same else 'DIFFERS'}"  # noqa: E731
    assert generated.check_or_write(path, "new\n", True, verdict=said, wrote="unused") == 1  # missing
    assert not path.exists()
    assert generated.check_or_write(path, "new\n", False, verdict=said, wrote="wrote out.txt", mkdir=True,
                                    then=lambda p: print(f"then {p.name}")) == 0
    assert path.read_text(encoding="utf-8") == "new\n"
    assert generated.check_or_write(path, "new\n", True, verdict=said, wrote=None) == 0
    path.write_text("old\n", encoding="utf-8")
    assert generated.check_or_write(path, "new\n", True, verdict=said, wrote=None) == 1
    assert path.read_text(encoding="utf-8") == "old\n"
    assert capsys.readouterr().out == "out.txt DIFFERS\nwrote out.txt\nthen out.txt\nout.txt matches\nout.txt DIFFERS\n"
    generated.check_or_write(path, "x", True, verdict=said, wrote=None, file=sys.stderr)
    assert capsys.readouterr().err == "out.txt DIFFERS\n"


def test_check_or_write_several_files(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("A", encoding="utf-8")
    files = [(a, "A"), (b, "B")]
    assert generated.check_or_write_all(files, True) == [b]
    assert not b.exists()
    assert generated.check_or_write_all(files, False, wrote=lambda p: f"wrote {p.name}", changed_only=True) == []
    assert capsys.readouterr().out == "wrote b\n"
    assert generated.check_or_write_all(files, True) == []
    assert generated.check_or_write_all(files, False, wrote=lambda p: f"wrote {p.name}") == []
    assert capsys.readouterr().out == "wrote a\nwrote b\n"
    assert generated.verdict([b], "out of date: b", "all match") == 1
    assert generated.verdict([], "out of date", "all match") == 0
    assert generated.verdict([], "out of date") == 0
    assert capsys.readouterr().out == "out of date: b\nall match\n"
