"""The data the core ships (baseline, mixed-precision table, presets, field lists) equals the installed Bridge."""

import dataclasses

import pytest
import yaml

from mbridge_overlap.upstream import releases
from mbridge_overlap.run import schema
from mbridge_overlap.bridge import adapter

RELEASE = releases.get(adapter.bridge_version())


@pytest.fixture(scope="module")
def baseline():
    return adapter.baseline_config()


def test_baseline_values_are_bridges(baseline):
    for section, fields in schema.SECTIONS.items():
        obj = getattr(baseline, section)
        for name, spec in fields.items():
            if section == "model" and name in adapter.MODEL_KWARGS or section in ("train", "validation"):
                continue  # the model's dimensions and the batch sizes are the user's: unknown (None) in the baseline
            if section == "dataset" and not hasattr(obj, name):
                # validate() reads these with hasattr (pad_to_max_length) or getattr(..., False): a dataset config
                # without the field (GPTDatasetConfig has no pad_to_max_length) is None or False to Bridge
                got = None if spec.kind == schema.OPT_BOOL else False
            else:
                got = getattr(obj, name)
            if spec.kind == schema.OPT_PATH:  # a path: only whether it is set counts
                got = None if got is None else "set"
            assert got == spec.default, f"{section}.{name}"
    assert baseline.comm_overlap is None
    assert baseline.mixed_precision == schema.BASELINE_MIXED_PRECISION


def test_comm_overlap_defaults_are_bridges():
    comm_overlap, _, _ = adapter.import_bridge()
    defaults = {f.name: f.default for f in dataclasses.fields(comm_overlap.CommOverlapConfig)}
    for name, spec in schema.COMM_OVERLAP.items():
        if name != "tp_comm_overlap":  # a required field
            assert defaults[name] == spec.default, name
    modeled = set(schema.COMM_OVERLAP) | set(schema.COMM_OVERLAP_COMPUTED)
    assert modeled == set(defaults), "every CommOverlapConfig field is modeled or computed"


def test_mixed_precision_table_is_bridges():
    _, _, mixed_precision = adapter.import_bridge()
    registered = {n for n in mixed_precision.MIXED_PRECISION_RECIPES if "-" not in n}
    assert registered == set(RELEASE.mixed_precision_recipes)
    for name in registered:
        real = mixed_precision.MIXED_PRECISION_RECIPES[name]()
        for field, value in RELEASE.mixed_precision(name).items():
            assert getattr(real, field) == value, f"{name}.{field}"


def test_presets_are_bridges():
    comm_overlap, _, _ = adapter.import_bridge()
    names = sorted(n for n in dir(comm_overlap) if n.startswith("userbuffers_"))
    assert names == sorted(releases.data()["tp_overlap_presets"])
    shipped = yaml.safe_load((releases.DATA_DIR / "tp_overlap_presets.yaml").read_text())
    for name in names:
        assert adapter._plain(dataclasses.asdict(getattr(comm_overlap, name))) == adapter._plain(shipped[name]), name


def test_field_lists_and_presets_are_bridges():
    """tools/gen_bridge_data.py --check: the installed release's field names and the shared presets."""
    import subprocess
    import sys

    script = releases.DATA_DIR.parents[1] / "tools" / "gen_bridge_data.py"
    proc = subprocess.run([sys.executable, "-W", "ignore", str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("bridge data matches the installed megatron-bridge")


def test_effective_fields_exist_on_bridges_objects(baseline):
    for section, names in schema.EFFECTIVE_FIELDS.items():
        for name in names:
            assert hasattr(getattr(baseline, section), name), f"{section}.{name}"


def test_anchors_are_found_in_the_installed_package():
    from mbridge_overlap.upstream.anchors import report

    d = report(None)
    assert d["ok"], [a for a in d["anchors"] if a["status"] in ("missing", "changed")]
    assert d["bridge_version"] == adapter.bridge_version()


def test_the_installed_megatron_core_and_transformer_engine_are_the_recorded_code():
    """Every Megatron-Core and Transformer Engine anchor is found in this Python's packages, of the versions the
    release is paired with (fingerprints.yaml), and its code is that version's."""
    from mbridge_overlap.upstream import anchors

    d = anchors.report(None)
    pairs = anchors.fingerprints()["releases"][RELEASE.data_version]
    assert pairs["megatron_core"] == RELEASE.megatron_core
    for name in ("megatron.core", "transformer_engine"):
        found = d["packages"][name]
        assert (found["found_in"], found["version"]) == ("this Python", pairs[anchors.PACKAGES[name]["field"]]), found
        assert found["version"] in found["verified_versions"]
    others = [a for a in d["anchors"] if a["package"] != anchors.BRIDGE]
    assert len(others) >= 12
    for a in others:
        assert (a["status"], a["version"]) == ("same", d["packages"][a["package"]]["version"]), a
        assert a["path"].startswith(d["packages"][a["package"]]["path"]) and a["start"] <= a["end"], a


def test_anchors_import_no_megatron_and_no_torch():
    """`anchors` reads files: finding the packages (importlib find_spec) runs none of their code."""
    import subprocess
    import sys

    code = ("import sys; from mbridge_overlap.upstream import anchors; d = anchors.report(None); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_engine') or m.startswith('megatron.')); "
            "print(d['counts'], bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=releases.DATA_DIR.parents[1])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_megatron_lm_flags_are_the_installed_parsers():
    """tools/gen_mlm_flags.py --check: diagnose's Megatron-LM flag names (data/megatron_lm_flags.json) are the parser
    the installed megatron-core builds, where it is the megatron-core the file was generated from."""
    import json
    import subprocess
    import sys
    from importlib.metadata import version

    recorded = json.loads((releases.DATA_DIR / "megatron_lm_flags.json").read_text())["megatron_core_version"]
    if version("megatron-core") != recorded:
        pytest.skip(f"the flag names are megatron-core {recorded}'s; installed {version('megatron-core')}")
    script = releases.DATA_DIR.parents[1] / "tools" / "gen_mlm_flags.py"
    proc = subprocess.run([sys.executable, "-W", "ignore", str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("up to date")
