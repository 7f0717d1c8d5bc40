"""model.pipeline_model_parallel_layout's command-line word as Bridge reads it (recheck61 AH1, fuzzV V2-3 to V2-6): the
value Bridge's parse_hydra_overrides (Hydra's parser) and OmegaConf hand the config, or its refusal, is the value the
skill's request holds (the one reading resolve, lint, budget, diff and plan share), or the skill's refusal; and
TransformerConfig's verdict on that value is the skill's."""

from __future__ import annotations

import pytest

from mbridge_overlap import UsageError, api
from mbridge_overlap.cli.options import override_of

KEY = "model.pipeline_model_parallel_layout"
WORDS = ['"Et|(tt|)*2L"', "'Et|ttL'", "Et|(tt|)*2L", "Et|ttL", "Et*2|tL", "'Et*3|(tt|)*29,m|L'", "Et*3|(tt|)*29,m|L",
         "[[embedding,decoder],[decoder,loss]]", "[['embedding','decoder'],['decoder','loss']]",
         "[[embedding, decoder], [decoder, loss]]", "[[embedding,decoder],[decoder,LOSS ]]", "[[[decoder]]]", "[a,b]",
         "[[embedding,decoder],[decoder,loss]", "none", "None", "null", "'   '", "7", "true", "Et*00030|t*31L",
         "'E|t|t|L'", "''"]


def _bridge(word: str):
    """(value, None) as Bridge's Hydra and OmegaConf hand it to the config, or (None, the refusal)."""
    from megatron.bridge.training.utils.omegaconf_utils import parse_hydra_overrides
    from omegaconf import OmegaConf

    try:
        cfg = parse_hydra_overrides(OmegaConf.create({"model": {"pipeline_model_parallel_layout": None}}), [word])
    except Exception as exc:  # noqa: BLE001 - Hydra's refusal
        return None, str(exc)
    return OmegaConf.to_container(cfg, resolve=True)["model"]["pipeline_model_parallel_layout"], None


def _megatron(value, num_layers: int, pp: int) -> bool:
    """Whether TransformerConfig takes the layout (None: no layout)."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    try:
        TransformerConfig(num_layers=num_layers, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=pp,
                          pipeline_model_parallel_layout=value, pipeline_dtype=torch.bfloat16)
    except (AssertionError, AttributeError, IndexError, ValueError, NotImplementedError):
        return False
    return True


@pytest.mark.parametrize("word", WORDS)
def test_the_skill_reads_the_layout_word_as_bridge_does(word):
    theirs, refused = _bridge(f"{KEY}={word}")
    over = {"model.num_layers": 3, "model.pipeline_model_parallel_size": 2}
    try:
        key, value = override_of(f"{KEY}={word}")  # the command line's own path, then the request's
        r = api.resolve({**over, key: value}, gpus=16)
    except UsageError:  # where Hydra refuses it, or where Bridge takes a blank text TransformerConfig then refuses
        assert refused is not None or (not theirs.strip() and not _megatron(theirs, 3, 2)), (word, theirs)
        return
    assert refused is None, f"took {word!r}, which Bridge refuses: {refused}"
    ours = r.state.request.context[KEY]
    assert ours == theirs and type(ours) is type(theirs), (ours, theirs)
    rejected = any(x.id == "PIPELINE_LAYOUT_REJECTED" for x in r.state.rejections)
    assert rejected != _megatron(theirs, 3, 2), (word, [x.message for x in r.state.rejections])


@pytest.mark.parametrize("word", ["'Et|(tt|)*2L'", "[[embedding,decoder],[decoder,loss]]", "Et|tL", "none"])
def test_plan_reads_the_layout_word_as_resolve_does(word):
    """plan types its given words with hydra.value_of (verbs/plan._hydra_value); the request now does the same, so a
    quoted or nested-list layout is the same value in both, and plan's hydra snippet hands Bridge that value."""
    from mbridge_overlap.output import snippets
    from mbridge_overlap.verbs import plan as plan_verb

    theirs, _ = _bridge(f"{KEY}={word}")
    over = {"model.num_layers": 3}
    assert plan_verb._hydra_value(KEY, word) == theirs
    assert api.resolve({**over, KEY: word}, gpus=8).state.request.context[KEY] == theirs
    p = api.plan(tp=2, pp=2, gpus=8, overrides={**over, KEY: word})
    words = [w for w in snippets.hydra_overrides(p.to_dict()["overrides"]) if w.startswith(f"{KEY}=")]
    assert len(words) == 1 and _bridge(words[0])[0] == theirs, words
