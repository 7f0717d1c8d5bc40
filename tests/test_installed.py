"""`pip install .` as a user does it: the wheel built from a copy of the tracked files (nothing is written into the
checkout), installed into a fresh venv outside it, and every verb run through the installed `mbridge-overlap` from
another folder; no process of ours is left once a command has ended."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, ours_running

LOG = ROOT / "tests" / "data" / "logs" / "upstream" / "bridge650_multicast_not_supported_ub_skipmc.log"


def tracked(*parts: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *parts], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"not a git checkout: {out.stderr.strip()}")
    return [ROOT / p for p in out.stdout.split()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin folder of a fresh venv with the wheel installed."""
    work = tmp_path_factory.mktemp("install")
    src = work / "src"
    for path in tracked("pyproject.toml", "README.md", "mbridge_overlap"):
        dest = src / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"),
                            str(src)], capture_output=True, text=True)
    if build.returncode != 0 and "No module named" in build.stderr:
        pytest.skip(f"this Python cannot build wheels: {build.stderr.strip().splitlines()[-1]}")
    assert build.returncode == 0, build.stderr
    wheel = next((work / "dist").glob("*.whl"))
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(work / "venv")], check=True, capture_output=True)
    pip = subprocess.run([str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          str(wheel)], capture_output=True, text=True)
    if pip.returncode != 0 and ("No matching distribution" in pip.stderr or "Could not find a version" in pip.stderr):
        pytest.skip(f"the package index is out of reach for pyyaml and jinja2: {pip.stderr.strip().splitlines()[-1]}")
    assert pip.returncode == 0, pip.stderr
    return work / "venv" / "bin"


def run(bin_dir: Path, cwd: Path, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([str(bin_dir / "mbridge-overlap"), *map(str, args)], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=300)


def test_the_wheel_holds_every_subpackage_and_its_data(installed):
    site = next(installed.parent.glob("lib/python*/site-packages"))
    packages = {p.parent.relative_to(ROOT).as_posix() for p in tracked("mbridge_overlap") if p.name == "__init__.py"}
    assert packages and all((site / p / "__init__.py").is_file() for p in packages), packages
    data = [p.relative_to(ROOT) for p in tracked("mbridge_overlap") if p.suffix in (".yaml", ".json", ".j2")]
    assert data and [str(p) for p in data if not (site / p).is_file()] == []


# Every verb, as a user runs it from a folder of their own: the exit status it must give and a word its output holds.
VERBS = [
    (("resolve", "--gpus", "8", "model.tensor_model_parallel_size=2", "--format", "json"), 0, '"effective"'),
    (("plan", "--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--gpu", "h100"), 0, "overlap modes"),
    (("plan", "--tp", "2", "--gpus", "8", "--format", "python"), 0, "CommOverlapConfig"),
    (("budget", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "--model", "llama3_70b", "--format", "json"), 0,
     '"exposed_ms"'),
    (("lint", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "--format", "json"), (0, 1), '"findings"'),
    (("diff", "--recipe-before", "llama3_8b_pretrain_8gpu_h100_bf16_config", "--recipe-after", "llama3_8b_pretrain_8gpu_h100_fp8cs_config"),
     0, "overlap"),
    (("diagnose", LOG, "--format", "json"), 1, '"causes"'),
    (("presets",), 0, "userbuffers_"),
    (("explain", "TP_OVERLAP_OFF_TP_SIZE"), 0, "TP_OVERLAP_OFF_TP_SIZE"),
    (("releases", "--format", "json"), 0, '"releases"'),
    (("recipes", "--model", "llama3_70b", "--gpu", "h100"), 0, "recipe(s)"),
    (("suites",), 0, "test_comm_overlap.py"),
    (("check-manifest", ROOT / "SKILL.md"), 0, "ok"),
    (("trace", "--snippet", "python"), 0, "profil"),
]


@pytest.mark.parametrize("argv, status, word", VERBS, ids=[" ".join(map(str, v[0][:2])) for v in VERBS])
def test_every_verb_runs_installed(installed, tmp_path, argv, status, word):
    proc = run(installed, tmp_path, *argv)
    assert proc.returncode in ((status,) if isinstance(status, int) else status), proc.stderr
    assert word in proc.stdout and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran
    assert ours_running() == []


def test_verbs_that_need_what_a_wheel_lacks_say_so_in_one_line(installed, tmp_path):
    anchors = run(installed, tmp_path, "anchors")  # no Bridge in this venv
    manifest = run(installed, tmp_path, "check-manifest")  # no SKILL.md beside an installed package
    for proc in (anchors, manifest):
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "site-packages/scripts" not in anchors.stderr and "-m mbridge_overlap anchors" in anchors.stderr  # evalH H7


def test_trace_runs_installed(installed, tmp_path):
    from trace_fixtures import TraceBuilder, nccl

    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 1000)
    b.kernel("sm90_gemm", 10, 500)
    b.kernel(nccl("AllGather"), 100, 300, stream=20)
    path = b.write(tmp_path / "rank-0.json")
    proc = run(installed, tmp_path, "trace", path, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ranks"][0]["rank"] == 0


def test_the_wheel_is_built_from_the_package_alone(installed):
    wheel = next(installed.parent.parent.glob("dist/*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.split("/")[0] in ("tests", "tools", "benchmarks", "scripts")]
    assert any(n.endswith("entry_points.txt") for n in names)
