#!/usr/bin/env bash
# Build, or reuse, a Python 3.12 venv with real Megatron-Bridge, Megatron-Core, Transformer Engine and torch,
# from the package registries alone (versions pinned in requirements-bridge.txt beside this script).
#
#   scripts/bridge_env.sh [--no-nemo-run] [--print-python]
#
# The venv lives outside the tracked tree: $MBRIDGE_VENV, default
# ${XDG_CACHE_HOME:-~/.cache}/nemo-mbridge-perf-tp-dp-comm-overlap/venv-mbridge-0.6.2.
# Each stage leaves a stamp holding the hash of its pinned lines, so a ready venv is reused in seconds and an
# interrupted build resumes where it stopped. Progress goes to stderr; with --print-python the venv's python path is
# the one line on stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/requirements-bridge.txt"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/nemo-mbridge-perf-tp-dp-comm-overlap"
VENV="${MBRIDGE_VENV:-$cache_root/venv-mbridge-0.6.2}"
with_nemo_run=1
print_python=0
for arg in "$@"; do
  case "$arg" in
    --no-nemo-run) with_nemo_run=0 ;;
    --print-python) print_python=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bridge_env.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

say() { printf '[bridge-env] %s\n' "$*" >&2; }
die() { printf 'bridge_env.sh: %s\n' "$*" >&2; exit 1; }

find_python() {
  local c
  for c in "${MBRIDGE_PYTHON:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

stage_lines() { awk -v s="$1" '/^# stage:/{cur=$3; next} /^#/||NF==0{next} cur==s{print}' "$req"; }
stage_hash() { { stage_lines "$1"; echo "python=$("$VENV/bin/python" -V 2>&1)"; } | sha256sum | cut -c1-16; }
stage_done() { [ -f "$VENV/.stage-$1" ] && [ "$(cat "$VENV/.stage-$1")" = "$(stage_hash "$1")" ]; }

# Run a long command with its output in a log, printing a heartbeat so a 10-minute compile is not silent.
run_logged() {
  local label=$1; shift
  local log="$VENV/.log-$label" start=$SECONDS
  "$@" >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    if kill -0 "$pid" 2>/dev/null && (( (SECONDS - start) % 30 < 5 )); then
      say "  ... $label still running ($((SECONDS - start)) s): $(tail -n 1 "$log" | cut -c1-100)"
    fi
  done
  if ! wait "$pid"; then
    tail -n 30 "$log" >&2
    die "stage '$label' failed after $((SECONDS - start)) s; full log: $log"
  fi
  say "  $label done in $((SECONDS - start)) s"
}

pip_install() { "$VENV/bin/python" -m pip install --progress-bar off "$@"; }

install_stage() {
  local name=$1 note=$2; shift 2
  if stage_done "$name"; then say "stage $name: ready"; return 0; fi
  mapfile -t pkgs < <(stage_lines "$name")
  say "stage $name: installing ${pkgs[*]} ($note)"
  run_logged "$name" pip_install "$@" "${pkgs[@]}"
  stage_hash "$name" >"$VENV/.stage-$name"
}

build_te() {
  local nv="$VENV/lib/python3.12/site-packages/nvidia"
  local cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  [ -d "$cuda_home/include" ] || die "Transformer Engine builds against CUDA headers; set CUDA_HOME (no $cuda_home/include)"
  CUDA_HOME="$cuda_home" \
  CPATH="$nv/nccl/include:$nv/cudnn/include:$nv/cu13/include:$cuda_home/include${CPATH:+:$CPATH}" \
  LIBRARY_PATH="$nv/cu13/lib:$nv/nccl/lib:$nv/cudnn/lib${LIBRARY_PATH:+:$LIBRARY_PATH}" \
  MAX_JOBS="${MAX_JOBS:-$(nproc)}" NVTE_FRAMEWORK=pytorch \
    pip_install --no-build-isolation "$@"
}

install_te() {
  if stage_done te; then say "stage te: ready"; return 0; fi
  mapfile -t pkgs < <(stage_lines te)
  say "stage te: ${pkgs[*]}: compiled from source, about 10 min on 2 cores the first time (pip caches the wheel)"
  run_logged te build_te "${pkgs[@]}"
  stage_hash te >"$VENV/.stage-te"
}

py=$(find_python) || die "needs a Python 3.12 interpreter (megatron-bridge 0.6 requires >=3.12,<3.13); set MBRIDGE_PYTHON"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating venv $VENV with $py"
  mkdir -p "$(dirname "$VENV")"
  "$py" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --progress-bar off -q --upgrade pip >&2
fi

install_stage torch "CUDA build from PyPI, about 4.6 GB; it runs on the CPU"
install_stage megatron "without their dependency lists" --no-deps
install_stage deps "what the training config and the overlap suites import"
install_te
if [ "$with_nemo_run" = 1 ]; then
  install_stage nemo-run "for tests/unit_tests/recipes/test_run_plugins.py"
fi

say "venv ready: $VENV"
if [ "$print_python" = 1 ]; then echo "$VENV/bin/python"; fi
