#!/usr/bin/env bash
# Prove the overlap snippets against real Megatron-Bridge: apply every snippet form to a Bridge ConfigContainer,
# compare every effective field with the resolver's prediction, check the code anchors, and run the upstream
# overlap suites with a pass-count check.
#
#   scripts/verify.sh [--mbridge-src CHECKOUT] [plan layout flags] [KEY=VALUE ...] [--conformance] [--json] [--help]
#   scripts/verify.sh --which-python      the Python verify runs with (the venv built or checked first), and nothing else
#
# Bad arguments are refused by any python3 before an interpreter with Bridge is picked or built.
# Python: $MBRIDGE_VERIFY_PYTHON if set; else python3 when megatron.bridge already imports there (a NeMo
# container); else the venv scripts/bridge_env.sh builds (or reuses) from the package registries.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
# $XDG_CACHE_HOME only where absolute: the XDG spec says to ignore a relative one (never the working directory)
case "${XDG_CACHE_HOME:-}" in /*) cache_base=$XDG_CACHE_HOME ;; *) cache_base=$HOME/.cache ;; esac
cache="$cache_base/nemo-mbridge-perf-tp-dp-comm-overlap"
stamp="$cache/verify-python.stamp"

# What bridge_env.sh decides "ready" from: its code, the pins, the variables that choose the venv and interpreter,
# each stage's stamp in the venv and the interpreter itself. While none of it changes, the venv it last reported
# ready still is, and asking it again (0.4-0.6 s on 2 cores) would only repeat the answer.
ready_key() {
  local py=$1 venv f
  venv=$(dirname "$(dirname "$py")")
  {
    cat "$here/bridge_env.sh" "$here/find_python.sh" "$here"/requirements-bridge*.txt
    printf '%s|%s|%s|%s\n' "${MBRIDGE_VENV:-}" "${XDG_CACHE_HOME:-}" "$HOME" "${MBRIDGE_PYTHON:-}"
    for f in "$venv"/.stage-*; do [ -f "$f" ] && { echo "$f"; cat "$f"; }; done
    readlink -f "$py"
    stat -L -c '%s %Y %i' "$py"
  } 2>/dev/null | sha256sum | cut -c1-32
}

venv_python() {
  local key py
  if [ -r "$stamp" ] && read -r key py <"$stamp" && [ -n "$py" ] && [ -x "$py" ] && [ "$key" = "$(ready_key "$py")" ]; then
    echo "[verify] Bridge venv ready: $py (unchanged since scripts/bridge_env.sh last checked it)" >&2
    echo "$py"
    return 0
  fi
  py=$("$here/bridge_env.sh" --print-python) || return  # its status, as before: set -e ends verify.sh with it
  if mkdir -p "$cache" 2>/dev/null; then
    { printf '%s %s\n' "$(ready_key "$py")" "$py" >"$stamp.$$" && mv -f "$stamp.$$" "$stamp"; } 2>/dev/null || rm -f "$stamp.$$"
  fi
  echo "$py"
}

# --help needs no Bridge: it is answered by any Python, before anything is built
for arg in "$@"; do
  case "$arg" in
    -h|--help) PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m mbridge_overlap.bridge.verify --help ;;
    --) break ;;
  esac
done

# bad arguments are refused by any Python before an interpreter with Bridge is picked or built (fuzzR R6)
which=
args=()
for arg in "$@"; do
  if [ "$arg" = "--which-python" ]; then which=1; else args+=("$arg"); fi
done
if [ -z "$which" ]; then
  PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" python3 -m mbridge_overlap.bridge.verify --check-args "$@" || exit $?
elif [ "${#args[@]}" -gt 0 ]; then
  echo "scripts/verify.sh: error: --which-python takes no other arguments" >&2
  exit 2
fi

if [ -n "${MBRIDGE_VERIFY_PYTHON:-}" ]; then
  py=$MBRIDGE_VERIFY_PYTHON
elif python3 -c 'import megatron.bridge' >/dev/null 2>&1; then
  py=$(command -v python3)
  echo "[verify] megatron.bridge already imports in $py: using it, building nothing" >&2
else
  py=$(venv_python)
fi
if [ -n "$which" ]; then
  echo "$py"
  exit 0
fi
# Run from the caller's folder (relative --snippets/--mbridge-src paths are theirs), the package found by PYTHONPATH.
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -W ignore -m mbridge_overlap.bridge.verify "$@"
