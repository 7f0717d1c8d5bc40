"""Maintainer tools: the generators of the committed data and docs (gen_*.py, gen_all.py runs them), the fix
property checker (check_fixes.py) and the finding examples run through the API (examples.py); generated.py is the
check-or-write tail every generator ends with. Run from the repository root (`python tools/gen_all.py --check`);
tests import them as `tools.NAME`."""
