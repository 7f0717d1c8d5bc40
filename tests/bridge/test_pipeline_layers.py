"""PIPELINE_LAYERS_UNEVEN against the installed Bridge: GPTModelProvider.provide() asserts "Make sure the number of
model chunks is the same across all pipeline stages." exactly where the rule says the VPP chunks are uneven (the
assert comes before anything that needs a GPU or process groups)."""

from __future__ import annotations

import pytest

from mbridge_overlap import api

CASES = [  # num_layers, PP, VPP, layout fields
    (80, 4, 3, {}), (80, 4, 5, {}), (80, 4, 2, {}), (32, 4, 8, {}), (32, 4, 3, {}), (94, 4, 2, {}),
    (126, 8, 8, {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}),
    (30, 4, 3, {"num_layers_in_first_pipeline_stage": 6, "num_layers_in_last_pipeline_stage": 6}),
]


def _bridge_asserts(n, pp, vpp, layout) -> bool:
    import torch
    from megatron.bridge.models.gpt_provider import GPTModelProvider

    provider = GPTModelProvider(num_layers=n, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=pp,
                                virtual_pipeline_model_parallel_size=vpp, pipeline_dtype=torch.bfloat16, **layout)
    try:
        provider.provide()
    except AssertionError as exc:
        return "model chunks is the same" in str(exc)
    except Exception:  # noqa: BLE001 - anything later than the layer check (no vocab size, no process groups)
        return False
    return False


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}L-pp{c[1]}-vpp{c[2]}{'-flex' if c[3] else ''}")
def test_the_rule_says_what_bridge_s_provider_asserts(case):
    n, pp, vpp, layout = case
    overrides = {"model.num_layers": n, "model.pipeline_model_parallel_size": pp, "model.virtual_pipeline_model_parallel_size": vpp,
                 "model.tensor_model_parallel_size": 1, "comm_overlap.tp_comm_overlap": False,
                 **{f"model.{k}": v for k, v in layout.items()}}
    found = {f.id for f in api.resolve(overrides=overrides, gpus=pp).findings}
    assert ("PIPELINE_LAYERS_UNEVEN" in found) == _bridge_asserts(n, pp, vpp, layout)


FLEXIBLE = [  # Megatron-Core's TransformerConfig checks these at config time (the model's finalize)
    {"model.num_layers": 80, "model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 5,
     "model.num_layers_in_first_pipeline_stage": 18, "model.num_layers_in_last_pipeline_stage": 18},
    {"model.num_layers": 80, "model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 5,
     "model.num_layers_in_first_pipeline_stage": 20, "model.num_layers_in_last_pipeline_stage": 20},
    {"model.num_layers": 80, "model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 2,
     "model.num_layers_in_first_pipeline_stage": 16, "model.num_layers_in_last_pipeline_stage": 16},
    {"model.num_layers": 94, "model.pipeline_model_parallel_size": 8, "model.account_for_loss_in_pipeline_split": True},
    {"model.num_layers": 94, "model.pipeline_model_parallel_size": 8, "model.account_for_loss_in_pipeline_split": True,
     "model.account_for_embedding_in_pipeline_split": True},
    {"model.num_layers": 62, "model.pipeline_model_parallel_size": 4, "model.virtual_pipeline_model_parallel_size": 2,
     "model.account_for_loss_in_pipeline_split": True, "model.account_for_embedding_in_pipeline_split": True},
]


@pytest.mark.parametrize("layout", FLEXIBLE, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_a_flexible_layout_is_refused_as_megatron_core_refuses_it(layout):
    from mbridge_overlap.bridge import adapter, conformance

    case = conformance.Case({**layout, "model.tensor_model_parallel_size": 1, "comm_overlap.tp_comm_overlap": False},
                            gpus=layout["model.pipeline_model_parallel_size"], te=True)
    assert conformance.check(case, adapter.bridge_version()).differences == []


@pytest.mark.parametrize("layout", ["Et*4|(tttt|)*14tmL", "Ettt|(tt|)*29,m|L", "E|t|t|L", "(|tt)*2,tL",
                                    "Et|(tt|)*6,L", "tttt"])
def test_a_layout_string_s_stages_are_megatron_core_s(layout):
    """The stages run/layers.layout_stages counts are PipelineParallelLayerLayout.parse_str_to_list's; with PP and a
    VPP the resolver rejects exactly where TransformerConfig.__post_init__ does, the layers it places included (the recipe catalog's
    deepseek_v3_pretrain_256gpu_gb200_fp8mx_partial_cg_dev_config: 16 stages, PP 4, VPP 2)."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    from mbridge_overlap.run import layers

    stages = len(PipelineParallelLayerLayout.parse_str_to_list(layout))
    assert layers.layout_stages(layout) == stages
    for pp in (1, 2, 4):
        for vpp in (None, 1, 2, 4):
            try:
                theirs = PipelineParallelLayerLayout(layout, pp)
                detected = stages // pp
                megatron_ok = vpp is None or vpp == detected
                # then validate_layer_layout (fuzzU U2-1): the baseline's mtp_num_layers None; its layer count is
                # not known to the skill, so the layout's own decoder count
                flat = [t for stage in PipelineParallelLayerLayout.parse_str_to_list(layout) for t in stage]
                theirs.validate_layer_layout(num_layers=flat.count(LayerType.decoder), mtp_num_layers=None)
            except AssertionError:
                megatron_ok = False
            over = {"model.pipeline_model_parallel_size": pp, "model.virtual_pipeline_model_parallel_size": vpp,
                    "model.pipeline_model_parallel_layout": f"'{layout}'"}  # (quoted, as Hydra takes it: AH1)
            r = api.resolve(overrides=over, gpus=8 * pp)
            ours = not [x for x in r.state.rejections if x.id == "PIPELINE_LAYOUT_REJECTED"]
            assert ours == megatron_ok, (layout, pp, vpp)


@pytest.mark.parametrize("layout, pp, vpp", [("E|t|t|L", 2, None), ("Et|tL", 2, None), ("E|t|t|L", 2, 2),
                                             ("E|tt|tt|tt|tt|tt|tt|L", 2, None), ("E|tt|tt|tt|tt|tt|tt|L", 4, None),
                                             ("E|t|t|L", 2, 4)])
def test_a_layout_string_resolves_as_real_bridge_resolves_it(layout, pp, vpp):
    """Every effective field, or the same rejection, against real Bridge: with no VPP given Megatron-Core takes the
    layout's (at the model's finalize, after Bridge chose the P2P overlap with none)."""
    from mbridge_overlap.bridge import conformance

    over = {"model.pipeline_model_parallel_size": pp, "model.pipeline_model_parallel_layout": layout,
            "model.num_layers": 12 if "tt" in layout else 2}
    if vpp:
        over["model.virtual_pipeline_model_parallel_size"] = vpp
    assert conformance.check(conformance.Case(over, 8 * pp, True), "0.6.2").differences == []


@pytest.mark.parametrize("layout", [["a", "b"], [["decoder"], "decoder"], [{"a": 1}], [None, None], [],
                                    [["decoder"], ["conv"]], [["decoder"], [1]], [["embedding", "decoder"], ["decoder", "loss"]],
                                    "[[embedding, decoder], [decoder, loss]]", "[a, b]", 7, True, {"a": 1}],
                         ids=repr)
def test_a_list_layout_is_refused_where_megatron_core_refuses_it(layout):
    """fuzzN N3: a list that is not a list of stages of layer names was read as no layout; TransformerConfig raises at
    config time for each (an empty one with an IndexError)."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig


    value = _hydra(layout) if isinstance(layout, str) else layout  # (the command line's text as Bridge's Hydra reads it)
    try:
        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=2,
                          pipeline_model_parallel_layout=value, pipeline_dtype=torch.bfloat16)
        megatron_ok = True
    except (AssertionError, IndexError, ValueError, AttributeError):  # (a scalar or a mapping: recheck52 W6)
        megatron_ok = False
    over = {"model.pipeline_model_parallel_size": 2, "model.num_layers": 2, "model.pipeline_model_parallel_layout": layout}
    r = api.resolve(overrides=over, gpus=16)
    assert (not [x for x in r.state.rejections if x.id == "PIPELINE_LAYOUT_REJECTED"]) == megatron_ok, layout


def _hydra(text: str):
    from megatron.bridge.training.utils.omegaconf_utils import parse_hydra_overrides
    from omegaconf import OmegaConf

    cfg = parse_hydra_overrides(OmegaConf.create({"model": {"pipeline_model_parallel_layout": None}}),
                                [f"model.pipeline_model_parallel_layout={text}"])
    return OmegaConf.to_container(cfg, resolve=True)["model"]["pipeline_model_parallel_layout"]


@pytest.mark.parametrize("layout, pp, vpp", [("E|t|t|L", 2, 4), ("E|tt|tt|tt|tt|tt|tt|L", 2, 2)])
def test_a_layout_s_vpp_conflict_is_fixed_with_the_vpp_it_detects(layout, pp, vpp):
    """evalT U2: the conflict got no fix, and a text naming first/last-stage counts Megatron-Core refuses beside a
    layout; the VPP the message detects is the fix, and with it real Bridge resolves as we do."""
    from mbridge_overlap.bridge import conformance

    over = {"model.pipeline_model_parallel_size": pp, "model.pipeline_model_parallel_layout": layout,
            "model.num_layers": 12 if "tt" in layout else 2, "model.virtual_pipeline_model_parallel_size": vpp}
    found = next(f for f in api.resolve(overrides=over, gpus=8 * pp).findings if f.id == "PIPELINE_LAYOUT_REJECTED")
    assert list(found.fix_overrides) == ["model.virtual_pipeline_model_parallel_size"]
    fixed = {**over, **found.fix_overrides}
    assert conformance.check(conformance.Case(fixed, 8 * pp, True), "0.6.2").differences == []
    assert "PIPELINE_LAYOUT_REJECTED" not in {f.id for f in api.resolve(overrides=fixed, gpus=8 * pp).findings}


SPLIT_FIELDS = [  # the first/last counts, account_for_* and a layout, alone and together (recheck55 AB3)
    {"num_layers_in_first_pipeline_stage": 9, "num_layers_in_last_pipeline_stage": 9},
    {"account_for_embedding_in_pipeline_split": True},
    {"num_layers_in_first_pipeline_stage": 9, "account_for_loss_in_pipeline_split": True},
    {"num_layers_in_last_pipeline_stage": 9, "account_for_embedding_in_pipeline_split": True,
     "account_for_loss_in_pipeline_split": True},
    {"pipeline_model_parallel_layout": "Et*10|t*10|t*10L", "account_for_loss_in_pipeline_split": True},
    {"pipeline_model_parallel_layout": "Et*10|t*10|t*10L", "num_layers_in_first_pipeline_stage": 10},
    {"pipeline_model_parallel_layout": "Et*10|t*10|t*10L"},
]


@pytest.mark.parametrize("fields", SPLIT_FIELDS, ids=lambda f: "+".join(sorted(f)))
def test_split_fields_megatron_core_refuses_together_are_refused(fields):
    """TransformerConfig refuses the first/last counts beside account_for_*, and a layout beside either: exactly where
    the skill says PIPELINE_LAYOUT_REJECTED for the same fields (a fix on top of account_for_* was said to run)."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    try:
        TransformerConfig(num_layers=30, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=3,
                          pipeline_dtype=torch.bfloat16, **fields)
        refused = False
    except ValueError as exc:
        refused = "cannot be" in str(exc)
    overrides = {"model.num_layers": 30, "model.pipeline_model_parallel_size": 3, "model.tensor_model_parallel_size": 1,
                 **{f"model.{k}": v for k, v in fields.items()}}
    found = [f for f in api.resolve(overrides=overrides, gpus=3).findings
             if f.id == "PIPELINE_LAYOUT_REJECTED" and "cannot be" in f.message]
    assert bool(found) == refused, [f.message for f in found]


MTP_PLACES = [  # (layout, PP, num_layers, mtp_num_layers): validate_layer_layout's MTP placement and the order of its
    # refusals against PipelineParallelLayerLayout's parsing (recheck61 AH3, AH6, AH7; fuzzV V2-2)
    ("Et*8|t*8|t*8|t*8|t*8|t*8|t*13m|mL", 8, 61, 2), ("Et|tm|L|", 2, 2, 1), ("Et|tm|m|L", 2, 2, 2),
    ("Et|t|mL|", 2, 2, 1), ("Et|t|m|L", 2, 2, 1), ("Et|t||mL", 2, 2, 1), ("Et|t|mm|L", 2, 2, 2), ("Et|tmm|L|", 2, 2, 2),
    ("Et|t|m|mL", 2, 2, 2), ("E|t|tm|L", 2, 2, 1), ("Et|tmL", 1, 2, 1), ("Et|tmL", 2, 2, 1), ("Et|tmmL", 2, 2, 1),
    ("Et*3|" + "t*4|" * 14 + "t*2m|L" + "|" * 15, 8, 61, 1), ("Et|(tt|)*30mL", 8, 61, 1), ("Et*4|(tttt|)*14tmL", 4, 61, 1),
    ("Etx|tL", 4, 2, None), ("Etx|tL|", 2, 2, None), ("Et*00030|t*31L", 2, 61, None), ("Et*00030|t*31L", 2, 60, None),
    ([["embedding", "decoderx"], ["decoder", "loss"]], 4, 2, None), ([["embedding", "decoder"], [1], ["decoder", "loss"]], 3, 2, None),
    ([["embedding", "decoder"], [1], ["decoderx"], ["loss"]], 2, 1, None),  # (rank 0's stages first: decoderx) ([], 2, 2, None),
    ([["embedding", "decoder"], ["encoder", "loss"]], 2, 1, None), ("Et|tmL", 2, 2, 0),
]


@pytest.mark.parametrize("layout, pp, n, mtp", MTP_PLACES, ids=lambda c: str(c)[:40])
def test_a_layout_is_refused_in_megatron_core_s_words_and_order(layout, pp, n, mtp):
    """TransformerConfig with the layout (megatron-core 0.19.2 here; pipeline_parallel_layer_layout.py is byte-identical
    in 0.18.0 to 0.19.2, the 0.5.0 to 0.6.0 venvs): refused exactly where the skill says PIPELINE_LAYOUT_REJECTED, and
    the skill's message is Megatron-Core's first words."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    try:
        TransformerConfig(num_layers=n, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=pp,
                          pipeline_model_parallel_layout=layout, mtp_num_layers=mtp, pipeline_dtype=torch.bfloat16)
        theirs = None
    except (AssertionError, AttributeError, IndexError, ValueError, NotImplementedError) as exc:
        theirs = str(exc) or type(exc).__name__
    over = {"model.num_layers": n, "model.pipeline_model_parallel_size": pp, "model.mtp_num_layers": mtp,
            "model.pipeline_model_parallel_layout": layout if isinstance(layout, list) else f"'{layout}'"}
    r = api.resolve(overrides=over, gpus=8 * pp)
    ours = [x.message for x in r.state.rejections if x.id == "PIPELINE_LAYOUT_REJECTED"]
    assert bool(ours) == (theirs is not None), (ours, theirs)
    if ours:
        head = ours[0].split(" (")[0].split(",")[0].split("IndexError: ")[-1]
        assert theirs.startswith(head) or head in theirs or theirs == "IndexError", (ours[0], theirs)


@pytest.mark.parametrize("recipe, over", [
    ("deepseek_v4_pro_pretrain_256gpu_gb300_fp8mx_config", {}),
    ("deepseek_v4_flash_pretrain_32gpu_h100_bf16_config", {"model.mtp_num_layers": 1}),
    ("deepseek_v4_flash_pretrain_32gpu_h100_bf16_config", {}),
])
def test_a_stand_in_s_mtp_count_decides_no_refusal(recipe, over):
    """recheck61 AH2: DeepSeek-V4's recipes read their model from its Hugging Face config, whose
    num_nextn_predict_layers the bridge sets as mtp_num_layers; the catalog's stand-in has none. The recipe derives its
    layout from the real model (set_deepseek_v4_pipeline_model_parallel_layout: the MTP layers on the last stage), which
    TransformerConfig takes with the real count; so neither the stand-in's null nor its derived layout is a refusal."""
    import inspect
    from types import SimpleNamespace

    import torch
    from megatron.bridge.models.deepseek import deepseek_v4_bridge
    from megatron.core.transformer.transformer_config import TransformerConfig

    assert "num_nextn_predict_layers" in inspect.getsource(deepseek_v4_bridge)
    real = SimpleNamespace(pipeline_model_parallel_size=4, num_layers=43, mtp_num_layers=1)
    deepseek_v4_bridge.set_deepseek_v4_pipeline_model_parallel_layout(real)
    TransformerConfig(num_layers=43, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=4,
                      pipeline_model_parallel_layout=real.pipeline_model_parallel_layout, mtp_num_layers=1,
                      pipeline_dtype=torch.bfloat16)  # (raises if Megatron-Core refused the real layout)
    found = [f.message for f in api.lint(recipe=recipe, overrides=over).findings if f.id == "PIPELINE_LAYOUT_REJECTED"]
    assert found == []
