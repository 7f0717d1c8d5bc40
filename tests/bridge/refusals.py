"""One comparison the tier-2 refusal tests share: Hydra words through Bridge's runtime_config_update against the
skill's resolve, for one finding that mirrors a Megatron-Core assert."""

from mbridge_overlap import api
from test_dataset_seq_length_bridge import _bridge


def refused_alike(words: list, finding: str, text: str, version: str) -> bool:
    """Whether Megatron-Core refuses the words with `text` in its error; asserts the skill refuses them exactly then,
    with the same words, and that each fix it offers is taken."""
    taken, error = _bridge(words)
    assert taken, words
    real = bool(error and text in error)
    ours = [f for f in api.resolve(dict(w.split("=", 1) for w in words), gpus=8, bridge_version=version).findings
            if f.id == finding and text in f.message]
    assert bool(ours) == real, (words, ours, error)
    for f in ours:
        assert f"AssertionError: {f.message.partition(': ')[2]}" == error
        fixed = words + [f"{k}={str(v).lower()}" for k, v in f.fix_overrides.items()]
        assert _bridge(fixed) == (True, None), fixed
    return real
