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
