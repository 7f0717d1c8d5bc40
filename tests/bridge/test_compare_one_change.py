"""One change, one finding and one restore between diff and diagnose --compare (evalAB AB2-3), held to the installed
Megatron-Bridge: its own configuration summaries of a run with and without overlap_param_gather are what the compare
reads, and the restore both verbs give, applied to AFTER with Bridge's own override path and runtime_config_update(),
brings back every effective setting BEFORE has."""

import contextlib
import io

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter
from mbridge_overlap.run import scenario
from mbridge_overlap.verbs.diff import diff
from tools.examples import iteration_line

VERSION = adapter.bridge_version()
GPUS = 8
BATCH = {"train.micro_batch_size": 1, "train.global_batch_size": 64}
BASE = {"comm_overlap.tp_comm_overlap": False}  # a comm_overlap section on both sides, as every recipe has
OFF = {**BASE, "comm_overlap.overlap_param_gather": False}


def build(overrides: dict):
    cfg = adapter.baseline_config()
    adapter.apply_overrides(cfg, {**BATCH, **overrides})
    error, _ = adapter.runtime_config_update(cfg, GPUS)
    assert error is None, error
    return cfg


def printed(cfg, monkeypatch) -> str:
    monkeypatch.setenv("RANK", "0")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cfg.log_non_default_values()
    return out.getvalue()


def test_diff_and_compare_restore_overlap_param_gather_alike_and_bridge_takes_it(tmp_path, monkeypatch):
    before, after = build(BASE), build(OFF)
    assert before.ddp.overlap_param_gather is True and after.ddp.overlap_param_gather is False
    logs = []
    for name, cfg, ms in (("before.log", before, 1000.0), ("after.log", after, 1100.0)):
        (tmp_path / name).write_text(printed(cfg, monkeypatch) + "".join(iteration_line(i, 100, ms) + "\n" for i in range(1, 12)))
        logs.append(str(tmp_path / name))
    changes = api.diagnose(logs, compare=True, gpus=GPUS, bridge_version=VERSION).to_dict()["compare"]["config_changes"]
    (by_compare,) = changes
    sides = [scenario.build(overrides={**BATCH, **o}, gpus=GPUS, bridge_version=VERSION) for o in (BASE, OFF)]
    (by_diff,) = [c.to_dict() for c in diff(*sides).changes]
    assert by_diff["finding_id"] == by_compare["finding_id"] == "REQUESTED_CHANGE"
    assert by_diff["fix_overrides"] == by_compare["fix_overrides"] == {"comm_overlap.overlap_param_gather": True}
    restored = build({**OFF, **by_diff["fix_overrides"]})
    assert adapter.effective(restored) == adapter.effective(before)
