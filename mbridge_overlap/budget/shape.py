"""The model's shape and what one micro-batch costs: FLOPs per layer and the parameters each rank holds, in the order
Megatron-Core's GPT model registers them (the order its gradient buckets follow, reversed)."""

from __future__ import annotations

import re

from dataclasses import dataclass, fields

from . import mla
from .. import safeio
from ..errors import NotKnown, UsageError
from ..upstream.releases import budget_models

REQUIRED = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class Shape:
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    vocab_size: int
    num_query_groups: int | None = None  # None: as many as heads (multi-head attention)
    kv_channels: int | None = None  # None: hidden_size / heads
    gated_linear_unit: bool = True  # SwiGLU: fc1 is two matrices
    share_embeddings_and_output_weights: bool = False
    num_moe_experts: int | None = None
    moe_router_topk: int = 2
    # group-limited routing (moe_utils.group_limited_topk): experts in num_groups contiguous groups, each token's top-k
    # inside its group_topk best groups (routing.py; DeepSeek-V3's n_group 8, topk_group 4 through Bridge's
    # model_bridge.py CONFIG_MAPPING); None: not grouped
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None
    # the deprecated moe_router_topk_limited_devices (device-limited routing): TransformerConfig.__post_init__ makes it
    # group_topk with num_groups = EP where group_topk is unset, and refuses it beside group_topk (limited_devices)
    moe_router_topk_limited_devices: int | None = None
    moe_ffn_hidden_size: int | None = None
    qk_layernorm: bool = False  # a norm of each head's queries and keys (Qwen3): head_dim weights each
    moe_shared_expert_intermediate_size: int | None = None  # a shared expert in each MoE layer: its FFN size
    moe_shared_expert_gate: bool = False  # the shared expert's sigmoid gate (one hidden-size weight)
    moe_layer_freq: int | tuple = 1  # which layers are MoE: every N-th (0, N, 2N, ...) or a 0/1 pattern per layer
    # multi-latent attention (mla.py), MLATransformerConfig's fields and defaults (transformer_config.py)
    multi_latent_attention: bool = False
    q_lora_rank: int | None = 512  # None: no query down projection (linear_q_proj)
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
    # multi-token prediction (mtp.py): MultiTokenPredictionBlock's layers (TransformerConfig.mtp_num_layers; None: none)
    mtp_num_layers: int | None = None
    # the routers' expert bias (aux-loss-free balancing): finalize_model_grads all-reduces their token counts (finalize.py)
    moe_router_enable_expert_bias: bool = False

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def qkv_out(self) -> int:
        """Output features of the fused QKV projection (all heads)."""
        return (self.num_attention_heads + 2 * self.groups) * self.head_dim

    @property
    def q_head_dim(self) -> int:
        """MLA's query and key head width (MultiLatentAttention.q_head_dim)."""
        return self.qk_head_dim + self.qk_pos_emb_head_dim

    @property
    def attn_out(self) -> int:
        """Input features of linear_proj (all heads): MLA's heads are v_head_dim wide."""
        return self.num_attention_heads * (self.v_head_dim if self.multi_latent_attention else self.head_dim)

    @property
    def moe(self) -> bool:
        return bool(self.num_moe_experts)

    def is_moe_layer(self, number: int) -> bool:
        """Whether the layer of global number `number` (from 0) is a MoE layer, as Megatron-Core's
        get_gpt_decoder_layer_specs decides: with experts, layer i where i % moe_layer_freq == 0, or where the
        pattern's i-th entry is 1; without experts none."""
        if not self.moe:
            return False
        if isinstance(self.moe_layer_freq, int):
            return number % self.moe_layer_freq == 0
        return self.moe_layer_freq[number] == 1

    @property
    def mtp_moe(self) -> bool:
        """Whether the MTP layer is a MoE layer: get_gpt_mtp_block_spec takes the spec of the last decoder layer of its
        stage, which is the model's last (a layout puts every decoder layer before the MTP layers), and Bridge's
        mtp_block_spec (gpt_provider.py) re-derives the model's last one where that stage holds none."""
        return self.is_moe_layer(self.num_layers - 1)

    @property
    def mixed(self) -> bool:
        """Dense layers among the MoE ones."""
        return self.moe and not all(self.is_moe_layer(i) for i in range(self.num_layers))


# Model fields that change a layer's parameters and work where they are set otherwise than here, which the budget's
# shape does not model (its layers are GPT layers: attention with QKV, a dense or routed MLP with or without a shared
# expert, dense and MoE layers as moe_layer_freq places them); a budget of a config that sets one says so (evalN N2:
# DeepSeek-V3's run config was costed as plain attention)
UNMODELLED: dict = {}  # (mtp_num_layers was here until mtp.py modelled it)


def unmodelled(model: dict) -> list[str]:
    """What a model section sets of UNMODELLED, as one assumption of the budget ([] where it sets none)."""
    from ..values import fmt

    said = []
    for key, (default, what) in UNMODELLED.items():
        value = model.get(key, default)
        plain = value in (default, 0, False, None) or (isinstance(value, list) and set(value) == {default})
        if not plain:
            shown = fmt(value) if isinstance(value, (bool, int, str)) else safeio.shown(value)[:60]
            said.append(f"model.{key}={shown} ({what})")
    return [f"not modelled: {'; '.join(said)}: the parameters, DP buckets and compute are those of plain GPT layers of "
            "the shape shown, not this model's"] if said else []


def models() -> dict:
    return budget_models()["models"]


def in_config(model: dict | None, source: str | None = None) -> dict:
    """The shape keys a config's model section holds (a saved run config, or the summary Bridge printed): the
    Shape fields set to a whole number or a boolean. source: the file's name, where any other value (quoted digits)
    is refused, as every integer field of a config file is (request._as_yaml_typed)."""
    names = {f.name for f in fields(Shape)}
    out = {}
    for k, v in (model or {}).items():
        if k in NULLABLE and v is None and k in (model or {}):
            out[k] = None  # (MLA's q_lora_rank: null is no query down projection, not unset)
            continue
        if k in NOT_NULL and v is None and source is not None:
            raise null_refused(k, f"{source}: model.")
        if k not in names or v is None:
            continue
        if isinstance(v, (int, bool)):
            out[k] = v
        elif k == "moe_layer_freq" and isinstance(v, (list, tuple)):
            out[k] = layer_pattern(k, v, f"{source}: model." if source else "")
        elif source is not None:
            from ..run.request import quoted_in_file

            flag = _is_flag(k)
            if not isinstance(v, str):  # (fuzzU U2-3: a float, list or mapping is no quoted text)
                raise UsageError(f"{source}: model.{k}: expected {'true or false' if flag else 'an integer'}"
                                 f"{' (or null)' if k in NULLABLE else ''}, got {safeio.shown(v)}")
            raise quoted_in_file(f"{source}: model.{k}", v, "true or false" if flag else "a whole number")
    return out


def _is_flag(name: str) -> bool:
    """Whether a Shape field is a boolean (its default's type)."""
    field_of = {f.name: f for f in fields(Shape)}.get(name)
    return field_of is not None and isinstance(field_of.default, bool)


def of(model: str | None, given: dict, said: str | None = None, fits=None) -> tuple[Shape, str]:
    """The shape from a known model name and/or the keys given (which win); (shape, where it came from). said: where
    the given keys came from (default: "given: KEYS"). fits(values): the layout's own check, before the shape's (a
    shape the layout cannot split is refused first by Megatron-Core, as by the budget)."""
    values: dict = {}
    origin = []
    check_given(model, given)
    if model:
        known = models()
        values.update(known[model]["shape"])
        origin.append(f"{model} ({known[model]['source']})")
    values.update(given)
    if isinstance(values.get("moe_layer_freq"), list):  # (a known model's pattern, as YAML reads it)
        values["moe_layer_freq"] = layer_pattern("moe_layer_freq", values["moe_layer_freq"])
    if given:
        origin.append(said or "given: " + ", ".join(sorted(given)))
    if values.get("ffn_hidden_size") is None and values.get("hidden_size"):
        values["ffn_hidden_size"] = 4 * values["hidden_size"]  # TransformerConfig.__post_init__'s default
        origin.append("ffn_hidden_size 4 x hidden_size (Megatron-Core's default)")
    missing = [k for k in REQUIRED if values.get(k) is None]
    if missing:
        raise NotKnown("the model's shape is needed and not known: " + ", ".join(missing)
                         + " (pass --model NAME or the keys, e.g. --shape hidden_size=8192)")
    check_bounds(values)
    if values.get("mtp_num_layers") == 0:  # (0, false: Megatron-Core builds none)
        values["mtp_num_layers"] = None
    if fits is not None:
        fits(values)
    _check(values)
    return Shape(**values), "; ".join(origin)


# Shape keys whose null is a value (not Bridge's unset): MLATransformerConfig's q_lora_rank None builds linear_q_proj
NULLABLE = frozenset({"q_lora_rank", "mtp_num_layers",  # (and mtp_num_layers None: no MTP block)
                      "moe_router_num_groups", "moe_router_group_topk",  # (None: routing not grouped)
                      "moe_router_topk_limited_devices"})
# MLA sizes whose null Megatron-Core cannot build (MLATransformerConfig types them int; MultiLatentAttention.__init__
# adds qk_head_dim + qk_pos_emb_head_dim and multiplies v_head_dim, MLASelfAttention adds kv_lora_rank +
# qk_pos_emb_head_dim: None is a TypeError when the model is built), where another null is Bridge's unset (fuzzK K6)
NOT_NULL = frozenset({"kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"})


def null_refused(key: str, where: str = "") -> UsageError:
    """The error of a null where Megatron-Core needs a whole number (NOT_NULL): refused as 0 is (fuzzV V2-7)."""
    *some, last = sorted(NULLABLE)
    return UsageError(f"{where}{key}: expected a whole number, got null (only {', '.join(some)} and {last} take null; "
                      f"Megatron-Core's MLA layer computes with {key}, and None there is a TypeError when the model is built)")


# Plausibility bounds of a transformer's shape (well above any published model): a budget of a shape beyond them
# is a typo, and a shape's layers and experts are listed one by one.
BOUNDS = {"num_layers": 4096, "hidden_size": 1 << 18, "ffn_hidden_size": 1 << 21, "num_attention_heads": 4096,
          "num_query_groups": 4096, "kv_channels": 1 << 12, "vocab_size": 1 << 24, "num_moe_experts": 4096,
          "moe_router_topk": 4096, "moe_ffn_hidden_size": 1 << 21, "moe_shared_expert_intermediate_size": 1 << 21,
          "q_lora_rank": 1 << 18, "kv_lora_rank": 1 << 18, "qk_head_dim": 1 << 12, "qk_pos_emb_head_dim": 1 << 12,
          "v_head_dim": 1 << 12, "mtp_num_layers": 1 << 12, "moe_router_num_groups": 4096, "moe_router_group_topk": 4096,
          "moe_router_topk_limited_devices": 4096}


def check_given(model: str | None, given: dict | None) -> None:
    """A model's name and shape keys as given (--model, --shape): a known model, known keys, each value within its
    bounds; checked whether or not a budget is computed."""
    if model:
        known = models()
        if model not in known:
            raise UsageError(f"--model: unknown model {safeio.shown(model)}; known: {', '.join(sorted(known))} "
                             "(or give the shape keys)")
    names = {f.name for f in fields(Shape)}
    for key in given or {}:
        if key not in names:
            raise UsageError(f"unknown shape key {safeio.shown(key)}; known: {', '.join(sorted(names))}")
        if key in NOT_NULL and given[key] is None:
            raise null_refused(key)
    check_bounds(given or {})


def value_of(key: str, value) -> int | bool | tuple | None:
    """A shape key's value as given on a command line (KEY=VALUE text) or typed: a whole number or true/false, or
    for moe_layer_freq a list of 0s and 1s too ("[0,1,1]")."""
    if isinstance(key, str) and key.rpartition(".")[2] == "moe_layer_freq":
        if isinstance(value, (list, tuple)):
            return layer_pattern(key, value)
        if isinstance(value, str) and re.fullmatch(r"\[\s*[0-9]+(\s*,\s*[0-9]+)*\s*,?\s*\]", value):
            return layer_pattern(key, [int(x) for x in value.strip("[] ").rstrip(",").split(",")])
    if isinstance(value, (bool, int)):
        return value
    name = key.rpartition(".")[2] if isinstance(key, str) else ""
    from ..run.request import is_null

    if is_null(value) and name in NULLABLE | NOT_NULL:  # (fuzzV V2-8: q_lora_rank=null was "expected ... or null")
        if name in NOT_NULL:
            raise null_refused(name)
        return None
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value):
        return int(value)  # (the bounds say which are taken: fuzzI I6, a tenth digit was "not a whole number")
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value) and name in BOUNDS:
        raise UsageError(f"{name}: must be a whole number from 1 to {BOUNDS[name]:,}, got {safeio.shown(value)}")
    want = "true or false" if _is_flag(name) else "a whole number" + (" or null" if name in NULLABLE else "") \
        if name in {f.name for f in fields(Shape)} else "a whole number or true/false"
    raise UsageError(f"{safeio.shown(key)}: expected {want}, got {safeio.shown(value)}")


def layer_pattern(key: str, value, where: str = "") -> tuple:
    """moe_layer_freq as a list: one 0 (dense) or 1 (MoE) per layer (get_gpt_decoder_layer_specs refuses any other).
    where: as check_bounds'."""
    if len(value) > BOUNDS["num_layers"] or not all(type(x) is int and x in (0, 1) for x in value):
        name = key if re.fullmatch(r"[A-Za-z_][\w.]*", key) else safeio.shown(key)
        raise UsageError(f"{where}{name}: a list must hold a 0 (dense) or 1 (MoE) per layer, got "
                         f"{safeio.shown(str(list(value)))[:80]}")
    return tuple(value)


def experts_of(model: str | None, shape: dict | None = None) -> int | None:
    """The expert count --shape num_moe_experts gives, else that of the known model --model names (None: dense, or
    none named): what a config that sets no model.num_moe_experts is given where Bridge would refuse EP > 1 without
    it (EXPERT_PARALLEL_WITHOUT_EXPERTS)."""
    given = (shape or {}).get("num_moe_experts")
    if isinstance(given, int) and not isinstance(given, bool):
        return given
    if not model:
        return None
    check_given(model, {})
    return models()[model]["shape"].get("num_moe_experts")


def check_bounds(values: dict, where: str = "") -> None:
    """Each value within its bounds; where: what names the key in the error (a config file's "PATH: model.")."""
    for key, bound in BOUNDS.items():
        value = values.get(key)
        if value is None or key == "mtp_num_layers" and value == 0:
            continue  # (0 MTP layers: none, as Megatron-Core builds none)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= bound:
            raise UsageError(f"{where}{key}: must be a whole number from 1 to {bound:,}, got {safeio.shown(value)}")
    freq = values.get("moe_layer_freq")
    if isinstance(freq, (list, tuple)):
        layer_pattern("moe_layer_freq", freq, where)
    elif freq is not None and (not isinstance(freq, int) or isinstance(freq, bool) or not 1 <= freq <= BOUNDS["num_layers"]):
        raise UsageError(f"{where}moe_layer_freq: must be a whole number from 1 to {BOUNDS['num_layers']:,} or a list "
                         f"of 0s and 1s, got {safeio.shown(freq)}")
    for key in (f.name for f in fields(Shape) if f.type in (bool, "bool")):  # (fuzzR R8: qk_layernorm=2 read as true)
        if key in values and not isinstance(values[key], bool):
            raise UsageError(f"{where}{key}: must be true or false, got {safeio.shown(values[key])}")


def _check(values: dict) -> None:
    check_bounds(values)
    heads, groups = values["num_attention_heads"], values.get("num_query_groups")
    if groups is not None and heads % groups:
        raise UsageError(f"num_attention_heads ({heads}) must be a multiple of num_query_groups ({groups})")
    if values.get("kv_channels") is None and values["hidden_size"] < heads:
        raise UsageError(f"hidden_size ({values['hidden_size']}) is smaller than num_attention_heads ({heads}): Megatron-Core's "
                         "kv_channels (hidden_size // num_attention_heads) would be 0; give kv_channels")
    freq = values.get("moe_layer_freq")
    if values.get("num_moe_experts") and isinstance(freq, tuple) and len(freq) != values["num_layers"]:
        raise UsageError(f"moe_layer_freq: a list of {len(freq)} entries for {values['num_layers']} layers "
                         "(Megatron-Core's get_gpt_decoder_layer_specs asserts one per layer)")
    if values.get("num_moe_experts") is not None and values.get("moe_router_topk", 2) > values["num_moe_experts"]:
        raise UsageError(f"moe_router_topk ({values.get('moe_router_topk', 2)}) exceeds num_moe_experts ({values['num_moe_experts']})")
    _check_groups(values)


def _check_groups(values: dict) -> None:
    """Megatron-Core's own refusals of group-limited routing (TransformerConfig.__post_init__, 0.19.2
    transformer_config.py:2338-2356; 0.18.2 :2114-2132), in its words: first the deprecated
    moe_router_topk_limited_devices beside moe_router_group_topk (a ValueError, whatever the experts)."""
    pick, groups, experts = values.get("moe_router_group_topk"), values.get("moe_router_num_groups"), values.get("num_moe_experts")
    if pick and values.get("moe_router_topk_limited_devices"):
        raise UsageError("moe_router_topk_limited_devices is deprecated and replaced by moe_router_group_topk and "
                         f"moe_router_num_groups. (moe_router_topk_limited_devices is "
                         f"{values['moe_router_topk_limited_devices']} with moe_router_group_topk {pick}; Megatron-Core's "
                         "TransformerConfig refuses it: set the groups alone)")
    if not pick or not experts:
        return
    if not groups:
        raise UsageError("When using group limited routing, moe_router_num_groups must be specified. "
                         f"(moe_router_group_topk is {pick}; Megatron-Core's TransformerConfig refuses it)")
    if experts % groups:
        raise UsageError(f"num_moe_experts ({experts}) should be divisible by moe_router_num_groups ({groups}). "
                         "(Megatron-Core's TransformerConfig asserts it)")
    if pick > groups:
        raise UsageError(f"moe_router_group_topk ({pick}) should be smaller than moe_router_num_groups ({groups}). "
                         "(Megatron-Core's TransformerConfig asserts it)")


def limited_devices(shape: Shape, ep: int) -> tuple[Shape, tuple]:
    """The shape's routing as Megatron-Core runs it: a moe_router_topk_limited_devices without moe_router_group_topk
    is group-limited routing over the EP ranks (TransformerConfig.__post_init__, 0.19.2 transformer_config.py:2357-2363,
    0.18.2 :2133-2139: "moe_router_topk_limited_devices is deprecated ...", group_topk = it, num_groups = EP);
    (shape, what the budget says of it)."""
    from dataclasses import replace

    limited = shape.moe_router_topk_limited_devices
    if not limited or shape.moe_router_group_topk or not shape.moe:
        return shape, ()
    return (replace(shape, moe_router_group_topk=limited, moe_router_num_groups=ep),
            (f"EP: model.moe_router_topk_limited_devices={limited} is deprecated; Megatron-Core's TransformerConfig "
             f"makes it group-limited routing, moe_router_group_topk {limited} of moe_router_num_groups {ep} (the EP "
             "size), and warns 'moe_router_topk_limited_devices is deprecated. Use moe_router_group_topk and "
             "moe_router_num_groups instead.'",))


# -- FLOPs of one micro-batch on one GPU (forward; backward is twice) -------------------------------------------------


def layer_flops(shape: Shape, tokens: int, seq: int, tp: int, cp: int, moe: bool | None = None, sp: bool = True) -> dict:
    """Forward FLOPs of one transformer layer on one GPU for `tokens` tokens of sequences `seq` long, by GEMM
    (what TP's collectives overlap with) and the attention core (causal: half the score matrix). moe: a MoE layer's
    (default: the shape's kind), with its shared expert's fc1 and fc2 (shared_fc1, shared_fc2) where it has one.
    MLA's attention GEMMs (mla.flops) in place of qkv; sp: sequence parallel (MLA's duplicated down projections run
    on the rank's sequence shard with it, on every token of every TP rank without)."""
    h, split = shape.hidden_size, tp * cp
    moe = shape.moe if moe is None else moe and shape.moe
    if shape.multi_latent_attention:
        out = mla.flops(shape, tokens, seq, tp, cp, sp)
    else:
        out = {
            "qkv": 2 * tokens * h * shape.qkv_out / split,
            "attention": 2 * 2 * tokens * seq * shape.num_attention_heads * shape.head_dim * 0.5 / split,
            "proj": 2 * tokens * shape.num_attention_heads * shape.head_dim * h / split,
        }
    if moe:
        ffn = shape.moe_ffn_hidden_size or shape.ffn_hidden_size
        routed = tokens * shape.moe_router_topk
        out["fc1"] = 2 * routed * h * ffn * (2 if shape.gated_linear_unit else 1) / split
        out["fc2"] = 2 * routed * ffn * h / split
        # the router's logits, and the shared expert's gate (SharedExpertMLP: one logit a token)
        out["router"] = 2 * tokens * h * (shape.num_moe_experts + shape.moe_shared_expert_gate) / split
        shared = shape.moe_shared_expert_intermediate_size
        if shared:  # every token through one dense, TP-split MLP of that size
            out["shared_fc1"] = 2 * tokens * h * shared * (2 if shape.gated_linear_unit else 1) / split
            out["shared_fc2"] = 2 * tokens * shared * h / split
    else:
        out["fc1"] = 2 * tokens * h * shape.ffn_hidden_size * (2 if shape.gated_linear_unit else 1) / split
        out["fc2"] = 2 * tokens * shape.ffn_hidden_size * h / split
    return out


def linear_features(shape: Shape) -> dict:
    """(input, output) features of each linear layer of a transformer layer, unsplit (an MoE layer's: one expert's)."""
    h, attn = shape.hidden_size, shape.num_attention_heads * shape.head_dim
    ffn = (shape.moe_ffn_hidden_size or shape.ffn_hidden_size) if shape.moe else shape.ffn_hidden_size
    return {"qkv": (h, shape.qkv_out), "proj": (attn, h), "fc1": (h, ffn * (2 if shape.gated_linear_unit else 1)),
            "fc2": (ffn, h)}


def adapter_params(shape: Shape, gemms, dim: int, tp: int) -> dict:
    """Elements one rank holds of the LoRA adapter on each linear: linear_in (input features x dim) and linear_out
    (dim x output features), each split across TP (Bridge's ParallelLinearAdapter: a row- or column-parallel
    linear_in, a column-parallel linear_out)."""
    features = linear_features(shape)
    return {g: dim * (features[g][0] + features[g][1]) // tp for g in sorted(gemms)}


def adapter_flops(shape: Shape, gemms, dim: int, tokens: int, tp: int, cp: int) -> float:
    """Forward FLOPs of one layer's adapters on one GPU (two GEMMs each, through the rank dim)."""
    features = linear_features(shape)
    return sum(2 * tokens * dim * (features[g][0] + features[g][1]) for g in gemms) / (tp * cp)


def logits_flops(shape: Shape, tokens: int, tp: int, cp: int) -> float:
    return 2 * tokens * shape.hidden_size * shape.vocab_size / (tp * cp)


# -- parameters each rank holds ----------------------------------------------------------------------------------------


def stage_params(shape: Shape, tp: int, ep: int, layers: int, first: bool, last: bool,
                 numbers=None, etp: int | None = None, mtp: int | None = None,
                 final_norm: bool | None = None) -> list[tuple[str, int, bool]]:
    """(name, elements, expert) of each parameter of a pipeline stage on one rank, in registration order (Megatron-Core's
    GPT model with Transformer Engine's layer spec): embedding, then per layer the projection, QKV (with its fused
    norm), MLP (fc1 with its fused norm, fc2; a MoE layer's norm, router, experts, then its shared expert), then the
    final norm, the MTP block's layers (mtp_params) and the output layer. numbers: the global number of each of the
    stage's layers (default 0 to layers - 1), which moe_layer_freq makes MoE or dense. mtp: the MTP layers the stage
    holds (default: all of them on the last stage, none elsewhere, as Megatron-Core places them without a layout); a
    stage holding them builds the embedding too (GPTModel: pre_process or mtp_process). final_norm: whether the stage
    builds the decoder's final norm (default: the last stage; with MTP layers the stage of the last decoder layer:
    final_norm_here). An expert's weights are split across expert TP (etp, default TP) and
    are expert-parallel (reduced over the expert-DP group, in DistributedDataParallel's expert buffers) where EP > 1
    or expert TP differs from TP; otherwise Megatron-Core's layers set allreduce on them as on any dense weight
    (tensor_parallel/layers.py and extensions/transformer_engine.py: use_expert_pgs) and they share the dense buffer. The vocabulary is split across
    TP as the model config sets it (Bridge's setup uses the tokenizer's, padded to a multiple of
    make_vocab_size_divisible_by x TP, where the model sets none or tokenizer.use_tokenizer_vocab_size is on:
    training/setup.py _validate_and_set_vocab_size); rotary embeddings have no parameters."""
    h = shape.hidden_size
    vocab = -(-shape.vocab_size // tp)
    etp = etp or tp
    mtp = (shape.mtp_num_layers or 0) * last if mtp is None else mtp
    out = []
    if first or mtp:
        out.append(("embedding.word_embeddings.weight", vocab * h, False))
    numbers = range(layers) if numbers is None else numbers
    for i, number in zip(range(layers), numbers):
        out += layer_params(shape, tp, ep, etp, f"decoder.layers.{i}.", shape.is_moe_layer(number))
    if last if final_norm is None else final_norm:
        out.append(("decoder.final_layernorm.weight", h, False))
    out += mtp_params(shape, tp, ep, etp, mtp)
    if last and not (first and shape.share_embeddings_and_output_weights):
        out.append(("output_layer.weight", vocab * h, False))
    return out


def final_norm_here(shape: Shape, last: bool, numbers) -> bool:
    """Whether a stage builds the decoder's final norm (TransformerBlock.has_final_layernorm_in_this_stage): the last
    stage's without MTP layers; with them the stage holding the model's last decoder layer (a layout can put the MTP
    layers and that layer on a rank before the loss's)."""
    if not shape.mtp_num_layers:
        return last
    return bool(numbers) and list(numbers)[-1] == shape.num_layers - 1


def mtp_params(shape: Shape, tp: int, ep: int, etp: int, layers: int) -> list[tuple[str, int, bool]]:
    """The MTP block's parameters on one rank (budget/mtp.py), in registration order, for `layers` of its layers: each
    MultiTokenPredictionLayer's enorm and hnorm (TENorm: the hidden size), eh_proj (TEColumnParallelLinear from 2 x
    hidden to hidden, split over TP), its transformer layer (mtp_model_layer: a decoder layer's spec, dense or MoE as
    Shape.mtp_moe says, MLA where the model is), its final_layernorm. The embedding and output layer are the model's."""
    h, out = shape.hidden_size, []
    for i in range(layers):
        p = f"mtp.layers.{i}."
        out += [(p + "enorm.weight", h, False), (p + "hnorm.weight", h, False),
                (p + "eh_proj.weight", h // tp * 2 * h, False)]
        out += layer_params(shape, tp, ep, etp, p + "mtp_model_layer.", shape.mtp_moe)
        out.append((p + "final_layernorm.weight", h, False))
    return out


def layer_params(shape: Shape, tp: int, ep: int, etp: int, p: str, moe: bool) -> list[tuple[str, int, bool]]:
    """One transformer layer's parameters on one rank (stage_params), its names under the prefix p."""
    h = shape.hidden_size
    apart = ep > 1 or etp != tp
    if shape.multi_latent_attention:
        out = mla.params(shape, tp, p)
    else:  # Attention.__init__ builds linear_proj before SelfAttention builds linear_qkv (TE fuses the input norm into it)
        out = [(p + "self_attention.linear_proj.weight", h * (shape.num_attention_heads * shape.head_dim // tp), False),
               (p + "self_attention.linear_qkv.layer_norm_weight", h, False),
               (p + "self_attention.linear_qkv.weight", shape.qkv_out // tp * h, False)]
    if shape.qk_layernorm and not shape.multi_latent_attention:  # SelfAttention builds them after linear_qkv
        out += [(p + "self_attention.q_layernorm.weight", shape.head_dim, False),
                (p + "self_attention.k_layernorm.weight", shape.head_dim, False)]
    if moe:  # the router, then grouped experts (TEGroupedMLP: every fc1, then every fc2)
        ffn = shape.moe_ffn_hidden_size or shape.ffn_hidden_size
        local = shape.num_moe_experts // ep
        out += [(p + "pre_mlp_layernorm.weight", h, False), (p + "mlp.router.weight", shape.num_moe_experts * h, False)]
        out += [(f"{p}mlp.experts.linear_fc1.weight{e}", ffn * (2 if shape.gated_linear_unit else 1) * h // etp, apart)
                for e in range(local)]
        out += [(f"{p}mlp.experts.linear_fc2.weight{e}", h * ffn // etp, apart) for e in range(local)]
        out += _shared_expert(shape, tp, p + "mlp.shared_experts.")
    else:
        ffn = shape.ffn_hidden_size // tp
        out += [(p + "mlp.linear_fc1.layer_norm_weight", h, False),
                (p + "mlp.linear_fc1.weight", ffn * (2 if shape.gated_linear_unit else 1) * h, False),
                (p + "mlp.linear_fc2.weight", h * ffn, False)]
    return out


def _shared_expert(shape: Shape, tp: int, p: str) -> list[tuple[str, int, bool]]:
    """A MoE layer's shared expert (MoELayer builds it after the experts; SharedExpertMLP: a dense MLP, not expert
    parallel, split across TP like one, its gate a parameter of its own module, so named before its linears)."""
    shared = shape.moe_shared_expert_intermediate_size
    if not shared:
        return []
    ffn, h = shared // tp, shape.hidden_size
    return ([(p + "gate_weight", h, False)] if shape.moe_shared_expert_gate else []) + [
        (p + "linear_fc1.weight", ffn * (2 if shape.gated_linear_unit else 1) * h, False),
        (p + "linear_fc2.weight", h * ffn, False)]
