"""The diagnose test data: logs produced by real Megatron-Bridge on this machine (tests/data/logs/bridge-0.6.2) are
what Bridge prints today, and the upstream-quote logs (tests/data/logs/upstream) are what their manifest generates,
with each quoted text verbatim inside. tools/gen_bridge_logs.py --check regenerates both (about 4 minutes: one
process imports Bridge once and forks a child per scenario, one scenario runs in a fresh interpreter beside it, three
run under torchrun with two ranks)."""

import re
import subprocess
import sys

import yaml
from fixture_checkout import Path

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "logs"
GEN = ROOT / "tools" / "gen_bridge_logs.py"
KNOB = re.compile(r"^(?:(?:model|ddp|optimizer|comm_overlap|mixed_precision|env_vars|train|validation|checkpoint|dist|"
                  r"dataset|logger|rerun_state_machine)(?:\.\w+)?|peft|(?:launcher|hardware|software|code):\w+)$")


def _findings() -> dict:
    return yaml.safe_load((ROOT / "mbridge_overlap" / "data" / "findings.yaml").read_text())


def test_bridge_and_upstream_logs_are_current():
    proc = subprocess.run([sys.executable, str(GEN), "--check"], capture_output=True, text=True,
                          timeout=1500, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def test_upstream_logs_are_current():
    proc = subprocess.run([sys.executable, str(GEN), "--upstream", "--check"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def test_bridge_manifest_describes_each_log():
    manifest = yaml.safe_load((LOGS / "bridge-0.6.2" / "manifest.yaml").read_text())
    scenarios = manifest["scenarios"]
    assert manifest["bridge_version"] == "0.6.2"
    assert 15 <= len(scenarios) <= 30
    findings = _findings()
    launches = {}
    for name, sc in scenarios.items():
        text = (LOGS / "bridge-0.6.2" / f"{name}.log").read_text()
        assert sc["failed_at"] in ("config", "setup"), name
        assert sc["on_a_gpu"] in ("config", "setup", "step", "none"), name
        assert sc["first_error"] and sc["first_error"].split(":")[0] in text, name
        assert sc["expected_finding"] is None or sc["expected_finding"] in findings, name
        assert all(KNOB.match(k) for k in sc["knobs"]), (name, sc["knobs"])
        assert all(KNOB.match(k) for k in sc["overrides"]), (name, list(sc["overrides"]))
        assert "/root/" not in text and "/tmp/" not in text, f"{name}: a machine path survived normalisation"
        launches[sc["launch"]] = launches.get(sc["launch"], 0) + 1
        if sc["failed_at"] == "config":
            assert "in runtime_config_update" in text, name
    # several logs come from fresh launches of the real entry point, not only from the forked children
    assert launches.get("python", 0) + launches.get("torchrun", 0) >= 3, launches
    assert sum(1 for sc in scenarios.values() if sc["failed_at"] == "config") >= 10


def test_upstream_manifest_quotes_are_verbatim_in_their_logs():
    entries = yaml.safe_load((LOGS / "upstream" / "manifest.yaml").read_text(encoding="utf-8"))["entries"]
    assert len({e["quote"] for e in entries}) >= 40
    held = sum(bool(e["held_out"]) for e in entries)
    assert 0.25 <= held / len(entries) <= 0.4, held
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids))
    for e in entries:
        assert e["url"].startswith("https://github.com/"), e["id"]
        for field in ("title", "quote", "cause", "fix", "ground_truth", "topic"):
            assert e.get(field), (e["id"], field)
        assert all(KNOB.match(k) for k in e["knobs"]), (e["id"], e["knobs"])
        text = (LOGS / "upstream" / f"{e['id']}.log").read_text(encoding="utf-8")
        assert e["quote"] in text, e["id"]
        assert text.count(e["quote"]) == 1 or e["quote"].count("\n") == 0, e["id"]
    # every topic the diagnose verb is checked on has held-out texts
    topics = {e["topic"] for e in entries if e["held_out"]}
    assert {"tp_userbuffers", "tp_bootstrap", "dp_overlap", "pp_overlap", "watchdog", "nvls"} <= topics, topics
