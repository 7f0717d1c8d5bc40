"""Hostile input against the command line (issue 10, all but the trace reader), generated here, no data files.

Five classes: code injection into snippets, fixes and text output; resource exhaustion (alias bombs, deep
nesting, huge files and values); inputs that used to end in a traceback; user text that used to break the
one-line error; --output targets. Every CLI case runs `python -m mbridge_overlap ...` as a subprocess from the
skill folder (all cases at once, a few at a time, to keep the suite fast) and asserts the exit status, for
bad input exactly one line on stderr with no traceback and no raw control character, and that no marker file
appeared. Snippets built from hostile text are sourced by bash, executed by Python and loaded as YAML.
CASES holds the case counts per class.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from blocked_pipe import full_pipe  # tests/, beside conftest.py
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mbridge_overlap import cli, safeio  # noqa: E402
from mbridge_overlap.output import snippets as render  # noqa: E402
from mbridge_overlap.errors import UsageError  # noqa: E402
from hostile_kit import (  # noqa: E402
    _PYCACHE, CONTROL, LINE_BREAKS, MARKER, Named, assert_one_line, cli_env, fifo, payloads, registry, run_all, run_cli, write,
)

# --- generators ------------------------------------------------------------------------------------------------


def alias_bomb(key: str, levels: int = 9, width: int = 9) -> str:
    """A billion-laughs section under `key`: `levels` anchors, each an alias of the previous one `width` times."""
    lines = [f"{key}:", f"  l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def nested_flow(depth: int) -> str:
    return "model:\n  x: " + "[" * depth + "]" * depth + "\n"


def nested_block(depth: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "leaf: 1\n"


def config(**sections) -> str:
    """A run config in JSON, which is YAML: every hostile string goes in with JSON's escapes."""
    return json.dumps({"comm_overlap": {"data_parallel_size": 1}, **sections})


def checkpoint(folder: Path, tracker) -> Path:
    """A checkpoint folder with one iteration and a hostile latest_checkpointed_iteration.txt."""
    write(folder / "ckpt" / "iter_0000010", "run_config.yaml", config())
    if tracker == "fifo":
        fifo(folder / "ckpt", "latest_checkpointed_iteration.txt")
    else:
        write(folder / "ckpt", "latest_checkpointed_iteration.txt", tracker)
    return folder / "ckpt"


def mbridge_src(folder: Path, package_info=b"MAJOR = 0\nMINOR = 6\nPATCH = 2\n", cited=None) -> Path:
    """A Megatron-Bridge source tree with an odd package_info.py or an odd cited file."""
    package = folder / "mb" / "src" / "megatron" / "bridge"
    write(package, "package_info.py", package_info)
    if cited:
        cited(package / "training" / "comm_overlap.py")
    return folder / "mb"


# --- the CLI cases ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case(Named):
    cls: str
    name: str
    make: Callable[[Path], list]  # builds the inputs in a fresh folder, returns the CLI arguments
    status: int = 2
    check: Callable | None = None  # (proc, folder): further assertions
    env: tuple = ()  # extra environment, (name, value) pairs

CLI_CASES, add = registry(Case)


def _plain_text(proc, folder) -> None:
    """Text output: valid UTF-8, no control character but the line ends."""
    out = proc.stdout.decode("utf-8")
    assert not CONTROL.search(out), out


# Injection: --recipe reaches snippet comments; every form refuses a recipe that is not a name.
for fmt in ("env", "env_vars", "python", "yaml", "hydra", "text", "json"):
    for kind in ("lf", "cr"):
        add("injection", f"plan-recipe-{fmt}-{kind}", lambda d, fmt=fmt, kind=kind: [
            "plan", "--tp", "2", "--pp", "2", "--gpus", "8", "--task", "sft", "--format", fmt,
            "--recipe", f"llama{LINE_BREAKS[kind]}touch {d / MARKER} #"])


def _restore_words(proc, folder) -> None:
    """Each fix of `diff` is shell words: bash reads them without running anything, one word per override."""
    data = json.loads(proc.stdout)
    fixes = [c["fix"] for c in data["overlap_changes"] if c["key"] == "env_vars.X"]
    assert fixes and fixes[0]
    words = subprocess.run(["bash", "-c", f"printf '%s\\0' {fixes[0]}"], cwd=folder, capture_output=True, env={"PATH": os.environ["PATH"]})
    assert words.returncode == 0 and not (folder / MARKER).exists()
    assert words.stdout.count(b"\0") == 1, words.stdout  # one override, one word
    word = words.stdout.split(b"\0")[0].decode("utf-8", "surrogateescape")
    saved = json.loads((folder / "a.yaml").read_text())["env_vars"]["X"]
    assert word.startswith("++env_vars.X=") and _hydra_unquote(word[len("++env_vars.X="):]) == saved


def _hydra_unquote(text: str) -> str:
    """As Hydra reads a quoted value (safeio.hydra_unquoted, held to Hydra's own parser in tier 2)."""
    from mbridge_overlap.safeio import hydra_unquoted

    return hydra_unquoted(text) if text.startswith("'") else text


def _same_lines_as_benign(proc, folder) -> None:
    _plain_text(proc, folder)
    benign = run_cli("diff", folder / "benign.yaml", folder / "b.yaml", "--gpus", "8", env=cli_env())
    assert len(proc.stdout.splitlines()) == len(benign.stdout.splitlines())


def _diff_hostile_env(kind: str, *fmt: str):
    """diff of a run whose env_vars.X holds a payload against one where X=2."""
    def make(d: Path) -> list:
        write(d, "a.yaml", config(env_vars={"X": payloads(d / MARKER)[kind]}))
        write(d, "b.yaml", config(env_vars={"X": "2"}))
        write(d, "benign.yaml", config(env_vars={"X": "plain"}))
        return ["diff", d / "a.yaml", d / "b.yaml", "--gpus", "8", *fmt]
    return make


for kind in ("break_lf", "break_cr", "break_ls", "shell_quotes", "python_quotes"):
    add("injection", f"diff-restore-{kind}", _diff_hostile_env(kind, "--format", "json"), status=0, check=_restore_words)
    add("injection", f"diff-text-{kind}", _diff_hostile_env(kind), status=0, check=_same_lines_as_benign)


def _export_fix(proc, folder) -> None:
    """LAUNCHER_ENV_WINS's fix, pasted: the config agreeing with the launcher (one shell word), or the config's value
    exported in the launcher (bash runs that export and gets the value, nothing else)."""
    import shlex

    data = json.loads(proc.stdout)
    fix = next(f["fix"] for f in data["findings"] if f["id"] == "LAUNCHER_ENV_WINS")
    if "export " not in fix:
        assert shlex.split(fix) == ["++env_vars.X=launcher"], fix
        return
    command = fix[fix.index("export "):fix.rindex(" in the launcher")]
    got = subprocess.run(["bash", "-c", f"{command}; printf '%s' \"$X\""], cwd=folder, capture_output=True, env={"PATH": os.environ["PATH"]})
    assert not (folder / MARKER).exists()
    assert got.stdout.decode() == data["env_vars"]["X"]


for kind in ("break_lf", "shell_quotes"):
    add("injection", f"resolve-launcher-env-{kind}", lambda d, kind=kind: [
        "resolve", "--gpus", "8", "--launcher-env", "X=launcher", "--format", "json",
        "--config", write(d, "c.yaml", config(env_vars={"X": payloads(d / MARKER)[kind]}))],
        status=0, check=_export_fix, env=(("X", "launcher"),))
add("injection", "resolve-text-env-values", lambda d: [
    "resolve", "--gpus", "8", "--config", write(d, "c.yaml", config(env_vars={"X": payloads(d / MARKER)["break_lf"], "Y": "\x1b[2J\r"}))],
    status=0, check=_plain_text)


# Resource exhaustion: bounded work and memory, one line.
def _short_line(proc, folder) -> None:
    assert len(proc.stderr) < 600, proc.stderr  # a value echoed in a message is cut short


add("resource", "alias-bomb-modelled-field-resolve", lambda d: [
    "resolve", "--gpus", "8", "--config", write(d, "c.yaml", alias_bomb("logger") + "model:\n  tensor_model_parallel_size: *l8\n")])
add("resource", "alias-bomb-modelled-field-lint", lambda d: [
    "lint", write(d, "c.yaml", alias_bomb("checkpoint") + "model:\n  sequence_parallel: *l8\n"), "--gpus", "8"])
add("resource", "alias-bomb-logger-diff", lambda d: [
    "diff", write(d, "a.yaml", "comm_overlap: {data_parallel_size: 1}\n" + alias_bomb("logger")),
    write(d, "b.yaml", "comm_overlap: {data_parallel_size: 1}\n" + alias_bomb("logger").replace("lol", "lul")), "--gpus", "8"])
add("resource", "alias-fan-out", lambda d: [
    "lint", write(d, "c.yaml", "a: &a [" + ", ".join(["x"] * 200) + "]\nlogger:\n  b: [" + ", ".join(["*a"] * 1000) + "]\n"), "--gpus", "8"])
add("resource", "string-times-gpus", lambda d: [
    "lint", write(d, "c.yaml", "comm_overlap: {data_parallel_size: 1000000000}\nmodel: {tensor_model_parallel_size: xxxxxxxx}\n")])
add("resource", "list-times-gpus", lambda d: [
    "diff", write(d, "c.yaml", "comm_overlap: {data_parallel_size: 1000000000}\nmodel: {pipeline_model_parallel_size: [1, 2, 3]}\n"),
    write(d, "d.yaml", config())])
add("resource", "file-over-size-limit", lambda d: [
    "lint", _sparse(d / "huge.yaml", safeio.MAX_FILE_BYTES + 1)])
add("resource", "huge-value-echoed", lambda d: [
    "resolve", "--gpus", "8", "--config", write(d, "c.yaml", "model:\n  tensor_model_parallel_size: " + "x" * 200_000 + "\n")], check=_short_line)
add("resource", "huge-argument-echoed", lambda d: ["resolve", "--gpus", "8", "model.tensor_model_parallel_size=" + "y" * 100_000],
    check=_short_line)


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


# Inputs that ended in a traceback.
ENCODINGS = {
    "binary": bytes(range(256)) * 4,
    "latin1": "model:\n  tensor_model_parallel_size: 2 # café\n".encode("latin-1"),
    "utf16": "model:\n  tensor_model_parallel_size: 2\n".encode("utf-16"),
    "utf16le": "model:\n  tensor_model_parallel_size: 2\n".encode("utf-16-le"),
    "nul_in_utf8": b"model:\n  tensor_model_parallel_size: 2\x00\n",
}
for name, data in ENCODINGS.items():
    add("traceback", f"encoding-{name}-lint", lambda d, data=data: ["lint", write(d, "c.yaml", data)])
add("traceback", "encoding-binary-resolve", lambda d: ["resolve", "--gpus", "8", "--config", write(d, "c.yaml", ENCODINGS["binary"])])

BAD_VALUES = {
    "timestamp": "model:\n  seq_length: 2001-13-45\n",
    "int_tag": 'model:\n  seq_length: !!int "abc"\n',
    "float_tag": 'model:\n  seq_length: !!float "abc"\n',
    "timestamp_tag": 'train:\n  x: !!timestamp "nope"\n',
    "binary_tag": 'train:\n  x: !!binary "a"\n',
    "bool_tag": 'train:\n  x: !!bool "maybe"\n',
    "python_tag": "model: !!python/object/apply:os.system ['touch PWNED']\n",
    "undefined_alias": "model: *nowhere\n",
    "two_documents": "model: {}\n---\nmodel: {}\n",
}
for name, text in BAD_VALUES.items():
    add("traceback", f"yaml-{name}", lambda d, text=text: ["resolve", "--gpus", "8", "--config", write(d, "c.yaml", text)])

NON_STRING_KEYS = {
    "model_int_key": "model: {1: 2}\n",
    "top_int_key": "{1: 2}\n",
    "ddp_bool_key": "ddp: {true: 1}\n",
    "env_vars_int_key": "env_vars: {1: x}\n",
    "complex_key": "? [1, 2]\n: 3\n",
}
for name, text in NON_STRING_KEYS.items():
    add("traceback", f"keys-{name}", lambda d, text=text: ["lint", write(d, "c.yaml", text), "--gpus", "8"])

add("traceback", "nesting-1000-flow", lambda d: ["lint", write(d, "c.yaml", nested_flow(1000)), "--gpus", "8"])
add("traceback", "nesting-1000-block", lambda d: ["lint", write(d, "c.yaml", nested_block(1000)), "--gpus", "8"])
add("traceback", "nesting-past-limit", lambda d: ["lint", write(d, "c.yaml", nested_block(safeio.MAX_DEPTH + 1)), "--gpus", "8"])
add("traceback", "recursive-alias-sequence", lambda d: ["lint", write(d, "c.yaml", "model: &a [*a]\n"), "--gpus", "8"])
add("traceback", "recursive-alias-mapping", lambda d: ["lint", write(d, "c.yaml", "logger: &a {x: {y: *a}}\n"), "--gpus", "8"])

SECTIONS = {"model_int": "model: 3", "ddp_list": "ddp: [1]", "optimizer_str": "optimizer: x", "comm_overlap_list": "comm_overlap: [1]",
            "train_int": "train: 5", "env_vars_int": "env_vars: 1", "mixed_precision_int": "mixed_precision: 3"}
for name, text in SECTIONS.items():
    add("traceback", f"section-{name}-lint", lambda d, text=text: ["lint", write(d, "c.yaml", text + "\n"), "--gpus", "8"])
for name in ("model_int", "ddp_list"):
    add("traceback", f"section-{name}-diff",
        lambda d, name=name: ["diff", write(d, "c.yaml", SECTIONS[name] + "\n"), write(d, "d.yaml", config()), "--gpus", "8"])

add("traceback", "fifo-lint", lambda d: ["lint", fifo(d, "c.yaml")])
add("traceback", "fifo-diff", lambda d: ["diff", write(d, "a.yaml", config()), fifo(d, "b.yaml"), "--gpus", "8"])
add("traceback", "fifo-resolve-config", lambda d: ["resolve", "--gpus", "8", "--config", fifo(d, "c.yaml")])
add("traceback", "fifo-in-checkpoint", lambda d: ["lint", fifo(d / "ckpt", "run_config.yaml").parent])
add("traceback", "dev-zero-lint", lambda d: ["lint", "/dev/zero"])
add("traceback", "directory-as-config", lambda d: ["resolve", "--gpus", "8", "--config", d])
add("traceback", "symlink-loop", lambda d: ["lint", _loop(d)])
add("traceback", "name-too-long", lambda d: ["lint", d / ("n" * 300)])

TRACKERS = {"superscript": "²".encode(), "binary": bytes(range(256)), "digits_5000": b"1" * 5000, "digits_4000": b"9" * 4000, "fifo": "fifo"}
for name, tracker in TRACKERS.items():
    add("traceback", f"tracker-{name}", lambda d, tracker=tracker: ["lint", checkpoint(d, tracker)])

BIG_INTS = {
    "decimal": "model:\n  tensor_model_parallel_size: " + "1" * 5000 + "\n",
    "hex": "model:\n  tensor_model_parallel_size: 0x" + "f" * 4000 + "\n",
    "sexagesimal": "model:\n  tensor_model_parallel_size: 1" + ":59" * 3000 + "\n",
    "tagged": 'model:\n  tensor_model_parallel_size: !!int "' + "7" * 5000 + '"\n',
}
for name, text in BIG_INTS.items():
    add("traceback", f"int-{name}", lambda d, text=text: ["lint", write(d, "c.yaml", text), "--gpus", "8"])
add("traceback", "int-gpus-flag", lambda d: ["plan", "--gpus", "1" * 5000], check=_short_line)
add("traceback", "int-override", lambda d: ["resolve", "--gpus", "8", "model.tensor_model_parallel_size=" + "2" * 5000], check=_short_line)


def _surrogate_path(d: Path) -> bytes:
    path = os.fsencode(d) + b"/run\xff\x1b[31m.yaml"
    with open(path, "wb") as fh:
        fh.write(config().encode())
    return path


add("traceback", "surrogate-path-text", lambda d: ["lint", _surrogate_path(d), "--gpus", "8"], status=0, check=_plain_text)
# quoted, as Hydra takes any text; unquoted, Hydra's lexer refuses it (one line, escaped)
add("traceback", "surrogate-value-text", lambda d: ["resolve", "--gpus", "8", b"++env_vars.X='\xff\xfe\x1b[31m'"], status=0, check=_plain_text)
add("traceback", "surrogate-value-unquoted", lambda d: ["resolve", "--gpus", "8", b"++env_vars.X=\xff\xfe\x1b[31m"], status=2, check=_plain_text)

add("traceback", "anchors-binary-package-info", lambda d: ["anchors", "--mbridge-src", mbridge_src(d, package_info=bytes(range(256)))])
add("traceback", "anchors-fifo-cited-file", lambda d: ["anchors", "--mbridge-src", mbridge_src(d, cited=lambda p: fifo(p.parent, p.name))])
add("traceback", "anchors-directory-cited-file", lambda d: ["anchors", "--mbridge-src", mbridge_src(d, cited=lambda p: p.mkdir(parents=True))])
add("traceback", "anchors-utf16-cited-file", lambda d: ["anchors", "--mbridge-src", mbridge_src(
    d, cited=lambda p: write(p.parent, p.name, "class CommOverlapConfig:\n".encode("utf-16")))])
add("traceback", "anchors-src-is-fifo", lambda d: ["anchors", "--mbridge-src", fifo(d, "src")])
add("traceback", "anchors-src-loop", lambda d: ["anchors", "--mbridge-src", _loop(d)])

MANIFESTS = {"binary": bytes(range(256)), "utf16": "---\nname: x\n---\n".encode("utf-16"), "latin1": "---\nname: caf\xe9\n---\n".encode("latin-1")}
for name, data in MANIFESTS.items():
    add("traceback", f"manifest-{name}", lambda d, data=data: ["check-manifest", write(d, "SKILL.md", data)])
add("traceback", "manifest-fifo", lambda d: ["check-manifest", fifo(d, "SKILL.md")])
add("traceback", "manifest-dev-zero", lambda d: ["check-manifest", "/dev/zero"])
add("traceback", "manifest-directory", lambda d: ["check-manifest", d])
add("traceback", "manifest-loop", lambda d: ["check-manifest", _loop(d)])


def _one_frontmatter_problem(proc, folder) -> None:
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SKILL.md: frontmatter:") and proc.stderr == b""


add("traceback", "manifest-alias-bomb", lambda d: ["check-manifest", write(d, "SKILL.md", "---\n" + alias_bomb("bomb") + "---\n")],
    status=1, check=_one_frontmatter_problem)
add("traceback", "manifest-deep-nesting", lambda d: ["check-manifest", write(d, "SKILL.md", "---\n" + nested_block(200) + "---\n")],
    status=1, check=_one_frontmatter_problem)


def _loop(d: Path) -> Path:
    (d / "loop").symlink_to("loop")
    return d / "loop"


# User text in an error message: one line, control characters escaped.
HOSTILE = "a\nb\rc\x1b[31md\u2028e\x85f"
MESSAGE_SITES = {
    "explain": lambda d: ["explain", HOSTILE],
    "gpu": lambda d: ["plan", "--gpus", "8", "--gpu", HOSTILE],
    "bridge_version": lambda d: ["plan", "--gpus", "8", "--bridge-version", HOSTILE],
    "precision": lambda d: ["plan", "--gpus", "8", "--precision", HOSTILE],
    "override_shape": lambda d: ["resolve", "--gpus", "8", HOSTILE],
    "override_key": lambda d: ["resolve", "--gpus", "8", f"model.{HOSTILE}=1"],
    "override_value": lambda d: ["resolve", "--gpus", "8", f"model.tensor_model_parallel_size={HOSTILE}"],
    "env_var_name": lambda d: ["resolve", "--gpus", "8", f"++env_vars.{HOSTILE}=1"],
    "mixed_precision": lambda d: ["resolve", "--gpus", "8", f"mixed_precision={HOSTILE}"],
    "int_flag": lambda d: ["plan", "--gpus", HOSTILE],
    "choice_flag": lambda d: ["plan", "--gpus", "8", "--format", HOSTILE],
    "unknown_flag": lambda d: ["plan", "--gpus", "8", f"--{HOSTILE}"],
    "recipe": lambda d: ["plan", "--gpus", "8", "--recipe", HOSTILE],
    "missing_path": lambda d: ["lint", d / HOSTILE],
    "output_path": lambda d: ["presets", "--output", d / HOSTILE / "x"],
    "config_key": lambda d: ["resolve", "--gpus", "8", "--config", write(d, "c.yaml", json.dumps({"model": {HOSTILE: 1}}))],
    "config_value": lambda d: ["lint", write(d, "c.yaml", json.dumps({"comm_overlap": {"data_parallel_size": HOSTILE}}))],
    "yaml_error": lambda d: ["lint", write(d, "c.yaml", "model: [\x1b[31m\n")],
}
for name, make in MESSAGE_SITES.items():
    add("multiline", name, make)


# --output: never through a symlink, never over what exists without --force, always one line.
def _untouched(*names):
    def check(proc, folder):
        for name in names:
            assert not (folder / name).exists(), name
        assert (folder / "mine").read_text() == "mine"
        assert not [p for p in folder.iterdir() if p.name.startswith(".")], "a temporary file was left behind"
    return check


def _replaced_link(proc, folder) -> None:
    link = folder / "link"
    assert not link.is_symlink() and link.read_text().startswith("name")
    _untouched("target")(proc, folder)


def _output_folder(d: Path) -> Path:
    write(d, "mine", "mine")
    (d / "dangling").symlink_to(d / "target")
    (d / "link").symlink_to(d / "mine")
    (d / "ro").mkdir()
    return d


def _read_only_folder(d: Path) -> Path:
    """A folder this process cannot create files in: chmod 555, or sysfs for root (which ignores the mode)."""
    if os.geteuid() == 0:
        return Path("/sys/mbridge-overlap-test")
    (d / "ro").chmod(0o555)
    return d / "ro" / "x"


OUTPUTS = {
    "missing_folder": (lambda d: d / "no" / "x", (), 2),
    "a_directory": (lambda d: d, (), 2),
    "dev_full": (lambda d: "/dev/full", (), 2),
    "dev_full_force": (lambda d: "/dev/full", ("--force",), 2),
    "read_only_folder": (_read_only_folder, (), 2),
    "name_too_long": (lambda d: d / ("n" * 300), (), 2),
    "exists": (lambda d: d / "mine", (), 2),
    "dangling_symlink": (lambda d: d / "dangling", (), 2),
    "symlink_force": (lambda d: d / "link", ("--force",), 0),
    "dangling_symlink_force": (lambda d: d / "dangling", ("--force",), 0),
}
def _replaced_dangling(proc, folder) -> None:
    assert not (folder / "dangling").is_symlink() and (folder / "dangling").read_text().startswith("name")
    _untouched("target")(proc, folder)


CHECKS = {"symlink_force": _replaced_link, "dangling_symlink_force": _replaced_dangling}
for name, (target, extra, status) in OUTPUTS.items():
    check = CHECKS.get(name, _untouched("target"))
    add("output", name, lambda d, target=target, extra=extra: [
        "presets", "--output", target(_output_folder(d)), *extra], status=status, check=check)


CASES = {
    "injection": 0,  # counted below, with the snippet tests
    "resource": sum(c.cls == "resource" for c in CLI_CASES),
    "traceback": sum(c.cls == "traceback" for c in CLI_CASES),
    "multiline": sum(c.cls == "multiline" for c in CLI_CASES),
    "output": sum(c.cls == "output" for c in CLI_CASES),
}


# --- running them ----------------------------------------------------------------------------------------------


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))  # a blow-up is a MemoryError traceback, not a swap storm


def _run(case: Case, folder: Path):
    try:
        return run_cli(*case.make(folder), env=cli_env(**dict(case.env)), preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired as exc:  # fails that case alone
        return subprocess.CompletedProcess(exc.cmd, None, exc.stdout or b"", b"timed out after %d s\n" % exc.timeout)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    yield run_all(tmp_path_factory.mktemp("hostile"), CLI_CASES, _run)
    shutil.rmtree(_PYCACHE.pop(), ignore_errors=True)


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.id)
def test_cli(case, ran):
    proc, folder = ran[case.id]
    assert proc.returncode == case.status, proc.stderr.decode(errors="replace")
    if case.status == 2:
        assert_one_line(proc)
    else:
        assert b"Traceback" not in proc.stderr and not CONTROL.search(proc.stderr.decode("utf-8").replace("\n", "")), proc.stderr
    assert not (folder / MARKER).exists() and not (ROOT / MARKER).exists()
    if case.check:
        case.check(proc, folder)


# --- snippets from hostile text: sourced, executed, loaded ------------------------------------------------------

SNIPPET_FORMATS = ("env", "env_vars", "python", "yaml", "hydra")
PAYLOAD_KINDS = tuple(payloads(Path("/m")))
CASES["injection"] = sum(c.cls == "injection" for c in CLI_CASES) + len(SNIPPET_FORMATS) * len(PAYLOAD_KINDS) + 1

_PY_HARNESS = r'''
import builtins, json, sys
record = {}
class Any:
    def __init__(self, path): object.__setattr__(self, "_path", path)
    def __getattr__(self, name): return Any(f"{self._path}.{name}")
    def __setattr__(self, name, value): record[f"{self._path}.{name}"] = value
    def __setitem__(self, key, value): record[f"{self._path}[{key}]"] = value
    def __call__(self, *args, **kwargs): return {"call": self._path, **kwargs}
real_import = builtins.__import__
def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
    return Any(name) if name.startswith("megatron") else real_import(name, globals, locals, fromlist, level)
scope = {"__builtins__": {**vars(builtins), "__import__": fake_import}, "cfg": Any("cfg")}
exec(compile(open(sys.argv[1], encoding="utf-8").read(), sys.argv[1], "exec"), scope)
json.dump(record, sys.stdout)
'''


def run_python(snippet: str, folder: Path) -> dict:
    """Execute a Python snippet with `cfg` and megatron's modules as recorders; what it assigned."""
    write(folder, "snippet.py", snippet)
    write(folder, "harness.py", _PY_HARNESS)
    proc = subprocess.run([sys.executable, "harness.py", "snippet.py"], cwd=folder, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def run_bash(snippet: str, folder: Path, names: list[str]) -> list[str]:
    """Source a shell snippet in a clean bash; the values of `names` afterwards."""
    write(folder, "snippet.sh", snippet.encode("utf-8", "surrogateescape"))
    script = 'source ./snippet.sh && for n in "$@"; do printf "%s\\0" "${!n}"; done'
    proc = subprocess.run(["bash", "-c", script, "bash", *names], cwd=folder, capture_output=True, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    return [v.decode("utf-8", "surrogateescape") for v in proc.stdout.split(b"\0")[:-1]]


def hostile_plan(text: str) -> dict:
    """What cmd_plan hands the renderer, with `text` wherever a string can go."""
    overrides = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True,
                 "comm_overlap.tp_comm_overlap_cfg": None}
    if "\udcff" not in text:  # no YAML can hold a lone surrogate; the comment and env cases still carry it
        overrides["comm_overlap.tp_comm_bootstrap_backend"] = text
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "HOSTILE": text}
    return dict(overrides=overrides, env=env, env_why={k: text for k in env}, purpose=text, release=text, env_vars_field=True)


@pytest.mark.parametrize("kind", PAYLOAD_KINDS)
@pytest.mark.parametrize("fmt", SNIPPET_FORMATS)
def test_snippet_from_hostile_text(fmt, kind, tmp_path):
    marker = tmp_path / MARKER
    text = payloads(marker)[kind]
    plan = hostile_plan(text)
    if fmt == "hydra" and not text.isprintable() and "comm_overlap.tp_comm_bootstrap_backend" in plan["overrides"]:
        with pytest.raises(UsageError, match="Hydra"):
            render.snippet(fmt, **plan)
        del plan["overrides"]["comm_overlap.tp_comm_bootstrap_backend"]  # and its comments alone:
    snippet = render.snippet(fmt, **plan)
    assert "injected" not in [line.split(":")[0].split("=")[-1].strip() for line in snippet.splitlines()]
    if fmt == "env":
        assert run_bash(snippet, tmp_path, list(plan["env"])) == list(plan["env"].values())
    elif fmt == "env_vars":
        got = run_python(snippet, tmp_path)
        assert got == {f"cfg.env_vars[{k}]": int(v) if v.isdigit() else v for k, v in plan["env"].items()}
    elif fmt == "python":
        got = run_python(snippet, tmp_path)
        assert {k: got[f"cfg.{k}"] for k in plan["overrides"]} == plan["overrides"]
    elif fmt == "yaml":
        doc = yaml.safe_load(snippet)
        assert set(doc) == {"model", "comm_overlap"}
        assert {f"{s}.{k}": doc[s][k] for s in doc for k in doc[s] if k != "_target_"} == plan["overrides"]
    else:
        lines = [line for line in snippet.splitlines() if line and not line.startswith("#")]
        benign = render.snippet(fmt, **{**plan, "purpose": "p", "release": "r"})
        assert len(lines) == len([line for line in benign.splitlines() if line and not line.startswith("#")])
        assert all(re.match(r"^\+{0,2}[a-z_]+(\.[a-z_]+)*=", line) for line in lines), lines
    assert not marker.exists()


def test_the_harness_sees_an_injection(tmp_path):
    """The checks above can fail: a raw line break in a comment runs in bash and in Python."""
    marker = tmp_path / MARKER
    run_bash(f"# x\ntouch {marker}\n", tmp_path, [])
    assert marker.exists()
    marker.unlink()
    run_python(f"# x\nopen({str(marker)!r}, 'w').close()\n", tmp_path)
    assert marker.exists()


# --- unreadable files and folders -------------------------------------------------------------------------------

UNREADABLE = {
    "file-lint": (lambda d: write(d, "c.yaml", config()), lambda p: ["lint", p, "--gpus", "8"]),
    "file-resolve-config": (lambda d: write(d, "c.yaml", config()), lambda p: ["resolve", "--gpus", "8", "--config", p]),
    "file-check-manifest": (lambda d: write(d, "SKILL.md", "---\nname: x\n---\n"), lambda p: ["check-manifest", p]),
    "folder-lint": (lambda d: write(d / "ckpt", "run_config.yaml", config()).parent, lambda p: ["lint", p]),
    "folder-anchors": (lambda d: mbridge_src(d) / "src", lambda p: ["anchors", "--mbridge-src", p.parent]),
}
CASES["traceback"] += len(UNREADABLE) + 1  # and Ctrl-C below


def _unprivileged_prefix() -> list | None:
    """How to run as a user chmod 000 stops: as is when not root, setpriv as nobody where that user can run
    this Python and read the skill; None where neither works (then the denial is simulated in-process)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        return None
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import mbridge_overlap"], cwd=ROOT, capture_output=True)
    return prefix if probe.returncode == 0 else None


def _deny(monkeypatch, victim: Path) -> None:
    """What chmod 000 does to a non-root user, at the os calls the skill reads through."""
    victim = str(victim)

    def denied(path, inner_only=False):
        p = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
        return p.startswith(victim + os.sep) or (p == victim and not inner_only)

    def guard(real, inner_only=False):
        def call(path, *args, **kwargs):
            if denied(path, inner_only):
                raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(path))
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "open", guard(os.open))
    monkeypatch.setattr(os, "listdir", guard(os.listdir))
    monkeypatch.setattr(os, "stat", guard(os.stat, inner_only=True))


@pytest.mark.parametrize("name", list(UNREADABLE))
def test_unreadable(name, monkeypatch, capsys):
    folder = Path(tempfile.mkdtemp(prefix="mbo-unreadable-"))
    try:
        folder.chmod(0o755)
        make, argv = UNREADABLE[name]
        victim = make(folder)
        prefix = _unprivileged_prefix()
        if prefix is not None:
            for p in [folder, *folder.rglob("*")]:
                p.chmod(0o755 if p.is_dir() else 0o644)
            victim.chmod(0)
            proc = subprocess.run([*prefix, sys.executable, "-m", "mbridge_overlap", *map(str, argv(victim))], cwd=ROOT, capture_output=True)
            status, out, err = proc.returncode, proc.stdout.decode(), proc.stderr.decode()
        else:
            _deny(monkeypatch, victim)
            status = cli.main([str(a) for a in argv(victim)])
            out, err = capsys.readouterr()
        assert status == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
        assert "permission denied" in err.lower() and str(folder) in err
    finally:
        for p in [folder, *folder.rglob("*")]:
            p.chmod(0o755) if not p.is_symlink() else None
        shutil.rmtree(folder)


# --- Ctrl-C -----------------------------------------------------------------------------------------------------


def _blocked_writing(pid: int, timeout: float = 20.0) -> bool:
    """True once the process sleeps in write(2) on its stdout (a full pipe); False if that never shows."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            return False
        if fields and fields[0] in ("1", "64") and fields[1] == "0x1":  # write on x86-64 / arm64, fd 1
            return True
        time.sleep(0.02)
    return False


def test_ctrl_c_is_one_line_and_status_130():
    """SIGINT to a CLI blocked writing its output into a pipe nobody reads (filled beforehand)."""
    read_end, write_end = full_pipe()
    proc = subprocess.Popen([sys.executable, "-m", "mbridge_overlap", "presets"], cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        if not _blocked_writing(proc.pid):
            pytest.skip("cannot see the process block in write (no /proc/PID/syscall)")
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=10) == 130
        assert err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err, err
    finally:
        proc.kill() if proc.poll() is None else None
        os.close(read_end)


# --- the node cap, lowered so that the generated file stays small ----------------------------------------------

CASES["resource"] += 1


def test_node_cap_stops_in_the_streaming_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(safeio, "MAX_NODES", 1000)
    path = write(tmp_path, "c.yaml", "logger: [" + "1, " * 1001 + "]\n")
    assert cli.main(["lint", str(path), "--gpus", "8"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "more than 1,000 YAML nodes" in err and str(path) in err
