"""A catalog line's own word on its cause (native_messages.yaml `cause`) reaches the cause's message: evalAG AG-5, the
TE 1.6-1.9 userbuffers NCCL error wording, whose thread's fix was upgrading Transformer Engine (PR #1087, in 1.10)."""

from __future__ import annotations

import io

from mbridge_overlap import api

LEGACY = ("Failed, NCCL error TransformerEngine_official/transformer_engine/pytorch/csrc/userbuffers/"
          "userbuffers-host.cpp:223 ''\n")
CURRENT = "UDS: Sending data over socket /tmp/ub-ipc-socket-1-5f1c2a9e7b3d4c21 failed : Connection refused (111)\n"


def _causes(text: str, **kw) -> list:
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode()), **kw).to_dict()["causes"]


def test_the_legacy_userbuffers_nccl_line_says_which_releases_print_it_and_that_te_1_10_fixed_it():
    for kw in ({}, {"recipe": "llama3_70b_pretrain_64gpu_h100_bf16_config"}):
        (cause,) = _causes(LEGACY, **kw)
        assert cause["id"] == "UB_IPC_SOCKET_FAILED"
        assert "releases 1.6 to 1.8 and 1.9 development builds" in cause["message"]
        assert "upgrading Transformer Engine to 1.10 or later" in cause["message"] and "#1087" in cause["message"]


def test_the_current_wording_of_the_same_cause_says_nothing_of_old_releases():
    (cause,) = _causes(CURRENT)
    assert cause["id"] == "UB_IPC_SOCKET_FAILED" and "1.10" not in cause["message"]
    (both,) = _causes(CURRENT + LEGACY)
    assert both["message"].count("upgrading Transformer Engine to 1.10") == 1
