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
