"""Faults around ``redismem serve``, made to real processes: the server's own
``redis-server`` (AOF, fsync always) SIGKILLed and restarted on the same port,
SIGSTOPped, its connections killed or their replies lost (a proxy in front of
Redis); the server SIGTERMed with requests in flight; hostile requests; keys
of one namespace on every route of another.

What holds through all of it: every answer is a real one (a 2xx, a 4xx, or a
503 with ``Retry-After`` naming the write id of an append; never a 500, a hang
past the retry policy's bound or a dropped connection), the server recovers
by itself, a write retried with its ``Idempotency-Key`` is stored exactly
once, and a refused request changes nothing.

The module's Redis is its own (never the suite's shared one); one server
process serves two namespaces for most tests, each test with its own users.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from conftest import NO_SERVER, REDIS_BIN, TEST_URL_ENV, RedisServer, start_redis_server
from helpers import client_kill_storm
from server_support import CLI, ROOT, RunningServer, forget, new_id, start_server
from worker_support import worker_env

from redismem import Memory
from redismem.config import MemoryConfig
from redismem.core.keys import KeyLayout
from redismem.longterm.records import Fact

pytestmark = [pytest.mark.processes, pytest.mark.redis]  # a redis-server of its own

AOF = ("--appendonly", "yes", "--appendfsync", "always")
#: Longest a request may take while Redis is away: the server's retry policy
#: (a ``Memory`` with its default options) gives up within its bound; the
#: rest is slack for a loaded machine.
BOUND = MemoryConfig(url="redis://127.0.0.1:6379/0").policy.bound() + 5.0
#: Statuses a request may get while Redis restarts.
DURING_A_FAULT = {200, 201, 503}


# -- fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A ``redis-server`` of this module's own (AOF, fsync always): the tests
    kill, restart and stall it."""
    if REDIS_BIN is None:
        if os.environ.get(TEST_URL_ENV):
            pytest.skip(f"needs a redis-server binary ({NO_SERVER})")
        pytest.fail(NO_SERVER, pytrace=False)
    server = start_redis_server(tmp_path_factory.mktemp("faults-redis"), extra_args=AOF)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def module_server(
    own_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    server = start_server(own_redis.url, tmp_path_factory.mktemp("faults-serve"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(module_server: RunningServer, own_redis: RedisServer) -> Iterator[RunningServer]:
    """The module's server on the module's Redis, for one test: Redis runs
    (resumed, restarted if a test left it down) before and after, and every
    key of the server's namespaces is deleted after."""
    _redis_up(own_redis)
    if not module_server.alive:
        pytest.fail(f"the module's server died:\n{module_server.log()[-4000:]}")
    yield module_server
    _redis_up(own_redis)
    forget(own_redis.url, module_server.namespaces)


def _redis_up(server: RedisServer) -> None:
    if server.process.poll() is None:
        server.resume()
    else:
        server.restart()


@dataclass
class CliWorker:
    """One ``redismem worker`` process (it rides out Redis restarts)."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def worker(server: RunningServer, tmp_path: Path) -> Iterator[CliWorker]:
    """A worker of the server's namespaces and queue, stopped after the test."""
    env = worker_env(server.redis_url, ",".join(server.namespaces), server.queue_name)
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*CLI, "worker", "--name", f"faults-{uuid.uuid4().hex[:6]}"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started = CliWorker(process, log_path)
    try:
        yield started
    finally:
        started.stop()


# -- helpers -------------------------------------------------------------------------


def messages_path(user: str, session: str) -> str:
    return f"/users/{user}/sessions/{session}/messages"


def body(content: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}]}


def contents(client: httpx.Client, user: str, session: str) -> list[str]:
    response = client.get(messages_path(user, session))
    assert response.status_code == 200, response.text
    return [m["content"] for m in response.json()["messages"]]


def until(check: Any, *, within: float, what: str, step: float = 0.1) -> Any:
    """``check()`` until it is truthy (returned), at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {within} s waiting for {what}"
        time.sleep(step)


def user_snapshot(url: str, namespace: str, user: str) -> dict[bytes, tuple[bytes | None, bool]]:
    """``key -> (DUMP, has a TTL)`` of every key of one user of ``namespace``
    (SCAN on the user's own prefix)."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        pattern = KeyLayout(namespace).user_tag_prefix(user) + "*"
        return {
            key: (client.dump(key), client.pttl(key) > 0)
            for key in sorted(client.scan_iter(match=pattern, count=1000))
        }
    finally:
        client.close()


def settled_snapshot(url: str, namespace: str, user: str) -> dict[bytes, tuple[bytes | None, bool]]:
    """The user's snapshot once two looks 0.2 s apart agree (a write's job
    is enqueued just after its response)."""
    last = user_snapshot(url, namespace, user)
    for _ in range(25):
        time.sleep(0.2)
        now = user_snapshot(url, namespace, user)
        if now == last:
            return now
        last = now
    raise AssertionError("the user's keys kept changing")


@dataclass
class Outcome:
    what: str
    status: int | None  # None: no answer (the connection dropped, a timeout)
    seconds: float
    detail: str = ""
    retry_after: str | None = None


@dataclass
class Ledger:
    """Every request made during a fault, and what came of it."""

    outcomes: list[Outcome] = field(default_factory=list)

    def add(self, what: str, started: float, response: httpx.Response | Exception) -> None:
        seconds = time.monotonic() - started
        if isinstance(response, Exception):
            self.outcomes.append(Outcome(what, None, seconds, repr(response)))
        else:
            self.outcomes.append(
                Outcome(
                    what,
                    response.status_code,
                    seconds,
                    response.text[:300],
                    response.headers.get("retry-after"),
                )
            )

    def statuses(self, what: str | None = None) -> Counter[int | None]:
        return Counter(o.status for o in self.outcomes if what is None or o.what == what)

    def bad(self) -> list[Outcome]:
        """Answers other than 2xx or a 503 with ``Retry-After``, no answer,
        or an answer later than ``BOUND``."""
        return [
            o
            for o in self.outcomes
            if o.status not in DURING_A_FAULT
            or (o.status == 503 and not o.retry_after)
            or o.seconds > BOUND
        ]


def differences(stored: Counter[str], written: Counter[str]) -> dict[str, tuple[int, int]]:
    """``content -> (times stored, times written)`` where they differ."""
    return {c: (stored[c], written[c]) for c in stored | written if stored[c] != written[c]}


def check_503(response: httpx.Response, sent_key: str | None) -> str:
    """A 503 of an append as the design says: ``Retry-After``, the write id
    in the body and the ``Idempotency-Key`` header (the one sent, if any)."""
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()["error"]
    assert error["type"] in ("BackendUnavailable", "ClientClosed"), error
    write_id: str = error["write_id"]
    assert write_id and response.headers["idempotency-key"] == write_id, (error, response.headers)
    if sent_key is not None:
        assert write_id == sent_key
    return write_id


async def append_exactly_once(
    client: httpx.AsyncClient,
    ledger: Ledger,
    user: str,
    session: str,
    content: str,
    *,
    key: str | None = None,
    within: float = 60.0,
) -> dict[str, Any] | None:
    """The README's recipe over HTTP: append; on a 503 wait a little and send
    it again with the write id it names, until it is stored. None if an
    answer was neither (the ledger says which)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        started = time.monotonic()
        headers = {"Idempotency-Key": key} if key else {}
        try:
            response = await client.post(
                messages_path(user, session), json=body(content), headers=headers
            )
        except httpx.HTTPError as exc:
            ledger.add("append", started, exc)
            return None
        ledger.add("append", started, response)
        if response.status_code == 201:
            entry: dict[str, Any] = response.json()
            return entry
        if response.status_code != 503:
            return None
        try:
            key = check_503(response, key)
        except (AssertionError, KeyError, ValueError) as exc:
            ledger.add("append-503-body", started, exc)
            return None
        await asyncio.sleep(0.1)
    return None


# -- 1. Redis restarts ------------------------------------------------------------


async def test_the_server_answers_through_redis_restarts_and_recovers_by_itself(
    server: RunningServer, own_redis: RedisServer, worker: CliWorker
) -> None:
    pid = server.process.pid
    ready = await asyncio.to_thread(
        until,
        lambda: httpx.get(f"{server.base_url}/readyz", timeout=5).status_code == 200,
        within=30,
        what="/readyz before the restarts",
    )
    assert ready, worker.log()
    user = new_id()
    ledger = Ledger()
    written: list[str] = []
    stop = asyncio.Event()

    async with httpx.AsyncClient(
        base_url=server.api(), headers=server.headers(), timeout=BOUND + 10
    ) as client:

        async def appender(n: int) -> None:
            session = f"s{n % 2}"
            i = 0
            while not stop.is_set():
                content = f"w{n}-{i}"
                i += 1
                # Half the appenders name their writes, half let the server draw ids.
                key = f"{user}-{content}" if n % 2 else None
                if await append_exactly_once(client, ledger, user, session, content, key=key):
                    written.append(content)
                else:
                    return

        async def reader() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    response = await client.get(messages_path(user, "s0"), params={"limit": 5})
                except httpx.HTTPError as exc:
                    ledger.add("read", started, exc)
                    return
                ledger.add("read", started, response)
                await asyncio.sleep(0.02)

        async def prober() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    response = await client.get(f"{server.base_url}/readyz")
                except httpx.HTTPError as exc:
                    ledger.add("readyz", started, exc)
                    return
                ledger.add("readyz", started, response)
                await asyncio.sleep(0.2)

        async def restarts() -> None:
            for _ in range(2):
                await asyncio.sleep(0.7)
                own_redis.kill()
                await asyncio.sleep(1.5)
                await asyncio.to_thread(own_redis.restart)
            await asyncio.sleep(0.7)
            stop.set()

        tasks = [appender(n) for n in range(6)] + [reader(), reader(), prober()]
        await asyncio.wait_for(asyncio.gather(restarts(), *tasks), timeout=60)

        assert not ledger.bad(), (ledger.bad()[:5], ledger.statuses())
        assert ledger.statuses("append")[503] > 0, ledger.statuses()  # it saw the restarts
        assert ledger.statuses("read")[503] > 0, ledger.statuses()
        assert ledger.statuses("readyz")[503] > 0, ledger.statuses()

        # Recovered by itself: the same process answers, and is ready again.
        assert server.alive and server.process.pid == pid
        after = await append_exactly_once(client, ledger, user, "s0", "after")
        assert after is not None and ledger.outcomes[-1].status == 201, ledger.outcomes[-3:]
        written.append("after")
    await asyncio.to_thread(
        until,
        lambda: httpx.get(f"{server.base_url}/readyz", timeout=5).status_code == 200,
        within=30,
        what="/readyz after the restarts",
    )
    assert worker.process.poll() is None, worker.log()

    with server.client() as sync:
        stored = Counter(contents(sync, user, "s0") + contents(sync, user, "s1"))
    assert stored == Counter(written), differences(stored, Counter(written))
    assert "Traceback" not in server.log(), server.log()[-4000:]


# -- 2. a retried append is stored exactly once -------------------------------------


class ReplyEater:
    """A TCP proxy in front of Redis. While ``eating`` is set it passes every
    request on but swallows the replies and drops the connection: the
    command ran, and whoever sent it never learns so."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.eating = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            self._sockets += [client, upstream]
            for source, sink, replies in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(source, sink, replies), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if replies and self.eating.is_set():
                    break  # swallowed: drop both sides
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for end in self._sockets:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def eater_server(
    own_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, ReplyEater]]:
    """A server of its own, reaching the module's Redis through a ``ReplyEater``."""
    _redis_up(own_redis)
    eater = ReplyEater(own_redis.port)
    started = start_server(eater.url, tmp_path_factory.mktemp("faults-eaten"))
    try:
        yield started, eater
    finally:
        eater.eating.clear()
        started.stop()
        eater.close()
        forget(own_redis.url, started.namespaces)


@pytest.mark.parametrize("named", [False, True], ids=["server-drawn-id", "client-key"])
def test_an_append_whose_reply_is_lost_is_503_and_its_retry_is_stored_once(
    eater_server: tuple[RunningServer, ReplyEater], named: bool
) -> None:
    server, eater = eater_server
    user, session = new_id(), new_id("s")
    with server.client(timeout=BOUND + 10) as client:
        first = client.post(messages_path(user, session), json=body("before"))
        assert first.status_code == 201, first.text  # connected, scripts loaded
        sent_key = f"key-{uuid.uuid4().hex}" if named else None
        headers = {"Idempotency-Key": sent_key} if sent_key else {}
        eater.eating.set()
        try:
            started = time.monotonic()
            lost = client.post(messages_path(user, session), json=body("lost"), headers=headers)
            took = time.monotonic() - started
        finally:
            eater.eating.clear()
        write_id = check_503(lost, sent_key)
        assert took <= BOUND, took
        # The first attempt landed: the server's call failed after Redis ran it.
        assert until(
            lambda: contents(client, user, session) == ["before", "lost"],
            within=BOUND,
            what="the lost write read back",
        )
        retries = [
            client.post(
                messages_path(user, session),
                json=body("lost"),
                headers={"Idempotency-Key": write_id},
            )
            for _ in range(2)
        ]
        assert [r.status_code for r in retries] == [201, 201], [r.text for r in retries]
        assert retries[0].json() == retries[1].json()
        assert contents(client, user, session) == ["before", "lost"]
    assert "Traceback" not in server.log(), server.log()[-4000:]


def test_an_append_retried_while_redis_is_stalled_is_stored_once(
    server: RunningServer, own_redis: RedisServer
) -> None:
    user, session = new_id(), new_id("s")
    key = f"key-{uuid.uuid4().hex}"
    url = f"{server.api()}{messages_path(user, session)}"
    headers = {**server.headers(), "Idempotency-Key": key}
    with server.client(timeout=BOUND + 10) as client:
        assert client.post(messages_path(user, session), json=body("before")).status_code == 201
        own_redis.pause()
        try:
            # The client gives up on its request (the server's call is sent,
            # waiting on Redis), sends it again, gives up again.
            for _ in range(2):
                with pytest.raises(httpx.ReadTimeout):
                    httpx.post(url, json=body("stalled"), headers=headers, timeout=0.8)
        finally:
            own_redis.resume()
        # The requests the client gave up on land once Redis answers...
        assert until(
            lambda: contents(client, user, session) == ["before", "stalled"],
            within=BOUND,
            what="the stalled write read back",
        )
        # ... and a third try with the key gets that entry back, storing nothing.
        retried = client.post(
            messages_path(user, session), json=body("stalled"), headers={"Idempotency-Key": key}
        )
        assert retried.status_code == 201, retried.text
        assert contents(client, user, session) == ["before", "stalled"]
        entries = client.get(f"/users/{user}/sessions/{session}/entries").json()["entries"]
        assert len(entries) == 2 and entries[1]["id"] == retried.json()["id"]


async def test_appends_through_a_client_kill_storm_are_stored_exactly_once(
    server: RunningServer, own_redis: RedisServer
) -> None:
    user = new_id()
    ledger = Ledger()
    written: list[str] = []
    async with httpx.AsyncClient(
        base_url=server.api(), headers=server.headers(), timeout=BOUND + 10
    ) as client:

        async def appender(n: int) -> None:
            for i in range(25):
                content = f"k{n}-{i}"
                key = f"{user}-{content}" if n % 2 else None
                if await append_exactly_once(client, ledger, user, "s", content, key=key):
                    written.append(content)

        async with client_kill_storm(own_redis.url, every=0.03) as kills:
            await asyncio.wait_for(asyncio.gather(*(appender(n) for n in range(4))), 60)
        assert kills[0] > 5
        assert not ledger.bad(), (ledger.bad()[:5], ledger.statuses())
        assert len(written) == 100, ledger.statuses()
        response = await client.get(messages_path(user, "s"))
    stored = Counter(m["content"] for m in response.json()["messages"])
    assert stored == Counter(written), differences(stored, Counter(written))


# -- 3. SIGTERM drains --------------------------------------------------------------


def accepted(port: int) -> int:
    """How many established TCP connections the process listening on
    ``port`` holds (Linux: ``/proc/net/tcp``)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                local, _remote, state = line.split()[1:4]
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


def test_sigterm_drains_requests_in_flight_refuses_new_ones_and_exits_0(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    _redis_up(own_redis)
    timeout = 15
    server = start_server(
        own_redis.url, tmp_path / "drained", extra_args=("--shutdown-timeout", str(timeout))
    )
    user, session = new_id(), new_id("s")
    url = f"{server.api()}{messages_path(user, session)}"
    headers = server.headers()
    try:
        with server.client() as client:
            assert client.post(messages_path(user, session), json=body("before")).status_code == 201
        with ThreadPoolExecutor(8) as pool:
            # No worker runs: the flush waits its whole timeout.
            flush = pool.submit(
                httpx.post,
                f"{server.api()}/flush",
                json={"user_id": user, "timeout": 3},
                headers=headers,
                timeout=30,
            )
            time.sleep(0.3)
            own_redis.pause()  # the appends and the read wait on Redis
            appends = [
                pool.submit(
                    httpx.post,
                    url,
                    json=body(f"in flight {i}"),
                    headers={**headers, "Idempotency-Key": f"{user}-{i}"},
                    timeout=30,
                )
                for i in range(4)
            ]
            read = pool.submit(httpx.get, url, headers=headers, timeout=30)
            until(
                lambda: accepted(server.port) >= 6,
                within=10,
                what="the six requests reaching the server",
                step=0.05,
            )
            time.sleep(0.2)  # their bodies (a few bytes after the connection)
            terminated = time.monotonic()
            server.process.send_signal(signal.SIGTERM)

            def refused() -> bool:
                try:
                    httpx.get(f"{server.base_url}/healthz", timeout=2)
                except httpx.ConnectError:
                    return True
                return False

            until(refused, within=5, what="new connections refused", step=0.05)
            assert server.alive  # still draining
            own_redis.resume()
            answers = [a.result(timeout=30) for a in appends]
            read_answer = read.result(timeout=30)
            flush_answer = flush.result(timeout=30)
        assert [a.status_code for a in answers] == [201] * 4, [a.text for a in answers]
        assert [a.json()["messages"][0]["content"] for a in answers] == [
            f"in flight {i}" for i in range(4)
        ]
        assert read_answer.status_code == 200, read_answer.text
        assert read_answer.json()["messages"][0]["content"] == "before"
        assert flush_answer.status_code == 200 and flush_answer.json() == {"done": False}
        code = server.process.wait(timeout=timeout + 10)
        took = time.monotonic() - terminated
        assert code == 0, server.log()[-4000:]
        assert took <= timeout, took
        assert "Traceback" not in server.log(), server.log()[-4000:]

        async def stored() -> list[str]:
            async with await Memory.connect(own_redis.url, namespace=server.a) as mem:
                return [m.content for m in await mem.read(session_id=session, user_id=user)]

        assert sorted(asyncio.run(stored())) == sorted(
            ["before", *(f"in flight {i}" for i in range(4))]
        )
    finally:
        own_redis.resume()
        server.stop()
        forget(own_redis.url, server.namespaces)


def test_requests_still_running_when_the_shutdown_timeout_ends_are_503_to_retry_elsewhere(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    """uvicorn cancels what still runs when ``--shutdown-timeout`` ends: each
    such request gets a 503 with ``Retry-After`` (a write's with its write
    id: the one sent, else one the server drew), never uvicorn's 500, and the
    retries sent to another server with those ids are stored exactly once."""
    _redis_up(own_redis)
    timeout = 1.0
    server = start_server(
        own_redis.url, tmp_path / "cut", extra_args=("--shutdown-timeout", str(timeout))
    )
    replica: RunningServer | None = None
    user, session = new_id(), new_id("s")
    path = messages_path(user, session)
    url = f"{server.api()}{path}"
    headers = server.headers()
    key = f"key-{uuid.uuid4().hex}"
    raw = json.dumps(body("slow body")).encode()
    head = (
        f"POST {server.api().removeprefix(server.base_url)}{path} HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAuthorization: Bearer {server.key()}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
    ).encode()
    try:
        with server.client() as client:
            assert client.post(path, json=body("before")).status_code == 201
        with ThreadPoolExecutor(4) as pool:
            own_redis.pause()  # the appends and the read wait on Redis
            drawn = pool.submit(httpx.post, url, json=body("drawn"), headers=headers, timeout=30)
            named = pool.submit(
                httpx.post,
                url,
                json=body("named"),
                headers={**headers, "Idempotency-Key": key},
                timeout=30,
            )
            read = pool.submit(httpx.get, url, headers=headers, timeout=30)
            # A write whose body is still coming: cancelled before the route ran.
            slow = pool.submit(raw_request, server.port, head, iter([raw[:10]]))
            until(
                lambda: accepted(server.port) >= 4,
                within=10,
                what="the four requests reaching the server",
                step=0.05,
            )
            time.sleep(0.3)
            server.process.send_signal(signal.SIGTERM)
            answers = [f.result(timeout=30) for f in (drawn, named, read)]
            slow_answer = slow.result(timeout=30)
        own_redis.resume()
        drawn_id = check_503(answers[0], None)
        assert check_503(answers[1], key) == key
        assert answers[2].status_code == 503, answers[2].text
        assert int(answers[2].headers["retry-after"]) >= 1
        assert "write_id" not in answers[2].json()["error"]  # a read: nothing to name
        status_line, _, rest = slow_answer.partition(b"\r\n")
        assert status_line.startswith(b"HTTP/1.1 503 "), slow_answer[:300]
        slow_head, _, slow_body = rest.partition(b"\r\n\r\n")
        assert b"retry-after: 1" in slow_head.lower(), slow_head
        slow_id = json.loads(slow_body)["error"]["write_id"]
        assert slow_id and slow_id not in (drawn_id, key)
        assert server.process.wait(timeout=30) == 0, server.log()[-4000:]
        logged = server.log()
        assert "Traceback" not in logged and "Exception in ASGI" not in logged, logged[-4000:]

        # Another replica takes the retries: each write stored once.
        replica = start_server(
            own_redis.url,
            tmp_path / "replica",
            namespaces=server.namespaces,
            queue_name=server.queue_name,
        )
        with replica.client() as client:
            for content, write_id in (("drawn", drawn_id), ("named", key), ("slow body", slow_id)):
                for _ in range(2):
                    retried = client.post(
                        path, json=body(content), headers={"Idempotency-Key": write_id}
                    )
                    assert retried.status_code == 201, retried.text
            assert sorted(contents(client, user, session)) == sorted(
                ["before", "drawn", "named", "slow body"]
            )
    finally:
        own_redis.resume()
        server.stop()
        if replica is not None:
            replica.stop()
        forget(own_redis.url, server.namespaces)


# -- 4. hostile input -----------------------------------------------------------------


@dataclass
class Victim:
    """A user of the server's first namespace with a session of two entries,
    and a snapshot of every key of that user."""

    server: RunningServer
    user: str
    session: str
    before: dict[bytes, tuple[bytes | None, bool]]
    #: How long the server's log was when the test began.
    log_from: int = 0

    @property
    def path(self) -> str:
        return messages_path(self.user, self.session)

    def assert_unchanged(self) -> None:
        """The user's keys are as they were, and the server still answers."""
        assert self.server.alive, self.server.log()[-4000:]
        after = user_snapshot(self.server.redis_url, self.server.a, self.user)
        assert after == self.before, sorted(set(after) ^ set(self.before))
        assert httpx.get(f"{self.server.base_url}/healthz", timeout=10).status_code == 200
        logged = self.server.log()[self.log_from :]
        assert "Traceback" not in logged, logged[-4000:]
        with self.server.client() as client:
            assert contents(client, self.user, self.session) == ["one", "two"]


@pytest.fixture
def victim(server: RunningServer) -> Victim:
    user, session = new_id(), new_id("s")
    with server.client() as client:
        for content in ("one", "two"):
            response = client.post(
                messages_path(user, session), json={**body(content), "tags": {"k": "v"}}
            )
            assert response.status_code == 201, response.text
    before = settled_snapshot(server.redis_url, server.a, user)
    return Victim(server, user, session, before, log_from=len(server.log()))


def assert_refused(response: httpx.Response, *statuses: int) -> None:
    assert response.status_code in statuses, (response.status_code, response.text[:500])
    assert response.json()["error"]["type"], response.text[:500]


TEN_MB = 10 * 1024 * 1024


def ten_mb_chunks() -> Iterator[bytes]:
    yield b'{"messages": [{"role": "user", "content": "'
    for _ in range(TEN_MB // 65536):
        yield b"y" * 65536
    yield b'"}]}'


def raw_request(port: int, head: bytes, chunks: Iterator[bytes]) -> bytes:
    """Send one request by hand (the head, then the chunks, as fast as the
    server takes them) and return what the server answers before it closes
    the connection or goes quiet for 5 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:

        def send() -> None:
            with contextlib.suppress(OSError):
                sock.sendall(head)
                for chunk in chunks:
                    sock.sendall(chunk)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        received = b""
        with contextlib.suppress(OSError):
            while data := sock.recv(65536):
                received += data
        sock.close()
        sender.join(timeout=10)
    return received


@pytest.mark.parametrize("told", ["declared", "chunked", "lying"])
def test_ten_mb_of_json_is_refused_however_its_length_is_told_and_changes_nothing(
    victim: Victim, told: str
) -> None:
    server = victim.server
    if told == "declared":
        big = b"".join(ten_mb_chunks())
        with server.client() as client:
            response = client.post(
                victim.path, content=big, headers={"Content-Type": "application/json"}
            )
        assert_refused(response, 413)
    elif told == "chunked":
        with server.client() as client:
            response = client.post(
                victim.path, content=ten_mb_chunks(), headers={"Content-Type": "application/json"}
            )
        assert_refused(response, 413)
    else:
        # Content-Length says 100 bytes and 10 MB follow: the server reads
        # 100 bytes of a body that is not JSON, and the rest is no request.
        head = (
            f"POST {server.api().removeprefix(server.base_url)}{victim.path} HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\nAuthorization: Bearer {server.key()}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        ).encode()
        answer = raw_request(server.port, head, ten_mb_chunks())
        status = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
        assert status is not None, answer[:300]
        assert 400 <= int(status.group(1)) < 500, answer[:300]
    victim.assert_unchanged()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def with_value(document: dict[str, Any], value: str) -> str:
    """``document`` as JSON text, its ``"@"`` replaced by ``value`` (JSON text)."""
    text = json.dumps(document)
    assert text.count('"@"') == 1
    return text.replace('"@"', value)


@pytest.mark.parametrize("depth", [100_000, 5_000, 990])
@pytest.mark.parametrize("where", ["body", "metadata", "arguments", "search-filter"])
def test_deep_nesting_is_a_4xx_never_a_500_and_changes_nothing(
    victim: Victim, where: str, depth: int
) -> None:
    value = nested(depth)
    path = victim.path
    if where == "body":
        raw = value
    elif where == "metadata":
        raw = with_value({"messages": [{"role": "user", "content": "x", "metadata": "@"}]}, value)
    elif where == "arguments":
        call = {"id": "c", "name": "n", "arguments": {"a": "@"}}
        raw = with_value({"messages": [{"role": "assistant", "tool_calls": [call]}]}, value)
    else:
        path = "/store/search"
        raw = with_value({"prefix": [victim.user], "filter": {"a": "@"}}, value)
    with victim.server.client() as client:
        response = client.post(
            path, content=raw.encode(), headers={"Content-Type": "application/json"}
        )
    assert_refused(response, 400, 422)
    victim.assert_unchanged()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
        b'{"messages": [{"role": "user", "content": "ok"}], "agent_name": "\xc3\x28"}',
        b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',  # an encoded surrogate
        b'{"messages": [{"role": "user", "content": "\xf8\x88\x80\x80\x80"}]}',  # 5 bytes
        b'{"messages": [{"role": "user", "content": "cut \xe2\x82"}]}',
        json.dumps(body("in utf-16")).encode("utf-16"),
        b'{"messages": [{"role": "user", "content": "ends cut"}]}\xe2\x82',
    ],
    ids=["ff-fe", "bad-continuation", "surrogate", "five-bytes", "truncated", "utf-16", "tail"],
)
def test_invalid_utf8_is_400_and_changes_nothing(victim: Victim, raw: bytes) -> None:
    with victim.server.client() as client:
        response = client.post(
            victim.path, content=raw, headers={"Content-Type": "application/json"}
        )
    assert_refused(response, 400)
    victim.assert_unchanged()


@pytest.mark.parametrize(
    "content",
    ["\ud800", "a\udfffb"],
    ids=["lone-high", "lone-low"],
)
def test_a_lone_surrogate_escape_is_a_422_and_changes_nothing(victim: Victim, content: str) -> None:
    # Valid JSON (json.dumps escapes the lone surrogate), not valid text.
    raws = [
        json.dumps(body(content)),
        json.dumps({**body("x"), "tags": {content: "v"}}),
        json.dumps({**body("x"), "agent_name": content}),
        json.dumps({"messages": [{"role": "user", "content": "x", "name": content}]}),
        json.dumps({"messages": [{"role": "user", "content": "x", "metadata": {"k": content}}]}),
    ]
    with victim.server.client() as client:
        for raw in raws:
            response = client.post(
                victim.path, content=raw.encode(), headers={"Content-Type": "application/json"}
            )
            assert_refused(response, 400, 422)
    victim.assert_unchanged()


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/jsonp",
        "text/json",
    ],
)
def test_a_body_that_is_not_declared_json_is_415_and_changes_nothing(
    victim: Victim, content_type: str | None
) -> None:
    raw = json.dumps(body("sneaked in")).encode()
    headers = {"Content-Type": content_type} if content_type else {}
    with victim.server.client() as client:
        for path in (victim.path, f"/users/{victim.user}/search", "/flush"):
            response = client.post(path, content=raw, headers=headers)
            assert_refused(response, 415)
    victim.assert_unchanged()


def many_messages(count: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"m{i}"} for i in range(count)]}


def many_tags(count: int) -> dict[str, Any]:
    return {**body("tagged"), "tags": {f"k{i}": f"v{i}" for i in range(count)}}


def many_tool_calls(count: int) -> dict[str, Any]:
    calls = [{"id": f"c{i}", "name": "n", "arguments": {}} for i in range(count)]
    return {"messages": [{"role": "assistant", "tool_calls": calls}]}


@pytest.mark.parametrize(
    "make", [many_messages, many_tags, many_tool_calls], ids=["messages", "tags", "tool-calls"]
)
def test_huge_numbers_within_the_size_limit_are_refused_or_round_trip_exactly(
    server: RunningServer, make: Any
) -> None:
    """As many items as fit in the body limit: refused (4xx) each time,
    changing nothing, or stored each time and read back exactly."""
    user = new_id()
    count = 20_000
    sent = make(count)
    assert len(json.dumps(sent)) < 1024 * 1024
    with server.client() as client:
        first = client.post(messages_path(user, "s1"), json=sent)
        second = client.post(messages_path(user, "s2"), json=sent)
        assert first.status_code == second.status_code, (first.text[:300], second.text[:300])
        if first.status_code != 201:
            assert_refused(first, 413, 422)
            assert user_snapshot(server.redis_url, server.a, user) == {}
            return
        for session in ("s1", "s2"):
            entries = client.get(f"/users/{user}/sessions/{session}/entries").json()["entries"]
            assert [e["metadata"]["tags"] for e in entries] == [sent.get("tags", {})]
            messages = client.get(messages_path(user, session)).json()["messages"]
            assert [
                {k: m[k] for k in ("role", "content")} | {"tool_calls": m["tool_calls"]}
                for m in messages
            ] == [
                {"role": m["role"], "content": m.get("content", "")}
                | {"tool_calls": m.get("tool_calls", [])}
                for m in sent["messages"]
            ]
    assert server.alive


def test_utf8_split_anywhere_across_chunks_is_taken_whole(server: RunningServer) -> None:
    user, session = new_id(), new_id("s")
    text = "ünïcödé ✓ 🌞 中文"
    raw = json.dumps(body(text), ensure_ascii=False).encode()

    def bytewise() -> Iterator[bytes]:
        for i in range(len(raw)):
            yield raw[i : i + 1]

    with server.client() as client:
        response = client.post(
            messages_path(user, session),
            content=bytewise(),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 201, response.text
        assert contents(client, user, session) == [text]
        refused = client.post(
            messages_path(user, session),
            content=raw[:-8] + b"\xff" + raw[-8:],
            headers={"Content-Type": "application/json"},
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "BadRequest"
        assert "not UTF-8" in refused.json()["error"]["message"]


# -- 5. one namespace's key on another's routes ----------------------------------------


@functools.cache
def openapi() -> dict[str, Any]:
    """The app's OpenAPI document (built from ``create_app``: a route added
    later is in it)."""
    from redismem.server.openapi import document

    return document()


def v1_operations() -> dict[tuple[str, str], dict[str, Any]]:
    """``(METHOD, path) -> operation`` of every route under ``/v1``."""
    found = {
        (method.upper(), path): operation
        for path, operations in openapi()["paths"].items()
        if path.startswith("/v1/")
        for method, operation in operations.items()
    }
    assert len(found) >= 9
    return found


def route_roles() -> dict[tuple[str, str], str]:
    """``(METHOD, path) -> role`` of every route of ``ROUTERS``, read from
    the auth dependency it declares (``auth.Reader`` is ``read_memory``...)."""
    from fastapi.routing import APIRoute

    from redismem.server.routes import ROUTERS

    roles: dict[tuple[str, str], str] = {}
    for router in ROUTERS:
        for route in router.routes:
            assert isinstance(route, APIRoute), route
            names, pending = [], list(route.dependant.dependencies)
            while pending:
                dependency = pending.pop()
                names.append(getattr(dependency.call, "__name__", ""))
                pending.extend(dependency.dependencies)
            found = {n.split("_")[0] for n in names if re.fullmatch(r"(read|write|admin)_\w+", n)}
            assert len(found) == 1, (route.path, found)
            (role,) = found
            roles.update({(method, route.path): role for method in route.methods})
    return roles


@dataclass
class Holdings:
    """What namespace b holds of one user: a session, a memory, a store item,
    each with a secret no answer to another key may show."""

    user: str
    session: str
    memory_id: str
    secrets: tuple[str, ...]


@pytest.fixture
def b_holdings(server: RunningServer) -> Holdings:
    user, session = new_id(), new_id("s")
    secrets = tuple(f"b-secret-{kind}-{uuid.uuid4().hex}" for kind in ("message", "fact", "item"))

    async def hold() -> str:
        async with await Memory.connect(
            server.redis_url, namespace=server.b, queue_name=server.queue_name
        ) as mem:
            await mem.write(
                [{"role": "user", "content": secrets[0]}], session_id=session, user_id=user
            )
            added = await mem.memories.add(
                Fact(text=secrets[1], subject="user", predicate="keeps", object="a secret"),
                user_id=user,
            )
            await mem.store.put((user, "prefs"), "seat", {"text": secrets[2]})
            return added.record.id

    return Holdings(user, session, asyncio.run(hold()), secrets)


def namespace_snapshot(url: str, namespace: str) -> dict[bytes, tuple[bytes | None, bool]]:
    """Every key holding ``namespace`` (its own and its jobs), by SCAN."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        return {
            key: (client.dump(key), client.pttl(key) > 0)
            for key in sorted(client.scan_iter(match=f"*{namespace}*", count=1000))
        }
    finally:
        client.close()


def _schema(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while True:
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema:
            schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
        else:
            return schema


_BY_TYPE: dict[str, Any] = {
    "string": "x",
    "integer": 1,
    "number": 1,
    "boolean": False,
    "array": [],
    "object": {},
}


def plausible_request(
    method: str, path: str, operation: dict[str, Any], namespace: str, held: Holdings
) -> dict[str, Any]:
    """``httpx.request`` arguments aimed at ``held``'s data under ``namespace``:
    path parameters filled with its ids, the store's prefix and key in the
    query or body, a body of the route's schema naming them."""
    values: dict[str, Any] = {
        "namespace": namespace,
        "user_id": held.user,
        "session_id": held.session,
        "memory_id": held.memory_id,
        "prefix": [held.user, "prefs"],
        "key": "seat",
        "query": "secret",
        "tag": ["k:v"],
        "reason": "because",
        "messages": [{"role": "user", "content": "written with another namespace's key"}],
        "value": {"text": "written with another namespace's key"},
        "record": {
            "kind": "fact",
            "text": "written with another namespace's key",
            "subject": "user",
            "predicate": "keeps",
            "object": "nothing",
        },
        "changes": {"text": "changed with another namespace's key"},
        "timeout": 1,
    }
    url = re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), "x")), path)
    params = [
        (p["name"], value)
        for p in operation.get("parameters", [])
        if p["in"] == "query" and p["name"] in values
        for value in (
            values[p["name"]] if isinstance(values[p["name"]], list) else [values[p["name"]]]
        )
    ]
    request: dict[str, Any] = {"method": method, "url": url, "params": params}
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is not None:
        doc = openapi()
        schema = _schema(doc, content["schema"])
        required = set(schema.get("required", ()))
        request["json"] = {
            name: values[name]
            if name in values
            else _BY_TYPE.get(_schema(doc, spec).get("type", "string"), "x")
            for name, spec in schema.get("properties", {}).items()
            if name in values or name in required
        }
    return request


def test_every_v1_route_is_known_with_its_role() -> None:
    assert set(route_roles()) == set(v1_operations())


def test_a_key_of_namespace_a_is_403_on_every_v1_route_of_b_and_learns_and_changes_nothing(
    server: RunningServer, b_holdings: Holdings
) -> None:
    operations = v1_operations()
    before = settled_namespace_snapshot(server.redis_url, server.b)
    assert any(b_holdings.user.encode() in key for key in before)
    answers: list[tuple[str, str, str, int, str]] = []
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for role in ("read", "write", "admin"):
            headers = server.headers(server.a, role)
            for (method, path), operation in operations.items():
                request = plausible_request(method, path, operation, server.b, b_holdings)
                response = client.request(**request, headers=headers)
                answers.append((role, method, path, response.status_code, response.text))
    wrong = [(r, m, p, s, t[:200]) for r, m, p, s, t in answers if s != 403]
    assert not wrong, wrong
    assert all(json.loads(t)["error"]["type"] == "Forbidden" for *_, t in answers)
    leaked = [(r, m, p) for r, m, p, _, t in answers if any(s in t for s in b_holdings.secrets)]
    assert not leaked, leaked
    assert namespace_snapshot(server.redis_url, server.b) == before
    # The ids were b's real ones: b's own read key sees its data there.
    with server.client(server.b, "read") as own:
        user, session = b_holdings.user, b_holdings.session
        assert contents(own, user, session) == [b_holdings.secrets[0]]
        memory = own.get(f"/users/{user}/memories/{b_holdings.memory_id}")
        assert b_holdings.secrets[1] in memory.text, memory.text
        item = own.get(
            "/store/items", params=[("prefix", user), ("prefix", "prefs"), ("key", "seat")]
        )
        assert b_holdings.secrets[2] in item.text, item.text


def test_a_key_below_a_routes_role_is_403_and_none_is_401_on_every_v1_route(
    server: RunningServer, b_holdings: Holdings
) -> None:
    operations, roles = v1_operations(), route_roles()
    order = ("read", "write", "admin")
    before = settled_namespace_snapshot(server.redis_url, server.b)
    answers: list[tuple[str, str, str, int, str]] = []
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for (method, path), operation in operations.items():
            request = plausible_request(method, path, operation, server.b, b_holdings)
            needed = order.index(roles[method, path])
            for role in order[:needed]:
                response = client.request(**request, headers=server.headers(server.b, role))
                answers.append((role, method, path, response.status_code, response.text))
            for name, headers in (
                ("none", {}),
                ("garbage", {"Authorization": "Bearer rmk_000000000000_" + "A" * 43}),
            ):
                response = client.request(**request, headers=headers)
                answers.append((name, method, path, response.status_code, response.text))
    expected = {"read": 403, "write": 403, "none": 401, "garbage": 401}
    wrong = [(r, m, p, s, t[:200]) for r, m, p, s, t in answers if s != expected[r]]
    assert not wrong, wrong
    assert {r for r, *_ in answers} == set(expected)  # some routes need write, some admin
    leaked = [(r, m, p) for r, m, p, _, t in answers if any(s in t for s in b_holdings.secrets)]
    assert not leaked, leaked
    assert namespace_snapshot(server.redis_url, server.b) == before


def settled_namespace_snapshot(url: str, namespace: str) -> dict[bytes, tuple[bytes | None, bool]]:
    last = namespace_snapshot(url, namespace)
    for _ in range(25):
        time.sleep(0.2)
        now = namespace_snapshot(url, namespace)
        if now == last:
            return now
        last = now
    raise AssertionError("the namespace's keys kept changing")
