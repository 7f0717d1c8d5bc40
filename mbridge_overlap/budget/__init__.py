"""The communication budget of one iteration on one GPU: per parallel dimension (TP, CP, PP, DP, EP) the collectives
the effective config makes, their message sizes, the time they take on the system's links, what each overlap setting
hides, and what flipping it would change (estimate.py: CP, PP and EP there; TP in tp.py with Transformer Engine's
userbuffers in userbuffers.py; DP in dp.py with Megatron-Core's gradient buckets in buckets.py); the run as the budget
sees it and where its ranks lie (layout.py); the model's shape and FLOPs (shape.py), by kind of layer (dense, MoE:
kinds.py); the systems' measured rates with their sources (system.py, data/budget_systems.yaml)."""

from __future__ import annotations

from .. import findings, safeio
from ..errors import NotKnown, UsageError
from ..findings.registry import declare

declare(__name__, ["SHAPE_REFUSED_BY_MEGATRON_CORE"])


def of(analysis, model: str | None = None, shape: dict | None = None, efficiency: float | None = None, peft=None):
    """The budget of an analysed scenario (findings.analysis.Analysis) for a model's shape: a known model's name
    (else the recipe's model, where the budget knows it), then the shape keys of the run config's model section (a
    saved run config holds them all), then `shape`'s keys, each winning over the one before. efficiency: instead of
    the system's fitted one. peft (run.peft.Peft): fine-tuning the run's config does not say (plan --lora)."""
    from . import estimate, flips, layout, shape as shapes, system, worth

    state, sc = analysis.state, analysis.scenario
    saved = _saved_shape(sc)
    # the run's MTP layers (a recipe's own: DeepSeek-V3, GLM-4.5), which no known model's shape holds
    run_mtp = {} if state.model.get("mtp_num_layers") is None else {"mtp_num_layers": state.model["mtp_num_layers"]}
    given = {**run_mtp, **saved}
    # the only shape key the request models; a recipe's is its offline stand-in's, not the model's
    if state.model.get("hidden_size") is not None and sc.request.origin.get("model.hidden_size") not in (None, "recipe"):
        given["hidden_size"] = state.model["hidden_size"]
    overridden = _overridden(sc, shapes)
    if saved:  # (each source's value named where it is out of bounds: fuzzU U2-3's rest)
        shapes.check_bounds(saved, f"{safeio.esc(str(sc.config.path))}: model.")
    shapes.check_bounds(overridden, "model.")
    given.update(overridden)
    given.update(shape or {})
    if model is None and sc.family in shapes.models():
        model = sc.family
    said = [f"{sc.config.path}'s model section" if saved else "",
            "overrides: " + ", ".join(f"model.{k}" for k in sorted(overridden)) if overridden else "",
            "given: " + ", ".join(sorted(shape)) if shape else "",
            "the run's model.mtp_num_layers" if run_mtp and not ({"mtp_num_layers"} & {*saved, *overridden, *(shape or {})}) else ""]
    lay = layout.layout_of(state, sc.machine, peft)
    lay, provided = _provider_dispatcher(lay, sc, model)
    lay = layout.placed(lay, sc)
    sh, origin = shapes.of(model, given, "; ".join(s for s in said if s) or None, fits=lambda values: _fits(values, lay))
    sh, limited = shapes.limited_devices(sh, lay.ep)
    sysinfo = system.get(sc.gpu, domain=lay.domain)
    if efficiency is not None:  # tools/check_budget.py fits it
        sysinfo = system.System(sysinfo.name, {**sysinfo.record, "efficiency": {"value": efficiency}}, lay.domain)
    unbuilt = _mtp_unbuilt(sc.request) if sh.mtp_num_layers else None
    if unbuilt:  # (its provider builds no MTP block: none costed)
        from dataclasses import replace

        sh = replace(sh, mtp_num_layers=None)
    budget = estimate.estimate(lay, sh, sysinfo, origin)
    budget.straddling = _straddling(budget, sh, sysinfo, origin)
    budget.assumptions += limited + tuple(shapes.unmodelled(_model_fields(sc))) + provided + _instances(state) + (
        (unbuilt,) if unbuilt else ())
    if provided:  # the flips are proven on the run the budget prices (recheck49 Q4)
        state = sc.derive({"model.moe_token_dispatcher_type": lay.dispatcher}).resolve()
    with findings.written_for(state.request):  # their fixes written for the config (recheck54 Y5)
        budget.flips = flips.check(state, {k: v for k, v in lay.settings.items() if k in budget.flipped})
        budget.findings = worth.check(budget)
    return budget


def _straddling(budget, sh, sysinfo, origin) -> dict:
    """Where the placement is assumed and an EP group straddles two NVLink domains: the EP time and the iteration with
    that placement and with domains of the largest multiple of the expert-TP x EP extent they hold (every EP group in
    one domain), so the answer says how much of the iteration the assumption decides; {} otherwise."""
    from dataclasses import replace

    from . import estimate, layout, system

    lay = budget.layout
    extent = lay.etp * lay.ep
    if lay.placement[0] != "assumed" or not sh.moe or lay.ep < 2 or extent > lay.domain or not layout.spans_domains(lay, lay.etp, lay.ep):
        return {}
    aligned = lay.domain // extent * extent
    other = estimate.estimate(replace(lay, domain=aligned), sh, system.System(sysinfo.name, sysinfo.record, aligned), origin)

    def ep_ms(b) -> float:
        return estimate.ms(sum(i.seconds for i in b.items if i.dimension == "ep"))

    return {"ep_ms": ep_ms(budget), "iteration_ms": estimate.ms(budget.iteration_s), "ep_ms_in_one_domain": ep_ms(other),
            "iteration_ms_in_one_domain": estimate.ms(other.iteration_s), "nvlink_domain_in_one_domain": aligned}


ROUTER_KEYS = ("num_moe_experts", "moe_router_topk", "moe_router_num_groups", "moe_router_group_topk",
               "moe_router_topk_limited_devices", "moe_router_enable_expert_bias")


def router_of(sc, ep: int) -> dict | None:
    """The MoE router as the run builds it, for the checks of its first forward (findings/rules/run.py moe_router):
    the known model's routing (the recipe's family, as the budget reads it), then the run config's model section, then
    the overrides, each winning; a deprecated moe_router_topk_limited_devices made group-limited routing over the EP
    ranks as TransformerConfig does (shape.limited_devices); the load-balancing type and router fusion as the config
    or an override writes them (None: not set there: the recipe's own is not read). None: no experts known."""
    from . import shape as shapes

    known = shapes.models().get(sc.family or "", {}).get("shape", {}) if sc.family else {}
    values = {k: known.get(k) for k in ROUTER_KEYS}
    try:
        saved = _saved_shape(sc)
        given = _overridden(sc, shapes)
    except UsageError:
        return None  # (the budget says why)
    for source in (saved, given):
        values.update({k: v for k, v in source.items() if k in ROUTER_KEYS})
    experts = values["num_moe_experts"]
    if not experts or isinstance(experts, bool):
        return None
    values["moe_router_topk"] = values["moe_router_topk"] or 2  # (TransformerConfig's default)
    limited = values["moe_router_topk_limited_devices"]
    values["limited"] = bool(limited and not values["moe_router_group_topk"])
    if values["limited"]:
        values["moe_router_group_topk"], values["moe_router_num_groups"] = limited, ep
    written = _model_fields(sc)  # (the config's section and the overrides, typed as Hydra types a command line's)
    values["load_balancing"] = _text(written.get("moe_router_load_balancing_type"))
    fusion = written.get("moe_router_fusion")
    values["fusion"] = fusion if isinstance(fusion, bool) else None
    return values


def _text(value) -> str | None:
    return value.strip().strip("'\"") if isinstance(value, str) else None


def _mtp_unbuilt(req) -> str | None:
    """Why no MTP layer is costed where the run's provider builds its model without an MTP block whatever
    model.mtp_num_layers says (releases.mtp_unbuilt), else None."""
    from ..upstream import releases

    found = releases.mtp_unbuilt(req.release.version, req.recipe, req.model_target)
    if found is None:
        return None
    provider, at = found
    return (f"MTP: no MTP layers costed: {provider}'s provide() builds {at['model']} with no mtp_block_spec "
            f"({at['file']}:{at['line']}), so Megatron-Core builds no MTP block whatever model.mtp_num_layers says")


def _instances(state) -> tuple:
    """Distributed-optimizer instances, which the DP items do not model (evalU V4: priced over the whole group)."""
    n = state.ddp.get("num_distributed_optimizer_instances") or 1
    if n <= 1:
        return ()
    return (f"ddp.num_distributed_optimizer_instances={n} is not modelled: Megatron-Core reduce-scatters and gathers "
            f"within each instance's 1/{n} of the DP x CP group and all-reduces between the {n} instances on a stream of "
            "its own (param_and_grad_buffer.py); the DP items price the whole group as one instance",)


def _provider_dispatcher(lay, sc, model: str | None) -> tuple:
    """The token dispatcher a known model's Bridge provider sets, where the run does not set one (scenario.
    provider_fields): the run from its checkpoint gets it (recheck48 R6: the budget priced Qwen3-MoE as the recipe
    baseline's allgather dispatcher, which the provider's alltoall is not)."""
    from dataclasses import replace

    from ..run import layers, scenario

    value = scenario.provider_fields(sc.request, model).get("model.moe_token_dispatcher_type")
    if value is None:
        return lay, ()
    source = layers.model_provider(model)["source"]
    return replace(lay, dispatcher=value), (f"EP: the {value} token dispatcher Bridge's provider for {model} sets "
                                            f"({source}), not the recipe baseline model's {lay.dispatcher}",)


def _model_fields(sc) -> dict:
    """The model fields the run sets: its config's model section, then the recipe's recorded ones and the overrides."""
    from .shape import UNMODELLED

    out = dict((sc.config.raw.get("model") or {}) if sc.config is not None else {})
    # (evalX X2-2: a recipe's own modelled field, GLM-4.5-Air's mtp_num_layers=1, was not said to be left out)
    out.update({k: v for k, v in sc.request.model.items() if k in UNMODELLED and v is not None})
    for given in (sc.request.context, sc.overrides or {}):  # (as given: a command line's text, typed as Hydra types it)
        out.update({k.partition(".")[2]: _as_hydra_types(k, v) for k, v in given.items() if k.startswith("model.")})
    return out


def _as_hydra_types(key: str, value):
    """A command-line text as Hydra types it (recheck58 AE7: model.mtp_num_layers=null, =false were 'not modelled'),
    else the value as it is."""
    from ..run import hydra

    try:
        return hydra.value_of(key, value) if isinstance(value, str) else value
    except UsageError:
        return value


def _overridden(sc, shapes) -> dict:
    """The shape keys the run's own KEY=VALUE overrides set (model.num_layers=8): they win over the recipe's or the
    config's model, as in the run."""
    from dataclasses import fields

    from ..run.request import is_null

    names = {f.name for f in fields(shapes.Shape)}
    # null (Bridge's unset, as a saved config's null is read: the known model's value stands; fuzzK K6) sets nothing,
    # but for a key whose null is a value (MLA's q_lora_rank=null: no query down projection; recheck59 AF5) and one
    # whose null Megatron-Core cannot build (shapes.NOT_NULL: refused, as 0 is)
    out = {}
    for key, value in (sc.overrides or {}).items():
        section, _, name = key.partition(".")
        if section != "model" or name not in names:
            continue
        if is_null(value):
            if name in shapes.NOT_NULL:  # (fuzzV V2-7: the recipe's own size was priced)
                raise shapes.null_refused(name, "model.")
            if name in shapes.NULLABLE:
                out[name] = None
            continue
        out[name] = shapes.value_of(key, value)
    return out


def _dataset_seq(analysis) -> str:
    return analysis.state.request.dataset_seq_word()


def needs(analysis) -> str | None:
    """Why a config has no budget (it does not run, or lacks the batch), else None."""
    if analysis.errors:
        return ("the config does not run (" + ", ".join(f.id for f in analysis.errors)
                + "): `resolve` with the same inputs says why; a budget needs a config that runs")
    missing = [(key, flag) for key, flag, value in (
        ("model.seq_length", "--seq-length", analysis.state.model.get("seq_length")),
        ("train.global_batch_size", "--global-batch-size", analysis.state.train.get("global_batch_size"))) if not value]
    if missing:
        return (f"the budget needs {' and '.join(k for k, _ in missing)} (resolve and budget: as KEY=VALUE, "
                f"model.seq_length with {_dataset_seq(analysis)}, which Bridge holds equal; plan: "
                f"{' and '.join(f for _, f in missing)})")
    gbs, mbs, dp = (analysis.state.train.get("global_batch_size"), analysis.state.train.get("micro_batch_size"),
                    analysis.state.data_parallel_size)
    if mbs is None and dp and gbs % dp:  # (fuzzO F4: the micro-batch of 1 the budget takes would not split it either)
        return (f"the global batch {gbs} does not split over DP={dp} even in micro-batches of 1, the budget's assumption "
                "where train.micro_batch_size is not given (Bridge needs it set, and asserts the split)")
    return None


def _refused(exc: ShapeRefused, analysis):
    from .. import findings

    model = analysis.effective.get("model") or {}
    knob = "model.expert_model_parallel_size" if exc.what == "EP" else "model.tensor_model_parallel_size"
    return findings.make("SHAPE_REFUSED_BY_MEGATRON_CORE", name=exc.name, value=exc.value, what=exc.what, by=exc.by,
                         nor=exc.nor, where=exc.where, knobs=[f"model.{exc.name}", knob],
                         layout=f"TP={model.get('tensor_model_parallel_size') or 1}, EP={model.get('expert_model_parallel_size') or 1}")


def _saved_shape(sc) -> dict:
    """The shape keys of the run config's model section; a quoted number there is the user's to fix (exit 2)."""
    from . import shape as shapes

    if sc.config is None:
        return {}
    return shapes.in_config(sc.config.raw.get("model"), safeio.esc(str(sc.config.path)))


def shown(analysis, model: str | None = None, shape: dict | None = None, peft=None) -> dict:
    """The budget as resolve, plan and diff show it (budget.schema.json's budget), or {"unavailable": why} where the
    config does not run, the model's shape or the GPU's rates are not known, or the shape a config gives is not one
    Megatron-Core takes (a wrong --model or --shape is still an error)."""
    from .shape import check_given

    check_given(model, shape)  # the budget's own flags: the user's to fix, budget or not
    _saved_shape(analysis.scenario)  # and the run config's own values
    why = needs(analysis)
    if why is None:
        try:
            out = of(analysis, model=model, shape=shape, peft=peft).to_dict(analysis.scenario.gpus)
        except NotKnown as exc:
            why = str(exc)
        except ShapeRefused as exc:
            if model is not None or shape:
                raise  # the budget's own flags give a shape this layout cannot take: the user's to fix
            if not any(f.id == "SHAPE_REFUSED_BY_MEGATRON_CORE" for f in analysis.findings):  # (shown once per verb)
                analysis.findings.append(_refused(exc, analysis))  # fuzzF F14: an error of the answer, not a budget note
            why = f"the model's shape the config gives cannot be costed: {exc}"
        except UsageError as exc:
            if model is not None or shape:
                raise  # the budget's own flags are wrong: the user's to fix
            why = f"the model's shape the config gives cannot be costed: {exc}"
        else:
            from .worth import reconcile

            with findings.written_for(analysis.state.request):  # fixes written for the config (recheck54 Y5)
                reconcile(analysis, out)  # one answer: no fix of it turns on what its budget says costs more
            return out
    return {"unavailable": why}


class ShapeRefused(UsageError):
    """A shape Megatron-Core refuses on the layout: (field, value, what it must divide by, its name, where it raises)."""

    def __init__(self, name: str, value: int, by: int, what: str, where: str):
        nor = " nor a divisor" if name == "num_query_groups" else ""
        super().__init__(f"{name} ({value}) is not a multiple of {what} ({by}){nor}: Megatron-Core refuses this layout")
        self.name, self.value, self.by, self.what, self.where, self.nor = name, value, by, what, where, nor


# where Megatron-Core 0.19.2 raises for each split (held to TransformerConfig and the layers in tests/bridge)
_RAISED_IN = {
    "num_attention_heads": "TransformerConfig.__post_init__ (ValueError, at Bridge's finalize)",
    "num_query_groups": "TransformerConfig.__post_init__ (ValueError, at Bridge's finalize)",
    "ffn_hidden_size": "the MLP's column-parallel linear layer (divide(), an AssertionError building the model)",
    "num_moe_experts": "BaseMoELayer.__init__ (an assert building the model)",
    "moe_shared_expert_intermediate_size": "the shared expert's column-parallel linear layer (divide(), an AssertionError "
                                           "building the model)",
}


def _fits(values: dict, lay) -> None:
    """The splits Megatron-Core requires of a shape on a layout, in the order it checks them (TransformerConfig.
    __post_init__, then the layers' constructors): ShapeRefused naming the first that fails."""
    # (layers need not divide by PP x VP: Bridge's recipes split 126 layers over PP 8 x VP 8 by counting the embedding
    # and the loss as layers, account_for_embedding/loss_in_pipeline_split; the budget costs the largest stage)
    heads = values["num_attention_heads"]
    checks = [("num_attention_heads", heads, lay.tp, "TP"), ("num_query_groups", values.get("num_query_groups") or heads, lay.tp, "TP"),
              ("ffn_hidden_size", values["ffn_hidden_size"], lay.tp, "TP")]
    if values.get("num_moe_experts"):
        checks.append(("num_moe_experts", values["num_moe_experts"], lay.ep, "EP"))
        if values.get("moe_shared_expert_intermediate_size"):
            checks.append(("moe_shared_expert_intermediate_size", values["moe_shared_expert_intermediate_size"], lay.tp, "TP"))
    for name, value, by, what in checks:
        if value % by and not (name == "num_query_groups" and by % value == 0):  # fewer KV groups than TP: replicated
            raise ShapeRefused(name, value, by, what, _RAISED_IN[name])
