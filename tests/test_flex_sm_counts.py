"""FX-1: Megatron-Core 0.19's TransformerConfig.__post_init__ (0.19.2 transformer_config.py:1616-1635) refuses the
deprecated moe_deepep_num_sms and moe_hybridep_num_sms set to different counts while moe_flex_dispatcher_num_sms is
None. A run config Bridge 0.5.x saved (Megatron-Core 0.18: moe_deepep_num_sms defaults to 20, DeepSeek-V3's recipe sets
moe_hybridep_num_sms=16, and there is no flex count) holds exactly that, and was taken under 0.6.2.
tests/bridge/test_flex_sm_counts_bridge.py holds the rule to the installed Megatron-Core."""

import pytest

from mbridge_overlap import UsageError, api
from conftest import ROOT

RUNS = ROOT / "tests" / "data" / "run_configs"
MESSAGE = ("Conflicting deprecated SM-count knobs {'moe_deepep_num_sms': 20, 'moe_hybridep_num_sms': 16}; "
           "set a single moe_flex_dispatcher_num_sms instead.")  # Megatron-Core's f-string, filled in by hand


def _saved_by_0_5(tmp_path):
    """The saved baseline as Bridge 0.5.x writes its SM counts: 0.18's DeepEP default beside a recipe's HybridEP count,
    no flex count."""
    text = (RUNS / "baseline.yaml").read_text()
    for old, new in (("  moe_deepep_num_sms: null\n", "  moe_deepep_num_sms: 20\n"),
                     ("  moe_hybridep_num_sms: null\n", "  moe_hybridep_num_sms: 16\n"),
                     ("  moe_flex_dispatcher_num_sms: null\n", "")):
        assert text.count(old) == 1
        text = text.replace(old, new)
    path = tmp_path / "run_config.yaml"
    path.write_text(text)
    return str(path)


def _conflict(res):
    return [f for f in res.findings if f.id == "FLEX_SM_COUNTS_CONFLICT"]


def test_a_run_config_saved_by_0_5_is_refused_under_0_6_with_megatron_core_s_words(tmp_path):
    (f,) = _conflict(api.resolve(config=_saved_by_0_5(tmp_path), gpu="h100"))
    assert f.severity == "error" and MESSAGE in f.message
    assert f.fix_overrides == {"model.moe_hybridep_num_sms": None}  # the deepep backend's count kept
    assert not _conflict(api.resolve(f.fix_overrides, config=_saved_by_0_5(tmp_path), gpu="h100"))


@pytest.mark.parametrize("version", ["0.6.0", "0.6.2"])
@pytest.mark.parametrize(("counts", "raised"), [
    ({"model.moe_deepep_num_sms": 20, "model.moe_hybridep_num_sms": 16}, True),
    ({"model.moe_deepep_num_sms": "20", "model.moe_hybridep_num_sms": "16"}, True),  # the command line's text
    ({"model.moe_deepep_num_sms": 16, "model.moe_hybridep_num_sms": 16}, False),  # alike: routed
    ({"model.moe_deepep_num_sms": 20}, False),  # one: routed
    ({"model.moe_deepep_num_sms": 20, "model.moe_hybridep_num_sms": "null"}, False),
    ({"model.moe_deepep_num_sms": 20, "model.moe_hybridep_num_sms": 16, "model.moe_flex_dispatcher_num_sms": 24}, False),
    ({"model.moe_deepep_num_sms": 20, "model.moe_hybridep_num_sms": 16, "model.moe_flex_dispatcher_num_sms": "null"}, True),
])
def test_raised_exactly_where_megatron_core_0_19_raises(version, counts, raised):
    assert bool(_conflict(api.resolve(counts, gpus=8, bridge_version=version))) == raised


def test_megatron_core_0_18_has_no_such_check():
    """Bridge 0.5.x: each backend reads its own count (0.18 has no moe_flex_dispatcher_num_sms)."""
    counts = {"model.moe_deepep_num_sms": 20, "model.moe_hybridep_num_sms": 16}
    for version in ("0.5.0", "0.5.1"):
        assert not _conflict(api.resolve(counts, gpus=8, bridge_version=version))


def test_the_hybridep_backend_keeps_hybridep_s_count():
    counts = {"model.moe_deepep_num_sms": 20, "model.moe_hybridep_num_sms": 16, "model.moe_flex_dispatcher_backend": "hybridep"}
    (f,) = _conflict(api.resolve(counts, gpus=8))
    assert f.fix_overrides == {"model.moe_deepep_num_sms": None}
    assert "hybridep backend's 16 SMs" in f.fix


def test_a_recipe_s_own_counts_are_unknown_so_not_judged():
    """The recipe catalog does not record the SM counts: moonlight_16b's 16-GPU H100 recipe sets
    moe_flex_dispatcher_num_sms=32, which takes precedence (real Megatron-Core takes two different deprecated counts
    beside it), so the two given beside a recipe are not judged; all three given are."""
    recipe = "recipes.moonlight_16b_pretrain_16gpu_h100_bf16_config"
    two = {"model.moe_deepep_num_sms": 20, "model.moe_hybridep_num_sms": 16}
    assert not _conflict(api.resolve(two, recipe=recipe, gpu="h100"))
    assert _conflict(api.resolve({**two, "model.moe_flex_dispatcher_num_sms": "null"}, recipe=recipe, gpu="h100"))


def test_a_count_that_is_no_number_is_one_line():
    with pytest.raises(UsageError, match="moe_deepep_num_sms"):
        api.resolve({"model.moe_deepep_num_sms": "many", "model.moe_hybridep_num_sms": 16}, gpus=8)
