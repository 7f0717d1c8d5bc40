"""Generate data/releases/<version>/vpp_refused.json for the installed megatron-bridge: the model providers whose
provide() refuses virtual pipeline parallelism, and the recipes that build one (bridge/vpp_refused.py). Run with the
Bridge venv's python:

    $(scripts/bridge_env.sh --print-python) tools/gen_vpp_refused.py [--check]

--check compares with the shipped file (exit 1 on a difference); the Bridge test tier runs it.
"""

import sys

from release_records import main

if __name__ == "__main__":
    sys.exit(main("vpp_refused", __doc__))
