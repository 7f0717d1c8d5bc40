"""Installed as a skill: scripts/install-skill copies what an agent runs, SKILL.md's own commands answer from another
folder, and nothing is written into the skill folder (bytecode included)."""

import hashlib
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from test_docs import COMMANDS, LAUNCHER, NEEDS_BRIDGE, run_as_written

NAME = "nemo-mbridge-perf-tp-dp-comm-overlap"


def install(skills_dir, *flags):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "install-skill"), str(skills_dir), *flags],
                          capture_output=True, text=True)


def snapshot(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    skills = tmp_path_factory.mktemp("skills")
    proc = install(skills)
    assert proc.returncode == 0, proc.stderr
    return skills / NAME


def test_what_gets_installed(installed):
    names = set(snapshot(installed))
    assert {"SKILL.md", "scripts/mbridge-overlap", "scripts/verify.sh", "mbridge_overlap/cli/__init__.py",
            "mbridge_overlap/templates/python.py.j2"} <= names
    assert not any(n.startswith(("tests", ".ci")) or "__pycache__" in n or n.endswith(".pyc") for n in names)
    listed = install(installed.parent, "--dry-run").stdout.split()
    assert sorted(listed) == sorted(n for n, h in snapshot(installed).items() if h != "dir")


def test_every_file_skill_md_and_its_references_link_is_installed(installed):
    """evalR S6: SKILL.md linked docs/budget.md, which the install left out."""
    import re

    pages = [p.relative_to(installed).as_posix() for folder in ("references", "docs") for p in (installed / folder).glob("*.md")]
    for page in ["SKILL.md", "README.md", *pages]:
        text = (installed / page).read_text()
        for target in re.findall(r"\]\(([^)#:]+?\.(?:md|svg|json))\)", text):
            assert (installed / page).parent.joinpath(target).resolve().is_file(), (page, target)


def test_skill_md_commands_answer_from_another_folder_and_write_nothing(installed, tmp_path):
    commands = [c for doc, c in COMMANDS if doc == "SKILL.md"]
    assert len(commands) >= 8
    commands = [c for c in commands if c.split()[2] not in NEEDS_BRIDGE]  # covered in tests/bridge
    before = snapshot(installed)
    env_backup = os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the agent's shell writes bytecode by default
    try:
        for command in commands:
            proc = run_as_written(command.replace("${CLAUDE_SKILL_DIR}", str(installed)), tmp_path)
            assert proc.returncode in (0, 1), f"{command}\n{proc.stderr}"
            assert proc.stdout, command
        assert snapshot(installed) == before
        # An engineer's `python -m` from the folder: Python caches the package's bytecode beside it, as for any package
        engineer = subprocess.run([sys.executable, "-m", "mbridge_overlap", "plan", "--tp", "2", "--gpus", "8"], cwd=installed,
                                  capture_output=True, text=True, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert engineer.returncode == 0, engineer.stderr
    finally:
        if env_backup is not None:
            os.environ["PYTHONDONTWRITEBYTECODE"] = env_backup
    assert all(c.startswith(LAUNCHER) for c in commands)


def test_the_launcher_caches_its_bytecode_in_the_users_cache_alone_even_under_pythondontwritebytecode(installed, tmp_path):
    """An agent's shell may set PYTHONDONTWRITEBYTECODE: the launcher's bytecode still goes to the user's cache (and
    nowhere else), so a command does not compile the package from source every time."""
    before = snapshot(installed)
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(cache)}
    proc = subprocess.run([sys.executable, str(installed / "scripts" / "mbridge-overlap"), "plan", "--tp", "2", "--gpus", "8"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    cached = {p.name for p in (cache / "mbridge-overlap" / "pycache").rglob("*.pyc")}
    assert {f"{m}.{sys.implementation.cache_tag}.pyc" for m in ("options", "plan", "resolver")} <= cached
    assert snapshot(installed) == before
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]


def test_an_existing_install_is_replaced_only_with_force(tmp_path):
    assert install(tmp_path).returncode == 0
    again = install(tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr and again.stderr.count("\n") == 1
    (tmp_path / NAME / "stale.txt").write_text("from an older install")
    assert install(tmp_path, "--force").returncode == 0
    assert not (tmp_path / NAME / "stale.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == [NAME]  # no staging folder left behind


def test_megatron_bridges_own_skill_of_the_same_name_is_never_replaced(tmp_path):
    upstream = tmp_path / NAME
    upstream.mkdir()
    (upstream / "SKILL.md").write_text("---\nname: nemo-mbridge-perf-tp-dp-comm-overlap\ndescription: upstream\n---\n")
    for flags in ((), ("--force",)):
        proc = install(tmp_path, *flags)
        assert proc.returncode == 2 and "Megatron-Bridge's own skill" in proc.stderr
    assert (upstream / "SKILL.md").read_text().endswith("description: upstream\n---\n")


def test_the_wheel_carries_every_data_file():
    """pip install . ships only what pyproject's package-data globs name: every data file must match one."""
    import fnmatch

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["mbridge_overlap"]
    data = [str(p.relative_to(ROOT / "mbridge_overlap")) for p in (ROOT / "mbridge_overlap" / "data").rglob("*") if p.is_file()]
    def matches(path: str, glob: str) -> bool:  # setuptools' globs: `*` stays within one folder
        parts, pattern = path.split("/"), glob.split("/")
        return len(parts) == len(pattern) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pattern))

    assert data and [d for d in data if not any(matches(d, g) for g in globs)] == []
    assert not matches("data/releases/0.6.2/recipes.json", "data/*.yaml")
