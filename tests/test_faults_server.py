"""Faults of the Redis process itself, made to real ``redis-server`` processes
this test starts: connections killed, the server stalled (SIGSTOP), killed
and restarted (with AOF), out of memory, password-protected. Every write
acknowledged is stored exactly once; every call ends within its bound.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from helpers import client_kill_storm, user
from worker_support import eventually

from redismem import BackendError, BackendFull, BackendUnavailable, Memory

SID = "s1"
AOF = ("--appendonly", "yes", "--appendfsync", "always")


async def write_exactly_once(mem: Memory, content: str, **kwargs: Any) -> None:
    """The README's retry recipe: retry a failed write with its write id."""
    write_id = None
    while True:
        try:
            await mem.write([user(content)], session_id=SID, write_id=write_id, **kwargs)
            return
        except BackendUnavailable as exc:
            write_id = exc.write_id
            await asyncio.sleep(0.05)


async def writers(mem: Memory, count: int, per_writer: int) -> list[str]:
    contents = [[f"w{n}-{i}" for i in range(per_writer)] for n in range(count)]

    async def one(items: list[str]) -> None:
        for content in items:
            await write_exactly_once(mem, content)

    await asyncio.gather(*(one(items) for items in contents))
    return [c for items in contents for c in items]


async def stored_contents(mem: Memory) -> Counter[str]:
    return Counter(m.content for m in await mem.read(session_id=SID))


async def test_writes_under_a_client_kill_storm_are_stored_exactly_once(
    redis_server_factory, memory_factory
):
    server = redis_server_factory()
    mem = await memory_factory(server.url, socket_timeout=1.0, retries=20)
    async with client_kill_storm(server.url, every=0.02) as kills:
        written = await writers(mem, count=8, per_writer=250)
    stored = await stored_contents(mem)
    assert kills[0] > 10
    assert stored == Counter(written), {c: n for c, n in stored.items() if n != 1}


async def test_a_stalled_server_bounds_every_call_and_the_retry_recipe_is_exactly_once(
    redis_server_factory, memory_factory
):
    server = redis_server_factory()
    mem = await memory_factory(server.url, socket_timeout=0.4, retries=2)
    bound = mem.config.policy.bound()
    await mem.write([user("before")], session_id=SID)

    failed: list[tuple[str, str]] = []
    durations: list[float] = []

    async def attempt(content: str) -> None:
        started = time.monotonic()
        try:
            await mem.write([user(content)], session_id=SID)
        except BackendUnavailable as exc:
            assert exc.write_id
            failed.append((content, exc.write_id))
        durations.append(time.monotonic() - started)

    server.pause()
    try:
        await asyncio.gather(*(attempt(f"stalled {i}") for i in range(20)))
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            await mem.read(session_id=SID)
        durations.append(time.monotonic() - started)
    finally:
        server.resume()
    assert len(failed) == 20
    assert max(durations) <= bound + 0.5, (max(durations), bound)
    # The stalled commands reach Redis once it resumes; retrying with the
    # write id stores each exactly once whatever already landed.
    for content, write_id in failed:
        await mem.write([user(content)], session_id=SID, write_id=write_id)
    stored = await stored_contents(mem)
    assert stored == Counter(["before", *(f"stalled {i}" for i in range(20))])


async def test_no_health_check_blocks_a_call_for_the_whole_stall(
    redis_server_factory, memory_factory
):
    server = redis_server_factory()
    mem = await memory_factory(server.url, socket_timeout=0.3, retries=1)
    await mem.write([user("x")], session_id=SID)
    await asyncio.sleep(0.1)
    server.pause()
    try:
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(BackendUnavailable):
                await mem.read(session_id=SID)
            assert time.monotonic() - started <= mem.config.policy.bound() + 0.5
    finally:
        server.resume()
    assert [m.content for m in await mem.read(session_id=SID)] == ["x"]


async def test_writes_through_kill_and_restart_with_aof_are_kept_and_not_duplicated(
    redis_server_factory, memory_factory
):
    server = redis_server_factory(extra_args=AOF)
    mem = await memory_factory(server.url, socket_timeout=1.0, retries=30)
    done = asyncio.Event()

    async def restarts() -> None:
        for _ in range(3):
            await asyncio.sleep(0.3)
            server.kill()
            await asyncio.sleep(0.2)
            await asyncio.to_thread(server.restart)
        done.set()

    restarter = asyncio.create_task(restarts())
    written = await writers(mem, count=4, per_writer=150)
    await restarter
    stored = await stored_contents(mem)
    assert stored == Counter(written), {c: n for c, n in stored.items() if n != 1}


async def test_retries_ride_out_refused_connections(redis_server_factory, memory_factory):
    server = redis_server_factory()
    mem = await memory_factory(server.url, retries=10)
    await mem.write([user("before")], session_id=SID)
    server.kill()

    async def come_back() -> None:
        await asyncio.sleep(1.5)
        await asyncio.to_thread(server.restart)

    back = asyncio.create_task(come_back())
    await asyncio.sleep(0.2)
    started = time.monotonic()
    await mem.write([user("during")], session_id=SID)  # no AOF: the server came back empty
    await back
    assert time.monotonic() - started >= 1.0
    assert [m.content for m in await mem.read(session_id=SID)] == ["during"]


async def test_a_refused_connection_with_no_retries_fails_at_once(
    redis_server_factory, memory_factory
):
    server = redis_server_factory()
    mem = await memory_factory(server.url, retries=0)
    server.kill()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        await mem.read(session_id=SID)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("url_password", ["", "wrong@"])
async def test_a_password_protected_server_without_the_password_fails_at_once(
    redis_server_factory, url_password
):
    server = redis_server_factory(extra_args=("--requirepass", "sesame"))
    url = f"redis://:{url_password.rstrip('@')}@127.0.0.1:{server.port}/0"
    if not url_password:
        url = server.url
    started = time.monotonic()
    with pytest.raises(BackendError, match="credentials"):
        await Memory.connect(url, retries=5)
    assert time.monotonic() - started < 2.0


async def _make_full(url: str) -> None:
    """Put the server over its ``maxmemory`` with ``noeviction`` (what deploy/
    recommends): every command that may grow memory is refused from now on."""
    client = aioredis.Redis.from_url(url)
    try:
        used = (await client.info("memory"))["used_memory"]
        await client.config_set("maxmemory-policy", "noeviction")
        await client.config_set("maxmemory", max(1, used // 2))
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            await client.set("one-more", b"x")
    finally:
        await client.aclose()


async def test_reads_still_serve_data_when_memory_is_full(
    redis_server_factory, memory_factory, caplog
):
    server = redis_server_factory()
    mem = await memory_factory(server.url)
    for i in range(5):
        await mem.write([user(f"m{i}")], session_id=SID, tags={"k": "v"})
    await _make_full(server.url)

    expected = [f"m{i}" for i in range(5)]
    assert [m.content for m in await mem.read(session_id=SID)] == expected
    assert [m.content for m in await mem.read(session_id=SID, tags={"k": "v"})] == expected
    assert [m.content for m in (await mem.context(session_id=SID)).messages] == expected
    assert len(await mem.entries(session_id=SID)) == 5
    assert "out of memory" in caplog.text
    assert caplog.text.count("out of memory") == 1  # rate-limited
    with pytest.raises(BackendFull):
        await mem.write([user("too much")], session_id=SID)
    assert [m.content for m in await mem.read(session_id=SID)] == expected


async def test_a_full_queue_server_does_not_fail_a_write_that_landed(
    redis_server_factory, memory_factory
):
    memory_server = redis_server_factory()
    queue_server = redis_server_factory()
    await _make_full(queue_server.url)
    mem = await memory_factory(
        memory_server.url, queue_url=queue_server.url, keep_recent=2, summarize_batch=2
    )
    for i in range(6):
        await mem.write([user(f"m{i}")], session_id=SID)
    assert len(await mem.read(session_id=SID)) == 6
    pending = await mem.redis.zrange(mem.layout.pending("default"), 0, -1)
    assert pending == [SID.encode()]  # the sweep will enqueue it


async def test_clear_all_takes_only_its_own_jobs_off_the_shared_work_queue(
    redis_url, memory_factory, namespace
):
    options = {
        "keep_recent": 1,
        "summarize_batch": 1,
        "summarize_delay": 60,
        "queue_name": f"redismem/queue-{namespace}",
    }
    other = await memory_factory(redis_url, namespace=f"{namespace}-b", **options)
    mem = await memory_factory(redis_url, **options)
    for memory in (mem, other):
        for i in range(3):
            await memory.write([user(f"m{i}")], session_id=SID)
    queue = mem.config.queue_name
    raw = mem.redis

    async def both_queued() -> list[bytes] | None:
        jobs: list[bytes] = await raw.zrange(queue, 0, -1)
        return jobs if len(jobs) >= 2 else None

    # The writes enqueue in the background: wait for both jobs, however slow.
    jobs_before = await eventually(both_queued, what="both sessions' jobs on the queue")
    assert len(jobs_before) == 2

    await mem.clear_all()

    # The cleared namespace's waiting job goes with its users (no queue-side
    # key keeps a cleared user's id); the other namespace's stays, whole.
    theirs = [job for job in jobs_before if job.startswith(f"sum:{namespace}-b:".encode())]
    assert len(theirs) == 1
    assert await raw.zrange(queue, 0, -1) == theirs
    for job in jobs_before:
        assert await raw.exists(b"arq:job:" + job) == (job in theirs)
    assert 0 < await raw.pttl(b"arq:job:" + theirs[0]) <= 11 * 60 * 1000
    assert len(await other.read(session_id=SID)) == 3
    await raw.delete(queue, *(b"arq:job:" + job for job in jobs_before))
