"""Run one function over several items in worker processes, with the results and the error a serial loop gives.

A harness that kills only the parent (on a time-out) or a Ctrl-C to the whole process group must not leave a
worker behind, nor a traceback: each worker dies with its parent (PR_SET_PDEATHSIG on Linux, else a thread that
watches the parent), holds neither the parent's stdout nor its stderr (a `$(...)` or `| tee` would wait for it),
and ignores SIGINT (the parent answers it, once). The parent kills its workers whenever it leaves, however it
leaves (an error, Ctrl-C, SystemExit from a signal handler); workers that cannot start (a process limit) leave
the work to the parent, one item after another. A worker, the package's own process whoever called the pool, keeps
the memory it frees for what it allocates next (mbridge_overlap/malloc.py), as the command line's process does.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import deque

from .. import malloc
from ..errors import UsageError

_SIGNALS = {getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)}
_BLOCK = hasattr(signal, "pthread_sigmask")
PR_SET_PDEATHSIG = 1
JOIN_SECONDS = 5.0


class WorkerDied(Exception):
    """A worker process ended while it worked on `item` (killed by the kernel's out-of-memory killer, say)."""

    def __init__(self, item, exitcode):
        super().__init__(item, exitcode)
        self.item, self.exitcode = item, exitcode


class _RemoteTraceback(Exception):
    def __str__(self):
        return self.args[0]


def map_ordered(func, items: list, jobs: int, costs: list | None = None) -> list:
    """[func(item) for item in items], on up to `jobs` worker processes (1: in this process). Items start in order
    of decreasing cost (the longest first, so that the last to finish is short); when some fail, the exception
    raised is the first failing item's, as in a serial loop."""
    if jobs <= 1 or len(items) <= 1:
        return [func(item) for item in items]
    import multiprocessing  # here: a one-file run does not pay for its import

    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    workers: list[_Worker] = []
    try:
        while len(workers) < min(jobs, len(items)) and _start(context, func, workers):
            pass
        if len(workers) < 2:  # no second process could start (a process limit): one after another, here
            _stop(workers)
            return [func(item) for item in items]
        order = sorted(range(len(items)), key=lambda i: -costs[i]) if costs else range(len(items))
        return _schedule(workers, items, order)
    finally:
        _stop(workers)


class _Worker:
    __slots__ = ("process", "conn")

    def __init__(self, process, conn):
        self.process, self.conn = process, conn


def _start(context, func, workers: list) -> bool:
    """Start one worker and add it to `workers`; False where none can start."""
    try:
        parent_end, child_end = context.Pipe()
    except OSError:  # out of file descriptors
        return False
    process = context.Process(target=_work, args=(child_end, parent_end, os.getpid(), func), daemon=True)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS) if _BLOCK else None
    try:  # with the signals blocked, the worker is in `workers` before a signal handler can raise here
        process.start()
        workers.append(_Worker(process, parent_end))
        return True
    except (OSError, AssertionError):  # fork refused (EAGAIN under a process limit, ENOMEM); a daemonic caller
        parent_end.close()
        return False
    finally:
        child_end.close()
        if _BLOCK:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _schedule(workers: list[_Worker], items: list, order) -> list:
    from multiprocessing.connection import wait

    results = [None] * len(items)
    failed: dict[int, BaseException] = {}
    pending, idle, busy = deque(order), list(workers), {}
    while True:
        while idle and pending:
            i = pending.popleft()
            if failed and i > min(failed):
                continue  # a serial loop would have stopped before it
            worker = idle.pop()
            try:
                worker.conn.send(items[i])
            except OSError:  # it died while idle
                failed[i] = _died(worker, items[i])
                continue
            busy[worker.conn] = (worker, i)
        if not busy:
            break
        for conn in wait(list(busy)):
            worker, i = busy.pop(conn)
            try:
                ok, value, remote = conn.recv()
            except (EOFError, OSError):
                ok, value, remote = False, _died(worker, items[i]), None
            else:
                idle.append(worker)
            if ok:
                results[i] = value
            else:
                if remote:
                    value.__cause__ = _RemoteTraceback(remote)
                failed[i] = value
    if failed:
        raise failed[min(failed)]
    return results


def _died(worker: _Worker, item) -> WorkerDied:
    worker.process.join(JOIN_SECONDS)
    return WorkerDied(item, worker.process.exitcode)


def _stop(workers: list[_Worker]) -> None:
    """Kill every worker (they hold nothing worth waiting for) and reap it, never waiting long."""
    for worker in workers:
        worker.process.kill()
    for worker in workers:
        worker.process.join(JOIN_SECONDS)
        worker.conn.close()
        if worker.process.exitcode is None:  # stuck in the kernel: let the interpreter's exit not wait for it
            import multiprocessing.process

            getattr(multiprocessing.process, "_children", set()).discard(worker.process)
    workers.clear()


# --- in the worker ---------------------------------------------------------------------------------------------


def _work(conn, parent_end, parent_pid: int, func) -> None:
    _detach(conn, parent_end, parent_pid)
    malloc.keep_freed_memory()
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = (True, func(item), None)
        except BaseException as exc:
            reply = (False, exc, None if isinstance(exc, UsageError) else _format_exc())
        try:
            conn.send(reply)
        except Exception:  # a result or exception that does not pickle
            conn.send((False, RuntimeError(f"worker: {_format_exc()}"), None))


def _format_exc() -> str:
    import traceback  # only for a worker's unexpected error: its import costs every trace 2 ms

    return traceback.format_exc()


def _detach(conn, parent_end, parent_pid: int) -> None:
    """Ignore Ctrl-C, die with the parent, let go of its stdout and stderr; then take signals again."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):  # the parent's handlers (SystemExit) are not the worker's
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    parent_end.close()
    _die_with(parent_pid)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (1, 2):
        if fd != conn.fileno():  # where the parent started with fd 1 closed, the pipe may be fd 1
            os.dup2(devnull, fd)
    if devnull > 2:
        os.close(devnull)
    if _BLOCK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


def _die_with(parent_pid: int) -> None:
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            armed = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        import threading

        threading.Thread(target=_watch, args=(parent_pid,), daemon=True).start()


def _watch(parent_pid: int) -> None:
    import time

    while os.getppid() == parent_pid:
        time.sleep(0.25)
    os._exit(1)
