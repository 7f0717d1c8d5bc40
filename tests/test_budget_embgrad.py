"""The word embedding's gradient all-reduce between pipeline stages (budget/embgrad.py: finalize_model_grads'
_allreduce_word_embedding_grads) and the DP buffers of the rank the budget costs past the first (budget/dp.py), tier 1.
Tier 2 (tests/bridge/test_budget_embgrad.py) holds the group, the sizes and the dtype to Megatron-Core's own code."""

from dataclasses import replace

import pytest

from mbridge_overlap import api
from mbridge_overlap.budget import dp as budget_dp, embgrad, shape as shapes, system as systems
from mbridge_overlap.budget.layout import Layout
from mbridge_overlap.upstream import releases

DENSE = {"num_layers": 8, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "vocab_size": 1000}
OFF = dict.fromkeys(("tp_comm_overlap", "overlap_p2p_comm", "overlap_grad_reduce", "overlap_param_gather",
                     "overlap_moe_expert_parallel_comm"), False)


def _lay(pp=4, tp=2, dp=2, release="first_tied_last_mtp", **kw):
    return Layout(tp=tp, pp=pp, vp=1, cp=1, ep=1, dp=dp, sp=False, seq=4096, mbs=1, gbs=64, precision="bf16", domain=8,
                  settings=dict(OFF), ddp={"use_distributed_optimizer": True}, embedding_ranks=release, **kw)


def _shape(**kw):
    return shapes.of(None, {**DENSE, **kw})[0]


TIED, MTP, UNTIED = _shape(share_embeddings_and_output_weights=True), _shape(mtp_num_layers=1), _shape()


def test_each_release_s_embedding_group():
    assert releases.get("0.5.1").embedding_ranks == "first_last" == releases.get("0.5.0").embedding_ranks
    assert releases.get("0.6.2").embedding_ranks == "first_tied_last_mtp" == releases.get("0.6.0").embedding_ranks
    new, old = _lay(), _lay(release="first_last")
    assert embgrad.ranks(new, TIED) == (0, 3) == embgrad.ranks(new, MTP) == embgrad.ranks(old, UNTIED)
    assert embgrad.ranks(new, UNTIED) == (0,)  # Bridge 0.6: untied, no MTP: the first rank alone
    middle = _lay(stages=(4, 4, 0, 0), mtp_stage=1)  # a layout's MTP layers on rank 1
    both = _shape(share_embeddings_and_output_weights=True, mtp_num_layers=1)
    assert embgrad.ranks(middle, MTP) == (0, 1) and embgrad.ranks(middle, both) == (0, 1, 3)
    assert embgrad.ranks(replace(middle, embedding_ranks="first_last"), both) == (0, 3)
    assert embgrad.ranks(_lay(pp=1), TIED) == (0,)


@pytest.mark.parametrize("lay, shape, runs", [
    (_lay(), TIED, True), (_lay(), MTP, True), (_lay(), UNTIED, False),
    (_lay(release="first_last"), UNTIED, False),  # two ranks, but no weight to reduce (None: it returns)
    (_lay(pp=1), TIED, False), (_lay(fsdp=True), TIED, False)])
def test_when_it_runs(lay, shape, runs):
    assert embgrad.runs(lay, shape) is runs
    assert bool(embgrad.collectives(lay, shape, systems.get("h100"))) is runs


def test_its_message_is_the_whole_main_grad_in_the_gradient_dtype_exposed():
    (bf16,) = embgrad.collectives(_lay(), TIED, systems.get("h100"))
    (fp32,) = embgrad.collectives(replace(_lay(), ddp={"grad_reduce_in_fp32": True}), TIED, systems.get("h100"))
    assert bf16.bytes == 500 * 256 * 2 and fp32.bytes == 2 * bf16.bytes  # vocabulary / TP x hidden
    assert (bf16.count, bf16.group, bf16.hidden, bf16.setting, bf16.dimension) == (1, 2, 0.0, None, "pp")
    assert "BF16" in bf16.what and "FP32" in fp32.what and fp32.seconds > bf16.seconds > 0


def test_its_link_is_where_the_first_and_last_stage_lie():
    assert embgrad.placed(_lay(pp=4, tp=2, dp=1), (0, 3)) == ("nvlink", None)  # 8 ranks: one node
    assert embgrad.placed(_lay(pp=4, tp=2, dp=2), (0, 3)) == ("network", 1)  # ranks 0 and 12 of 16
    assert embgrad.placed(_lay(pp=2, tp=2, dp=2), (0, 1)) == ("nvlink", None)
    (item,) = embgrad.collectives(_lay(pp=4, tp=2, dp=2), TIED, systems.get("h100"))
    assert item.link == "network" and item.gbps > 0


def _budget(extra=None, version=None, **kw):
    over = {"model.tensor_model_parallel_size": 2, "model.pipeline_model_parallel_size": 4, "train.global_batch_size": 64,
            **(extra or {})}
    return api.budget(over, recipe="llama3_8b_pretrain_config", gpus=16, bridge_version=version, **kw).to_dict()["budget"]


def _rows(b):
    return [c for c in b["collectives"] if c["what"].startswith("word-embedding gradient")]


def test_the_budget_counts_it_exposed_where_the_embedding_is_tied():
    tied = _budget(shape={"share_embeddings_and_output_weights": True})
    (row,) = _rows(tied)
    assert row["exposed_ms"] == row["ms"] > 0 and row["link"] == "network" and row["bytes"] == 128256 // 2 * 4096 * 4
    assert any(a.startswith("PP: the word embedding's gradient all-reduce over Bridge 0.6's") for a in tied["assumptions"])
    assert not _rows(_budget()) and not _rows(_budget({"model.pipeline_model_parallel_size": 1},
                                                       shape={"share_embeddings_and_output_weights": True}))
    assert not _rows(_budget(version="0.5.1"))  # 0.5's group has two ranks, but nothing to reduce untied
    old = _budget(version="0.5.1", shape={"mtp_num_layers": 1})
    assert _rows(old) and any("Megatron-Core's default embedding group" in a for a in old["assumptions"])
    for setting in ("ddp.overlap_grad_reduce", "ddp.overlap_param_gather"):
        flipped = _budget({setting: True}, shape={"share_embeddings_and_output_weights": True})
        assert _rows(flipped) == [row]  # no overlap setting moves it


def test_the_mtp_rank_s_own_buckets_are_priced():
    """PP 4 with MTP: the budget costs the last rank, whose DDP has no bucket size (pp_rank > 0) and whose embedding
    copy is a bucket of its own: two buckets, not the first stage's 40M-element ones."""
    b = _budget({"ddp.overlap_grad_reduce": True}, shape={"mtp_num_layers": 1})
    (grads,) = [c for c in b["collectives"] if c["dimension"] == "dp" and c["collective"] == "reduce_scatter"]
    plain = next(c for c in _budget({"ddp.overlap_grad_reduce": True})["collectives"] if c["dimension"] == "dp"
                 and c["collective"] == "reduce_scatter")
    assert grads["count"] == 2 and plain["count"] > 2


def test_a_later_rank_s_reduce_hides_behind_the_stages_before_it():
    """Overlap off, the last of 4 ranks reduces its buffer after its own backward, 3 stage backwards before rank 0's
    ends: what stays exposed is the later of that and rank 0's whole reduce (the step waits for both)."""
    lay, sys_ = _lay(dp=4), systems.get("h100")
    zero = budget_dp.collectives(lay, MTP, sys_, 2, 1e-3, 2e-3)
    last = budget_dp.collectives(lay, MTP, sys_, 2, 1e-3, 2e-3, rank=3, mtp=1)
    grads = lambda items: next(i for i in items if i.collective == "reduce_scatter")  # noqa: E731
    assert grads(last).count == 2 and grads(zero).count == 2  # (one bucket asked for: the embedding's apart)
    r0 = grads(zero).seconds - grads(zero).hidden
    own = max(0.0, grads(last).seconds - 3 * 2e-3)
    assert grads(last).seconds - grads(last).hidden == pytest.approx(min(grads(last).seconds, max(own, r0)))
    slow = budget_dp.collectives(lay, MTP, sys_, 2, 1e-3, 1e-9, rank=3, mtp=1)  # next to no compute to hide behind
    assert grads(slow).hidden == pytest.approx(3e-9, abs=1e-12)


def test_the_shared_copy_of_a_later_rank():
    assert budget_dp.shared_copy(MTP, last=True, mtp=1) == "embedding.word_embeddings.weight"
    assert budget_dp.shared_copy(TIED, last=True, mtp=0) == "output_layer.weight"
    assert budget_dp.shared_copy(UNTIED, last=True, mtp=0) is None and budget_dp.shared_copy(TIED, last=False, mtp=0) is None


def test_with_mtp_layers_the_final_norm_is_on_the_last_decoder_layer_s_stage():
    """TransformerBlock.has_final_layernorm_in_this_stage: with MTP layers the stage of the last decoder layer builds
    the final norm (a layout's MTP rank before the loss's), without them the last stage (tier 2 holds this)."""
    assert shapes.final_norm_here(MTP, last=False, numbers=[4, 5, 6, 7]) is True
    assert shapes.final_norm_here(MTP, last=True, numbers=[]) is False
    assert shapes.final_norm_here(UNTIED, last=True, numbers=[]) is True
    names = lambda **kw: [n for n, _, _ in shapes.stage_params(MTP, 1, 1, 4, first=False, numbers=[4, 5, 6, 7], **kw)]  # noqa: E731
    assert "decoder.final_layernorm.weight" in names(last=False, final_norm=True)
    assert "decoder.final_layernorm.weight" not in names(last=True, final_norm=False)
    lay = _lay(dp=4, stages=(4, 4, 0), mtp_stage=1, pp=3)
    (mine,) = budget_dp._buffers(lay, MTP, systems.get("h100"), 0, 1, 1)
    (loss,) = budget_dp._buffers(lay, MTP, systems.get("h100"), 0, 2, 0)
    assert len(mine["sizes"]) == 2 and loss["sizes"] == [1000 // 2 * 256]  # the output layer alone (TP 2)
