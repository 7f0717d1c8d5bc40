# ruff: noqa: E501  (the log as slime printed it)
"""evalAD AD2-2: slime's "no_sync_func must be None" on its second train() call (slime issue 1779). The assert checks
config.no_sync_func, a callback Bridge's _update_model_config_funcs and Megatron-LM's train() install right after the
check (with ddp.overlap_grad_reduce on): no config field a user sets, so no knob; the cause says what installs it and
the setting that makes the check reachable, and the catalog's condition is quoted as its own copy's, not the frame's
(slime's line reads `assert config.no_sync_func is None`)."""

from __future__ import annotations

from mbridge_overlap import api
from mbridge_overlap.output import text as render

LOG = """\
(MegatronTrainRayActor pid=48213) [2026-04-23 10:12:51] model.py:402 - Train rollout 1 step 0 done
Traceback (most recent call last):
  File "/root/slime/train.py", line 106, in <module>
    train(parse_args())
  File "/root/slime/train.py", line 85, in train
    ray.get(actor_model.async_train(rollout_id, rollout_data_ref))
  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 2882, in get
    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)
ray.exceptions.RayTaskError(AssertionError): ray::MegatronTrainRayActor.train() (pid=48213, ip=10.0.0.12, actor_id=5b1f, repr=<slime.backends.megatron_utils.actor.MegatronTrainRayActor object at 0x7f2c>)
  File "/root/slime/slime/backends/megatron_utils/actor.py", line 391, in train
    return self.train_actor(rollout_id, rollout_data)
  File "/root/slime/slime/backends/megatron_utils/actor.py", line 470, in train_actor
    train(rollout_id, self.model, self.optimizer, self.opt_param_scheduler, data_iterator, num_microbatches)
  File "/root/slime/slime/backends/megatron_utils/model.py", line 512, in train
    assert config.no_sync_func is None, (
AssertionError: When overlap_grad_reduce is True, config.no_sync_func must be None; a custom no_sync_func is not supported when overlapping grad-reduce
"""


def test_a_run_time_callback_is_no_knob_and_the_cause_says_what_installs_it(tmp_path):
    (tmp_path / "slime.log").write_text(LOG)
    d = api.diagnose([tmp_path / "slime.log"]).to_dict()
    (cause,) = [c for c in d["causes"] if c["id"] == "OVERLAP_PATH_ERROR"]
    assert "model.no_sync_func" not in cause["knobs"] and "ddp.overlap_grad_reduce" in cause["knobs"]
    said = cause["message"]
    assert "no_sync_func is no config field to set but a callback Megatron installs at run time, reached only with " \
        "ddp.overlap_grad_reduce on" in said
    assert "a second pass through such code in one process" in said
    shown = render.diagnosis(d)
    assert "(megatron-bridge 0.6.2), which asserts model_config.no_sync_func is None)" in shown
    assert "): assert model_config.no_sync_func is None" not in shown  # (not as the slime frame's own code)
