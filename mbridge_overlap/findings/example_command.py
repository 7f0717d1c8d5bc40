"""The command line that runs a finding's example or counter-example (data/findings.yaml; the verbs and their inputs
are listed in examples.py, which runs them through the API), as explain and references/findings.md show it. It imports
neither the API nor the registry, so findings.explain shows examples without an import cycle.
"""

from __future__ import annotations

import json

from ..safeio import ENV_PREFIX, sh_quote
from ..values import fmt


def command(example: dict) -> str:
    """The example as one command line (a file it needs is described, not written)."""
    verb, kw = example["verb"], {k: v for k, v in example.items() if k != "verb"}
    words = ["mbridge-overlap"]
    if verb == "resolve":
        words += ["resolve", *_flags(kw, ("recipe", "gpus", "gpu", "bridge_version")), *_overrides(kw.get("overrides") or {})]
        if kw.get("te") is False:
            words.append("--no-te")
        for k, v in (kw.get("launcher_env") or {}).items():  # (a bare --launcher-env, which takes NAME=VALUE, was refused)
            words += ["--launcher-env", sh_quote(f"{k}={v}")]
    elif verb == "plan":
        words += ["plan", *_flags(kw, tuple(k for k in kw if not isinstance(kw[k], bool))),
                  *(f"--{k.replace('_', '-')}" for k, v in kw.items() if v is True)]
    elif verb == "lint":
        words += ["lint", *_flags(kw, ("gpus", "gpu")), *_overrides(kw["overrides"])]
        if kw.get("with_launch_env"):
            words.append("# and ++env_vars.NAME=VALUE for every launch variable of Bridge's rules")
    elif verb == "lint_saved":
        words += ["lint", "run_config.yaml", "--gpu", "h100", f"# a saved run config with {json.dumps(kw['edits'])}"]
    elif verb == "diagnose":
        words = ["printf", "'%s\\n'", *(sh_quote(line) for line in kw["log"]), "|", "mbridge-overlap", "diagnose", "-"]
    elif verb == "diagnose_compare":
        words += ["diagnose", "--compare", "before.log", "after.log",
                  f"# Bridge's iteration lines, ms per iteration: before {kw['before']}, after {kw['after']}"]
    elif verb == "budget":
        words += ["budget", *_flags(kw, ("recipe", "gpus", "model")),
                  *_flags(kw.get("machine_facts") or {}, ("nvlink_domain",)), *_overrides(kw.get("overrides") or {})]
    elif verb == "diff":
        words += ["diff", "before.yaml", "after.yaml", "--gpus-before", str(kw["gpus"][0]), "--gpus-after", str(kw["gpus"][1]),
                  f"# before: {json.dumps(kw['before'])}; after: {json.dumps(kw['after'])}"]
    return " ".join(words)


def _flags(kw: dict, names) -> list[str]:
    return [w for n in names if kw.get(n) is not None for w in (f"--{n.replace('_', '-')}", sh_quote(str(kw[n])))]


def _overrides(overrides: dict) -> list[str]:
    """The words, a launch variable's with ++ (env_vars holds only the start config's names: Request.judge)."""
    return [sh_quote((ENV_PREFIX if k.startswith("env_vars.") else "")
                     + (f"{k}={fmt(v)}" if not isinstance(v, list) else f"{k}=[{','.join(map(str, v))}]"))
            for k, v in overrides.items()]
