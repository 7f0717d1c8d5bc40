"""The answer server's loop (mbridge_overlap.server forks it): one command at a time, run as the caller's own process
would run it, until it has been idle for its idle time, a file it has loaded changes, or its socket is another's."""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback

from . import server as wire  # its messages (MAGIC, encode, decode, read_frame)
from .malloc import keep_freed_memory

CHECK_S = 30.0  # how often an idle server looks at its socket and its clock
WARM = (  # run once each while no caller waits, output discarded: later answers find each verb's modules loaded
    ["resolve", "--gpus", "8", "model.tensor_model_parallel_size=2", "comm_overlap.tp_comm_overlap=true"],
    ["plan", "--tp", "2", "--gpus", "8", "--format", "python"],
    ["lint", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config"],
    ["recipes", "--model", "llama3_70b"],
    ["explain", "MODE_LEFT_OFF"],
    ["diff", "--recipe", "llama3_70b_pretrain_64gpu_h100_bf16_config", "--gpus-after", "128"],
    ["recipes", "--format", "json"],  # every recipe's row and its text, once (catalog_view: 60 ms, about 20 MB)
)


def serve(path: str, identity: bytes, idle_s: float, run) -> None:
    """Answer on `path` with run(argv) -> exit status (cli.main; of cli this module reads only
    REQUIRED_PACKAGES, once it is loaded)."""
    try:
        listener = listen(path, 64)
        inode = os.stat(path).st_ino
    except OSError:
        return
    name_process()
    keep_freed_memory()  # each answer's text is allocated where the one before it was, not mapped again
    try:
        Server(listener, path, inode, identity, idle_s, run).loop()
    finally:
        if ours(path, inode):
            os.unlink(path)
        listener.close()


def listen(path: str, backlog: int) -> socket.socket:
    """A Unix socket listening on `path`, bound beside it and renamed onto it: it replaces a dead server's socket,
    and a live one finds it is no longer its own and stops."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    own = f"{path}.{os.getpid()}"
    listener.bind(own)
    listener.listen(backlog)
    os.rename(own, path)
    return listener


def name_process(name: bytes = b"mbridge-overlap") -> None:
    """`name` in ps -o comm and top (its command line stays that of the command that started it)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


class Server:
    def __init__(self, listener, path: str, inode: int, identity: bytes, idle_s: float, run):
        self.listener, self.path, self.inode, self.identity, self.idle_s, self.run = listener, path, inode, identity, idle_s, run
        self.loaded = Loaded()
        self.context = context_of("self")  # this process never changes its own
        self.status = {"pid": os.getpid(), "started": time.time(), "answered": 0, "idle_s": idle_s, "socket": path}
        self.last = time.monotonic()  # when it last answered a command (a status request is not one)
        self.warm = list(WARM)  # run one at a time while nobody asks, so that a caller never waits for them

    def loop(self) -> None:
        while time.monotonic() - self.last < self.idle_s:
            self.listener.settimeout(0.02 if self.warm else min(CHECK_S, self.idle_s))
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                if self.warm:
                    self.warm_one()
                elif not ours(self.path, self.inode):
                    return
                continue
            with conn:
                conn.settimeout(30)
                try:
                    go_on = self.handle(conn)
                except (OSError, ValueError, IndexError):
                    go_on = True  # a caller that went away or sent nonsense: the next one is served
            if not go_on or not ours(self.path, self.inode):
                return

    def warm_one(self) -> None:
        if len(self.warm) == len(WARM):
            _import_required()
        _run_quietly(self.run, self.warm.pop(0))
        self.loaded.add_modules()
        if not self.warm:
            gc.collect()
            gc.freeze()  # what the verbs loaded is never garbage: a collection during an answer skips it

    def handle(self, conn) -> bool:
        """One caller; False when the server should stop."""
        request = caller_request(conn)
        if request is None:
            return True
        pid, fields = request
        op = fields[0] if fields else b""
        control = control_reply(conn, op, wire.MAGIC, self.status)
        if control is not None:
            return control
        if op != wire.MAGIC + b" run" or fields[1] != self.identity or context_of(pid) != self.context \
                or self.context is None:
            conn.sendall(b"N")  # another interpreter, other limits, another file system: the caller runs it itself
            return True
        if self.loaded.changed():
            conn.sendall(b"S")  # the caller runs it in its own process, and starts a server of the new files
            return False
        request = Request(fields[2:])
        try:
            os.chdir(request.cwd)
        except OSError:
            conn.sendall(b"N")
            return True
        conn.sendall(b"A")
        fds = go_ahead(conn, 2)
        if fds is None:
            return True  # the caller stopped waiting (and runs it itself): nothing is run here
        with _CallerWatch(conn):
            status, go_on = _run(self.run, request, *fds)
        self.status["answered"] += 1
        self.last = time.monotonic()
        self.loaded.add_modules()
        conn.sendall(b"R%d" % status)
        return go_on


def caller_request(conn) -> tuple[int, list] | None:
    """(the caller's pid, the fields of its request); None for a caller of another user, who gets no answer."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.getuid():
        return None
    return pid, wire.decode(wire.read_frame(conn, b"", wire.MAX_REQUEST))


def control_reply(conn, op: bytes, magic: bytes, status: dict) -> bool | None:
    """The answer to a status or a stop request (whether to go on); None for any other request."""
    if op == magic + b" status":
        conn.sendall(wire.encode([f"{k}={v}".encode() for k, v in status.items()]))
        return True
    if op == magic + b" stop":
        conn.sendall(b"stopping")
        return False
    return None


def go_ahead(conn, count: int) -> list | None:
    """The `count` file descriptors (the caller's streams) that come with its go-ahead; None, and whatever came
    closed, where the caller sent no go-ahead with them (it stopped waiting)."""
    msg, ancillary, _flags, _addr = conn.recvmsg(1, socket.CMSG_SPACE(count * 4))
    fds = [fd for level, kind, data in ancillary if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
           for fd in struct.unpack(f"{len(data) // 4}i", data[:len(data) - len(data) % 4])]
    if msg == b"G" and len(fds) == count:
        return fds
    for fd in fds:
        os.close(fd)
    return None


def context_of(pid) -> tuple | None:
    """What a process's answer depends on beyond its request: its resource limits (a caller under `ulimit -v` gets
    the answer that limit gives) and the file system it sees (its mount namespace and root directory: a caller in
    another container sharing /tmp names other files). None where it cannot be read (another PID namespace)."""
    try:
        with open(f"/proc/{pid}/limits", "rb") as fh:
            limits = fh.read()
        mounts, root = os.stat(f"/proc/{pid}/ns/mnt"), os.stat(f"/proc/{pid}/root")
    except OSError:
        return None
    return limits, mounts.st_ino, root.st_dev, root.st_ino


def ours(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


class _CallerWatch:
    """While a command runs: every WATCH_S, whether its caller is still there (a killed caller's socket hangs up);
    where it is not, BrokenPipeError in the command, as a closed pipe gives it, so that a write blocked on the gone
    caller's full pipe ends and its files are let go."""

    WATCH_S = 0.05

    def __init__(self, conn):
        self.poller = select.poll()
        self.poller.register(conn, select.POLLHUP | select.POLLERR)
        self.active = False

    def __enter__(self):
        self.active = True
        self.before = signal.signal(signal.SIGALRM, self._check)
        signal.setitimer(signal.ITIMER_REAL, self.WATCH_S, self.WATCH_S)
        return self

    def __exit__(self, *exc):
        self.active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.before)

    def _check(self, signum, frame):
        if self.active and any(events & (select.POLLHUP | select.POLLERR) for _fd, events in self.poller.poll(0)):
            raise BrokenPipeError("the caller went away")  # at every tick: a clean-up blocked on the pipe ends too


class Request:
    def __init__(self, fields: list):
        fs = os.fsdecode
        self.cwd = fs(fields[0])
        self.umask = int(fields[1])
        self.out_encoding, self.out_errors, self.err_encoding, self.err_errors = (f.decode() for f in fields[2:6])
        self.argv0 = fs(fields[6])
        n = int(fields[7])
        self.argv = [fs(a) for a in fields[8:8 + n]]
        self.env = dict(fs(e).partition("=")[::2] for e in fields[8 + n:])


def _run(run, request: Request, stdout: int, stderr: int) -> tuple[int, bool]:
    """(the command's exit status, whether the server goes on) with the caller's context in place of its own."""
    for name in [n for n in os.environ if n not in request.env]:
        del os.environ[name]
    for name, value in request.env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    os.umask(request.umask)
    out = open(stdout, "w", encoding=request.out_encoding, errors=request.out_errors, closefd=True)
    err = open(stderr, "w", encoding=request.err_encoding, errors=request.err_errors, closefd=True, buffering=1)
    saved = sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, sys.argv
    sys.stdout = sys.__stdout__ = out
    sys.stderr = sys.__stderr__ = err
    sys.argv = [request.argv0, *request.argv]
    go_on = True
    try:
        status = run(request.argv)
    except SystemExit as exc:  # SIGTERM or SIGHUP to the server while it answered: answer, then stop
        status, go_on = exc.code if isinstance(exc.code, int) else 1, False
    except BaseException:  # what would have been the command's traceback, exit status 1
        traceback.print_exc()
        status = 1
    finally:
        for stream in (out, err):
            try:
                stream.close()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, sys.argv = saved
        os.chdir("/")
    return status, go_on


def _import_required() -> None:
    """The packages every command needs, imported: cli's check for them is then a look into sys.modules, not a
    search of sys.path at every answer (that took 0.4 ms); Loaded watches their files like every module's, so one
    uninstalled stops the server before it answers."""
    from .cli import REQUIRED_PACKAGES  # loaded already: it is what answers

    for module, _pip in REQUIRED_PACKAGES:
        try:
            __import__(module)
        except Exception:  # absent or broken: the command itself says so, answered here as in its own process
            pass


def _run_quietly(run, argv: list) -> None:
    """A command in this process's own context (its folder, environment, streams' encodings), output discarded."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    _run(run, Request(wire.context(argv)[1:]), devnull, os.dup(devnull))  # [1:]: without the identity


class Loaded:
    """The files this process has loaded (the skill's package and templates, every imported module, the
    interpreter) with their state when loaded: changed() says whether any is no longer so. Their folders are
    watched with inotify where it works, so that a check with nothing changed is one read() (else a stat a file)."""

    def __init__(self):
        self.stats = {sys.executable: _stat(sys.executable)}
        self.folders = set()  # the skill's own, empty ones too
        skill = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for top in (os.path.join(skill, "mbridge_overlap"), os.path.join(skill, "templates")):
            for folder, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                self.folders.add(folder)
                self.stats[folder] = _listing(folder)
                for name in files:
                    path = os.path.join(folder, name)
                    self.stats[path] = _stat(path)
        self.modules = 0
        self.watch = _Watch()
        self.add_modules()

    def add_modules(self) -> None:
        if len(sys.modules) == self.modules:
            return
        self.modules = len(sys.modules)
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and path not in self.stats and not _standard_library(path):
                self.stats[path] = _stat(path)
        self.watch.folders(self.folders | {os.path.dirname(p) for p in self.stats})

    def changed(self) -> bool:
        if self.watch.quiet():
            return False
        return any((_listing(path) if path in self.folders else _stat(path)) != was for path, was in self.stats.items())


class _Watch:
    """inotify on folders: quiet() is True only when no event came since the last call, and the folders were
    all watched before the last full check (the first call after new folders is never quiet)."""

    MASK = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800  # modify, attrib, close_write, moves, create, delete, self

    def __init__(self):
        self.fd, self.watched, self.fresh = -1, set(), False
        try:
            import ctypes

            self.libc = ctypes.CDLL(None, use_errno=True)
            self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError, ImportError):
            self.fd = -1

    def folders(self, folders: set) -> None:
        for folder in folders - self.watched:
            if self.fd >= 0 and self.libc.inotify_add_watch(self.fd, os.fsencode(folder), self.MASK) < 0:
                os.close(self.fd)
                self.fd = -1
            self.watched.add(folder)
        self.fresh = False

    def quiet(self) -> bool:
        if self.fd < 0:
            return False
        try:
            while os.read(self.fd, 65536):
                self.fresh = False
        except BlockingIOError:
            pass
        quiet, self.fresh = self.fresh, True
        return quiet


_STDLIB = os.path.dirname(os.__file__) + os.sep


def _standard_library(path: str) -> bool:
    """A module of the interpreter's own library: it changes with the interpreter, whose file is watched."""
    return path.startswith(_STDLIB) and "site-packages" not in path and "dist-packages" not in path


def _listing(folder: str):
    """A folder's entries but __pycache__, which comes and goes (`python -m mbridge_overlap...` writes one before the
    package sends bytecode to the cache, and removes it): a file added, removed or renamed changes it."""
    try:
        return frozenset(os.listdir(folder)) - {"__pycache__"}
    except OSError:
        return None


def _stat(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
