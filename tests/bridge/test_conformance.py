"""The resolver agrees with real Megatron-Bridge on every field of 2,000 generated requests, in one process."""

from mbridge_overlap.run import resolver
from mbridge_overlap.bridge import conformance


def test_two_thousand_generated_configs_agree_on_every_field():
    report = conformance.run(2000, seed=0)
    assert report["cases"] == 2000
    assert report["failures"] == [], report["failures"][:3]


def test_the_generated_set_covers_the_non_obvious_paths():
    cases = conformance.generate(2000, seed=0)

    def count(pred):
        return sum(1 for c in cases if pred(c.overrides, c))

    assert count(lambda o, c: not any(k.startswith("comm_overlap") for k in o)) > 200  # no comm_overlap at all
    assert count(lambda o, c: not c.te) > 100
    assert count(lambda o, c: o.get("ddp.use_distributed_optimizer") is False) > 100
    def dp_one(o, c):
        return c.gpus == o["model.tensor_model_parallel_size"] * o["model.pipeline_model_parallel_size"] * o.get("model.context_parallel_size", 1)

    assert count(dp_one) > 200  # DP=1
    assert count(lambda o, c: o["model.pipeline_model_parallel_size"] > 1 and o.get("model.virtual_pipeline_model_parallel_size") in (None, 1)) > 100
    assert count(lambda o, c: o["model.tensor_model_parallel_size"] == 1 and o.get("model.sequence_parallel")) > 50
    assert count(lambda o, c: o.get("mixed_precision") not in (None, "bf16_mixed") and "mixed_precision" in o) > 200
    assert count(lambda o, c: any(k.startswith("ddp.") and k != "ddp.use_distributed_optimizer" for k in o)) > 300


def test_expert_layouts_agree_on_every_field():
    """EP, expert TP (set, unset, = TP), biases and dispatchers: where each release puts an unset expert TP size."""
    report = conformance.run(300, seed=0, moe=True)
    assert report["cases"] == 300
    assert report["failures"] == [], report["failures"][:3]


def test_the_expert_set_has_biases_at_an_expert_tp_size_above_one():
    cases = conformance.generate(300, seed=0, moe=True)
    biased = [c.overrides for c in cases if c.overrides.get("model.add_bias_linear", True)]
    assert sum(1 for o in biased if o.get("model.expert_tensor_parallel_size", 0) > 1) > 20
    assert sum(1 for o in biased if "model.expert_tensor_parallel_size" not in o and o["model.tensor_model_parallel_size"] > 1) > 20


def test_a_wrong_rule_is_caught(monkeypatch):
    monkeypatch.setattr(resolver, "DP_BUCKET_SIZE", 64 * 1024 * 1024)
    report = conformance.run(300, seed=1)
    assert report["failures"], "a resolver with Bridge's bucket size wrong must disagree somewhere"
    assert any(d[0] == "ddp.bucket_size" for f in report["failures"] for d in f["differences"])
