"""TP overlap with multi-token prediction on a model that builds its decoder again after the MTP block
(TP_OVERLAP_OFF_MTP_DECODER, tier 1; tier 2: tests/bridge/test_mtp_tp_overlap.py builds Bridge's Qwen3VLGPTModel):
Bridge's Qwen3.5-VL providers (Qwen3VLGPTModel) and EXAONE 4.5 (Exaone45GPTModel) call GPTModel.__init__, whose MTP
block's eh_proj turns the shared tp_comm_overlap off, then build the decoder again from that config. The release data
(model_providers.json decoder_rebuilt, generated from the installed sources) names them; a warning with a proven fix
(model.mtp_num_layers=null), modes.tp off with PP = 1 and said partial with PP > 1, and diagnose's mtp_eh_proj line
with such a recipe is this finding."""

import re

import pytest

from mbridge_overlap import api
from mbridge_overlap.upstream import releases

ID = "TP_OVERLAP_OFF_MTP_DECODER"
R = "qwen35_vl_9b_pretrain_mock_config"  # Qwen35VLModelProvider, TP 4, PP 1
ON = {"comm_overlap.tp_comm_overlap": True, "model.sequence_parallel": True}
PP = "qwen35_vl_122b_a10b_pretrain_128gpu_h100_bf16_config"  # Qwen35VLMoEModelProvider, TP 2, PP 8, VPP 2


def _answer(overrides, recipe=R, **kw) -> dict:
    return api.resolve(overrides, recipe=recipe, **kw).to_dict()


def _found(d) -> dict:
    return {f["id"]: f for f in d["findings"]}


@pytest.mark.parametrize("release,line", [("0.6.2", 119), ("0.5.1", 100)])
def test_the_release_data_names_the_rebuilding_providers(release, line):
    at = releases._decoder_rebuilt(releases.get(release).data_version)
    assert {"Qwen35VLModelProvider", "Qwen35VLMoEModelProvider"} <= set(at)
    assert not {"Qwen3VLModelProvider", "Qwen3VLMoEModelProvider", "GPTModelProvider"} & set(at)
    assert at["Qwen35VLModelProvider"]["decoder_line"] == line
    assert ("Exaone45ModelProvider" in at) is (release == "0.6.2")


def test_with_pp_1_tp_overlap_is_off_for_the_whole_model():
    d = _answer({**ON, "model.mtp_num_layers": 1})
    found = _found(d)
    f = found[ID]
    assert "TP_OVERLAP_OFF_MTP" not in found
    assert f["severity"] == "warning" and f["fix_overrides"] == {"model.mtp_num_layers": None}
    assert "every decoder layer and the MTP layers run" in f["message"] and "text_model.py:119" in f["message"]
    assert "comm_overlap.tp_comm_overlap=false" in f["fix"]
    assert d["modes"]["tp"]["enabled"] is False and ID in d["modes"]["tp"]["why"]


def test_without_mtp_tp_overlap_stays_on():
    d = _answer({**ON, "model.mtp_num_layers": None})
    assert ID not in _found(d) and "TP_OVERLAP_OFF_MTP" not in _found(d)
    assert d["modes"]["tp"]["enabled"] is True


def test_with_pp_the_mtp_s_chunk_loses_them_and_the_mode_says_so():
    d = _answer({"comm_overlap.tp_comm_overlap": True, "model.mtp_num_layers": 1}, recipe=PP)
    f = _found(d)[ID]
    assert "on the pipeline rank that holds the MTP block" in f["message"]
    assert f["fix_overrides"] == {"model.mtp_num_layers": None} and "other pipeline ranks too" in f["fix"]
    assert d["modes"]["tp"]["enabled"] is True and ID in d["modes"]["tp"]["why"]


def test_the_older_release_cites_its_own_line():
    f = _found(_answer({**ON, "model.mtp_num_layers": 1}, bridge_version="0.5.1"))[ID]
    assert "text_model.py:100" in f["message"]


def test_diagnose_s_mtp_eh_proj_line_with_such_a_recipe_is_this_finding(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("/opt/venv/lib/python3.12/site-packages/megatron/core/extensions/transformer_engine.py:928: "
                   "UserWarning: The user buffer name mtp_eh_proj is not supported inTransformer Engine. Disabling TP "
                   "communication overlap for this layer.\n  warnings.warn(\n")
    causes = api.diagnose(str(log), recipe=R, overrides={**ON, "model.mtp_num_layers": 1}).to_dict()["causes"]
    (cause,) = [c for c in causes if c["id"] == ID]
    assert cause["fix"].startswith("model.mtp_num_layers=null")
    alone = api.diagnose(str(log)).to_dict()["causes"]
    (plain,) = [c for c in alone if c["id"] == "TP_OVERLAP_OFF_MTP"]
    assert "TP_OVERLAP_OFF_MTP_DECODER" in plain["fix"]


# -- the budget, diff and plan (vlmtp2), and the providers that build no MTP block --------------------------------


def test_the_budget_prices_the_whole_model_s_tp_without_userbuffers_with_pp_1():
    on = {**ON, "model.mtp_num_layers": 1, "model.tensor_model_parallel_size": 2}
    b = api.budget(on, recipe=R, model="llama3_8b").budget
    off = api.budget({**on, "comm_overlap.tp_comm_overlap": False}, recipe=R, model="llama3_8b").budget
    tp = [i for i in b.items if i.dimension == "tp"]
    assert all(i.setting is None for i in tp)  # (no setting hides any of them)
    assert sum(1 for i in tp if ID in i.what) == 4
    assert abs(b.iteration_s - off.iteration_s) < 1e-9 and not b.overlap_cost.get("tp_comm_overlap")
    assert any(ID in a and "all the decoder layers of the model" in a for a in b.assumptions)
    plain = api.budget({**on, "model.mtp_num_layers": None}, recipe=R, model="llama3_8b").budget  # (no MTP: userbuffers)
    assert not any(ID in i.what for i in plain.items) and plain.overlap_cost["tp_comm_overlap"] > 0


def test_the_budget_prices_only_the_mtp_chunk_s_decoder_with_pp_and_vpp():
    b = api.budget({**ON, "model.mtp_num_layers": 1}, recipe=PP, model="qwen3_30b_a3b").budget  # 48 layers: 3 a chunk
    lost = [i for i in b.items if ID in i.what]
    kept = [i for i in b.items if i.dimension == "tp" and i.setting == "tp_comm_overlap"]
    assert lost and kept and {i.count for i in lost if i.collective == "reduce_scatter"} == {
        i.count for i in kept if i.collective == "reduce_scatter"}  # (half the rank's 6 layers each way)
    assert any("3 of the 6 decoder layers of pipeline rank 7" in a for a in b.assumptions)


def test_diff_names_the_finding_and_does_not_say_turned_on():
    d = api.diff(recipe=R, overrides={**ON, "model.mtp_num_layers": 1}).to_dict()
    tp = next(c for c in d["overlap_changes"] if c["key"] == "model.tp_comm_overlap")
    assert ID in tp["message"] and "does nothing" in tp["message"] and "TP overlap turned on" not in tp["message"]
    assert "model.mtp_num_layers" in {c["key"] for c in tp["causes"]}
    d = api.diff(recipe=PP, overrides={"comm_overlap.tp_comm_overlap": True, "model.mtp_num_layers": 1}).to_dict()
    tp = next(c for c in d["overlap_changes"] if c["key"] == "model.tp_comm_overlap")
    assert ID in tp["message"] and "except on the MTP block's pipeline rank" in tp["message"]


def test_plan_leaves_tp_overlap_off_where_it_would_do_nothing():
    p = api.plan(recipe=R, tp=2, overrides={"model.mtp_num_layers": 1}).to_dict()
    assert p["overrides"]["comm_overlap.tp_comm_overlap"] is False
    notes = {n["id"]: n for n in p["plan_notes"]}
    assert ID in notes["TP_OVERLAP_NOT_RECOMMENDED"]["message"]
    assert "MODE_LEFT_OFF" not in {f["id"] for f in p["findings"]}
    p = api.plan(recipe=R, tp=2).to_dict()  # (no MTP: on, as before)
    assert p["overrides"]["comm_overlap.tp_comm_overlap"] is True


Q3D = "qwen3_vl_8b_pretrain_mock_config"  # Qwen3VLModelProvider
Q3 = "qwen3_vl_235b_a22b_pretrain_256gpu_h100_bf16_config"  # Qwen3VLMoEModelProvider: Qwen3VLModel with no MTP spec


@pytest.mark.parametrize("release", ["0.6.2", "0.5.1", "0.5.0"])
def test_the_release_data_names_the_providers_that_build_no_mtp_block(release):
    at = releases._provider_key(releases.get(release).data_version, "mtp_unbuilt")
    assert {"Qwen3VLModelProvider", "Qwen3VLMoEModelProvider"} <= set(at)
    assert not {"Qwen35VLModelProvider", "Qwen35VLMoEModelProvider", "GPTModelProvider"} & set(at)
    assert at["Qwen3VLModelProvider"]["model"] == "Qwen3VLModel"


def test_qwen3_vl_with_mtp_layers_gets_no_mtp_finding_and_no_mtp_budget():
    o = {**ON, "model.mtp_num_layers": 1}
    found = _found(_answer(o, recipe=Q3))
    assert not {"TP_OVERLAP_OFF_MTP", ID} & set(found)
    b = api.budget({**o, "model.tensor_model_parallel_size": 2}, recipe=Q3D, model="llama3_8b").budget
    assert not any("MTP" in i.what for i in b.items)
    assert any("no MTP layers costed" in a and "Qwen3VLModelProvider" in a for a in b.assumptions)


def test_explain_tp_overlap_off_mtp_names_the_providers_that_build_no_mtp_block_per_release():
    """stop 56 left: explain TP_OVERLAP_OFF_MTP did not name the providers whose provide() builds no MTP block (no
    eh_proj: nothing turned off, the finding not raised); its explanation names them per release, from
    model_providers.json mtp_unbuilt, in explain and in references/findings.md."""
    from mbridge_overlap.findings import explanation

    text = " ".join(api.explain("TP_OVERLAP_OFF_MTP")["explain"].split())
    assert text == " ".join(explanation("TP_OVERLAP_OFF_MTP").split())
    groups = dict(re.findall(r"Megatron-Bridge ([0-9. and,]+?): (.*?)(?=; Megatron-Bridge |\.$)", text.partition("mtp_unbuilt")[2]))
    for release in releases.versions():
        at = releases._provider_key(releases.get(release).data_version, "mtp_unbuilt")
        (said,) = [v for k, v in groups.items() if release in re.split(r", | and ", k)]
        assert at and all(f"{cls} ({v['model']}, {v['file'].rpartition('/')[2]} {v['line']})" in said for cls, v in at.items()), (release, said)
        assert len(said.split("), ")) == len(at), said
    assert "Gemma4DenseProvider" in text and "Gemma4DenseProvider" not in next(v for k, v in groups.items() if "0.5.1" in k)


FALCON = "megatron.bridge.models.falcon_h1.falconh1_provider.FalconH1ModelProvider"


@pytest.mark.parametrize("release", ["0.6.2", "0.6.0", "0.5.1", "0.5.0"])
def test_falcon_h1_builds_no_mtp_block(release, tmp_path):
    """recheck66 AM-5: FalconH1ModelProvider.provide() builds FalconH1Model, whose __init__ takes no mtp_block_spec
    and whose module has no MTP code (a LanguageModule, not a GPTModel): no eh_proj, so no TP_OVERLAP_OFF_MTP and no
    MTP layers costed; the walk had left it unknown (it reached no construction that takes an mtp_block_spec)."""
    at = releases._provider_key(releases.get(release).data_version, "mtp_unbuilt")
    assert at["FalconH1ModelProvider"] == {"file": "megatron/bridge/models/falcon_h1/falconh1_provider.py", "line": 138,
                                           "model": "FalconH1Model"}
    assert not {"MambaModelProvider", "NemotronHModelProvider"} & set(at)  # (MambaModel is a HybridModel: MTP)
    config = tmp_path / "run.yaml"
    config.write_text(f"model:\n  _target_: {FALCON}\n  seq_length: 4096\n  tensor_model_parallel_size: 2\n"
                      "  sequence_parallel: true\n  mtp_num_layers: 1\ndataset:\n  seq_length: 4096\n"
                      "comm_overlap:\n  tp_comm_overlap: true\n")
    found = [f.id for f in api.resolve({}, gpus=8, config=str(config), bridge_version=release).findings]
    assert "TP_OVERLAP_OFF_MTP" not in found and ID not in found
    b = api.budget({"train.global_batch_size": 64}, gpus=8, config=str(config), model="llama3_8b",
                   bridge_version=release).budget
    assert not any("MTP" in i.what for i in b.items)
    assert any("no MTP layers costed" in a and "FalconH1ModelProvider" in a and "FalconH1Model" in a for a in b.assumptions)
