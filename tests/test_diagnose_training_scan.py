"""Megatron-LM's training code (megatron/training/*.py, shipped in the megatron-core wheel from 0.17 on) and Megatron-Core
0.9-0.12's alltoall_seq token dispatcher (legacy_a2a_token_dispatcher.py) in the catalog's scan (tools/gen_messages.py
SCAN) and in the traceback rows (diagnose/frames.py ROWS)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from mbridge_overlap import api
from mbridge_overlap.diagnose import frames

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "mbridge_overlap" / "data"
RELEASES = ("0.6.2", "0.5.1", "0.5.0")
VPP = "vp_stage must be a kwarg in train_valid_test_dataset_provider when using virtual pipeline parallelism"
LEGACY = "megatron/core/transformer/moe/legacy_a2a_token_dispatcher.py"
EP = ["model.moe_token_dispatcher_type", "model.moe_flex_dispatcher_backend", "model.expert_model_parallel_size"]


def _rows(release: str) -> list:
    return json.loads((DATA / "releases" / release / "messages.json").read_text())["entries"]


def _diagnose(lines: list) -> dict:
    text = "\n".join(f"[rank0]: {x}" for x in lines) + "\n"
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode())).to_dict()


@pytest.mark.parametrize("release", RELEASES)
def test_the_vpp_dataset_provider_assert_is_catalogued(release):
    """training.py pretrain asserts the dataset provider takes vp_stage only under
    `args.virtual_pipeline_model_parallel_size is not None` (megatron-core 0.19.2, 0.18.2, 0.18.0)."""
    rows = [r for r in _rows(release) if r["template"] == VPP]
    assert len(rows) == 1, rows
    r = rows[0]
    assert (r["file"], r["function"], r["kind"], r["topic"]) == (
        "megatron/training/training.py", "pretrain", "assert", "pipeline")
    assert r["branch"] == ["args.virtual_pipeline_model_parallel_size is not None"]


def test_the_vpp_assert_is_named_with_its_knob():
    """Before: OVERLAP_TERMS_IN_ERROR (no catalog message; four pipeline knobs guessed from its words)."""
    d = _diagnose([f"AssertionError: {VPP}"])
    assert [c["id"] for c in d["causes"]] == ["OVERLAP_PATH_ERROR"], d["causes"]
    c = d["causes"][0]
    assert c["knobs"] == ["model.virtual_pipeline_model_parallel_size"]
    assert c["evidence"][0]["file"] == "megatron/training/training.py" and c["evidence"][0]["function"] == "pretrain"


@pytest.mark.parametrize("release", RELEASES)
def test_training_files_keep_only_overlap_topic_messages(release):
    """megatron/training/*.py is scanned in "overlap" mode: every kept message is in an overlap topic by its own words
    (none of topic "other")."""
    rows = [r for r in _rows(release) if r["file"].startswith("megatron/training/")]
    assert {r["file"] for r in rows} >= {"megatron/training/training.py", "megatron/training/checkpointing.py"}
    assert not [r["id"] for r in rows if r["topic"] in ("other", "parallel_state", "mixed_precision")]


@pytest.mark.parametrize("text", [
    "ValueError: either train-iters or train-samples should be provided.",  # training.py get_optimizer_param_scheduler
    "AssertionError: CUDA Graph capture should have been finished.",  # training.py train
])
def test_a_training_message_off_the_path_stays_unmatched(text):
    d = _diagnose([text])
    assert not [c for c in d["causes"] if c["overlap_related"]], d["causes"]
    assert any(text in o["logged"] for o in d["other"]), d["other"]


def test_a_traceback_through_the_legacy_dispatcher_is_ep():
    """Megatron-Core 0.9-0.12's MoEAlltoAllSEQTokenDispatcher.token_permutation: tensor_parallel.all_to_all over
    parallel_state.get_expert_model_parallel_group() (0.12.3 wheel, line 235). Before: no cause."""
    assert frames.overlap_frame("/usr/local/lib/python3.10/dist-packages/" + LEGACY, "token_permutation")[0] == "ep"
    d = _diagnose(["Traceback (most recent call last):",
                   f'  File "/usr/local/lib/python3.10/dist-packages/{LEGACY}", line 235, in token_permutation',
                   "    global_input_tokens = tensor_parallel.all_to_all(",
                   "TypeError: all_to_all() got an unexpected keyword argument 'group'"])
    assert [c["id"] for c in d["causes"]] == ["OVERLAP_PATH_TRACEBACK"], d["causes"]
    assert d["causes"][0]["knobs"] == EP


def test_the_legacy_dispatcher_s_texts_are_ep_causes():
    """Texts only the legacy dispatcher (and token_dispatcher.py) of Megatron-Core 0.9-0.12 print: on the path now
    (message_variants.json no longer marks them off_path_too), an EP cause given alone. Before: an other failure."""
    variants = json.loads((DATA / "message_variants.json").read_text())["entries"]
    text = "Bias is not supported in MoEAlltoAllTokenDispatcher"
    rows = [r for r in variants if r["template"] == text]
    assert len(rows) == 1 and not rows[0].get("off_path_too"), rows
    assert [x[3] for x in rows[0].get("raised_elsewhere", ()) if x[0] == LEGACY] in ([], [True]), rows[0]
    assert not [r["id"] for r in variants
                if r.get("off_path_too") and any(x[0] == LEGACY for x in r.get("raised_elsewhere", ()))]
    d = _diagnose([f"AssertionError: {text}"])
    causes = [c for c in d["causes"] if c["overlap_related"]]
    assert [c["id"] for c in causes] == ["OVERLAP_PATH_ERROR"], d["causes"]
    assert set(EP) & set(causes[0]["knobs"]), causes[0]["knobs"]
