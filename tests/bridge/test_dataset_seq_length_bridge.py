"""The dataset's sequence-length word against the installed Bridge's own command line (Hydra through
omegaconf_utils, as Bridge's scripts apply overrides) and validate(): the fix the skill writes for
SEQ_LENGTH_DATASET_MISMATCH is taken and clears the error; the other word is refused by the skill exactly where Hydra
refuses it. tests/bridge/test_second_release.py runs the same test on a second release (0.5.x: a property there)."""

from mbridge_overlap import UsageError, api
from mbridge_overlap.bridge import adapter
from mbridge_overlap.upstream.releases import dataset_seq_length_key

WORDS = ("dataset.seq_length", "dataset.sequence_length")


def _bridge(words=(), text: str | None = None, model=None) -> tuple[bool, str | None]:
    """Bridge's own way with a config (process_config_with_overrides' order): the baseline ConfigContainer (its model
    `model` where given, else the adapter's stand-in), a YAML config file's text merged onto its dict (OmegaConf.merge),
    then the command-line words through Hydra, applied with apply_overrides: (Hydra took the words,
    runtime_config_update's error or None)."""
    from omegaconf import OmegaConf
    from megatron.bridge.training.utils.omegaconf_utils import (
        apply_overrides, create_omegaconf_dict_config, parse_hydra_overrides)

    cfg = adapter.baseline_config()
    cfg.model = model if model is not None else cfg.model
    cfg.train.global_batch_size = cfg.train.micro_batch_size * 8
    omega, excluded = create_omegaconf_dict_config(cfg)
    if text is not None:
        omega = OmegaConf.merge(omega, OmegaConf.create(text))
    try:
        omega = parse_hydra_overrides(omega, list(words))
    except Exception:
        return False, None
    apply_overrides(cfg, OmegaConf.to_container(omega, resolve=True), excluded)
    return True, adapter.runtime_config_update(cfg, 8, True)[0]


def _bridge_takes(words: list) -> tuple[bool, str | None]:
    """(Bridge's command line takes the words, then runtime_config_update's error or None)."""
    return _bridge(words)

def _mismatch(overrides: dict, version: str):
    return [f for f in api.resolve(overrides, gpus=8, bridge_version=version).findings
            if f.id == "SEQ_LENGTH_DATASET_MISMATCH"]


def test_the_sequence_length_fix_is_one_this_release_s_command_line_takes():
    version = adapter.bridge_version()
    (f,) = _mismatch({"model.seq_length": 8192}, version)
    (word,) = f.fix_overrides
    assert _bridge_takes(["model.seq_length=8192"])[1], "Bridge took a model.seq_length alone"
    assert _bridge_takes(["model.seq_length=8192", f"{word}=8192"]) == (True, None)
    (other,) = set(WORDS) - {word}
    taken, error = _bridge_takes(["model.seq_length=8192", f"{other}=8192"])
    try:
        ours = _mismatch({"model.seq_length": 8192, other: 8192}, version)
    except UsageError:
        assert not taken, f"{other}: Bridge {version} takes it, the skill refuses it"
        return
    assert taken, f"{other}: Bridge {version} refuses it, the skill takes it"
    assert bool(ours) == bool(error), (other, ours, error)


def _bridge_file(text: str, model=None) -> str | None:
    """Bridge's way with a YAML config file: the runtime_config_update error, or None. model: the config's model
    provider (default: the adapter's stand-in)."""
    return _bridge((), text, model)[1]

def test_a_config_file_s_sequence_length_words_agree_with_bridge(tmp_path):
    """recheck65 AL1/AL2: a config file's dataset.sequence_length was dropped. Each word in a config file beside
    model.seq_length: the mismatch the skill reports is the one this release's validate() raises (0.5.x: both words
    set the one length; 0.6.x: sequence_length alone leaves seq_length's 4096, which validate() compares)."""
    version = adapter.bridge_version()
    for word in ("seq_length", "sequence_length"):
        text = f"model:\n  seq_length: 8192\ndataset:\n  {word}: 8192\n"
        (tmp_path / "run.yaml").write_text(text)
        ours = [f for f in api.resolve(config=str(tmp_path / "run.yaml"), gpus=8, bridge_version=version).findings
                if f.id == "SEQ_LENGTH_DATASET_MISMATCH"]
        error = _bridge_file(text)
        assert bool(ours) == bool(error and "sequence length configuration" in error), (word, ours, error)


def test_a_config_s_provider_class_default_seq_length_is_the_one_bridge_validates(tmp_path):
    """stop 56 left: without a recipe the skill left model.seq_length unknown, so a config file that names its model's
    class and sets only the dataset's length was not checked. Every provider class of the installed Bridge: the skill
    takes its dataclass default of seq_length (model_providers.json seq_length); and GPTModelProvider built with no
    seq_length, the dataset's length set by a YAML file merged the way Bridge merges one: the mismatch the skill
    reports is the one validate() raises, with the same two lengths."""
    import dataclasses

    from megatron.bridge.models import GPTModelProvider

    from mbridge_overlap.bridge import providers
    from mbridge_overlap.upstream import releases

    version = adapter.bridge_version()
    classes = [GPTModelProvider, *providers.every_class()]
    for cls in classes:
        field = next((f for f in dataclasses.fields(cls) if f.name == "seq_length"), None)
        taken = releases.provider_seq_length(version, f"{cls.__module__}.{cls.__qualname__}")
        assert taken == (None if field is None else (cls.__name__, field.default)), (cls, taken)
    model = GPTModelProvider(**{k: v for k, v in adapter.MODEL_KWARGS.items() if k != "seq_length"})
    assert model.seq_length == 1024
    word = releases.dataset_seq_length_key(version).partition(".")[2]
    for length in (2048, 1024):
        text = f"dataset:\n  {word}: {length}\n"
        (tmp_path / "run.yaml").write_text(f"model:\n  _target_: {GPTModelProvider.__module__}.GPTModelProvider\n{text}")
        ours = [f for f in api.resolve(config=str(tmp_path / "run.yaml"), gpus=8, bridge_version=version).findings
                if f.id == "SEQ_LENGTH_DATASET_MISMATCH"]
        error = _bridge_file(text, model)
        assert bool(ours) == bool(error and "sequence length configuration" in error), (length, ours, error)
        if error:
            said = "Sequence length in model config: 1024, Sequence length in dataset config: 2048"
            assert said in error and said in ours[0].message, (error, ours[0].message)


def test_a_dataset_length_set_to_null_is_refused_as_bridge_refuses_it(tmp_path):
    """fuzzY Y2-4: the installed Bridge takes `<word>=null` (and a config file's null) and validate() then raises its
    mismatch assert; the skill reports that mismatch."""
    version = adapter.bridge_version()
    (f,) = _mismatch({"model.seq_length": 8192}, version)
    (word,) = f.fix_overrides
    for null in ("null", "NULL"):  # (Hydra's null in any case)
        taken, error = _bridge_takes(["model.seq_length=4096", f"{word}={null}"])
        assert taken and error and "sequence length configuration" in error, (null, error)
        assert _mismatch({"model.seq_length": 4096, word: null}, version), null
    text = f"model:\n  seq_length: 4096\ndataset:\n  {word.partition('.')[2]}: null\n"
    (tmp_path / "run.yaml").write_text(text)
    error = _bridge_file(text)
    ours = [f for f in api.resolve(config=str(tmp_path / "run.yaml"), gpus=8, bridge_version=version).findings
            if f.id == "SEQ_LENGTH_DATASET_MISMATCH"]
    assert bool(ours) == bool(error and "sequence length configuration" in error), (ours, error)


def test_a_model_length_set_to_null_is_refused_as_bridge_refuses_it(tmp_path):
    """recheck66 AM-4: the installed Bridge takes model.seq_length=null (and a config file's null, over a
    GPTModelProvider of 4096) and validate() then raises its mismatch assert with None; the skill reports that mismatch
    with the same words, and its fix (the model's set to the dataset's) is one Bridge takes and clears."""
    from megatron.bridge.models import GPTModelProvider

    from mbridge_overlap.upstream.releases import dataset_seq_length_key

    version = adapter.bridge_version()
    taken, error = _bridge_takes(["model.seq_length=null"])
    assert taken and error and "Sequence length in model config: None" in error, error
    (f,) = _mismatch({"model.seq_length": "null"}, version)
    said = error[error.index("Sequence length in model config"):].strip()
    assert said in f.message.replace("\\n", "\n"), (said, f.message)
    fix = [f"{k}={v}" for k, v in f.fix_overrides.items()]
    assert _bridge_takes(["model.seq_length=null", *fix]) == (True, None), fix
    word = dataset_seq_length_key(version).partition(".")[2]
    model = GPTModelProvider(**{**adapter.MODEL_KWARGS, "seq_length": 4096})
    for text in ("model:\n  seq_length: null\n", "model:\n  seq_length: ~\n"):
        full = f"{text}dataset:\n  {word}: 4096\n"
        error = _bridge_file(full, model)
        (tmp_path / "run.yaml").write_text(f"model:\n  _target_: {GPTModelProvider.__module__}.GPTModelProvider\n"
                                           + full.partition("\n")[2])
        ours = [f for f in api.resolve(config=str(tmp_path / "run.yaml"), gpus=8, bridge_version=version).findings
                if f.id == "SEQ_LENGTH_DATASET_MISMATCH"]
        assert error and "Sequence length in model config: None" in error, error
        assert ours and "model config: None" in ours[0].message, (text, ours)


def _bridge_file_words(text: str, words: list, model) -> tuple[bool, str | None]:
    """A config file merged as Bridge merges one, then command-line words: (Hydra took the words, runtime_config_update's
    error or None)."""
    return _bridge(words, text, model)

def test_a_file_s_seq_length_with_each_word_agrees_with_bridge(tmp_path):
    """evalAE AE2-1: a config file that sets dataset.seq_length (0.5.x: the property, written after sequence_length),
    alone or with sequence_length beside it, then each word on the command line: the skill's mismatch and its refusals
    agree with the installed Bridge, and the skill's fix is taken and clears the error."""
    from megatron.bridge.models.gpt_provider import GPTModelProvider

    def model():
        return GPTModelProvider(**{k: v for k, v in adapter.MODEL_KWARGS.items() if k != "seq_length"})

    version = adapter.bridge_version()
    head = f"model:\n  _target_: {GPTModelProvider.__module__}.GPTModelProvider\n"
    for extra in ("", "  sequence_length: 1024\n"):
        text = "dataset:\n  seq_length: 8192\n" + extra
        (tmp_path / "run.yaml").write_text(head + text)
        (f,) = [x for x in api.resolve(config=str(tmp_path / "run.yaml"), gpus=8, bridge_version=version).findings
                if x.id == "SEQ_LENGTH_DATASET_MISMATCH"]
        assert _bridge_file_words(text, [], model())[1], "Bridge validated the mismatch"
        (word, value), = f.fix_overrides.items()
        assert _bridge_file_words(text, [f"{word}={value}"], model()) == (True, None), f.fix_overrides
        for other in WORDS:
            taken, error = _bridge_file_words(text, [f"{other}=1024"], model())
            try:
                ours = [x for x in api.resolve({other: 1024}, config=str(tmp_path / "run.yaml"), gpus=8,
                                               bridge_version=version).findings if x.id == "SEQ_LENGTH_DATASET_MISMATCH"]
            except UsageError:
                assert not taken, f"{other}: Bridge {version} takes it, the skill refuses it"
                continue
            assert taken, f"{other}: Bridge {version} refuses it, the skill takes it"
            assert bool(ours) == bool(error and "sequence length configuration" in error), (extra, other, ours, error)


def _bridge_process(path: str, words: list) -> tuple[bool, str | None, int | None]:
    """Bridge's own way with a config file and command-line words, process_config_with_overrides over
    _pretrain_common() (its scripts' order: the file merged, then Hydra's words in struct mode), then
    runtime_config_update: (Hydra took the words, the error or None, the model's seq_length)."""
    from megatron.bridge.recipes.common import _pretrain_common
    from megatron.bridge.training.config import TokenizerConfig
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    try:
        cfg = process_config_with_overrides(_pretrain_common(), config_filepath=path, cli_overrides=words)
    except Exception as exc:
        assert "Could not override" in str(exc), exc
        return False, None, None
    cfg.tokenizer = TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=32000)
    cfg.train.global_batch_size = cfg.train.micro_batch_size * 8
    return True, adapter.runtime_config_update(cfg, 16, True)[0], cfg.model.seq_length


def test_the_fix_moves_the_side_the_user_did_not_set_as_bridge_takes_it(tmp_path):
    """evalAE AE2-2: a config file naming GPTModelProvider (no seq_length) that sets only the dataset's 8192: the fix
    is the model's length set to 8192 in the word Bridge's command line takes (++model.seq_length; the bare word is
    refused: the file's model dict holds only its own keys), and the run then validates at 8192."""
    import shlex

    version = adapter.bridge_version()
    word = dataset_seq_length_key(version).partition(".")[2]
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  num_layers: 32\n"
                    "  hidden_size: 4096\n  num_attention_heads: 32\n  tensor_model_parallel_size: 2\n"
                    f"  sequence_parallel: true\ndataset:\n  {word}: 8192\n")
    taken, error, _ = _bridge_process(str(path), [])
    assert taken and "Sequence length in model config: 1024, Sequence length in dataset config: 8192" in error, error
    (f,) = [x for x in api.resolve(config=str(path), gpus=16, gpu="h100", bridge_version=version).findings
            if x.id == "SEQ_LENGTH_DATASET_MISMATCH"]
    words = shlex.split(f.fix.split(" (")[0])
    assert words == ["++model.seq_length=8192"], f.fix
    assert _bridge_process(str(path), words) == (True, None, 8192)
    assert _bridge_process(str(path), ["model.seq_length=8192"])[0] is False  # (the bare word: Could not override)


def test_a_file_without_a_dataset_section_keeps_the_base_s_dataset_as_bridge_does(tmp_path):
    """recheck67 AN-1: a config file naming GPTModelProvider (seq_length 1024) with no dataset section keeps
    _pretrain_common()'s GPTDatasetConfig (seq_length=4096, recipes/common.py) under Bridge's
    process_config_with_overrides; the skill dropped that dataset, so neither the file alone (1024 against 4096) nor a
    command-line dataset length (1024 against 8192) was compared. Each case: the skill's mismatch is the one the
    installed Bridge's validate() raises, with the same two lengths; the finding's fix words, and the words of
    resolve's "every fix at once" (all_fixes.fix, evalAF AF-6), are taken by Bridge and the run validates at the
    length they set; the bare model word is refused."""
    import shlex

    from mbridge_overlap.output import text as render

    version = adapter.bridge_version()
    word = dataset_seq_length_key(version)
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  num_layers: 32\n"
                    "  hidden_size: 4096\n  num_attention_heads: 32\n  tensor_model_parallel_size: 2\n"
                    "  sequence_parallel: true\n")
    for words, data, want in (([], 4096, 4096), ([f"{word}=8192"], 8192, 8192), ([f"{word}=1024"], 1024, None)):
        taken, error, _ = _bridge_process(str(path), words)
        assert taken, words
        r = api.resolve(dict(w.split("=", 1) for w in words), config=str(path), gpus=16, gpu="h100",
                        bridge_version=version)
        ours = [x for x in r.findings if x.id == "SEQ_LENGTH_DATASET_MISMATCH"]
        if want is None:
            assert error is None and not ours, (words, error, ours)
            continue
        said = f"Sequence length in model config: 1024, Sequence length in dataset config: {data}"
        assert said in error and ours and said in ours[0].message.replace("\\n", "\n"), (words, error, ours)
        fix = shlex.split(ours[0].fix.split(" (")[0])
        assert fix == [f"++model.seq_length={want}"], ours[0].fix
        assert _bridge_process(str(path), words + fix) == (True, None, want), fix
        assert _bridge_process(str(path), words + [f"model.seq_length={want}"])[0] is False  # (Could not override)
        every = r.to_dict()["all_fixes"]
        line = next(li for li in render.resolution(r.to_dict()).splitlines() if li.startswith("every fix at once: "))
        assert line == f"every fix at once: {every['fix']}" and f"++model.seq_length={want}" in shlex.split(every["fix"])
        assert _bridge_process(str(path), words + shlex.split(every["fix"]))[:2] == (True, None), every["fix"]
