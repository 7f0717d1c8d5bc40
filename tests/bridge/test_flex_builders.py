"""A recipe whose build calls apply_flex_dispatcher_backend decides its token dispatcher by the GPU it builds on
(evalS V1): the shipped record of those calls is the installed Bridge's, and replayed for another GPU type
(run/flex.for_gpu) it gives the dispatcher the real build gives on that GPU (CUDA reported available, as on a GPU node:
0.6.2's function takes a shortcut without CUDA)."""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from conftest import ROOT

from mbridge_overlap.run import flex
from mbridge_overlap.upstream import catalog, releases

GPUS = ("h100", "b200", "gb200", "gb300")


def test_the_shipped_record_is_the_installed_bridge_s():
    proc = subprocess.run([sys.executable, "-W", "ignore", str(ROOT / "tools" / "gen_flex_builders.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def _sample() -> list[str]:
    from mbridge_overlap.bridge import adapter

    names = sorted(flex._builders(catalog.release_of(releases.get(adapter.bridge_version()))))
    return names[::max(1, len(names) // 12)]


@pytest.mark.parametrize("name", _sample())
def test_replayed_for_another_gpu_the_build_decides_as_bridge_s(name):
    from mbridge_overlap.bridge import adapter, recipes

    release = releases.get(adapter.bridge_version())
    version = catalog.release_of(release)
    entry = catalog.lookup(name, version)
    if not entry.get("builds") or not entry["request"]["model"].get("num_moe_experts"):
        pytest.skip("no experts offline: the function returns before deciding")
    fn = getattr(importlib.import_module(entry["module"]), entry.get("alias_of") or entry["name"])
    fixups = [(k, v) for k, _, v in (f.partition("=") for f in entry.get("fixups") or []) if k == recipes.STANDIN_EXPERTS]
    import torch

    for gpu in GPUS:
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(torch.cuda, "is_available", lambda: True))
            cfg = recipes._build(fn, gpu, [(k, int(v)) for k, v in fixups], Path(tempfile.mkdtemp()))
        real = (cfg.model.moe_token_dispatcher_type, cfg.model.moe_flex_dispatcher_backend)
        ours, _ = flex.for_gpu(entry, gpu, version)
        model = ours["request"]["model"]
        assert (model["moe_token_dispatcher_type"], model["moe_flex_dispatcher_backend"]) == real, (name, gpu)
