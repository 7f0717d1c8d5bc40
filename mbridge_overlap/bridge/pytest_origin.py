"""A pytest plugin verify loads into the upstream suites' run: records which megatron.bridge the tests used."""

import importlib.util
import json
import os
import sys


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get("MBRIDGE_SKILL_ORIGIN")
    if not target:
        return
    module = sys.modules.get("megatron.bridge")
    if module is not None:
        info = {"file": os.path.dirname(module.__file__)}
    else:  # the tests never imported it: where it would come from, without importing it
        try:
            spec = importlib.util.find_spec("megatron.bridge")
        except (ImportError, ValueError):
            spec = None
        info = {"file": list(spec.submodule_search_locations)[0]} if spec and spec.submodule_search_locations else {}
    with open(target, "w", encoding="utf-8") as fh:
        json.dump(info, fh)
