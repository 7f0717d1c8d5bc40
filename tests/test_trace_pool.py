"""`trace --jobs N`: worker processes give the reports and the errors a serial run gives, and leave nothing behind."""

from __future__ import annotations

import os
import signal

import pytest

from mbridge_overlap.errors import UsageError
from mbridge_overlap import pool
from mbridge_overlap.trace import analyze, compare, job
from trace_fixtures import DP_DESC, TP_DESC, TraceBuilder, nccl


def rank_trace(rank: int, world: int = 6) -> TraceBuilder:
    """Three steps per rank with TP and DP kernels that differ by rank, a record_param_comms group, an orphan."""
    b = TraceBuilder(rank=rank, world_size=world, pg_config=[{"pg_name": "9", "pg_desc": DP_DESC, "ranks": [0, 1]}])
    for step in range(3):
        t0 = step * 1000
        b.step(step + 1, t0, t0 + 1000)
        b.kernel("sm90_gemm", t0 + 10, t0 + 400 + 10 * rank)
        b.kernel(nccl("AllGather"), t0 + 300, t0 + 500 + rank, stream=20, **{"Process Group Description": TP_DESC})
        b.kernel(nccl("ReduceScatter"), t0 + 600, t0 + 700, stream=21, record={"Process Group Name": "9"})
    b.kernel("orphan_gemm", 50, 60, orphan=True)
    return b.noise()


def children() -> set:
    """This process's children, running or ended but not reaped (each thread's, as /proc lists them)."""
    found = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                found.update(map(int, fh.read().split()))
        except FileNotFoundError:  # a thread (the pool's manager) that ended since the listing
            continue
    return found


@pytest.fixture(autouse=True)
def no_child_left():
    """Every test leaves no worker behind, running or unreaped."""
    before = children()
    yield
    assert children() <= before


@pytest.fixture
def ranks(tmp_path):
    for rank in range(6):
        rank_trace(rank).write(tmp_path / f"rank-{rank}.json{'.gz' if rank % 2 else ''}",
                               layout="compact" if rank % 3 else "kineto")
    return tmp_path


@pytest.mark.parametrize("jobs", [2, 3, 6, 64])
def test_pool_report_is_the_serial_one(ranks, jobs):
    serial = analyze(ranks, jobs=1).to_dict()
    assert analyze(ranks, jobs=jobs).to_dict() == serial
    assert analyze(ranks).to_dict() == serial  # the default


def test_compare_with_jobs(ranks, tmp_path_factory):
    after = tmp_path_factory.mktemp("after")
    for rank in range(6):
        rank_trace(rank).kernel(nccl("AllReduce"), 100, 900, stream=22).write(after / f"rank-{rank}.json")
    assert compare(ranks, after, jobs=3).to_dict() == compare(ranks, after, jobs=1).to_dict()


def test_pool_raises_the_error_a_serial_run_raises(ranks):
    (ranks / "rank-4.json").write_text(rank_trace(4).text()[:-400])  # truncated
    text = rank_trace(2).text()  # a corrupt event in the middle (the header reads well)
    (ranks / "rank-2.json").write_text(text[:len(text) // 2] + "oops" + text[len(text) // 2:])
    with pytest.raises(UsageError) as serial:
        analyze(ranks, jobs=1)
    with pytest.raises(UsageError) as pooled:
        analyze(ranks, jobs=3)
    assert str(pooled.value) == str(serial.value) and "rank-2.json: not valid JSON" in str(serial.value)


def _square(x):
    if x == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if x == "bug":
        raise ZeroDivisionError("a bug in the worker")
    if isinstance(x, int) and x < 0:
        raise UsageError(f"item {x}")
    return x * x


def test_map_ordered_keeps_order_and_the_first_error():
    assert pool.map_ordered(_square, list(range(20)), 4, costs=[i % 7 for i in range(20)]) == [i * i for i in range(20)]
    with pytest.raises(UsageError, match="item -1"):
        pool.map_ordered(_square, [1, -1, 2, -2, 3], 3)
    with pytest.raises(ZeroDivisionError) as exc:
        pool.map_ordered(_square, [1, "bug", 2], 2)
    assert "a bug in the worker" in str(exc.value.__cause__)  # the worker's traceback


def test_a_killed_worker_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(pool.WorkerDied) as exc:
        pool.map_ordered(_square, [1, "die", 2], 2)
    assert exc.value.item == "die" and exc.value.exitcode == -signal.SIGKILL
    monkeypatch.setattr(job, "_analyze_file", lambda path, allow_partial, layout=None: _square("die"))
    for rank in range(2):
        rank_trace(rank).write(tmp_path / f"rank-{rank}.json")
    with pytest.raises(UsageError, match=r"rank-0.json: the process analysing it died \(killed by signal 9"):
        analyze(tmp_path, jobs=2)


def test_a_caller_that_ignores_sigchld_gets_its_results_from_this_process(monkeypatch):
    """With SIGCHLD ignored the kernel reaps the workers itself and multiprocessing cannot wait on them: the items
    run here, one after another, and no worker is forked."""
    forked = []
    monkeypatch.setattr(os, "fork", lambda: forked.append(1) or pytest.fail("forked"))
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        assert pool.map_ordered(_square, [1, 2, 3], 2) == [1, 4, 9]
        with pytest.raises(UsageError, match="item -1"):
            pool.map_ordered(_square, [1, -1, 2], 2)
    finally:
        signal.signal(signal.SIGCHLD, before)
    assert forked == []


@pytest.mark.parametrize("forks", [0, 1, 2])
def test_no_process_to_spare_falls_back_to_serial(ranks, monkeypatch, forks):
    real, left = os.fork, [forks]

    def fork():
        if left[0] <= 0:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        left[0] -= 1
        return real()

    serial = analyze(ranks, jobs=1).to_dict()
    monkeypatch.setattr(os, "fork", fork)
    assert analyze(ranks, jobs=4).to_dict() == serial


def test_default_jobs():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert job.default_jobs(1) == 1
    assert job.default_jobs(1000) == min(cores, job.MAX_JOBS)
    assert 1 <= job.default_jobs(3) <= 3


class _Unreadable(Exception):
    """Pickles, but cannot be rebuilt from its pickle (its __init__ wants two arguments)."""

    def __init__(self, a, b):
        super().__init__(f"{a} {b}")


def _awkward(x):
    if x == "unpicklable":
        return lambda: None
    if x == "unreadable":
        raise _Unreadable(1, 2)
    if x == "large":
        return bytes(3 << 20)  # past a pipe's buffer, from every worker at once
    return x


def test_what_a_worker_cannot_send_back_is_an_error_not_a_hang():
    with pytest.raises(Exception, match="pickle"):
        pool.map_ordered(_awkward, [1, "unpicklable", 2], 2)
    with pytest.raises(RuntimeError, match="could not be read back"):
        pool.map_ordered(_awkward, [1, "unreadable", 2], 2)
    assert pool.map_ordered(_awkward, ["large"] * 4, 3) == [bytes(3 << 20)] * 4


def test_the_function_and_items_need_not_pickle():
    """The workers inherit them (fork): only results come back."""
    items = [lambda: 1, lambda: 2, lambda: 3]
    assert pool.map_ordered(lambda f: f() * 10, items, 2) == [10, 20, 30]
