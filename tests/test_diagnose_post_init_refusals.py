"""diagnose names the newest TransformerConfig.__post_init__ refusals from Megatron-Core's own words, as the log of a
run Bridge refused prints them (the exception's last line), for each release that raises them; it read them as an
overlap-path error without a cause. The words are written out from the installed Megatron-Core's source (0.19.2
transformer_config.py:1591, 1593, 1604, 1611, 1631, 1694, 1702, 2740; core_v0.18.x :1442, 1444, 1456, 1518, 1523,
2449). "Only one backend is supported for flex token dispatcher." was in no catalog: tools/gen_messages.py's
moe_overlap topic now takes Megatron-Core's "flex token dispatcher"."""

import io

import pytest

from mbridge_overlap import api

V019, V018, ALL = ("0.6.0", "0.6.2"), ("0.5.0", "0.5.1"), ("0.5.0", "0.5.1", "0.6.0", "0.6.2")
CASES = [
    ("MOE_ENABLE_DEEPEP_REJECTED", "ValueError: DeepEP backend is only supported with flex token dispatcher.", ALL),
    ("MOE_ENABLE_DEEPEP_REJECTED", "ValueError: Only one backend is supported for flex token dispatcher.", ALL),
    ("DEEPEP_PAD_TO_CAPACITY_REJECTED",
     "ValueError: Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity", ALL),
    ("EXPERT_RANK_CAPACITY_REJECTED",
     "ValueError: moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep' or 'ncclep'.", V019),
    ("EXPERT_RANK_CAPACITY_REJECTED", "ValueError: moe_expert_rank_capacity_factor with the 'hybridep' backend requires "
     "use_transformer_engine_op_fuser to be enabled.", V019),
    ("EXPERT_RANK_CAPACITY_REJECTED",
     "ValueError: moe_expert_rank_capacity_factor requires use_transformer_engine_op_fuser to be enabled.", V018),
    ("EXPERT_RANK_CAPACITY_REJECTED",
     "ValueError: moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be 'hybridep'.", V018),
    ("NCCLEP_NEEDS_FLEX_DISPATCHER",
     "ValueError: moe_flex_dispatcher_backend='ncclep' requires moe_token_dispatcher_type='flex'.", V019),
    ("FLEX_SM_COUNTS_CONFLICT", "ValueError: Conflicting deprecated SM-count knobs {'moe_deepep_num_sms': 20, "
     "'moe_hybridep_num_sms': 16}; set a single moe_flex_dispatcher_num_sms instead.", V019),
    ("MOE_OVERLAP_REJECTED",
     "AssertionError: CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm", ALL),
]
TRACEBACK = ('Traceback (most recent call last):\n  File "/opt/Megatron-Bridge/scripts/training/run_recipe.py", line 90, '
             'in <module>\n  File "/usr/local/lib/python3.12/dist-packages/megatron/core/transformer/transformer_config.py",'
             ' line 1591, in __post_init__\n')


def _causes(text: str, version: str) -> list:
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode()), bridge_version=version).to_dict()["causes"]


@pytest.mark.parametrize("finding, line, versions", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_megatron_core_s_words_name_the_finding_in_each_release_that_prints_them(finding, line, versions):
    for version in versions:
        for text in (line + "\n", TRACEBACK + line + "\n"):
            causes = _causes(text, version)
            assert [c["id"] for c in causes] == [finding], (version, text, causes)
            assert causes[0]["severity"] == "error" and causes[0]["fix"], causes[0]


def test_ncclep_s_own_capacity_message_is_not_the_post_init_refusal():
    """token_dispatcher.py:1564's ValueError names moe_expert_rank_capacity_factor too, later in the words."""
    text = ("ValueError: The 'ncclep' backend requires moe_expert_rank_capacity_factor to be set: it sizes the per-rank "
            "receive buffer. Exceeding the budget hard-traps, so set it generously.\n")
    assert "EXPERT_RANK_CAPACITY_REJECTED" not in [c["id"] for c in _causes(text, "0.6.2")]
