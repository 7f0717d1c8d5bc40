"""The messages catalog against the installed packages: tools/gen_messages.py --check regenerates it byte for byte,
its recorded lines are the statements in the installed files, and what real Bridge logs, warns and raises on the
overlap path is found in it at the function that wrote it."""

import contextlib
import logging
import re
import subprocess
import sys
import traceback
import warnings
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import ROOT
from mbridge_overlap.bridge import adapter
from mbridge_overlap.diagnose import messages

try:
    RELEASE = adapter.bridge_version()
except Exception:  # no megatron-bridge: conftest skips or fails the tier with the reason
    RELEASE = None


@pytest.fixture(scope="module")
def cat():
    return messages.load(RELEASE)


def test_regenerated_catalog_matches_the_shipped_one():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_messages.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith("messages catalog matches")


def test_the_installed_release_has_its_own_catalog(cat):
    assert cat.version == RELEASE
    assert cat.packages == {p: version(p) for p in ("megatron-bridge", "megatron-core", "transformer-engine")}


def _site(marker: str) -> Path:
    return next(Path(p) for p in sys.path if p and (Path(p) / marker / "__init__.py").is_file())


def test_each_recorded_line_is_the_statement_in_the_installed_file(cat):
    roots = {"megatron-bridge": _site("megatron/bridge"), "megatron-core": _site("megatron/core"),
             "transformer-engine": _site("transformer_engine")}
    files: dict = {}
    for e in cat.entries:
        if e.origin != "python" or e.releases:  # (other releases' wordings are not in the installed files)
            continue
        lines = files.get(e.file)
        if lines is None:
            lines = files[e.file] = (roots[e.package] / e.file).read_text(encoding="utf-8").splitlines()
        text = lines[e.line - 1]
        if e.kind == "raise":
            # validate_result(message=...) raises that message in Megatron-Core's rerun state machine
            assert text.lstrip().startswith(("raise", "rerun_state_machine.validate_result(")), (e.id, text)
        elif e.kind == "assert":
            assert text.lstrip().startswith("assert"), (e.id, text)
        else:
            name = e.call.rsplit(".", 1)[-1]
            # the call, or the line that adds this line to a list written out "\n".join()ed
            assert name + "(" in text or ".append(" in text or " = [" in text, (e.id, text)


# -- what real Bridge writes ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def captured():
    """Every log record and warning, and the exception, of a runtime_config_update() call."""
    records, out = [], {"exc": None, "warnings": []}

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    root = logging.getLogger()
    handler, level = Keep(), root.level
    logging.disable(logging.NOTSET)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield out
        out["warnings"] = list(caught)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        adapter.quiet()
    out["records"] = records


def run(overrides: dict, world_size: int = 16):
    _, config_mod, _ = adapter.import_bridge()
    cfg = adapter.baseline_config()
    adapter.apply_overrides(cfg, overrides)
    with adapter.runtime(world_size), captured() as got:
        try:
            config_mod.runtime_config_update(cfg)
        except Exception as exc:  # Bridge rejects with AssertionError, ValueError, ...
            got["exc"] = exc
    return got


def where(path: str) -> str:
    """A file of site-packages as the catalog names it."""
    path = path.replace("\\", "/")
    for top in ("megatron/", "transformer_engine/"):
        if "/" + top in path:
            return top + path.rsplit("/" + top, 1)[1]
    return path


SCENARIOS = {
    "tp_size_1": {"comm_overlap.tp_comm_overlap": True, "model.tensor_model_parallel_size": 1},
    "no_sequence_parallel": {"comm_overlap.tp_comm_overlap": True, "model.tensor_model_parallel_size": 2,
                             "model.sequence_parallel": False},
    "default_ub_cfg": {"comm_overlap.tp_comm_overlap": True, "model.tensor_model_parallel_size": 2,
                       "model.sequence_parallel": True},
    "dist_opt_out_of_sync": {"ddp.use_distributed_optimizer": True, "optimizer.use_distributed_optimizer": False},
    "fp8_recipe": {"mixed_precision": "bf16_with_fp8_current_scaling_mixed"},
    "ep_overlap_without_ep": {"comm_overlap.overlap_moe_expert_parallel_comm": True},
    "fsdp_without_its_checkpoint_format": {"ddp.use_megatron_fsdp": True},
    "fsdp_with_cuda_device_max_connections_1": {"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "fsdp_dtensor",
                                                "env_vars.CUDA_DEVICE_MAX_CONNECTIONS": 1},
    "fsdp_and_torch_fsdp2": {"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "fsdp_dtensor",
                             "dist.use_torch_fsdp2": True},
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_what_real_bridge_writes_is_found_where_it_was_written(name, cat):
    overrides = dict(SCENARIOS[name])
    if "env_vars.CUDA_DEVICE_MAX_CONNECTIONS" in overrides and "env_vars" not in adapter.baseline_config().__dict__:
        pytest.skip("this release has no ConfigContainer.env_vars")
    got = run(overrides)
    found = 0
    modes = {f: m for pkg in cat.header["scanned"].values() for f, m in pkg["files"].items()}

    def kept_whole(file: str, function: str | None) -> bool:
        """Whether the catalog keeps every message written there (SCAN mode "all"), so one must be found."""
        mode = modes.get(file, "")
        if mode.startswith("all:") and function is not None:
            qualified = {e.function for e in cat.entries if e.file == file and e.function.endswith(function)}
            return any(re.search(mode[4:], q) for q in qualified)
        return mode == "all"

    for r in got["records"]:
        file, function = where(r.pathname), r.funcName
        if function in ("log_single_rank", "log_on_each_pipeline_stage"):  # a helper: the logger names the module
            file, function = r.name.replace(".", "/") + ".py", None
        line = f"[default3]:{r.levelname}:{r.name}:{r.getMessage()}"
        hits = [h for h in cat.match(line) if not h.truncated]
        if not kept_whole(file, function) and not hits:
            continue
        assert any(h.entry.file == file and function in (None, h.entry.function.rsplit(".", 1)[-1])
                   for h in hits), (line, [h.entry.id for h in hits])
        found += 1
    for w in got["warnings"]:
        # warnings.warn's file: one kept whole, or the helper warn_rank_0 (its caller is not known)
        line = f"0: {w.filename}:{w.lineno}: {w.category.__name__}: {w.message}"
        hits = [h for h in cat.match(line) if h.entry.kind == "warn" and not h.truncated]
        if not (kept_whole(where(w.filename), None) or where(w.filename).endswith("utils/common_utils.py")):
            continue
        assert hits, line
        found += 1
    exc = got["exc"]
    if exc is not None:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        at = (where(frame.filename), frame.name)
        text = f"{type(exc).__name__}: {exc}".strip()
        first = text.split("\n", 1)[0]
        if str(exc).strip():
            hits = cat.match(f"[rank0]: {first}")
            assert any((h.entry.file, h.entry.function.rsplit(".", 1)[-1]) == at for h in hits), (
                first, at, [(h.entry.file, h.entry.function) for h in hits])
        entries = cat.frame(frame.filename, frame.name, line=frame.lineno)
        assert entries and entries[0].line == frame.lineno, (at, frame.lineno, [e.line for e in entries])
        by_source = cat.frame(frame.filename, frame.name, source_line=frame.line)  # another release's line numbers
        assert by_source[0] is entries[0], (frame.line, by_source[0].condition, by_source[0].template)
        found += 1
    assert found, f"{name}: Bridge wrote nothing on the overlap path"


def test_the_scenarios_provoke_what_they_are_named_for(cat):
    got = run(SCENARIOS["tp_size_1"])
    assert any("due to TP size < 2" in r.getMessage() for r in got["records"])
    for name, topic in (("ep_overlap_without_ep", "moe_overlap"), ("fsdp_without_its_checkpoint_format", "fsdp"),
                        ("fsdp_and_torch_fsdp2", "fsdp")):
        exc = run(SCENARIOS[name])["exc"]
        assert exc is not None, name
        hits = cat.match(f"[rank0]: {type(exc).__name__}: {exc}")
        assert hits and hits[0].entry.topic == topic, (name, exc)
    if "env_vars" in adapter.baseline_config().__dict__:
        exc = run(SCENARIOS["fsdp_with_cuda_device_max_connections_1"])["exc"]
        assert str(exc) == "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset."


def test_every_attention_backend_transformer_engine_turns_off_for_context_parallelism_is_matched():
    """CP_ATTENTION_BACKEND_OFF's two native messages against the installed Transformer Engine: every logger.debug of
    get_attention_backend that turns a backend off because of context parallelism (its %s filled in) matches one of
    them, and every other "Disabling ..." line matches none."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("transformer_engine.pytorch")
    path = Path(spec.submodule_search_locations[0]) / "attention" / "dot_product_attention" / "utils.py"
    texts = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "debug" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            texts.append(node.args[0].value.replace("%s", "p2p"))
    # a backend turned off because of CP says so ("does not support", "for", "with" context parallelism; an a2a
    # cp_comm_type's head counts); "softcap (requires ... and no context parallelism)" lists CP among other reasons
    because = re.compile(r"(?:support|for|with) context parallelism|cp_comm_type = \S+ requires")
    cp = [t for t in texts if t.startswith("Disabling") and because.search(t)]
    other = [t for t in texts if t.startswith("Disabling") and t not in cp]
    assert len(cp) >= 15 and other
    catalog = messages.load()
    ids = {"native.te_attention_backend_off_for_cp", "native.te_attention_fused_off_for_cp_heads"}
    for text in cp:
        assert ids & {h.entry.id for h in catalog.match("DEBUG:DotProductAttention:" + text)}, text
    for text in other:
        assert not ids & {h.entry.id for h in catalog.match("DEBUG:DotProductAttention:" + text)}, text
