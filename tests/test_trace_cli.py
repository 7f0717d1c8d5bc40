"""The `trace` command line: add_arguments/run, JSON equal to the Python API, --compare ranking, the snippet."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mbridge_overlap.errors import UsageError
from mbridge_overlap.cli import trace as cli
from mbridge_overlap.trace import analyze, compare
from trace_fixtures import DP_DESC, TP_DESC, TraceBuilder, nccl, overlap_case

REPO = Path(__file__).resolve().parent.parent


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args([str(a) for a in argv]))


def test_json_output_is_the_api_dict(tmp_path, capsys):
    path = overlap_case().write(tmp_path / "rank-0.json.gz")
    assert run([path, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == analyze(path).to_dict()


def test_text_output_has_the_figures(tmp_path, capsys):
    assert run([overlap_case().write(tmp_path / "rank-0.json")]) == 0
    out = capsys.readouterr().out
    assert "66.67%" in out and re.search(r"^\s+0\s+160\s+150\s+100\s+50\s+66\.67%$", out, re.M), out


def capture(tp_exposed: list[int], dp_exposed: list[int]) -> TraceBuilder:
    """Steps 1..n+1 of 1000 us, no compute, so everything is exposed; the last step only marks the end."""
    b = TraceBuilder(rank=0, world_size=2)
    n = len(tp_exposed)
    for i in range(n + 1):
        b.step(i + 1, i * 1000, (i + 1) * 1000)
    for i, (tp, dp) in enumerate(zip(tp_exposed, dp_exposed)):
        t0 = i * 1000 + 10
        b.kernel(nccl("AllGather"), t0, t0 + tp, stream=20, **{"Process Group Description": TP_DESC})
        b.kernel(nccl("ReduceScatter"), t0 + 400, t0 + 400 + dp, stream=21, **{"Process Group Description": DP_DESC})
    return b


def test_compare_ranks_dimensions_and_steps_by_change(tmp_path, capsys):
    before = capture([60, 40], [20, 30]).write(tmp_path / "before.json")
    after = capture([10, 10], [50, 30]).write(tmp_path / "after.json")
    d = compare(before, after).to_dict()
    assert [(r["dimension"], r["exposed_before_us"], r["exposed_after_us"], r["exposed_delta_us"], r["change"])
            for r in d["dimensions"]] == [("tp", 100, 20, -80, "shrank"), ("dp", 50, 80, 30, "grew")]
    # ties in |delta| keep step order, then dimension order
    assert [(r["position"], r["dimension"], r["exposed_delta_us"], r["change"]) for r in d["steps"]] == [
        (1, "tp", -50, "shrank"), (1, "dp", 30, "grew"), (2, "tp", -30, "shrank"), (2, "dp", 0, "same")]
    assert d["before"]["steps_in_totals"] == [[1, 2]]
    assert run(["--compare", before, after, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == d
    assert run(["--compare", before, after]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s+tp\s+100\s+20\s+-80\s+shrank", out, re.M), out


def test_partial_exits_1_and_says_so(tmp_path, capsys):
    text = capture([60] * 50, [20] * 50).text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    assert run([cut, "--allow-partial"]) == 1
    assert "PARTIAL" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], "give at least one trace"),
        (["--compare", "x.json"], "exactly two traces"),
        (["--steps", "1-3", "x.json"], "--steps goes with --snippet"),
        (["--rank", "all", "x.json"], "only with --snippet"),
        (["--rank", "a,b", "x.json"], "comma-separated"),
        (["--snippet", "python", "x.json"], "takes no traces"),
        (["--snippet", "python", "--steps", "12-10"], "END must be greater"),
        (["--snippet", "python", "--steps", "0-3"], "START must be 1 or more"),
        (["--snippet", "python", "--steps", "ten"], "expected START-END"),
    ],
)
def test_usage_errors(argv, expected):
    with pytest.raises(UsageError, match=re.escape(expected)):
        run(argv)


def test_snippet_forms(capsys):
    assert run(["--snippet", "python", "--steps", "10-13", "--rank", "8,0"]) == 0
    py = capsys.readouterr().out
    assert py.startswith("# Turn on the PyTorch profiler for ProfilerStep#10..#12 on ranks 0, 8 (Megatron-Bridge 0.6.2")
    call = ast.parse(py).body[-1].value
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert kwargs["profile_step_start"] == 10 and kwargs["profile_step_end"] == 13
    assert kwargs["profile_ranks"] == [0, 8] and kwargs["use_pytorch_profiler"] is True
    assert run(["--snippet", "yaml", "--rank", "all", "--steps", "3-5"]) == 0
    y = capsys.readouterr().out
    assert y.startswith("# Turn on the PyTorch profiler for ProfilerStep#3..#4 on every rank (Megatron-Bridge 0.6.2")
    assert yaml.safe_load(y)["profiling"]["profile_ranks"] == [] and yaml.safe_load(y)["profiling"]["profile_step_end"] == 5
    assert run(["--snippet", "hydra"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if not x.startswith("#")]
    assert "profiling.use_pytorch_profiler=true" in lines and "profiling.profile_ranks=[0]" in lines
    assert run(["--snippet", "python", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["recorded_steps"] == [10, 11, 12] and d["snippet"].startswith("# Turn on")


def _bridge_profiling_fields() -> set[str]:
    default = Path.home() / ".cache/nemo-mbridge-perf-tp-dp-comm-overlap/venv-mbridge-0.6.2"
    venv = Path(os.environ.get("MBRIDGE_VENV", default))
    sites = sorted(venv.glob("lib/python3*/site-packages"))
    files = [sites[0] / "megatron/bridge/training/config.py", sites[0] / "megatron/training/config/common_config.py"] if sites else []
    if not files or not all(f.is_file() for f in files):
        pytest.skip(f"Megatron-Bridge 0.6.2 source not found under {venv} (scripts/bridge_env.sh builds it)")
    fields = set()
    for f in files:
        body = f.read_text().split("class ProfilingConfig", 1)[1].split("\nclass ", 1)[0]
        fields |= set(re.findall(r"^    (\w+): ", body, re.M))
    return fields


def test_snippet_uses_only_fields_of_bridge_0_6_2(capsys):
    fields = _bridge_profiling_fields()
    assert run(["--snippet", "yaml"]) == 0
    used = set(yaml.safe_load(capsys.readouterr().out)["profiling"])
    assert used <= fields, used - fields
    assert run(["--snippet", "hydra"]) == 0
    hydra = {x.split("=")[0].split(".", 1)[1] for x in capsys.readouterr().out.splitlines() if not x.startswith("#")}
    assert hydra == used


def test_no_heavy_imports_at_start_up():
    code = ("import sys, mbridge_overlap.trace, mbridge_overlap.cli.trace; "
            "print([m for m in ('torch', 'megatron', 'pandas', 'numpy', 'hta') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_main_cli_runs_trace(tmp_path):
    path = overlap_case().write(tmp_path / "rank-0.json")
    proc = subprocess.run([sys.executable, "-m", "mbridge_overlap", "trace", str(path), "--format", "json"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ranks"][0]["hidden_pct"] == 66.67


def test_an_analysis_imports_no_release_data_or_templates(tmp_path):
    """A trace's command imports what reading and reporting a trace need: not the release data, the templates (Jinja2)
    or YAML, which the other verbs load (each a few milliseconds of every `trace` process)."""
    path = overlap_case().write(tmp_path / "rank-0.json")
    code = ("import sys, os; sys.path.insert(0, sys.argv[1]); from mbridge_overlap.cli import main\n"
            "fd = os.dup(1); os.dup2(os.open(os.devnull, os.O_WRONLY), 1); status = main(['trace', sys.argv[2], '--format', 'json'])\n"
            "os.dup2(fd, 1); print(status, sorted(m for m in sys.modules if m.split('.')[0] in ('mbridge_overlap', 'jinja2', 'yaml')))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO), str(path)], capture_output=True, text=True, check=True).stdout
    status, modules = out.split(" ", 1)
    assert status == "0"
    loaded = ast.literal_eval(modules)
    assert "mbridge_overlap.trace.analysis" in loaded
    for name in ("mbridge_overlap.upstream.releases", "mbridge_overlap.output.snippets", "mbridge_overlap.run.launch_env", "jinja2", "yaml"):
        assert name not in loaded, name
