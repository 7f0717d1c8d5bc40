# Sourced by test.sh and bridge_env.sh: find a Python interpreter of one minor version without machine paths.
# Order: the variable the caller names, pythonX.Y on PATH, then pyenv's and uv's installs (PYENV_ROOT, `pyenv root`,
# ~/.pyenv; `uv python find`). Prints the interpreter's path; returns 1 when none is found.
find_python_version() {
  local want=$1 override=${2:-} c root roots=()
  [ -n "${PYENV_ROOT:-}" ] && roots+=("$PYENV_ROOT")
  root=$(pyenv root 2>/dev/null) && roots+=("$root")
  roots+=("$HOME/.pyenv")
  local candidates=("$override" "python$want")
  for root in "${roots[@]}"; do
    for c in "$root"/versions/"$want".*/bin/python; do candidates+=("$c"); done
  done
  c=$(uv python find "$want" 2>/dev/null) && candidates+=("$c")
  for c in "${candidates[@]}"; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$want')" >/dev/null 2>&1; then
      command -v "$c"; return 0
    fi
  done
  return 1
}
