"""The configs the fixes make, against real Megatron-Bridge: tests/test_fix_properties.py proves each fix by
re-resolving it with the resolver; here every fixed request of the 2,000 generated configs goes through Bridge's
own runtime_config_update() too, and must agree with the resolver on every effective field and every rejection (so a
fix never leads the resolver, and an agent, somewhere Bridge does not go)."""

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter, conformance
from mbridge_overlap.errors import UsageError

COUNT = 2000


def fixed_cases(count: int) -> list:
    out = []
    for case in conformance.generate(count, seed=0):
        try:
            res = api.resolve(case.overrides, gpus=case.gpus, te=case.te)
        except UsageError:
            continue
        for f in res.findings:
            if f.fix_overrides and not f.remove_keys:
                out.append(conformance.Case({**case.overrides, **f.fix_overrides}, case.gpus, case.te))
    return out


def test_every_fixed_request_resolves_as_bridge_does():
    cases = fixed_cases(COUNT)
    version = adapter.bridge_version()
    failures = [o for o in (conformance.check(c, version) for c in cases) if o.differences]
    assert len(cases) > COUNT / 2
    assert failures == [], [(o.case.overrides, o.case.gpus, o.differences) for o in failures[:3]]


def test_ep_overlap_without_vpp_is_fixed_with_a_vpp_that_keeps_it_on():
    """evalI D6: Bridge asks for a virtual pipeline size where EP overlap runs with PP > 1; the fix turned the overlap
    off. Giving VPP 2 keeps it on, here as in real Bridge (the first case is refused by both, the fixed one by neither)."""
    over = {"model.pipeline_model_parallel_size": 2, "model.num_layers": 8, "model.expert_model_parallel_size": 2,
            "model.num_moe_experts": 8, "model.moe_token_dispatcher_type": "alltoall",
            "comm_overlap.overlap_moe_expert_parallel_comm": True, "comm_overlap.delay_wgrad_compute": True}
    version = adapter.bridge_version()
    assert not conformance.check(conformance.Case(over, 8, True), version).differences  # both refuse, with one message
    (f,) = [f for f in api.resolve(over, gpus=8).findings if f.id == "MOE_OVERLAP_REJECTED"]
    assert f.fix_overrides == {"model.virtual_pipeline_model_parallel_size": 2}
    fixed = conformance.Case({**over, **f.fix_overrides}, 8, True)
    assert not conformance.check(fixed, version).differences
    assert api.resolve(fixed.overrides, gpus=8).effective["model"]["overlap_moe_expert_parallel_comm"] is True


def test_embedding_wgrad_deferral_is_kept_by_its_fixes():
    """evalT U3: the fixes turned deferral off (and all_fixes kept a limit beside it); the deferral asked for, moved
    to comm_overlap with a limit Megatron-Core takes, runs in real Bridge with deferral on."""
    version = adapter.bridge_version()
    for over in ({"model.pipeline_model_parallel_size": 2, "model.defer_embedding_wgrad_compute": True,
                  "model.wgrad_deferral_limit": 10},
                 {"model.pipeline_model_parallel_size": 2, "comm_overlap.defer_embedding_wgrad_compute": True}):
        res = api.resolve(over, gpus=8)
        fix = res.all_fixes()["overrides"]
        assert fix.get("comm_overlap.defer_embedding_wgrad_compute") is True, fix
        fixed = conformance.Case({**over, **fix}, 8, True)
        assert not conformance.check(fixed, version).differences
        assert api.resolve(fixed.overrides, gpus=8).effective["model"]["defer_embedding_wgrad_compute"] is True


def test_cuda_graph_delay_wgrad_is_fixed_with_gradient_accumulation_fusion():
    """evalU V2: "CUDA graph with delay_wgrad_compute requires gradient_accumulation_fusion" was fixed by turning the
    MoE overlap and delay_wgrad_compute off; gradient_accumulation_fusion=true alone keeps them, here as in Bridge."""
    over = {"model.num_moe_experts": 8, "model.expert_model_parallel_size": 2, "model.moe_token_dispatcher_type": "alltoall",
            "comm_overlap.tp_comm_overlap": False, "comm_overlap.overlap_moe_expert_parallel_comm": True,
            "comm_overlap.delay_wgrad_compute": True, "model.cuda_graph_impl": "transformer_engine",
            "model.cuda_graph_scope": ["attn"], "model.gradient_accumulation_fusion": False,
            "model.add_bias_linear": False, "model.add_qkv_bias": False}  # (no attention bias, as Qwen3's)
    version = adapter.bridge_version()
    assert not conformance.check(conformance.Case(over, 8, True), version).differences  # both refuse, with one message
    (f,) = [f for f in api.resolve(over, gpus=8).findings if f.id == "MOE_OVERLAP_REJECTED"]
    assert f.fix_overrides == {"model.gradient_accumulation_fusion": True}
    fixed = conformance.Case({**over, **f.fix_overrides}, 8, True)
    assert not conformance.check(fixed, version).differences
    assert api.resolve(fixed.overrides, gpus=8).effective["model"]["overlap_moe_expert_parallel_comm"] is True
