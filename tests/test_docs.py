"""The commands SKILL.md, README.md and the references show are real: each runs, as written, from another folder."""

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT
from mbridge_overlap.findings import records as catalog

NEEDS_BRIDGE = ("anchors",)  # run by tests/bridge in the Python that has megatron-bridge
LAUNCHER = "python3 ${CLAUDE_SKILL_DIR}/scripts/mbridge-overlap"
PREFIXES = (LAUNCHER, "python -m mbridge_overlap", "python3 scripts/mbridge-overlap")
DOCS = ("SKILL.md", "README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "references").glob("*.md")))


def documented_commands():
    out = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        starts = "|".join(re.escape(p) for p in PREFIXES)
        candidates = re.findall(rf"`((?:{starts}) [^`]+)`", text)
        candidates += [line.strip() for line in text.splitlines() if line.strip().startswith(PREFIXES)]
        for command in candidates:
            command = command.split("  #")[0].strip()
            if command.endswith((" trace", " COMMAND")):
                continue  # the verb named in prose
            placeholders = [t for t in re.findall(r"\b[A-Z][A-Z_]+\b", command) if t not in catalog() and t != "CLAUDE_SKILL_DIR"]
            if "..." in command or "<" in command or placeholders:
                continue  # a placeholder (CHECKOUT, PROFILE_DIR, BEFORE, ...) the reader fills in
            out.append((doc, command))
    return sorted(set(out))


COMMANDS = documented_commands()


def test_docs_show_commands():
    skill = [c for d, c in COMMANDS if d == "SKILL.md"]
    assert len(skill) >= 8
    assert all(c.startswith(LAUNCHER) for c in skill), "SKILL.md writes every command in the form that works from any folder"


def run_as_written(command: str, cwd) -> subprocess.CompletedProcess:
    """The command through a shell, as an agent runs it: ${CLAUDE_SKILL_DIR} set as Claude Code sets it; `python3` and
    `python` are this interpreter; the working directory is not the skill folder (except for `python -m`)."""
    bindir = cwd / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        (bindir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bindir / name).chmod(0o755)
    env = {**os.environ, "CLAUDE_SKILL_DIR": str(ROOT), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    here = ROOT if command.startswith(PREFIXES[1:]) else cwd  # README's forms run from the checkout
    return subprocess.run(["bash", "-c", command], cwd=here, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("doc, command", COMMANDS, ids=[c for _, c in COMMANDS])
def test_documented_command_runs(doc, command, tmp_path):
    prefix = next(p for p in PREFIXES if command.startswith(p))
    verb = shlex.split(command[len(prefix):])
    if verb and verb[0] in NEEDS_BRIDGE and "--mbridge-src" not in verb:
        pytest.skip("needs megatron-bridge: covered by tests/bridge")
    if "--output" in verb:
        pytest.skip("writes a file")
    proc = run_as_written(command, tmp_path)
    assert proc.returncode in (0, 1), f"{doc}: {command}\n{proc.stderr}"
    assert proc.stdout


def test_readme_states_the_gzip_bound_and_the_worker_cap_the_code_applies():
    """README's diagnose paragraph says how far a gzip log may inflate and that --jobs stops at the cores (the review
    of stop 45 found neither said): the numbers are the constants safeio applies."""
    from mbridge_overlap.safeio import INFLATION_FLOOR, MAX_INFLATION

    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"passes {MAX_INFLATION} times the compressed bytes read (once past {INFLATION_FLOOR >> 20} MiB)" in text
    assert "default every core and never more: a larger N is capped" in text
