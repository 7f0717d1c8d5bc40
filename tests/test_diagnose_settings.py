"""diagnose's "settings the text names" (diagnose/settings.py, issue 31 batch 17): each overlap setting a line names in
Bridge's, Megatron-LM's, NeMo 1's or the environment's spelling, mapped to Bridge's fields, never a cause; dumps are
not naming. The texts here are written for these tests."""

from __future__ import annotations

import io
from pathlib import Path

from mbridge_overlap import api
from mbridge_overlap.diagnose import settings
from mbridge_overlap.output import text as text_out
from test_schemas import errors

ROOT = Path(__file__).resolve().parent.parent


def diagnosed(text: str) -> dict:
    return api.diagnose(["-"], stdin=io.BytesIO(text.encode("utf-8"))).to_dict()


def named(text: str) -> dict:
    """{first Bridge key of each setting: the entry}."""
    section = diagnosed(text).get("settings_named") or {"settings": []}
    return {e["keys"][0]: e for e in section["settings"]}


def test_each_spelling_family_maps_to_bridge_s_fields():
    text = ("After the upgrade, model.cp_comm_type=a2a+p2p trains much faster than before.\n"  # Bridge key
            "We kept overlap_param_gather: true and the loss diverged after the first save.\n"  # field name
            "Our launcher passes --overlap-grad-reduce --no-overlap-p2p-communication --cp-comm-type p2p\n"  # Megatron-LM
            "The NeMo 1 job had ub_tp_comm_overlap=True in its model section.\n"  # NeMo 1
            "export CUDA_DEVICE_MAX_CONNECTIONS=1 before launching, as the docs say.\n")  # environment
    got = named(text)
    cp = got["model.cp_comm_type"]
    assert cp["values"][:2] == ["a2a+p2p", "p2p"] and set(cp["families"]) == {"Bridge key", "Megatron-LM flag"}
    gather = got["comm_overlap.overlap_param_gather"]
    assert set(gather["keys"]) == {"comm_overlap.overlap_param_gather", "ddp.overlap_param_gather",
                                   "optimizer.overlap_param_gather"} and gather["values"] == ["true"]
    assert got["comm_overlap.overlap_grad_reduce"]["values"] == ["true"]  # a store_true flag
    p2p = got["comm_overlap.overlap_p2p_comm"]
    assert p2p["values"] == ["false"] and p2p["spelled"] == ["--no-overlap-p2p-communication"]  # store_false: its dest
    tp = got["comm_overlap.tp_comm_overlap"]
    assert tp["families"] == ["NeMo 1 name"] and tp["values"] == ["True"]
    env = got["env_vars.CUDA_DEVICE_MAX_CONNECTIONS"]
    assert env["values"] == ["1"] and env["first_seen"]["line"] == 5


def test_named_settings_are_never_a_cause_and_list_the_findings_that_read_them():
    text = ("Setting `cp_comm_type: a2a+p2p` without `hierarchical_context_parallel_sizes` makes the throughput look "
            "too good to be true.\n")
    d = diagnosed(text)
    assert d["causes"] == [] and not d["found"]
    section = d["settings_named"]
    assert {e["keys"][0] for e in section["settings"]} == {"model.cp_comm_type", "model.hierarchical_context_parallel_sizes"}
    assert section["findings"][0]["id"] == "CP_HIERARCHICAL_SIZES_INVALID"
    assert section["findings"][0]["reads"] == ["model.cp_comm_type", "model.hierarchical_context_parallel_sizes"]
    out = text_out.diagnosis(d)
    assert "causes: none on the overlap path" in out
    assert "settings the text names (not causes" in out and "run resolve/lint with them to check" in out


def test_dumps_and_config_files_name_nothing():
    mlm = ("------------------------ arguments ------------------------\n"
           "  overlap_grad_reduce ............................. True\n"
           "  overlap_param_gather ............................ True\n"
           "  tp_comm_overlap ................................. False\n"
           "-------------------- end of arguments ---------------------\n")
    summary = ("======================================================================\n"
               "Configuration Summary (Non-Default Values vs Megatron Core)\n"
               "======================================================================\n\n"
               "[ddp] Non-default values (vs Mcore DistributedDataParallelConfig):\n"
               "  overlap_grad_reduce: True  (Mcore default: False)\n"
               "  use_distributed_optimizer: True  (Mcore default: False)\n\n"
               "[model] Non-default values (vs Mcore TransformerConfig):\n"
               "  sequence_parallel: True  (Mcore default: False)\n")
    yaml_file = ("comm_overlap:\n  tp_comm_overlap: true\n  overlap_grad_reduce: true\n\n  bucket_size: 40000000\n"
                 "model:\n  cp_comm_type: a2a+p2p\n")
    namespace = ("Namespace(tensor_model_parallel_size=2, sequence_parallel=True, overlap_grad_reduce=True, "
                 "tp_comm_overlap=True, cp_comm_type=['p2p'])\n")
    for dump in (mlm, summary, yaml_file, namespace):
        assert "settings_named" not in diagnosed(dump), dump
    # a line beside a dump is still read
    assert list(named(mlm + "Then I turned off overlap_grad_reduce and it hung.\n")) == ["comm_overlap.overlap_grad_reduce"]


def test_absent_when_nothing_is_named():
    d = diagnosed("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                  "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert "settings_named" not in d
    assert "settings the text names" not in text_out.diagnosis(d)
    # words that merely resemble a setting are not one: prose, an unknown flag, a field with no overlap relevance
    assert "settings_named" not in diagnosed("overlap param gather hurts; --overlap-everything; learning_rate=3e-4\n")


def test_hostile_text_is_escaped():
    text = "overlap_grad_reduce=\x1b[31mtrue\u202e and NCCL_ALGO='Ring\x07' with ub_tp_comm_overlap=" + "x" * 500 + "\n"
    d = diagnosed(text)
    values = [v for e in d["settings_named"]["settings"] for v in e["values"]]
    assert values and all(v.isprintable() and "\x1b" not in v and "\u202e" not in v for v in values)
    assert all(len(v) <= settings.MAX_VALUE for v in values)
    out = text_out.diagnosis(d)
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out


def test_the_section_is_capped():
    flags = [f for f, (_keys, kind) in settings.vocabulary(None).flags.items() if kind == "true"]
    d = diagnosed("we pass " + " ".join(f"--{f}" for f in flags[:40]) + "\n")
    section = d["settings_named"]
    assert len(section["settings"]) == settings.MAX_SETTINGS and section["more_settings"] > 0
    assert len(section["findings"]) <= settings.MAX_FINDINGS


def test_json_shape():
    d = diagnosed("We set --overlap-param-gather with --use-distributed-optimizer and NCCL_NVLS_ENABLE=0.\n")
    assert errors("diagnose.schema.json", d) == []
    section = d["settings_named"]
    assert set(section) == {"settings", "more_settings", "findings", "more_findings", "lines_read", "lines_cut",
                            "megatron_lm_flags_of"}
    assert section["megatron_lm_flags_of"].startswith("megatron-core ")
    assert set(section["settings"][0]) == {"spelled", "families", "keys", "values", "count", "first_seen"}


def test_a_word_after_a_flag_in_prose_is_not_its_value_and_layout_words_are_not_overlap_settings():
    got = named("Please pass --moe-token-dispatcher-type instead of the old flag, e.g. --moe-token-dispatcher-type "
                "alltoall --overlap-grad-reduce\n")
    assert got["model.moe_token_dispatcher_type"]["values"] == ["alltoall"]  # not "instead": a value before a flag only
    # a finding reads num_layers and the batch size for the layout; a text naming them names no overlap setting
    assert "settings_named" not in diagnosed("AssertionError: num_layers=60 should be divisible by 8 (micro_batch_size=2)\n")


def test_megatron_lm_flags_whose_dest_is_not_bridge_s_field_and_flags_of_several_values():
    """recheck66 AM-1: Megatron-LM maps --ddp-bucket-size & co. onto DDP's fields by hand (training.py
    get_megatron_ddp_config, data/megatron_lm_flags.json dest_fields); --no-align-grad-reduce is dist.align_grad_reduce;
    --cp-comm-type takes several values (nargs '+')."""
    got = named("torchrun pretrain_gpt.py --overlap-grad-reduce --ddp-bucket-size 40000000 --ddp-num-buckets 4 "
                "--ddp-average-in-collective --no-align-grad-reduce --accumulate-allreduce-grads-in-fp32 "
                "--cp-comm-type p2p a2a --use-distributed-optimizer\nthe step time got much worse\n")
    assert got["ddp.bucket_size"]["values"] == ["40000000"] and got["ddp.bucket_size"]["keys"] == ["ddp.bucket_size"]
    assert got["ddp.num_buckets"]["values"] == ["4"]
    assert got["ddp.average_in_collective"]["values"] == ["true"]
    assert got["ddp.grad_reduce_in_fp32"]["spelled"] == ["--accumulate-allreduce-grads-in-fp32"]
    assert got["dist.align_grad_reduce"]["values"] == ["false"]
    assert got["model.cp_comm_type"]["values"] == ["p2p a2a"]
    flags = settings.megatron_lm_flags()
    assert flags["dest_fields"]["ddp_bucket_size"] == "ddp.bucket_size" and flags["flags"]["cp-comm-type"][1] == "values"
    # several values end where prose starts; a dest that is a Bridge field of its own is not renamed
    assert named("we pass --cp-comm-type p2p and it hangs\n")["model.cp_comm_type"]["values"] == ["p2p"]
    assert "--use-precision-aware-optimizer" not in {f"--{f}" for f in settings.vocabulary(None).flags}


def test_a_flag_last_on_its_line_keeps_its_plain_word_value():
    """recheck66 AM-7: a command's last argument (end of line, before a closing quote) is a value, as the parser
    reads it; prose after a flag still is not."""
    got = named("torchrun --nproc-per-node 8 pretrain_gpt.py --expert-model-parallel-size 8 "
                "--moe-token-dispatcher-type flex\nit hangs at the first step\n"
                "cmd=\"pretrain_gpt.py --moe-flex-dispatcher-backend hybridep\"\n")
    assert got["model.moe_token_dispatcher_type"]["values"] == ["flex"]
    assert got["model.moe_flex_dispatcher_backend"]["values"] == ["hybridep"]
    assert named("Use --moe-token-dispatcher-type only with EP, said the docs\n")[
        "model.moe_token_dispatcher_type"]["values"] == []


def test_bridge_s_summary_with_a_long_value_is_a_dump_and_a_list_value_is_whole():
    """recheck66 AM-6: Bridge's configuration summary prints a pipeline layout on one long line; it is a dump line
    by its shape (`  name: value  (Mcore default: ...)`), whatever the value's length. The summary is Bridge 0.6.2's
    own: tests/data/summaries/moe_layout_pp2_bridge062_summary.txt, printed by ConfigContainer.log_non_default_values()
    (print_rank_0 captured) for the skill's baseline config (mbridge_overlap.bridge.adapter.baseline_config()) with a
    MoE model (8 layers, 64 experts, top-6, EP 8, TP 2 with SP, PP 2, pipeline_model_parallel_layout
    [['embedding'] + ['decoder'] * 4, ['decoder'] * 4 + ['loss']], dataset.seq_length 4096, comm_overlap None), run
    with the 0.6.2 venv's Python from /tmp/fixamd_run (the checkpoint paths it prints)."""
    body = (ROOT / "tests" / "data" / "summaries" / "moe_layout_pp2_bridge062_summary.txt").read_text()
    layout = next(line for line in body.splitlines() if line.startswith("  pipeline_model_parallel_layout: [["))
    assert len(layout) > 120 and layout.endswith("(Mcore default: None)")
    assert "settings_named" not in diagnosed(body)
    # an argparse dump's long value, and a long literal in a config dump, likewise
    mlm = ("  pipeline_model_parallel_layout .................. " + "Et*4|" * 30 + "L\n"
           "  overlap_grad_reduce ............................. True\n"
           "  overlap_param_gather ............................ True\n")
    assert "settings_named" not in diagnosed(mlm)
    # a value with lists in it is read whole, not to its first ']'
    got = named("I set pipeline_model_parallel_layout: [['embedding', 'decoder'], ['decoder', 'loss']] and the p2p "
                "send of the last stage hangs\n")
    assert got["model.pipeline_model_parallel_layout"]["values"] == ["[['embedding', 'decoder'], ['decoder', 'loss']]"]


def test_what_a_traceback_s_code_assigns_and_an_object_s_own_attributes_are_not_settings():
    """recheck66 AM-8: under a traceback frame (`File "...", line N, in f`) the lines indented deeper are the program's
    source; what a statement there assigns to (Bridge's config.py `self.data_parallel_size =
    self.get_data_parallel_size(world_size)`, comm_overlap.py's `model_config.tp_comm_overlap_cfg = asdict(...)`) is
    the program filling its objects in, and `self.x = ...` is an object's own attribute: neither is a setting the user
    names, nor code a value. What the code tests is named, and the exception's line is read. (A framework's frames:
    a traceback through Bridge's or Megatron-Core's overlap code is a cause, and then no settings section is given.)"""
    text = ("[rank0]: Traceback (most recent call last):\n"
            "[rank0]:   File \"/opt/rl/trainer/config.py\", line 1037, in set_data_parallel_size\n"
            "[rank0]:     self.data_parallel_size = self.get_data_parallel_size(world_size)\n"
            "[rank0]:   File \"/opt/rl/trainer/setup.py\", line 549, in setup\n"
            "[rank0]:     model_config.tp_comm_overlap_cfg = asdict(user_cfg)\n"
            "[rank0]:   File \"/opt/rl/trainer/step.py\", line 10, in start\n"
            "[rank0]:     assert not self.ddp_config.overlap_param_gather\n"
            "[rank0]:            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
            "[rank0]: AssertionError: with tp_comm_overlap=True the buffer was freed\n")
    got = named(text)
    assert list(got) == ["comm_overlap.overlap_param_gather", "comm_overlap.tp_comm_overlap"]
    assert got["comm_overlap.overlap_param_gather"]["values"] == [] and got["comm_overlap.tp_comm_overlap"]["values"] == ["True"]
    assert got["comm_overlap.tp_comm_overlap"]["first_seen"]["line"] == 9
    # pasted code: an object's own attribute is none; the user's config object's is one
    assert "settings_named" not in diagnosed("    self.data_parallel_size = self.get_data_parallel_size(world_size)\n")
    assert named("cfg.ddp.overlap_grad_reduce = True and the loss spikes\n")["ddp.overlap_grad_reduce"]["values"] == ["True"]


RAY_PREFIXES = ("(pid=4242) ", "(MegatronPolicyWorker pid=4242, ip=10.0.0.3) ", "(head, rank=0, pid=1234) ",
                "(worker1, rank=1, pid=5678, ip=10.0.0.2) ", "(task, pid=9) ", "\x1b[36m(pid=4242)\x1b[0m ")


def test_a_dump_and_bridge_s_summary_behind_ray_s_or_skypilot_s_prefix_are_read_as_without_it():
    # fuzzZ Z-4: behind Ray's worker prefix (ray/_private/worker.py print_worker_logs) or SkyPilot's (its Ray task named
    # `head, rank=0,`), Megatron-LM's argument dump named every setting and Bridge's summary was not found
    mlm = ("------------------------ arguments ------------------------\n"
           "  overlap_grad_reduce ............................. True\n"
           "  overlap_param_gather ............................ True\n"
           "  tp_comm_overlap ................................. False\n"
           "-------------------- end of arguments ---------------------\n")
    summary = (ROOT / "tests/data/summaries/moe_layout_pp2_bridge062_summary.txt").read_text(encoding="utf-8")
    bare = api.diagnose(["-"], stdin=io.BytesIO(summary.encode()), gpus=8).to_dict()
    assert bare["config"]["from"]
    for prefix in RAY_PREFIXES:
        assert "settings_named" not in diagnosed("".join(prefix + x + "\n" for x in mlm.splitlines())), prefix
        text = "".join(prefix + x + "\n" for x in summary.splitlines())
        d = api.diagnose(["-"], stdin=io.BytesIO(text.encode()), gpus=8).to_dict()
        assert d["config"] == bare["config"] and "settings_named" not in d, prefix
    # a line's own text after the prefix is read; a rank prefix after it gives the line's rank
    from mbridge_overlap.diagnose.reader import split_prefix
    assert split_prefix("(pid=4242) overlap_grad_reduce hung") == (None, "overlap_grad_reduce hung")
    assert split_prefix("(head, rank=0, pid=1234) [rank3]: x") == ("3", " x")  # (as after `[rank3]:` alone)
    assert split_prefix("(Worker pid=1, ip=10.0.0.1) [default5]:x") == ("local 5", "x")
    assert split_prefix("(not a prefix) x") == (None, "(not a prefix) x")
    assert list(named("(pid=1) Then I turned off overlap_grad_reduce and it hung.\n")) == ["comm_overlap.overlap_grad_reduce"]


def test_the_words_read_are_those_every_word_was_before():
    # fuzzZ Z-1: the regex engine now finds only the words that may be a setting; each line's answer is what reading
    # every word gave (the answers of the rule before, which read every word: 50e1fdc..de6572e)
    vocab = settings.vocabulary(None)
    lines = ["--overlap-grad-reduce --tp_comm_overlap x", "a.b-overlap_grad_reduce", "foo-bar.overlap_grad_reduce=1",
             "ddp.overlap_grad_reduce\u00e9", "overlap_grad_reduce\u00e9", "x.ddp.overlap_grad_reduce: true",
             "NCCL_NVLS_ENABLE=0 ub_tp_comm_overlap", "self.overlap_grad_reduce = 1", "--cp-comm-type p2p a2a",
             "overlap_grad_reduce-x model.cp_comm_type.", "_overlap_grad_reduce 3overlap_grad_reduce a" * 3]
    got = [[h[:2] for h in settings.mentions(t, vocab)] for t in lines]
    assert got == [[("flag", "--overlap-grad-reduce"), ("field", "tp_comm_overlap")], [],
                   [("field", "foo-bar.overlap_grad_reduce")], [("key", "ddp.overlap_grad_reduce")], [],
                   [("key", "x.ddp.overlap_grad_reduce")], [("env", "NCCL_NVLS_ENABLE"), ("nemo1", "ub_tp_comm_overlap")],
                   [], [("flag", "--cp-comm-type")], [("key", "model.cp_comm_type")], []]
