"""Messages whose text the package writes off the overlap path too (causes.off_path_too): generated per release by
tools/gen_messages.py (Entry.raised_elsewhere: every other place writing the text, and whether the catalog has it on
the path; Entry.off_path_too where one is off it and the message's own words name no overlap topic), where it was a
hand-kept table of one TE message."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import causes, messages

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ("0.6.2", "0.5.1", "0.5.0")
TE = "transformer_engine/pytorch/"


def _rows(release: str) -> list:
    return json.loads((ROOT / "mbridge_overlap" / "data" / "releases" / release / "messages.json").read_text())["entries"]


@pytest.mark.parametrize("release", RELEASES)
def test_the_hand_table_s_message_is_generated_alike(release):
    """The former table (TE 2.4-2.20.2): "Missing quantizer for input tensor" of the userbuffers ops is raised off the
    path too by module/linear.py, module/layernorm_linear.py and ops/basic/basic_linear.py; the other userbuffers op
    writes it on the path."""
    rows = [r for r in _rows(release) if r["template"] == "Missing quantizer for input tensor"]
    assert {r["file"] for r in rows} == {TE + "ops/fused/userbuffers_forward_linear.py",
                                         TE + "ops/fused/userbuffers_backward_linear.py"}
    for r in rows:
        off = {x[0] for x in r["raised_elsewhere"] if not x[3]}
        on = {x[0] for x in r["raised_elsewhere"] if x[3]}
        assert r["off_path_too"] and off == {TE + "module/linear.py", TE + "module/layernorm_linear.py",
                                             TE + "ops/basic/basic_linear.py"}, r["raised_elsewhere"]
        assert on == {TE + "ops/fused/userbuffers_forward_linear.py", TE + "ops/fused/userbuffers_backward_linear.py"} - {r["file"]}
        entry = messages.load(release).by_id(r["id"])
        assert "module/linear.py _linear_forward_impl" in causes.off_path_too(entry)


@pytest.mark.parametrize("release", RELEASES)
def test_a_message_whose_words_name_its_topic_stays_on_the_path(release):
    """Written off the path too, but its own words say what it is about: the text still places it (Megatron-Core's
    'vp_stage must be passed if virtual pipeline is enabled', parallel_state.py and pipeline_parallel_layer_layout.py;
    0.5.x's too)."""
    rows = [r for r in _rows(release) if (r["template"] or "").startswith("vp_stage must be passed if virtual pipeline")]
    assert rows and any(not x[3] for r in rows for x in r.get("raised_elsewhere", ()))
    assert not any(r.get("off_path_too") for r in rows)
    assert all(causes.off_path_too(messages.load(release).by_id(r["id"])) is None for r in rows)


def _diagnose(lines: list) -> dict:
    text = "\n".join(f"[rank0]: {x}" for x in lines) + "\n"
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode())).to_dict()


_WEIGHT, _GRAD = "Missing quantizer for weight tensor", "Weight tensor is required to compute input grad"


@pytest.mark.parametrize("text, path, function, userbuffers", [
    *[(t, None, None, False) for t in (_WEIGHT, _GRAD)],  # the text alone
    *[(t, TE + "ops/basic/basic_linear.py", "_functional_backward", False) for t in (_WEIGHT, _GRAD)],
    (_WEIGHT, TE + "ops/fused/userbuffers_forward_linear.py", "_functional_forward", True),
    (_WEIGHT, TE + "ops/fused/userbuffers_backward_linear.py", "_functional_backward", True),
    (_GRAD, TE + "ops/fused/userbuffers_backward_linear.py", "_functional_backward", True),  # (the forward op has it not)
])
def test_texts_the_hand_table_lacked_need_their_frame_too(text, path, function, userbuffers):
    """TE 2.20.2's userbuffers ops share more texts with ops/basic/basic_linear.py, which runs without userbuffers:
    'Missing quantizer for weight tensor', 'Weight tensor is required to compute input grad' (no table had them: a
    basic_linear traceback was called the userbuffers path)."""
    lines = []
    if path:
        lines = ["Traceback (most recent call last):",
                 f'  File "/usr/local/lib/python3.12/dist-packages/{path}", line 181, in {function}',
                 f'    raise ValueError("{text}")']
    d = _diagnose([*lines, f"ValueError: {text}"])
    ids = [c["id"] for c in d["causes"] if c["overlap_related"]]
    if userbuffers:
        assert ids == ["OVERLAP_PATH_ERROR"] and "userbuffers" in d["causes"][0]["message"], d["causes"]
    else:
        assert ids == [] and any(text in o["logged"] for o in d["other"]), (ids, d["other"])


def test_a_finding_s_message_is_that_finding_wherever_it_is_raised():
    """Bridge 0.6.2 raises 'offline_packing_specs must be set when enable_offline_packing=True.' in
    ConfigContainer.validate and, off the overlap path, in GPTSFTDatasetConfig.validate: DATASET_PACKING_REJECTED
    names the text, so the text alone is that finding (the off-path rule is for messages no finding names)."""
    row = next(r for r in _rows("0.6.2") if (r["template"] or "").startswith("offline_packing_specs must be set when"))
    assert any(x[0].endswith("gpt_sft.py") and not x[3] for x in row["raised_elsewhere"])
    d = _diagnose(["ValueError: offline_packing_specs must be set when enable_offline_packing=True."])
    assert [c["id"] for c in d["causes"]] == ["DATASET_PACKING_REJECTED"]


@pytest.mark.parametrize("release", RELEASES)
def test_only_messages_reported_on_the_path_are_marked(release):
    """off_path_too only where diagnose would report the text as the path's (an overlap topic) and the words name none
    (Megatron-Core 0.19.2's 'DSAttention context parallelism currently supports cp_comm_type=allgather', written in
    dsa.py too, names context parallelism: it stays)."""
    topics = causes.OVERLAP_TOPICS
    for r in _rows(release):
        if r.get("off_path_too"):
            assert r["topic"] in topics and any(not x[3] for x in r["raised_elsewhere"]), r["id"]
    assert not [r["id"] for r in _rows(release) if (r["template"] or "").startswith("DSAttention context parallelism")
                and r.get("off_path_too")]
