"""The commands SKILL.md and README.md show are real: each runs and exits as documented."""

import re
import shlex

import pytest

from conftest import ROOT, run_cli
from mbridge_overlap.findings import registry as catalog

NEEDS_BRIDGE = ("anchors",)  # run by tests/bridge in the Python that has megatron-bridge


def documented_commands():
    out = []
    for doc in ("SKILL.md", "README.md", "references/trace.md"):
        path = ROOT / doc
        if not path.exists():
            continue
        text = path.read_text()
        candidates = re.findall(r"`(python -m mbridge_overlap [^`]+)`", text)
        candidates += [line.strip() for line in text.splitlines() if line.strip().startswith("python -m mbridge_overlap ")]
        for command in candidates:
            command = command.split("  #")[0].strip()
            if command == "python -m mbridge_overlap trace":
                continue  # the verb named in prose
            placeholders = [t for t in re.findall(r"\b[A-Z][A-Z_]{2,}\b", command) if t not in catalog()]
            if "..." in command or "<" in command or placeholders:
                continue  # a placeholder (CHECKOUT, TRACE, BEFORE, ...) the reader fills in
            out.append((doc, command))
    return sorted(set(out))


COMMANDS = documented_commands()


def test_docs_show_commands():
    assert len([c for d, c in COMMANDS if d == "SKILL.md"]) >= 8


@pytest.mark.parametrize("doc, command", COMMANDS, ids=[c for _, c in COMMANDS])
def test_documented_command_runs(doc, command):
    args = shlex.split(command)[3:]
    if args and args[0] in NEEDS_BRIDGE and "--mbridge-src" not in args:
        pytest.skip("needs megatron-bridge: covered by tests/bridge")
    if "--output" in args:
        pytest.skip("writes a file")
    proc = run_cli(*args)
    assert proc.returncode in (0, 1), f"{doc}: {command}\n{proc.stderr}"
    assert proc.stdout
