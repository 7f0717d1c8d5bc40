"""A traceback ending in AttributeError on None where the failing line calls .size() or .rank() on a process group
(fix21 C: Megatron-LM #1773's converter never built the expert tensor-parallel group) reads as Megatron-Core's "...
parallel group is not initialized" asserts do: OVERLAP_PATH_ERROR, not overlap-related, naming the group as the code
does. A None that is no process group (a bucket group's method) stays an overlap-path traceback."""

import pytest

from tests.conftest import diagnose_causes


def traceback(path, function, code, attr):
    return (f'Traceback (most recent call last):\n  File "{path}", line 88, in {function}\n    {code}\n'
            f"AttributeError: 'NoneType' object has no attribute '{attr}'\n")


@pytest.mark.parametrize("code,attr,group", [
    ("self.ep_size = self.ep_group.size()", "size", "self.ep_group"),
    ("self.tp_rank = self.tp_group.rank()", "rank", "self.tp_group"),
    ("world = pg_collection.expt_dp.size() if pg_collection.expt_dp_pg.size() else 1", "size", "pg_collection.expt_dp_pg"),
    ("rank = parallel_state.get_expert_tensor_parallel_group().rank()", "rank", "parallel_state.get_expert_tensor_parallel_group()"),
])
def test_a_none_process_group_is_the_group_not_initialized(code, attr, group):
    (c,) = diagnose_causes(traceback("/opt/Megatron-LM/megatron/core/transformer/moe/token_dispatcher.py", "__init__",
                                     code, attr))
    assert (c["id"], c["overlap_related"]) == ("OVERLAP_PATH_ERROR", False)
    assert f"the process group {group} is None" in c["message"] and "not initialized" in c["message"]


def test_as_the_assert_itself_reads():
    (c,) = diagnose_causes("AssertionError: expert parallel group is not initialized\n")
    assert (c["id"], c["overlap_related"]) == ("OVERLAP_PATH_ERROR", False)


@pytest.mark.parametrize("code,attr", [
    ("self.bucket_group.register_grad_ready(param)", "register_grad_ready"),  # no ProcessGroup method
    ("self.tp_size = self.tp_group.size()", "rank"),  # the None is not the object the line calls size() on
])
def test_a_none_that_is_no_process_group_stays_an_overlap_traceback(code, attr):
    (c,) = diagnose_causes(traceback("/opt/Megatron-LM/megatron/core/distributed/param_and_grad_buffer.py",
                                     "start_grad_sync", code, attr))
    assert c["id"] == "OVERLAP_PATH_TRACEBACK" and c["overlap_related"] is True
