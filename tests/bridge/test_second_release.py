"""A second real release: the resolver, the snippets, the launch environment and the anchors against an installed
Megatron-Bridge other than the default one. scripts/test.sh runs this file in its own tier when
MBRIDGE_SKILL_SECOND_RELEASE=VERSION is set (the venv comes from scripts/bridge_env.sh --release VERSION)."""

import itertools
import os

import pytest

from mbridge_overlap.upstream import anchors, releases
from mbridge_overlap.run import launch_env
from mbridge_overlap.bridge import adapter, apply, conformance
from test_apply import LAYOUTS
from test_flex_sm_counts_bridge import (  # noqa: F401
    test_a_config_file_s_counts_agree_and_the_fix_is_taken,
    test_the_skill_raises_exactly_where_megatron_core_raises,
)
from test_moe_overlap_post_init_bridge import test_the_model_s_own_overlap_is_refused_exactly_where_megatron_core_refuses_it  # noqa: F401
from test_moe_overlap_te_graphs_bridge import test_te_graphs_on_moe_or_mlp_are_refused_exactly_where_megatron_core_refuses_them  # noqa: F401,E501
from test_ep_early_release_bridge import test_early_release_is_refused_exactly_where_megatron_core_refuses_it  # noqa: F401
from test_dispatch_with_wgrad_bridge import test_dispatch_with_wgrad_is_refused_exactly_where_megatron_core_refuses_it  # noqa: F401
from test_moe_enable_deepep_bridge import test_moe_enable_deepep_is_refused_exactly_where_megatron_core_refuses_it  # noqa: F401
from test_deepep_pad_to_capacity_bridge import test_padding_with_deepep_is_refused_exactly_where_megatron_core_refuses_it  # noqa: F401
from test_expert_rank_capacity_bridge import test_rank_capacity_is_refused_exactly_where_megatron_core_refuses_it  # noqa: F401
from test_config_file_refusals_bridge import (  # noqa: F401
    test_each_file_is_refused_exactly_where_bridge_refuses_it,
    test_the_capacity_checks_before_the_rank_capacity_s_as_bridge_runs_them,
)
from test_ncclep_dispatcher_bridge import test_the_skill_refuses_ncclep_exactly_where_megatron_core_does  # noqa: F401
from test_dataset_seq_length_bridge import (  # noqa: F401
    test_a_config_file_s_sequence_length_words_agree_with_bridge,
    test_a_config_s_provider_class_default_seq_length_is_the_one_bridge_validates,
    test_the_sequence_length_fix_is_one_this_release_s_command_line_takes,
)

try:
    VERSION = adapter.bridge_version()
except Exception:  # no megatron-bridge: conftest skips or fails the tier with the reason
    VERSION = None
ASKED = (os.environ.get("MBRIDGE_SKILL_SECOND_RELEASE") or "").split()  # scripts/test.sh runs one release at a time

pytestmark = pytest.mark.skipif(
    VERSION == releases.default_version(),
    reason="the installed Bridge is the default release; MBRIDGE_SKILL_SECOND_RELEASE=0.5.1 scripts/test.sh runs this",
)


def test_the_installed_release_is_the_one_asked_for():
    assert VERSION in releases.versions()
    assert not ASKED or VERSION in ASKED, f"asked for Bridge {' '.join(ASKED)}, this Python has {VERSION}"


def test_megatron_core_is_the_one_the_release_data_pairs_with_it():
    from importlib.metadata import version

    assert version("megatron-core") == releases.get(VERSION).megatron_core


def test_generated_configs_agree_on_every_field():
    report = conformance.run(2000, seed=0)
    assert report["bridge_version"] == VERSION
    assert report["failures"] == [], report["failures"][:3]


def test_expert_layouts_agree_on_every_field():
    report = conformance.run(300, seed=0, moe=True)  # an unset expert TP size is TP here, 1 from 0.6.0 on
    assert report["failures"] == [], report["failures"][:3]


def test_a_field_this_release_lacks_is_refused_by_both():
    cases = [c for c in conformance.generate(500, seed=0) if any(k.startswith("env_vars.") for k in c.overrides)]
    assert cases
    if releases.get(VERSION).env_vars:
        pytest.skip(f"Bridge {VERSION} has ConfigContainer.env_vars")
    assert all(not conformance.check(c, VERSION).differences for c in cases[:5])
    # The default release's rules accept env_vars; against this Bridge that must be caught.
    for case in cases[:5]:
        assert conformance.check(case, releases.default_version()).differences[0][:2] == ("overrides", "accepted")


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: "-".join(f"{k}{v}" for k, v in lay.items()))
def test_every_snippet_form_matches_the_prediction(layout):
    results = apply.verify_plan(dict(layout, bridge_version=VERSION))
    assert len(results) == (8 if releases.get(VERSION).env_vars else 7)  # no env_vars form before 0.6
    for r in results:
        assert r.ok, (r.form, r.differences, r.error)


def test_launch_env_matches_perf_env_plugin():
    release = releases.get(VERSION)
    if release.launch_env != "perf_env_plugin":
        pytest.skip(f"Bridge {VERSION} has no PerfEnvPlugin")
    run = pytest.importorskip("nemo_run", reason="PerfEnvPlugin needs nemo-run")
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin

    sm100 = launch_env.sm100_gpus(release)
    grid = itertools.product([1, 2, 4], [1, 2], [1, 2], [1, 2], ["h100", "b200", "gb300"], [None, "deepep", "hybridep"], [False, True])
    checked = 0
    for tp, pp, cp, dp, gpu, flex, a2a in grid:
        layout = launch_env.Layout(tp=tp, pp=pp, cp=cp, dp=dp, gpu=gpu, moe_a2a_overlap=a2a, moe_flex_dispatcher_backend=flex,
                                   flex_in_use=flex is not None)
        executor = run.LocalExecutor()
        # as the 0.5 perf launcher builds it (scripts/performance/perf_plugins.py, PerfEnvPlugin.setup at v0.5.0 and
        # v0.5.1: layernorm_sm_margin = 20 if moe_flex_dispatcher_backend in ["deepep", "hybridep"] else 16)
        plugin = PerfEnvPlugin(tp_size=tp, pp_size=pp, cp_size=cp, num_gpus=tp * pp * cp * dp, gpu_sm100_or_newer=gpu in sm100,
                               moe_flex_dispatcher_backend=flex, a2a_overlap=a2a, enable_manual_gc=False,
                               layernorm_sm_margin=20 if flex in ("deepep", "hybridep") else 16)
        plugin.setup(run.Script(inline="true"), executor)
        assert executor.env_vars == {k: v for k, v, _ in launch_env.rules(release, layout)}, layout
        checked += 1
    assert checked == 3 * 2 * 2 * 2 * 3 * 3 * 2


def test_anchors_are_this_releases_code():
    d = anchors.report(None)
    assert d["bridge_version"] == VERSION and d["ok"], [a for a in d["anchors"] if a["status"] in ("missing", "changed")]
    statuses = {a["id"]: a["status"] for a in d["anchors"]}
    assert statuses["launch_env_plugin"] == ("not_applicable" if releases.get(VERSION).env_vars else "same")


@pytest.mark.parametrize("flags", [
    ["--tp", "4", "--pp", "4", "--vpp", "2", "--gpus", "64", "--gpu", "h100", "--recipe", "llama3_70b"],
    ["--tp", "2", "--cp", "2", "--gpus", "64", "--gpu", "gb200"],
    # an MoE recipe: without one the baseline model has no experts and Bridge rejects the all-to-all overlap (no snippet)
    ["--recipe", "olmoe_7b_pretrain_config", "--gpus", "8", "--gpu", "b200", "--moe-flex-backend", "deepep", "--moe-a2a-overlap"],
])
def test_nemo_run_snippet_is_what_perf_env_plugin_sets(flags):
    """plan --format nemo_run: the PerfEnvPlugin it builds writes exactly the executor.env_vars it also lists."""
    if releases.get(VERSION).launch_env != "perf_env_plugin":
        pytest.skip(f"Bridge {VERSION} has no PerfEnvPlugin")
    run = pytest.importorskip("nemo_run", reason="PerfEnvPlugin needs nemo-run")
    from mbridge_overlap import cli

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["plan", *flags, "--bridge-version", VERSION, "--format", "nemo_run"]) in (0, 1)
    listed, plugins = run.LocalExecutor(), []
    exec(compile(out.getvalue(), "nemo_run_snippet", "exec"), {"plugins": plugins, "executor": listed})
    assert len(plugins) == 1 and listed.env_vars
    applied = run.LocalExecutor()
    plugins[0].setup(run.Script(inline="true"), applied)
    assert applied.env_vars == listed.env_vars


def test_perf_env_plugin_is_left_out_where_megatron_fsdp_refuses_what_it_writes(monkeypatch):
    """evalJ D1: with Megatron-FSDP on Hopper and TP > 1 the real PerfEnvPlugin writes CUDA_DEVICE_MAX_CONNECTIONS=1,
    and real Bridge's check refuses a run launched so; the plan's nemo_run form adds no plugin and sets a value the
    check accepts (the same config then passes runtime_config_update)."""
    if releases.get(VERSION).launch_env != "perf_env_plugin":
        pytest.skip(f"Bridge {VERSION} has no PerfEnvPlugin")
    run = pytest.importorskip("nemo_run", reason="PerfEnvPlugin needs nemo-run")
    from megatron.bridge.recipes.run_plugins import PerfEnvPlugin
    from mbridge_overlap import api
    from mbridge_overlap.output import snippets

    plan = api.plan(tp=2, gpus=64, gpu="h100", megatron_fsdp=True, bridge_version=VERSION)
    plugin_writes = run.LocalExecutor()
    PerfEnvPlugin(**plan.perf_env_plugin_args(), enable_manual_gc=False).setup(run.Script(inline="true"), plugin_writes)
    assert plugin_writes.env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and plan.perf_env_plugin_refused()
    listed, plugins = run.LocalExecutor(), []
    exec(compile(snippets.of_plan("nemo_run", plan), "nemo_run_snippet", "exec"), {"plugins": plugins, "executor": listed})
    assert plugins == []

    def error_with(env):
        cfg = apply.base_config({})
        apply._apply_python(cfg, snippets.of_plan("python", plan))
        cfg.train.global_batch_size = cfg.train.micro_batch_size * plan.resolution.data_parallel_size
        with monkeypatch.context() as m:
            for name, value in env.items():
                m.setenv(name, value)
            return adapter.runtime_config_update(cfg, 64)[0] or ""

    refused, accepted = error_with(plugin_writes.env_vars), error_with(listed.env_vars)
    assert "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset." in refused and accepted == "", (refused, accepted)


def test_field_names_are_this_releases():
    """tools/gen_bridge_data.py --check against this release: data/releases/VERSION/bridge_fields.yaml and presets."""
    import subprocess
    import sys

    script = releases.DATA_DIR.parents[1] / "tools" / "gen_bridge_data.py"
    proc = subprocess.run([sys.executable, "-W", "ignore", str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_recipe_catalog_is_this_releases():
    """tools/gen_recipe_catalog.py --check: data/releases/VERSION/recipes.json regenerated from the installed package."""
    import subprocess
    import sys

    script = releases.DATA_DIR.parents[1] / "tools" / "gen_recipe_catalog.py"
    proc = subprocess.run([sys.executable, "-W", "ignore", str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("catalog matches"), proc.stdout + proc.stderr[-2000:]


def test_flex_builders_are_this_releases():
    """tools/gen_flex_builders.py --check: the dispatcher each recipe that calls apply_flex_dispatcher_backend builds
    with per GPU type, from the installed package (evalS V1)."""
    import subprocess
    import sys

    script = releases.DATA_DIR.parents[1] / "tools" / "gen_flex_builders.py"
    proc = subprocess.run([sys.executable, "-W", "ignore", str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("matches"), proc.stdout + proc.stderr[-2000:]


def test_vpp_refusing_providers_are_this_releases():
    """tools/gen_vpp_refused.py --check: the providers that refuse VPP and the recipes that build one (evalT U1)."""
    import subprocess
    import sys

    script = releases.DATA_DIR.parents[1] / "tools" / "gen_vpp_refused.py"
    proc = subprocess.run([sys.executable, "-W", "ignore", str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("matches"), proc.stdout + proc.stderr[-2000:]


@pytest.mark.skipif(VERSION is None or releases.version_key(VERSION) >= releases.version_key("0.6.0"),
                    reason="Bridge 0.6's GPTDatasetConfig has seq_length as a field of its own")
def test_a_summary_of_this_release_gives_the_sequence_length_by_megatron_core_s_name():
    """evalH H5: Bridge 0.5.x's GPTDatasetConfig keeps seq_length as a property over Megatron-Core's sequence_length,
    so its configuration summary prints only sequence_length; the summary reader takes the model's from it."""
    from dataclasses import fields

    from megatron.bridge.training.config import GPTDatasetConfig

    names = {f.name for f in fields(GPTDatasetConfig)}
    assert "sequence_length" in names and "seq_length" not in names
    assert isinstance(GPTDatasetConfig.seq_length, property)
