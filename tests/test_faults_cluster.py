"""Memory on a real local Redis Cluster and behind Sentinel while masters die,
slots move and Sentinel fails over: no acknowledged write is lost, none is
applied twice, and the client recovers by itself.

Writers follow the README's retry recipe: a write that raised
``BackendUnavailable`` is sent again with the same ``write_id`` until it is
acknowledged. With ``replica_acks=1`` an acknowledged write has reached a
replica, so the replica that takes over has it.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest_asyncio
import redis.asyncio as aioredis
from servers import CLUSTER_NODE_TIMEOUT_MS, LocalCluster, LocalSentinel
from worker_support import WorkerPool, wait_ready, worker_env

from redismem import BackendUnavailable, Memory
from redismem.core.connection import scan_once

WRITERS = 16
#: The client must be writing again this long after the failover finished.
RECOVERY_S = CLUSTER_NODE_TIMEOUT_MS / 1000 + 8


@dataclass
class Writer:
    user: str
    acked: list[str] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)
    failures: int = 0


async def _write_until_acked(memory: Memory, writer: Writer, content: str) -> None:
    write_id = f"{writer.user}-{content}"
    deadline = time.monotonic() + 90
    while True:
        try:
            await memory.write(
                [{"role": "user", "content": content}],
                session_id="s",
                user_id=writer.user,
                write_id=write_id,
            )
        except BackendUnavailable:
            writer.failures += 1
            assert time.monotonic() < deadline, f"{writer.user}: no acknowledgement in 90 s"
            await asyncio.sleep(0.1)
            continue
        writer.acked.append(content)
        writer.acked_at.append(time.monotonic())
        return


async def _run_writers(
    memory: Memory, fault: Callable[[], Awaitable[float]]
) -> tuple[list[Writer], float]:
    """16 writers write until ``fault()`` (which returns when the servers are
    healthy again, with the time the fault began) has finished and 2 s more."""
    writers = [Writer(f"w{n}-{uuid.uuid4().hex[:6]}") for n in range(WRITERS)]
    stop = asyncio.Event()

    async def write(writer: Writer) -> None:
        i = 0
        while not stop.is_set():
            await _write_until_acked(memory, writer, f"m{i}")
            i += 1

    tasks = [asyncio.create_task(write(w)) for w in writers]
    await asyncio.sleep(1.0)
    began = await fault()
    await asyncio.sleep(2.0)
    stop.set()
    await asyncio.gather(*tasks)
    return writers, began


async def _check_exactly_once(memory: Memory, writers: list[Writer]) -> None:
    for writer in writers:
        stored = [m.content for m in await memory.read(session_id="s", user_id=writer.user)]
        assert stored == writer.acked, (
            f"{writer.user}: stored {len(stored)} messages, acknowledged {len(writer.acked)}; "
            f"duplicates: {len(stored) - len(set(stored))}, "
            f"lost: {sorted(set(writer.acked) - set(stored))[:5]}"
        )


@pytest_asyncio.fixture
async def acked_memory(
    cluster_for_faults: LocalCluster, redis_url: str, namespace: str
) -> AsyncIterator[Memory]:
    """A client of the cluster whose writes wait for a replica (``replica_acks=1``)."""
    memory = await Memory.connect(
        cluster_for_faults.url,
        namespace=namespace,
        queue_url=redis_url,
        replica_acks=1,
        index=False,
    )
    try:
        yield memory
    finally:
        await memory.clear_all()
        await memory.aclose()


async def test_killing_a_master_under_16_writers_loses_and_duplicates_nothing(
    cluster_for_faults: LocalCluster, acked_memory: Memory
) -> None:
    cluster, memory = cluster_for_faults, acked_memory

    async def kill_a_master() -> float:
        began = time.monotonic()
        port = await asyncio.to_thread(cluster.kill_master)
        await asyncio.to_thread(cluster.wait_failover, port)
        # Back as a replica of the new master: its shard can acknowledge again.
        await asyncio.to_thread(cluster.restart, port)
        await asyncio.to_thread(cluster.wait_ok)
        return began

    writers, began = await _run_writers(memory, kill_a_master)
    await _check_exactly_once(memory, writers)
    assert sum(w.failures for w in writers) > 0, "the fault never reached the writers"
    for writer in writers:
        after = [t for t in writer.acked_at if t > began]
        assert after, f"{writer.user} never wrote again after the kill"
    # Recovered by itself: every writer acknowledged within the bound after
    # the cluster was whole again.
    healed = time.monotonic() - 2.0
    for writer in writers:
        assert writer.acked_at[-1] > healed - RECOVERY_S


async def test_resharding_under_16_writers_loses_and_duplicates_nothing(
    cluster_for_faults: LocalCluster, acked_memory: Memory
) -> None:
    cluster, memory = cluster_for_faults, acked_memory

    async def reshard() -> float:
        began = time.monotonic()
        source, target = cluster.masters()[:2]
        await asyncio.to_thread(cluster.reshard, source, target, 2000)
        return began

    writers, _ = await _run_writers(memory, reshard)
    await _check_exactly_once(memory, writers)


async def test_sentinel_failover_under_writers_and_two_workers(
    sentinel_for_faults: LocalSentinel, namespace: str, queue_name: str, workers: WorkerPool
) -> None:
    """Memory and queue behind Sentinel: after the master dies, writes go on
    with nothing lost or doubled, and the two workers index everything."""
    sentinel = sentinel_for_faults
    url = sentinel.url
    # A job lost at the failover (the queue is replicated asynchronously) is
    # found again by the reconcile sweep: run it often, with a short grace.
    env = worker_env(
        url, namespace, queue_name, SUMMARIZER="truncate", SWEEP_SECONDS=2, SWEEP_GRACE=3
    )
    processes = [workers.start(env) for _ in range(2)]
    master = aioredis.Redis.from_url(sentinel.master_url())
    try:
        for process in processes:
            await wait_ready(master, process)
    finally:
        await master.aclose()
    memory = await Memory.connect(
        url, namespace=namespace, queue_name=queue_name, replica_acks=1, summarize_delay=0.1
    )

    async def fail_over() -> float:
        began = time.monotonic()
        port = await asyncio.to_thread(sentinel.kill_master)
        await asyncio.to_thread(sentinel.wait_master_change, port)
        await asyncio.to_thread(sentinel.restart, port)
        return began

    try:
        writers, _ = await _run_writers(memory, fail_over)
        await _check_exactly_once(memory, writers)
        for process in processes:
            assert process.alive, workers.logs()
        assert await memory.flush(timeout=60), workers.logs()
        writer = writers[0]
        hits = await memory.search(writer.acked[-1], user_id=writer.user, limit=50)
        assert writer.acked[-1] in [hit.message.content for hit in hits]
    finally:
        await memory.clear_all()
        await memory.aclose()


async def test_cluster_and_sentinel_urls_reach_every_primary(
    cluster: LocalCluster, redis_url: str, namespace: str
) -> None:
    """clear_all covers every primary; clear_user only the user's node."""
    memory = await Memory.connect(cluster.url, namespace=namespace, queue_url=redis_url)
    try:
        users = [f"u{i}" for i in range(30)]
        for user in users:
            await memory.write([{"role": "user", "content": "x"}], session_id="s", user_id=user)
        spread = {cluster.master_of_slot(_slot(memory, u)) for u in users}
        assert len(spread) == 3
        assert await memory.clear_user("u0") > 0
        assert await memory.read(session_id="s", user_id="u0") == []
        assert [m.content for m in await memory.read(session_id="s", user_id="u1")] == ["x"]
        assert await memory.clear_all() > 0
        for user in users:
            assert await memory.read(session_id="s", user_id=user) == []
    finally:
        await memory.aclose()


def _slot(memory: Memory, user: str) -> int:
    from redis.crc import key_slot

    return key_slot(memory.layout.session(user, "s").meta.encode())


async def test_scan_visits_every_primary_once_and_resumes_from_its_cursor(
    cluster: LocalCluster, redis_url: str, namespace: str
) -> None:
    """The reconcile sweep's SCAN on a cluster: one cursor naming node and
    position, a pass covering every primary, resumable between calls."""
    memory = await Memory.connect(cluster.url, namespace=namespace, queue_url=redis_url)
    try:
        users = [f"u{i}" for i in range(60)]
        for user in users:
            await memory.write([{"role": "user", "content": "x"}], session_id="s", user_id=user)
        pattern = memory.layout.pending_pattern()
        seen: list[bytes] = []
        cursor, nodes = "0", set()
        while True:
            cursor, batch = await memory.backend.call(
                functools.partial(scan_once, cursor=cursor, pattern=pattern, count=5)
            )
            seen += batch
            if cursor == "0":
                break
            nodes.add(cursor.rpartition("@")[0])
        assert sorted(seen) == sorted({memory.layout.pending(u).encode() for u in users})
        assert len(nodes) == 3
        # A cursor naming a node that is gone starts over on the first primary.
        _, batch = await memory.backend.call(
            functools.partial(scan_once, cursor="127.0.0.1:1@7", pattern=pattern, count=1000)
        )
        assert batch
    finally:
        await memory.clear_all()
        await memory.aclose()
