"""anchors: each rule's code found by content and compared, by fingerprint, with the verified releases."""

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import run_cli
from mbridge_overlap.upstream import anchors, releases
from mbridge_overlap import api
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


def _measured(files: dict, version: str, package: str) -> dict:
    out = {}
    for anchor_id, spec in anchors.specs().items():
        text = files.get(spec["file"]) if anchors.package_of(spec) == package else None
        got = anchors.measure(spec, text) if text is not None else None
        if got is not None and anchors.applies(spec, version):
            out[anchor_id] = got
    return out


def table(per_release: dict, per_package: dict | None = None, pairs: dict | None = None) -> dict:
    """A fingerprint table as gen_release_data.py records it, from {version: {file: text}} (Bridge) and
    {package: {version: {file: text}}} with {release: {package: version}}."""
    measured = {v: _measured(files, v, anchors.BRIDGE) for v, files in per_release.items()}
    by_package = {name: {v: _measured(files, v, name) for v, files in versions.items()}
                  for name, versions in (per_package or {}).items()}
    return {"releases": {v: {} for v in per_release},
            "packages": {name: {v: {} for v in versions} for name, versions in (per_package or {}).items()},
            "anchors": anchors.record(measured, by_package, pairs or {})}


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
        name = anchors.package_of(spec)
        recorded = {r for entry in data["anchors"][anchor_id] for r in entry["releases"]}
        if name == anchors.BRIDGE:
            expected = {v for v, facts in data["releases"].items()
                        if anchors.applies(spec, v) and (facts["scripts"] or not spec.get("source_only"))}
            assert recorded == expected, anchor_id
            assert not any("versions" in entry for entry in data["anchors"][anchor_id]), anchor_id
            continue
        versions = {v for entry in data["anchors"][anchor_id] for v in entry["versions"]}
        assert versions == {v for v in data["packages"][name] if anchors.applies(spec, v)}, anchor_id
        field = anchors.PACKAGES[name]["field"]
        for entry in data["anchors"][anchor_id]:  # the Bridge releases paired with a version that has this code
            assert entry["releases"] == [r for r in data["releases"] if data["releases"][r][field] in entry["versions"]]
        assert recorded == {r for r, facts in data["releases"].items() if facts[field] in versions}, anchor_id


def test_recorded_pairs_are_the_pinned_versions():
    """Each verified release names the Megatron-Core (releases.yaml) and Transformer Engine versions its anchors of
    those packages were recorded in, and each of those versions has a source."""
    data = anchors.fingerprints()
    pins = (Path(__file__).resolve().parents[1] / "scripts" / "requirements-bridge.txt").read_text()
    for version, facts in data["releases"].items():
        assert facts["megatron_core"] == releases.get(version).megatron_core, version
        assert f"=={facts['transformer_engine']}" in pins, version  # every release shares the 0.6.2 venv's TE
        for name in ("megatron.core", "transformer_engine"):
            assert data["packages"][name][facts[anchors.PACKAGES[name]["field"]]]["source"], (version, name)
    assert data["packages"]["megatron.core"].keys() == {"0.18.0", "0.18.2", "0.19.0", "0.19.2"}
    assert list(data["packages"]["transformer_engine"]) == ["2.20.2"]


def test_yanked_release_is_named(tmp_path):
    facts = releases.data()["releases"]["0.6.1"]
    assert facts["yanked"] and facts["same_as"] in anchors.fingerprints()["releases"]
    d = anchors.report(str(make_checkout(tmp_path, (0, 6, 1))))
    assert "0.6.1 is yanked" in d["release_note"] and facts["same_as"] in d["release_note"]
    assert anchors.report(str(make_checkout(tmp_path / "b", (0, 6, 2))))["release_note"] is None


# --- anchors in Megatron-Core and Transformer Engine --------------------------------------------------------------

# An initialize_model_parallel of the shape mcore_expert_grid and mcore_distopt_instances cite, written for these tests.
PARALLEL_STATE = '''
def initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
                              expert_model_parallel_size=1, expert_tensor_parallel_size=None,
                              num_distributed_optimizer_instances=1):
    world_size = 8
    data_parallel_size = world_size // (tensor_model_parallel_size * pipeline_model_parallel_size)
    # Build expert rank generator
    if expert_tensor_parallel_size is None:
        expert_tensor_parallel_size = tensor_model_parallel_size
    expert_tensor_model_pipeline_parallel_size = (
        expert_tensor_parallel_size * expert_model_parallel_size * pipeline_model_parallel_size
    )
    expert_data_parallel_size = world_size // expert_tensor_model_pipeline_parallel_size
    if world_size % expert_tensor_model_pipeline_parallel_size != 0:
        raise RuntimeError(
            f"world_size ({world_size}) is not divisible by expert_tensor_model_pipeline_parallel size ({expert_tensor_model_pipeline_parallel_size})"
        )
    assert (
        data_parallel_size * context_parallel_size
    ) % num_distributed_optimizer_instances == 0, (
        "Data parallel size should be divisible by partial DistOpt shard factor"
    )
    assert (
        expert_data_parallel_size % num_distributed_optimizer_instances == 0
    ), "Expert data parallel size should be divisible by partial DistOpt shard factor"
'''
# The same rules with unrelated code added between them, and comments moved: the chosen statements are the same.
PARALLEL_STATE_ELSEWHERE = PARALLEL_STATE.replace(
    "    # Build expert rank generator\n", "    timeout = 30  # minutes\n    groups = {}\n").replace(
    "    assert (\n        data_parallel_size", "    groups['dp'] = data_parallel_size\n    assert (\n        data_parallel_size", 1)
# CP made a factor of the expert grid: the rule changed.
PARALLEL_STATE_CP = PARALLEL_STATE.replace("* pipeline_model_parallel_size\n    )", "* pipeline_model_parallel_size * context_parallel_size\n    )")
GRID = ("mcore_expert_grid", "mcore_distopt_instances")


def make_package(root: Path, name: str, version: str, files: dict) -> Path:
    """An installed-looking package folder: megatron/core with its package_info.py, or transformer_engine with a
    dist-info folder beside it."""
    pkg = root.joinpath(*name.split("."))
    pkg.mkdir(parents=True)
    if name == "megatron.core":
        (pkg / "package_info.py").write_text("MAJOR = {}\nMINOR = {}\nPATCH = {}\n".format(*version.split(".")))
    else:
        (root / f"{name}-{version}.dist-info").mkdir()
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No Megatron-Core or Transformer Engine in this Python, and no Bridge venv."""
    real = anchors._spec_dir
    monkeypatch.setattr(anchors, "_spec_dir", lambda name: real(name) if name == anchors.BRIDGE else None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))
    monkeypatch.delenv("MBRIDGE_VENV", raising=False)
    anchors._dirs_in.cache_clear()
    yield
    anchors._dirs_in.cache_clear()


def mcore_report(tmp_path, recorded, version, text, bridge=(0, 6, 2)):
    core = make_package(tmp_path / "site", "megatron.core", version, {"parallel_state.py": text})
    d = anchors.report(str(make_checkout(tmp_path / "bridge", bridge)), recorded, package_dirs={"megatron.core": core})
    from test_schemas import check as check_schema  # here: test_schemas imports this module

    check_schema("anchors", {"schema_version": api.SCHEMA_VERSION, **d})
    return d


def test_a_package_anchor_is_compared_with_that_packages_versions(tmp_path):
    recorded = table({"0.6.2": {}}, {"megatron.core": {"0.18.2": {"parallel_state.py": PARALLEL_STATE_CP},
                                                       "0.19.2": {"parallel_state.py": PARALLEL_STATE}}},
                     {"0.6.2": {"megatron.core": "0.19.2"}})
    entry, = recorded["anchors"]["mcore_expert_grid"][1:]
    assert entry["versions"] == ["0.19.2"] and entry["releases"] == ["0.6.2"]
    for version, text, status, ref in (("0.19.2", PARALLEL_STATE, "same", "0.19.2"), ("0.18.2", PARALLEL_STATE_CP, "same", "0.18.2"),
                                       ("0.20.0", PARALLEL_STATE_CP, "same", "0.18.2")):
        d = mcore_report(tmp_path / version, recorded, version, text)
        a = by_id(d)["mcore_expert_grid"]
        assert (a["status"], a["same_as"], a["package"], a["version"]) == (status, ref, "megatron.core", version)
        assert a["path"].endswith("megatron/core/parallel_state.py") and a["start"] < a["end"]
        assert d["packages"]["megatron.core"]["version"] == version and d["packages"]["megatron.core"]["found_in"] == "given"
        assert d["packages"]["megatron.core"]["verified_versions"] == ["0.18.2", "0.19.2"]


def test_statements_ignore_the_rest_of_their_function(tmp_path):
    recorded = table({"0.6.2": {}}, {"megatron.core": {"0.19.2": {"parallel_state.py": PARALLEL_STATE}}})
    d = mcore_report(tmp_path / "a", recorded, "0.20.0", PARALLEL_STATE_ELSEWHERE)
    assert [by_id(d)[i]["status"] for i in GRID] == ["same", "same"]
    d = mcore_report(tmp_path / "b", recorded, "0.20.0", PARALLEL_STATE_CP)
    grid = by_id(d)["mcore_expert_grid"]
    assert (grid["status"], grid["nearest"], by_id(d)["mcore_distopt_instances"]["status"]) == ("changed", "0.19.2", "same")
    assert "Megatron-Core 0.19.2" in grid["note"]
    assert [line for line in grid["diff"] if line[:1] in "+-"] == [
        "-[line 3 of the 0.19.2 code]",
        "+expert_tensor_model_pipeline_parallel_size = expert_tensor_parallel_size * expert_model_parallel_size * "
        "pipeline_model_parallel_size * context_parallel_size"]


def test_a_statement_that_is_gone_is_named(tmp_path):
    text = PARALLEL_STATE.replace("    expert_data_parallel_size = world_size // expert_tensor_model_pipeline_parallel_size\n", "")
    a = by_id(mcore_report(tmp_path, None, "0.20.0", text))["mcore_expert_grid"]
    assert a["status"] == "missing"
    assert a["note"].startswith("the statement 'expert_data_parallel_size = world_size // expert_tensor_model_pipeline_parallel_size'"
                                " in initialize_model_parallel is not there any more")


def test_a_statement_is_named_by_its_code_not_its_layout():
    from mbridge_overlap.upstream import fingerprint

    spec = {"scope": "f", "statements": ["x = a and b and not c", "if y >", "assert z % n == 0"]}
    code = "def f():\n    x = (a\n         and b and not c)  # one\n    if (y\n        > 1): pass\n    assert (z) % n == 0, 'm'\n"
    got = fingerprint.measure(spec, code)
    assert got is not None and (got.start, got.end) == (2, 6) and len(got.lines) == 4
    assert fingerprint.missing({**spec, "statements": ["assert z % n == 0", "x ="]}, code) == "the statement 'x =' in f"


def test_bridges_version_does_not_gate_other_packages(tmp_path, nowhere):
    """A Bridge 0.5.1 checkout with Megatron-Core 0.19.2 beside it: the Megatron-Core anchors compare (by their own
    version); bridge_expert_tp_default (Bridge since 0.6.0) does not apply."""
    recorded = table({"0.5.1": {}}, {"megatron.core": {"0.19.2": {"parallel_state.py": PARALLEL_STATE}}})
    d = mcore_report(tmp_path, recorded, "0.19.2", PARALLEL_STATE, bridge=(0, 5, 1))
    assert [by_id(d)[i]["status"] for i in GRID] == ["same", "same"]
    assert by_id(d)["bridge_expert_tp_default"]["status"] == "not_applicable"
    assert by_id(d)["te_ub_multicast"]["status"] == "needs_source"


def test_a_package_that_is_not_there_needs_source(tmp_path, nowhere):
    from test_schemas import check as check_schema

    d = api.anchors(str(make_checkout(tmp_path, (0, 6, 2), {"training/config.py": CONFIG})))
    check_schema("anchors", d)
    others = [a for a in d["anchors"] if a["package"] != anchors.BRIDGE]
    assert {a["package"] for a in others} == {"megatron.core", "transformer_engine"}
    for a in others:
        assert (a["status"], a["version"], a["path"]) == ("needs_source", None, None), a
        assert "\n" not in a["note"] and " is not in " in a["note"] and "its code cannot be checked here" in a["note"]
    assert d["packages"]["transformer_engine"]["path"] is None and d["packages"]["transformer_engine"]["note"]
    assert by_id(d)["runtime_config_update_order"]["status"] == "changed"  # Bridge's anchors are checked as before


def test_a_checkouts_megatron_lm_submodule_is_its_megatron_core(tmp_path, nowhere):
    root = make_checkout(tmp_path, (0, 6, 2))
    make_package(root / "3rdparty" / "Megatron-LM", "megatron.core", "0.19.2", {"parallel_state.py": PARALLEL_STATE})
    d = anchors.report(str(root))
    assert d["packages"]["megatron.core"]["found_in"] == "the checkout's 3rdparty/Megatron-LM"
    assert by_id(d)["mcore_expert_grid"]["path"] == str(root / "3rdparty/Megatron-LM/megatron/core/parallel_state.py")
    assert by_id(d)["mcore_expert_grid"]["same_as"] == "0.18.2"  # the four statements as Megatron-Core 0.18 writes them


def fake_venv_python(tmp_path: Path, out: str) -> Path:
    """A Bridge venv whose python answers the find_spec question with `out`."""
    python = tmp_path / "cache" / anchors.VENV_CACHE / "venv-mbridge-0.6.2" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\ncat <<'EOF'\n{out}\nEOF\n")
    python.chmod(0o755)
    return python


def test_a_checkout_reads_the_bridge_venvs_packages(tmp_path, nowhere, monkeypatch):
    site = tmp_path / "site"
    core = make_package(site, "megatron.core", "0.19.2", {"parallel_state.py": PARALLEL_STATE})
    te = make_package(site, "transformer_engine", "2.20.2", {})
    python = fake_venv_python(tmp_path, json.dumps({"megatron.core": str(core), "transformer_engine": str(te)}))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    d = anchors.report(str(make_checkout(tmp_path / "bridge", (0, 6, 2))))
    assert d["packages"]["megatron.core"]["found_in"] == f"the Bridge venv {python}"
    assert (d["packages"]["transformer_engine"]["version"], d["packages"]["transformer_engine"]["path"]) == ("2.20.2", str(te))
    assert by_id(d)["te_ub_multicast"]["status"] == "missing"  # its file is not in this fake package


@pytest.mark.parametrize("out", ["not json", "[1, 2]", '{"megatron.core": 3}'])
def test_a_bridge_venv_that_cannot_tell_is_no_source(tmp_path, nowhere, monkeypatch, out):
    fake_venv_python(tmp_path, out)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    d = anchors.report(str(make_checkout(tmp_path / "bridge", (0, 6, 2))))
    assert d["packages"]["megatron.core"]["path"] is None and "the Bridge venv" in d["packages"]["megatron.core"]["note"]


def test_package_versions(tmp_path):
    te = make_package(tmp_path / "a", "transformer_engine", "2.20.2", {})
    (tmp_path / "a" / "transformer_engine_cu13-2.21.0.dist-info").mkdir()  # another distribution
    assert anchors.package_version("transformer_engine", te) == "2.20.2"
    checkout = tmp_path / "te"
    (checkout / "transformer_engine").mkdir(parents=True)
    (checkout / "build_tools").mkdir()
    (checkout / "build_tools" / "VERSION.txt").write_text("2.21.0.dev0\n")
    assert anchors.package_version("transformer_engine", checkout / "transformer_engine") == "2.21.0.dev0"
    assert anchors.package_version("megatron.core", make_package(tmp_path / "b", "megatron.core", "0.19.2", {})) == "0.19.2"
    assert anchors.package_version("megatron.core", tmp_path) == "unknown"


def test_cli_json_names_each_anchors_package(tmp_path):
    root = make_checkout(tmp_path, (0, 6, 2), {"training/config.py": CONFIG})
    env = {"XDG_CACHE_HOME": str(tmp_path / "no-cache"), "MBRIDGE_VENV": str(tmp_path / "no-venv")}
    d = json.loads(run_cli("anchors", "--mbridge-src", root, "--format", "json", env=env).stdout)
    packages = {a["id"]: a["package"] for a in d["anchors"]}
    assert packages["mcore_p2p_shape_exchange"] == "megatron.core" and packages["te_ub_lazy_init"] == "transformer_engine"
    assert packages["bridge_fixed_seq_len"] == packages["runtime_config_update_order"] == anchors.BRIDGE
    assert d["packages"]["megatron.bridge"]["version"] == "0.6.2" and by_id(d)["bridge_fixed_seq_len"]["version"] == "0.6.2"
    assert d["packages"]["megatron.core"]["verified_versions"] == ["0.18.0", "0.18.2", "0.19.0", "0.19.2"]


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


@pytest.mark.parametrize("tag", ["v0.5.0", "v0.5.1"])
def test_the_0_5_executor_env_is_the_perf_launcher_s_own(tag):
    """evalD 11: what 0.5's perf launcher exports beside PerfEnvPlugin (releases.yaml launch_env.perf_env_plugin.
    executor_env), against scripts/performance/utils/executors.py's PERF_ENV_VARS at the tag, read with ast."""
    import ast

    from mbridge_overlap.upstream import releases

    if not MIRROR.is_dir():
        pytest.skip(f"no Megatron-Bridge mirror at {MIRROR} (set MBRIDGE_SKILL_MIRROR)")
    out = subprocess.run(["git", "-C", str(MIRROR), "show", f"{tag}:scripts/performance/utils/executors.py"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"{tag} is not in the mirror at {MIRROR}")
    node = next(n for n in ast.walk(ast.parse(out.stdout)) if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "PERF_ENV_VARS" for t in n.targets))
    theirs = ast.literal_eval(node.value)
    ours = releases.data()["launch_env"]["perf_env_plugin"]["executor_env"]
    assert ours and {k: str(v) for k, v in ours.items()} == {k: theirs[k] for k in ours}
