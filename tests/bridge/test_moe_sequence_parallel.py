"""MOE_TP_WITHOUT_SEQUENCE_PARALLEL against the installed Megatron-Core, on the CPU (evalP P2): MoELayer.forward raises
in training whenever its attention TP group has more than one rank and sequence parallel is off, whatever EP is,
before any communication; the finding says so for exactly the states the layer refuses."""

from __future__ import annotations

import types
import warnings

import pytest

from mbridge_overlap import api, findings

torch = pytest.importorskip("torch")


def _forward(training: bool, tp: int, sequence_parallel: bool):
    """The real MoELayer.forward on a layer state of this shape: the error it raises first, or None when it passes
    the check (and fails later for the want of a real layer: any other exception)."""
    from megatron.core.transformer.moe.moe_layer import MoELayer

    layer = types.SimpleNamespace(training=training, attn_tp_group=types.SimpleNamespace(size=lambda: tp),
                                  config=types.SimpleNamespace(sequence_parallel=sequence_parallel))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            MoELayer.forward(layer, torch.zeros(4, 1, 8))
        except ValueError as exc:
            if "sequence parallelism" in str(exc):
                return str(exc)
        except Exception:  # noqa: BLE001 - past the check: the stand-in layer has nothing else
            return None
    return None


@pytest.mark.parametrize("tp, sequence_parallel", [(1, False), (2, False), (2, True), (4, False)])
def test_the_finding_holds_where_the_moe_layer_refuses_to_train(tp, sequence_parallel):
    refused = _forward(True, tp, sequence_parallel)
    overrides = {"model.tensor_model_parallel_size": tp, "model.num_moe_experts": 8,
                 "model.sequence_parallel": sequence_parallel}
    found = [f for f in api.resolve(overrides, gpus=8).findings if f.id == "MOE_TP_WITHOUT_SEQUENCE_PARALLEL"]
    assert bool(found) is (refused is not None)
    if refused:
        assert found[0].severity == "error" and found[0].when == "step"
        # the text the layer raises is one the finding's record reads in a log
        assert any(text in refused for text in findings.record("MOE_TP_WITHOUT_SEQUENCE_PARALLEL")["logged"])


def test_the_layer_does_not_refuse_outside_training():
    assert _forward(False, 2, False) is None


def test_the_providers_spared_are_gemma4_s_moe_model():
    """recheck51 T3: the provider classes a run config names that the finding spares are the installed Bridge's Gemma 4
    MoE model (its layer is Gemma4MoELayer, whose forward_with_separate_inputs skips MoELayer.forward's check)."""
    import importlib

    from mbridge_overlap.findings.rules import run

    gemma4 = importlib.import_module("megatron.bridge.models.gemma.gemma4_provider")
    modeling = importlib.import_module("megatron.bridge.models.gemma.modeling_gemma4")
    assert hasattr(modeling.Gemma4MoELayer, "forward_with_separate_inputs")
    for name in run.PROVIDER_FAMILY:
        module = "gemma_vl.gemma4_vl_provider" if "VL" in name else "gemma.gemma4_provider"
        cls = getattr(importlib.import_module(f"megatron.bridge.models.{module}"), name)
        assert issubclass(cls, gemma4.Gemma4ModelProvider) and cls().num_moe_experts
