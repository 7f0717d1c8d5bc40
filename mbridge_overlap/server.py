"""The answer server: the quick verbs answered by a process that has already imported and loaded what they need.

A quick verb (resolve, plan, lint, diff, recipes, explain, presets, releases) first asks a server over a Unix socket;
where none answers, the command runs in its own process as always, and then forks a copy of itself that stays as the
server until it has been idle for IDLE_S seconds. The server runs each command with the caller's arguments, working
directory, environment, umask and its very stdout and stderr (passed as file descriptors), and replies with the exit
status, so an answer is the one the caller's own process would give: tests/test_server.py compares them byte for
byte. It serves one interpreter (executable, version, sys.path, flags, locale) of one user: the socket lives in a
folder only that user can enter, and a caller of another uid is refused. It stops at once when a file it has loaded
(the skill, the data, a module) changes, so an edit or an upgrade is never answered by the old code.

Not served (run in their own process, as always): a command reading stdin (`-`), writing --output, or with
MBRIDGE_OVERLAP_SERVER=0 in the environment; a caller under other resource limits or in another mount namespace or
root than the server's; one that waited ACCEPT_S for a busy server; any other verb; a platform without fork and Unix
sockets (not Linux).

This module runs before anything else is imported: it uses only os, sys and _socket (mbridge_overlap.launch
starts a server, mbridge_overlap.serving is its loop).
"""

import os
import sys

QUICK = frozenset({"resolve", "plan", "lint", "diff", "recipes", "explain", "presets", "releases"})
SWITCH = "MBRIDGE_OVERLAP_SERVER"  # =0: never ask or start a server
IDLE_S = 600.0  # MBRIDGE_OVERLAP_SERVER_IDLE_S overrides it (at least 1)
ACCEPT_S = 2.0  # a caller waits this long for a busy server to take its command, then runs it itself
MAGIC = b"mbridge-overlap-server/2"  # in identity(), so a server of another protocol is never asked
MAX_REQUEST = 1 << 22
_SKILL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LOCALE_VARS = ("LANG", "LC_ALL", "LC_CTYPE")


# --- the client: before any import ------------------------------------------------------------------------------


def answer(argv: list) -> "tuple[int | None, bool]":
    """(the exit status of the command as a server ran it, or None where none did: run it here; whether a server runs
    that stays, so that none is to be started: one busy with another caller, or one that declined this one)."""
    if not servable(argv):
        return None, False
    path = socket_path(create=False)
    if path is None:
        return None, False
    try:
        import _socket
    except ImportError:
        return None, False
    _end_on_signals()
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(ACCEPT_S)  # connect too: a stuck server's full backlog never blocks a caller
            sock.connect(path)
            request = encode([encode([MAGIC + b" run", *context(argv)])])  # one netstring: its length comes first
            fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (sys.stdout.fileno(), sys.stderr.fileno()))
            sock.sendall(request)
            accepted = sock.recv(1)
            sock.settimeout(None)
            if accepted == b"A":
                # only now does the server run it: a caller that gave up is never answered twice; and only now do its
                # streams go, so that one that gave up on a busy server leaves them in no queue (its reader would wait)
                sock.sendmsg([b"G"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        except TimeoutError:  # a server busy with another caller: this one runs here
            return None, True
        except (OSError, ValueError):
            return None, False
        if accepted != b"A":  # N: declined (it stays), S: its files changed (it stops), b"": gone. Nothing written
            return None, accepted == b"N"
        try:
            reply = recv_all(sock, 64)
        except KeyboardInterrupt:
            print("mbridge-overlap: interrupted", file=sys.stderr)
            return 130, True
        except OSError:
            reply = b""
    finally:
        sock.close()
    if reply[:1] == b"R" and reply[1:].isdigit():
        return int(reply[1:]), True
    print(f"mbridge-overlap: error: the answer server stopped before it finished; run the command again with {SWITCH}=0",
          file=sys.stderr)
    return 2, False


def _end_on_signals() -> None:
    """SIGTERM and SIGHUP end the waiting caller with 128 + the signal, as they end a command run in its process."""
    import _signal

    def handler(signum, frame):
        _signal.signal(signum, _signal.SIG_DFL)
        raise SystemExit(128 + signum)

    for name in ("SIGTERM", "SIGHUP"):
        _signal.signal(getattr(_signal, name), handler)


def servable(argv: list) -> bool:
    if os.environ.get(SWITCH, "1").strip() == "0" or not sys.platform.startswith("linux") or not argv:
        return False
    if argv[0] not in QUICK or sys.stdout is None or sys.stderr is None:
        return False
    if any(a == "-" or a.endswith("=-") or a.startswith("--o") for a in argv):
        return False  # stdin, or --output (argparse takes any prefix of it): the command's own process does these
    try:
        sys.stdout.fileno(), sys.stderr.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    return True


def identity() -> bytes:
    """What makes one interpreter's answers: a server answers only callers with the same."""
    parts = [MAGIC.decode(), sys.executable, sys.version, repr(sys.flags), sys.getfilesystemencoding(), _SKILL_DIR, *sys.path,
             *(f"{k}={os.environ.get(k, '')}" for k in _LOCALE_VARS)]
    return "\0".join(parts).encode("utf-8", "surrogateescape")


def socket_path(create: bool) -> "str | None":
    """The socket of this interpreter's server, in a folder of this user's that nobody else can enter; None where
    that folder is not so (or the path would be too long for a Unix socket)."""
    return private_socket(f"{socket_key(identity()):016x}.sock", create)


def socket_key(data: bytes) -> int:
    """A socket's name for `data` (64 bits of it)."""
    return int.from_bytes(data, "little") % 0xFFFFFFFFFFFFFFC5  # the largest prime below 2**64


def private_socket(name: str, create: bool) -> "str | None":
    """`name` in this user's folder of sockets (verify's Bridge holder keeps its own there too); None where that
    folder is not one only this user can enter, or the path would be too long for a Unix socket."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    folder = os.path.join(runtime, "mbridge-overlap") if os.path.isabs(runtime) else f"/tmp/mbridge-overlap-{os.getuid()}"
    if create:
        try:
            os.mkdir(folder, 0o700)
        except OSError:
            pass
    try:
        st = os.lstat(folder)
    except OSError:
        return None
    if (st.st_mode & 0o170000) != 0o040000 or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    path = os.path.join(folder, name)
    return path if len(path.encode()) < 100 else None


def context(argv: list) -> list:
    """What a command's answer depends on besides the files it reads, in the order serving.Request reads it."""
    cwd = os.getcwd()
    umask = os.umask(0o022)
    os.umask(umask)
    streams = [s.encode() for s in (sys.stdout.encoding, sys.stdout.errors, sys.stderr.encoding, sys.stderr.errors)]
    fs = os.fsencode
    return [identity(), fs(cwd), str(umask).encode(), *streams, fs(sys.argv[0]), str(len(argv)).encode(),
            *map(fs, argv), *(fs(k) + b"=" + fs(v) for k, v in os.environ.items())]


def control(action: str) -> dict:
    """This interpreter's server: its state ("status"), or that state after it was asked to stop ("stop")."""
    path = socket_path(create=False)
    out = {"enabled": os.environ.get(SWITCH, "1").strip() != "0", "socket": path, "running": False}
    if path is None:
        return out
    try:
        reply = ask(path, MAGIC, action)
    except OSError:
        return out
    if action == "stop":
        return {**out, "stopped": reply == b"stopping"}
    numbers = status_of(reply, ("pid", "started", "answered", "idle_s"))
    return out if numbers is None else {**out, "running": True, **numbers}


def ask(path: str, magic: bytes, action: str) -> bytes:
    """The reply of the server on `path` to a "status" or "stop" request (verify's holder takes them too); OSError
    where none answers within 5 s (TimeoutError: one took the request and is busy)."""
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(encode([encode([magic + (b" stop" if action == "stop" else b" status")])]))
        return recv_all(sock, 1 << 16)
    finally:
        sock.close()


def status_of(reply: bytes, keys: tuple) -> "dict | None":
    """The numbers of a status reply, every one of `keys`; None where it is no reply a server gives (it was stopping,
    or is not ours)."""
    try:
        fields = dict(f.decode().partition("=")[::2] for f in decode(reply))
        numbers = {k: float(v) if "." in v else int(v) for k, v in fields.items() if k in keys}
    except ValueError:
        return None
    return numbers if len(numbers) == len(keys) else None


# --- the messages: netstrings (`<length>:<bytes>,`), which need no import to read or write -------------------------


def encode(fields: list) -> bytes:
    return b"".join(b"%d:%s," % (len(f), f) for f in fields)


def decode(data: bytes) -> list:
    """The fields of a message; ValueError where it is not a whole sequence of netstrings."""
    fields, i = [], 0
    while i < len(data):
        colon = data.index(b":", i, i + 12)
        digits = data[i:colon]
        if not digits.isdigit():
            raise ValueError("malformed message")
        end = colon + 1 + int(digits)
        if data[end:end + 1] != b",":
            raise ValueError("malformed message")
        fields.append(data[colon + 1:end])
        i = end + 1
    return fields


def read_frame(sock, data: bytes, limit: int) -> bytes:
    """The payload of the one netstring a peer sends (`data`: what was read of it already); ValueError where it is
    not one, or longer than `limit`."""
    while b":" not in data[:12]:
        chunk = sock.recv(64)
        if not chunk or len(data) >= 12:
            raise ValueError("malformed message")
        data += chunk
    digits, _, data = data.partition(b":")
    if not digits.isdigit() or int(digits) > limit:
        raise ValueError("malformed message")
    need = int(digits) + 1
    while len(data) < need:
        chunk = sock.recv(min(65536, need - len(data)))
        if not chunk:
            raise ValueError("cut message")
        data += chunk
    if data[need - 1:need] != b"," or len(data) > need:
        raise ValueError("malformed message")
    return data[:-1]


def recv_all(sock, limit: int) -> bytes:
    """What the peer sends until it shuts its side (at most a chunk past `limit`)."""
    chunks, size = [], 0
    while size <= limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
