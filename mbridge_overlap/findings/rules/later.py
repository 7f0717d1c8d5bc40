"""Failures after the config step that the config already decides: at setup or at the first step."""

from __future__ import annotations

from .. import Shell, make, shell
from ..proof import fixed
from ...run.resolver import State
from ...values import fmt
from ..registry import check
from .common import every_request, owner_key, tp_overlap_precision_problem
from ...run import layers
from ...run.vpp import hybrid as vpp_hybrid, refusal_of as vpp_refusal

@check("VPP_WITHOUT_PP")
def vpp_without_pp(state: State):
    model = state.model
    if model["virtual_pipeline_model_parallel_size"] is not None and model["pipeline_model_parallel_size"] <= 1:
        c = {"model.virtual_pipeline_model_parallel_size": None}
        o, fix = fixed(state, "VPP_WITHOUT_PP", [c])
        yield make("VPP_WITHOUT_PP", fix_overrides=o, fix=fix, vpp=model["virtual_pipeline_model_parallel_size"])


@check("VPP_REFUSED_BY_MODEL")
def vpp_refused_by_model(state: State):
    """Bridge's Hybrid, Mamba, FalconH1 and T5 providers assert no VPP when they build the model (evalT U1)."""
    vpp = state.model["virtual_pipeline_model_parallel_size"]
    refused = vpp_refusal(state) if vpp is not None else None
    if refused is None:
        return
    o, fix = fixed(state, "VPP_REFUSED_BY_MODEL", [{"model.virtual_pipeline_model_parallel_size": None}])
    yield make("VPP_REFUSED_BY_MODEL", fix_overrides=o, fix=fix, vpp=fmt(vpp), who=refused[0], said=refused[1])


@check("PIPELINE_LAYERS_NOT_CHECKED")
def pipeline_layers_not_checked(state: State):
    """VPP set where the layer count is not known: whether it splits each stage evenly is not checked (evalU V1)."""
    model = state.model
    pp, vpp = model["pipeline_model_parallel_size"], model["virtual_pipeline_model_parallel_size"]
    req = state.request
    if pp > 1 and (vpp or 1) > 1 and not layers.vpp_checked(req):
        yield make("PIPELINE_LAYERS_NOT_CHECKED", pp=pp, vpp=vpp)


@check("PIPELINE_LAYERS_UNEVEN")
def pipeline_layers_uneven(state: State):
    """Megatron-Core builds num_layers / PP layers per stage and Bridge's GPTModelProvider.provide splits a stage into
    VPP chunks of equal size: both assert when the model is built, where the layout is even (no flexible layout)."""
    model = state.model
    pp, vpp = model["pipeline_model_parallel_size"], model["virtual_pipeline_model_parallel_size"]
    known, hybrid = layers.known(state.request), vpp_hybrid(state)
    if pp <= 1 or known is None or layers.flexible(state.request, hybrid=bool(hybrid)):
        return
    n, where = known
    if n % pp and hybrid:
        # a hybrid model splits its layers in Megatron-Core's select_pipeline_segment, which reads the first and last
        # stages' counts and not account_for_* (recheck54 Y1: that fix held here and failed in Bridge)
        clear = _other_split_keys(state)  # Megatron-Core refuses them beside first/last counts (recheck55 AB3)
        o, fix = fixed(state, "PIPELINE_LAYERS_UNEVEN", [{**c, **clear} for c in _first_last(n, pp)], otherwise=shell(
            "a pipeline_model_parallel_size that divides {n}, or the first and last stages' layer counts", n=n))
        yield make("PIPELINE_LAYERS_UNEVEN", fix_overrides=o, layers=n, where=where, pp=pp, what=f"{n} layers are not a multiple of PP {pp}",
                   raised="Megatron-Core's hybrid layer allocation (select_pipeline_segment) raises 'Number of layers "
                          f"({n}) must be evenly divisible by pipeline-model-parallel-size ({pp}) when no pipe separators "
                          "are specified in the pattern.' (account_for_* does not change its split)", fix=fix)
    elif n % pp:
        # the embedding and the loss counted as layers, as Bridge's Llama 3.1 405B recipes split 126 layers (evalI D4)
        o, fix = fixed(state, "PIPELINE_LAYERS_UNEVEN", [
            {"model.account_for_embedding_in_pipeline_split": True, "model.account_for_loss_in_pipeline_split": True},
            {"model.account_for_embedding_in_pipeline_split": True}, {"model.account_for_loss_in_pipeline_split": True}],
            otherwise=shell("a pipeline_model_parallel_size that divides {n}, or an uneven layout "
                            "(model.num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage)", n=n))
        yield make("PIPELINE_LAYERS_UNEVEN", fix_overrides=o, layers=n, where=where, pp=pp, what=f"{n} layers are not a multiple of PP {pp}",
                   raised="Megatron-Core's TransformerBlock (get_num_layers_to_build) asserts "
                          f"'num_layers={n} should be divisible by config.pipeline_model_parallel_size={pp}'", fix=fix)
    elif vpp and (n // pp) % vpp and vpp_refusal(state) is None:  # (a model that refuses VPP asserts that first)
        per_stage = n // pp
        options = sorted((d for d in range(2, per_stage + 1) if per_stage % d == 0), key=lambda d: (abs(d - vpp), d))
        cands = [{"model.virtual_pipeline_model_parallel_size": d} for d in options[:2]]
        o, fix = fixed(state, "PIPELINE_LAYERS_UNEVEN", cands + [{"model.virtual_pipeline_model_parallel_size": None}])
        yield make("PIPELINE_LAYERS_UNEVEN", fix_overrides=o, fix=fix, layers=n, where=where, pp=pp,
                   what=f"{per_stage} layers per stage are not a multiple of VPP {vpp}",
                   raised="Bridge's GPTModelProvider.provide asserts 'Make sure the number of model chunks is the same "
                          "across all pipeline stages.'")


def _other_split_keys(state: State) -> dict:
    """The layout and account_for_* a request sets, unset: TransformerConfig refuses either beside the first and last
    stages' counts (transformer_config.py, __post_init__)."""
    _first, _last, *counted = layers.split_fields(state.request)
    out = {"model.pipeline_model_parallel_layout": None} if layers.layout_set(state.request) else {}
    return out | {f"model.account_for_{k}_in_pipeline_split": False for k, on in zip(("embedding", "loss"), counted) if on}


def _first_last(n: int, pp: int) -> list[dict]:
    """First and last stages' layer counts that leave the middle stages an even share, the most even first."""
    out = []
    for first in sorted(range(1, n), key=lambda x: abs(x - n / pp)):
        rest = n - first
        middle = pp - 2
        last = rest if middle == 0 else next((x for x in sorted(range(1, rest), key=lambda x: abs(x - first))
                                              if (rest - x) % middle == 0 and (rest - x) // middle >= 1), None)
        if last:
            out.append({"model.num_layers_in_first_pipeline_stage": first, "model.num_layers_in_last_pipeline_stage": last})
        if len(out) == 2:
            break
    return out


@check("P2P_OVERLAP_WITHOUT_INTERLEAVING", "P2P_OVERLAP_AND_BATCHED")
def p2p_overlap(state: State):
    model = state.model
    pp, vpp = model["pipeline_model_parallel_size"], model["virtual_pipeline_model_parallel_size"]
    if pp <= 1 or not model["overlap_p2p_comm"]:
        return
    params = dict(pp=pp, vpp=fmt(vpp), batch=fmt(model["batch_p2p_comm"]))
    if vpp is None:
        c = {owner_key(state, "overlap_p2p_comm"): False}
        o, fix = fixed(state, "P2P_OVERLAP_WITHOUT_INTERLEAVING", [c])
        yield make("P2P_OVERLAP_WITHOUT_INTERLEAVING", fix_overrides=o,
                   fix=shell("{fix}, or model.virtual_pipeline_model_parallel_size >= 2 for P2P overlap", fix=fix), **params)
    elif model["batch_p2p_comm"]:
        c = {owner_key(state, "batch_p2p_comm"): False}
        o, fix = fixed(state, "P2P_OVERLAP_AND_BATCHED", [c])
        yield make("P2P_OVERLAP_AND_BATCHED", fix_overrides=o, fix=fix, **params)


@check("PARAM_GATHER_WITH_OPTIMIZER_STEP_SINGLE_CHUNK")
def param_gather_with_step(state: State):
    model, opt = state.model, state.optimizer
    if not opt["overlap_param_gather_with_optimizer_step"]:
        return
    if opt["use_distributed_optimizer"] and (model["virtual_pipeline_model_parallel_size"] or 1) <= 1:
        c = every_request(state, "overlap_param_gather_with_optimizer_step", False)
        o, fix = fixed(state, "PARAM_GATHER_WITH_OPTIMIZER_STEP_SINGLE_CHUNK", [c])
        yield make("PARAM_GATHER_WITH_OPTIMIZER_STEP_SINGLE_CHUNK", fix_overrides=o,
                   fix=shell("{fix} (it needs the interleaved schedule, VPP >= 2)", fix=fix), vpp=fmt(model["virtual_pipeline_model_parallel_size"]))


@check("TP_OVERLAP_UNSUPPORTED_PRECISION")
def unsupported_tp_overlap_precision(state: State):
    model = state.model
    why = tp_overlap_precision_problem(model)
    if model["tp_comm_overlap"] and why:
        c = {owner_key(state, "tp_comm_overlap"): False}
        o, fix = fixed(state, "TP_OVERLAP_UNSUPPORTED_PRECISION", [c])
        recipe = state.request.mixed_precision.recipe if state.request.mixed_precision else "the model's precision"
        yield make("TP_OVERLAP_UNSUPPORTED_PRECISION", fix_overrides=o, what=f"{why[0]} ({recipe})", why=why[1],
                   fix=shell("{fix}, as Bridge's recipes with this precision and TP > 1 have it", fix=fix))


@check("TP_OVERLAP_OFF_MLA")
def tp_overlap_off_mla(state: State):
    """Megatron-Core's TELinear sets the model's shared tp_comm_overlap to False as it builds a linear whose userbuffers
    name is not qkv, proj, fc1 or fc2: MLASelfAttention's q_down_proj (q_proj without a query down projection), so
    every module built after the first MLA layer's runs without userbuffers (tests/bridge/test_mla_tp_overlap.py)."""
    if not state.model["tp_comm_overlap"]:
        return
    where = layers.multi_latent_attention(state.request, state.scenario.family)
    if where is None:
        return
    o, fix = fixed(state, "TP_OVERLAP_OFF_MLA", [{owner_key(state, "tp_comm_overlap"): False}])
    yield make("TP_OVERLAP_OFF_MLA", fix_overrides=o, where=where, tp=state.model["tensor_model_parallel_size"],
               fix=shell("{fix}, as every Bridge recipe of an MLA model has it (CommOverlapConfig(tp_comm_overlap=False))", fix=fix))


@check("TP_OVERLAP_OFF_MTP", "TP_OVERLAP_OFF_MTP_DECODER")
def tp_overlap_off_mtp(state: State):
    """Megatron-Core's TELinear sets the shared tp_comm_overlap to False as it builds the first MTP layer's eh_proj
    (userbuffers name mtp_eh_proj): the MTP layers, built after the decoder, run without userbuffers, and so do the
    op fuser's MLPs (TEFusedMLP reads the flag at the first step) on that rank (tests/bridge/test_mtp_tp_overlap.py).
    On an MLA model the first MLA layer turned it off already: TP_OVERLAP_OFF_MLA says it all."""
    model = state.model
    where = layers.multi_token_prediction(state.request, model)
    if not model["tp_comm_overlap"] or where is None or layers.multi_latent_attention(state.request, state.scenario.family):
        return
    if mtp_unbuilt(state) is not None:  # (its provider builds no MTP block: no eh_proj, nothing turned off)
        return
    rebuilt = decoder_rebuilt(state)
    if rebuilt is not None:
        yield from _mtp_rebuilt_decoder(state, where, *rebuilt)
        return
    fused = ""
    if layers.te_op_fuser(state.request) and not model["num_moe_experts"] and not vpp_hybrid(state):
        fused = ("; with model.use_transformer_engine_op_fuser=true the decoder's fused MLPs (TEFusedMLP, which reads the "
                 "flag when it builds its operations at the first step) on the MTP's pipeline rank run fc1 and fc2 "
                 "without userbuffers too: turning the op fuser off keeps them, at the price of its fusions (your call)")
    yield make("TP_OVERLAP_OFF_MTP", where=where, tp=model["tensor_model_parallel_size"], layers=model["mtp_num_layers"],
               fused=fused, fix=shell("nothing to fix: no setting gives the MTP layers userbuffers, and "
                                      "comm_overlap.tp_comm_overlap=false would take them from the decoder too"))


def decoder_rebuilt(state: State) -> tuple[str, dict] | None:
    """(provider class, where) where the run's model builds its decoder again after GPTModel.__init__ built the MTP
    block (data/releases/VERSION/model_providers.json decoder_rebuilt), else None."""
    from ...upstream import releases

    req = state.request
    return releases.decoder_rebuilt(req.release.version, req.recipe, req.model_target)


def mtp_unbuilt(state: State) -> tuple[str, dict] | None:
    """(provider class, where) where the run's provider builds its model without an MTP block whatever
    model.mtp_num_layers says (data/releases/VERSION/model_providers.json mtp_unbuilt), else None."""
    from ...upstream import releases

    req = state.request
    return releases.mtp_unbuilt(req.release.version, req.recipe, req.model_target)


def _mtp_rebuilt_decoder(state: State, where: str, provider: str, at: dict):
    """Bridge's Qwen3VLGPTModel (and Exaone45GPTModel) call GPTModel.__init__, which builds the decoder and then the
    MTP block, whose eh_proj sets the shared tp_comm_overlap to False, and then build the decoder again from that
    config: no layer of it gets userbuffers (tests/bridge/test_mtp_tp_overlap.py)."""
    model = state.model
    pp, vpp = model["pipeline_model_parallel_size"], model["virtual_pipeline_model_parallel_size"]
    off = shell("{key}=false", key=Shell(owner_key(state, "tp_comm_overlap")))
    o, fix = fixed(state, "TP_OVERLAP_OFF_MTP_DECODER", [{"model.mtp_num_layers": None}])
    if pp > 1 or (vpp or 1) > 1:
        scope = ("on the pipeline rank that holds the MTP block, the decoder layers of its model chunk and the MTP layers "
                 "run their TP all-gathers and reduce-scatters without userbuffers (that rank's earlier VPP chunks and "
                 "the other pipeline ranks, which build no eh_proj, keep theirs)")
        fix = shell("{fix} (no MTP block: that chunk's decoder keeps its userbuffers); {off} would take them from the "
                    "other pipeline ranks too", fix=fix, off=off)
    else:
        scope = ("every decoder layer and the MTP layers run their TP all-gathers and reduce-scatters without "
                 "userbuffers: TP overlap does nothing anywhere in the model")
        fix = shell("{fix} (no MTP block: the decoder keeps its userbuffers), or, keeping MTP, {off}: the same run, "
                    "said as it runs, without the userbuffers' memory", fix=fix, off=off)
    yield make("TP_OVERLAP_OFF_MTP_DECODER", fix_overrides=o, where=where, tp=model["tensor_model_parallel_size"],
               layers=model["mtp_num_layers"], provider=provider, model_class=at["model"],
               rebuilt=f"{at['file']}:{at['decoder_line']}", scope=scope, fix=fix)
