"""FX-1 against the installed Bridge and Megatron-Core: the flex dispatcher's SM counts, given on Bridge's own command
line (Hydra) or in a config file, raise in runtime_config_update (the model's finalize: TransformerConfig.__post_init__)
exactly where the skill says FLEX_SM_COUNTS_CONFLICT, with the same words; the skill's fix is taken and clears it.
Megatron-Core 0.19 (Bridge 0.6) has the check, 0.18 (Bridge 0.5) has neither it nor the flex count:
tests/bridge/test_second_release.py runs these on a second release."""

import itertools

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter
from mbridge_overlap.upstream.releases import bridge_fields
from test_dataset_seq_length_bridge import _bridge

FLEX = "moe_flex_dispatcher_num_sms"
COUNTS = (None, 16, 20)


def _cases(version: str):
    """Every combination of the two deprecated counts (unset, 16, 20), and of the flex count where the release has it."""
    names = ["moe_deepep_num_sms", "moe_hybridep_num_sms"] + ([FLEX] if FLEX in bridge_fields(version)["model"] else [])
    for values in itertools.product(COUNTS, repeat=len(names)):
        yield {f"model.{n}": v for n, v in zip(names, values) if v is not None}


def _words(counts: dict) -> list:
    return [f"{k}={'null' if v is None else v}" for k, v in counts.items()]


def _ours(version: str, counts: dict, **inputs) -> list:
    return [f for f in api.resolve(counts, gpus=8, bridge_version=version, **inputs).findings
            if f.id == "FLEX_SM_COUNTS_CONFLICT"]


def test_the_skill_raises_exactly_where_megatron_core_raises():
    version = adapter.bridge_version()
    refusals = 0
    for counts in _cases(version):
        taken, error = _bridge(_words(counts))
        assert taken, counts
        ours = _ours(version, counts)
        refused = bool(error and "Conflicting deprecated SM-count knobs" in error)
        refusals += refused
        assert bool(ours) == refused, (counts, ours, error)
        if ours:
            (f,) = ours
            assert f.message.partition(": ")[2] in error, (f.message, error)
    # 16 against 20 with no flex count, either way round: refused where the release has the flex count
    assert refusals == (2 if FLEX in bridge_fields(version)["model"] else 0)


def test_a_config_file_s_counts_agree_and_the_fix_is_taken(tmp_path):
    """As a run config Bridge 0.5.x saved for DeepSeek-V3 holds them: 0.18's DeepEP default 20, the recipe's HybridEP 16."""
    version = adapter.bridge_version()
    text = "model:\n  moe_deepep_num_sms: 20\n  moe_hybridep_num_sms: 16\n"
    (tmp_path / "run.yaml").write_text(text)
    ours = [f for f in api.resolve(config=str(tmp_path / "run.yaml"), gpus=8, bridge_version=version).findings
            if f.id == "FLEX_SM_COUNTS_CONFLICT"]
    error = _bridge((), text)[1]
    assert bool(ours) == bool(error and "Conflicting deprecated SM-count knobs" in error), (ours, error)
    if ours:
        (f,) = ours
        assert f.message.partition(": ")[2] in error
        assert _bridge(_words(f.fix_overrides), text) == (True, None)


def test_a_saved_run_config_with_0_5_s_counts_is_refused_by_both_and_the_fix_is_taken(tmp_path):
    """The saved baseline (a 0.6.2 dump) with the counts Bridge 0.5.1's to_yaml writes for a recipe that sets
    moe_hybridep_num_sms=16 (0.18.2's moe_deepep_num_sms default 20, no flex count): ConfigContainer.from_yaml, then
    runtime_config_update, as a run started from the file; the fix's words through Hydra onto the loaded config."""
    from omegaconf import OmegaConf
    from megatron.bridge.training.config import ConfigContainer
    from megatron.bridge.training.utils.omegaconf_utils import (
        apply_overrides, create_omegaconf_dict_config, parse_hydra_overrides)
    from test_flex_sm_counts import _saved_by_0_5

    version = adapter.bridge_version()
    if FLEX not in bridge_fields(version)["model"]:
        return  # the file is 0.6's (env_vars, the flex count): 0.5's from_yaml refuses it before any count is read
    path = _saved_by_0_5(tmp_path)
    (f,) = [f for f in api.resolve(config=path, gpu="h100", bridge_version=version).findings if f.id == "FLEX_SM_COUNTS_CONFLICT"]
    gpus = 64  # the saved baseline's comm_overlap.data_parallel_size 4 x TP 4 x PP 4
    assert f.message.partition(": ")[2] in adapter.runtime_config_update(ConfigContainer.from_yaml(path), gpus, True)[0]
    cfg = ConfigContainer.from_yaml(path)
    omega, excluded = create_omegaconf_dict_config(cfg)
    apply_overrides(cfg, OmegaConf.to_container(parse_hydra_overrides(omega, _words(f.fix_overrides)), resolve=True), excluded)
    assert adapter.runtime_config_update(cfg, gpus, True)[0] is None
