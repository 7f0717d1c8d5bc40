"""The pipeline rank the budget costs under a config's pipeline_model_parallel_layout, and that rank's model chunks
(tier 1). recheck63 AJ1: the output layer's logits run on the last rank alone (GPTModel builds output_layer where
post_process; the layout's 'L' is its last layer), yet were spread over every stage, so on DeepSeek-V3's layout
recipes an 8-layer rank was costed where the rank of the MTP block and the loss is the busiest. evalAB AB2-1: the DP
buckets split the costed rank's layers into model chunks evenly, not as the layout places them (DeepSeek-V3's
Et|(tt|)*30mL: chunk 0 of rank 0 holds the embedding and dense layer 0 alone). Tier 2
(tests/bridge/test_budget_layout_chunks.py) holds the chunks' buckets to Megatron-Core's DDP."""

import pytest

from mbridge_overlap import api
from mbridge_overlap.budget import dp as budget_dp, estimate, shape as shapes
from mbridge_overlap.budget.layout import Layout, chunk_layers, stage_numbers


def _costed(monkeypatch, overrides=None, **kw):
    """(the budget as the config leaves it, [(budget, Costed) of each candidate rank of that budget])."""
    got = []
    orig = estimate._at

    def spy(lay, shape, system, shape_from, costed, *rest):
        b = orig(lay, shape, system, shape_from, costed, *rest)
        got.append((b, costed, lay, shape, system))
        return b

    monkeypatch.setattr(estimate, "_at", spy)
    api.budget(overrides or {}, **kw)
    lay = got[0][2]
    first = [g for g in got if g[2].settings == lay.settings]
    first = first[:len({c.rank for _, c, *_ in first})]
    # (the one the budget returned: the only one its rank line is added to, where there is a layout)
    said = [g for g in first if any("the budget costs pipeline rank" in a for a in g[0].assumptions)]
    return (said or first)[0][0], first


def _said(b) -> str:
    (line,) = [a for a in b.assumptions if "pipeline_model_parallel_layout" in a]
    return line


def _once(b) -> float:
    """A candidate's once-an-iteration exposed time (DP, the embedding's all-reduce, finalize), from its rows."""
    return sum(i.seconds - i.hidden for i in b.items
               if i.dimension not in ("tp", "cp", "ep") and not (i.dimension == "pp" and i.collective == "send_recv"))


@pytest.mark.parametrize("recipe, rank, after", [
    # PP 8: 8 MoE layers a rank, 5 with the MTP layer and loss; next the rank whose tail is the next longest
    ("deepseek_v3_pretrain_256gpu_b200_bf16_config", 1, "next, rank 0 (8 decoder layers (3 dense, 5 MoE) and the embedding)"),
    ("deepseek_v3_pretrain_256gpu_b300_bf16_config", 1,  # PP 8 x VPP 2
     "next, rank 7 (5 MoE decoder layers, the MTP layers and the output layer and loss)"),
])
def test_deepseek_v3_s_mtp_and_loss_rank_is_costed_with_its_whole_output_layer(monkeypatch, recipe, rank, after):
    """With the output layer's whole-vocabulary logits on the last rank (the budget's own rates: 53.6 ms of forward
    against 48.1 ms on an 8-layer rank, B200) the MTP block's and the loss's rank is the slowest stage; it was costed
    until the costed rank became the longest iteration under the schedule (costrank): rank 1's DP tail is longer."""
    b, built = _costed(monkeypatch, recipe=recipe)
    by = {c.rank: (bb, c) for bb, c, *_ in built}
    _, _, lay, shape, system = built[0]
    assert set(by) == {0, 1, 7}  # (ranks 2-6 hold what rank 1 holds: the first of equals stands for them)
    c7, c1 = by[7][1], by[1][1]
    assert (c7.layers, c7.with_mtp, c7.counts) == (5, True, {False: 0, True: 5})
    assert (c1.layers, c1.with_mtp, c1.counts) == (8, False, {False: 0, True: 8})
    rate = system.gemm_tflops(lay.precision) * 1e12 * system.efficiency
    logits = shapes.logits_flops(shape, lay.seq * lay.mbs, lay.tp, lay.cp) / rate
    layer = c1.fwd / 8
    mtp_block = c7.fwd - 5 * layer - logits
    assert mtp_block > layer  # the MTP block: a MoE layer, eh_proj and its own logits
    assert c7.fwd == pytest.approx(5 * layer + mtp_block + logits) and c7.fwd > c1.fwd
    assert 5 * layer + mtp_block < c1.fwd  # (without the output layer the 8-layer rank would be the busier)
    # the slowest stage is rank 7, but under the schedule every rank's steps and waits end together, so a rank's
    # iteration is that end plus its once-an-iteration tail: rank 1's 8 MoE layers' DP buffers make it the longest,
    # and the step is the slowest rank's (the optimizer's gradient-norm all-reduce): rank 1 is costed
    p = b.pipeline
    assert max(range(8), key=lambda r: p.stages[r]) == 7
    tails = {c.rank: _once(bb) for bb, c, *_ in built}
    assert max(tails, key=tails.get) == rank and tails[1] > tails[7]
    assert b.compute_s == pytest.approx(lay.micro_batches * (c1.fwd + c1.bwd))
    said = _said(b)
    assert (f"costs pipeline rank {rank}, the busiest with ranks 2, 3, 4, 5 and 6, which hold the same (rank 1 the first, "
            "with the least pipeline slack beside its DP): each holds 8 MoE decoder layers;") in said
    assert after in said and max((t, r) for r, t in tails.items() if r != rank)[1] == int(after.split()[2])
    assert any("the pipeline rank of the MTP layers (7) is not the busiest" in a for a in b.assumptions)


def test_a_rank_whose_ep_all_to_alls_cross_the_network_can_outweigh_the_loss_rank(monkeypatch):
    """DeepSeek-V3's GB200 recipe (PP 4 x VPP 4, EP 64 across the network): the loss's rank 3 computes longest
    (13 MoE layers, the MTP block, the output layer), but rank 1's 16 MoE layers' all-to-alls over the network make its
    iteration the longer one: the budget costs it, and says both. (Placed in domains of 72 GPUs from rank 0; Bridge's
    perf launcher's Slurm segments of 16 nodes keep each EP group of 64 in one domain.)"""
    b, built = _costed(monkeypatch, recipe="deepseek_v3_pretrain_256gpu_gb200_bf16_config", machine_facts={"nvlink_domain": 72})
    by = {c.rank: (bb, c) for bb, c, *_ in built}
    (b1, c1), (b3, c3) = by[1], by[3]
    # under the schedule every rank ends together and their once-an-iteration tails are equal (to the microsecond):
    # the iterations tie, and the slowest stage (its micro-batch with its exposed all-to-alls) is costed
    assert c3.fwd + c3.bwd > c1.fwd + c1.bwd and b.pipeline.stages[1] > b.pipeline.stages[3]
    assert round(_once(b1), 6) == round(_once(b3), 6) == round(_once(by[0][0]), 6)
    assert b.iteration_s == b1.iteration_s == pytest.approx(b3.iteration_s, rel=1e-9)
    said = _said(b)
    assert "costs pipeline rank 1, the busiest with rank 2, which holds the same (rank 1 the first, with the least " \
        "pipeline slack beside its DP): each holds 16 MoE decoder layers;" in said
    assert ("ranks 0 and 3 (16 decoder layers (3 dense, 13 MoE) and the embedding; 13 MoE decoder layers, the MTP layers "
            "and the output layer and loss) end theirs as late") in said and "rank 1 is costed as the slowest stage" in said
    assert any("the pipeline rank of the MTP layers (3) is not the busiest" in a for a in b.assumptions)


def test_without_a_layout_the_output_layer_is_spread_as_before_and_with_one_it_is_the_last_rank_s(monkeypatch):
    """No layout: every rank as many layers, the logits spread over PP (the published rows' fit rests on it). The
    same split as a layout (Et*16|t*16L) puts the whole output layer on rank 1, which is costed: half the logits'
    forward more a micro-batch, three times over with the backward."""
    over = {"model.pipeline_model_parallel_size": 2, "model.context_parallel_size": 1}
    even, (only,) = _costed(monkeypatch, over, recipe="llama3_8b_pretrain_config", gpus=16)
    assert only[1].rank == 0 and not any("pipeline_model_parallel_layout" in a for a in even.assumptions)
    laid, built = _costed(monkeypatch, {**over, "model.pipeline_model_parallel_layout": "Et*16|t*16L"},
                          recipe="llama3_8b_pretrain_config", gpus=16)
    _, _, lay, shape, system = built[0]
    rate = system.gemm_tflops(lay.precision) * 1e12 * system.efficiency
    logits = shapes.logits_flops(shape, lay.seq * lay.mbs, lay.tp, lay.cp) / rate
    assert laid.compute_s - even.compute_s == pytest.approx(lay.micro_batches * 3 * logits / 2)
    assert "costs pipeline rank 1, the busiest: it holds 16 decoder layers and the output layer and loss" in _said(laid)
    # (both ranks end with the pipeline and the same tail: rank 0 named as ending as late, rank 1 the slower stage)
    assert "rank 0 (16 decoder layers and the embedding) ends its as late" in _said(laid)


def test_the_mtp_block_is_costed_where_the_layout_s_m_is_not_where_the_loss_is(monkeypatch):
    """A layout with the MTP layers on a middle rank and the loss alone on the last (Et*3|t*3,m|L's shape): the middle
    rank holds the decoder layers and the MTP block, the last only the output layer."""
    shape = {"num_layers": 8, "hidden_size": 4096, "ffn_hidden_size": 14336, "num_attention_heads": 32,
             "num_query_groups": 8, "vocab_size": 128256, "mtp_num_layers": 1}
    over = {"model.pipeline_model_parallel_size": 3, "model.context_parallel_size": 1, "model.mtp_num_layers": 1, "model.num_layers": 8,
            "model.pipeline_model_parallel_layout": "'Et*4|t*4,m|L'"}
    b, built = _costed(monkeypatch, over, recipe="llama3_8b_pretrain_config", gpus=24, shape=shape)
    by = {c.rank: c for _, c, *_ in built}
    assert (by[1].layers, by[1].with_mtp, by[2].layers, by[2].with_mtp) == (4, True, 0, False)
    assert by[2].fwd < by[0].fwd < by[1].fwd
    assert "costs pipeline rank 1, the busiest: it holds 4 decoder layers and the MTP layers;" in _said(b)



def _lay(stages, pp, **kw):
    return Layout(tp=1, pp=pp, vp=len(stages) // pp, cp=1, ep=1, dp=8, sp=False, seq=4096, mbs=1, gbs=64,
                  precision="bf16", domain=8, settings={"overlap_grad_reduce": True}, ddp={}, stages=tuple(stages), **kw)


def test_a_layout_s_chunks_are_its_own_an_empty_one_kept():
    """chunk_layers is get_num_layers_to_build(vp_stage=k, pp_rank=r) (tier 2 holds that); _chunks puts each layer in
    the layout's chunk, the embedding in chunk 0, the MTP layers and the output layer in the last; a chunk without
    layers stays a chunk of its own (its index decides its bucketing)."""
    deepseek = [1] + [2] * 30 + [0]  # Et|(tt|)*30mL on PP 8: VPP 4
    lay = _lay(deepseek, 8)
    assert chunk_layers(lay, 0) == (1, 2, 2, 2) and chunk_layers(lay, 7) == (2, 2, 2, 0) and chunk_layers(lay, 6) == (2,) * 4
    assert chunk_layers(_lay([8, 8], 2), 1) == (8,) and chunk_layers(Layout(**{**lay.__dict__, "stages": ()}), 0) == ()
    params = [("embedding.word_embeddings.weight", 1, False)] + [(f"decoder.layers.{i}.x", 1, False) for i in range(3)]
    assert budget_dp._chunks(params, 3, 3, split=(0, 1, 2)) == [params[:1], params[1:2], params[2:]]
    assert budget_dp._chunks(params[1:], 3, 3, split=(0, 3, 0)) == [[], params[1:], []]
    tail = [("decoder.final_layernorm.weight", 1, False), ("mtp.layers.0.enorm.weight", 1, False),
            ("output_layer.weight", 1, False)]
    got = budget_dp._chunks(params + tail, 3, 3, split=(1, 2, 0), final=1)
    assert got == [params[:2], params[2:] + tail[:1], tail[1:]]
    # the even split, as before, where there is no layout (the empty chunks kept now)
    assert budget_dp._chunks(params, 3, 2) == [params[:3], params[3:]]


def test_deepseek_v3_s_rank_0_has_no_expert_bucket_in_chunk_0(monkeypatch):
    """evalAB AB2-1: on DeepSeek-V3's H100 perf recipe at 256 GPUs with EP 16 (Et|(tt|)*30mL) rank 0's chunk 0 holds
    the embedding and dense layer 0: its DDP has no expert buffer, and the experts' three chunks are a bucket each
    (disable_bucketing past chunk 0), 3 expert buckets where the even split made 4 (8 with overlap_grad_reduce)."""
    over = {"model.expert_model_parallel_size": 16}
    for grad in (False, True):
        b, built = _costed(monkeypatch, {**over, "comm_overlap.overlap_grad_reduce": grad},
                           recipe="perf_recipes.deepseek_v3_pretrain_1024gpu_h100_bf16_config", gpus=256)
        _, _, lay, shape, system = built[0]
        dense, experts = budget_dp._buffers(lay, shape, system, 0, 0, 0)
        assert [len(c) for c in experts["chunks"]] == [0, 1, 1, 1]
        one_layer = sum(n for _, n, x in shapes.layer_params(shape, lay.tp, lay.ep, lay.etp, "", True) if x)
        assert experts["sizes"] == [2 * one_layer] * 3
        first = [n for g in dense["chunks"][0] for n, _ in g]
        assert len(first) == (3 if grad else 2)  # the embedding alone (shared with the MTP rank's), then layer 0's
        vocab = -(-shape.vocab_size // lay.tp) * shape.hidden_size
        assert vocab in first and sum(first) == vocab + sum(
            n for _, n, _ in shapes.layer_params(shape, lay.tp, lay.ep, lay.etp, "", False))
        assert stage_numbers(lay, shape.num_layers, 0)[:3] == [0, 15, 16]


UNEVEN = {"model.tensor_model_parallel_size": 2, "model.pipeline_model_parallel_size": 4, "model.seq_length": 8192,
          "dataset.seq_length": 8192, "train.global_batch_size": 128}


def test_the_first_and_last_stages_counts_put_the_busiest_rank_s_layers_in_the_budget():
    """recheck64 AK2: num_layers_in_first/last_pipeline_stage 2 and 2 on Llama-3-8B's 32 layers over PP 4 build
    2, 14, 14, 2 decoder layers (Megatron-Core's get_num_layers_to_build: tests/bridge/test_budget_layout_stages.py);
    the budget costed 8 a rank, as the even split, and said nothing."""
    even = api.budget(UNEVEN, model="llama3_8b", gpus=64).to_dict()["budget"]
    uneven = api.budget({**UNEVEN, "model.num_layers_in_first_pipeline_stage": 2,
                         "model.num_layers_in_last_pipeline_stage": 2}, model="llama3_8b", gpus=64).to_dict()["budget"]

    def tp_count(b):
        return next(c["count"] for c in b["collectives"] if c["dimension"] == "tp" and c["collective"] == "all_reduce")

    assert tp_count(even) == 8 * 16 * 2 and tp_count(uneven) == 14 * 16 * 2  # layers x micro-batches x fwd/bwd
    assert uneven["compute_ms"] > even["compute_ms"]
    said = [a for a in uneven["assumptions"] if "num_layers_in_first/last_pipeline_stage place" in a]
    assert said and "(2, 14, 14, 2 on the 4 pipeline ranks)" in said[0] and "costs pipeline rank 1" in said[0]


def test_ranks_tied_as_the_busiest_are_named_and_next_is_below_them():
    """evalAD AD2-3: Llama-3-70B, PP 4 x VPP 5, first and last stages 15 layers: Megatron-Core's get_num_layers_to_build
    gives ranks 1 and 2 (80 - 30) / 2 = 25 layers each, neither with the embedding nor the output layer; the budget
    named rank 1 alone, and rank 3 (15 layers and the loss) as next, as if rank 2 were faster."""
    b = api.budget({"model.num_layers_in_first_pipeline_stage": 15, "model.num_layers_in_last_pipeline_stage": 15},
                   recipe="llama3_70b_pretrain_64gpu_h100_bf16_config").to_dict()["budget"]
    (said,) = [a for a in b["assumptions"] if "(15, 25, 25, 15 on the 4 pipeline ranks)" in a]
    assert ("the budget costs pipeline rank 1, the busiest with rank 2, which holds the same (rank 1 the first, with "
            "the least pipeline slack beside its DP): each holds 25 decoder layers;") in said
    # ranks 0 and 3 end their iterations with the pipeline too (the same once-an-iteration tail): named, rank 1 the
    # slowest stage of them (25 layers); no rank is below them, so none is "next"
    assert ("ranks 0 and 3 (15 decoder layers and the embedding; 15 decoder layers and the output layer and loss) end "
            "theirs as late") in said and "rank 1 is costed as the slowest stage of them" in said
    assert "next, " not in said


def test_the_bottleneck_stage_is_named_by_the_stages_own_pace():
    """evalAF AF-1: Llama-3-70B PP 4 x VPP 2, first 18 and last 22 layers (Megatron-Core 0.19.2's get_num_layers_to_build:
    18, 20, 20, 22): every rank's iteration ends with the pipeline, so 'next' by iteration named the lowest rank (0,
    18 layers) where ranks 1 and 2 (20) are the slower stages by the budget's own stage times. The line now ranks
    the stages by their micro-batch with its exposed communication and says what to move."""
    over = {"model.tensor_model_parallel_size": 8, "model.sequence_parallel": True, "model.pipeline_model_parallel_size": 4,
            "model.virtual_pipeline_model_parallel_size": 2, "model.num_layers_in_first_pipeline_stage": 18,
            "model.num_layers_in_last_pipeline_stage": 22, "comm_overlap.tp_comm_overlap": True, "model.seq_length": 8192,
            "dataset.seq_length": 8192, "train.global_batch_size": 128, "train.micro_batch_size": 1}
    b = api.budget(over, model="llama3_70b", gpus=128, gpu="h100").to_dict()["budget"]
    (said,) = [a for a in b["assumptions"] if "(18, 20, 20, 22 on the 4 pipeline ranks)" in a]
    s = b["pipeline"]["stages_ms"]
    assert s[3] > s[1] == s[2] > s[0]  # (the budget's own stage times)
    assert (f"slowest first: rank 3 {s[3]:,.1f} ms, ranks 1 and 2 {s[1]:,.1f} ms, rank 0 {s[0]:,.1f} ms: the pipeline "
            "runs at the slowest stage's pace (rank 3: the others wait on it), so moving decoder layers off rank 3 toward "
            "rank 0 (num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage)") in said
    # and the budget agrees: the even split (20 each) is the shorter step
    even = api.budget({**over, "model.num_layers_in_first_pipeline_stage": 20, "model.num_layers_in_last_pipeline_stage": 20},
                      model="llama3_70b", gpus=128, gpu="h100").to_dict()["budget"]
    assert even["iteration_ms"] < b["iteration_ms"]
