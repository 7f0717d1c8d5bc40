#!/usr/bin/env bash
# Prove the overlap snippets against real Megatron-Bridge: apply every snippet form to a Bridge ConfigContainer,
# compare every effective field with the resolver's prediction, check the code anchors, and run the upstream
# overlap suites with a pass-count check.
#
#   scripts/verify.sh [--mbridge-src CHECKOUT] [plan layout flags] [--conformance] [--json] [--help]
#
# Python: $MBRIDGE_VERIFY_PYTHON if set; else python3 when megatron.bridge already imports there (a NeMo
# container); else the venv scripts/bridge_env.sh builds (or reuses) from the package registries.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")

if [ -n "${MBRIDGE_VERIFY_PYTHON:-}" ]; then
  py=$MBRIDGE_VERIFY_PYTHON
elif python3 -c 'import megatron.bridge' >/dev/null 2>&1; then
  py=$(command -v python3)
  echo "[verify] megatron.bridge already imports in $py: using it, building nothing" >&2
else
  py=$("$here/bridge_env.sh" --print-python)
fi
# Run from the caller's folder (relative --snippets/--mbridge-src paths are theirs), the package found by PYTHONPATH.
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -W ignore -m mbridge_overlap.bridge.verify "$@"
