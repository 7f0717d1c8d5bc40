"""Generate data/releases/<version>/flex_builders.json for the installed megatron-bridge: the recipes whose build
calls apply_flex_dispatcher_backend (bridge/flex_builders.py). Run with the Bridge venv's python:

    $(scripts/bridge_env.sh --print-python) tools/gen_flex_builders.py [--check]

--check compares with the shipped file (exit 1 on a difference); the Bridge test tier runs it.
"""

import sys

from release_records import main

if __name__ == "__main__":
    sys.exit(main("flex_builders", __doc__))
