"""anchors: each rule's code found by content and compared, by fingerprint, with the verified releases."""

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import run_cli
from mbridge_overlap import anchors, releases
from mbridge_overlap.errors import UsageError

COMM_OVERLAP = """
class CommOverlapConfig:
    def _get_model_comm_overlap_cfgs(self, model_cfg, ddp_config):
        if self.user_comm_overlap_cfg.tp_comm_overlap is True:
            if model_cfg.tensor_model_parallel_size < 2:
                self.user_comm_overlap_cfg.tp_comm_overlap = False
            elif not model_cfg.sequence_parallel:
                pass
            elif not HAVE_TE:
                pass
"""

# A runtime_config_update of the 0.6 shape, written for these tests.
CONFIG = '''
import os


def apply_environment_variables(cfg: ConfigContainer) -> None:
    for name, value in cfg.env_vars.items():
        os.environ.setdefault(name, str(value))


def runtime_config_update(cfg: ConfigContainer) -> None:
    """Runtime updates."""
    apply_environment_variables(cfg)
    if cfg.mixed_precision is not None:
        cfg.mixed_precision.setup(cfg.model, cfg.optimizer, cfg.ddp)
    cfg.set_data_parallel_size()
    if cfg.comm_overlap is not None:
        cfg.comm_overlap.setup(cfg.model, cfg.optimizer, cfg.ddp)
    cfg.validate()
'''
NEW_STEP = "cfg._disable_native_energon_packing_moe_overlap"
CONFIG_NEW_STEP = CONFIG.replace("    cfg.set_data_parallel_size()\n", f"    cfg.set_data_parallel_size()\n    {NEW_STEP}()\n")
# The same code as CONFIG, written differently: comments, docstring, annotations, line breaks.
CONFIG_RESTYLED = '''
import os


def apply_environment_variables(cfg: "ConfigContainer"):
    # the launcher's value wins
    for name, value in cfg.env_vars.items():
        os.environ.setdefault(name, str(value))


def runtime_config_update(cfg: ConfigContainer) -> None:
    """Apply runtime configuration updates.

    A longer docstring.
    """
    apply_environment_variables(cfg)  # first
    if cfg.mixed_precision is not None:
        cfg.mixed_precision.setup(cfg.model, cfg.optimizer, cfg.ddp)

    cfg.set_data_parallel_size()
    if (cfg.comm_overlap
            is not None):
        cfg.comm_overlap.setup(cfg.model, cfg.optimizer, cfg.ddp)
    cfg.validate()
'''


def test_find_lines_in_order_within_a_window():
    lines = ["if self.user_comm_overlap_cfg.tp_comm_overlap is True:", "elif not HAVE_TE:"]
    assert anchors.find_lines(COMM_OVERLAP, lines, 20) == (4, 9)
    assert anchors.find_lines(COMM_OVERLAP, list(reversed(lines)), 20) is None
    assert anchors.find_lines(COMM_OVERLAP, lines, 3) is None


def make_checkout(root, version=(0, 6, 2), files=None):
    pkg = root / "src" / "megatron" / "bridge"
    pkg.mkdir(parents=True)
    (pkg / "package_info.py").write_text("MAJOR = {}\nMINOR = {}\nPATCH = {}\n".format(*version))
    for rel, text in (files or {}).items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_bytes(text) if isinstance(text, bytes) else (pkg / rel).write_text(text)
    return root


def table(per_release: dict) -> dict:
    """A fingerprint table as gen_release_data.py records it, from {version: {file: text}}."""
    measured = {}
    for version, files in per_release.items():
        measured[version] = {}
        for anchor_id, spec in anchors.specs().items():
            text = files.get(spec["file"])
            got = anchors.measure(spec, text) if text is not None else None
            if got is not None and anchors.applies(spec, version):
                measured[version][anchor_id] = got
    return {"releases": {v: {} for v in per_release}, "anchors": anchors.record(measured)}


def by_id(d: dict) -> dict:
    return {a["id"]: a for a in d["anchors"]}


def test_new_step_in_runtime_config_update_is_named(tmp_path):
    recorded = table({"0.6.2": {"training/config.py": CONFIG}})
    root = make_checkout(tmp_path, (0, 7, 0), {"training/config.py": CONFIG_NEW_STEP})
    order = by_id(anchors.report(str(root), recorded))["runtime_config_update_order"]
    assert order["status"] == "changed" and order["nearest"] == "0.6.2"
    assert order["steps_added"] == [f"{NEW_STEP} (after cfg.set_data_parallel_size)"] and order["steps_removed"] == []
    assert f"+    {NEW_STEP}()" in order["diff"]
    assert [line for line in order["diff"] if line[:1] in "+-"] == [f"+    {NEW_STEP}()"]


def test_a_removed_step_is_named_and_its_line_shown_by_number(tmp_path):
    recorded = table({"0.6.2": {"training/config.py": CONFIG_NEW_STEP}})
    root = make_checkout(tmp_path, (0, 7, 0), {"training/config.py": CONFIG})
    order = by_id(anchors.report(str(root), recorded))["runtime_config_update_order"]
    assert order["status"] == "changed" and order["steps_removed"] == [NEW_STEP] and order["steps_added"] == []
    removed = [line for line in order["diff"] if line.startswith("-")]
    assert len(removed) == 1 and "of the 0.6.2 code" in removed[0] and NEW_STEP not in removed[0]


def test_layout_comments_docstrings_and_annotations_do_not_count(tmp_path):
    recorded = table({"0.6.0": {"training/config.py": CONFIG}, "0.6.2": {"training/config.py": CONFIG}})
    root = make_checkout(tmp_path, (0, 7, 0), {"training/config.py": CONFIG_RESTYLED})
    d = anchors.report(str(root), recorded)
    for anchor_id in ("runtime_config_update_order", "launch_env_wiring"):
        a = by_id(d)[anchor_id]
        assert (a["status"], a["same_as"], a["diff"]) == ("same", "0.6.2", []), a


def test_same_names_the_newest_release_with_that_code(tmp_path):
    recorded = table({"0.6.0": {"training/config.py": CONFIG}, "0.6.2": {"training/config.py": CONFIG_NEW_STEP}})
    root = make_checkout(tmp_path, (0, 7, 0), {"training/config.py": CONFIG})
    assert by_id(anchors.report(str(root), recorded))["runtime_config_update_order"]["same_as"] == "0.6.0"


def test_a_block_anchor_ignores_the_rest_of_its_function(tmp_path):
    gating = COMM_OVERLAP + "                self.user_comm_overlap_cfg.tp_comm_overlap = False\n"
    elsewhere = gating.replace("        if self.user", "        assert model_cfg.mtp_num_layers in (None, 0, 1)\n        if self.user")
    inside = gating.replace("elif not HAVE_TE:", "elif not HAVE_TE or model_cfg.fp8:")
    recorded = table({"0.6.2": {"training/comm_overlap.py": gating}})
    for text, status in ((elsewhere, "same"), (inside, "changed")):
        root = make_checkout(tmp_path / status, (0, 7, 0), {"training/comm_overlap.py": text})
        assert by_id(anchors.report(str(root), recorded))["tp_overlap_gating"]["status"] == status


def test_nearest_verified_release():
    verified = ["0.6.2", "0.5.1", "0.6.0"]
    assert anchors.nearest("0.7.0", verified) == "0.6.2"
    assert anchors.nearest("0.6.1", verified) == "0.6.0"
    assert anchors.nearest("0.4.2", verified) == "0.5.1"
    assert anchors.nearest("unknown", verified) == "0.6.2"


def test_release_range_decides_which_anchors_apply(tmp_path):
    for version, applies in (((0, 5, 1), False), ((0, 6, 0), True), ((0, 7, 0), True)):
        d = anchors.report(str(make_checkout(tmp_path / str(version), version)))
        assert (by_id(d)["runtime_config_update_order"]["status"] != "not_applicable") is applies
        assert (by_id(d)["launch_env_plugin"]["status"] == "not_applicable") is applies
    assert by_id(d)["launch_env_wiring"]["status"] == "missing" and "not there" in by_id(d)["launch_env_wiring"]["note"]


def test_installed_package_has_no_scripts(tmp_path):
    d = anchors.report(str(make_checkout(tmp_path)))
    assert by_id(d)["perf_launcher_env_rules"]["status"] == "missing"  # a checkout without scripts/


def test_a_file_that_does_not_parse_is_named(tmp_path):
    root = make_checkout(tmp_path, (0, 7, 0), {"training/config.py": "def runtime_config_update(cfg:\n"})
    a = by_id(anchors.report(str(root)))["runtime_config_update_order"]
    assert a["status"] == "missing" and a["note"].startswith("cannot read training/config.py") and "SyntaxError" in a["note"]


@pytest.mark.parametrize("content, problem", [
    (b"def runtime_config_update(cfg):\n    cfg.validate()\x00\n", "NUL"),
    ("x = 1\n" * 800_000, "files over 4,194,304 bytes are refused"),
])
def test_a_cited_file_that_cannot_be_read_is_bad_input(tmp_path, content, problem):
    """A cited file that is there but is not a readable text file means a broken checkout: one line, exit 2."""
    root = make_checkout(tmp_path, (0, 7, 0), {"training/config.py": content})
    with pytest.raises(UsageError, match=problem) as info:
        anchors.report(str(root))
    assert "training/config.py" in str(info.value)


def test_cli_json_and_exit_status(tmp_path):
    root = make_checkout(tmp_path, (0, 7, 0), {"training/config.py": CONFIG_NEW_STEP})
    proc = run_cli("anchors", "--mbridge-src", root, "--format", "json")
    d = json.loads(proc.stdout)
    assert proc.returncode == 1 and d["ok"] is False
    assert {a["status"] for a in d["anchors"]} <= {"same", "changed", "missing", "not_applicable", "needs_source"}
    order = by_id(d)["runtime_config_update_order"]
    assert order["status"] == "changed" and order["nearest"] == "0.6.2"  # the real data's newest verified release
    assert any(s.startswith(NEW_STEP) for s in order["steps_added"])
    text = run_cli("anchors", "--mbridge-src", root)
    assert "CHANGED since 0.6.2" in text.stdout and f"step added: {NEW_STEP}" in text.stdout


def test_not_a_checkout(tmp_path):
    with pytest.raises(UsageError, match="no src/megatron/bridge"):
        anchors.report(str(tmp_path))
    proc = run_cli("anchors", "--mbridge-src", tmp_path / "nowhere")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_recorded_data_covers_every_anchor_and_release():
    data = anchors.fingerprints()
    for anchor_id, spec in anchors.specs().items():
        recorded = {r for entry in data["anchors"][anchor_id] for r in entry["releases"]}
        expected = {v for v, facts in data["releases"].items()
                    if anchors.applies(spec, v) and (facts["scripts"] or not spec.get("source_only"))}
        assert recorded == expected, anchor_id


def test_yanked_release_is_named(tmp_path):
    facts = releases.data()["releases"]["0.6.1"]
    assert facts["yanked"] and facts["same_as"] in anchors.fingerprints()["releases"]
    d = anchors.report(str(make_checkout(tmp_path, (0, 6, 1))))
    assert "0.6.1 is yanked" in d["release_note"] and facts["same_as"] in d["release_note"]
    assert anchors.report(str(make_checkout(tmp_path / "b", (0, 6, 2))))["release_note"] is None


def test_a_statement_is_named_by_its_code_not_its_layout():
    from mbridge_overlap import fingerprint

    spec = {"scope": "f", "statements": ["x = a and b and not c", "if y >", "assert z % n == 0"]}
    code = "def f():\n    x = (a\n         and b and not c)  # one\n    if (y\n        > 1): pass\n    assert (z) % n == 0, 'm'\n"
    got = fingerprint.measure(spec, code)
    assert got is not None and (got.start, got.end) == (2, 6) and len(got.lines) == 4
    assert fingerprint.missing({**spec, "statements": ["assert z % n == 0", "x ="]}, code) == "the statement 'x =' in f"


# --- against the real repository, when its mirror is on this machine ----------------------------------------------

# $MBRIDGE_SKILL_MIRROR, else .mirror/ beside the checkout (scripts/test.sh also looks beside a cloned-from checkout)
MIRROR = Path(os.environ.get("MBRIDGE_SKILL_MIRROR", Path(__file__).resolve().parents[2] / ".mirror" / "NVIDIA-NeMo+Megatron-Bridge" / "repo"))
MAIN = "067f987df"  # Megatron-Bridge main, package version 0.7.0


def extract(ref: str, dest: Path) -> Path:
    """Only the files the anchors read, from `ref` of the mirror."""
    if not MIRROR.is_dir():
        pytest.skip(f"no Megatron-Bridge mirror at {MIRROR} (set MBRIDGE_SKILL_MIRROR)")
    paths = {"src/megatron/bridge/package_info.py"}
    paths |= {s["file"] if s.get("source_only") else f"src/megatron/bridge/{s['file']}" for s in anchors.specs().values()}
    tree = subprocess.run(["git", "-C", str(MIRROR), "ls-tree", "-r", "--name-only", ref, *sorted(paths)], capture_output=True, text=True)
    if tree.returncode != 0:
        pytest.skip(f"{ref} is not in the mirror at {MIRROR}")
    out = subprocess.run(["git", "-C", str(MIRROR), "archive", ref, *tree.stdout.split()], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        tar.extractall(dest)
    return dest


@pytest.mark.parametrize("tag", ["v0.5.0", "v0.5.1", "v0.6.0"])
def test_every_tagged_release_is_its_recorded_self(tmp_path, tag):
    d = anchors.report(str(extract(tag, tmp_path)))
    assert d["ok"], [(a["id"], a["status"]) for a in d["anchors"] if a["status"] != "same"]


def test_main_067f987df(tmp_path):
    d = anchors.report(str(extract(MAIN, tmp_path)))
    assert d["bridge_version"] == "0.7.0"
    assert {a["status"] for a in d["anchors"]} <= {"same", "changed", "not_applicable"}
    assert by_id(d)["launch_env_plugin"]["status"] == "not_applicable"  # PerfEnvPlugin removed in 0.6
    order = by_id(d)["runtime_config_update_order"]
    assert order["status"] == "changed" and order["nearest"] == "0.6.2"
    assert order["steps_added"] == ["cfg._disable_native_energon_packing_moe_overlap (after cfg.set_data_parallel_size)"]
