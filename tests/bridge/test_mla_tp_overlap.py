"""TP_OVERLAP_OFF_MLA against the installed Megatron-Core and Bridge (tier 2): two MLA transformer layers built from
Megatron-Core's Transformer Engine layer spec (get_gpt_layer_with_transformer_engine_spec(multi_latent_attention=True),
the spec Bridge's GPTModelProvider builds an MLA model with) on one shared MLATransformerConfig with tp_comm_overlap=True.
Transformer Engine's own Linear and LayerNormLinear constructors need CUDA, so they are replaced by recorders of the
userbuffers arguments Megatron-Core passes them (ub_name, ub_overlap_*): Megatron-Core's own code (TELinear,
TERowParallelLinear, TELayerNormColumnParallelLinear, MLASelfAttention, TransformerLayer) runs unchanged. What it
shows: linear_proj is built with userbuffers, the down projection (q_down_proj; q_proj without a query down projection)
turns the shared flag off with the warning the catalog holds, and every TE linear built after it, in this layer and
the next, gets no userbuffers. Also: the cited code at the cited lines of this Megatron-Core release, the cited lines
of Bridge's model bridges, and that Bridge's comm_overlap.py and MLA provider do not handle it."""

import inspect
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mbridge_overlap import findings
from mbridge_overlap.diagnose import messages as M
from mbridge_overlap.run import layers

_BUILD = """
import json, os, sys, warnings
import torch
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1")
torch.distributed.init_process_group("gloo")
torch.cuda.current_device = lambda: "cpu"
import transformer_engine.pytorch as te
built = []
def recorder(init_of):
    def init(self, *args, **k):  # Transformer Engine's constructor, which needs CUDA: what Megatron-Core passes it
        torch.nn.Module.__init__(self)
        self.weight = torch.nn.Parameter(torch.empty(k.get("out_features", 1), k.get("in_features", 1), device="meta"))
        self.bias = None
        self.layer_norm_weight = torch.nn.Parameter(torch.empty(k.get("in_features", 1), device="meta"))
        built.append({"class": type(self).__name__, "ub_name": k.get("ub_name"),
                      "ub": sorted(n for n, v in k.items() if n.startswith("ub_") and n != "ub_name" and v)})
        self.ub_args = built[-1]  # (read off the built layer's modules below)
    return init
te.Linear.__init__ = recorder(te.Linear.__init__)
te.LayerNormLinear.__init__ = recorder(te.LayerNormLinear.__init__)
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.spec_utils import build_module
from megatron.core.transformer.transformer_config import MLATransformerConfig
parallel_state.initialize_model_parallel(1, 1)
s = json.loads(sys.argv[2])
cfg = MLATransformerConfig(num_layers=2, hidden_size=256, ffn_hidden_size=512, num_attention_heads=8,
                           q_lora_rank=s["q_lora_rank"], kv_lora_rank=64, qk_head_dim=32, qk_pos_emb_head_dim=16,
                           v_head_dim=32, qk_layernorm=s["qk_layernorm"], tp_comm_overlap=True, gated_linear_unit=True,
                           activation_func=F.silu, add_bias_linear=False, normalization="RMSNorm",
                           use_cpu_initialization=True)
spec = get_gpt_layer_with_transformer_engine_spec(multi_latent_attention=True, qk_layernorm=s["qk_layernorm"])
spec.submodules.input_layernorm = spec.submodules.pre_mlp_layernorm = IdentityOp  # (TENorm: CUDA; no linear)
spec.submodules.self_attention.submodules.core_attention = IdentityOp  # (TEDotProductAttention: CUDA; no linear)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    modules = {}
    for n in (1, 2):
        built.append({"layer": n, "tp_comm_overlap": cfg.tp_comm_overlap})
        layer = build_module(spec, config=cfg, layer_number=n)
        modules.update({f"layer{n}.{name}": m.ub_args for name, m in layer.named_modules() if hasattr(m, "ub_args")})
print(json.dumps({"built": built, "after": cfg.tp_comm_overlap, "modules": modules,
                  "warnings": [str(w.message) for w in caught if "user buffer" in str(w.message)]}))
"""


def _build(q_lora_rank, qk_layernorm) -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", _BUILD, port,
                        json.dumps({"q_lora_rank": q_lora_rank, "qk_layernorm": qk_layernorm})],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("q_lora_rank, qk_layernorm, flips", [(96, True, "q_down_proj"), (None, False, "q_proj")],
                         ids=["q_down_proj", "no_q_lora_q_proj"])
def test_the_first_mla_down_projection_turns_tp_overlap_off_for_everything_built_after_it(q_lora_rank, qk_layernorm, flips):
    got = _build(q_lora_rank, qk_layernorm)
    built, after = got["built"], got["after"]
    first, second = built.index({"layer": 1, "tp_comm_overlap": True}), built.index({"layer": 2, "tp_comm_overlap": False})
    layer1, layer2 = built[first + 1:second], built[second + 1:]
    with_ub = [b for b in layer1 if b["ub"]]
    # linear_proj only (Attention.__init__ builds one and MultiLatentAttention.__init__ its own, both before the down
    # projection), with the userbuffers reduce-scatter
    assert with_ub and all(b["class"] == "TERowParallelLinear" and b["ub_name"] == "proj" for b in with_ub)
    assert layer1[:len(with_ub)] == with_ub  # the first modules built
    rest = layer1[len(with_ub):] + layer2
    assert len(rest) >= 12 and not any(b["ub"] or b["ub_name"] for b in rest)  # up/down projections, fc1, fc2: none
    assert {b["class"] for b in rest} >= {"TELinear" if q_lora_rank else "TEColumnParallelLinear",
                                          "TELayerNormColumnParallelLinear", "TERowParallelLinear"}
    assert after is False
    (warning,) = got["warnings"]
    assert warning == (f"The user buffer name {flips} is not supported inTransformer Engine. "
                       "Disabling TP communication overlap for this layer.")
    # the catalog's message for it, and the finding's logged prefix
    (entry,) = [e for e in M.load("0.6.2").entries if e.id == "mcore.warn.849ffe4d90"]
    assert re.fullmatch(entry.pattern, warning)
    (logged,) = findings.record("TP_OVERLAP_OFF_MLA")["logged"]
    assert warning.startswith(logged["message"].replace("{tp_comm_buffer_name}", flips))
    assert re.search(logged["line"], warning)  # (MLA's buffer names only: recheck60 AG1)


# The line of `self.config.tp_comm_overlap = False` in TELinear.__init__, per Megatron-Core release (the record's
# explain and source cite them); the installed one is checked, the others were read from their venvs.
ASSIGNMENT_LINE = {"0.19.2": 927, "0.19.0": 927, "0.18.2": 805, "0.18.0": 805}
# MLASelfAttention's userbuffers names and the lines that pass them, per release.
MLA_LINES = {"0.19": {"proj": 230, "q_proj": 519, "q_down_proj": 545, "q_up_proj": 566, "kv_down_proj": 592, "kv_up_proj": 613},
             "0.18": {"proj": 230, "q_proj": 516, "q_down_proj": 542, "q_up_proj": 563, "kv_down_proj": 589, "kv_up_proj": 610}}


def test_the_cited_megatron_core_lines_hold_for_the_installed_release():
    import importlib.metadata

    from megatron.core.extensions import transformer_engine as mte
    from megatron.core.transformer import multi_latent_attention as mla

    version = importlib.metadata.version("megatron-core")
    lines = Path(mte.__file__).read_text().splitlines()
    n = ASSIGNMENT_LINE[version]
    assert lines[n - 1].strip() == "self.config.tp_comm_overlap = False"
    assert 'tp_comm_buffer_name not in ["qkv", "proj", "fc1", "fc2"]' in lines[n - 3]
    assert inspect.getsourcelines(mte.TELinear.__init__)[1] < n < inspect.getsourcelines(mte.TELinear.__init__)[1] + 200
    mla_lines = Path(mla.__file__).read_text().splitlines()
    for name, line in MLA_LINES[version.rpartition(".")[0]].items():
        assert mla_lines[line - 1].strip() == f"tp_comm_buffer_name='{name}',", (name, line)


def test_bridge_s_cited_mla_bridges_and_no_handling_of_it():
    import importlib.metadata

    import megatron.bridge as mb

    import ast

    root = Path(mb.__file__).resolve().parent.parent.parent  # site-packages: the cited paths start with megatron/
    cited = importlib.metadata.version("megatron-bridge") == "0.6.2"  # every cited file is 0.6.2's (others: where present)
    for family, rec in layers.mla_families().items():
        path, method = (part.strip() for part in rec["source"].split(",")[:2])
        if not (cited or (root / path).exists()):
            continue
        cls, _, fn = method.partition(".")
        tree = ast.parse((root / path).read_text())
        (func,) = [f for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == cls
                   for f in c.body if isinstance(f, ast.FunctionDef) and f.name == fn]
        assert "provider.multi_latent_attention = True" in ast.unparse(func), family
    comm_overlap = (root / "megatron/bridge/training/comm_overlap.py").read_text()
    assert "multi_latent_attention" not in comm_overlap and "q_down_proj" not in comm_overlap
    assert "tp_comm_overlap" not in (root / "megatron/bridge/models/mla_provider.py").read_text()


@pytest.mark.parametrize("q_lora_rank", [96, None], ids=["q_down_proj", "no_q_lora_q_proj"])
def test_the_tp_mode_says_what_the_built_mla_layers_get(q_lora_rank):
    """stop 56 left: the TP mode said on for an MLA model with TP overlap. Two MLA layers built by Megatron-Core's own
    code: of every Transformer Engine linear the layers hold, only the first layer's linear_proj has userbuffers; the
    skill's mode is off (configured on) and names that linear and the projection that turns the flag off."""
    from mbridge_overlap import api

    got = _build(q_lora_rank, q_lora_rank is not None)
    modules = got["modules"]
    assert len(modules) >= 10, modules
    kept = sorted(name for name, r in modules.items() if r["ub"] or r["ub_name"])
    assert kept == ["layer1.self_attention.linear_proj"], modules
    assert modules[kept[0]]["ub_name"] == "proj" and modules[kept[0]]["ub"]
    flips = "linear_q_down_proj" if q_lora_rank else "linear_q_proj"
    assert any(name.endswith(f".{flips}") for name in modules)
    on = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True,
          "model.multi_latent_attention": True}
    tp = api.resolve(on, gpus=8).to_dict()["modes"]["tp"]
    assert tp["configured"] is True and tp["enabled"] is False, tp
    assert "only that layer's linear_proj" in tp["why"] and flips in tp["why"], tp
