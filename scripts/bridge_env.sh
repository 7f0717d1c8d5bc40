#!/usr/bin/env bash
# Build, or reuse, a Python 3.12 venv with real Megatron-Bridge, Megatron-Core, Transformer Engine and torch,
# from the package registries alone (versions pinned in requirements-bridge.txt beside this script).
#
#   scripts/bridge_env.sh [--release VERSION] [--no-nemo-run] [--print-python]
#
# The venv lives outside the tracked tree, in ${XDG_CACHE_HOME:-~/.cache}/nemo-mbridge-perf-tp-dp-comm-overlap/:
# venv-mbridge-0.6.2 (or $MBRIDGE_VENV) for the default release, venv-mbridge-VERSION for --release VERSION, pinned in
# requirements-bridge-VERSION.txt. A release whose pins say `# share: 0.6.2` gets only its own Megatron-Core,
# Megatron-Bridge and the few packages it pins; torch, Transformer Engine and the rest come from the 0.6.2 venv
# (built first if needed) through a .pth file, so nothing is compiled twice.
# Each stage leaves a stamp holding the hash of its pinned lines, so a ready venv is reused in seconds and an
# interrupted build resumes where it stopped. Progress goes to stderr; with --print-python the venv's python path is
# the one line on stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
default_release=0.6.2
# $XDG_CACHE_HOME only where absolute: the XDG spec says to ignore a relative one (never the working directory)
case "${XDG_CACHE_HOME:-}" in /*) cache_base=$XDG_CACHE_HOME ;; *) cache_base=$HOME/.cache ;; esac
cache_root="$cache_base/nemo-mbridge-perf-tp-dp-comm-overlap"
with_nemo_run=1
print_python=0
release=$default_release
while [ $# -gt 0 ]; do
  case "$1" in
    --no-nemo-run) with_nemo_run=0 ;;
    --print-python) print_python=1 ;;
    --release) [ $# -ge 2 ] || { echo "bridge_env.sh: --release needs a version, e.g. --release 0.5.1" >&2; exit 2; }
               release=$2; shift ;;
    --release=*) release=${1#--release=} ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) printf "bridge_env.sh: unknown option %q (try --help)\n" "$1" >&2; exit 2 ;;
  esac
  shift
done
if [ "$release" = "$default_release" ]; then
  req="$here/requirements-bridge.txt"
  VENV="${MBRIDGE_VENV:-$cache_root/venv-mbridge-$release}"
else
  req="$here/requirements-bridge-$release.txt"
  VENV="$cache_root/venv-mbridge-$release"
fi
if [[ ! "$release" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || [ ! -f "$req" ]; then
  known=$(cd "$here" && ls requirements-bridge-*.txt 2>/dev/null | sed 's/requirements-bridge-\(.*\)\.txt/\1/' | tr '\n' ' ')
  printf "bridge_env.sh: --release: no pinned environment for %q (known: %s)\n" "$release" "$default_release ${known% }" >&2
  exit 2
fi
share_from=$(sed -n 's/^# share: *\([0-9.]*\).*/\1/p' "$req" | head -n 1)

say() { printf '[bridge-env] %s\n' "$*" >&2; }
die() { printf 'bridge_env.sh: %s\n' "$*" >&2; exit 1; }

# shellcheck source=find_python.sh
. "$here/find_python.sh"
find_python() { find_python_version 3.12 "${MBRIDGE_PYTHON:-}"; }

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
  if [ ${#pkgs[@]} -eq 0 ]; then return 0; fi  # this release pins nothing for the stage (shared)
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
  if [ ${#pkgs[@]} -eq 0 ]; then return 0; fi
  say "stage te: ${pkgs[*]}: compiled from source, about 10 min on 2 cores the first time (pip caches the wheel)"
  run_logged te build_te "${pkgs[@]}"
  stage_hash te >"$VENV/.stage-te"
}

py=$(find_python) || die "needs a Python 3.12 interpreter (megatron-bridge 0.6 requires >=3.12,<3.13); set MBRIDGE_PYTHON"

# One build of a venv at a time (two verifies, or a verify and the tests): the others wait for it, then find it ready.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
  say "another process is building or checking $VENV; waiting for it (the lock is $VENV.lock)"
  flock 9
fi

if [ ! -x "$VENV/bin/python" ]; then
  say "creating venv $VENV with $py"
  "$py" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --progress-bar off -q --upgrade pip >&2
fi

site_packages() { "$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'; }
share_pth() { echo "$(site_packages "$VENV/bin/python")/zz-mbridge-share-$share_from.pth"; }

# The shared venv's packages are hidden while pip installs (it must neither see nor replace them), then linked
# after this release's own packages, which come first on sys.path and so shadow them.
link_shared() {
  local base_py base_site site
  base_py=$("$0" --release "$share_from" --print-python $([ "$with_nemo_run" = 1 ] || echo --no-nemo-run))
  [ "$("$base_py" -V 2>&1)" = "$("$VENV/bin/python" -V 2>&1)" ] || die "the $share_from venv's Python differs from this one's"
  base_site=$(site_packages "$base_py")
  site=$(site_packages "$VENV/bin/python")
  echo "$base_site" >"$(share_pth)"
  # Transformer Engine looks for cuDNN and the CUDA libraries under this interpreter's own site-packages/nvidia.
  [ -e "$site/nvidia" ] || ln -s "$base_site/nvidia" "$site/nvidia"
  say "sharing torch, Transformer Engine and the rest from $base_site"
}

stage_ready() { [ -z "$(stage_lines "$1")" ] || stage_done "$1"; }

if [ -n "$share_from" ]; then
  if ! stage_ready megatron || ! stage_ready deps; then rm -f "$(share_pth)"; fi
  install_stage megatron "this release's Megatron-Core and Megatron-Bridge, without their dependency lists" --no-deps
  install_stage deps "the packages this release pins differently, alone" --no-deps
  link_shared
  got=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("megatron-bridge"))')
  [ "$got" = "$release" ] || die "megatron-bridge $got is the one Python finds in $VENV, not $release"
else
  install_stage torch "CUDA build from PyPI, about 4.6 GB; it runs on the CPU"
  install_stage megatron "without their dependency lists" --no-deps
  install_stage deps "what the training config and the overlap suites import"
  install_te
  if [ "$with_nemo_run" = 1 ]; then
    install_stage nemo-run "for tests/unit_tests/recipes/test_run_plugins.py"
  fi
fi

say "venv ready: $VENV"
if [ "$print_python" = 1 ]; then echo "$VENV/bin/python"; fi
