"""The hot path's multiplexed connection (``redismem.core.transport``), on real Redis.

What the session scripts rely on: replies matched to their calls in order
however many tasks share the connection, even after a call gave up half way;
redis-py's own error types; a reset connection failing the calls that were
waiting and the next call connecting again.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
import redis.exceptions as rexc

from redismem import BackendUnavailable, Memory
from redismem.core.connection import open_redis
from redismem.core.transport import (
    MultiplexedCluster,
    MultiplexedConnection,
    open_multiplexed,
    pack_command,
)

SCRIPT = "return {KEYS[1], ARGV[1]}"
SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()


@pytest_asyncio.fixture
async def link(redis_url: str) -> AsyncIterator[MultiplexedConnection]:
    client = open_redis(redis_url)
    opened = open_multiplexed(redis_url, client, connect_timeout=2.0)
    assert isinstance(opened, MultiplexedConnection)
    yield opened
    await opened.aclose()
    await client.aclose()


@pytest_asyncio.fixture
async def admin(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def _link_client_ids(admin: aioredis.Redis, name: str) -> list[int]:
    clients = await admin.client_list()
    return [int(c["id"]) for c in clients if c.get("name") == name]


async def _name(link: MultiplexedConnection) -> str:
    name = f"link-{uuid.uuid4().hex[:8]}"
    assert await link.execute("CLIENT", "SETNAME", name) == b"OK"
    return name


def test_commands_are_packed_as_resp_bulk_strings() -> None:
    assert pack_command(("SET", "k", b"\x00v", 12, 1.5)) == (
        b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n\x00v\r\n$2\r\n12\r\n$3\r\n1.5\r\n"
    )
    for bad in (None, True, object()):
        with pytest.raises(rexc.DataError):
            pack_command(("SET", "k", bad))


async def test_replies_match_their_calls_across_many_tasks(link: MultiplexedConnection) -> None:
    key = f"transport:{uuid.uuid4().hex}"

    async def task(n: int) -> None:
        for i in range(50):
            value = f"{n}-{i}".encode()
            assert await link.execute("ECHO", value) == value
            length = await link.execute("RPUSH", key, value)
            assert isinstance(length, int)

    await asyncio.gather(*(task(n) for n in range(16)))
    assert await link.execute("LLEN", key) == 16 * 50
    await link.execute("DEL", key)


async def test_error_replies_raise_redis_py_errors_and_the_link_stays_usable(
    link: MultiplexedConnection,
) -> None:
    key = f"transport:{uuid.uuid4().hex}"
    await link.execute("SET", key, "text")
    with pytest.raises(rexc.ResponseError, match="WRONGTYPE"):
        await link.execute("LPUSH", key, "x")
    with pytest.raises(rexc.NoScriptError):
        await link.execute("EVALSHA", "0" * 40, 0)
    with pytest.raises(rexc.ResponseError, match="unknown command"):
        await link.execute("NOSUCHCOMMAND")
    assert await link.execute("GET", key) == b"text"
    await link.execute("DEL", key)


async def test_evalsha_loads_a_script_the_server_lost(link: MultiplexedConnection) -> None:
    await link.execute("SCRIPT", "FLUSH")
    assert await link.evalsha(SHA, SCRIPT, ["k"], ["v"]) == [b"k", b"v"]
    assert await link.execute("SCRIPT", "EXISTS", SHA) == [1]


async def test_transaction_returns_exec_replies_and_raises_the_first_error(
    link: MultiplexedConnection,
) -> None:
    key = f"transport:{uuid.uuid4().hex}"
    replies = await link.transaction([("RPUSH", key, "a", "b"), ("LRANGE", key, 0, -1)])
    assert replies == [2, [b"a", b"b"]]
    # Refused when queued (wrong arity): nothing runs.
    with pytest.raises(rexc.ResponseError, match="wrong number of arguments"):
        await link.transaction([("RPUSH", key, "c"), ("LRANGE", key)])
    assert await link.execute("LLEN", key) == 2
    # Failed inside EXEC: the others ran, the error raises.
    with pytest.raises(rexc.ResponseError, match="WRONGTYPE"):
        await link.transaction([("RPUSH", key, "c"), ("GET", key)])
    assert await link.execute("LLEN", key) == 3
    with pytest.raises(rexc.NoScriptError):
        await link.transaction([("EVALSHA", "0" * 40, 0)])
    assert await link.execute("PING") == b"PONG"
    await link.execute("DEL", key)


async def test_transactions_and_calls_across_many_tasks_get_their_own_replies(
    link: MultiplexedConnection,
) -> None:
    # A transaction's replies resolve one future together (the task resumes
    # once): they must still be exactly its own, among other tasks' calls.
    key = f"transport:{uuid.uuid4().hex}"

    async def task(n: int) -> None:
        for i in range(30):
            value = f"{n}-{i}".encode()
            echoed, length = await link.transaction([("ECHO", value), ("RPUSH", key, value)])
            assert echoed == value and isinstance(length, int)
            assert await link.execute("ECHO", value) == value

    await asyncio.gather(*(task(n) for n in range(16)))
    assert await link.execute("LLEN", key) == 16 * 30
    await link.execute("DEL", key)


async def test_a_transaction_waiting_on_a_killed_connection_fails(
    link: MultiplexedConnection, admin: aioredis.Redis
) -> None:
    name = await _name(link)
    empty = f"transport:{uuid.uuid4().hex}"
    blocked = asyncio.create_task(link.execute("BLPOP", empty, 5))
    await asyncio.sleep(0.05)
    behind = asyncio.create_task(link.transaction([("ECHO", "a"), ("ECHO", "b")]))
    await asyncio.sleep(0.05)
    (client_id,) = await _link_client_ids(admin, name)
    await admin.client_kill_filter(_id=client_id)
    for task in (blocked, behind):
        with pytest.raises(rexc.ConnectionError):
            await asyncio.wait_for(task, 2)
    assert await link.transaction([("ECHO", "c")]) == [b"c"]


async def test_a_call_that_gives_up_never_receives_another_calls_reply(
    link: MultiplexedConnection,
) -> None:
    """A call cancelled with its reply outstanding (its time ran out) drops the
    connection: the late reply can never be matched to a later call."""
    empty = f"transport:{uuid.uuid4().hex}"
    stuck = asyncio.create_task(link.execute("BLPOP", empty, 1))
    await asyncio.sleep(0.1)
    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck
    for i in range(20):
        assert await link.execute("ECHO", str(i)) == str(i).encode()
    await asyncio.sleep(1.2)  # past the BLPOP's own timeout: its nil reply is gone
    assert await link.execute("ECHO", "after") == b"after"


async def test_calls_waiting_on_a_killed_connection_fail_and_the_next_call_reconnects(
    link: MultiplexedConnection, admin: aioredis.Redis
) -> None:
    name = await _name(link)
    empty = f"transport:{uuid.uuid4().hex}"
    waiting = [asyncio.create_task(link.execute("BLPOP", empty, 5)) for _ in range(3)]
    await asyncio.sleep(0.1)
    (client_id,) = await _link_client_ids(admin, name)
    await admin.client_kill_filter(_id=client_id)
    for task in waiting:
        with pytest.raises(rexc.ConnectionError):
            await asyncio.wait_for(task, 2)
    assert await link.execute("PING") == b"PONG"
    assert await _link_client_ids(admin, name) == []  # a new connection, unnamed


async def test_connecting_to_nothing_is_a_connection_error(redis_server_factory) -> None:  # type: ignore[no-untyped-def]
    server = redis_server_factory()
    port = server.port
    server.kill()
    link = MultiplexedConnection(port=port, connect_timeout=1.0)
    with pytest.raises(rexc.ConnectionError, match=f"127.0.0.1:{port}"):
        await link.execute("PING")
    await link.aclose()


async def test_concurrent_first_calls_share_one_connection(
    link: MultiplexedConnection, admin: aioredis.Redis
) -> None:
    before = len(await admin.client_list())
    results = await asyncio.gather(*(link.execute("PING") for _ in range(32)))
    assert results == [b"PONG"] * 32
    assert len(await admin.client_list()) == before + 1


async def test_closed_link_refuses_calls(link: MultiplexedConnection) -> None:
    assert await link.execute("PING") == b"PONG"
    await link.aclose()
    with pytest.raises(rexc.ConnectionError, match="closed"):
        await link.execute("PING")


def test_tls_and_the_embedded_backend_keep_redis_py_alone() -> None:
    def link_of(url: str) -> MultiplexedConnection | MultiplexedCluster | None:
        return open_multiplexed(url, open_redis(url), connect_timeout=1)

    assert isinstance(link_of("redis://127.0.0.1:1/0"), MultiplexedConnection)
    assert isinstance(link_of("unix:///tmp/none.sock"), MultiplexedConnection)
    assert isinstance(link_of("redis+cluster://127.0.0.1:1"), MultiplexedCluster)
    assert isinstance(link_of("redis+sentinel://127.0.0.1:1/m"), MultiplexedConnection)
    assert link_of("rediss://127.0.0.1:1/0") is None
    assert link_of("memory://transport-test") is None


async def test_memory_keeps_its_guarantees_when_its_hot_path_connection_is_killed(
    redis_url: str, admin: aioredis.Redis, namespace: str
) -> None:
    """Writes in flight on a killed connection are retried and stored once."""
    memory = await Memory.connect(redis_url, namespace=namespace)
    try:
        await memory.write([{"role": "user", "content": "warm"}], session_id="s")

        async def writer(n: int) -> None:
            for i in range(40):
                await memory.write([{"role": "user", "content": f"{n}-{i}"}], session_id=f"s{n}")

        killed = 0

        async def killer() -> None:
            nonlocal killed
            for _ in range(5):
                await asyncio.sleep(0.02)
                for client in await admin.client_list():
                    if client.get("cmd") in ("evalsha", "exec", "multi"):
                        killed += await admin.client_kill_filter(_id=int(client["id"]))

        try:
            await asyncio.gather(*(writer(n) for n in range(8)), killer())
        except BackendUnavailable:  # pragma: no cover - retries should absorb 5 kills
            pytest.fail("a killed connection surfaced instead of being retried")
        assert killed >= 3
        for n in range(8):
            contents = [m.content for m in await memory.read(session_id=f"s{n}")]
            assert contents == [f"{n}-{i}" for i in range(40)]
    finally:
        await memory.clear_all()
        await memory.aclose()


async def test_a_call_past_its_deadline_fails_every_waiting_call_and_the_link_recovers(
    link: MultiplexedConnection,
) -> None:
    """One timer per connection bounds every call: a reply later than its
    deadline drops the connection (the server may be stalled), failing the
    calls queued behind it; the next call connects again."""
    loop = asyncio.get_running_loop()
    empty = f"transport:{uuid.uuid4().hex}"
    started = loop.time()
    stuck = asyncio.create_task(link.execute("BLPOP", empty, 5, deadline=started + 0.2))
    await asyncio.sleep(0.05)
    behind = asyncio.create_task(link.execute("PING", deadline=started + 5))
    with pytest.raises(rexc.TimeoutError):
        await stuck
    with pytest.raises(rexc.TimeoutError):
        await behind
    assert loop.time() - started < 1.0
    assert await link.execute("PING", deadline=loop.time() + 1) == b"PONG"


def test_the_hot_path_runs_on_uvloop(redis_url: str, namespace: str) -> None:
    """Servers often run on uvloop (uvicorn does when it is installed), whose
    transports are not ``asyncio.Transport`` subclasses: writes, reads and a
    killed connection behave as on asyncio's own loop."""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        admin = aioredis.Redis.from_url(redis_url)
        memory = await Memory.connect(redis_url, namespace=namespace)
        try:

            async def writer(n: int) -> None:
                for i in range(30):
                    await memory.write(
                        [{"role": "user", "content": f"{n}-{i}"}], session_id=f"s{n}"
                    )

            async def killer() -> int:
                killed = 0
                for _ in range(3):
                    await asyncio.sleep(0.02)
                    for client in await admin.client_list():
                        if client.get("cmd") == "evalsha":
                            killed += await admin.client_kill_filter(_id=int(client["id"]))
                return killed

            *_, killed = await asyncio.gather(*(writer(n) for n in range(4)), killer())
            assert killed >= 1
            for n in range(4):
                contents = [m.content for m in await memory.read(session_id=f"s{n}")]
                assert contents == [f"{n}-{i}" for i in range(30)]
        finally:
            await memory.clear_all()
            await memory.aclose()
            await admin.aclose()

    uvloop.run(scenario())


async def test_evalsha_now_sends_at_once_and_falls_back_when_not_connected(
    redis_url: str,
) -> None:
    """``evalsha_now`` puts the command on the wire before returning (the
    caller works while Redis runs it); with no connection up it sends
    nothing and returns None. The awaited reply is ``evalsha``'s: a lost
    script is loaded again, a ``WAIT`` short of replicas raises."""
    client = open_redis(redis_url)
    fresh = open_multiplexed(redis_url, client, connect_timeout=2.0)
    assert isinstance(fresh, MultiplexedConnection)
    try:
        assert fresh.evalsha_now(SHA, SCRIPT, ["k"], ["a"]) is None
        assert await fresh.evalsha(SHA, SCRIPT, ["k"], ["a"]) == [b"k", b"a"]
        started = fresh.evalsha_now(SHA, SCRIPT, ["k"], ["b"])
        assert started is not None
        assert await started == [b"k", b"b"]

        await fresh.execute("SCRIPT", "FLUSH")
        lost = fresh.evalsha_now(SHA, SCRIPT, ["k"], ["c"])
        assert lost is not None and await lost == [b"k", b"c"]

        short = fresh.evalsha_now(SHA, SCRIPT, ["k"], ["d"], replicas=1, replica_timeout_ms=10)
        assert short is not None
        with pytest.raises(rexc.TimeoutError, match="reached 0 of 1 replica"):
            await short
    finally:
        await fresh.aclose()
        await client.aclose()


async def test_trouble_sending_early_is_left_to_the_call_policy(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, namespace: str
) -> None:
    """An early send that raises does not surface a raw redis-py error: the
    call's attempts under the policy run it as usual."""
    memory = await Memory.connect(redis_url, namespace=namespace)
    try:
        await memory.write([{"role": "user", "content": "warm"}], session_id="s")

        def broken(*args: object, **kwargs: object) -> None:
            raise rexc.ConnectionError("the socket broke while sending")

        monkeypatch.setattr(MultiplexedConnection, "evalsha_now", broken)
        await memory.write([{"role": "user", "content": "after"}], session_id="s")
        assert [m.content for m in await memory.read(session_id="s")] == ["warm", "after"]
    finally:
        await memory.clear_all()
        await memory.aclose()


async def test_dated_writes_re_sent_after_killed_connections_keep_one_copy_and_their_time(
    redis_url: str, admin: aioredis.Redis, namespace: str
) -> None:
    """``created_at`` rides the same exactly-once path: writes whose
    connection is killed under them are re-sent, stored once, each with the
    time it was given."""
    memory = await Memory.connect(redis_url, namespace=namespace)
    start = datetime(2023, 5, 8, tzinfo=UTC)
    try:
        await memory.write([{"role": "user", "content": "warm"}], session_id="warm")

        async def writer(n: int) -> None:
            for i in range(40):
                await memory.write(
                    [{"role": "user", "content": f"{n}-{i}"}],
                    session_id=f"s{n}",
                    created_at=start + timedelta(minutes=i),
                )

        killed = 0

        async def killer() -> None:
            nonlocal killed
            for _ in range(5):
                await asyncio.sleep(0.02)
                for client in await admin.client_list():
                    if client.get("cmd") in ("evalsha", "exec", "multi"):
                        killed += await admin.client_kill_filter(_id=int(client["id"]))

        await asyncio.gather(*(writer(n) for n in range(8)), killer())
        assert killed >= 3
        for n in range(8):
            stored = await memory.read(session_id=f"s{n}")
            assert [m.content for m in stored] == [f"{n}-{i}" for i in range(40)]
            times = [start + timedelta(minutes=i) for i in range(40)]
            assert [m.created_at for m in stored] == times
    finally:
        await memory.clear_all()
        await memory.aclose()
