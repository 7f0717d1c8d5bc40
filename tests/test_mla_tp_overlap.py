"""TP overlap on a multi-latent attention model (TP_OVERLAP_OFF_MLA, tier 1): Megatron-Core's TELinear turns the
model's shared tp_comm_overlap off as it builds the first MLA layer's q_down_proj (tier 2 against Megatron-Core's own
code: tests/bridge/test_mla_tp_overlap.py). Raised where the effective config keeps TP overlap on and the model is
known to be MLA (model.multi_latent_attention given or in the config, or a recipe family whose Bridge model bridge sets
it); never on Bridge's shipped MLA recipes, which all leave TP overlap off; its fix proven; plan leaves TP overlap off
for such a model; the TELinear warning in a log is the finding's cause."""

import json

import pytest
import yaml

from mbridge_overlap import api
from mbridge_overlap.diagnose import messages as M
from mbridge_overlap.run import layers
from mbridge_overlap.upstream import catalog

ID = "TP_OVERLAP_OFF_MLA"
ON = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True}


def _ids(answer) -> list:
    return [f["id"] for f in answer.to_dict()["findings"]]


def _finding(answer) -> dict:
    (found,) = [f for f in answer.to_dict()["findings"] if f["id"] == ID]
    return found


def _mla_recipes(release: str = "0.6.2") -> list:
    families = layers.mla_families()
    return [e for e in catalog.entries(release) if e["model"] in families and e.get("builds")]


def test_mla_asked_for_with_tp_overlap_is_a_warning_with_a_proven_fix():
    r = api.resolve({**ON, "model.multi_latent_attention": True}, gpus=8)
    f = _finding(r)
    assert f["severity"] == "warning" and f["fix_overrides"] == {"comm_overlap.tp_comm_overlap": False}
    assert "q_down_proj" in f["message"] and "linear_proj keeps them" in f["message"] and "as given" in f["message"]
    assert r.to_dict()["effective"]["model"]["tp_comm_overlap"] is True  # Bridge's config step keeps it; the model build does not
    assert "UNMODELED_KEY" not in _ids(r)  # the answer accounts for model.multi_latent_attention
    fixed = api.resolve({**ON, "model.multi_latent_attention": True, **f["fix_overrides"]}, gpus=8)
    assert ID not in _ids(fixed) and not [x for x in fixed.to_dict()["findings"] if x["severity"] != "info"]


@pytest.mark.parametrize("over", [{"model.multi_latent_attention": False}, {"model.multi_latent_attention": "null"}, {}],
                         ids=["mla_false", "mla_null", "plain_gpt"])
def test_no_finding_without_mla(over):
    assert ID not in _ids(api.resolve({**ON, **over}, gpus=8))


def test_no_finding_where_bridge_already_turns_tp_overlap_off():
    off = {**ON, "model.multi_latent_attention": True, "model.sequence_parallel": False}
    r = api.resolve(off, gpus=8)
    assert ID not in _ids(r) and "TP_OVERLAP_OFF_NO_SEQUENCE_PARALLEL" in _ids(r)


def test_a_saved_config_s_multi_latent_attention_counts(tmp_path):
    cfg = tmp_path / "overrides.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"multi_latent_attention": True}}))
    f = _finding(api.resolve(ON, gpus=8, config=str(cfg)))
    assert "in the config" in f["message"]


def test_every_shipped_recipe_of_an_mla_family_leaves_tp_overlap_off_and_gets_no_finding():
    """Bridge 0.6.2's recipes of the families budget_models.yaml lists all set comm_overlap.tp_comm_overlap=false
    (CommOverlapConfig(tp_comm_overlap=False)): the finding's fix is what they ship."""
    entries = _mla_recipes()
    assert {e["model"] for e in entries} == set(layers.mla_families())
    assert len(entries) >= 60
    for e in entries:
        assert e["request"]["comm_overlap"]["tp_comm_overlap"] is False, e["name"]
    for e in [e for e in entries if e["request"]["model"]["tensor_model_parallel_size"] > 1][:6]:
        assert ID not in _ids(api.resolve(recipe=f"{e['package']}.{e['name']}")), e["name"]


@pytest.mark.parametrize("recipe", ["moonlight_16b_pretrain_8gpu_h100_bf16_config", "deepseek_v3_pretrain_64gpu_h100_bf16_config",
                                    "kimi_k2_pretrain_config"])
def test_turning_tp_overlap_on_in_an_mla_recipe_raises_it(recipe):
    r = api.resolve({"comm_overlap.tp_comm_overlap": True}, recipe=recipe)
    f = _finding(r)
    (entry,) = [e for e in catalog.entries("0.6.2") if e["name"] == recipe]
    assert f"{entry['model']}: Bridge's model bridge sets it" in f["message"] and ".provider_bridge" in f["message"]
    assert f["fix_overrides"] == {"comm_overlap.tp_comm_overlap": False}
    back = api.resolve({"comm_overlap.tp_comm_overlap": True, "model.multi_latent_attention": False}, recipe=recipe)
    assert ID not in _ids(back)  # the config's own word wins over the family's


def test_a_non_mla_recipe_with_tp_overlap_gets_none():
    r = api.resolve(recipe="llama3_70b_pretrain_64gpu_h100_bf16_config")
    assert r.to_dict()["effective"]["model"]["tp_comm_overlap"] is True and ID not in _ids(r)


def test_plan_leaves_tp_overlap_off_for_an_mla_model_and_says_why():
    p = api.plan(tp=2, gpus=64, gpu="h100", model="deepseek_v3").to_dict()
    assert p["effective"]["model"]["tp_comm_overlap"] is False
    ids = [f["id"] for f in p["findings"]]
    assert ID not in ids and "MODE_LEFT_OFF" not in ids
    (note,) = [f for f in p["plan_notes"] if f["id"] == "TP_OVERLAP_NOT_RECOMMENDED"]
    assert "multi-latent attention" in note["message"] and ID in note["message"]
    assert api.plan(tp=2, gpus=64, gpu="h100", model="llama3_70b").to_dict()["effective"]["model"]["tp_comm_overlap"] is True


@pytest.mark.parametrize("release", M.available())
def test_the_te_linear_warning_is_in_every_catalog_and_maps_to_the_finding(release, tmp_path):
    """The warning TELinear prints (sic "inTransformer") is in each release's catalog, and diagnose names the finding."""
    cat = json.loads((M.DATA_DIR / "releases" / release / "messages.json").read_text())
    line = ("/opt/venv/lib/python3.12/site-packages/megatron/core/extensions/transformer_engine.py:928: UserWarning: "
            "The user buffer name q_down_proj is not supported inTransformer Engine. Disabling TP communication overlap "
            "for this layer.")
    log = tmp_path / "rank0.log"
    log.write_text(line + "\n  warnings.warn(\n")
    d = api.diagnose(str(log), bridge_version=release).to_dict()
    (cause,) = [c for c in d["causes"] if c["id"] == ID]
    assert "comm_overlap.tp_comm_overlap=false" in cause["fix"]
    assert any(e.get("function") == "TELinear.__init__" and "user buffer name" in (e.get("template") or "")
                              for e in cat["entries"])


def test_the_tp_mode_says_off_but_for_the_first_mla_layer_s_linear_proj():
    """stop 56 left: the TP mode said on for an MLA model with TP overlap asked for, where Megatron-Core keeps
    userbuffers on the first MLA layer's linear_proj only (tests/bridge/test_mla_tp_overlap.py builds the layer and
    reads each linear's userbuffers arguments): the mode is off, configured on, and says which GEMM keeps them."""
    for answer in (api.resolve({**ON, "model.multi_latent_attention": True}, gpus=8),
                   api.resolve({"comm_overlap.tp_comm_overlap": True}, recipe="moonlight_16b_pretrain_8gpu_h100_bf16_config")):
        assert ID in _ids(answer)
        tp = answer.to_dict()["modes"]["tp"]
        assert tp["configured"] is True and tp["enabled"] is False, tp
        assert ID in tp["why"] and "linear_proj" in tp["why"] and "linear_q_down_proj" in tp["why"], tp
    tp = api.resolve(ON, gpus=8).to_dict()["modes"]["tp"]  # (not MLA: on, as before)
    assert tp["enabled"] is True and ID not in tp["why"]
