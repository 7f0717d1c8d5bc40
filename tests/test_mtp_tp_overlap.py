"""TP overlap with multi-token prediction (TP_OVERLAP_OFF_MTP, tier 1): Megatron-Core's TELinear turns the model's
shared tp_comm_overlap off as it builds the first MTP layer's eh_proj (userbuffers name mtp_eh_proj), after the
decoder (tier 2 against Bridge's own GPTModelProvider: tests/bridge/test_mtp_tp_overlap.py). Raised, as info with
nothing to fix, where the effective config keeps TP overlap on and the run has MTP layers (model.mtp_num_layers from
the recipe, the config or an override); never where TP_OVERLAP_OFF_MLA says it all (DeepSeek-V3); on every shipped
recipe with MTP and TP overlap on and on none without; the op fuser's loss said where it is set; TELinear's warning
for mtp_eh_proj in a log is its cause, in every release's catalog."""

import json

import pytest
import yaml

from mbridge_overlap import api
from mbridge_overlap.diagnose import messages as M
from mbridge_overlap.run import layers
from mbridge_overlap.upstream import catalog, releases

ID = "TP_OVERLAP_OFF_MTP"
ON = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True}
GLM = "glm45_air_106b_pretrain_config"  # GLM-4.5-Air: MoE with one MTP layer, no multi-latent attention


def _ids(answer) -> list:
    return [f["id"] for f in answer.to_dict()["findings"]]


def _finding(answer) -> dict:
    (found,) = [f for f in answer.to_dict()["findings"] if f["id"] == ID]
    return found


def test_mtp_with_tp_overlap_is_info_with_nothing_to_fix():
    r = api.resolve({**ON, "model.mtp_num_layers": 2}, gpus=8)
    f = _finding(r)
    assert f["severity"] == "info" and not f["fix_overrides"] and f["fix"].startswith("nothing to fix")
    assert "mtp_eh_proj" in f["message"] and "model.mtp_num_layers=2 as given" in f["message"]
    assert "keep theirs (qkv, proj, fc1, fc2)" in f["message"] and "TEFusedMLP" not in f["message"]
    assert r.to_dict()["effective"]["model"]["tp_comm_overlap"] is True  # Bridge keeps it; only the MTP block loses it
    assert not [x for x in r.to_dict()["findings"] if x["severity"] != "info"]


@pytest.mark.parametrize("over", [{"model.mtp_num_layers": None}, {"model.mtp_num_layers": 0}, {"model.mtp_num_layers": "null"},
                                  {}], ids=["null", "zero", "null_text", "plain_gpt"])
def test_no_finding_without_mtp_layers(over):
    assert ID not in _ids(api.resolve({**ON, **over}, gpus=8))


@pytest.mark.parametrize("off", [{"model.sequence_parallel": False}, {"model.tensor_model_parallel_size": 1},
                                 {"comm_overlap.tp_comm_overlap": False}], ids=["no_sp", "tp1", "off"])
def test_no_finding_where_tp_overlap_is_off_anyway(off):
    assert ID not in _ids(api.resolve({**ON, "model.mtp_num_layers": 1, **off}, gpus=8))


def test_a_recipe_s_mtp_layers_and_a_saved_config_s_count(tmp_path):
    f = _finding(api.resolve(ON, recipe=GLM))
    assert "the recipe's model.mtp_num_layers=1" in f["message"] and "TP=2" in f["message"]
    assert ID not in _ids(api.resolve({**ON, "model.mtp_num_layers": None}, recipe=GLM))
    cfg = tmp_path / "overrides.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"mtp_num_layers": 1, "use_transformer_engine_op_fuser": True}}))
    f = _finding(api.resolve(ON, gpus=8, config=str(cfg)))
    assert "model.mtp_num_layers=1 in the config" in f["message"] and "TEFusedMLP" in f["message"]


def test_the_op_fuser_s_mlps_lose_them_too_and_it_is_read():
    """Transformer Engine's op fuser (dense MLPs of Bridge's GPT spec) reads the flag at the first step: the decoder's
    fused MLPs on the MTP's rank lose fc1/fc2 userbuffers too; not with MoE MLPs, which it does not build."""
    r = api.resolve({**ON, "model.mtp_num_layers": 1, "model.use_transformer_engine_op_fuser": True}, gpus=8)
    f = _finding(r)
    assert "TEFusedMLP" in f["message"] and "fc1 and fc2 without userbuffers" in f["message"]
    assert "UNMODELED_KEY" not in _ids(r)  # the finding reads it
    moe = api.resolve({**ON, "model.mtp_num_layers": 1, "model.use_transformer_engine_op_fuser": True,
                       "model.num_moe_experts": 8}, gpus=8)
    assert "TEFusedMLP" not in _finding(moe)["message"]
    assert "UNMODELED_KEY" in _ids(api.resolve({**ON, "model.use_transformer_engine_op_fuser": True}, gpus=8))


@pytest.mark.parametrize("over", [{}, {"model.mtp_num_layers": 1}], ids=["recipe", "mtp_given"])
def test_an_mla_model_gets_the_mla_finding_alone(over):
    """DeepSeek-V3 (MLA and one MTP layer): its first MLA layer turned TP overlap off; eh_proj prints nothing."""
    ids = _ids(api.resolve({"comm_overlap.tp_comm_overlap": True, **over}, recipe="deepseek_v3_pretrain_64gpu_h100_bf16_config"))
    assert "TP_OVERLAP_OFF_MLA" in ids and ID not in ids
    ids = _ids(api.resolve({**ON, "model.mtp_num_layers": 1, "model.multi_latent_attention": True}, gpus=8))
    assert "TP_OVERLAP_OFF_MLA" in ids and ID not in ids


def _name(entry) -> str:
    return f"{entry['package']}.{entry['name']}"


@pytest.mark.parametrize("release", catalog.versions())
def test_every_shipped_recipe_with_mtp_and_tp_overlap_gets_it_and_none_without(release):
    """Each release's catalog: every recipe with MTP layers or TP overlap left on is resolved, and gets the finding
    exactly where it has both (there are none: no MTP recipe runs TP overlap, as the explain says); the MTP recipes of
    a non-MLA family with TP > 1 get it once TP overlap is asked for with sequence parallel."""
    entries = [e for e in catalog.entries(release) if e.get("builds") and "request" in e]
    mtp = [e for e in entries if e["request"]["model"].get("mtp_num_layers")]
    on = [e for e in entries if ((e["bridge"].get("effective") or {}).get("model") or {}).get("tp_comm_overlap")]
    assert len(mtp) >= 10 and on and not [e for e in mtp if e in on]
    for e in mtp + on:
        assert (ID in _ids(api.resolve(recipe=_name(e), bridge_version=release))) is (e in mtp and e in on), e["name"]
    mla = set(layers.mla_families())
    turned = [e for e in mtp if e["model"] not in mla and e["request"]["model"]["tensor_model_parallel_size"] > 1][:3]
    assert turned
    for e in turned:
        r = api.resolve({"comm_overlap.tp_comm_overlap": True, "model.sequence_parallel": True}, recipe=_name(e),
                        bridge_version=release)
        # (a Qwen3.5-VL recipe's model builds its decoder again after the MTP block: TP_OVERLAP_OFF_MTP_DECODER)
        want = "TP_OVERLAP_OFF_MTP_DECODER" if releases.decoder_rebuilt(release, e) else ID
        assert want in _ids(r) and r.to_dict()["effective"]["model"]["tp_comm_overlap"] is True, e["name"]


@pytest.mark.parametrize("release", M.available())
def test_te_linear_s_warning_for_mtp_eh_proj_is_the_finding_in_every_catalog(release, tmp_path):
    cat = json.loads((M.DATA_DIR / "releases" / release / "messages.json").read_text())
    assert any(e.get("function") == "TELinear.__init__" and "user buffer name" in (e.get("template") or "")
               for e in cat["entries"])
    for name, mtp in (("mtp_eh_proj", True), ("q_down_proj", False)):
        log = tmp_path / f"{name}.log"
        log.write_text("/opt/venv/lib/python3.12/site-packages/megatron/core/extensions/transformer_engine.py:928: "
                       f"UserWarning: The user buffer name {name} is not supported inTransformer Engine. Disabling TP "
                       "communication overlap for this layer.\n  warnings.warn(\n")
        causes = api.diagnose(str(log), bridge_version=release).to_dict()["causes"]
        ids = [c["id"] for c in causes]
        assert (ID in ids) is mtp and ("TP_OVERLAP_OFF_MLA" in ids) is not mtp, (name, ids)
        if mtp:
            (cause,) = [c for c in causes if c["id"] == ID]
            assert cause["fix"].startswith("nothing to fix")
