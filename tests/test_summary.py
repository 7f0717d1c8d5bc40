"""Bridge's start-up configuration block read back from a log (mbridge_overlap/diagnose/summary.py).

The real blocks are those of tests/data/logs/bridge-0.6.2 (real Megatron-Bridge 0.6.2 runs, tools/gen_bridge_logs.py):
each is read whole and exactly (rendered back from what was read it is the same text), the analysis of the config it
gives has every value the block printed and, for what it leaves out, Megatron-Core's default, and it agrees with the
analysis of the scenario the log's manifest describes (its overrides on Bridge's baseline, the same GPUs). Cut, mixed
and damaged blocks are never read into a wrong value: what they give is a part of what the whole block gives. Pure
Python (tests/bridge/test_summary_bridge.py runs Bridge's own printing function)."""

import random
import re
import time

import pytest
import yaml

from conftest import ROOT
from mbridge_overlap.findings import analysis
from mbridge_overlap.upstream import releases
from mbridge_overlap.run import scenario, schema
from mbridge_overlap.diagnose import summary as S
from mbridge_overlap.diagnose.summary import Summary, Text

LOGS = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2"
MANIFEST = yaml.safe_load((LOGS / "manifest.yaml").read_text())["scenarios"]
PREFIX = re.compile(r"^(?:\[[a-z]+\d+\]:)?(?:\[rank\d+\]: ?)?")
RANK0 = re.compile(r"^\[default0\]:")
WITH_BLOCK = sorted(n for n in MANIFEST if S.TITLE in (LOGS / f"{n}.log").read_text())
# Inputs the block never prints (summary.Summary._not_printed), whatever the run.
NOT_PRINTED = {"gpus", "comm_overlap", "mixed_precision", "model.tp_comm_overlap_cfg", "launcher_env", "env_vars",
               "dist.use_torch_fsdp2", "dist.use_tp_pp_dp_mapping", "dist.lazy_mpu_init", "rerun_state_machine.check_for_nan_in_loss"}
EFFECTIVE = [f"{s}.{n}" for s, names in schema.EFFECTIVE_FIELDS.items() for n in names]
DEFAULTS = S.mcore_defaults("0.6.2")["classes"]


def log_lines(name: str) -> list[str]:
    """The log's lines as diagnose hands them over: the launcher's rank prefix removed."""
    return [PREFIX.sub("", line) for line in (LOGS / f"{name}.log").read_text().splitlines()]


def block_lines(name: str) -> list[str]:
    """Rank 0's block, from the title to the closing rule."""
    text = (LOGS / f"{name}.log").read_text().splitlines()
    if any(RANK0.match(line) for line in text):
        text = [line for line in text if RANK0.match(line)]
    lines = [PREFIX.sub("", line) for line in text]
    start = lines.index(S.TITLE)
    end = next(i for i in range(start + 2, len(lines)) if lines[i] == S.RULE)
    return lines[start:end + 1]


def read(lines) -> Summary:
    s = Summary()
    for line in lines:
        s.feed(line)
    return s


def flat(cfg: dict) -> dict:
    return {f"{s}.{k}": v for s, body in cfg.items() if isinstance(body, dict) for k, v in body.items()}


def effective_of(value):
    """A printed value as the analysis reports it: enum reprs by member name."""
    if isinstance(value, list):
        return [S.enum_member(v) or v for v in value]
    return S.enum_member(value) or value


def effective(cfg: dict, gpus: int) -> tuple[dict, analysis.Analysis]:
    an = analysis.analyze(scenario.build(config=cfg, gpus=gpus))
    return {f"{s}.{k}": v for s, body in an.effective.items() for k, v in body.items()}, an


@pytest.fixture(scope="module")
def whole():
    return {name: read(log_lines(name)) for name in WITH_BLOCK}


def test_the_real_logs_hold_blocks():
    assert len(WITH_BLOCK) >= 10
    assert {MANIFEST[n]["launch"] for n in WITH_BLOCK} >= {"fork", "python", "torchrun"}


# -- whole blocks --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", WITH_BLOCK)
def test_a_real_block_is_read_whole_and_exactly(name, whole):
    s = whole[name]
    assert s.done and s.blocks == 1 and not s.overlapped and not s.truncated
    assert list(s.sections) == [*S.MCORE_SECTIONS, *S.OTHER_SECTIONS]
    assert s.classes == {"optimizer": "OptimizerConfig", "ddp": "DistributedDataParallelConfig", "model": "TransformerConfig"}
    # every line of the block is claimed, and rendering what was read as Bridge renders it gives the block back
    block = block_lines(name)
    fresh = Summary()
    assert all(fresh.feed(line) for line in block)
    rendered = [S.TITLE, S.RULE]
    for section, values in s.sections.items():
        if section == "train":
            rendered += ["", S.DASH, S.OTHER_TITLE, S.DASH]
        if section in S.MCORE_SECTIONS:
            rendered += ["", f"[{section}] Non-default values (vs Mcore {s.classes[section]}):"]
            rendered += [f"  {k}: {_repr(v)}  (Mcore default: {_repr(s.defaults[section][k])})" for k, v in values.items()]
        else:
            rendered += ["", f"[{section}]:"] + [f"  {k}: {_repr(v)}" for k, v in values.items()]
    assert rendered + ["", S.RULE] == block
    assert s.notes == []  # every printed Megatron-Core default is the release data's


def _repr(value) -> str:
    if isinstance(value, Text):
        return str(value)
    if isinstance(value, list) and any(isinstance(v, Text) for v in value):
        return "[" + ", ".join(_repr(v) for v in value) + "]"
    return repr(value)


@pytest.mark.parametrize("name", WITH_BLOCK)
def test_a_whole_block_leaves_only_what_it_never_prints_unknown(name, whole):
    s = whole[name]
    s.config("0.6.2")
    assert set(s.unknown) == NOT_PRINTED - ({"dist.use_torch_fsdp2", "dist.use_tp_pp_dp_mapping"}
                                            if s.sections["ddp"].get("use_megatron_fsdp") else set())
    assert all(s.why[k] for k in s.unknown)


@pytest.mark.parametrize("name", WITH_BLOCK)
def test_the_analysis_of_a_block_has_every_value_it_printed(name, whole):
    s = whole[name]
    eff, an = effective(s.config("0.6.2"), MANIFEST[name]["world_size"])
    assert an.state.rejections == []  # the block is printed after runtime_config_update() returned
    compared = 0
    for key in EFFECTIVE:
        section, _, field_name = key.partition(".")
        if key in s.unknown:
            continue
        printed = s.sections.get(section, {})
        if field_name in printed:
            assert eff[key] == effective_of(printed[field_name]), key
        elif section in DEFAULTS_BY_SECTION:
            assert eff[key] == DEFAULTS_BY_SECTION[section][field_name], f"{key}: not printed, so Megatron-Core's default"
        elif key == "dist.use_megatron_fsdp":
            assert eff[key] == s.sections["ddp"].get("use_megatron_fsdp", False)
        else:
            raise AssertionError(f"{key}: neither printed nor implied, yet not unknown")
        compared += 1
    assert compared == len(EFFECTIVE) - 1  # all but model.tp_comm_overlap_cfg


DEFAULTS_BY_SECTION = {e["section"]: e["defaults"] for c, e in DEFAULTS.items() if c != "MLATransformerConfig"}


@pytest.mark.parametrize("name", WITH_BLOCK)
def test_a_block_agrees_with_the_scenario_its_manifest_describes(name, whole):
    sc, s = MANIFEST[name], whole[name]
    eff, _ = effective(s.config("0.6.2"), sc["world_size"])
    ref = analysis.analyze(scenario.build(overrides=sc["overrides"], gpus=sc["world_size"],
                                          launcher_env=sc.get("launcher_env") or None))
    ref_eff = {f"{sec}.{k}": v for sec, body in ref.effective.items() for k, v in body.items()}
    shown = [k for k in EFFECTIVE if k not in s.unknown]
    assert len(shown) == len(EFFECTIVE) - 1
    assert {k: eff[k] for k in shown} == {k: ref_eff[k] for k in shown}
    # the other sections the resolver models, as printed
    cfg = flat(s.config("0.6.2"))
    for key in ("train.micro_batch_size", "train.global_batch_size", "checkpoint.ckpt_format", "model.seq_length"):
        assert key in cfg
    assert cfg["model.seq_length"] == s.sections["dataset"]["seq_length"]


def test_a_field_left_out_is_megatron_cores_default_not_bridges_baseline():
    lines = block_lines("baseline_no_gpu")
    gaf = next(i for i, line in enumerate(lines) if line.startswith("  gradient_accumulation_fusion:"))
    cfg = flat(read(lines[:gaf] + lines[gaf + 1:]).config("0.6.2"))
    assert schema.MODEL["gradient_accumulation_fusion"].default is True  # Bridge's baseline
    assert cfg["model.gradient_accumulation_fusion"] is False  # Megatron-Core's TransformerConfig default
    assert cfg["ddp.bucket_size"] is None and cfg["model.batch_p2p_comm"] is True


def test_a_section_without_a_header_had_nothing_to_list():
    lines = block_lines("baseline_no_gpu")
    start = lines.index("[ddp] Non-default values (vs Mcore DistributedDataParallelConfig):")
    end = lines.index("[model] Non-default values (vs Mcore TransformerConfig):")
    s = read(lines[:start] + lines[end:])
    cfg = flat(s.config("0.6.2"))
    assert "ddp" not in s.sections
    for name, default in DEFAULTS_BY_SECTION["ddp"].items():
        assert cfg[f"ddp.{name}"] == default, name
    # cut before [model]: ddp's header may still have come, nothing about ddp is known
    s = read(lines[:start])
    assert not any(k.startswith(("ddp.", "model.")) for k in flat(s.config("0.6.2")))
    assert "ddp.overlap_grad_reduce" in s.unknown and "cut" in s.why["ddp.overlap_grad_reduce"]


def test_an_mla_model_block_compares_with_mla_defaults():
    lines = [line.replace("(vs Mcore TransformerConfig)", "(vs Mcore MLATransformerConfig)") for line in block_lines("baseline_no_gpu")]
    s = read(lines)
    assert s.classes["model"] == "MLATransformerConfig"
    cfg = flat(s.config("0.6.2"))
    assert cfg["model.tp_comm_overlap"] is False and "model.tp_comm_overlap" not in s.unknown
    # a class the release data does not have: nothing left out is inferred
    s = read([line.replace("(vs Mcore TransformerConfig)", "(vs Mcore FutureTransformerConfig)") for line in block_lines("baseline_no_gpu")])
    assert "model.tp_comm_overlap" in s.unknown and s.config("0.6.2")["model"]["hidden_size"] == 64


def test_another_releases_config_has_only_its_fields():
    s = read(block_lines("tp_overlap_default_ub_cfg"))
    cfg = s.config("0.5.1")
    assert "pad_to_max_length" not in cfg.get("dataset", {})  # a 0.6 dataset field
    assert "env_vars" not in s.unknown
    an = analysis.analyze(scenario.build(config=cfg, gpus=8, bridge_version="0.5.1"))
    assert an.effective["model"]["tp_comm_overlap"] is True


def test_the_block_of_a_later_start_replaces_the_earlier():
    s = read(block_lines("baseline_no_gpu") + ["INFO:x:restart"] + block_lines("tp_overlap_default_ub_cfg"))
    assert s.blocks == 2 and s.done and not s.overlapped
    assert s.sections["model"]["tp_comm_overlap"] is True


# -- cut, mixed and damaged blocks ---------------------------------------------------------------------------------
def _sound(part: Summary, whole_cfg: dict) -> dict:
    """What a part of a block gives is what the whole block gives, no more."""
    cfg = flat(part.config("0.6.2"))
    wrong = {k: (v, whole_cfg.get(k, "<absent>")) for k, v in cfg.items() if k not in whole_cfg or whole_cfg[k] != v}
    assert not wrong
    return cfg


@pytest.mark.parametrize("name", ["tp_overlap_nvfp4", "fsdp_ok_reaches_setup"])
def test_a_block_cut_anywhere_gives_only_true_values(name, whole):
    full = flat(whole[name].config("0.6.2"))
    lines = block_lines(name)
    for cut in range(len(lines) + 1):
        part = read(lines[:cut])
        assert part.done == (cut == len(lines))
        _sound(part, full)
        if cut < len(lines) and lines[cut - 1 if cut else 0].startswith("  "):  # the last line cut in the middle
            last = lines[cut]
            _sound(read(lines[:cut] + [last[: len(last) // 2]]), full)
    assert _sound(read(lines), full) == full


def test_a_cut_block_says_what_it_does_not_know(whole):
    lines = block_lines("tp_overlap_nvfp4")
    at = lines.index("  tensor_model_parallel_size: 2  (Mcore default: 1)")
    s = read(lines[:at] + ["  tensor_model_parallel_size: 2  (Mcore def"])
    cfg = flat(s.config("0.6.2"))
    assert not s.done and "model.tensor_model_parallel_size" not in cfg and "damaged" in s.why["model.tensor_model_parallel_size"]
    assert cfg["model.sequence_parallel"] is True  # printed before the cut
    assert "model.tp_comm_overlap" not in cfg and "cut" in s.why["model.tp_comm_overlap"]  # sorted after it
    assert cfg["model.pipeline_model_parallel_size"] == 1  # sorted before: not printed, so the default
    assert any("cut off" in n for n in s.notes)
    # a whole-looking last line may still be cut (12 of 128): not trusted until a next line comes
    seq = next(i for i, line in enumerate(lines) if line.startswith("  seq_length: "))
    s = read(lines[:seq] + ["  seq_length: 12"])
    assert "dataset.seq_length" not in flat(s.config("0.6.2")) and "model.seq_length" in s.unknown


def test_another_ranks_lines_inside_the_block_change_nothing(whole):
    name = "tp_overlap_no_sequence_parallel"  # torchrun, two ranks
    raw = (LOGS / f"{name}.log").read_text().splitlines()
    others = [PREFIX.sub("", line) for line in raw if line.startswith("[default1]:")]
    others += ["  File \"<site-packages>/x.py\", line 3, in f", "  warnings.warn(message)", "    return func(*args)",
               "INFO:megatron.core.datasets.blended_megatron_dataset_config:Let split = 1,1,1", "0: W1201 x"]
    block = block_lines(name)
    rng = random.Random(0)
    for trial in range(20):
        mixed = list(block)
        inserted = set()
        for line in rng.sample(others, k=min(len(others), 25)):
            at = rng.randrange(1, len(mixed))
            mixed.insert(at, line)
            inserted.add(line)
        s = Summary()
        claimed = [s.feed(line) for line in mixed]
        assert all(c for c, line in zip(claimed, mixed) if line in block), trial
        assert not any(c for c, line in zip(claimed, mixed) if line in inserted and line not in block), trial
        assert s.done and s.sections == whole[name].sections
        assert s.config("0.6.2") == whole[name].config("0.6.2") and s.unknown == whole[name].unknown


def section_at(lines: list[str], i: int) -> str:
    """The section whose header stands last before line i."""
    for line in reversed(lines[:i]):
        m = re.match(r"\[(\w+)\]", line)
        if m:
            return m.group(1)
    raise AssertionError(i)


FOREIGN = ["WARNING:root:Disabling tensor parallel communication overlap due to TP size < 2.",
           "INFO: loading 8 shards", "[W1201 12:00:00.000000 ProcessGroupNCCL.cpp:1200] Warning: something",
           "    return func(*args, **kwargs)"]


@pytest.mark.parametrize("name", ["tp_overlap_nvfp4", "p2p_overlap_and_batched"])
def test_a_line_spliced_with_other_text_loses_only_what_it_may_hide(name, whole):
    """Another process's output written into the middle of a block line (its own lines whole, the block's cut
    anywhere): the field of that line is not known, no field is read wrong."""
    full = flat(whole[name].config("0.6.2"))
    lines = block_lines(name)
    damaged = 0
    for i, line in enumerate(lines):
        if not line.startswith("  "):
            continue
        section, field_name = section_at(lines, i), line[2:].partition(":")[0]
        if section not in S.MCORE_SECTIONS and field_name not in S.OTHER_FIELDS.get(section, ()):
            continue  # the lines a config value is read from (the others are read the same way)
        for cut in sorted({1, 2, len(field_name) + 2, len(field_name) + 4, len(line) - 1}):
            for foreign in FOREIGN[:3]:
                for spliced, rest in (([line[:cut] + foreign, line[cut:]], lines[i + 1:]),  # the block goes on after it
                                      ([foreign[:17] + line], lines[i + 1:]),  # the other's partial line, then the block's
                                      ([line[:cut] + foreign], FOREIGN)):  # the block's writer stopped there
                    # a printed value differs from what a missing line means (the default, None): a field whose line
                    # was lost and then taken as missing would show here
                    _sound(read(lines[:i] + spliced + rest), full)
                    damaged += 1
    assert damaged > 800


def test_two_blocks_printed_over_each_other_infer_nothing(whole):
    a, b = block_lines("baseline_no_gpu"), block_lines("tp_overlap_nvfp4")
    mixed = [line for pair in zip(a, b) for line in pair] + a[len(b):] + b[len(a):]
    s = read(mixed)
    assert s.overlapped
    printed = {f"{sec}.{k}": v for one in (whole["baseline_no_gpu"], whole["tp_overlap_nvfp4"])
               for sec, body in one.sections.items() for k, v in body.items()}
    cfg = flat(s.config("0.6.2"))
    assert cfg and all(k.startswith(("mixed_precision.", "dist.")) or printed.get(k) == v
                       or k == "model.seq_length" for k, v in cfg.items()), cfg
    # what neither block printed is not inferred (each block's missing line means its own default)
    assert "model.context_parallel_size" not in cfg and "model.context_parallel_size" in s.unknown
    assert "two blocks" in s.why["model.context_parallel_size"]
    assert any("two blocks" in n for n in s.notes)
    # the same block twice, line by line: the same values, still nothing inferred
    twice = read([line for pair in zip(a, a) for line in pair])
    assert twice.sections == whole["baseline_no_gpu"].sections and twice.overlapped


GARBAGE = [
    "'abc'", "\x00\x1b[31mred\x1b[0m", "[" * 5000, "1e999999", "9" * 5000, "__import__('os').system('false')",
    "lambda: 0", "{'a': torch.float32}", "<function f at 0x7f0000000000>", "True  (Mcore default: False)  (Mcore default: 1)",
    "\u202e\u200b", "-1", "None", "2.5", "[1, 2]", "x" * 20000,
]


@pytest.mark.parametrize("value", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_values_never_raise_nor_become_wrong_values(value):
    lines = block_lines("tp_overlap_default_ub_cfg")
    out = []
    for line in lines:
        for field_name in ("tensor_model_parallel_size", "sequence_parallel", "tp_comm_bootstrap_backend", "overlap_grad_reduce"):
            if line.startswith(f"  {field_name}: "):
                line = f"  {field_name}: {value}  (Mcore default: 1)"
        if line.startswith("  micro_batch_size: "):
            line = f"  micro_batch_size: {value}"
        out.append(line)
    out.insert(10, f"  tp_comm_bootstrap_backend: {value}  (Mcore default: 'nccl')")
    s = read(out)
    cfg = s.config("0.6.2")
    an = analysis.analyze(scenario.build(config=cfg, gpus=8))  # a scenario, whatever the block held
    assert an.effective["model"]["tp_comm_overlap"] is True
    for key in ("model.tensor_model_parallel_size", "model.sequence_parallel", "ddp.overlap_grad_reduce", "train.micro_batch_size"):
        got = flat(cfg).get(key)
        assert got is None and key in s.unknown or key == "train.micro_batch_size" and value == "None", (key, got)
    for v in (x for body in s.sections.values() for x in body.values()):
        assert isinstance(v, (Text, bool, int, float, str, list, dict, tuple, type(None), set, complex, bytes))


def test_non_literals_are_kept_as_their_text():
    assert S.parse_value("torch.bfloat16") == "torch.bfloat16" and isinstance(S.parse_value("torch.bfloat16"), Text)
    assert S.parse_value("<AttnBackend.auto: 5>") == Text("<AttnBackend.auto: 5>")
    assert S.parse_value("[<CudaGraphModule.attn: 2>, <CudaGraphModule.mlp: 3>]") == [Text("<CudaGraphModule.attn: 2>"),
                                                                                       Text("<CudaGraphModule.mlp: 3>")]
    assert S.enum_member(Text("<CudaGraphModule.attn: 2>")) == "attn" and S.enum_member("<X.y: 1>") is None
    assert S.parse_value("'tensorwise'") == "tensorwise" and not isinstance(S.parse_value("'tensorwise'"), Text)
    assert S.parse_value("inf") == float("inf") and S.parse_value("3e-05") == 3e-05
    assert S.parse_value("__import__('os')") == Text("__import__('os')")
    lines = block_lines("baseline_no_gpu")
    s = read(lines)
    assert s.sections["model"]["params_dtype"] == Text("torch.bfloat16")
    assert s.sections["train"]["exit_signal"] == Text("<Signals.SIGTERM: 15>")
    assert s.sections["dataset"]["split_matrix"][0] == (0, 0.3333333333333333)


def test_enum_values_of_a_modelled_field_become_names():
    lines = block_lines("baseline_no_gpu")
    at = lines.index("  cuda_graph_modules: []  (Mcore default: 'full')")
    lines[at] = "  cuda_graph_modules: [<CudaGraphModule.attn: 2>]  (Mcore default: 'full')"
    lines.insert(at - 1, "  cuda_graph_impl: <CudaGraphImpl.transformer_engine: 3>  (Mcore default: 'none')")
    cfg = flat(read(lines).config("0.6.2"))
    assert cfg["model.cuda_graph_modules"] == ["attn"] and cfg["model.cuda_graph_impl"] == "transformer_engine"


# -- streaming -------------------------------------------------------------------------------------------------------
def test_lines_outside_a_block_cost_a_startswith():
    s = Summary()
    line = "[2026-12-01 12:00:00] iteration      100/   1000 | consumed samples: 800 | elapsed time per iteration (ms): 812.3"
    t0 = time.perf_counter()
    for _ in range(200_000):
        s.feed(line)
    took = time.perf_counter() - t0
    assert s.blocks == 0 and s.sections == {} and took < 2.0, took


def test_a_block_that_never_ends_stops_collecting():
    s = Summary()
    s.feed(S.TITLE)
    s.feed(S.RULE)
    s.feed("[model] Non-default values (vs Mcore TransformerConfig):")
    claimed = [s.feed(f"  f{i:06d}: {i}  (Mcore default: 0)") for i in range(S.MAX_BLOCK_LINES * 2)]
    assert s.truncated and not s.done and sum(claimed) < S.MAX_BLOCK_LINES
    assert len(s.sections["model"]) < S.MAX_BLOCK_LINES
    assert not s.feed("  tensor_model_parallel_size: 2  (Mcore default: 1)")  # not collecting any more
    assert s.feed(S.TITLE)  # a new block starts
    assert s.blocks == 2 and not s.truncated


def test_huge_lines_inside_a_block_are_not_parsed():
    lines = block_lines("baseline_no_gpu")
    at = lines.index("[model] Non-default values (vs Mcore TransformerConfig):") + 1
    s = read(lines[:at] + ["  batch_p2p_comm: " + "[1, " * 100_000] + lines[at:])
    assert "batch_p2p_comm" not in s.sections["model"] and "model.batch_p2p_comm" in s.unknown
    s = read(lines[:at] + ["\x1b" * 1_000_000] + lines[at:])
    assert s.done and s.sections["model"]["hidden_size"] == 64


def test_the_generated_defaults_cover_every_field_read():
    for version in ("0.6.2", "0.5.1", "0.5.0"):
        data = S.mcore_defaults(version)
        assert data["bridge_version"] == version and data["megatron_core"] == releases.get(version).megatron_core
        assert {e["section"] for e in data["classes"].values()} == {"model", "ddp", "optimizer"}
        assert {"TransformerConfig", "MLATransformerConfig"} <= set(data["classes"])
        for cls, entry in data["classes"].items():
            assert set(entry["defaults"]) | set(entry["not_fields"]) | set(entry["no_default"]) == set(S.FIELDS[entry["section"]]), cls
    assert S.mcore_defaults("0.6.0")["bridge_version"] == "0.6.2"  # data_of
