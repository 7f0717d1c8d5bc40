"""Snippets: each form says what it does and for which release, and carries exactly the plan's overrides.

The Bridge tier (tests/bridge/test_apply.py) applies them to real Bridge; these tests read them back with
plain Python, YAML, a Hydra-syntax reader and bash."""

import ast
import subprocess
import sys
import types
from dataclasses import dataclass

import jinja2
import pytest
import yaml

import mbridge_overlap
from mbridge_overlap import UsageError
from mbridge_overlap.output import snippets as render
from mbridge_overlap.upstream.releases import DATA_DIR, load_yaml

LAYOUT = dict(tp=4, pp=4, vpp=2, gpus=64, hidden_size=12288, seq_length=2048, micro_batch_size=1)


def launch_env(d: dict) -> dict:
    return {name: rule["value"] for name, rule in d["launch_env"].items()}


def snippet(fmt, **layout):
    d = mbridge_overlap.plan(**(layout or LAYOUT)).to_dict()
    why = {name: rule["why"] for name, rule in d["launch_env"].items()}
    plugin = {"tp_size": d["layout"]["tp"]} if fmt == "nemo_run" else None  # the form exists only where PerfEnvPlugin does
    return d, render.snippet(
        fmt, overrides=d["overrides"], env=launch_env(d), env_why=why, purpose="test", release=d["bridge_version"], env_vars_field=True,
        plugin_args=plugin,
    )


@pytest.mark.parametrize("fmt", list(render.FORMATS))
def test_first_line_says_what_and_which_release(fmt):
    _, text = snippet(fmt)
    first = text.splitlines()[0]
    assert first.startswith("# ") and "Megatron-Bridge 0.6.2" in first


def _fake_bridge(monkeypatch):
    """Stand-ins for the two Bridge modules the Python snippet imports, to execute it without torch."""

    @dataclass
    class CommOverlapConfig:
        tp_comm_overlap: bool
        tp_comm_overlap_cfg: object = None

    co = types.ModuleType("megatron.bridge.training.comm_overlap")
    co.CommOverlapConfig = CommOverlapConfig
    for name in load_yaml(DATA_DIR / "tp_overlap_presets.yaml"):
        setattr(co, name, name)  # the preset object stands in as its own name
    mp = types.ModuleType("megatron.bridge.training.mixed_precision")
    mp.bf16_with_fp8_current_scaling_mixed = lambda: "fp8cs-recipe"
    for mod in ("megatron", "megatron.bridge", "megatron.bridge.training"):
        monkeypatch.setitem(sys.modules, mod, types.ModuleType(mod))
    monkeypatch.setitem(sys.modules, co.__name__, co)
    monkeypatch.setitem(sys.modules, mp.__name__, mp)


def _cfg():
    ns = types.SimpleNamespace
    return ns(model=ns(), ddp=ns(), optimizer=ns(), comm_overlap=None, mixed_precision="bf16_mixed", env_vars={})


def test_python_snippet_sets_every_override(monkeypatch):
    _fake_bridge(monkeypatch)
    d, text = snippet("python", precision="fp8", **LAYOUT)
    ast.parse(text)
    cfg = _cfg()
    exec(text, {"cfg": cfg})
    for key, value in d["overrides"].items():
        section, _, name = key.partition(".")
        got = getattr(cfg, section) if not name else getattr(getattr(cfg, section), name)
        want = "fp8cs-recipe" if key == "mixed_precision" else value
        assert got == want, key


def test_python_snippet_keeps_an_existing_comm_overlap(monkeypatch):
    _fake_bridge(monkeypatch)
    _, text = snippet("python")
    cfg = _cfg()
    existing = types.SimpleNamespace(tp_comm_overlap=False, tp_comm_overlap_cfg="old", bucket_size=5)
    cfg.comm_overlap = existing
    exec(text, {"cfg": cfg})
    assert cfg.comm_overlap is existing and existing.bucket_size == 5 and existing.tp_comm_overlap is True


def test_yaml_snippet_spells_the_preset_out():
    d, text = snippet("yaml")
    doc = yaml.safe_load(text)
    assert doc["model"]["virtual_pipeline_model_parallel_size"] == 2
    assert doc["ddp"]["use_distributed_optimizer"] is True
    co = doc["comm_overlap"]
    assert co["_target_"] == "megatron.bridge.training.comm_overlap.CommOverlapConfig" and co["tp_comm_overlap"] is True
    preset = load_yaml(DATA_DIR / "tp_overlap_presets.yaml")[d["preset"]]
    got = {k: {kk: vv for kk, vv in v.items() if kk != "_target_"} if isinstance(v, dict) else v
           for k, v in co["tp_comm_overlap_cfg"].items() if k != "_target_"}
    assert got == preset
    assert co["tp_comm_overlap_cfg"]["proj_fprop"]["_target_"].endswith(".PipelineOverlapCfg")


def _hydra_value(text):
    """A tiny reader for the Hydra values the snippets use: bare scalars and {k:v,...} dicts."""
    if text.startswith("{"):
        out, depth, key, buf = {}, 0, None, ""
        for ch in text[1:-1] + ",":
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == ":" and depth == 0 and key is None:
                key, buf = buf, ""
            elif ch == "," and depth == 0:
                out[key] = _hydra_value(buf)
                key, buf = None, ""
            else:
                buf += ch
        return out
    return yaml.safe_load(text)


def test_hydra_snippet_lines_in_order():
    d, text = snippet("hydra")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    plain = dict(line.split("=", 1) for line in lines if not line.startswith(("++", "comm_overlap")))
    assert yaml.safe_load(plain["model.tensor_model_parallel_size"]) == 4
    assert lines[-1].startswith("++comm_overlap={") and sum(line.startswith(("++comm_overlap", "comm_overlap")) for line in lines) == 1
    section = _hydra_value(lines[-1].split("=", 1)[1])
    preset = section.pop("tp_comm_overlap_cfg")
    assert section == {"_target_": "megatron.bridge.training.comm_overlap.CommOverlapConfig", "tp_comm_overlap": True}
    assert preset["_target_"] == "megatron.bridge.training.comm_overlap.TransformerLayerTPOverlapCfg"  # spelled out in full
    keys = [line.split("=", 1)[0] for line in lines]
    assert len(keys) == len(set(keys))  # every key assigned once


def test_env_snippet_exports_in_a_real_shell():
    d, text = snippet("env")
    out = subprocess.run(["bash", "-c", text + "\nenv"], capture_output=True, text=True, check=True).stdout
    got = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    for name, value in launch_env(d).items():
        assert got[name] == value


def test_env_vars_snippet_sets_cfg_env_vars():
    d, text = snippet("env_vars")
    cfg = _cfg()
    exec(text, {"cfg": cfg})
    assert {k: str(v) for k, v in cfg.env_vars.items()} == launch_env(d)


def test_env_vars_form_refused_before_0_6():
    d = mbridge_overlap.plan(tp=2, gpus=8, bridge_version="0.5.1").to_dict()
    with pytest.raises(UsageError, match="no env_vars"):
        render.snippet("env_vars", overrides=d["overrides"], env=launch_env(d), env_why={}, purpose="x", release="0.5.1", env_vars_field=False)


def test_templates_are_strict():
    with pytest.raises(jinja2.UndefinedError):
        render.render("python.py.j2", purpose="x")


@pytest.mark.parametrize("bad", ["userbuffers_x; import os", "x\nimport os"])
def test_values_that_are_not_names_are_refused(bad):
    with pytest.raises(UsageError):
        render.python_snippet({"comm_overlap.tp_comm_overlap_cfg": bad}, "p", "0.6.2")


def test_strings_are_quoted_not_pasted():
    text = render.python_snippet({"comm_overlap.tp_comm_overlap_bootstrap_backend": 'nccl"); import os; ("'}, "p", "0.6.2")
    tree = ast.parse(text)
    assert not any(isinstance(node, ast.Import) and node.names[0].name == "os" for node in ast.walk(tree))
