"""json_text.dumps is json.dumps(data, indent=2, default=str), character for character: on random trees of every
type json writes (and subclasses, and objects only default=str writes), and on the JSON of every verb the command
line prints with it."""

from __future__ import annotations

import enum
import json
import random
from pathlib import Path

import pytest

from mbridge_overlap import api, findings, json_text
from mbridge_overlap.findings import Shell


class Level(enum.IntEnum):
    LOW = 1


class Ratio(float):
    pass


class Mapping(dict):
    pass


STRINGS = ["", "a", "é", "\u202e", "\x00\x1f", '"\\', "line\nbreak", "\ud800", "\U0001f600", "tab\t", "/"]
NUMBERS = [0, -1, 2**70, 1.5, -0.0, 1e300, 1e-300, float("nan"), float("inf"), float("-inf"), 0.1 + 0.2]


def tree(rng: random.Random, depth: int):
    kind = rng.randrange(12 if depth < 5 else 7)
    if kind == 0:
        return rng.choice(STRINGS) + str(rng.randrange(100))
    if kind == 1:
        return rng.choice(NUMBERS)
    if kind == 2:
        return rng.choice([None, True, False])
    if kind == 3:
        return rng.choice([Shell("x=1"), Level.LOW, Ratio(0.25)])
    if kind == 4:
        return rng.choice([Path("/a b"), {1, 2} and frozenset(), complex(1, 2)])  # default=str writes these
    if kind == 5:
        return rng.randrange(-5, 5)
    if kind == 6:
        return rng.choice(STRINGS)
    size = rng.randrange(0, 5)
    if kind in (7, 8):
        return [tree(rng, depth + 1) for _ in range(size)]
    if kind == 9:
        return tuple(tree(rng, depth + 1) for _ in range(size))
    keys = [rng.choice(STRINGS + [1, 2.5, True, False, None, Shell("k")]) for _ in range(size)]
    made = {k: tree(rng, depth + 1) for k in keys}
    return Mapping(made) if kind == 10 else made


@pytest.mark.parametrize("seed", range(300))
def test_random_trees(seed):
    data = tree(random.Random(seed), 0)
    assert json_text.dumps(data) == json.dumps(data, indent=2, default=str)


def test_a_key_json_refuses_is_refused_alike():
    with pytest.raises(TypeError):
        json.dumps({(1, 2): 1}, indent=2)
    with pytest.raises(TypeError):
        json_text.dumps({(1, 2): 1})


PAYLOADS = {
    "recipes": lambda: api.recipes().to_dict(),
    "resolve": lambda: api.resolve({"model.tensor_model_parallel_size": 4, "comm_overlap.tp_comm_overlap": True}, gpus=64).to_dict(),
    "resolve recipe": lambda: api.resolve({}, recipe="llama3_70b_pretrain_64gpu_h100_bf16_config").to_dict(),
    "plan": lambda: api.plan(tp=4, pp=4, vpp=2, gpus=64, gpu="h100").to_dict(),
    "presets": lambda: api.presets(),
    "releases": lambda: api.release_table(),
    "explain": lambda: [api.explain(i) for i in sorted(findings.registry())],
}


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_every_verbs_json(name):
    data = PAYLOADS[name]()
    assert json_text.dumps(data) == json.dumps(data, indent=2, default=str)
