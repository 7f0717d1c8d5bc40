"""The command line's entry point: a server's answer where one runs, else cli.main in this process, and then a
server started for the next quick command (mbridge_overlap.server; mbridge_overlap.serving is its loop)."""

import os
import sys

from . import server


def main() -> int:
    argv = sys.argv[1:]
    status, running = server.answer(argv)
    if status is not None:
        _exit_now(status)
    from .cli import main as run_here

    status = run_here(argv, own_process=True)
    if not running:
        start(argv, run_here)
    if argv[:1] and argv[0] in server.QUICK:
        _exit_now(status)
    return status


def _exit_now(status: int) -> None:
    """The end of a quick command: its output is written (by the server, or flushed by safeio.write_stdout), it
    starts no thread, worker or atexit handler, so the interpreter's finalization is skipped (2.5 ms and more)."""
    _flush()
    os._exit(status)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or None (started with >&-)
            pass


def start(argv: list, run) -> None:
    """Fork the server that keeps this process's imports and data for the next quick commands, each run by
    run(argv) -> exit status (cli.main); nothing where the command was not one the server would take, or a server
    may not be started here."""
    if not server.servable(argv) or not hasattr(os, "fork"):
        return
    path = server.socket_path(create=True)
    if path is None:
        return

    def serve(_ready) -> None:
        detach()
        from . import serving

        serving.serve(path, server.identity(), idle_s(server.IDLE_S), run)

    spawn(serve)


def spawn(body, prepare=None) -> None:
    """Run body(prepare()) in a grandchild of a new session that nobody waits for; this process waits only for the
    first child, which runs prepare (what must be there when spawn returns: verify's holder binds its socket so)."""
    _flush()  # nothing buffered is written twice, by the child too
    try:
        pid = os.fork()
    except OSError:
        return
    if pid:
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass
        return
    try:
        os.setsid()
        ready = prepare() if prepare is not None else None
        if os.fork() == 0:
            body(ready)
    except BaseException:
        pass
    finally:
        os._exit(0)


def idle_s(default: float) -> float:
    try:
        return max(1.0, float(os.environ.get(f"{server.SWITCH}_IDLE_S", default)))
    except ValueError:
        return default


def detach(keep=()) -> None:
    """Nothing of the caller's stays open (a pipe its reader waits on would never reach its end): every file
    descriptor above 2 is closed but those in `keep`."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    low = 3
    for fd in sorted(fd for fd in keep if fd >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
    os.chdir("/")
