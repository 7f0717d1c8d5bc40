"""Run one function over several items in worker processes (concurrent.futures), with the results and the error a
serial loop gives.

The workers are forked (Linux; elsewhere the items run one after another here), so they inherit the function and the
items: only an item's number goes to a worker and only its result comes back (pickled). A harness that kills only
the parent (a time-out) or a Ctrl-C to the whole process group must leave no worker behind and no traceback: each
worker dies with its parent (PR_SET_PDEATHSIG), ignores SIGINT (the parent answers it, once) and holds neither the
parent's stdout nor its stderr (a `$(...)` or `| tee` would wait for it); the parent kills its workers however it
leaves. Where no second process can be forked (a process limit), or the caller ignores SIGCHLD (the kernel then reaps
the workers and multiprocessing would wait on them forever), the items run one after another here.
"""

from __future__ import annotations

import os
import signal
import sys

_FORKS = sys.platform.startswith("linux") and hasattr(os, "fork")
PR_SET_PDEATHSIG = 1
# (func, items, started): set in the parent before the fork, inherited by the workers; started[i] is the pid of the
# worker running item i (negated once it is done), in memory the workers share with the parent
_WORK: tuple | None = None


class WorkerDied(Exception):
    """A worker process ended while it worked on `item` (killed by the kernel's out-of-memory killer, say);
    exitcode as multiprocessing reports it (negative: a signal), None where it is not known."""

    def __init__(self, item, exitcode):
        super().__init__(item, exitcode)
        self.item, self.exitcode = item, exitcode


def map_ordered(func, items: list, jobs: int, costs: list | None = None) -> list:
    """[func(item) for item in items], on up to `jobs` worker processes (1: in this process). Items start in order
    of decreasing cost (the longest first, so that the last to finish is short); when some fail, the exception
    raised is the first failing item's, as in a serial loop."""
    if jobs <= 1 or len(items) <= 1 or not _FORKS or signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
        return [func(item) for item in items]  # (a caller that ignores SIGCHLD: multiprocessing cannot wait on workers)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _WORK
    started = multiprocessing.get_context("fork").RawArray("q", len(items))
    _WORK = (func, items, started)
    order = sorted(range(len(items)), key=lambda i: -costs[i]) if costs else list(range(len(items)))
    pool = ProcessPoolExecutor(min(jobs, len(items)), mp_context=multiprocessing.get_context("fork"),
                               initializer=_start_worker, initargs=(os.getpid(),))
    try:
        try:
            futures = {i: pool.submit(_call, i) for i in order}
        except OSError:  # no process to spare (a process limit): one after another, here
            _kill(pool)
            return [func(item) for item in items]
        except BrokenProcessPool:  # a worker died before every item was handed out
            raise _died(pool, order[0]) from None
        return [_result(futures[i], i, pool) for i in range(len(items))]
    finally:
        _WORK = None
        _kill(pool)


def _result(future, index: int, pool):
    from concurrent.futures.process import BrokenProcessPool

    try:
        return future.result()
    except BrokenProcessPool:
        raise _died(pool, index) from None


def _died(pool, index: int) -> Exception:
    """Why the pool broke: WorkerDied with the item a dead worker had taken (item `index` where the exit codes are
    not known) and its exit code; RuntimeError where no worker died (a result that could not be read back). Once
    shutdown returns, the broken pool has terminated its other workers (SIGTERM), so the one that died first is the
    one that ended otherwise."""
    func, items, started = _WORK
    processes = dict(getattr(pool, "_processes", None) or {})  # concurrent.futures' own table of its workers
    pool.shutdown(wait=True, cancel_futures=True)
    codes = {pid: p.exitcode for pid, p in processes.items()}
    dead = {pid: code for pid, code in codes.items() if code is not None and code != -signal.SIGTERM}
    for i, pid in enumerate(started):
        if pid in dead:
            return WorkerDied(items[i], dead[pid])
    if codes and None not in codes.values():
        return RuntimeError(f"a worker's result could not be read back (item {index}); run with --jobs 1 to see why")
    return WorkerDied(items[index], None)


def _kill(pool) -> None:
    """Stop the pool at once: its workers killed and reaped, queued items dropped."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        try:
            p.kill()
        except (OSError, ValueError, AttributeError):  # already gone
            pass
    pool.shutdown(wait=True, cancel_futures=True)
    for p in processes:
        try:
            p.join(5)
        except (OSError, ValueError, AssertionError):
            pass


# --- in the worker ---------------------------------------------------------------------------------------------


def _start_worker(parent_pid: int) -> None:
    """Die with the parent, leave Ctrl-C to it, and let go of its stdout and stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)  # not the parent's SystemExit handler
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (ImportError, OSError, AttributeError):  # no ctypes or prctl: the parent still kills its workers
        pass
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def _call(index: int):
    func, items, started = _WORK
    started[index] = os.getpid()
    try:
        return func(items[index])
    finally:
        started[index] = -os.getpid()  # done: a worker that dies later died on another item
