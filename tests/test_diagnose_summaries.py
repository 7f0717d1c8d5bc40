"""A log set whose ranks print different configuration summaries (fuzzF F13): the first in rank order is analysed,
and the answer says that another differs and on what; a printed value Bridge's config does not take is said as such,
not as a field the summary leaves out."""

import pathlib

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import parallel, reader

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOG = ROOT / "tests" / "data" / "logs" / "bridge-0.6.2" / "tp_overlap_no_sequence_parallel.log"
TP_LINE = "  tensor_model_parallel_size: 2  (Mcore default: 1)"


def _with_tp(text: str, tp: str) -> str:
    assert TP_LINE in text
    return text.replace(TP_LINE, TP_LINE.replace(": 2 ", f": {tp} "))


@pytest.fixture
def two_runs(tmp_path):
    text = LOG.read_text()
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "rank2.log").write_text(text)
    (folder / "rank10.log").write_text(_with_tp(text, "4"))
    return folder


def test_a_folder_is_read_in_rank_order(two_runs):
    assert [pathlib.Path(p).name for p in reader.files([str(two_runs)])] == ["rank2.log", "rank10.log"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_differing_summaries_are_said_and_the_first_is_analysed(two_runs, jobs, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_BYTES", 1)  # --jobs 2 reads each file in a worker of its own
    d = api.diagnose([str(two_runs)], gpus=8, jobs=jobs).to_dict()
    alone = api.diagnose([str(two_runs / "rank2.log")], gpus=8).to_dict()
    assert d["config"]["findings"] == alone["config"]["findings"]
    (note,) = [n for n in d["notes"] if "summaries differ" in n]
    assert "model.tensor_model_parallel_size" in note
    assert note.index("rank2.log") < note.index("rank10.log")  # rank2's is the one analysed


def test_identical_summaries_say_nothing(tmp_path):
    for name in ("rank0.log", "rank1.log"):
        (tmp_path / name).write_text(LOG.read_text())
    d = api.diagnose([str(tmp_path)], gpus=8).to_dict()
    assert not [n for n in d["notes"] if "summaries differ" in n]


def test_a_second_summary_in_one_log_is_compared_too(tmp_path):
    text = LOG.read_text()
    log = tmp_path / "restarted.log"
    log.write_text(text + _with_tp(text, "4"))
    (note,) = [n for n in api.diagnose([str(log)], gpus=8).to_dict()["notes"] if "summaries differ" in n]
    assert "a later one in the same log" in note


def test_an_invalid_printed_value_is_not_called_unprinted(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text(_with_tp(LOG.read_text(), "-2"))
    cfg = api.diagnose([str(log)], gpus=8).to_dict()["config"]
    assert "model.tensor_model_parallel_size" not in cfg["not_printed"]
    assert "-2" in cfg["printed_invalid"]["model.tensor_model_parallel_size"]
    fine = api.diagnose([str(LOG)], gpus=8).to_dict()["config"]
    assert "printed_invalid" not in fine and "model.tensor_model_parallel_size" not in fine["not_printed"]


def test_a_summary_printing_only_sequence_length_gives_the_model_s(tmp_path):
    # evalH H5: Bridge 0.5.x prints the dataset's sequence_length only (seq_length is a property over it)
    text = LOG.read_text()
    seq = [line for line in text.splitlines(keepends=True) if line.split(":", 1)[-1].strip().startswith("seq_length:")]
    assert len(seq) == 1 and "sequence_length:" in text
    log = tmp_path / "rank0.log"
    log.write_text(text.replace(seq[0], ""))
    assert "model.seq_length" not in api.diagnose([str(log)], gpus=8).to_dict()["config"]["not_printed"]
    log.write_text(text.replace(seq[0], "").replace("sequence_length:", "sequence_length_gone:"))
    assert "model.seq_length" in api.diagnose([str(log)], gpus=8).to_dict()["config"]["not_printed"]


SUMMARIES = pathlib.Path(__file__).resolve().parent / "data" / "summaries"


def _run(summary: str, ms: float) -> str:
    """Bridge's own summary (log_non_default_values of deepseek_v3_pretrain_config at 1024 GPUs, printed by real
    Bridge 0.5.1 and 0.6.2: evalAF's real/build.py --summary) and 20 iterations in Bridge's format."""
    body = (SUMMARIES / summary).read_text()
    its = "".join(f"[2026-12-07 08:{i:02d}:01] iteration {i:8d}/    1000 | consumed samples: {i * 4096:13d} | elapsed "
                  f"time per iteration (ms): {ms:.1f} | learning rate: 3.000000E-04 | global batch size:  4096 |\n"
                  for i in range(1, 21))
    return body + its


def test_a_compare_across_releases_lists_an_unmodelled_change_and_says_the_releases(tmp_path):
    """evalAF AF-3: 0.6.2's summary prints model.moe_flex_dispatcher_num_sms: 16 (Megatron-Core 0.19.2 passes it to
    HybridEP's dispatch and combine, token_dispatcher.py:1148-1149; 0.18.2 has no such field), which `diff` lists
    as changed on the overlap path; the compare said no config change and +0.0 ms as the whole story. And the
    summaries are of two releases (0.6.2's checkpoint.stream_ckpt_dequant, tokenizer.use_tokenizer_vocab_size, ...:
    Bridge lists every value of those sections but None), read with one release's defaults: said."""
    before, after = tmp_path / "b.log", tmp_path / "a.log"
    before.write_text(_run("deepseek_v3_pretrain_config_bridge051.txt", 20000.0))
    after.write_text(_run("deepseek_v3_pretrain_config_bridge062.txt", 21400.0))
    d = api.diagnose([str(before), str(after)], compare=True, gpus=1024, gpu="h100").to_dict()
    c = d["compare"]
    assert {"key": "model.moe_flex_dispatcher_num_sms", "before": None, "after": 16} in c["unmodeled_changes"]
    assert c["releases"] == {"before": ["0.5.0", "0.5.1"], "after": ["0.6.0", "0.6.1", "0.6.2"]}
    assert any("different Bridge releases" in n for n in d["notes"])
    (drop,) = [x for x in d["causes"] if x["id"] == "THROUGHPUT_DROP"]
    assert "moe_flex_dispatcher_num_sms" in drop["analysis"] and "does not model it" in drop["analysis"]
    # one release's summary twice: nothing unmodelled, no release said
    same = api.diagnose([str(after), str(after)], compare=True, gpus=1024, gpu="h100").to_dict()
    assert same["compare"]["unmodeled_changes"] == [] and "releases" not in same["compare"]
    assert not any("different Bridge releases" in n for n in same["notes"])
