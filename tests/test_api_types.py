"""Every public function of the Python API checks its arguments' types (fuzzV V2-13, the rest of fuzzR R9 and fuzzT
T3-8): a list or a text where a mapping is taken, a key that is not a text, an unknown keyword or machine fact, "no"
where a bool is taken, an int where a path is taken is one UsageError line naming the argument and what it takes;
never a TypeError or AttributeError from inside, nor a wrong reading (multicast="no" was multicast available,
diagnose([5]) read file descriptor 5). The check is one (mbridge_overlap.keywords), read from the signatures."""

import inspect
import io
import re

import pytest

from mbridge_overlap import api
from mbridge_overlap.errors import UsageError

R = "llama3_8b_pretrain_config"


class _IntPath:  # fuzzW W2-4: os.PathLike by its __fspath__ alone, whatever that gives
    def __fspath__(self):
        return 5


class _RaisingPath:
    def __fspath__(self):
        raise RuntimeError("boom")


class _BytesPath:
    def __fspath__(self):
        return b"/tmp/x.yaml"


MLA = "megatron.bridge.models.mla_provider.MLAModelProvider"

# (function, positional arguments, keywords, what the one line says, as written)
CASES = [
    ("resolve", (["model.tensor_model_parallel_size=2"],), {}, "overrides: expected a mapping with text (str) keys or None, got"),
    ("resolve", ("model.tensor_model_parallel_size=2",), {}, "overrides: expected a mapping"),
    ("resolve", ({1: 2},), {}, "overrides: key 1: expected a text (str), got 1 (int)"),
    ("resolve", ({},), {"gpus": 8, "launcher_env": ["A=1"]}, "launcher_env: expected a mapping"),
    ("resolve", ({},), {"gpus": 8, "launcher_env": {"CUDA_DEVICE_MAX_CONNECTIONS": 1}},
     "launcher_env['CUDA_DEVICE_MAX_CONNECTIONS']: expected a text"),
    ("resolve", ({},), {"gpus": 8, "machine_facts": ["nvlink_domain"]}, "machine_facts: expected a mapping"),
    ("resolve", ({},), {"gpus": 8, "machine_facts": {"nics_per_gpu": 4}},
     "machine_facts: unknown key 'nics_per_gpu'; it takes nvlink_domain, gpus_per_node"),
    ("resolve", ({},), {"gpus": 8, "machine_facts": {"multicast": "no"}}, "machine_facts['multicast']: expected True or False or None, got 'no'"),
    ("resolve", ({},), {"gpus": 8, "machine_facts": {"torch_mpi": "yes"}}, "machine_facts['torch_mpi']: expected True or False"),
    ("resolve", ({},), {"gpus": 8, "machine_facts": {"nvlink_domain": "8"}}, "machine_facts['nvlink_domain']: expected a whole number"),
    ("resolve", ({},), {"gpus": 8, "te": "no"}, "te: expected True or False, got 'no' (str)"),
    ("resolve", ({},), {"gpus": "8"}, "gpus: expected a whole number (int) or None, got '8' (str)"),
    ("resolve", ({},), {"gpus": True}, "gpus: expected a whole number"),
    ("resolve", ({},), {"recipe": 5}, "recipe: expected a text (str)"),
    # fuzzW W2-3: a mapping as the recipe passed (scenario.build's own catalog-entry reading): a KeyError, or a wrong
    # "could not be built offline"
    ("resolve", ({},), {"recipe": {"x": 1}}, "recipe: expected a text (str) or None, got {'x': 1} (dict)"),
    ("resolve", ({},), {"recipe": {"name": R}}, "recipe: expected a text (str) or None, got {'name'"),
    ("resolve", ({},), {"catalog_entry": {"name": R}}, "resolve: unknown keyword 'catalog_entry'"),
    ("resolve", ({},), {"recipe": R, "shape": ["hidden_size"]}, "shape: expected a mapping with text (str) keys or None"),
    ("resolve", ({},), {"recipe": R, "model": 5}, "model: expected a text (str) or None"),
    ("resolve", ({},), {"gpus": 8, "config": {"model": {1: 2}}}, "<mapping>: model: key 1 (int) is not a name"),
    ("resolve", ({},), {"gpus": 8, "config": {1: {"a": 1}}}, "<mapping>: the top level: key 1 (int) is not a name"),
    ("resolve", ({},), {"gpus": 8, "config": {"model": [1]}}, "<mapping>: model: expected a mapping of fields, got list"),
    ("resolve", ({},), {"gpus": 8, "config": 5}, "config: expected a path (str or os.PathLike) or a mapping"),
    ("resolve", ({},), {"gpus": 8, "family": "llama3_70b"}, "resolve: unknown keyword 'family'; it takes"),
    ("resolve", ({}, 5), {}, "resolve: takes 1 positional argument (overrides), got 2"),
    ("budget", ({},), {"recipe": R, "shape": {1: 2}}, "shape: key 1: expected a text"),
    ("budget", ({},), {"recipe": R, "foo": 1}, "budget: unknown keyword 'foo'"),
    ("budget", ({},), {"recipe": {"x": 1}}, "recipe: expected a text (str) or None, got {'x': 1} (dict)"),
    ("plan", (), {"tp": 2, "gpus": 8, "foo": 1}, "plan: unknown keyword 'foo'; it takes bridge_version, config, cp"),
    ("plan", (), {"tp": 2, "gpus": 8, "overrides": ["a=b"]}, "overrides: expected a mapping with text (str) keys or None"),
    ("plan", (), {"tp": 2, "gpus": 8, "lora": "yes"}, "lora: expected True or False, got 'yes'"),
    ("plan", (), {"tp": 2, "gpus": 8, "moe": "yes"}, "moe: expected True or False or None, got 'yes'"),
    ("plan", (), {"tp": "2", "gpus": 8}, "tp: expected a whole number"),
    ("plan", (), {"tp": 2, "gpus": 8, "machine_facts": {"multicast": "no"}}, "machine_facts['multicast']"),
    ("plan", (8,), {}, "plan: takes 0 positional arguments (none), got 1"),
    ("lint", (5,), {}, "config: expected a path"),
    ("lint", (), {"recipe": {"x": 1}}, "recipe: expected a text (str) or None, got {'x': 1} (dict)"),
    ("lint", (), {"recipe": R, "te": "false"}, "te: expected True or False"),
    ("diff", (), {"before": 5, "after": 6}, "before: expected a path"),
    ("diff", (_IntPath(), _IntPath()), {}, "before: _IntPath.__fspath__() failed: 'expected _IntPath.__fspath__() to return"),
    ("lint", (_IntPath(),), {}, "config: _IntPath.__fspath__() failed:"),
    ("lint", (_RaisingPath(),), {}, "config: _RaisingPath.__fspath__() failed: 'boom'"),
    ("lint", (_BytesPath(),), {}, "config: _BytesPath.__fspath__() gave b'/tmp/x.yaml' (bytes), not a path (str)"),
    ("lint", ("/tmp/a\x00b.yaml",), {}, "config: a path with a NUL byte ('/tmp/a\\x00b.yaml')"),
    ("diagnose", (_IntPath(),), {}, "logs: _IntPath.__fspath__() failed"),
    ("diagnose", ([_IntPath()],), {}, "logs[0]: _IntPath.__fspath__() failed"),
    ("diagnose", ("/tmp/a\x00b",), {}, "logs: a path with a NUL byte"),
    ("diagnose", (["/dev/null", "/tmp/a\x00b"],), {}, "logs[1]: a path with a NUL byte"),
    ("anchors", ("/tmp/a\x00b",), {}, "mbridge_src: a text with a NUL byte"),
    ("check_manifest", (_IntPath(),), {}, "path: _IntPath.__fspath__() failed"),
    ("trace", ("/tmp/a\x00b",), {}, "paths: a path with a NUL byte"),
    ("diff", (), {"recipe": R, "gpus_before": "8", "gpus_after": 16}, "gpus_before: expected a whole number"),
    ("diff", (), {"recipe": R, "config": "x.yaml"}, "diff: unknown keyword 'config'"),
    # fuzzW W2-5: a side's 0 was "not given" (gpus_before=0 ran the recipe at its own count), though -1 was refused
    ("diff", (), {"recipe": R, "gpus_before": 0, "gpus_after": 16}, "--gpus-before: must be a positive integer, got 0"),
    ("diff", (), {"recipe": R, "gpus": 8, "gpus_after": 0}, "--gpus-after: must be a positive integer, got 0"),
    ("diff", (), {"recipe": R, "recipe_before": ""}, "--recipe: empty"),
    ("diagnose", (5,), {}, "logs: expected a path (str or os.PathLike) or a list of them, got 5 (int)"),
    ("diagnose", ([5],), {}, "logs[0]: expected a path (str or os.PathLike), got 5 (int)"),
    ("diagnose", (b"run.log",), {}, "logs: expected a path"),
    ("diagnose", (["/dev/null"],), {"jobs": "2"}, "jobs: expected a whole number (int) or None, got '2'"),
    ("diagnose", ("-",), {"stdin": "text"}, "stdin: expected a binary stream"),
    ("diagnose", ("-",), {"stdin": io.StringIO("x\n")}, "(StringIO)"),
    ("diagnose", (["/dev/null"],), {"compare": "yes"}, "compare: expected True or False"),
    ("diagnose", (["/dev/null"],), {"nope": 1}, "diagnose: unknown keyword 'nope'"),
    ("diagnose", (["/dev/null"],), {"recipe": {"x": 1}}, "recipe: expected a text (str) or None, got {'x': 1} (dict)"),
    ("recipes", (), {"model": 5}, "model: expected a text (str) or None, got 5"),
    ("recipes", (), {"foo": 1}, "recipes: unknown keyword 'foo'; it takes bridge_version, gpu, gpus, model, name, package, precision, task"),
    ("trace", (5,), {}, "paths: expected a path"),
    ("trace", (["t.json"],), {"ranks": "0"}, "ranks: expected a list (each item a whole number (int)) or None, got '0'"),
    ("trace", (["t.json"],), {"allow_partial": "no"}, "allow_partial: expected True or False"),
    ("compare_traces", (5, 6), {}, "before: expected a path"),
    ("compare_traces", (["a.json"], ["b.json"]), {"ranks": [0.5]}, "ranks[0]: expected a whole number"),
    ("compare_traces", (["a.json"], ["b.json"]), {"foo": 1}, "compare_traces: unknown keyword 'foo'"),
    ("trace_snippet", ("python",), {"steps": 5}, "steps: expected a text (str) or None, got 5"),
    ("trace_snippet", (5,), {}, "form: expected a text"),
    ("trace_snippet", (), {}, "trace_snippet: form is required"),
    ("anchors", (5,), {}, "mbridge_src: expected a text"),
    ("explain", (5,), {}, "finding_id: expected a text (str), got 5"),
    ("explain", (), {}, "explain: finding_id is required"),
    ("presets", (6,), {}, "bridge_version: expected a text"),
    ("check_manifest", (5,), {}, "path: expected a path"),
    ("check_manifest", (), {"check_directory": "yes"}, "check_directory: expected True or False"),
    ("release_table", (), {"bridge_version": "0.6.2"}, "release_table: unknown keyword 'bridge_version'; it takes "),
    ("suites", (1,), {}, "suites: takes 0 positional arguments"),
]


def public_functions() -> list[str]:
    return sorted(name for name, fn in vars(api).items()
                  if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == api.__name__ and name != "checked")


@pytest.mark.parametrize("name, args, kwargs, message", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_wrong_argument_is_one_usage_line(name, args, kwargs, message):
    with pytest.raises(UsageError, match=re.escape(message)) as raised:
        getattr(api, name)(*args, **kwargs)
    assert "\n" not in str(raised.value)


def test_every_public_function_is_checked_and_in_the_table():
    names = public_functions()
    assert len(names) >= 15
    assert [n for n in names if not hasattr(getattr(api, n), "checked_against")] == []
    assert sorted({c[0] for c in CASES}) == names


def test_what_is_right_is_still_taken():
    """The check refuses no input the verbs take: typed values, a path object, a tuple of ranks, bools as bools."""
    r = api.resolve({"model.tensor_model_parallel_size": 2}, gpus=8, te=True, machine_facts={"multicast": False, "nvlink_domain": 8},
                    launcher_env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert r.to_dict()["inputs"]["machine"]["multicast"] is False
    assert api.recipes(model="llama3_8b", gpus=8).to_dict()["count"] >= 0
    assert api.trace_snippet("python", steps="3-5", ranks="0,8")["profile_step_start"] == 3
    assert api.diagnose(["-"], stdin=io.BytesIO(b"hello\n")).to_dict()["causes"] == []


def test_multicast_given_false_is_read_as_false():
    """machine_facts={"multicast": "no"} was analysed as multicast available: False now is the only way to say no,
    and it is read (UB_NEEDS_MULTICAST where TP overlap needs userbuffers)."""
    asked = {"model.tensor_model_parallel_size": 2, "model.sequence_parallel": True, "comm_overlap.tp_comm_overlap": True}
    ids = {f.id for f in api.resolve(asked, gpus=8, machine_facts={"multicast": False}).findings}
    assert "UB_NEEDS_MULTICAST" in ids


def test_an_iterable_of_paths_or_ranks_is_taken_as_its_list(tmp_path):
    """recheck62 AI1: Path.glob's generator, a set or dict keys of logs and ranks=range(8) were refused (and a
    generator read by the check would reach the function empty)."""
    log = tmp_path / "r0.log"
    log.write_text("AssertionError: Communication call has not been issued for this bucket (126/128 params have grad "
                   "available)\n")
    for logs in (tmp_path.glob("*.log"), {str(log)}, {str(log): 1}.keys(), (p for p in [log])):
        assert [c["id"] for c in api.diagnose(logs).to_dict()["causes"]] == ["BUCKET_GRAD_SYNC_NOT_ISSUED"]
    with pytest.raises(UsageError, match=re.escape("logs[0]: expected a path")):
        api.diagnose(x for x in [5])
    with pytest.raises(UsageError, match="ranks"):
        api.trace([str(tmp_path)], ranks=(r for r in ["a"]))


def test_a_config_mapping_that_holds_itself_is_one_line():
    """fuzzW W2-1: a cycle in a config given in Python never returned (the key walk pushed it forever); a chain deeper
    than a file may nest is refused as a file's is; a mapping shared by two keys (no cycle) is walked once."""
    looped = {}
    looped["model"] = looped
    for call in (lambda: api.lint(looped, gpus=8), lambda: api.resolve(config=looped, gpus=8),
                 lambda: api.diff(looped, recipe=R), lambda: api.trace("/nonexistent", config=looped)):
        with pytest.raises(UsageError, match=re.escape("<mapping>: model: refers to a mapping that holds it (a cycle)")):
            call()
    inner = {}
    inner["x"] = [inner]
    with pytest.raises(UsageError, match=re.escape("<mapping>: model.x: refers to a mapping that holds it (a cycle)")):
        api.lint({"model": inner}, gpus=8)
    deep = {}
    cur = deep
    for _ in range(10_000):
        cur["model"] = cur = {}
    with pytest.raises(UsageError, match="nested more than 64 levels deep") as raised:
        api.lint(deep, gpus=8)
    assert len(str(raised.value)) < 1000
    shared = {}
    for _ in range(60):  # 2**60 paths, 60 mappings
        shared = {"a": shared, "b": shared}
    with pytest.raises(UsageError, match=re.escape("'dataset.a' is not in Megatron-Bridge's config")):
        api.lint({"dataset": shared}, gpus=8)


def test_an_iterable_is_read_up_to_its_bound_then_refused():
    """fuzzW W2-2: an iterable where a list is taken was read whole before any check: range(3*10**7) took 21 s and
    1.2 GB, itertools.count() all the memory. It is read to one item past a world size's bound, then refused; a list
    longer than the bound is refused too; the bound itself is taken."""
    import itertools
    import resource
    import time

    from mbridge_overlap import keywords, safeio

    assert keywords.MAX_ITEMS == safeio.MAX_GPUS
    start, rss = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for call in (lambda: api.compare_traces("/nonexistent-a", "/nonexistent-b", ranks=itertools.count()),
                 lambda: api.trace("/nonexistent", ranks=range(30_000_000)),
                 lambda: api.trace("/nonexistent", ranks=[0] * (keywords.MAX_ITEMS + 1)),
                 lambda: api.diagnose(itertools.repeat("/dev/null"))):
        with pytest.raises(UsageError, match=re.escape("more than 1,048,576 items")) as raised:
            call()
        assert str(raised.value).split(":")[0] in ("ranks", "logs")
    assert time.monotonic() - start < 20
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 400_000  # KB: under 400 MB more
    with pytest.raises(UsageError, match="no such file or directory"):
        api.trace("/nonexistent", ranks=range(keywords.MAX_ITEMS))
