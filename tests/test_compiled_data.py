"""The fast forms of the package's data are the data: the JSON twins of the YAML files (data/compiled/, by
tools/gen_compiled_data.py) give back the YAML's values, regenerating them gives the same bytes, and a twin that
does not match its YAML's bytes is never read."""

import json
import shutil

import pytest

from conftest import generated
from mbridge_overlap.upstream import releases

SOURCES = sorted(p for p in releases.DATA_DIR.rglob("*.yaml") if releases.COMPILED_DIR not in p.parents)


def test_the_twins_are_what_the_generator_writes():
    ok, said = generated()["gen_compiled_data.py"]  # tools/gen_all.py --check, run once for the tier
    assert ok and "compiled data matches" in said, said


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(releases.DATA_DIR)))
def test_a_twin_gives_back_the_yaml_values(source):
    twin = releases.compiled_path(source)
    head, body = twin.read_text(encoding="utf-8").split("\n", 1)
    assert json.loads(head)["source"] == source.relative_to(releases.DATA_DIR).as_posix()
    assert json.loads(body) == releases._parse_yaml(source)
    assert releases.load_yaml(source) == releases._parse_yaml(source)


def _copy_of_data(tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(releases.DATA_DIR, data, ignore=shutil.ignore_patterns("recipes.json", "messages.json"))
    monkeypatch.setattr(releases, "DATA_DIR", data)
    monkeypatch.setattr(releases, "COMPILED_DIR", data / "compiled")
    return data


def test_a_stale_twin_is_never_read(tmp_path, monkeypatch):
    data = _copy_of_data(tmp_path, monkeypatch)
    source = data / "suites.yaml"
    assert releases.load_yaml(source) == releases._parse_yaml(source)
    twin = releases.compiled_path(source)
    head, body = twin.read_text(encoding="utf-8").split("\n", 1)
    twin.write_text(head + "\n" + json.dumps({"not": "the data"}) + "\n", encoding="utf-8")
    assert releases.load_yaml(source) == {"not": "the data"}  # the header still matches the YAML: the twin is read
    source.write_text(source.read_text(encoding="utf-8") + "\n# an edit after compiling\n", encoding="utf-8")
    assert releases.load_yaml(source) == releases._parse_yaml(source)  # edited since: the YAML answers
    twin.unlink()
    assert releases.load_yaml(source) == releases._parse_yaml(source)  # no twin: the YAML answers


def test_values_without_a_json_form_are_refused(tmp_path, monkeypatch):
    data = _copy_of_data(tmp_path, monkeypatch)
    for text, why in (("1: one\n", "not a string"), ("when: 2024-01-01\n", "no JSON form"), ("x: .nan\n", "no JSON form")):
        (data / "odd.yaml").write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=why):
            releases.compile_yaml(data / "odd.yaml")


def test_a_file_outside_the_data_folder_is_read_as_yaml(tmp_path):
    path = tmp_path / "releases.yaml"
    path.write_text("a: 1\n", encoding="utf-8")
    assert releases.load_yaml(path) == {"a": 1}
