"""Snippets from the Jinja templates in templates/: every value is typed and formatted here, never raw text."""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path

from ..run import launch_env
from .. import safeio
from ..errors import UsageError

FORMATS = {
    "python": "python.py.j2",
    "yaml": "yaml.yaml.j2",
    "hydra": "hydra.txt.j2",
    "env": "env.sh.j2",
    "env_vars": "env_vars.py.j2",
    "nemo_run": "nemo_run.py.j2",
}
COMM_OVERLAP_MODULE = "megatron.bridge.training.comm_overlap"
MIXED_PRECISION_MODULE = "megatron.bridge.training.mixed_precision"
_PRESET = re.compile(r"^userbuffers_[a-z0-9_]+\Z")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def template_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "templates"


@lru_cache(maxsize=None)
def _env():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["comment"] = safeio.comment  # every value printed inside a template comment goes through it
    return env


def render(template: str, **context) -> str:
    return _env().get_template(template).render(**context)


def py_value(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):  # (recheck58 AE4: `= inf` is a NameError)
        return f'float("{value}")'
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value) if value.isascii() else ascii(value)  # ascii() keeps astral characters whole
    if isinstance(value, list):  # (recheck57 AD1: a list override stopped the Python snippet)
        return "[" + ", ".join(py_value(v) for v in value) + "]"
    raise TypeError(f"cannot render {type(value).__name__}")


def yaml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):  # (YAML's own: a bare inf is text to YAML)
        return {"inf": ".inf", "-inf": "-.inf"}.get(str(value), ".nan")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    # (Bridge loads the file through OmegaConf, which resolves a ${ in it)
    return safeio.yaml_quote(safeio.omegaconf_literal(value)) if isinstance(value, str) else json.dumps(value)


def _identifier(name: str) -> str:
    if not _IDENT.match(name):
        raise UsageError(f"cannot render '{name}' as a Python or YAML name")
    return name


def _preset_ref(name: str) -> str:
    if not _PRESET.match(name):
        raise UsageError(f"not a preset name: {name}")
    return name


def _split(key: str) -> tuple[str, str]:
    section, _, name = key.partition(".")
    return _identifier(section), _identifier(name) if name else ""


def python_snippet(overrides: dict, purpose: str, release: str, tp_comm_overlap: bool | None = None) -> str:
    """Assignments on `cfg`; a comm_overlap section is created where the recipe has none, with the TP overlap the plan
    resolves to (tp_comm_overlap; by default what the overrides set, else off)."""
    imports, lines = set(), []
    comm = {k.partition(".")[2]: v for k, v in overrides.items() if k.startswith("comm_overlap.")}
    for key, value in overrides.items():
        section, name = _split(key)
        if section == "comm_overlap":
            continue
        if key == "mixed_precision":
            if value is None:
                lines.append(("mixed_precision", "None"))
            else:
                imports.add(f"from {MIXED_PRECISION_MODULE} import {_identifier(value)}")
                lines.append(("mixed_precision", f"{_identifier(value)}()"))
        elif section == "mixed_precision":
            raise UsageError(f"{key}: the snippet sets recipes by name only; set fields on the recipe in your code")
        elif section == "env_vars":  # a dict, not attributes (evalW W2-4)
            lines.append((f"env_vars[{json.dumps(name)}]", py_value(value)))
        else:
            lines.append((f"{section}.{name}", py_value(value)))
    if comm:
        imports.add(f"from {COMM_OVERLAP_MODULE} import CommOverlapConfig")
        tp_on = comm.get("tp_comm_overlap", tp_comm_overlap if tp_comm_overlap is not None else False)
        lines.append(("comm_overlap", py_value(bool(tp_on))))
        for name, value in comm.items():
            if name == "tp_comm_overlap_cfg" and value is not None:
                imports.add(f"from {COMM_OVERLAP_MODULE} import {_preset_ref(value)}")
                lines.append((f"comm_overlap.{name}", _preset_ref(value)))
            else:
                lines.append((f"comm_overlap.{_identifier(name)}", py_value(value)))
    return render(FORMATS["python"], purpose=purpose, release=release, imports=sorted(imports), assignments=lines)


# comm_overlap.py's sub-config class for each userbuffers method a preset uses.
_UB_CLASSES = {"bulk": "BulkOverlapCfg", "ring_exchange": "RingExchangeOverlapCfg", "pipeline": "PipelineOverlapCfg"}


def preset_items(name: str) -> list:
    """A preset as nested (key, YAML scalar) items, every level with its _target_, from the shipped preset data.

    Spelled out in full because OmegaConf merges a `{_target_: preset, _call_: false}` reference into a preset the
    recipe already has, and Bridge then keeps the old one (apply_overrides cannot instantiate the mix)."""
    from ..upstream.releases import preset_content

    content = preset_content()[_preset_ref(name)]
    items = [("_target_", yaml_value(f"{COMM_OVERLAP_MODULE}.TransformerLayerTPOverlapCfg"))]
    for gemm, cfg in content.items():
        if cfg is None:
            items.append((_identifier(gemm), "null"))
            continue
        sub = [("_target_", yaml_value(f"{COMM_OVERLAP_MODULE}.{_UB_CLASSES[cfg['method']]}"))]
        sub += [(_identifier(k), yaml_value(v)) for k, v in cfg.items()]  # (a list: fp8_buf=(False,))
        items.append((_identifier(gemm), sub))
    return items


def yaml_sections(overrides: dict) -> list:
    sections: dict = {}
    for key, value in overrides.items():
        section, name = _split(key)
        if not name:
            sections[section] = yaml_value(value)
            continue
        if section == "mixed_precision":
            raise UsageError(f"{key}: YAML and Hydra overrides can only name a mixed-precision recipe; use --format python")
        items = sections.setdefault(section, [])
        if section == "comm_overlap" and not items:
            items.append(("_target_", yaml_value(f"{COMM_OVERLAP_MODULE}.CommOverlapConfig")))
        if name == "tp_comm_overlap_cfg" and value is not None:
            items.append((name, preset_items(value)))
        else:
            items.append((name, yaml_value(value)))
    return list(sections.items())


def yaml_snippet(overrides: dict, purpose: str, release: str) -> str:
    spelled = isinstance(overrides.get("comm_overlap.tp_comm_overlap_cfg"), str)
    return render(FORMATS["yaml"], purpose=purpose, release=release, sections=yaml_sections(overrides), spelled_preset=spelled)


def hydra_overrides(overrides: dict) -> list[str]:
    """Hydra-style overrides. comm_overlap goes in with '++' (added where the recipe has none, merged where it
    has one); a preset is set by nulling the node first, so the reference replaces rather than merges."""
    out, comm = [], {}
    for key, value in overrides.items():
        section, name = _split(key)
        if section == "comm_overlap":
            comm[name] = value
        elif not name:
            out.append(f"{section}={_hydra_value(value)}")
        elif section == "mixed_precision":
            raise UsageError(f"{key}: YAML and Hydra overrides can only name a mixed-precision recipe; use --format python")
        else:  # a launch variable with ++: struct mode refuses env_vars.NAME for a name the config lacks (evalW W2-1)
            out.append(f"{safeio.ENV_PREFIX if section == 'env_vars' else ''}{section}.{name}={_hydra_value(value)}")
    if comm:
        # One assignment per key: a preset is written out in full (every GEMM, null for the ones it leaves alone), so
        # merged into a preset the recipe already has it leaves nothing of the old one.
        fields = [("_target_", yaml_value(f"{COMM_OVERLAP_MODULE}.CommOverlapConfig"))]
        for name, value in comm.items():
            fields.append((_identifier(name), preset_items(value) if name == "tp_comm_overlap_cfg" and value is not None
                           else yaml_value(value)))
        out.append(f"++comm_overlap={_hydra_dict(fields)}")
    return out


def _hydra_dict(items) -> str:
    parts = []
    for key, value in items:
        parts.append(f"{key}:{_hydra_dict(value) if isinstance(value, list) else _hydra_scalar(value)}")
    return "{" + ",".join(parts) + "}"


def _hydra_scalar(text: str) -> str:
    """A YAML scalar as a Hydra value: a string as the text Hydra reads back (a plain name bare; 'true', '10' or a
    blank quoted: fuzzT T3-1), anything else as YAML writes it."""
    return safeio.hydra_quote(safeio.parse_yaml(text, "a Hydra value")) if text.startswith('"') else text


def _hydra_value(value) -> str:
    """An override's value as a Hydra word: a list [a,b] with each item so, without blanks (one shell word once
    quoted; JSON's escapes are no Hydra's: fuzzT T3-3, T3-7)."""
    if isinstance(value, list):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # (Hydra's inf, -inf, nan)
    return safeio.hydra_quote(value) if isinstance(value, str) else yaml_value(value)


def hydra_snippet(overrides: dict, purpose: str, release: str) -> str:
    return render(FORMATS["hydra"], purpose=purpose, release=release, overrides=hydra_overrides(overrides))


def env_snippet(env: dict, why: dict, purpose: str, release: str) -> str:
    variables = [(_identifier(n), safeio.sh_quote(str(v)), why.get(n, "")) for n, v in env.items()]
    return render(FORMATS["env"], purpose=purpose, release=release, variables=variables)


def env_vars_snippet(env: dict, why: dict, purpose: str, release: str) -> str:
    variables = [(json.dumps(_identifier(n)), py_value(launch_env.env_value(v)), why.get(n, "")) for n, v in env.items()]
    return render(FORMATS["env_vars"], purpose=purpose, release=release, variables=variables)


def nemo_run_snippet(plugin_args: dict, env: dict, why: dict, purpose: str, release: str, refused: str | None = None) -> str:
    arguments = [(_identifier(k), py_value(v)) for k, v in plugin_args.items()]
    variables = [(json.dumps(_identifier(n)), json.dumps(str(v)), why.get(n, "")) for n, v in env.items()]
    return render(FORMATS["nemo_run"], purpose=purpose, release=release, arguments=arguments, variables=variables,
                  refused=refused)


def snippet(fmt: str, *, overrides: dict, env: dict, env_why: dict, purpose: str, release: str, env_vars_field: bool,
            plugin_args: dict | None = None, plugin_refused: str | None = None, tp_comm_overlap: bool | None = None) -> str:
    if fmt == "python":
        return python_snippet(overrides, purpose, release, tp_comm_overlap)
    if fmt == "yaml":
        return yaml_snippet(overrides, purpose, release)
    if fmt == "hydra":
        return hydra_snippet(overrides, purpose, release)
    if fmt == "env":
        return env_snippet(env, env_why, f"Launch environment: {purpose}", release)
    if fmt == "env_vars":
        if not env_vars_field:
            raise UsageError(f"--format env_vars: ConfigContainer has no env_vars in Megatron-Bridge {release}; use --format env")
        return env_vars_snippet(env, env_why, f"Launch environment in cfg.env_vars: {purpose}", release)
    if fmt == "nemo_run":
        if plugin_args is None:
            raise UsageError(f"--format nemo_run: Megatron-Bridge {release} has no PerfEnvPlugin (it was removed in 0.6); "
                             "use --format env_vars or env")
        return nemo_run_snippet(plugin_args, env, env_why, f"Launch environment through nemo-run: {purpose}", release,
                                plugin_refused)
    raise UsageError(f"--format: unknown snippet format '{fmt}'")


def of_plan(fmt: str, plan) -> str:
    """The snippet of a plan (verbs.plan.Plan) in one of FORMATS."""
    d = plan.to_dict()
    lay = d["layout"]
    start = f" on {lay['recipe']}" if lay["recipe"] else ""
    purpose = f"Comm overlap for TP={lay['tp']} PP={lay['pp']} VPP={lay['vpp']} CP={lay['cp']} on {lay['gpus']} {lay['gpu']} GPUs{start}"
    if d.get("preset"):  # a preset is tuned for one sequence length and micro-batch size, which the snippet does not set
        # the preset's own sizes, from its name (evalX X2-4: the run's were said to be the preset's)
        m = re.search(r"_mbs(\d+)_seqlen(\d+)", d["preset"])
        batch = f"seq_length {m[2]} and micro_batch_size {m[1]}" if m else "the batch its name gives"
        purpose += f"; the preset {d['preset']} is tuned for {batch}"
    release = plan.analysis.scenario.release
    if fmt in ("env", "nemo_run") and (note := launch_env.executor_note(release)):  # (evalX X2-6: 0.5's executor)
        purpose += f". Note: {note}"
    env, why = _launch_env(d)
    return snippet(fmt, overrides=d["overrides"], env=env, env_why=why, purpose=purpose, release=release.version,
                   env_vars_field=release.env_vars, plugin_args=plan.perf_env_plugin_args(),
                   plugin_refused=plan.perf_env_plugin_refused(),
                   tp_comm_overlap=bool(d["effective"]["model"]["tp_comm_overlap"]))


def _launch_env(d: dict) -> tuple[dict, dict]:
    """The launch environment a plan's env snippets export: its launcher rules', with the plan's own env_vars overrides
    (the user's among them) in their place, as the Hydra and Python snippets set them: an export wins over cfg.env_vars
    (Bridge's setdefault), so the rule's value pasted beside them undid the user's (fuzzT T3-4)."""
    env = {name: rule["value"] for name, rule in d["launch_env"].items()}
    why = {name: rule["why"] for name, rule in d["launch_env"].items()}
    for key, value in d["overrides"].items():
        if key.startswith("env_vars."):
            name = key.partition(".")[2]
            env.pop(name, None)
            if value is not None:
                env[name], why[name] = value, f"asked for ({key})"
    return env, why
