"""anchors: found by content in order, reported missing with a clear note, per release family."""

import pytest

from mbridge_overlap import anchors
from mbridge_overlap.errors import UsageError

COMM_OVERLAP = """
class CommOverlapConfig:
    def _get_model_comm_overlap_cfgs(self, model_cfg, ddp_config):
        if self.user_comm_overlap_cfg.tp_comm_overlap is True:
            if model_cfg.tensor_model_parallel_size < 2:
                self.user_comm_overlap_cfg.tp_comm_overlap = False
            elif not model_cfg.sequence_parallel:
                pass
            elif not HAVE_TE:
                pass
"""


def test_find_lines_in_order_within_a_window():
    lines = ["if self.user_comm_overlap_cfg.tp_comm_overlap is True:", "elif not HAVE_TE:"]
    assert anchors.find_lines(COMM_OVERLAP, lines, 20) == (4, 9)
    assert anchors.find_lines(COMM_OVERLAP, list(reversed(lines)), 20) is None
    assert anchors.find_lines(COMM_OVERLAP, lines, 3) is None


def make_checkout(root, version=(0, 6, 2), comm_overlap=COMM_OVERLAP):
    pkg = root / "src" / "megatron" / "bridge"
    (pkg / "training").mkdir(parents=True)
    (pkg / "package_info.py").write_text("MAJOR = {}\nMINOR = {}\nPATCH = {}\n".format(*version))
    (pkg / "training" / "comm_overlap.py").write_text(comm_overlap)
    return root


def test_report_on_a_partial_checkout(tmp_path):
    d = anchors.report(str(make_checkout(tmp_path)))
    by_id = {a["id"]: a for a in d["anchors"]}
    assert d["bridge_version"] == "0.6.2" and d["ok"] is False
    assert by_id["tp_overlap_gating"]["status"] == "missing"  # the last cited line is absent in this fixture
    assert by_id["launch_env_plugin"]["status"] == "not_applicable"
    assert by_id["launch_env_wiring"]["status"] == "missing" and "re-read the file" in by_id["launch_env_wiring"]["note"]


def test_found_with_its_line_range(tmp_path):
    text = COMM_OVERLAP + "                self.user_comm_overlap_cfg.tp_comm_overlap = False\n"
    d = anchors.report(str(make_checkout(tmp_path, comm_overlap=text)))
    gating = next(a for a in d["anchors"] if a["id"] == "tp_overlap_gating")
    assert gating["status"] == "found" and (gating["start"], gating["end"]) == (4, 11)


def test_release_family_decides_which_anchors_apply(tmp_path):
    d = anchors.report(str(make_checkout(tmp_path, version=(0, 5, 1))))
    by_id = {a["id"]: a for a in d["anchors"]}
    assert by_id["launch_env_wiring"]["status"] == "not_applicable"
    assert by_id["launch_env_plugin"]["status"] == "missing"


def test_not_a_checkout(tmp_path):
    with pytest.raises(UsageError, match="no src/megatron/bridge"):
        anchors.report(str(tmp_path))
