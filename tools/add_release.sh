#!/usr/bin/env bash
# Add (or refresh) a Megatron-Bridge release's data: one command, then review what it reports as changed.
#
#   tools/add_release.sh VERSION [--mbridge-src CHECKOUT_AT_THAT_TAG]
#
# Needs scripts/requirements-bridge-VERSION.txt (pins: megatron-bridge, megatron-core, the rest shared with the default
# venv) and VERSION in mbridge_overlap/data/releases.yaml (its facts: env_vars, launch_env, megatron_core, ...).
# 1. builds the release's venv (scripts/bridge_env.sh --release VERSION)
# 2. field names and presets from the installed package (tools/gen_bridge_data.py)
# 3. the recipe catalog (tools/gen_recipe_catalog.py), and the records built from it: the recipes that pick their
#    dispatcher by the GPU (tools/gen_flex_builders.py) and the providers that refuse VPP (tools/gen_vpp_refused.py)
# 4. the fingerprints of every anchored rule in its wheel (tools/gen_release_data.py --release VERSION=pypi), and the
#    JSON twins the skill loads of every YAML data file (tools/gen_compiled_data.py)
# 5. with --mbridge-src: verify against it (snippets, anchors, the upstream suites' pass counts, 2,000-config
#    conformance); the counts go into mbridge_overlap/data/suites.yaml by hand, keyed by the file hash verify prints
# 6. git diff --stat of the data, and the anchors report: what changed is what to review
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
version=${1:-}
if [[ ! "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "add_release.sh: usage: tools/add_release.sh VERSION [--mbridge-src CHECKOUT]" >&2
  exit 2
fi
shift
src=""
if [ "${1:-}" = "--mbridge-src" ]; then
  src=${2:?add_release.sh: --mbridge-src needs a folder}
fi
say() { printf '[add-release] %s\n' "$*" >&2; }

py=$("$here/bridge_env.sh" --release "$version" --print-python)
installed=$("$py" -c 'from importlib.metadata import version; print(version("megatron-bridge"))')
[ "$installed" = "$version" ] || { echo "add_release.sh: the venv has megatron-bridge $installed, not $version" >&2; exit 1; }
cd "$root"
say "field names and presets"
"$py" -W ignore tools/gen_bridge_data.py
say "recipe catalog (about a minute)"
"$py" -W ignore tools/gen_recipe_catalog.py
say "the dispatcher each recipe picks by the GPU, and the providers that refuse VPP"
"$py" -W ignore tools/gen_flex_builders.py
"$py" -W ignore tools/gen_vpp_refused.py
say "fingerprints of the anchored rules"
python3 tools/gen_release_data.py --add "$version=pypi"
say "the JSON twins of the YAML data (releases.yaml's new row included)"
python3 tools/gen_compiled_data.py
if [ -n "$src" ]; then
  say "verify against $src"
  MBRIDGE_VERIFY_PYTHON="$py" scripts/verify.sh --mbridge-src "$src" --conformance || say "verify did not pass: read its lines above"
fi
say "what changed (review it; then python3 tools/gen_all.py: the reference pages, card.yaml and the generated blocks; and the tests):"
git diff --stat -- mbridge_overlap/data
"$py" -W ignore -m mbridge_overlap anchors || true
