"""Run one function over several items in worker processes, with the results and the error a serial loop gives.

The workers are children this process forks itself (os.fork, Linux only: elsewhere the items run one after another
here). They inherit the function and the items, so only an item's number goes to a worker (a pipe each way) and only
its result comes back (pickled). multiprocessing did the same at a cost: its import and its Process.start put the
first rank 25-45 ms after the pool began (measured), where a fork puts it there in about 1.5 ms.

A harness that kills only the parent (on a time-out) or a Ctrl-C to the whole process group must not leave a
worker behind, nor a traceback: each worker dies with its parent (PR_SET_PDEATHSIG, else a thread that watches
the parent), holds neither the parent's stdout nor its stderr (a `$(...)` or `| tee` would wait for it), and
ignores SIGINT (the parent answers it, once). The parent kills and reaps its workers whenever it leaves, however it
leaves (an error, Ctrl-C, SystemExit from a signal handler); workers that cannot start (a process limit) leave the
work to the parent, one item after another. A worker, the package's own process whoever called the pool, keeps the
memory it frees for what it allocates next (mbridge_overlap/malloc.py), as the command line's process does; it
never returns into its parent's code (os._exit).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from collections import deque

from ..errors import UsageError
from ..safeio import write_all

_SIGNALS = {getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)}
_FORKS = sys.platform.startswith("linux") and hasattr(os, "fork")
PR_SET_PDEATHSIG = 1
JOIN_SECONDS = 5.0
_LENGTH = 8  # bytes of a result's length before its pickle


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
    if jobs <= 1 or len(items) <= 1 or not _FORKS:
        return [func(item) for item in items]
    workers: list[_Worker] = []
    try:
        while len(workers) < min(jobs, len(items)) and _start(func, items, workers):
            pass
        if len(workers) < 2:  # no second process could start (a process limit): one after another, here
            _stop(workers)
            return [func(item) for item in items]
        order = sorted(range(len(items)), key=lambda i: -costs[i]) if costs else range(len(items))
        return _schedule(workers, items, order)
    finally:
        _stop(workers)


class _Worker:
    __slots__ = ("pid", "tasks", "results", "reaped", "exitcode")

    def __init__(self, pid: int, tasks: int, results: int):
        self.pid, self.tasks, self.results, self.reaped, self.exitcode = pid, tasks, results, False, None

    def fds(self) -> tuple:
        return self.tasks, self.results


def _start(func, items: list, workers: list) -> bool:
    """Fork one worker and add it to `workers`; False where none can start."""
    try:
        task_r, task_w = os.pipe()
    except OSError:  # out of file descriptors
        return False
    try:
        result_r, result_w = os.pipe()
    except OSError:
        _close(task_r, task_w)
        return False
    inherited, parent = [fd for w in workers for fd in w.fds()], os.getpid()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:  # with the signals blocked, the worker is in `workers` before a signal handler can raise here
        try:
            pid = os.fork()
        except OSError:  # refused (EAGAIN under a process limit, ENOMEM)
            _close(task_r, task_w, result_r, result_w)
            return False
        if pid == 0:
            status = 1
            try:
                _close(task_w, result_r, *inherited)
                _work(func, items, task_r, result_w, parent)
                status = 0
            finally:
                os._exit(status)
        _close(task_r, result_w)
        workers.append(_Worker(pid, task_w, result_r))
        return True
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _schedule(workers: list[_Worker], items: list, order) -> list:
    import select

    results = [None] * len(items)
    failed: dict[int, BaseException] = {}
    pending, idle, busy = deque(order), list(workers), {}
    poller = select.poll()
    while True:
        while idle and pending:
            i = pending.popleft()
            if failed and i > min(failed):
                continue  # a serial loop would have stopped before it
            worker = idle.pop()
            try:
                write_all(worker.tasks, i.to_bytes(4, "little"))
            except OSError:  # it died while idle
                failed[i] = _died(worker, items[i])
                continue
            busy[worker.results] = (worker, i)
            poller.register(worker.results, select.POLLIN)
        if not busy:
            break
        for fd, _events in poller.poll():
            worker, i = busy.pop(fd)
            poller.unregister(fd)
            reply = _receive(worker)
            if reply is None:
                failed[i] = _died(worker, items[i])
                continue
            ok, value, remote = reply
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


def _receive(worker: _Worker) -> tuple | None:
    """(ok, value, the worker's traceback or None) of the item `worker` ran; None where it ended first."""
    head = _read_exact(worker.results, _LENGTH)
    size = int.from_bytes(head, "little")
    payload = _read_exact(worker.results, size) if len(head) == _LENGTH else b""
    if len(head) < _LENGTH or len(payload) < size:
        return None
    try:
        return pickle.loads(payload)
    except Exception as exc:  # an exception whose class cannot be rebuilt from its pickle
        return False, RuntimeError(f"worker: its result could not be read back ({type(exc).__name__})"), None


def _died(worker: _Worker, item) -> WorkerDied:
    _reap(worker, time.monotonic() + JOIN_SECONDS)
    return WorkerDied(item, worker.exitcode)


def _stop(workers: list[_Worker]) -> None:
    """Kill every worker (they hold nothing worth waiting for) and reap it, never waiting long."""
    for worker in workers:
        if not worker.reaped:  # a reaped pid may be another process's by now
            try:
                os.kill(worker.pid, signal.SIGKILL)
            except OSError:
                pass
    deadline = time.monotonic() + JOIN_SECONDS
    for worker in workers:
        _reap(worker, deadline)  # one stuck in the kernel stays a zombie until this process ends
        _close(*worker.fds())
    workers.clear()


def _reap(worker: _Worker, deadline: float) -> None:
    """Its exit code (as multiprocessing gives it: -N for signal N) once it has ended, waiting until `deadline`."""
    while not worker.reaped:
        try:
            pid, status = os.waitpid(worker.pid, os.WNOHANG)
        except ChildProcessError:  # reaped already, by a caller's SIGCHLD handler or SIG_IGN: its code is not known
            worker.reaped = True
            return
        if pid:
            worker.reaped, worker.exitcode = True, os.waitstatus_to_exitcode(status)
        elif time.monotonic() >= deadline:
            return
        else:
            time.sleep(0.001)


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _read_exact(fd: int, size: int) -> bytes:
    """`size` bytes, or fewer where the pipe ends first."""
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- in the worker ---------------------------------------------------------------------------------------------


def _work(func, items: list, tasks: int, results: int, parent_pid: int) -> None:
    _detach((tasks, results), parent_pid)
    while True:
        number = _read_exact(tasks, 4)
        if len(number) < 4:  # the parent closed its end
            return
        try:
            reply = (True, func(items[int.from_bytes(number, "little")]), None)
        except BaseException as exc:
            reply = (False, exc, None if isinstance(exc, UsageError) else _format_exc())
        try:
            payload = pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
        except Exception:  # a result or exception that does not pickle
            payload = pickle.dumps((False, RuntimeError(f"worker: {_format_exc()}"), None), pickle.HIGHEST_PROTOCOL)
        write_all(results, len(payload).to_bytes(_LENGTH, "little") + payload)


def _format_exc() -> str:
    import traceback  # only for a worker's unexpected error: its import costs every trace 2 ms

    return traceback.format_exc()


def _detach(pipes: tuple, parent_pid: int) -> None:
    """Ignore Ctrl-C, die with the parent, let go of its stdout and stderr; then take signals again."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):  # the parent's handlers (SystemExit) are not the worker's
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    _die_with(parent_pid)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (1, 2):
        if fd not in pipes:  # where the parent started with fd 1 closed, a pipe may be fd 1
            os.dup2(devnull, fd)
    if devnull > 2:
        os.close(devnull)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


def _die_with(parent_pid: int) -> None:
    armed = False
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
    while os.getppid() == parent_pid:
        time.sleep(0.25)
    os._exit(1)
