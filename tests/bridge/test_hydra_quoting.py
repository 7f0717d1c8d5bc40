"""A string value as our fixes and restores write it for Hydra (safeio.hydra_quote, override_arg) is the same string
to Hydra's own override parser (fuzzO F2: backslashes doubled; true, 8 or null left bare and retyped), and our
command-line reading of a quoted value (grammar.env_value) is Hydra's."""

from __future__ import annotations

import pytest

from mbridge_overlap import safeio
from mbridge_overlap.run import hydra as grammar

TEXTS = ["1e1_0", "01.5", "Ring\\Tree", "a\\", "a\\\\", "it's", "\\'", "x\\\\'y", "true", "False", "123", "1.5", "-3", "1e5", ".5",
         "1_000", "null", "NULL", "inf", "nan", "plain", "a b", "expandable_segments:True", "{x}", "$HOME"]


@pytest.mark.parametrize("text", TEXTS)
def test_hydra_reads_our_quoting_as_the_text(text):
    hydra = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    parsed = hydra.OverridesParser.create().parse_override(f"k={safeio.hydra_quote(text)}").value()
    assert parsed == text


@pytest.mark.parametrize("text", TEXTS)
def test_we_read_a_quoted_launch_variable_as_hydra_does(text):
    hydra = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    word = safeio.hydra_quote(text)
    if not word.startswith("'"):
        return  # bare: typed alike (numbers, bools and null are quoted)
    assert grammar.env_value("env_vars.X", word) == hydra.OverridesParser.create().parse_override(f"k={word}").value()


@pytest.mark.parametrize("name", ["A", "NEW"])
def test_a_launch_variable_fix_applies_through_bridge_s_hydra_overrides(name):
    """recheck52 W3: Bridge applies Hydra overrides in struct mode (parse_hydra_overrides): env_vars.NAME=V was
    refused for a name the config lacks; the fix's ++env_vars.NAME=V adds it, and overrides one it has."""
    import shlex

    from omegaconf import OmegaConf
    from megatron.bridge.training.utils.omegaconf_utils import parse_hydra_overrides

    from mbridge_overlap import findings

    word = shlex.split(findings.overrides_text({f"env_vars.{name}": "it's"}))[0]
    cfg = parse_hydra_overrides(OmegaConf.create({"env_vars": {"A": 1}}), [word])
    assert cfg.env_vars[name] == "it's"


@pytest.mark.parametrize("text", ["8", "010", "00", "1_000", "-3", "+4", "1.5", "1e5", ".5", "5.", "1_0.5", "abc",
                                  "expandable_segments:True", "0x10", "1e", "Ring",
                                  # recheck52 W5 (rest): nan and inf are Hydra's floats; escapes are undone
                                  "nan", "NaN", "-inf", "Inf", "nan_x", "a\\ b", "a\\,b", "a\\=b", "a\\\\b", "a\\b",
                                  "/usr/lib:/x", "a%b*c@d?e|f", "$HOME",
                                  # recheck53 X6: leading zeros and an exponent's underscores as Hydra reads them
                                  "01.5", "00.5", "1e1_0", "0e5", "01e5", "1_0e2", "+.5e-3",
                                  # fuzzQ Q1, Q3: escapes before the end, a backslash that escapes nothing
                                  "Ring\\ ", "\\ \\ a", "a\\\\\\ b", "a\\x\\ "])
def test_we_type_a_command_line_launch_variable_as_hydra_does(text):
    """recheck52 W5: 010 was read as 10 (Hydra: text), 1_000 as text (Hydra: 1000)."""
    hydra = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    theirs = hydra.OverridesParser.create().parse_override(f"k={text}").value()
    ours = grammar.env_value("env_vars.X", text)
    if isinstance(theirs, float) and theirs != theirs or theirs in (float("inf"), float("-inf")):
        assert ours == str(theirs)  # what Bridge exports: str() of Hydra's float
    else:
        assert (type(ours), ours) == (type(theirs), theirs)


@pytest.mark.parametrize("text", ["~", "a=b", "\u00e9", "a'b", 'a"b', "a#b", "a;b", "a(b)", "a[0]", "${",
                                  "'a\\'", '"""', '"*"&"'])  # (fuzzQ Q6: quotes inside quotes)
def test_a_launch_variable_hydra_s_lexer_refuses_is_refused(text):
    """recheck52 W5 (rest): ~ and a=b were taken as text; Hydra (and so Bridge's parse_hydra_overrides) refuses them."""
    from hydra.errors import HydraException

    from mbridge_overlap import UsageError

    hydra = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    with pytest.raises(HydraException):
        hydra.OverridesParser.create().parse_override(f"k={text}")
    with pytest.raises(UsageError, match="Hydra"):
        grammar.env_value("env_vars.X", text)


@pytest.mark.parametrize("text", ["[1,2]", "{a:1}", "a,b"])
def test_a_list_mapping_or_sweep_launch_variable_is_refused(text):
    from mbridge_overlap import UsageError

    with pytest.raises(UsageError, match="list, a mapping or a sweep"):
        grammar.env_value("env_vars.X", text)


def test_every_fix_at_once_applies_through_bridge_s_hydra_overrides():
    """fuzzP P3: resolve's "every fix at once" line wrote env_vars.NAME=V, which struct mode refuses for a name the
    config lacks (the recipe sets only NCCL_GRAPH_REGISTER); each word of the printed line is taken, to its value."""
    import shlex

    from omegaconf import OmegaConf
    from megatron.bridge.training.utils.omegaconf_utils import parse_hydra_overrides

    from mbridge_overlap import api
    from mbridge_overlap.output import text

    r = api.resolve(recipe="llama3_70b_pretrain_config", gpus=64)
    want = r.all_fixes()["overrides"]
    line = next(li for li in text.resolution(r.to_dict()).splitlines() if li.startswith("every fix at once: "))
    words = shlex.split(line.partition(": ")[2])
    assert len(words) == len(want) and any(k.startswith("env_vars.") for k in want)
    cfg = parse_hydra_overrides(OmegaConf.create({"env_vars": {"NCCL_GRAPH_REGISTER": "0"}}), words)
    for key, value in want.items():
        assert str(OmegaConf.select(cfg, key)) == str(value), key


def test_a_field_of_a_missing_comm_overlap_section_is_refused_by_bridge_s_hydra_overrides():
    """evalT U5: comm_overlap.NAME=V on a recipe without the section was answered silently as the section made; Bridge's
    Hydra overrides refuse it as written, which the answer's note now says."""
    import tempfile
    from pathlib import Path

    from megatron.bridge.training.utils.omegaconf_utils import create_omegaconf_dict_config, parse_hydra_overrides

    from mbridge_overlap import api
    from mbridge_overlap.bridge import recipes
    from mbridge_overlap.upstream import catalog

    name = "gpt_oss_120b_pretrain_64gpu_b300_bf16_config"
    over = {"comm_overlap.tp_comm_overlap": True}
    assert any("has no comm_overlap section" in n for n in api.resolve(over, recipe=name).scenario.notes)
    cfg = recipes.rebuild(catalog.lookup(name, "0.6.2"), Path(tempfile.mkdtemp()))
    assert cfg.comm_overlap is None
    omega, _ = create_omegaconf_dict_config(cfg)
    with pytest.raises(Exception, match="comm_overlap"):
        parse_hydra_overrides(omega, ["comm_overlap.tp_comm_overlap=true"])


def test_a_fix_that_creates_the_comm_overlap_section_applies_through_bridge_s_hydra_overrides():
    """recheck54 Y5: on a recipe without a comm_overlap section the fix of COMM_OVERLAP_ABSENT and the all-fixes line
    were written comm_overlap.KEY=V, which Bridge refuses (the test above); written as ++comm_overlap={...}, each word
    of the printed line is taken by Bridge's own overrides and instantiates a CommOverlapConfig with the field set,
    and a second such word merges into the section the first made."""
    import shlex
    import tempfile
    from pathlib import Path

    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.utils.omegaconf_utils import (apply_overrides, create_omegaconf_dict_config,
                                                                 parse_hydra_overrides)
    from omegaconf import OmegaConf

    from mbridge_overlap import api
    from mbridge_overlap.bridge import recipes
    from mbridge_overlap.output import text
    from mbridge_overlap.upstream import catalog

    name = "gpt_oss_120b_pretrain_64gpu_b300_bf16_config"
    r = api.resolve(recipe=name)
    fix = next(f for f in r.findings if f.id == "COMM_OVERLAP_ABSENT")
    line = next(li for li in text.resolution(r.to_dict()).splitlines() if li.startswith("every fix at once: "))
    cfg = recipes.rebuild(catalog.lookup(name, "0.6.2"), Path(tempfile.mkdtemp()))
    assert cfg.comm_overlap is None
    for words in (shlex.split(fix.fix), shlex.split(line.partition(": ")[2])):
        omega, excluded = create_omegaconf_dict_config(cfg)
        omega = parse_hydra_overrides(omega, words)
        assert OmegaConf.select(omega, "comm_overlap.tp_comm_overlap") is False, words
    omega, excluded = create_omegaconf_dict_config(cfg)
    omega = parse_hydra_overrides(omega, shlex.split(fix.fix) + ["++comm_overlap={overlap_p2p_comm:true}"])
    assert OmegaConf.select(omega, "comm_overlap.tp_comm_overlap") is False
    assert OmegaConf.select(omega, "comm_overlap.overlap_p2p_comm") is True
    apply_overrides(cfg, OmegaConf.to_container(omega, resolve=True), excluded)
    assert isinstance(cfg.comm_overlap, CommOverlapConfig) and cfg.comm_overlap.tp_comm_overlap is False
    assert cfg.comm_overlap.overlap_p2p_comm is True


@pytest.mark.parametrize("text", ["1e3", "1.0e+3", "1_000", "2024-01-01", "1:30", ".5", "+.inf", ".nan", "010", "0x10",
                                  "true", "on", "null", "~", "'1e3'", "12:30:45", "1e-4", "-2E5"])
def test_a_config_file_is_typed_as_omegaconf_types_it(text):
    """recheck53 X7: a config's env_vars was typed as PyYAML's 1.1 loader types it (1e3 text, a date refused), where
    Bridge reads configs with OmegaConf's loader (1e3 the float 1000.0, a date its text)."""
    import math

    from omegaconf import OmegaConf

    theirs = OmegaConf.to_container(OmegaConf.create(f"k: {text}\n"))["k"]
    ours = safeio.parse_yaml(f"k: {text}\n", "test", omegaconf=True)["k"]
    same = (isinstance(theirs, float) and math.isnan(theirs) and math.isnan(ours)) or (type(ours), ours) == (type(theirs), theirs)
    assert same, (ours, theirs)


@pytest.mark.parametrize("text", ["${x}", "a${b}c", "cost $5"])
def test_a_literal_interpolation_text_goes_through_bridge_as_text(text):
    """recheck54 Y3: a restore of text holding ${ was single-quoted, and OmegaConf interpolated it again; written \\${
    it is the literal text, and our reading of it (grammar.env_value) is Bridge's."""
    from omegaconf import OmegaConf
    from megatron.bridge.training.utils.omegaconf_utils import parse_hydra_overrides

    word = safeio.hydra_quote(text)
    cfg = parse_hydra_overrides(OmegaConf.create({"env_vars": {"A": 1}}), [f"++env_vars.X={word}"])
    assert OmegaConf.to_container(cfg, resolve=True)["env_vars"]["X"] == text
    assert grammar.env_value("env_vars.X", word) == text


@pytest.mark.parametrize("name", ["llama3_70b_sft_config", "gpt_oss_120b_pretrain_64gpu_b300_bf16_config"])
def test_each_fix_that_creates_the_section_applies_alone(name):
    """recheck56 AC1: a ++comm_overlap={...} word without tp_comm_overlap (CommOverlapConfig has no default for it)
    was not instantiated, and Bridge kept a dict its runtime_config_update() fails on; every fix word of the answer,
    applied alone to the recipe's real config, now makes a CommOverlapConfig with the fields the fix names."""
    import re
    import shlex
    import tempfile
    from pathlib import Path

    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.utils.omegaconf_utils import (apply_overrides, create_omegaconf_dict_config,
                                                                 parse_hydra_overrides)
    from omegaconf import OmegaConf

    from mbridge_overlap import api
    from mbridge_overlap.bridge import recipes
    from mbridge_overlap.upstream import catalog

    r = api.resolve(recipe=name, gpus=64)
    made = [f for f in r.findings if "'++comm_overlap={" in f.fix]
    assert made
    for f in made:
        word = next(w for w in shlex.split(re.sub(r"[;()]", " ", f.fix)) if w.startswith("++comm_overlap="))
        cfg = recipes.rebuild(catalog.lookup(name, "0.6.2"), Path(tempfile.mkdtemp()))
        omega, excluded = create_omegaconf_dict_config(cfg)
        apply_overrides(cfg, OmegaConf.to_container(parse_hydra_overrides(omega, [word]), resolve=True), excluded)
        assert isinstance(cfg.comm_overlap, CommOverlapConfig), (f.id, word)
        for key, value in f.fix_overrides.items():
            if key.startswith("comm_overlap."):
                assert getattr(cfg.comm_overlap, key.partition(".")[2]) == value, (f.id, key)


# recheck55 AB1, AB2 and fuzzQ Q6 (rest): backslash runs before ${ and before trailing blanks, blanks after a colon and
# after a closing quote, as command-line words
WORDS = ["'\\\\${x}'", "'\\\\\\${x}'", "'a\\\\\\\\\\${x}'", "\\\\\\${x}", "\\${x}", "'\\${x}'", "a\\\\ ", "\\\\ ", "a\\\\\t",
         "\\\\\\\\ ", "e: ", "x:\t", "a:  ", "a\\:  ", "Ring\\  ", "'a' ", "\"0\"\t", " 'a'"]


@pytest.mark.parametrize("word", WORDS)
def test_a_launch_variable_word_is_what_bridge_exports_or_refused_as_bridge_refuses_it(word):
    """The whole path: Bridge's parse_hydra_overrides, then OmegaConf's resolve (Bridge's to_container(resolve=True)),
    against the skill's reading of the same word; refused by both, or the same text."""
    from megatron.bridge.training.utils.omegaconf_utils import parse_hydra_overrides
    from omegaconf import OmegaConf

    from mbridge_overlap import UsageError

    try:
        cfg = parse_hydra_overrides(OmegaConf.create({"env_vars": {"A": 1}}), [f"++env_vars.X={word}"])
        theirs = str(OmegaConf.to_container(cfg, resolve=True)["env_vars"]["X"])
    except Exception:  # noqa: BLE001 - Hydra's or OmegaConf's refusal, whichever
        theirs = None
    try:
        key, raw = grammar.parse_override(f"++env_vars.X={word}")
        ours = str(grammar.env_value(key, raw))
    except UsageError:
        ours = None
    assert ours == theirs


@pytest.mark.parametrize("digits", [4300, 4301])
def test_a_number_hydra_cannot_convert_is_refused_as_hydra_refuses_it(digits):
    """recheck55 AB9: past Python's 4,300-digit limit Hydra's parser raises; the skill exported the digits as text."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mbridge_overlap import UsageError

    try:
        OverridesParser.create().parse_overrides(["k=" + "1" * digits])
        theirs = True
    except Exception:  # noqa: BLE001 - Hydra's refusal
        theirs = False
    try:
        grammar.command_line_value("env_vars.X", "1" * digits)
        ours = True
    except UsageError:
        ours = False
    assert ours == theirs


@pytest.mark.parametrize("word", ["[p2p,a2a]", "[p2p,a2a", "[a2a]]", "[a,b],[c]", "'a", "'a'x", "[a=b]", "[a,~]", "'a,b'",
                                  "[1, 2.5, true, null]", "[]", "a\\,b", "10", "'10'", "1_000", "[ 'x y' ,z]"])
def test_a_command_line_value_is_typed_or_refused_as_hydra_types_or_refuses_it(word):
    """fuzzS S2-1, S2-2: plan wrote a list as the text '[p2p,a2a]' and a quoted value with its quotes, and malformed
    lists and quotes were answered; the skill's reading of a word is Hydra's."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mbridge_overlap import UsageError

    try:
        parsed = OverridesParser.create().parse_override(f"k={word}")
        theirs = "refused" if parsed.is_sweep_override() else parsed.value()  # (Bridge's overrides refuse a sweep)
    except Exception:  # noqa: BLE001 - Hydra's refusal
        theirs = "refused"
    try:
        ours = grammar.value_of("model.x", word)
    except UsageError:
        ours = "refused"
    assert ours == theirs


@pytest.mark.parametrize("word", ["none", "None", "NONE", "~", "null", "NULL", "nUlL"])
def test_a_command_line_null_spelling_is_read_as_hydra_reads_it(word):
    """AD2's rest: Hydra's only null is null in any case; none is its text, ~ refused by its lexer."""
    from hydra.errors import HydraException

    from mbridge_overlap import UsageError
    from mbridge_overlap.run import request, schema
    from mbridge_overlap.upstream import releases

    hydra = pytest.importorskip("hydra.core.override_parser.overrides_parser")
    release = releases.get("0.6.2")
    spec = schema.MODEL["virtual_pipeline_model_parallel_size"]
    try:
        theirs = hydra.OverridesParser.create().parse_override(f"k={word}").value()
    except HydraException:
        with pytest.raises(UsageError, match="Hydra"):
            request.convert("model.virtual_pipeline_model_parallel_size", spec, word, release, command_line=True)
        return
    if theirs is None:
        assert request.convert("model.virtual_pipeline_model_parallel_size", spec, word, release, command_line=True) is None
    else:
        assert theirs == word
        with pytest.raises(UsageError, match="text"):
            request.convert("model.virtual_pipeline_model_parallel_size", spec, word, release, command_line=True)
