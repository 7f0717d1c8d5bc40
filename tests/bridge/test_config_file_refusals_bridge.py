"""The newest TransformerConfig.__post_init__ refusals from a run config file, against the installed Bridge: each file
of tests/test_config_file_refusals.py (refused, and with the field that is taken) merged as Bridge merges a config file,
then runtime_config_update; and the load-balancing and capacity fields before the rank capacity's check, every
combination. The skill's resolve --config refuses exactly where Bridge raises, in its words, and diagnose names the
finding from the error Bridge raised. test_second_release.py
runs this on a second release (Megatron-Core 0.18: the rank capacity's check in its other form)."""

import io
import itertools

import pytest
import yaml

from mbridge_overlap import UsageError, api
from mbridge_overlap.bridge import adapter
from mbridge_overlap.upstream.releases import get, version_key
from test_config_file_refusals import CASES, RANK
from test_dataset_seq_length_bridge import _bridge

# each finding's words, as every release's Megatron-Core raises them (0.18: the rank capacity's and the ncclep check's
# other forms, or none)
WORDS = ("DeepEP backend is only supported", "Only one backend is supported", "does not support moe_pad_expert_input",
         "moe_expert_rank_capacity_factor", "moe_flex_dispatcher_backend='ncclep'", "Conflicting deprecated SM-count",
         "overlap_moe_expert_parallel_comm must be", "CUDA graph scope on moe and mlp")


def _alike(tmp_path, model: dict, finding: str) -> bool:
    """Whether Bridge refuses the file with the finding's words; asserts the skill says exactly those, exactly then."""
    text = yaml.safe_dump({"model": model})
    (tmp_path / "run.yaml").write_text(text)
    if not all(hasattr(adapter.baseline_config().model, name) for name in model):  # a field of a later release
        with pytest.raises(UsageError, match="is not in Megatron-Bridge's config"):
            api.resolve(config=str(tmp_path / "run.yaml"), gpus=8, gpu="h100", bridge_version=adapter.bridge_version())
        return False
    taken, error = _bridge((), text)
    assert taken, model
    real = error if error and any(w in error for w in WORDS) else None
    ours = [f for f in api.resolve(config=str(tmp_path / "run.yaml"), gpus=8, gpu="h100",
                                   bridge_version=adapter.bridge_version()).findings if f.id == finding]
    assert [f.message.partition(": ")[2] for f in ours] == ([real.partition(": ")[2]] if real else []), (model, ours, error)
    if real:  # the exception's line, as the refused run's log ends with it, names the finding
        causes = api.diagnose(["-"], stdin=io.BytesIO(f"{real}\n".encode()), bridge_version=adapter.bridge_version())
        assert [c["id"] for c in causes.to_dict()["causes"]] == [finding], (real, causes.to_dict()["causes"])
    return bool(real)


def test_each_file_is_refused_exactly_where_bridge_refuses_it(tmp_path):
    refused = [_alike(tmp_path, model, finding) for finding, model, _, _ in CASES]
    taken = [_alike(tmp_path, {**model, **fix}, finding) for finding, model, _, fix in CASES]
    assert not any(taken)
    core_19 = version_key(get(adapter.bridge_version()).megatron_core) >= version_key("0.19.0")
    assert sum(refused) == (9 if core_19 else 7), refused  # 0.18: no SM-count or ncclep check


def test_the_capacity_checks_before_the_rank_capacity_s_as_bridge_runs_them(tmp_path):
    refusals = 0
    for balancing, coeff, capacity, pad in itertools.product(
            ("aux_loss", "sinkhorn", ["aux_loss", "seq_aux_loss"]), (0.0, [0.01, 0.001]), (None, 1.0, -1.0), (False, True)):
        model = {**RANK, "moe_router_load_balancing_type": balancing, "moe_aux_loss_coeff": coeff,
                 "moe_expert_capacity_factor": capacity, "moe_pad_expert_input_to_capacity": pad}
        refusals += _alike(tmp_path, model, "EXPERT_RANK_CAPACITY_REJECTED")
    # 36 files: a list of two balancing types beside one coefficient raises (6 of them), a capacity factor beside
    # sinkhorn (8 more), padding without a capacity factor, or a negative one (8 more): 14 reach the rank capacity
    assert refusals == 14
