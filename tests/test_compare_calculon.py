"""tools/compare_calculon.py runs the budget on Calculon's own system constants when given its system file: the
constants are really the file's (doubling its bandwidth halves the link time but for the latency), the budget's own
rates are back afterwards, and which overlap buys more is read per layout."""

from __future__ import annotations

import json

from mbridge_overlap.budget import system
from tools import compare_calculon as cc

NET = {"p2p": [1.0, None], "reduce_scatter": [1.0, 0], "all_gather": [1.0, 0], "all_reduce": [1.0, 1]}


def _files(tmp_path, bandwidth: float):
    src = tmp_path / f"calculon-{bandwidth:g}"
    (src / "systems").mkdir(parents=True)
    cfg = {"matrix": {"float16": {"tflops": 1000, "gflops_efficiency": [[128, 0.95], [0, 0.1]]},
                      "float8": {"tflops": 2000, "gflops_efficiency": [[128, 0.95], [0, 0.1]]}},
           "networks": [{"bandwidth": bandwidth, "efficiency": 0.5, "size": 8, "latency": 0.0, "ops": NET},
                        {"bandwidth": 50, "efficiency": 0.9, "size": 65536, "latency": 0.0, "ops": NET}]}
    (src / "systems" / "h100_80g_nvl8.json").write_text(json.dumps(cfg))
    return src


REFERENCE = {"layouts": [{
    "layout": {"name": "small", "system": "h100_80g_nvl8", "tp": 2, "pp": 1, "dp": 8, "mbs": 1, "gbs": 32, "vp": 1},
    "calculon_model": {"hidden": 4096, "feedforward": 14336, "seq_size": 2048, "attn_heads": 32, "attn_size": 128, "num_blocks": 4},
    "system_file": "systems/h100_80g_nvl8.json", "recompute": "none",
    "results": {v: {"stats": {"total_time": 1.0, **{f"{d}_comm_{k}_time": 0.1 for d in ("tp", "pp", "dp") for k in ("link", "exposed")}}}
                for v in ("off", "tp_only", "dp_only", "on")}}]}


def test_calculon_constants_are_the_files(tmp_path):
    real = system.get
    own = {r["variant"]: r for r in cc.compare(REFERENCE)}
    slow = {r["variant"]: r for r in cc.compare(REFERENCE, _files(tmp_path, 100))}
    fast = {r["variant"]: r for r in cc.compare(REFERENCE, _files(tmp_path, 200))}
    assert system.get is real  # the budget's own rates are back
    tp_slow, tp_fast = slow["off"]["tp"][0], fast["off"]["tp"][0]
    assert tp_slow > 0 and abs(tp_fast / tp_slow - 0.5) < 1e-3  # no latency in these files: half (as rounded to us)
    assert own["off"]["tp"][0] not in (tp_slow, tp_fast)
    assert slow["off"]["dp"][0] == fast["off"]["dp"][0] > 0  # DP of 8 across two nodes of 8: the second network, unchanged


def test_which_overlap_buys_more():
    rows = [{"name": "a", "variant": v, "step_s": s} for v, s in
            (("off", (10, 10)), ("tp_only", (8, 9.5)), ("dp_only", (9, 8)))]
    assert cc.best_overlap(rows) == [("a", "tp", "dp")]


def _reference(**stats_by_variant):
    """REFERENCE's one layout with its recompute and some of Calculon's stats replaced per variant."""
    item = json.loads(json.dumps(REFERENCE["layouts"][0]))
    item["recompute"] = "full"
    for variant, stats in stats_by_variant.items():
        item["results"][variant]["stats"].update(stats)
    return {"calculon_commit": "c0ffee", "layouts": [item]}


def test_recompute_memory_above_the_forwards_is_calculon_issue_5():
    over = _reference(off={"block_re_mem_time": 0.3, "block_fw_mem_time": 0.1})
    [(name, ratio)] = cc.recompute_overcount(over)
    assert name == "small" and abs(ratio - 3.0) < 1e-9
    once = _reference(off={"block_re_mem_time": 0.1, "block_fw_mem_time": 0.1})  # a full recompute: the forward again
    assert cc.recompute_overcount(once) == []


def test_dp_overlap_that_lengthens_calculons_step_is_listed():
    assert cc.dp_overlap_slower(_reference(off={"total_time": 1.0}, dp_only={"total_time": 1.2})) == ["small"]
    assert cc.dp_overlap_slower(_reference(off={"total_time": 1.0}, dp_only={"total_time": 0.9})) == []


def test_ratios_more_than_a_quarter_apart_are_named():
    same = {k: (1.0, 1.0) for k in ("tp", "pp", "dp", "tp_exposed", "dp_exposed")}
    rows = [{"name": n, "variant": v, "step_s": s, **same} for n, v, s in
            (("a", "off", (10, 10)), ("a", "on", (8, 8.2)), ("b", "off", (10, 10)), ("b", "on", (7, 12)))]
    assert cc.ratios_apart(rows) == ["b"]
    assert any(line.endswith("apart: b.") for line in cc.summary(rows))


def test_issue_5_paragraph_counts_from_the_reference():
    ref = _reference(off={"block_re_mem_time": 0.3, "block_fw_mem_time": 0.1, "total_time": 1.0},
                     dp_only={"total_time": 1.2})
    rows = [{"name": "small", "variant": v, "step_s": s} for v, s in (("off", (10, 10)), ("on", (7, 12)))]
    text = cc._issue5(ref, rows)
    assert "1 of the 1 recomputing layouts, up to 3.0 x" in text and "(1 layouts: small)" in text
    assert text.endswith("all among them.")
    fine = _reference(off={"block_re_mem_time": 0.1, "block_fw_mem_time": 0.1})
    assert not cc._issue5(fine, rows).endswith("all among them.")  # not said where it is not so


def test_once_must_be_the_corrected_run_of_the_same_commit(tmp_path, capsys):
    src = _files(tmp_path, 100)
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps(_reference()))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(_reference()))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**_reference(), "count_recompute_once": True, "calculon_commit": "deadbeef"}))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    for path, why in ((tmp_path / "none.json", "no such file"), (plain, "--count-recompute-once"),
                      (other, "deadbeef"), (broken, "not a Calculon reference")):
        assert cc.main(["--reference", str(ref), "--calculon-src", str(src), "--once", str(path)]) == 2
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_count_recompute_once_sums_each_recomputed_layers_own_forward():
    from tools import run_calculon

    class Layer:
        def __init__(self, flops, again):
            self.flops, self.again = flops, again

        def get_recompute_flag(self):
            return self.again

        def get_fw_flops(self):
            return self.flops

        def get_fw_mem_accessed(self):
            return 2 * self.flops

        def compute_flops_time(self, stage):
            return self.flops / 10

        def compute_mem_time(self, stage):
            return self.flops / 100

    class Calculon:  # its _compute_block_stats as at caa4b11: a recomputed layer adds the block's forward so far
        def __init__(self, layers):
            self._llm_block, self.exe = layers, type("Exe", (), {"training": True})()

        def _compute_block_stats(self):
            fw = fw_time = fw_mem = fw_mem_time = 0.0
            self._block_re_flops = self._block_re_flops_time = self._block_re_mem_accessed = self._block_re_mem_time = 0.0
            for layer in self._llm_block:
                fw += layer.get_fw_flops()
                fw_time += layer.compute_flops_time("fw")
                fw_mem += layer.get_fw_mem_accessed()
                fw_mem_time += layer.compute_mem_time("fw")
                if layer.get_recompute_flag():
                    self._block_re_flops += fw
                    self._block_re_flops_time += fw_time
                    self._block_re_mem_accessed += fw_mem
                    self._block_re_mem_time += fw_mem_time

    layers = [Layer(100.0, False), Layer(10.0, True), Layer(1.0, True)]
    bug = Calculon(layers)
    bug._compute_block_stats()
    assert bug._block_re_flops == 110 + 111  # the prefix sums
    fixed = run_calculon.once(Calculon)(layers)
    fixed._compute_block_stats()
    assert (fixed._block_re_flops, fixed._block_re_mem_accessed) == (11.0, 22.0)
    assert abs(fixed._block_re_flops_time - 1.1) < 1e-12 and abs(fixed._block_re_mem_time - 0.11) < 1e-12
