"""evalAF AF-2 against the installed Bridge: a run config whose layout is `{_call_: true, _target_:
...PipelineParallelLayerLayout}` (Bridge 0.5.x's to_yaml of a layout object) cannot be loaded by ConfigContainer.from_yaml,
and the resolver says so (RUN_CONFIG_LAYOUT_LOST) with Bridge's own words."""

import pytest

from mbridge_overlap import api

from conftest import ROOT

RUNS = ROOT / "tests" / "data" / "run_configs"
LOST = ("  pipeline_model_parallel_layout:\n    _call_: true\n"
        "    _target_: megatron.core.transformer.pipeline_parallel_layer_layout.PipelineParallelLayerLayout\n")


def test_bridge_cannot_load_a_layout_saved_without_its_arguments(tmp_path):
    from megatron.bridge.training.config import ConfigContainer

    path = tmp_path / "run_config.yaml"
    path.write_text((RUNS / "baseline.yaml").read_text().replace("  pipeline_model_parallel_layout: null\n", LOST))
    with pytest.raises(Exception) as info:
        ConfigContainer.from_yaml(str(path))
    said = str(info.value)
    assert "missing 2 required positional arguments: 'layout' and 'pipeline_model_parallel_size'" in said, said
    (f,) = [f for f in api.resolve(config=str(path), gpu="h100").findings if f.severity == "error"]
    assert f.id == "RUN_CONFIG_LAYOUT_LOST"
    assert "missing 2 required positional arguments: 'layout' and 'pipeline_model_parallel_size'" in f.message
