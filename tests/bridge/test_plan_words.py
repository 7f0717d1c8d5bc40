"""plan's own KEY=VALUE words reach Bridge as the user's word does (fuzzT T3-1..T3-5, recheck58 AE4-AE6): the word
the user typed and the word each snippet writes, both through Bridge's parse_hydra_overrides (Hydra's parser) and
OmegaConf's resolve (Bridge's to_container(resolve=True)), or the YAML snippet through OmegaConf.load, give Bridge
the same value; a word Bridge refuses is refused by plan."""

from __future__ import annotations

import math

import pytest

from mbridge_overlap import UsageError, api
from mbridge_overlap.output import snippets

KEYS = {"env_vars.FOO": ["true", "'true'", "'null'", "'a,b'", "a\\,b", "\"it's\"", "'x\\'y'", "\\${x}", "'\\${x}'",
                         "1_000", "010", "inf", "a\\ b"],
        "logger.wandb_exp_name": ["'true'", "'null'", "'False'", "a\\ b", "'10'", "\\${x}"],
        "checkpoint.save": ["a\\ b", "'x\\'y'", "a\\,b", "'~'", "'null'", "'true'", "/ckpt/run-1", "'\\${x}'", "[a,b]",
                            "1_000", "true"],
        "model.recompute_modules": ["[core_attn,mlp]", "\\${x}", "[a\\ b,c]", "['x,y']", "mlp", "[1,mlp]"],
        "optimizer.clip_grad": ["inf", "-inf", "1.5", "1e3"]}
WORDS = [(key, word) for key, words in KEYS.items() for word in words]


def _bridge(word: str):
    """What Bridge's Hydra and OmegaConf hand the config for one word; None where either refuses it."""
    from megatron.bridge.training.utils.omegaconf_utils import parse_hydra_overrides
    from omegaconf import OmegaConf

    base = {"env_vars": {"A": 1}, "logger": {"wandb_exp_name": None}, "checkpoint": {"save": None},
            "model": {"recompute_modules": None}, "optimizer": {"clip_grad": 1.0}}
    key = word.lstrip("+").partition("=")[0]
    try:
        out = OmegaConf.to_container(parse_hydra_overrides(OmegaConf.create(base), [word]), resolve=True)
    except Exception:  # noqa: BLE001 - Hydra's or OmegaConf's refusal, whichever
        return None
    section, _, name = key.partition(".")
    return out[section][name]


def _holds(key: str, value) -> bool:
    """Whether Bridge's field can hold what Hydra hands it: a path is text, recompute_modules a list of names, a
    launch variable a scalar (Bridge's export raises TypeError otherwise), clip_grad a number."""
    if key == "checkpoint.save":
        return isinstance(value, str)
    if key == "model.recompute_modules":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if key == "optimizer.clip_grad":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, (str, int, float, bool))


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("key, word", WORDS)
def test_each_snippet_hands_bridge_what_the_user_s_word_does(key, word):
    from omegaconf import OmegaConf

    prefix = "++" if key.startswith("env_vars.") else ""
    theirs = _bridge(f"{prefix}{key}={word}")
    try:
        plan = api.plan(tp=2, gpus=8, overrides={key: word})
    except UsageError:
        assert theirs is None or not _holds(key, theirs), (word, theirs)
        return
    assert theirs is not None, f"plan took {word!r}, which Bridge refuses"
    hydra = [w for w in snippets.hydra_overrides(plan.to_dict()["overrides"]) if w.lstrip("+").startswith(f"{key}=")]
    if key.startswith("env_vars."):  # (os.environ holds str() of it)
        assert len(hydra) == 1 and str(_bridge(hydra[0])) == str(theirs), (hydra, theirs)
    else:
        assert len(hydra) == 1 and _same(_bridge(hydra[0]), theirs), (hydra, theirs)
    yaml_text = snippets.yaml_snippet(plan.to_dict()["overrides"], "t", "0.6.2")
    section, _, name = key.partition(".")
    loaded = OmegaConf.to_container(OmegaConf.create(yaml_text), resolve=True)[section][name]
    if key.startswith("env_vars."):
        assert str(loaded) == str(theirs)
    else:
        assert _same(loaded, theirs), (loaded, theirs)
