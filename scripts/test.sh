#!/usr/bin/env bash
# The project's test command (README.md; .ci/run calls it). Two tiers, and a third on request:
#   --fast: ruff and tier 1 without the hostile suites (tests/hostile), on every core (pytest-xdist): the everyday
#           command, no Bridge venv (about 100 s on 2 cores; the serial run takes about 175 s)
#   1. pure Python: tests/ without tests/bridge, on the oldest supported Python (3.10) when present
#   2. Bridge: tests/bridge with the real megatron-bridge venv (scripts/bridge_env.sh builds or reuses it)
#   3. with MBRIDGE_SKILL_SECOND_RELEASE="VERSION ..." (e.g. "0.5.1 0.6.0"): tests/bridge/test_second_release.py
#      against each release, in the venv `scripts/bridge_env.sh --release VERSION` builds (about 20 s beside a ready
#      0.6.2 venv)
# Before tier 1, `ruff check` lints every Python file the project owns; a finding fails the run.
# Extra arguments go to both pytest runs. pytest's exit 5 (nothing collected) fails the run.
set -euo pipefail
fast=0
if [ "${1:-}" = "--fast" ]; then fast=1; shift; fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# $XDG_CACHE_HOME only where absolute: the XDG spec says to ignore a relative one (never the working directory)
case "${XDG_CACHE_HOME:-}" in /*) cache_base=$XDG_CACHE_HOME ;; *) cache_base=$HOME/.cache ;; esac
cache="$cache_base/nemo-mbridge-perf-tp-dp-comm-overlap"

# shellcheck source=find_python.sh
. scripts/find_python.sh
base_py=$(find_python_version 3.10 "${MBRIDGE_SKILL_TEST_PYTHON:-}") || base_py=$(command -v python3) \
  || { echo "test.sh: no Python 3.10 (set MBRIDGE_SKILL_TEST_PYTHON) and no python3 on PATH" >&2; exit 2; }
test_venv="$cache/venv-test-$("$base_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
stamp="$test_venv/.requirements-$(sha256sum requirements-test.txt | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "[test] building the test venv $test_venv ($base_py)" >&2
  "$base_py" -m venv "$test_venv"
  "$test_venv/bin/python" -m pip install -q --progress-bar off -r requirements-test.txt
  touch "$stamp"
fi

# The real traces of the trace-agreement tests live outside the repository (never copied in): set
# MBRIDGE_SKILL_TRACES, or keep them beside the checkout as ../shared/data/traces; a clone of a local checkout
# (as CI makes) also looks beside the checkout it was cloned from.
# Likewise the git mirror of upstream Megatron-Bridge that the anchor tests read tags from.
origin=$(git config --get remote.origin.url 2>/dev/null || true)
beside() {  # beside VAR RELATIVE_PATH WHAT: export VAR as the first folder found beside either checkout, unless set
  local var=$1 rel=$2 d
  if [ -z "${!var:-}" ]; then
    for d in "$root/../$rel" ${origin:+"$origin/../$rel"}; do
      if [ -d "$d" ]; then printf -v "$var" '%s' "$(cd "$d" && pwd)"; export "${var?}"; break; fi
    done
  fi
  [ -n "${!var:-}" ] || echo "[test] no $3 found: the tests that need it skip" >&2
}
beside MBRIDGE_SKILL_TRACES shared/data/traces "real traces"
beside MBRIDGE_SKILL_MIRROR .mirror/NVIDIA-NeMo+Megatron-Bridge/repo "Megatron-Bridge mirror"

echo "[test] lint: ruff check (pyproject.toml [tool.ruff])" >&2
"$test_venv/bin/ruff" check --no-cache .

if [ "$fast" = 1 ]; then
  echo "[test] fast: tier 1 without tests/hostile, on every core ($("$test_venv/bin/python" -V))" >&2
  exec "$test_venv/bin/python" -m pytest tests --ignore=tests/bridge --ignore=tests/hostile -q -p no:cacheprovider -n auto "$@"
fi
echo "[test] tier 1: pure Python ($("$test_venv/bin/python" -V))" >&2
"$test_venv/bin/python" -m pytest tests --ignore=tests/bridge -q -p no:cacheprovider "$@"

echo "[test] tier 2: real Megatron-Bridge" >&2
bridge_py=$(scripts/bridge_env.sh --print-python)
MBRIDGE_SKILL_REQUIRE_BRIDGE=1 "$bridge_py" -W ignore -m pytest tests/bridge -q -p no:cacheprovider "$@"

for second in ${MBRIDGE_SKILL_SECOND_RELEASE:-}; do
  echo "[test] tier 3: Megatron-Bridge $second, a second release" >&2
  start=$SECONDS
  second_py=$(scripts/bridge_env.sh --release "$second" --print-python)
  MBRIDGE_SKILL_REQUIRE_BRIDGE=1 "$second_py" -W ignore -m pytest tests/bridge/test_second_release.py -q -p no:cacheprovider "$@"
  echo "[test] tier 3 ($second) took $((SECONDS - start)) s" >&2
done
