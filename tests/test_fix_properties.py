"""Findings an agent can apply blindly (issue 9, items 2 and 3), proven by re-resolution.

Over 2,000 generated configs (conformance's generator, seed 0) and every built recipe of the catalog (and lint of every
perf recipe): applying a finding's `fix_overrides` removes it (same id, same knobs) and raises no warning or error
(id and knobs) that was not there; no two findings of one config set a key to different values; every finding's
`asserts` hold in `effective`; the fix text names every key its overrides set. No exception is allowed: every fix
that cannot be proven is left out of `fix_overrides` by the check itself (its text says what to do).
tools/check_fixes.py runs the same properties over any number of configs (--count 20000) and prints the counts.

Then the registry's hygiene: every id is raised by an example and not by a counter-example (the table below), every
anchor exists, no id is dead, every template field is supplied (rendering each id through its example).
"""

from __future__ import annotations

import re

import pytest

from conftest import ROOT
from mbridge_overlap.upstream import anchors
from mbridge_overlap import api, findings
from tools import examples
from mbridge_overlap.run import schema
from mbridge_overlap.findings.analysis import analyze

from tools import check_fixes  # noqa: E402

GENERATED = 2000  # the issue's count for CI; the conformance run takes --count 20000
# The findings the issue names: the properties must have exercised a fix of each.
ISSUE_IDS = {"DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER", "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE", "DP_OVERLAP_KNOB_OVERWRITTEN",
             "BUCKET_SIZE_LOOKS_LIKE_BYTES"}


@pytest.fixture(scope="module")
def generated():
    return check_fixes.check_generated(GENERATED, seed=0)


@pytest.fixture(scope="module")
def recipes(tmp_path_factory):
    return check_fixes.check_catalog(check_fixes.Tally(), check_fixes.Tally(), tmp_path_factory.mktemp("lint"))


def _proven_and_clean(tally, configs):
    assert tally.configs == configs
    for kind in ("failing", "conflicts", "contradictions", "untold"):
        items = getattr(tally, kind)
        assert not items, f"{len(items)} {kind}, e.g. {items[:3]}"


def test_fixes_on_generated_configs(generated):
    _proven_and_clean(generated, GENERATED)
    assert ISSUE_IDS <= set(generated.by_id), "the generated configs no longer exercise the fixes the issue names"
    assert generated.asserts_checked > GENERATED


def test_fixes_on_every_built_recipe(recipes):
    tally, _ = recipes
    _proven_and_clean(tally, len(check_fixes.built_recipes()))
    assert tally.tried and tally.asserts_checked


@pytest.fixture(scope="module")
def grid():
    return check_fixes.check_grid()


def test_advice_holds_on_the_whole_answer_over_layouts_gpus_machines_and_launchers(grid):
    """Issue 30: every fix a plan or a resolve prints (fix_overrides, the settings its text recommends, a plan's
    launch environment rows), applied to the same scenario with the same machine facts and launcher environment,
    removes what it fixes and brings no error or warning of the whole analysis: zero fail."""
    resolved, plans = grid
    cases = len(check_fixes.grid())
    _proven_and_clean(plans, cases)
    _proven_and_clean(resolved, cases)
    assert plans.tried > cases and resolved.tried > cases


def test_the_three_harmful_answers_of_issue_30_now_hold():
    tp16 = api.plan(tp=16, gpus=128, gpu="h100")
    assert "MODE_LEFT_OFF" not in {f.id for f in tp16.analysis.findings}  # TP overlap cannot run across NVLink domains here
    assert any(n.id == "PLAN_LEAVES_KEY_AS_SHIPPED" and "UB_TP_ACROSS_NVLINK_DOMAINS" in n.message for n in tp16.notes)
    wins = api.resolve({"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1, "comm_overlap.tp_comm_overlap": False}, gpus=8,
                       launcher_env={"CUDA_DEVICE_MAX_CONNECTIONS": "32"})
    f = _one(wins, "LAUNCHER_ENV_WINS")
    assert f.fix_overrides == {"env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 32} and "=1" not in f.fix
    batched = api.resolve({"model.pipeline_model_parallel_size": 2, "comm_overlap.tp_comm_overlap": False,  # (a layer count
                           "comm_overlap.batch_p2p_comm": True, "model.num_layers": 32}, gpus=8)  # proves a VPP: AB7)
    f = _one(batched, "PP_OVERLAP_NOT_SELECTED")
    assert f.fix_overrides.get("model.virtual_pipeline_model_parallel_size") == 2 and "comm_overlap.batch_p2p_comm" in f.fix_overrides
    after = _applied(batched, f)
    assert not after.errors and after.effective["model"]["overlap_p2p_comm"]


def test_fixes_of_lint_on_every_perf_recipe(recipes):
    _, lint = recipes
    _proven_and_clean(lint, sum(e["package"] == "perf_recipes" for e in check_fixes.built_recipes()))
    assert "MODE_LEFT_OFF" in lint.by_id  # lint's own findings are among those proven


# --- the four problems the issue lists ----------------------------------------------------------------------------


def _resolve(overrides, gpus=8, **kw):
    return api.resolve(overrides, gpus=gpus, **kw)


def _one(res, fid, knob=None):
    found = [f for f in res.findings if f.id == fid and (knob is None or knob in f.knobs)]
    assert len(found) == 1, [(f.id, f.knobs) for f in res.findings]
    return found[0]


def _applied(res, f):
    return analyze(res.scenario.derive(f.fix_overrides, f.remove_keys))


def test_distributed_optimizer_fix_turns_both_flags_on_and_keeps_the_ddp_values():
    """It suggested ddp.use_distributed_optimizer=true alone, which brought DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE and
    DP_OVERLAP_KNOB_OVERWRITTEN."""
    res = _resolve({"ddp.use_distributed_optimizer": False, "optimizer.use_distributed_optimizer": False,
                    "ddp.overlap_grad_reduce": False, "comm_overlap.tp_comm_overlap": False, "comm_overlap.bucket_size": 50_000_000})
    after = _applied(res, _one(res, "DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER"))
    assert {f.id for f in after.findings}.isdisjoint({"DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER", "DISTRIBUTED_OPTIMIZER_FLAGS_DISAGREE",
                                                      "DP_OVERLAP_KNOB_OVERWRITTEN"})
    ddp = after.effective["ddp"]
    assert ddp["use_distributed_optimizer"] and ddp["bucket_size"] == 50_000_000
    assert ddp["overlap_grad_reduce"] is False  # the user's own value, now on comm_overlap where it wins


def test_align_param_gather_is_not_said_to_be_selected_when_the_user_turned_it_off():
    layout = {"model.pipeline_model_parallel_size": 2, "model.virtual_pipeline_model_parallel_size": 2, "comm_overlap.tp_comm_overlap": False}
    selected = _resolve(layout)
    assert _one(selected, "BRIDGE_SELECTS_ALIGN_PARAM_GATHER") and selected.effective["ddp"]["align_param_gather"] is True
    off = _resolve({**layout, "comm_overlap.align_param_gather": False})
    assert "BRIDGE_SELECTS_ALIGN_PARAM_GATHER" not in {f.id for f in off.findings}
    assert off.effective["ddp"]["align_param_gather"] is False


@pytest.mark.parametrize("requested", [None, True])
def test_dp_size_one_says_what_dp_overlap_is_left(requested):
    overrides = {"comm_overlap.tp_comm_overlap": False}
    if requested is not None:
        overrides["comm_overlap.overlap_grad_reduce"] = requested
    res = _resolve(overrides, gpus=1)
    f = _one(res, "DP_SIZE_ONE")
    on = res.effective["ddp"]["overlap_grad_reduce"]
    assert on is bool(requested)
    assert ("turns DP overlap off" in f.message) is not on and ("stays on" in f.message) is on


@pytest.mark.parametrize("grad_fp32", [True, False])
def test_a_bucket_size_meant_as_512_mib_becomes_its_parameter_count_in_every_fix(grad_fp32):
    res = _resolve({"ddp.bucket_size": 512 * 2**20, "ddp.grad_reduce_in_fp32": grad_fp32, "mixed_precision.grad_reduce_in_fp32": grad_fp32,
                    "comm_overlap.tp_comm_overlap": False})
    per = 4 if grad_fp32 else 2
    bucket = _one(res, "BUCKET_SIZE_LOOKS_LIKE_BYTES")
    overwritten = _one(res, "DP_OVERLAP_KNOB_OVERWRITTEN", "ddp.bucket_size")
    if grad_fp32:  # 512 MiB of fp32 gradients: 134217728 parameters, which reads as nothing else
        assert bucket.fix_overrides["comm_overlap.bucket_size"] == 512 * 2**20 // per
        for f in (bucket, overwritten):
            after = _applied(res, f)
            assert after.effective["ddp"]["bucket_size"] * per == 512 * 2**20
            assert {"BUCKET_SIZE_LOOKS_LIKE_BYTES", "DP_OVERLAP_KNOB_OVERWRITTEN"}.isdisjoint({g.id for g in after.findings})
    else:  # 268435456 parameters is a whole number of MiB again: no blind fix carries the number over
        assert bucket.fix_overrides == {} and "512 MiB of gradients" in bucket.fix
        assert overwritten.fix_overrides.get("comm_overlap.bucket_size") is None


def test_a_bucket_size_of_25_mib_gets_one_fix_from_both_findings():
    res = _resolve({"ddp.bucket_size": 25 * 2**20, "comm_overlap.tp_comm_overlap": False})
    bucket, overwritten = _one(res, "BUCKET_SIZE_LOOKS_LIKE_BYTES"), _one(res, "DP_OVERLAP_KNOB_OVERWRITTEN", "ddp.bucket_size")
    shared = set(bucket.fix_overrides) & set(overwritten.fix_overrides)
    assert shared and all(bucket.fix_overrides[k] == overwritten.fix_overrides[k] for k in shared)
    for f in (bucket, overwritten):
        assert {"BUCKET_SIZE_LOOKS_LIKE_BYTES", "DP_OVERLAP_KNOB_OVERWRITTEN"}.isdisjoint({g.id for g in _applied(res, f).findings})


def test_requests_that_contradict_each_other_get_one_fix_and_the_other_waits():
    """The safety net: where two findings' fixes would set one key differently, the more severe one's stands and the
    other waits for it. No generated config reaches it since DP_OVERLAP_NEEDS_DISTRIBUTED_OPTIMIZER is raised only
    for requests the run does not get, so it is exercised on two findings made for it."""
    from mbridge_overlap.findings.rules import one_value_per_key
    from mbridge_overlap.findings import Finding

    warn = Finding("PARAM_GATHER_FORCED_ON", "warning", "m", "f", fix_overrides={"optimizer.overlap_param_gather": True})
    err = Finding("NUM_BUCKETS_WITH_BUCKET_SIZE", "error", "m", "f", fix_overrides={"optimizer.overlap_param_gather": False})
    same = Finding("DP_SIZE_ONE", "info", "m", "f", fix_overrides={"optimizer.overlap_param_gather": False})
    out = one_value_per_key([warn, err, same])
    assert out[1].fix_overrides == {"optimizer.overlap_param_gather": False} and out[2].fix_overrides == out[1].fix_overrides
    assert out[0].fix_overrides == {} and out[0].fix.startswith("after the fix of NUM_BUCKETS_WITH_BUCKET_SIZE")


# --- the registry: every id has an example and a counter-example (in its record) ------------------------------------


def test_every_id_has_an_example_and_a_counter_example():
    missing = [fid for fid, rec in findings.records().items() if not (rec.get("example") and rec.get("counter_example"))]
    assert not missing


_UNFILLED = re.compile(r"\{[A-Za-z_]\w*\}")


@pytest.mark.parametrize("finding_id", sorted(findings.records()))
def test_example_raises_it_rendered_and_counter_example_does_not(finding_id):
    example, counter = examples.of(finding_id)
    found = [f for f in examples.run(example) if f.id == finding_id]
    assert found, f"{finding_id} not raised by its example"
    for f in found:  # every template field supplied by the call site
        assert not _UNFILLED.search(f.message) and not _UNFILLED.search(f.fix), (f.message, f.fix)
    assert finding_id not in {f.id for f in examples.run(counter)}


def test_every_anchor_exists():
    ids = set(anchors.specs())
    missing = {fid: rec["anchor"] for fid, rec in findings.records().items() if rec.get("anchor") and rec["anchor"] not in ids}
    assert not missing


def test_no_id_is_dead():
    """Each id appears, quoted, in the code that raises findings (checks, the resolver's rejections, lint, plan,
    diff, resolution), or is one diagnose raises from the messages its record's `logged` names (which
    tests/test_diagnose.py holds to the catalogs)."""
    code = "\n".join(p.read_text() for p in (ROOT / "mbridge_overlap").rglob("*.py"))
    dead = [fid for fid, rec in findings.records().items() if f'"{fid}"' not in code and not rec.get("logged")]
    assert not dead


def test_every_assert_names_an_effective_field():
    fields = {f"{s}.{n}" for s, names in schema.EFFECTIVE_FIELDS.items() for n in names}
    fields |= {f"{s}.{n}" for s, section in schema.SECTIONS.items() for n in section}
    bad = {fid: k for fid, rec in findings.records().items() for k in (rec.get("asserts") or {})
           if k not in fields and not k.startswith("env_vars.")}
    assert not bad


def test_fixes_of_lint_on_generated_configs(tmp_path):
    """lint's own findings (MODE_LEFT_OFF above all) on run configs written from generated requests: every fix proven
    by linting the fixed config again; the one-value-per-key rule holds over lint's and the resolver's findings."""
    tally = check_fixes.check_generated_lint(400, 0, tmp_path)
    assert tally.configs > 250
    _proven_and_clean(tally, tally.configs)
    assert tally.by_id["MODE_LEFT_OFF"] > 20


def _section_word(text: str) -> dict:
    """The ++comm_overlap={...} word of a fix text, read back as the command line reads it (its other words too)."""
    import shlex

    from mbridge_overlap.cli.options import overrides_of

    words = [w for w in shlex.split(text.replace(";", " "))
             if "=" in w and "." in w.partition("=")[0] or w.startswith("++comm_overlap=")]
    return overrides_of(words)


def test_a_fix_that_creates_the_comm_overlap_section_is_written_as_hydra_creates_it():
    """recheck54 Y5: half the catalog's recipes have no comm_overlap section, and their comm_overlap fixes were
    written comm_overlap.KEY=V, which Bridge's Hydra overrides refuse on a None section (tests/bridge holds that). On a
    sample of them, every fix and the all-fixes line name no comm_overlap.KEY=V word, and their words read back give
    the answer their fix_overrides give."""
    from mbridge_overlap.output import text
    from mbridge_overlap.upstream import catalog

    names = [r["name"] for r in catalog.entries("0.6.2") if r.get("builds") and r["request"].get("comm_overlap") is None]
    seen = 0
    for name in names[::40]:
        r = api.resolve(recipe=name)
        assert r.to_dict()["requested"]["comm_overlap"] is None
        line = next((li for li in text.resolution(r.to_dict()).splitlines() if li.startswith("every fix at once: ")), "")
        every = (line.partition(": ")[2], (r.all_fixes() or {}).get("overrides", {}))
        for fix, overrides in [(f.fix, f.fix_overrides) for f in r.findings] + [every]:
            if not any(k.startswith("comm_overlap.") for k in overrides):
                continue
            seen += 1
            assert not re.search(r"(?<![+\w])comm_overlap\.\w+=", fix), (name, fix)
            assert re.search(r"'\+\+comm_overlap=\{[^']*tp_comm_overlap:", fix), (name, fix)  # (AC1: no default)
            read = _section_word(fix)
            assert set(read) == {"comm_overlap"} | {k for k in overrides if not k.startswith("comm_overlap.")}, (name, fix)
            assert api.resolve(read, recipe=name).effective == api.resolve(overrides, recipe=name).effective, (name, fix)
    assert seen >= 10


def test_a_list_valued_fix_is_offered_and_its_words_read_back():
    """evalV Z2: dropping 'moe' from recompute_modules fixes MOE_OVERLAP_REJECTED with the overlap kept, but a list was
    no value the fix wrote ("set model.recompute_modules by hand"); it is written [a,b], one quoted shell word."""
    import shlex

    from mbridge_overlap.cli.options import overrides_of

    name = "nemotron_3_nano_pretrain_16gpu_h100_bf16_config"
    over = {"comm_overlap.overlap_moe_expert_parallel_comm": True, "comm_overlap.delay_wgrad_compute": True}
    f = _one(api.resolve(over, recipe=name), "MOE_OVERLAP_REJECTED")
    modules = f.fix_overrides.get("model.recompute_modules")
    assert isinstance(modules, list) and "moe" not in modules
    read = overrides_of([w for w in shlex.split(f.fix) if "=" in w])
    after = api.resolve({**over, **read}, recipe=name)
    assert not after.errors and after.effective["model"]["overlap_moe_expert_parallel_comm"] is True
