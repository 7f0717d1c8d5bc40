"""The recipe catalog's index (data/releases/VERSION/recipes.index.json, written with the catalog by
tools/gen_recipe_catalog.py) is what the generator makes of the committed catalog, and every answer read through
it (a recipe by name, the recipes of a layout, the families, a filtered listing) is the one the whole catalog gives;
an index that does not fit its catalog is never used."""

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from conftest import generated
from mbridge_overlap import UsageError, api, cli
from mbridge_overlap.upstream import catalog
from mbridge_overlap.verbs import recipes as catalog_view

VERSIONS = catalog.versions()


def test_the_indexes_are_what_the_generator_writes():
    ok, said = generated()["gen_recipe_catalog.py"]  # tools/gen_all.py --check, run once for the tier
    assert ok and "indexes match their catalogs" in said, said


@pytest.mark.parametrize("version", VERSIONS)
def test_each_row_reads_its_own_entry(version):
    every, rows = catalog.entries(version), catalog.index(version)
    assert len(rows) == len(every)
    assert catalog.entries_where(version, lambda r: True) == every
    for row, e in zip(rows, every):
        assert (row.name, row.package, row.model, row.task, row.gpus, row.gpu, row.precision, row.variant) == (
            e["name"], e["package"], e.get("model"), e.get("task"), e.get("gpus"), e.get("gpu"), e.get("precision"), e.get("variant"))


@pytest.mark.parametrize("version", VERSIONS)
def test_lookup_by_name_is_the_catalogs(version):
    every = catalog.entries(version)
    counts = Counter(e["name"] for e in every)
    for e in every:
        assert catalog.lookup(f"{e['package']}.{e['name']}", version) == e
        assert catalog.lookup(f"megatron.bridge.{e['package']}.x.{e['name']}", version) == e
        if counts[e["name"]] == 1:
            assert catalog.lookup(e["name"], version) == e
        else:
            with pytest.raises(UsageError, match="defined in both recipe packages"):
                catalog.lookup(e["name"], version)
    with pytest.raises(UsageError, match="no recipe named"):
        catalog.lookup("llama3_70b_pretrain_64gpu_h100_bf61_config", version)


def _same_layout_of_the_whole_catalog(version, shape, gpu, precision, moe):
    out = []
    for e in catalog.entries(version):
        if e["package"] != "perf_recipes" or not e["builds"] or e["bridge"]["error"] is not None or e["bridge"].get("setup_error"):
            continue
        m = e["request"]["model"]
        layout_of = (m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"], m["virtual_pipeline_model_parallel_size"],
                     m["context_parallel_size"], e["gpus"], e["gpu"], e["precision"], m.get("expert_model_parallel_size", 1) > 1)
        if layout_of == (shape.tp, shape.pp, shape.vpp, shape.cp, shape.gpus, gpu, precision, moe):
            out.append(e)
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_the_recipes_of_a_layout_are_the_catalogs(version):
    layouts = {tuple(r.layout) for r in catalog.index(version) if r.layout is not None}
    assert layouts or not any(r.package == "perf_recipes" for r in catalog.index(version))  # 0.5.x ships no perf recipes
    for tp, pp, vpp, cp, gpus, gpu, precision, moe in sorted(layouts, key=repr) + [(3, 1, None, 1, 3, "h100", "bf16", False)]:
        for moe_asked in (moe, not moe):
            shape = SimpleNamespace(tp=tp, pp=pp, vpp=vpp, cp=cp, gpus=gpus)
            want = _same_layout_of_the_whole_catalog(version, shape, gpu, precision, moe_asked)
            assert catalog.same_layout(version, shape, gpu, precision, moe_asked) == want


@pytest.mark.parametrize("version", VERSIONS)
def test_families_are_the_catalogs(version):
    assert catalog.families(version) == sorted({e["model"] for e in catalog.entries(version) if e.get("model")})


FILTERS = [{}, {"model": "llama3"}, {"gpu": "h100", "gpus": 64}, {"precision": "fp8cs", "package": "perf_recipes"},
           {"task": "sft", "name": "8b"}, {"name": "no_such_recipe"}]


@pytest.mark.parametrize("filters", FILTERS)
def test_a_listing_is_the_whole_catalogs(filters):
    listing = catalog_view.list_recipes(**filters).to_dict()
    every = catalog.entries(listing["bridge_version"])
    f = listing["filters"]
    twice = {n for n, c in Counter(e["name"] for e in every).items() if c > 1}
    want = [e for e in every if ("model" not in f or f["model"] in (e.get("model") or ""))
            and all(e.get(k) == f[k] for k in ("gpu", "gpus", "task", "precision", "package") if k in f)
            and ("name" not in f or f["name"] in e["name"])]
    assert [(r["name"], r["package"], r["reference"]) for r in listing["recipes"]] == [
        (e["name"], e["package"], f"{e['package']}.{e['name']}" if e["name"] in twice else e["name"]) for e in want]
    assert listing["recipes"] == [{**catalog_view.row(e, "0.6.2"), "reference": r["reference"]} for e, r in zip(want, listing["recipes"])]


def test_the_cli_writes_a_listing_as_the_api_gives_it(capsys):
    assert cli.main(["recipes", "--format", "json", "--gpu", "b200"]) == 0
    assert capsys.readouterr().out == json.dumps(api.recipes(gpu="b200").to_dict(), indent=2) + "\n"


@pytest.fixture
def fresh_index(monkeypatch, tmp_path):
    """An index path of our own for 0.6.2, and no cached rows or entries."""
    real = catalog.index_path
    monkeypatch.setattr(catalog, "index_path", lambda v: tmp_path / "recipes.index.json" if v == "0.6.2" else real(v))
    monkeypatch.setattr(catalog, "_READ", {})
    catalog.index.cache_clear()
    yield tmp_path / "recipes.index.json", json.loads(real("0.6.2").read_text(encoding="utf-8"))
    catalog.index.cache_clear()


@pytest.mark.parametrize("broken", ["missing", "other size", "other fields", "not json", "not a table"])
def test_an_index_that_does_not_fit_its_catalog_is_not_used(fresh_index, broken):
    path, table = fresh_index
    if broken == "other size":
        table["catalog_bytes"] += 1
    if broken == "other fields":
        table["fields"] = table["fields"][::-1]
    if broken != "missing":
        path.write_text({"not json": "{", "not a table": "[1]"}.get(broken) or json.dumps(table), encoding="utf-8")
    assert [list(r) for r in catalog.index("0.6.2")] == table["recipes"]  # rebuilt from the catalog itself
    name = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    assert catalog.lookup(name, "0.6.2") == next(e for e in catalog.entries("0.6.2") if e["name"] == name)


def test_an_index_whose_lines_are_not_the_catalogs_is_refused(fresh_index):
    path, table = fresh_index
    table["recipes"][0], table["recipes"][1] = table["recipes"][1][:9] + table["recipes"][0][9:], table["recipes"][0][:9] + table["recipes"][1][9:]
    path.write_text(json.dumps(table), encoding="utf-8")
    with pytest.raises(RuntimeError, match="does not fit"):
        catalog.lookup(table["recipes"][0][0], "0.6.2")


def test_a_release_without_a_catalog_is_named():
    with pytest.raises(UsageError, match="has no recipe catalog here"):
        catalog.index("0.0.1")


@pytest.mark.parametrize("broken", ["missing", "other size", "fewer rows", "not json"])
def test_a_listing_that_does_not_fit_its_catalog_is_not_used(monkeypatch, tmp_path, broken):
    """recipes.listing.json (the rows of a whole listing, so that it decodes one small file instead of every entry) is
    used only where it fits its catalog; else the rows are built from the entries, alike."""
    real = catalog_view.listing_path("0.6.2")
    table = json.loads(real.read_text(encoding="utf-8"))
    assert catalog_view._committed("0.6.2") is not None  # the committed one fits
    if broken == "other size":
        table["catalog_bytes"] += 1
    if broken == "fewer rows":
        table["rows"].pop()
    path = tmp_path / "recipes.listing.json"
    if broken != "missing":
        path.write_text("{" if broken == "not json" else json.dumps(table), encoding="utf-8")
    monkeypatch.setattr(catalog_view, "listing_path", lambda v: path)
    monkeypatch.setattr(catalog_view, "_LISTED", {})
    catalog_view._committed.cache_clear()
    try:
        assert catalog_view._committed("0.6.2") is None
        rows = catalog_view.list_recipes().to_dict()["recipes"]
        assert len(rows) > catalog_view.FROM_LISTING
        assert rows == [{**catalog_view.row(e, "0.6.2"), "reference": r["reference"]} for e, r in zip(catalog.entries("0.6.2"), rows)]
    finally:
        catalog_view._committed.cache_clear()


def test_a_recipe_of_another_release_is_named_as_such():
    """evalS V6: a 0.6 perf recipe asked for under 0.5.1 was answered with the closest 0.5.1 library names (another
    layout); it is said to be another release's, with the two ways on."""
    import pytest

    from mbridge_overlap import UsageError, api

    with pytest.raises(UsageError, match=r"is a recipe of Megatron-Bridge .*0\.6\.2, not of 0\.5\.1.*scripts/performance"):
        api.resolve(recipe="qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config", bridge_version="0.5.1")
    with pytest.raises(UsageError, match="no recipe named"):
        api.resolve(recipe="qwen3_30b_a3b_pretrain_config_nope", bridge_version="0.5.1")
