"""evalZ Z3-2: the budget costs the pipeline rank a config's pipeline_model_parallel_layout loads most (DeepSeek-V3's
recipes set one: 8 decoder layers on each rank but the last, which holds 5 with the MTP layer and the loss); the
decoder layers each rank builds, and their global numbers, are Megatron-Core's PipelineParallelLayerLayout's."""

from __future__ import annotations

import pytest
import torch

from mbridge_overlap.budget.layout import Layout, rank_layers, stage_numbers
from mbridge_overlap.run.layers import stage_decoders

DEEPSEEK = [["embedding"] + ["decoder"] * 8] + [["decoder"] * 8] * 6 + [["decoder"] * 5 + ["mtp", "loss"]]



def _config(layers: int, pp: int, vpp, first, last):
    """Megatron-Core's TransformerConfig of a pipeline split (its checks run in __post_init__)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(num_layers=layers, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=pp,
                             virtual_pipeline_model_parallel_size=vpp, num_layers_in_first_pipeline_stage=first,
                             num_layers_in_last_pipeline_stage=last, pipeline_dtype=torch.bfloat16)


@pytest.mark.parametrize("layout, pp, layers", [
    (DEEPSEEK, 8, 61),
    ("Et*3|t*4|t*4|t*5L", 2, 16),  # VPP 2 from a string
    ("E|(t|)*6tL", 4, 7),  # a first stage of the embedding alone, then one decoder a stage (VPP 2)
])
def test_each_rank_builds_the_decoders_megatron_core_s_layout_gives_it(monkeypatch, layout, pp, layers):
    from megatron.core import parallel_state
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    theirs = PipelineParallelLayerLayout(layout, pp)
    vpp = theirs.virtual_pipeline_model_parallel_size
    monkeypatch.setattr(parallel_state, "get_virtual_pipeline_model_parallel_world_size", lambda: vpp)
    stages = stage_decoders(layout)
    assert stages is not None and len(stages) == pp * vpp
    lay = Layout(tp=1, pp=pp, vp=vpp, cp=1, ep=1, dp=1, sp=False, seq=4096, mbs=1, gbs=8, precision="bf16", domain=8,
                 settings={}, ddp={}, stages=stages)
    for rank in range(pp):
        ids = [i for v in range(vpp) for i in theirs.get_layer_id_list(LayerType.decoder, vp_stage=v, pp_rank=rank)]
        assert rank_layers(lay, rank) == len(ids)
        assert stage_numbers(lay, layers, rank) == ids


@pytest.mark.parametrize("layout, pp, layers, mtp", [
    ("Ex*8|t*24L", 2, 32, None), ("ET*8|T*24L", 2, 32, None), ("Et*8|t*25L", 2, 32, None), ("t*8E|t*24L", 2, 32, None),
    ("Et*16|t*16L*2", 2, 32, None), ("Et*8|t*24mL", 2, 32, None), ("Et*8|t*24mL", 2, 32, 1), ("Et*8|t*24L", 2, 32, None),
    ("Et*8|t*24L", 2, None, None), ("Et*8|mt*24L", 2, 32, 1), ([["embedding", "decoder"], ["decoder", "loss"]], 2, 2, None),
    ([["embedding", "encoder"], ["decoder", "loss"]], 2, 1, None), (DEEPSEEK, 8, 61, 1), (DEEPSEEK, 8, 61, 2),
    (DEEPSEEK, 8, 61, None),
])
def test_a_layout_s_layers_are_refused_as_megatron_core_refuses_them(layout, pp, layers, mtp):
    """fuzzU U2-1: only the stages' count was checked; a layout with another character, the embedding or the loss
    misplaced or twice, another decoder or MTP count, was answered (and costed) though TransformerConfig refuses it."""
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    from mbridge_overlap.run.layers import layout_refusal, parsed

    try:
        theirs = PipelineParallelLayerLayout(layout, pp)
        if layers is not None:  # (without the layer count the skill leaves the decoder count unchecked)
            theirs.validate_layer_layout(num_layers=layers, mtp_num_layers=mtp)
        refused = None
    except (AssertionError, NotImplementedError, IndexError) as exc:
        refused = str(exc)
    stages, ours = parsed(layout, pp)  # (Megatron-Core's order: the layout's parse, then validate_layer_layout)
    if ours is None and layers is not None:
        ours = layout_refusal(stages, pp, layers, mtp)
    assert (ours is None) == (refused is None), (ours, refused)
    if ours is not None:
        assert refused.startswith(ours.split(",")[0].split(" but got")[0]), (ours, refused)


@pytest.mark.parametrize("pp, vpp, layers, first, last", [
    (4, None, 32, 2, 2), (4, None, 30, None, 3), (4, None, 31, 4, None), (4, 2, 32, 4, 4), (8, None, 61, 5, 0),
    (2, None, 32, 10, None), (2, None, 32, 10, 22), (4, 2, 40, 2, 6), (4, None, 32, 3, 3), (4, 2, 32, 3, 5),
    (3, None, 30, 0, None), (2, 2, 8, 2, 6),
])
def test_the_first_and_last_stages_counts_split_the_layers_as_megatron_core_builds_them(monkeypatch, pp, vpp, layers,
                                                                                          first, last):
    """recheck64 AK2: num_layers_in_first/last_pipeline_stage were not read when the layers also split evenly (an
    8-layer rank costed where Megatron-Core builds 14): each rank's decoders, by chunk, and their global numbers are
    Megatron-Core's get_num_layers_to_build and get_transformer_layer_offset; a split TransformerConfig refuses is
    none (the budget's even split, said by _uneven_split)."""
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    from mbridge_overlap.budget.layout import chunk_layers, first_last_stages

    lay = Layout(tp=1, pp=pp, vp=vpp or 1, cp=1, ep=1, dp=1, sp=False, seq=4096, mbs=1, gbs=8, precision="bf16",
                 domain=8, settings={}, ddp={}, first_last=(first, last))
    stages = first_last_stages(lay, layers)
    try:
        cfg = _config(layers, pp, vpp, first, last)
        per = [[get_num_layers_to_build(cfg, vp_stage=v if vpp else None, pp_rank=r) for v in range(vpp or 1)]
               for r in range(pp)]
        assert sum(map(sum, per)) == layers
        monkeypatch.setattr(parallel_state, "get_virtual_pipeline_model_parallel_world_size", lambda: vpp)
        monkeypatch.setattr(parallel_state, "get_pipeline_model_parallel_world_size", lambda: pp)
        ids = [[get_transformer_layer_offset(cfg, vp_stage=v if vpp else None, pp_rank=r) + i
                for v in range(vpp or 1) for i in range(per[r][v])] for r in range(pp)]
    except (AssertionError, ValueError, ZeroDivisionError):  # (PP 2, both counts and VPP: the offset divides by 0)
        assert stages == (), (pp, vpp, layers, first, last)
        return
    lay = Layout(**{**lay.__dict__, "stages": stages})
    for r in range(pp):
        assert list(chunk_layers(lay, r)) == per[r]
        assert stage_numbers(lay, layers, r) == ids[r]


@pytest.mark.parametrize("pp, vpp, layers, first, last", [
    (3, None, 32, 32, 2), (4, None, 32, 20, 20), (2, None, 32, 40, None), (4, 2, 32, 30, 10), (3, None, 32, None, 36),
    (4, None, 32, 33, None), (2, None, 32, 20, 20), (5, None, 32, 2, 38), (3, None, 32, 30, 2),
])
def test_first_and_last_counts_past_num_layers_are_megatron_core_s(pp, vpp, layers, first, last):
    """fuzzY Y2-5: where the first and last stages' counts sum past num_layers, TransformerConfig takes the split
    wherever the (negative) middle count divides over the middle stages, and get_num_layers_to_build gives those ranks
    that count: over_counted says so and costs the first and last ranks' counts; where Megatron-Core refuses, None."""
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    from mbridge_overlap.budget.layout import over_counted

    lay = Layout(tp=1, pp=pp, vp=vpp or 1, cp=1, ep=1, dp=1, sp=False, seq=4096, mbs=1, gbs=8, precision="bf16",
                 domain=8, settings={}, ddp={}, first_last=(first, last))
    got = over_counted(lay, layers)
    try:
        cfg = _config(layers, pp, vpp, first, last)
    except ValueError:
        assert got is None
        return
    per = [sum(get_num_layers_to_build(cfg, vp_stage=v if vpp else None, pp_rank=r) for v in range(vpp or 1))
           for r in range(pp)]
    if min(per) >= 0:
        assert got is None
        return
    assert got is not None and str(min(per) // (vpp or 1) * (vpp or 1)) in got[1] and "get_num_layers_to_build" in got[1]
    stages, said = got
    # recheck67 AN-2: not capped at num_layers: what each spec path really builds, from Megatron-Core's own builders
    # on the CPU: one layer's ModuleSpec (Bridge's GPTModelProvider default) through _get_block_submodules, and
    # get_gpt_decoder_block_spec's slice of the model's layer specs
    single, block = _built_by_spec(cfg, pp, vpp)
    assert list(stages) == [single[k * pp + r] for k in range(vpp or 1) for r in range(pp)] and max(single) > 0
    by_rank = lambda per_stage: ", ".join(str(sum(per_stage[k * pp + r] for k in range(vpp or 1))) for r in range(pp))  # noqa: E731
    assert f"the ranks build {by_rank(single)} decoder layers" in said
    assert f"at each rank's offset instead: {by_rank(block)}, not an even split" in said
    assert "at most" not in said


def _built_by_spec(cfg, pp: int, vpp) -> tuple:
    """The decoder layers each stage (k x PP + rank) builds with one layer's spec and with the decoder block spec."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import _get_block_submodules

    single, block = [], []
    for k in range(vpp or 1):
        for r in range(pp):
            v = k if vpp else None
            single.append(len(_get_block_submodules(cfg, get_gpt_layer_local_spec(), vp_stage=v, pp_rank=r).layer_specs))
            block.append(len(get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, vp_stage=v, pp_rank=r).layer_specs))
    return single, block
