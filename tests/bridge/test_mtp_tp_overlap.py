"""TP_OVERLAP_OFF_MTP against the installed Megatron-Bridge and Megatron-Core (tier 2): Bridge's own GPTModelProvider
(MLAModelProvider with DeepSeek-V3's decoder block spec for the MLA case) builds a small GPT model with one MTP layer
and tp_comm_overlap=True, through provide() as Bridge's training does. Transformer Engine's own Linear,
LayerNormLinear and norm constructors and Megatron-Core's TEDotProductAttention need CUDA, so they are replaced by
recorders of the userbuffers arguments Megatron-Core passes them (ub_name, ub_overlap_*): Megatron-Core's own code
(TELinear and its subclasses, TransformerLayer, GPTModel, MultiTokenPredictionLayer) runs unchanged. What it shows:
every decoder linear gets its userbuffers, eh_proj turns the shared flag off with the warning the catalog holds, and
eh_proj and every MTP-layer linear get none; with the op fuser, TEFusedMLP built afterwards (as at the first step)
passes no userbuffers to fc1 and fc2 of the decoder's MLPs either (and does without MTP); on an MLA model the first
MLA layer turned it off already and eh_proj warns nothing. Also the cited lines of this Megatron-Core release. Runs on
the default release (0.6.2) and, run by hand with that venv's python, on 0.5.1."""

import importlib.metadata
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

from mbridge_overlap import findings
from mbridge_overlap.diagnose import messages as M

from test_mla_tp_overlap import ASSIGNMENT_LINE

_BUILD = """
import json, os, sys, warnings
from functools import partial
import torch
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1")
torch.distributed.init_process_group("gloo")
torch.cuda.current_device = lambda: "cpu"
import transformer_engine.pytorch as te
def linear(self, *args, **k):  # Transformer Engine's constructor (CUDA): what Megatron-Core passes it
    torch.nn.Module.__init__(self)
    self.weight = torch.nn.Parameter(torch.empty(k.get("out_features", 1), k.get("in_features", 1), device="meta"))
    self.bias = None
    self.layer_norm_weight = torch.nn.Parameter(torch.empty(k.get("in_features", 1), device="meta"))
    self.ub_name, self.normalization = k.get("ub_name"), k.get("normalization", "RMSNorm")
    self.eps, self.zero_centered_gamma = k.get("eps", 1e-5), k.get("zero_centered_gamma", False)
    self.sequence_parallel, self.fuse_wgrad_accumulation, self.te_return_bias = False, False, False
    self.recorded = {"ub_name": k.get("ub_name"),
                     "ub": sorted(n for n, v in k.items() if n.startswith("ub_") and n != "ub_name" and v)}
def norm(self, *args, **k):
    torch.nn.Module.__init__(self)
    self.weight = torch.nn.Parameter(torch.empty(k.get("hidden_size", args[0] if args else 1), device="meta"))
te.Linear.__init__ = te.LayerNormLinear.__init__ = linear
te.RMSNorm.__init__ = te.LayerNorm.__init__ = norm
from megatron.core.extensions import transformer_engine as mte
mte.TEDotProductAttention.__init__ = lambda self, *a, **k: torch.nn.Module.__init__(self)  # (no linear)
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.models.mla_provider import MLAModelProvider
parallel_state.initialize_model_parallel(1, 1)
s = json.loads(sys.argv[2])
mla = dict(q_lora_rank=96, kv_lora_rank=64, qk_head_dim=32, qk_pos_emb_head_dim=16, v_head_dim=32, multi_latent_attention=True,
           transformer_layer_spec=partial(get_gpt_decoder_block_spec, use_transformer_engine=True)) if s["mla"] else {}
p = (MLAModelProvider if s["mla"] else GPTModelProvider)(
    **mla, num_layers=2, hidden_size=256, ffn_hidden_size=512, num_attention_heads=8, vocab_size=1024, seq_length=512,
    mtp_num_layers=s["mtp"], tp_comm_overlap=True, gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
    normalization="RMSNorm", use_cpu_initialization=True, init_model_with_meta_device=True,
    gradient_accumulation_fusion=False, use_transformer_engine_op_fuser=s["op_fuser"])
p.finalize()
p._pg_collection = ProcessGroupCollection.use_mpu_process_groups()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if s.get("qwen3vl"):  # Bridge's Qwen3VLGPTModel, the language model of Qwen3VLModel, as Qwen3VLModel builds it
        from megatron.bridge.models.qwen_vl.modelling_qwen3_vl.text_model import Qwen3VLGPTModel
        from megatron.bridge.models.gpt_provider import mtp_block_spec
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
        p.mrope_section = [8, 4, 4]
        model = Qwen3VLGPTModel(config=p, transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(),
                                vocab_size=1024, max_sequence_length=512, position_embedding_type="mrope",
                                mtp_block_spec=mtp_block_spec(p) if s["mtp"] else None, pg_collection=p._pg_collection)
    elif s.get("qwen3vl_provider"):  # Bridge's Qwen3VLModelProvider.provide() itself, its fields as the GPT one's
        from megatron.bridge.models.qwen_vl.qwen3_vl_provider import Qwen3VLModelProvider
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
        fields = {f: getattr(p, f) for f in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                  "vocab_size", "seq_length", "mtp_num_layers", "tp_comm_overlap", "gated_linear_unit", "add_bias_linear",
                  "normalization", "use_cpu_initialization", "init_model_with_meta_device", "gradient_accumulation_fusion")}
        p = Qwen3VLModelProvider(**fields, activation_func=F.silu, vision_config=Qwen3VLVisionConfig(deepstack_visual_indexes=[0]),
                                 add_encoder=False)
        p.finalize()
        p._pg_collection = ProcessGroupCollection.use_mpu_process_groups()
        model = p.provide(pre_process=True, post_process=True)
    else:
        model = p.provide(pre_process=True, post_process=True)
after = p.tp_comm_overlap
fused, options = {}, []
real = te.ops.BasicLinear.__init__
def basic_linear(self, *args, **k):  # what TEFusedMLP passes Transformer Engine's op (it builds on the meta device)
    options.append(k.get("userbuffers_options"))
    real(self, *args, **k)
te.ops.BasicLinear.__init__ = basic_linear
for n, m in model.named_modules():
    if isinstance(m, mte.TEFusedMLP):
        m._make_fused_impl()  # what its first forward does
        fused[n], options[:] = list(options), []
print(json.dumps({"linears": [[n, type(m).__name__, m.recorded] for n, m in model.named_modules() if hasattr(m, "recorded")],
                  "after": after, "fused": fused,
                  "warnings": [str(w.message) for w in caught if "user buffer" in str(w.message)]}))
"""


def _build(mtp=1, op_fuser=False, mla=False, qwen3vl=False, qwen3vl_provider=False) -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", _BUILD, port,
                        json.dumps({"mtp": mtp, "op_fuser": op_fuser, "mla": mla, "qwen3vl": qwen3vl,
                                                  "qwen3vl_provider": qwen3vl_provider})], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _warning(name: str) -> str:
    return f"The user buffer name {name} is not supported inTransformer Engine. Disabling TP communication overlap for this layer."


UB = {"qkv": ["ub_bulk_dgrad", "ub_bulk_wgrad", "ub_overlap_ag"], "fc1": ["ub_bulk_dgrad", "ub_bulk_wgrad", "ub_overlap_ag"],
      "proj": ["ub_overlap_ag", "ub_overlap_rs"], "fc2": ["ub_overlap_ag", "ub_overlap_rs"]}


def test_eh_proj_turns_tp_overlap_off_for_the_mtp_layers_only():
    got = _build()
    decoder = [(n, r) for n, _, r in got["linears"] if n.startswith("decoder.")]
    mtp = [(n, c, r) for n, c, r in got["linears"] if n.startswith("mtp.")]
    assert len(decoder) == 8 and all(r == {"ub_name": n.rsplit("_", 1)[-1], "ub": UB[n.rsplit("_", 1)[-1]]} for n, r in decoder)
    assert mtp[0][:2] == ("mtp.layers.0.eh_proj", "TEColumnParallelLinear")
    assert len(mtp) == 5 and all(r == {"ub_name": None, "ub": []} for _, _, r in mtp)  # eh_proj, qkv, proj, fc1, fc2
    assert got["after"] is False and got["warnings"] == [_warning("mtp_eh_proj")]
    (entry,) = [e for e in M.load("0.6.2").entries if e.id == "mcore.warn.849ffe4d90"]
    assert re.fullmatch(entry.pattern, got["warnings"][0])
    (logged,) = findings.record("TP_OVERLAP_OFF_MTP")["logged"]
    assert got["warnings"][0].startswith(logged["message"].replace("{tp_comm_buffer_name}", "mtp_eh_proj"))
    assert re.search(logged["line"], got["warnings"][0])
    (mla_logged,) = findings.record("TP_OVERLAP_OFF_MLA")["logged"]
    assert not re.search(mla_logged["line"], got["warnings"][0])


def test_the_op_fuser_s_mlps_read_the_flag_after_the_build():
    """TEFusedMLP builds its Transformer Engine ops at its first forward: after eh_proj turned the flag off, the
    decoder's fused MLPs pass no userbuffers for fc1 and fc2 (their linears were built with them); without MTP they do."""
    got = _build(op_fuser=True)
    assert set(got["fused"]) == {"decoder.layers.0.mlp", "decoder.layers.1.mlp", "mtp.layers.0.mtp_model_layer.mlp"}
    assert all(options == [None, None] for options in got["fused"].values())
    assert [r["ub_name"] for n, _, r in got["linears"] if n.startswith("decoder.layers.0.mlp.")] == ["fc1", "fc2"]
    plain = _build(mtp=None, op_fuser=True)
    assert plain["after"] is True and not plain["warnings"]
    assert plain["fused"] == {f"decoder.layers.{i}.mlp": [{"comm_name": "fc1"}, {"comm_name": "fc2"}] for i in (0, 1)}


def test_an_mla_model_s_mtp_block_finds_it_off_already():
    """DeepSeek-V3's case: the first MLA layer's q_down_proj turned it off (TP_OVERLAP_OFF_MLA); eh_proj warns nothing."""
    got = _build(mla=True)
    assert got["warnings"] == [_warning("q_down_proj")] and got["after"] is False
    with_ub = [n for n, _, r in got["linears"] if r["ub"]]
    assert with_ub == ["decoder.layers.0.self_attention.linear_proj"]
    assert any(n == "mtp.layers.0.eh_proj" for n, _, _ in got["linears"])


def test_qwen3vl_s_rebuilt_decoder_gets_no_userbuffers_with_mtp():
    """Bridge's Qwen3VLGPTModel calls GPTModel.__init__ (decoder, then the MTP block: eh_proj turns the shared flag
    off) and builds its decoder again from that config: with MTP no decoder linear gets userbuffers
    (TP_OVERLAP_OFF_MTP_DECODER); without MTP every one does. The release data names its providers."""
    got = _build(qwen3vl=True)
    decoder = [(n, r) for n, _, r in got["linears"] if n.startswith("decoder.")]
    assert len(decoder) == 8 and all(r == {"ub_name": None, "ub": []} for _, r in decoder)
    assert got["after"] is False and got["warnings"] == [_warning("mtp_eh_proj")]
    assert all(r == {"ub_name": None, "ub": []} for n, _, r in got["linears"] if n.startswith("mtp."))
    plain = _build(mtp=None, qwen3vl=True)
    decoder = [(n, r) for n, _, r in plain["linears"] if n.startswith("decoder.")]
    assert plain["after"] is True and not plain["warnings"]
    assert len(decoder) == 8 and all(r == {"ub_name": n.rsplit("_", 1)[-1], "ub": UB[n.rsplit("_", 1)[-1]]} for n, r in decoder)
    from megatron.bridge.models.qwen_vl.modelling_qwen3_vl import text_model

    from mbridge_overlap.bridge import adapter
    from mbridge_overlap.upstream import releases

    version = adapter.bridge_version()
    at = releases._decoder_rebuilt(releases.get(version).data_version)
    assert {"Qwen35VLModelProvider", "Qwen35VLMoEModelProvider"} <= set(at)
    assert not {"Qwen3VLModelProvider", "Qwen3VLMoEModelProvider"} & set(at)  # (Qwen3VLModel gets no MTP spec)
    lines = Path(text_model.__file__).read_text().splitlines()
    where = at["Qwen35VLModelProvider"]
    assert lines[where["decoder_line"] - 1].strip() == "self.decoder = Qwen3VLTransformerBlock("
    assert lines[where["gpt_init_line"] - 1].strip() == "super().__init__("
    record = findings.record("TP_OVERLAP_OFF_MTP_DECODER")
    assert f"{where['gpt_init_line']}, the rebuild at {where['decoder_line']}" in " ".join(record["explain"].split())


def test_qwen3vl_s_provider_builds_no_mtp_block_and_keeps_userbuffers():
    """Bridge's Qwen3VLModelProvider.provide() builds Qwen3VLModel with no mtp_block_spec: with mtp_num_layers=1 and
    tp_comm_overlap on no MTP module is built, no eh_proj warns, the flag stays on and every decoder linear gets its
    userbuffers. The release data (model_providers.json mtp_unbuilt) names it, and TP_OVERLAP_OFF_MTP is not raised."""
    got = _build(qwen3vl_provider=True)
    names = [n for n, _, _ in got["linears"]]
    assert not [n for n in names if ".mtp." in f".{n}"] and got["after"] is True and not got["warnings"]
    decoder = [(n, r) for n, _, r in got["linears"] if ".decoder." in f".{n}"]
    assert len(decoder) == 8 and all(r == {"ub_name": n.rsplit("_", 1)[-1], "ub": UB[n.rsplit("_", 1)[-1]]} for n, r in decoder)
    from megatron.bridge.models.qwen_vl import qwen3_vl_provider

    from mbridge_overlap.bridge import adapter
    from mbridge_overlap.upstream import releases

    at = releases._provider_key(releases.get(adapter.bridge_version()).data_version, "mtp_unbuilt")
    assert {"Qwen3VLModelProvider", "Qwen3VLMoEModelProvider"} <= set(at)
    assert not {"Qwen35VLModelProvider", "Qwen35VLMoEModelProvider", "GPTModelProvider"} & set(at)
    lines = Path(qwen3_vl_provider.__file__).read_text().splitlines()
    assert lines[at["Qwen3VLModelProvider"]["line"] - 1].strip() == "model = Qwen3VLModel("


# The lines the record's explain cites, per Megatron-Core release (the installed one is checked).
MTP_LINES = {"0.19": {"eh_proj": 1000, "buffer": 1010, "hybrid_stack": 1022, "mtp_model_layer": 1039, "decoder": 227, "mtp": 237,
                      "hybrid_decoder": 275, "hybrid_mtp": 296, "fc1_read": 2787, "fc2_read": 2824},
             "0.18": {"eh_proj": 825, "buffer": 835, "hybrid_stack": 847, "mtp_model_layer": 864, "decoder": 216, "mtp": 226,
                      "hybrid_decoder": 260, "hybrid_mtp": 281, "fc1_read": 2569, "fc2_read": 2606}}


def test_the_cited_megatron_core_lines_hold_for_the_installed_release():
    from megatron.core.extensions import transformer_engine as mte
    from megatron.core.models.gpt import gpt_model
    from megatron.core.models.hybrid import hybrid_model
    from megatron.core.transformer import multi_token_prediction as m

    version = importlib.metadata.version("megatron-core")
    at = MTP_LINES[version.rpartition(".")[0]]
    te_lines = Path(mte.__file__).read_text().splitlines()
    assert te_lines[ASSIGNMENT_LINE[version] - 1].strip() == "self.config.tp_comm_overlap = False"
    for key, which in (("fc1_read", "fc1"), ("fc2_read", "fc2")):
        assert te_lines[at[key] - 1].strip().startswith(f"if self.linear_{which}.config.tp_comm_overlap and")
    lines = Path(m.__file__).read_text().splitlines()
    assert lines[at["eh_proj"] - 1].strip() == "self.eh_proj = build_module("
    assert lines[at["buffer"] - 1].strip() == 'tp_comm_buffer_name="mtp_eh_proj",'
    assert lines[at["hybrid_stack"] - 1].strip() == "self.mtp_model_layer = HybridStack("
    assert lines[at["mtp_model_layer"] - 1].strip() == "self.mtp_model_layer = build_module("
    gpt = Path(gpt_model.__file__).read_text().splitlines()
    assert gpt[at["decoder"] - 1].strip() == "self.decoder = TransformerBlock("
    assert gpt[at["mtp"] - 1].strip() == "self.mtp = MultiTokenPredictionBlock("
    hybrid = Path(hybrid_model.__file__).read_text().splitlines()
    assert hybrid[at["hybrid_decoder"] - 1].strip() == "self.decoder = build_module("
    assert hybrid[at["hybrid_mtp"] - 1].strip() == "self.mtp = MultiTokenPredictionBlock("
    explain = " ".join(findings.record("TP_OVERLAP_OFF_MTP")["explain"].split())  # (the record cites them per release)
    assert re.search(rf"multi_token_prediction\.py (eh_proj )?{at['eh_proj']} \((its buffer name )?{at['buffer']}\)", explain)
    assert re.search(rf"gpt_model\.py (decoder )?{at['decoder']}, (MTP block )?{at['mtp']}", explain)


def test_explain_names_each_provider_the_installed_release_builds_without_an_mtp_block():
    """stop 56 left: explain TP_OVERLAP_OFF_MTP names, under the installed release, exactly the provider classes whose
    provide() the installed package's sources show building no MTP block (providers.mtp_unbuilt over every class)."""
    from mbridge_overlap.bridge import adapter, providers

    version = adapter.bridge_version()
    text = " ".join(findings.explanation("TP_OVERLAP_OFF_MTP").split()).partition("mtp_unbuilt")[2]
    groups = dict(re.findall(r"Megatron-Bridge ([0-9. and,]+?): (.*?)(?=; Megatron-Bridge |\.$)", text))
    (said,) = [v for k, v in groups.items() if version in re.split(r", | and ", k)]
    real = {c.__name__: hit for c in providers.every_class() for hit in [providers.mtp_unbuilt(c)] if hit}
    assert real and set(re.findall(r"(\w+) \(\w+, ", said)) == set(real), (said, real)
    for name, hit in real.items():
        assert f"{name} ({hit['model']}, {hit['file'].rpartition('/')[2]} {hit['line']})" in said


def test_falcon_h1_s_model_has_no_mtp_block_and_the_data_says_so():
    """recheck66 AM-5: the installed FalconH1ModelProvider.provide() builds FalconH1Model (at the line the release data
    cites), a LanguageModule whose __init__ takes no mtp_block_spec, no class of its MRO is GPTModel or HybridModel
    (Megatron-Core's builders of a MultiTokenPredictionBlock), and no file of its modeling package names MTP: no
    eh_proj is ever built. model_providers.json mtp_unbuilt names it; the Mamba providers (MambaModel is a HybridModel,
    which builds an MTP block from its pattern) are not named."""
    import importlib
    import inspect
    import re

    from megatron.bridge.models.falcon_h1 import falconh1_provider
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.mamba import MambaModel

    from mbridge_overlap.bridge import adapter
    from mbridge_overlap.upstream import releases

    model = importlib.import_module(falconh1_provider.__name__).FalconH1Model
    assert "mtp_block_spec" not in inspect.signature(model.__init__).parameters
    assert not {GPTModel, *MambaModel.__mro__[1:2]} & set(model.__mro__)
    package = Path(inspect.getsourcefile(model)).parent
    assert not [p for p in package.glob("*.py") if re.search(r"mtp|MultiTokenPrediction", p.read_text(), re.I)]
    at = releases._provider_key(releases.get(adapter.bridge_version()).data_version, "mtp_unbuilt")
    lines = Path(falconh1_provider.__file__).read_text().splitlines()
    assert at["FalconH1ModelProvider"]["model"] == "FalconH1Model"
    assert lines[at["FalconH1ModelProvider"]["line"] - 1].strip() == "return FalconH1Model("
    assert "MambaModelProvider" not in at and "MultiTokenPredictionBlock(" in inspect.getsource(MambaModel.__mro__[1])
