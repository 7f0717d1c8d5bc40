"""verify's Bridge holder: the import of megatron.bridge done once for the verify runs that follow it.

Importing Bridge is most of a verify (12-15 s of about 17 on 2 cores). Right after a verify has imported it, that
process forks a copy of itself as it stands then (Bridge imported, no check run yet), which waits on a Unix socket
until it has been idle for IDLE_S seconds. The next verify of the same interpreter and skill asks it first: the holder
forks a fresh copy of itself for it, which runs that verify with the caller's arguments, working folder, umask, the
variables in OWN_VARIABLES, and its very stdin, stdout and stderr (passed as file descriptors with its go-ahead);
the holder replies with its exit status (or the signal that ended it), which the caller ends with, and passes the
caller's Ctrl-C on to it. Every check runs in that copy as in the caller's own process, after an import that is the
same import: tests/bridge/test_holder.py compares the reports.

A caller is served only where its own process would have imported the same: the same interpreter, flags, -W
options and sys.path (which holds the folder verify runs from), the same environment but OWN_VARIABLES (verify's
own, read after the import, and the shell's bookkeeping), the same user, resource limits, mount namespace and root, and no file the holder has
loaded (the skill, any module: torch, Bridge) changed since; a holder whose files changed stops. Else, and where a
holder is busy with another verify (ACCEPT_S), the caller runs in its own process, as always, and (but for the busy
one) starts a holder of its own, which replaces the one that declined it: one holder per interpreter and skill.

The holder holds about 0.7 GB (its resident set: what the import made) while it waits. MBRIDGE_OVERLAP_SERVER=0
turns it off (as it does the answer server), MBRIDGE_OVERLAP_SERVER_IDLE_S sets its idle time; `scripts/verify.sh
--holder status|stop` shows or stops it. Not on a platform without fork and Unix sockets (not Linux), and not from a
process with a second Python thread at the import (a fork copies one thread only; the native threads torch and
jemalloc start are there for the suites' forked pytest too, which has always run so).
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback

from .. import launch, server, serving
from . import suites

MAGIC = b"mbridge-overlap-verify/1"  # in the socket's name, so a holder of another protocol is never asked
SWITCH = server.SWITCH  # =0: the holder is neither asked nor started, as the answer server is not
IDLE_S = 600.0
ACCEPT_S = 2.0  # a caller waits this long for the holder to take it, then runs in its own process
CHECK_S = 30.0  # how often an idle holder looks at its socket and its clock
GRACE_S = 10.0  # a gone caller's verify gets SIGTERM, then SIGKILL after this
OWN_VARIABLES = frozenset({"MBRIDGE_SRC", "MBRIDGE_VERIFY_PHASES", "PWD", "OLDPWD", "SHLVL", "_"})  # verify's, the shell's
_SKILL_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BYTECODE = sys.pycache_prefix, sys.dont_write_bytecode  # verify changes them while Bridge is in use


class _Start:
    """What answer() saw, for start(): whether a holder may be started, and this process as it began."""

    allowed = False
    identity = b""
    environment: dict = {}


# --- the caller ----------------------------------------------------------------------------------------------------


def enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip() != "0" and sys.platform.startswith("linux") and hasattr(os, "fork")


def identity() -> bytes:
    parts = [sys.executable, sys.version, repr(sys.flags), repr(sys.warnoptions), repr(sys._xoptions), _SKILL_DIR, *sys.path]
    return "\0".join(parts).encode("utf-8", "surrogateescape")


def socket_path(create: bool) -> str | None:
    key = server.socket_key(MAGIC + f"\0{sys.executable}\0{_SKILL_DIR}".encode("utf-8", "surrogateescape"))
    return server.private_socket(f"verify-{key:016x}.sock", create)


def answer(argv: list) -> int | None:
    """The exit status of this verify as the holder ran it; None where it did not: run it here (and start() may then
    start a holder)."""
    _Start.identity, _Start.environment = identity(), dict(os.environ)
    if not enabled() or any(a.startswith("--ho") for a in argv):  # --holder: this process asks the holder itself
        return None
    _Start.allowed = True
    path = socket_path(create=False)
    if path is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            fds = [sys.stdin.fileno(), sys.stdout.fileno(), sys.stderr.fileno()]
            sock.settimeout(ACCEPT_S)
            sock.connect(path)
            sock.sendall(server.encode([server.encode([MAGIC + b" run", *_request(argv)])]))
            accepted = sock.recv(1)
        except TimeoutError:
            _Start.allowed = False  # busy with another verify: it stays
            return None
        except (OSError, ValueError, AttributeError):  # none, a dead one's socket, or a closed stream here
            return None
        if accepted != b"A":  # N: not this caller's (this run starts its own), S: its files changed (it stops)
            return None
        sock.settimeout(None)
        # the streams go with the go-ahead, not the request: a caller that gave up on a busy holder leaves none of
        # them in its queue (its reader would wait on them until the holder took the request)
        sock.sendmsg([b"G"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", *fds))])
        return _wait(sock)
    finally:
        sock.close()


def _request(argv: list) -> list:
    umask = os.umask(0o022)
    os.umask(umask)
    fs = os.fsencode
    return [_Start.identity, fs(os.getcwd()), str(umask).encode(), fs(sys.argv[0]), str(len(argv)).encode(), *map(fs, argv),
            *(fs(k) + b"=" + fs(v) for k, v in os.environ.items())]


def _wait(sock) -> int:
    """The holder's reply; Ctrl-C is passed on to the verify it runs (which stops as it would here), a second one
    ends this caller (130), as SIGTERM and SIGHUP do (by that signal); the hang-up stops that verify."""
    interrupts = []

    def on_interrupt(signum, frame):
        interrupts.append(signum)
        if len(interrupts) > 1:
            raise KeyboardInterrupt
        sock.send(b"I")

    def on_end(signum, frame):  # the hang-up stops the held verify; this caller ends by the signal, as it would have
        sock.close()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGINT, on_interrupt)
    for name in ("SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), on_end)
    try:
        reply = server.recv_all(sock, 64)
    except KeyboardInterrupt:
        return 130
    except OSError:
        reply = b""
    if reply[:1] == b"R" and reply[1:].isdigit():
        return int(reply[1:])
    if reply[:1] == b"K" and reply[1:].isdigit():  # ended by a signal: so ends this caller
        sys.stdout.flush()
        signal.signal(int(reply[1:]), signal.SIG_DFL)
        os.kill(os.getpid(), int(reply[1:]))
        return 128 + int(reply[1:])
    print(f"verify: error: verify's Bridge holder stopped before this verify finished; run it again with {SWITCH}=0",
          file=sys.stderr)
    return 2


def control(action: str) -> dict:
    """The holder of this interpreter and skill: its state ("status"), or that state after it was asked to stop."""
    path = socket_path(create=False)
    out = {"enabled": enabled(), "socket": path, "running": False}
    if path is None:
        return out
    try:
        reply = server.ask(path, MAGIC, action)
    except TimeoutError:  # it runs a verify and answers when that ends
        return {**out, "running": True, "busy": True}
    except OSError:
        return out
    if action == "stop":
        return {**out, "stopped": reply == b"stopping"}
    numbers = server.status_of(reply, ("pid", "started", "served", "idle_s"))
    return out if numbers is None else {**out, "running": True, **numbers}


def describe(state: dict) -> str:
    if not state["enabled"]:
        return f"verify's Bridge holder: off ({SWITCH}=0)\n"
    if state.get("busy"):
        return "verify's Bridge holder: busy with a verify; ask again when it has ended\n"
    if "stopped" in state:
        return "verify's Bridge holder: " + ("stopped\n" if state["stopped"] else "none was running\n")
    if not state["running"]:
        return "verify's Bridge holder: none running (the next verify imports Bridge and starts one)\n"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state["started"]))
    return (f"verify's Bridge holder: pid {state['pid']}, started {started}, {state['served']} verify runs served, "
            f"stops after {state['idle_s']:g} s idle\n")


# --- the holder ----------------------------------------------------------------------------------------------------


def open_fds() -> set:
    try:
        return {int(fd) for fd in os.listdir("/proc/self/fd")}
    except OSError:
        return set()


def start(run, end, keep: set) -> None:
    """Right after the import: fork the holder, a copy of this process as it stands (with the files the import opened,
    `keep`, and none of the caller's), whose copies run later verifies by run(argv) -> exit status and end by
    end(status); nothing where answer() saw a holder that stays, or none may be started here."""
    if not _Start.allowed or threading.active_count() != 1 or not os.path.isdir("/proc/self/fd"):
        return
    path = socket_path(create=True)
    if path is None:
        return

    def serve(listener) -> None:
        launch.detach(keep | {listener.fileno()})
        Holder(listener, path, run, end).serve()

    # the socket is bound in the first child, so that it is there when start() returns; it replaces a holder that
    # declined this process's caller, which sees so and stops
    launch.spawn(serve, prepare=lambda: serving.listen(path, 16))


class Holder:
    def __init__(self, listener, path: str, run, end):
        self.listener, self.path, self.run, self.end = listener, path, run, end
        self.identity, self.environment = _Start.identity, _Start.environment
        self.inode = os.stat(path).st_ino
        self.idle_s = launch.idle_s(IDLE_S)
        self.loaded = serving.Loaded()
        self.context = serving.context_of("self")
        self.status = {"pid": os.getpid(), "started": time.time(), "served": 0, "idle_s": self.idle_s}

    def serve(self) -> None:
        serving.name_process(b"mbridge-verify")
        self.last = time.monotonic()  # when it last ran a verify (a status request is not one)
        try:
            while time.monotonic() - self.last < self.idle_s:
                self.listener.settimeout(min(CHECK_S, self.idle_s))
                try:
                    conn, _ = self.listener.accept()
                except socket.timeout:
                    if not serving.ours(self.path, self.inode):
                        return
                    continue
                with conn:
                    conn.settimeout(30)
                    try:
                        go_on = self.handle(conn)
                    except (OSError, ValueError, IndexError):
                        go_on = True  # a caller that went away or sent nonsense: the next one is served
                if not go_on or not serving.ours(self.path, self.inode):
                    return
        finally:
            if serving.ours(self.path, self.inode):
                os.unlink(self.path)
            self.listener.close()

    def handle(self, conn) -> bool:
        """One caller; False when the holder should stop."""
        request = serving.caller_request(conn)
        if request is None:
            return True
        pid, fields = request
        op = fields[0] if fields else b""
        control = serving.control_reply(conn, op, MAGIC, self.status)
        if control is not None:
            return control
        if op != MAGIC + b" run" or fields[1:2] != [self.identity] or self.context is None \
                or serving.context_of(pid) != self.context:
            conn.sendall(b"N")
            return True
        request = Request(fields[2:])
        if _checked(request.env) != _checked(self.environment):
            conn.sendall(b"N")
            return True
        if self.loaded.changed():
            conn.sendall(b"S")
            return False
        conn.sendall(b"A")
        fds = serving.go_ahead(conn, 3)
        if fds is None:
            return True  # the caller stopped waiting (and runs it itself): nothing is run here
        try:
            child = self.fork(request, fds, conn)
        finally:
            for fd in fds:
                os.close(fd)
        reply = _watch(conn, child)
        self.status["served"] += 1
        self.last = time.monotonic()
        conn.sendall(reply)
        return True

    def fork(self, request: "Request", fds: list, conn) -> int:
        holder = os.getpid()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            os.setpgid(0, 0)  # its own group: the caller's Ctrl-C reaches the suites' pytest too, as in a terminal
            suites.die_with_parent(holder)
            conn.close()
            self.listener.close()
            if self.loaded.watch.fd >= 0:
                os.close(self.loaded.watch.fd)  # the holder's, not this verify's
            code = self.run_request(request, fds)
        except KeyboardInterrupt:
            traceback.print_exc()
            _end_by_signal(signal.SIGINT)
        except BaseException:  # noqa: B036  (what would have been the command's traceback, exit status 1)
            traceback.print_exc()
        self.end(code)
        os._exit(code)  # end() did not end it

    def run_request(self, request: "Request", fds: list) -> int:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for name in OWN_VARIABLES:
            if name in request.env:
                os.environ[name] = request.env[name]
            else:
                os.environ.pop(name, None)
        os.umask(request.umask)
        os.chdir(request.cwd)
        sys.argv = [request.argv0, *request.argv]
        _reopen_streams()
        sys.pycache_prefix, sys.dont_write_bytecode = _BYTECODE
        served_by[:] = [os.getppid(), self.status["started"]]
        _Start.allowed = False  # this copy starts no holder: the one that runs it stays
        try:
            return self.run(request.argv)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                return exc.code or 0
            print(exc.code, file=sys.stderr)
            return 1


served_by: list = []  # in a holder's copy: [the holder's pid, when it started]


def _checked(env: dict) -> dict:
    return {k: v for k, v in env.items() if k not in OWN_VARIABLES}


def _reopen_streams() -> None:
    """stdin, stdout and stderr anew over file descriptors 0, 1 and 2 (now the caller's): buffered as a new process
    would buffer them there (stdout by line on a terminal only), with this process's encodings."""
    was = sys.stdin, sys.stdout, sys.stderr
    codes = [(getattr(w, "encoding", None), getattr(w, "errors", None)) for w in was]
    sys.stdin = open(0, "r", encoding=codes[0][0], errors=codes[0][1], closefd=False)
    sys.stdout = open(1, "w", encoding=codes[1][0], errors=codes[1][1], closefd=False)
    sys.stderr = open(2, "w", encoding=codes[2][0], errors=codes[2][1], closefd=False, buffering=1)
    if getattr(was[1], "write_through", False):
        sys.stdout.reconfigure(write_through=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _end_by_signal(signum: int) -> None:
    """As Python ends on an uncaught KeyboardInterrupt: the exit functions run, then the signal it came by."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _watch(conn, child: int) -> bytes:
    """Wait for the verify `child` runs, passing the caller's Ctrl-C on to its process group; a caller that hangs up
    gets its verify stopped (SIGTERM, then SIGKILL after GRACE_S). The reply: R<exit status> or K<signal>."""
    poller = select.poll()
    poller.register(conn, select.POLLIN | select.POLLHUP | select.POLLERR)
    try:
        ended = os.pidfd_open(child)
        poller.register(ended, select.POLLIN)
    except (AttributeError, OSError):
        ended = None
    gone_at = None
    try:
        while True:
            done, status = os.waitpid(child, os.WNOHANG)
            if done:
                break
            if gone_at is not None and time.monotonic() - gone_at > GRACE_S:
                _signal_group(child, signal.SIGKILL)
            for fd, _events in poller.poll(1000 if ended is not None else 50):
                if fd != conn.fileno():
                    continue
                data = b""
                try:
                    data = conn.recv(1)
                except OSError:
                    pass
                if data == b"I":
                    _signal_group(child, signal.SIGINT)
                elif not data and gone_at is None:
                    poller.unregister(conn)
                    gone_at = time.monotonic()
                    _signal_group(child, signal.SIGTERM)
    finally:
        if ended is not None:
            os.close(ended)
    if os.WIFSIGNALED(status):
        return b"K%d" % os.WTERMSIG(status)
    return b"R%d" % os.waitstatus_to_exitcode(status)


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except OSError:
        pass


class Request:
    def __init__(self, fields: list):
        fs = os.fsdecode
        self.cwd = fs(fields[0])
        self.umask = int(fields[1])
        self.argv0 = fs(fields[2])
        n = int(fields[3])
        self.argv = [fs(a) for a in fields[4:4 + n]]
        self.env = dict(fs(e).partition("=")[::2] for e in fields[4 + n:])
