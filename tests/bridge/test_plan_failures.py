"""Where plan says a choice it leaves out would fail, against the installed Megatron-Bridge (evalAB AB2-6): TP overlap
on a TP group across NVLink domains is no error of Bridge's config step (runtime_config_update() and validate() take
it; comm_overlap.py has no check of the machine), so plan says it fails at setup, in Transformer Engine's initialize_ub,
and not that Bridge raises it."""

from mbridge_overlap import api
from mbridge_overlap.bridge import adapter

VERSION = adapter.bridge_version()


def test_tp_overlap_across_nvlink_domains_passes_bridge_s_config_step_and_plan_says_setup():
    cfg = adapter.baseline_config()
    adapter.apply_overrides(cfg, {"model.tensor_model_parallel_size": 8, "model.sequence_parallel": True,
                                  "comm_overlap.tp_comm_overlap": True, "train.micro_batch_size": 1,
                                  "train.global_batch_size": 64})
    error, _ = adapter.runtime_config_update(cfg, 16)
    assert error is None and cfg.model.tp_comm_overlap is True
    d = api.plan(tp=8, gpus=16, gpu="h100", machine_facts={"gpus_per_node": 4}, model="llama3_70b",
                 bridge_version=VERSION).to_dict()
    (left,) = [n for n in d["plan_notes"] if n["id"] == "PLAN_LEAVES_KEY_AS_SHIPPED"]
    assert "Bridge raises" not in left["message"] and "fails at setup in Transformer Engine" in left["message"]
