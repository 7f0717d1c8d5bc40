"""Messages led by a formatted field ({} / %s / an f-string value): the catalog records, for each, the values its code
can put there where the source says (Entry.lead_values: a literal, a conditional of literals, a literal table, a
parameter every call passes a literal for) and marks the rest open (Entry.lead_open); a closed one matches only its
values (tools/gen_messages.py lead_of; fuzzV V2-9 did it for two messages)."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from mbridge_overlap.diagnose import messages
from tools import gen_messages as G

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ("0.6.2", "0.5.1", "0.5.0")


def _rows(release: str) -> list:
    data = json.loads((ROOT / "mbridge_overlap" / "data" / "releases" / release / "messages.json").read_text())
    return data["entries"]


@pytest.mark.parametrize("release", RELEASES)
def test_every_message_led_by_a_field_is_closed_or_marked_open(release):
    led = [r for r in _rows(release) if r["template"] and r["pattern"] and r["template"].startswith("{")
           and not r["template"].startswith("{{") and not r["pattern"].startswith("(-?")]
    assert led
    for r in led:
        assert bool(r.get("lead_values")) != bool(r.get("lead_open")), r["id"]
    others = [r for r in _rows(release) if r not in led]
    assert not [r["id"] for r in others if r.get("lead_open") or r.get("lead_values")]


def _ids(line: str, cat) -> set:
    return {h.entry.id for h in cat.match(line) if h.entry.fields}


@pytest.mark.parametrize("line, value, right", [
    # Megatron-Core 0.19.2 model_parallel_config.resolve_tensor_parallel_weight_shards: shards_field is its default or
    # what ModelParallelConfig.__post_init__ passes
    ("[rank0]: ValueError: expert_tensor_parallel_num_weight_shards (6) must be divisible by expert_tensor_parallel_size "
     "(4).", "expert_tensor_parallel_num_weight_shards", True),
    ("ValueError: tensor_parallel_num_weight_shards (6) must be divisible by tensor_model_parallel_size (4).",
     "tensor_parallel_num_weight_shards", True),
    ("ValueError: my_shards (6) must be divisible by tp (4).", None, False),
    # schedules._normalize_loss_scale: its three callers' literal names
    ("ValueError: moe_grad_scale_func must return a scalar or size-1 tensor for loss scaling, but returned a tensor "
     "with 4 elements.", "moe_grad_scale_func", True),
    ("ValueError: my_hook must return a scalar or size-1 tensor for loss scaling, but returned a tensor with 4 "
     "elements.", None, False),
    # TE's general_gemm: a conditional of two literals
    ("AssertionError: GEMM+RS overlap requiresa valid `ub` communicator object.", "GEMM+RS", True),
    ("AssertionError: Anything overlap requiresa valid `ub` communicator object.", None, False),
])
def test_a_closed_lead_takes_only_its_values(line, value, right):
    cat = messages.load("0.6.2")
    hits = [h for h in cat.match(line) if h.entry.fields]
    if not right:  # (each was its message before: any word led it)
        assert not hits, [h.entry.id for h in hits]
        return
    assert hits and all(h.groups[0] == value for h in hits), [(h.entry.id, h.groups) for h in hits]


def test_an_open_lead_still_takes_any_word():
    """TE's f'{type(self).__name__} class does not implement ...': a subclass's name, which no source lists."""
    cat = messages.load("0.6.2")
    (hit,) = [h for h in cat.match("NotImplementedError: MyLinear class does not implement _get_weight_tensors function")
              if h.entry.fields]
    assert hit.entry.lead_open and not hit.entry.lead_values and hit.groups[0] == "MyLinear"


SOURCE = '''
def check(size, name="first_size", other=None):
    if size < 0:
        raise ValueError(f"{name} must be positive")
    if size > 9:
        raise ValueError(f"{other} is too big")

def user():
    check(1)
    check(2, "second_size")
    check(3, name="third_size" if flag else "fourth_size", other=something)

def passed_on(fn=None):
    raise ValueError(f"{fn} failed")

register(passed_on)
passed_on("x")

def method_owner():
    class C:
        def m(self, label):
            raise ValueError(f"{label} is wrong")
    C().m("only_label")
'''


def _scan(tmp_path, source: str) -> dict:
    pkg = tmp_path / "megatron" / "core"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text(textwrap.dedent(source))
    G.CALLS = G.Calls(tmp_path)
    tree = ast.parse((pkg / "x.py").read_text())
    sc = G.Scanner("megatron/core/x.py", (pkg / "x.py").read_text())
    sc.visit(tree)
    return {s["tokens"][-1][1].strip(): (s.get("lead_values"), s.get("lead_open")) for s in sc.sites}


def test_the_generator_reads_a_parameter_from_every_call(tmp_path):
    """A parameter: its default where a call leaves it out, the literals calls pass by position or keyword (past
    self where a method is called on an object); open where a call passes anything else, or where the function's
    name is used otherwise than called (passed on: who calls it is not seen)."""
    got = _scan(tmp_path, SOURCE)
    assert got["must be positive"] == (["first_size", "fourth_size", "second_size", "third_size"], False)
    assert got["is too big"] == (None, True)  # a call passes a variable
    assert got["failed"] == (None, True)  # register(passed_on)
    assert got["is wrong"] == (["only_label"], False)
    G.WHOLE_PACKAGES = False  # gen_variant_messages: only the SCAN files are seen, so no parameter is closed
    try:
        assert _scan(tmp_path / "v", SOURCE)["must be positive"] == (None, True)
    finally:
        G.WHOLE_PACKAGES = True
