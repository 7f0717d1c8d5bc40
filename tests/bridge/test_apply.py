"""Every snippet form applied to a real Bridge ConfigContainer the way a user would, then runtime_config_update()."""

import pytest

from mbridge_overlap.bridge import apply

LAYOUTS = [
    dict(tp=4, pp=4, vpp=2, gpus=64),
    dict(tp=4, pp=4, vpp=2, gpus=64, hidden_size=12288, seq_length=2048, micro_batch_size=1),
    dict(tp=2, gpus=16, gpu="gb200", precision="fp8", hidden_size=8192, seq_length=8192, micro_batch_size=1),
    dict(tp=8, cp=2, gpus=16, precision="fp8_mx", hidden_size=16384, seq_length=8192, micro_batch_size=1),
    dict(tp=1, pp=2, gpus=2),
    dict(tp=4, gpus=4, te=False),
    dict(tp=2, pp=2, vpp=1, gpus=8, recipe="llama3_70b"),
    dict(tp=2, ep=8, gpus=64, model="qwen3_30b_a3b", moe_a2a_overlap=True),  # the dispatcher the plan sets (N7); 0.5.x: expert TP 1
    # a flex dispatcher's check reads the device: as on a node of the GPU type asked for (fuzzP P1: a false FAIL)
    dict(ep=8, gpus=8, gpu="gb200", model="qwen3_30b_a3b", moe=True, moe_a2a_overlap=True, moe_flex_dispatcher_backend="hybridep"),
    dict(ep=8, gpus=8, gpu="h100", model="qwen3_30b_a3b", moe=True, moe_flex_dispatcher_backend="deepep"),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: "-".join(f"{k}{v}" for k, v in lay.items()))
def test_every_form_over_both_bases_matches_the_prediction(layout):
    results = apply.verify_plan(layout)
    assert len(results) == 8  # python, yaml, hydra twice (two bases), env_vars, env
    for r in results:
        assert r.ok, (r.form, r.differences, r.error)


@pytest.mark.parametrize(
    "form, old, new",
    [
        ("python", "cfg.comm_overlap.tp_comm_overlap = True", "cfg.comm_overlap.tp_comm_overlap = False"),
        ("yaml", "sequence_parallel: true", "sequence_parallel: false"),
        ("hydra", "model.virtual_pipeline_model_parallel_size=2\n", ""),
        ("env_vars", '= 1  #', '= 8  #'),
        ("env", "CUDA_DEVICE_MAX_CONNECTIONS=1", "CUDA_DEVICE_MAX_CONNECTIONS=32"),
    ],
)
def test_a_tampered_snippet_fails(form, old, new):
    def tamper(f, text):
        if f != form:
            return text
        assert old in text
        return text.replace(old, new, 1)

    results = [r for r in apply.verify_plan(dict(tp=4, pp=4, vpp=2, gpus=64), forms=[form], tamper=tamper)]
    assert results and not any(r.ok for r in results)
    assert all(r.differences or r.error for r in results)


def test_a_snippet_bridge_cannot_apply_is_a_failure():
    results = apply.verify_plan(dict(tp=2, gpus=8), forms=["hydra"], tamper=lambda f, t: t + "comm_overlap.no_such_knob=1\n")
    assert not any(r.ok for r in results) and all("could not apply" in r.error for r in results)
