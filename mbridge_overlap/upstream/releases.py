"""Per-release facts about Megatron-Bridge, loaded from mbridge_overlap/data/releases.yaml."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from ..errors import UsageError
from dataclasses import dataclass
from ..safeio import shown

DATA_DIR = Path(__file__).resolve().parent.parent / "data"

# Patterns compiled on first use (re caches them): a cold start that needs neither does not pay for them.
_PRESET_NAME = (
    r"^userbuffers_(?P<precision>bf16|fp8)_(?P<gpu>[a-z0-9]+)_h(?P<hidden_size>\d+)_tp(?P<tp>\d+)"
    r"(?:_cp(?P<cp>\d+))?_mbs(?P<micro_batch_size>\d+)_seqlen(?P<seq_length>\d+)(?P<lora>_lora)?\Z"
)


COMPILED_DIR = DATA_DIR / "compiled"
COMPILED_BY = "tools/gen_compiled_data.py"


def load_yaml(path: Path):
    """A packaged data file (a user's file never comes here: safeio reads those, with its bounds): its compiled twin
    under data/compiled/ when that was compiled from these very bytes, else the YAML itself. The twin is JSON of the
    same values (written by tools/gen_compiled_data.py; a test holds it to the YAML), which loads in about a
    millisecond where the YAML takes tens."""
    try:
        with open(path, "rb") as fh:
            source = fh.read()
        with open(compiled_path(path), "rb") as fh:
            head, _, body = fh.read().partition(b"\n")
    except (OSError, ValueError):  # no twin (or not a packaged file)
        return _parse_yaml(path)
    import json

    if json.loads(head) != _compiled_head(path, source):  # the YAML changed since: it is the truth
        return _parse_yaml(path)
    return json.loads(body)


def _parse_yaml(path: Path):
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=loader)


def compiled_path(path: Path) -> Path:
    """data/compiled/<the file's path under data/>.json (ValueError for a file outside data/)."""
    return COMPILED_DIR / (Path(path).resolve().relative_to(DATA_DIR.resolve()).as_posix() + ".json")


def _compiled_head(path: Path, source: bytes) -> dict:
    import zlib

    return {"generated_by": COMPILED_BY, "source": Path(path).resolve().relative_to(DATA_DIR.resolve()).as_posix(),
            "source_bytes": len(source), "source_crc32": zlib.crc32(source)}


def compile_yaml(path: Path) -> str:
    """The compiled twin of a packaged YAML file: a header line naming the source and its bytes, then the values as
    one line of JSON. Refuses values JSON would not give back the same (keys that are not strings, dates, NaN, ...)."""
    import json

    source = Path(path).read_bytes()
    value = _parse_yaml(path)
    _plain_json(value, Path(path).name)
    body = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if json.loads(body) != value:
        raise ValueError(f"{Path(path).name}: its values do not survive JSON")
    return json.dumps(_compiled_head(path, source)) + "\n" + body + "\n"


def write_compiled(path: Path) -> Path | None:
    """Write the compiled twin of a packaged YAML file (the generators call it after writing theirs): its path,
    or None when it was already up to date."""
    target, text = compiled_path(path), compile_yaml(path)
    if target.is_file() and target.read_text(encoding="utf-8") == text:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def _plain_json(value, where: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            _plain_json(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _plain_json(v, f"{where}[{i}]")
    elif not (value is None or isinstance(value, (str, bool, int)) or isinstance(value, float) and value == value
              and abs(value) != float("inf")):
        raise ValueError(f"{where}: {type(value).__name__} {value!r} has no JSON form")


@lru_cache(maxsize=None)
def data() -> dict:
    return load_yaml(DATA_DIR / "releases.yaml")


@lru_cache(maxsize=None)
def budget_models() -> dict:
    """data/budget_models.yaml: the published shapes of known models, and the recipe families that build MLA."""
    return load_yaml(DATA_DIR / "budget_models.yaml")


@lru_cache(maxsize=None)
def preset_content() -> dict:
    """Each userbuffers preset's fields (dataclasses.asdict), generated from Bridge by tools/gen_bridge_data.py."""
    return load_yaml(DATA_DIR / "tp_overlap_presets.yaml")


@lru_cache(maxsize=None)
def bridge_fields(version: str | None = None) -> dict:
    """Field names of each ConfigContainer section in a release (data/releases/VERSION/bridge_fields.yaml, generated
    from its installed package; a release without one uses its `data_of` release's)."""
    release = get(version)
    path = DATA_DIR / "releases" / release.data_version / "bridge_fields.yaml"
    return {k: frozenset(v or ()) for k, v in load_yaml(path)["sections"].items()}


def finetuning_dataset(version: str | None, target) -> bool | None:
    """Whether a dataset config class (a saved run config's dataset._target_) is one ConfigContainer.validate() takes
    as fine-tuning in a release (its CP check's isinstance: bridge_fields.yaml finetuning_datasets, read from
    validate()'s source with their subclasses by tools/gen_bridge_data.py), by its full path only (fuzzW W2-8:
    evil.GPTSFTDatasetConfig is no subclass); None without a class name, or for a class the release does not define
    (a project's own, which may subclass either: the caller says what it assumed)."""
    if not isinstance(target, str) or not target.strip():
        return None
    names = _bridge_data(get(version).data_version).get("finetuning_datasets") or ()
    if target.strip() in names:
        return True
    classes = _bridge_data(get(version).data_version).get("dataset_classes")
    if classes is None:  # (a release file from before dataset_classes: the baseline's class only)
        return False if target.strip() == "megatron.bridge.training.config.GPTDatasetConfig" else None
    return False if target.strip() in classes else None


# The dataset._target_ of a config read from a log's configuration summary, which does not name the dataset class:
# any dataset class's field is taken (dataset_class), and the class is neither said fine-tuning nor reported unknown
UNNAMED_DATASET = "<the dataset class, which the log's configuration summary does not name>"


def finetuning_dataset_names(version: str | None) -> list[str]:
    """The dataset config classes validate() takes as fine-tuning in a release (bridge_fields.yaml finetuning_datasets)."""
    return list(_bridge_data(get(version).data_version).get("finetuning_datasets") or ())


@lru_cache(maxsize=None)
def _bridge_data(data_version: str) -> dict:
    return load_yaml(DATA_DIR / "releases" / data_version / "bridge_fields.yaml")


def dataset_properties(version: str | None, name: str) -> frozenset:
    """A dataset class's properties with a setter (bridge_fields.yaml dataset_class_properties): what a config file may
    set on it beside its fields."""
    return frozenset((_bridge_data(get(version).data_version).get("dataset_class_properties") or {}).get(name) or ())


def dataset_class(version: str | None, entry: dict | None = None, target=None) -> tuple[str, frozenset | None]:
    """(the dataset config class, by module path and name, its field names) of a request in a release, as Bridge
    builds it (bridge_fields.yaml dataset_classes, dataset_recipes, baseline_dataset: generated from the installed
    package by tools/gen_bridge_data.py, fuzzW W2-7): a config's dataset._target_ (target), else the recipe's class
    (entry), else Bridge's baseline's (GPTDatasetConfig). Fields None: the class is not one the release defines (a
    project's own), or a recipe that does not build offline, or a release file without the classes: any dataset
    class's field is taken (bridge_fields' dataset section)."""
    data = _bridge_data(get(version).data_version)
    classes, baseline = data.get("dataset_classes"), data.get("baseline_dataset")
    if isinstance(target, str) and target.strip():
        name = target.strip()
    elif entry is not None:
        refs = {r: c for c, rs in (data.get("dataset_recipes") or {}).items() for r in rs}
        ref = next((r for r in (f"{entry.get('package')}.{entry.get('name')}", entry.get("name")) if r in refs), None)
        unbuilt = set(data.get("dataset_recipes_unbuilt") or ())
        built = ref is not None or not {f"{entry.get('package')}.{entry.get('name')}", entry.get("name")} & unbuilt
        name = refs[ref] if ref is not None else (baseline if built else None)
    else:
        name = baseline
    if not classes or name is None or name not in classes:
        return name or "the recipe's dataset class", None
    return name, frozenset(classes[name])


def dataset_seq_length_key(version: str | None, entry: dict | None = None, target=None) -> str:
    """The override that sets the dataset's sequence length validate() compares with model.seq_length, for the run's
    dataset class: dataset.seq_length where the class has that field (0.6.x's GPTDatasetConfig, every fine-tuning
    class), dataset.sequence_length where seq_length is a property only, an alias of Megatron-Core's sequence_length
    (0.5.x's GPTDatasetConfig, training/config.py:409-416): Hydra's command line sets fields only, and refuses
    dataset.seq_length there (Could not override)."""
    fields = dataset_class(version, entry, target)[1]
    alias = fields is not None and "seq_length" not in fields and "sequence_length" in fields
    return "dataset.sequence_length" if alias else "dataset.seq_length"


@lru_cache(maxsize=None)
def _model_providers(data_version: str) -> tuple[dict, dict]:
    """({recipe reference: provider class}, {class: (adds, lacks)}) of data/releases/VERSION/model_providers.json."""
    import json

    path = DATA_DIR / "releases" / data_version / "model_providers.json"
    if not path.is_file():
        return {}, {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    recipes = {ref: cls for cls, refs in raw["recipes"].items() for ref in refs}
    return recipes, {cls: (frozenset(v["adds"]), frozenset(v["lacks"])) for cls, v in raw["classes"].items()}


def model_provider(version: str | None, entry: dict | None, target: str | None = None) -> tuple[str, frozenset]:
    """(provider class, its model field names) of a recipe catalog entry's model in a release, as Bridge builds it
    (data/releases/VERSION/model_providers.json, generated from the installed package: the recipe's own provider class,
    such as MLAModelProvider for DeepSeek-V3 or HybridModelProvider for Nemotron-H); Bridge's baseline GPTModelProvider
    and bridge_fields.yaml's model fields without a recipe, or for one the file does not list."""
    base = bridge_fields(version)["model"]
    recipes, classes = _model_providers(get(version).data_version)
    if entry is None:  # a saved config's model._target_ names its class (fuzzU U2-2: an MLA run config's q_lora_rank)
        cls = (target if target in classes else target.rsplit(".", 1)[-1]) if isinstance(target, str) else None
        return (cls, (base | classes[cls][0]) - classes[cls][1]) if cls in classes else ("GPTModelProvider", base)
    cls = recipes.get(f"{entry.get('package')}.{entry.get('name')}") or recipes.get(entry.get("name"))
    if cls is None or cls not in classes:
        return "GPTModelProvider", base
    adds, lacks = classes[cls]
    return cls, (base | adds) - lacks


@lru_cache(maxsize=None)
def _provider_key(data_version: str, key: str) -> dict:
    import json

    path = DATA_DIR / "releases" / data_version / "model_providers.json"
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get(key) or {}


def _decoder_rebuilt(data_version: str) -> dict:
    return _provider_key(data_version, "decoder_rebuilt")


def provider_seq_length(version: str | None, target) -> tuple[str, int] | None:
    """(provider class, its default seq_length) of the class a config's model._target_ names (module path and name, or
    the name alone where one module defines it), as data/releases/VERSION/model_providers.json seq_length records it
    from the installed package; None where the release has no such class with the field (a project's own class)."""
    if not isinstance(target, str) or not target.strip():
        return None
    found = _provider_key(get(version).data_version, "seq_length")
    name = target.strip()
    for key in (name, name.rsplit(".", 1)[-1]):
        if key in found:
            return key.rsplit(".", 1)[-1], found[key]
    return None


def mtp_unbuilt(version: str | None, entry: dict | None, target: str | None = None) -> tuple[str, dict] | None:
    """(provider class, where it builds its model) where the recipe's model (or a saved config's model._target_) is
    built by a provider whose provide() builds no MTP block whatever model.mtp_num_layers says (data/releases/VERSION/
    model_providers.json mtp_unbuilt: Qwen3VLModelProvider builds Qwen3VLModel with no mtp_block_spec), else None."""
    cls = model_provider(version, entry, target)[0]
    found = _provider_key(get(version).data_version, "mtp_unbuilt")
    for name in (target, cls):
        if isinstance(name, str) and name in found:
            return name.rsplit(".", 1)[-1], found[name]
    return None


def decoder_rebuilt(version: str | None, entry: dict | None, target: str | None = None) -> tuple[str, dict] | None:
    """(provider class, where) where the recipe's model (or a saved config's model._target_) is built by a provider
    whose model hands GPTModel.__init__ an MTP block spec and then builds its decoder again from the same config
    (data/releases/VERSION/model_providers.json decoder_rebuilt: Qwen3VLGPTModel, text_model.py), else None."""
    cls = model_provider(version, entry, target)[0]
    found = _decoder_rebuilt(get(version).data_version)
    for name in (target, cls):
        if isinstance(name, str) and name in found:
            return name.rsplit(".", 1)[-1], found[name]
    return None


@dataclass(frozen=True)
class Preset:
    """A tuned TP userbuffers config of comm_overlap.py, with what its name says it was tuned for."""

    name: str
    precision: str
    gpu: str
    hidden_size: int
    tp: int
    cp: int
    micro_batch_size: int
    seq_length: int
    lora: bool

    @classmethod
    def parse(cls, name: str) -> "Preset":
        m = re.match(_PRESET_NAME, name)
        if not m:
            raise ValueError(f"not a userbuffers preset name: {name}")
        g = m.groupdict()
        return cls(
            name=name,
            precision=g["precision"],
            gpu=g["gpu"],
            hidden_size=int(g["hidden_size"]),
            tp=int(g["tp"]),
            cp=int(g["cp"] or 1),
            micro_batch_size=int(g["micro_batch_size"]),
            seq_length=int(g["seq_length"]),
            lora=bool(g["lora"]),
        )

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Release:
    version: str
    env_vars: bool
    launch_env: str
    launch_env_where: str
    mixed_precision_recipes: tuple[str, ...]
    megatron_core: str
    transformer_engine: str  # the Transformer Engine version paired with it in our pinned venv
    expert_tp_one_with_ep: bool  # an unset expert TP size becomes 1 with EP > 1 (else Megatron-Core makes it TP)
    embedding_ranks: str  # the word-embedding group's pipeline ranks (first_last, first_tied_last_mtp: budget/embgrad.py)
    eval_dp_name: str  # how validate()'s batch-size message names the data-parallel size
    data_version: str  # whose generated data (field names) stands for this release
    rules_of: str  # the release whose rules answer for this one: itself, or for a newer release our newest
    checked: str | None  # how the resolver was proven against it; None: read from source, or not at all
    changed_rules: dict | None = None  # newer releases: {anchor: what changed}; None when nobody has looked
    transformer_engine_lock: str | None = None  # what the release's uv.lock pins, where it is not transformer_engine

    @property
    def verified(self) -> bool:
        return self.checked is not None  # _release() records `checked` only for a listed release's own rules

    def facts(self) -> dict:
        """What `releases` prints for this release: its data row and whether the resolver is proven against it."""
        row = data()["releases"].get(self.version) or data()["newer_releases"].get(self.version) or {}
        return {
            "verified": self.verified,
            "checked": self.checked,
            "rules_of": self.rules_of,
            "megatron_core": self.megatron_core,
            "transformer_engine": self.transformer_engine,
            "env_vars_field": self.env_vars,
            "launch_env_set_by": self.launch_env,
            "launch_env_where": self.launch_env_where,
            "mixed_precision_recipes": list(self.mixed_precision_recipes),
            "yanked": row.get("yanked"),
            "same_as": row.get("same_as"),
            "changed_rules": self.changed_rules,
        }

    def mixed_precision(self, name: str) -> dict:
        """The fields of a mixed-precision recipe, by the name get_mixed_precision_config() accepts."""
        key = name.replace("-", "_")
        if key not in self.mixed_precision_recipes:
            raise UsageError(
                f"mixed_precision: unknown recipe '{name}' in Megatron-Bridge {self.version}; "
                f"known: {', '.join(self.mixed_precision_recipes)}"
            )
        return dict(data()["mixed_precision"][key])

    def presets(self) -> list[Preset]:
        return list(_presets())

    def presets_for(self, gpu: str | None, precision: str | None, tp: int, cp: int, lora: bool) -> tuple:
        """The presets tuned for this GPU, precision, TP, CP and LoRA (every check of every fix proof asks)."""
        return _presets_for(gpu, precision, tp, cp, lora)

    def preset(self, name: str) -> Preset:
        names = data()["tp_overlap_presets"]
        if name not in names:
            from ..suggest import closest

            hint = closest(name, names)
            raise UsageError(
                f"comm_overlap.tp_comm_overlap_cfg: unknown preset '{name}'"
                + (f"; did you mean '{hint}'?" if hint else "; run 'mbridge-overlap presets' for the list")
            )
        return Preset.parse(name)


@lru_cache(maxsize=None)
def _presets() -> tuple:
    """Every preset, parsed once (plan asks about a dozen times)."""
    return tuple(Preset.parse(n) for n in data()["tp_overlap_presets"])


@lru_cache(maxsize=256)
def _presets_for(gpu, precision, tp, cp, lora) -> tuple:
    return tuple(p for p in _presets() if (p.gpu, p.precision, p.tp, p.cp, p.lora) == (gpu, precision, tp, cp, lora))


def versions() -> list[str]:
    return list(data()["releases"])


def default_version() -> str:
    return data()["default_release"]


_VERSION = r"(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})"


def version_key(version: str) -> tuple:
    """Sortable (major, minor, patch) of a version string; suffixes such as rc0 are ignored."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def get(version: str | None = None) -> Release:
    """A release by version. A well-formed version newer than every listed one is answered with the newest listed
    release's rules, marked unverified, with what changed where someone compared its code (newer_releases)."""
    if version is not None and not isinstance(version, str):
        raise UsageError(f"--bridge-version: expected a version such as 0.6.2, got {shown(version)}")
    return _get(default_version() if given("--bridge-version", version) is None else version)


@lru_cache(maxsize=64)
def _get(version: str) -> Release:
    releases = data()["releases"]
    if version in releases:
        return _release(version, releases[version], rules_of=version)
    known = sorted(releases, key=version_key)
    if not re.fullmatch(_VERSION, version) or version_key(version) < version_key(known[-1]):
        raise UsageError(f"--bridge-version: unknown Megatron-Bridge release {shown(version)}; supported: "
                         f"{', '.join(known)}, or a newer one (answered with {known[-1]}'s rules, unverified)")
    newer = data()["newer_releases"].get(version) or {}
    base = newer.get("rules_of") or known[-1]
    return _release(version, releases[base], rules_of=base, changed=newer.get("changed"))


def _release(version: str, r: dict, rules_of: str, changed: dict | None = None) -> Release:
    of = data()["releases"][r.get("data_of") or rules_of]
    return Release(
        version=version,
        env_vars=bool(r["env_vars"]),
        launch_env=r["launch_env"],
        launch_env_where=" ".join(r["launch_env_where"].split()),
        mixed_precision_recipes=tuple(r["mixed_precision_recipes"]),
        megatron_core=r.get("megatron_core") or of["megatron_core"],
        transformer_engine=r.get("transformer_engine") or of["transformer_engine"],
        transformer_engine_lock=r.get("transformer_engine_lock") or of.get("transformer_engine_lock"),
        expert_tp_one_with_ep=bool(r["expert_tp_one_with_ep"]),
        embedding_ranks=r["embedding_ranks"],
        eval_dp_name=r["eval_dp_name"],
        data_version=r.get("data_of") or rules_of,
        rules_of=rules_of,
        checked=r.get("checked") if rules_of == version else None,
        changed_rules=None if changed is None else {k: " ".join(v.split()) for k, v in changed.items()},
    )


# --- the one vocabulary every verb takes (data/releases.yaml) ---------------------------------------------------------


def given(flag: str, value):
    """The defaulting rule of every input: None means "not given" (the default applies); an empty text is a mistake."""
    if isinstance(value, str) and not value.strip():
        raise UsageError(f"{flag}: empty; leave it out for the default")
    return value


def gpu(name: str, flag: str = "--gpu") -> dict:
    """A GPU type's facts, by name (any case)."""
    gpus = data()["gpus"]
    key = given(flag, name).lower() if isinstance(name, str) else None
    if key not in gpus:
        raise UsageError(f"{flag}: unknown GPU type {shown(name)}; Bridge's perf launcher knows: {', '.join(gpus)}")
    return dict(gpus[key], name=key)


def gpu_types() -> list[str]:
    return list(data()["gpus"])


def precision(name: str, flag: str = "--precision") -> str:
    """The canonical precision (bf16, fp8_cs, fp8_mx, fp8_sc, nvfp4) for any of its spellings (fp8cs, fp8, ...)."""
    word = given(flag, name).strip().lower().replace("-", "_") if isinstance(name, str) else None
    for canonical, facts in data()["precisions"].items():
        if word == canonical or word in facts["spellings"]:
            return canonical
    spelled = ", ".join(f"{k} ({'/'.join(v['spellings'])})" if v["spellings"] else k for k, v in data()["precisions"].items())
    raise UsageError(f"{flag}: expected one of {spelled}, got {shown(name)}")


def precision_facts(name: str) -> dict:
    return dict(data()["precisions"][precision(name)])


def precision_spellings() -> dict:
    """Every spelling of a precision -> its canonical name."""
    return {w: k for k, v in data()["precisions"].items() for w in (k, k.replace("_", ""), *v["spellings"])}


def _choice(flag: str, value, choices: list):
    if given(flag, value) not in choices:
        raise UsageError(f"{flag}: expected one of {', '.join(choices)}, got {shown(value)}")
    return value


def task(name: str, flag: str = "--task") -> str:
    return _choice(flag, name, data()["tasks"])


def flex_backend(name: str, flag: str = "--moe-flex-backend") -> str:
    return _choice(flag, name, data()["flex_dispatcher_backends"])
