"""evalAF AF-2: a run config whose pipeline layout Bridge 0.5.x saved without its arguments (to_yaml wrote the
PipelineParallelLayerLayout object as `{_call_: true, _target_: ...}`; 0.6.0 writes its stages, Megatron-Bridge #4769)
cannot be loaded by Bridge at all: real 0.5.1 and 0.6.2 ConfigContainer.from_yaml raise InstantiationException
("PipelineParallelLayerLayout.__init__() missing 2 required positional arguments: 'layout' and
'pipeline_model_parallel_size'") on Bridge 0.5.1's own dump of deepseek_v3_pretrain_config. The skill said Megatron-Core
rejects the layout and to change it; the file lost it, and the layout the run used, given beside it, is taken (real
0.5.1: process_config_with_overrides with the recipe's layout, then runtime_config_update: dp 32)."""

from pathlib import Path

import mbridge_overlap.api as api
from conftest import ROOT

RUNS = ROOT / "tests" / "data" / "run_configs"
LOST = ("  pipeline_model_parallel_layout:\n    _call_: true\n"
        "    _target_: megatron.core.transformer.pipeline_parallel_layer_layout.PipelineParallelLayerLayout\n")
# the baseline's PP 4 x VPP 2 over its 96 layers, as a layout string
LAYOUT = "|".join(["E" + "t" * 12] + ["t" * 12] * 6 + ["t" * 12 + "L"])


def _lost(tmp_path: Path) -> Path:
    text = (RUNS / "baseline.yaml").read_text()
    assert text.count("  pipeline_model_parallel_layout: null\n") == 1
    path = tmp_path / "run_config.yaml"
    path.write_text(text.replace("  pipeline_model_parallel_layout: null\n", LOST))
    return path


def _errors(res) -> dict:
    return {f.id: f for f in res.findings if f.severity == "error"}


def test_a_layout_saved_without_its_arguments_is_the_file_s_loss_not_a_rejection(tmp_path):
    errors = _errors(api.resolve(config=str(_lost(tmp_path)), gpu="h100"))
    assert set(errors) == {"RUN_CONFIG_LAYOUT_LOST"}, list(errors)
    f = errors["RUN_CONFIG_LAYOUT_LOST"]
    assert "missing 2 required positional arguments: 'layout' and 'pipeline_model_parallel_size'" in f.message
    assert "Bridge cannot load this file" in f.message and "model.pipeline_model_parallel_layout=" in f.fix
    # the layout the run used, given beside the file: taken, as real Bridge takes it
    assert not _errors(api.resolve({"model.pipeline_model_parallel_layout": LAYOUT}, config=str(_lost(tmp_path)), gpu="h100"))


def test_the_same_mapping_given_as_an_override_is_no_file_s_loss(tmp_path):
    given = {"_call_": True, "_target_": "megatron.core.transformer.pipeline_parallel_layer_layout.PipelineParallelLayerLayout"}
    errors = _errors(api.resolve({"model.pipeline_model_parallel_layout": given}, config=str(RUNS / "baseline.yaml"), gpu="h100"))
    assert "RUN_CONFIG_LAYOUT_LOST" not in errors


def test_diff_says_how_to_give_before_its_layout_and_then_costs_it(tmp_path):
    lost = _lost(tmp_path)
    d = api.diff(str(lost), str(RUNS / "baseline.yaml"), gpu="h100").to_dict()
    (said,) = [w for w in d["warnings"] if "RUN_CONFIG_LAYOUT_LOST" in w]
    assert "--before model.pipeline_model_parallel_layout=" in said and "PIPELINE_LAYOUT_REJECTED" not in said
    given = api.diff(str(lost), str(RUNS / "baseline.yaml"), gpu="h100",
                     before_overrides={"model.pipeline_model_parallel_layout": LAYOUT}).to_dict()
    assert not [w for w in given["warnings"] if "fails at" in w]
    assert "iteration_ms_before" in given["budget"], given["budget"]
