"""A connection killed under a worker's job is an outage, never a job failure
(issue 19, defect 10): a ``CLIENT KILL`` while arq watches a job key (its
enqueue is a ``WATCH``/``MULTI`` transaction; redis-py reports the lost
watch as ``WatchError``) is retried and the work done, and ``redismem
stats`` records no job as failed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from helpers import client_kill_storm
from worker_support import WorkerPool, wait_ready, worker_env

from redismem.core.queue import QueueStats


async def test_a_client_kill_storm_fails_no_job(
    redis_server_factory: Any,
    raw_factory: Any,
    memory_factory: Any,
    namespace: str,
    queue_name: str,
    workers: WorkerPool,
) -> None:
    server = redis_server_factory()
    raw = await raw_factory(server.url)
    mem = await memory_factory(
        server.url,
        namespace=namespace,
        queue_name=queue_name,
        keep_recent=2,
        summarize_batch=2,
        summarize_delay=0.05,
        socket_timeout=1.0,
        retries=20,
    )
    # Extraction waits for a quiet session, so busy sessions' jobs enqueue
    # their next run (an arq enqueue: WATCH, MULTI) again and again.
    env = worker_env(
        server.url, namespace, queue_name, EXTRACTOR="rules", EXTRACT_QUIET=0.2, SWEEP_SECONDS=1
    )
    for _ in range(2):
        await wait_ready(raw, workers.start(env))
    sessions = [f"s{i}" for i in range(12)]
    written = 0

    async def writer(session_id: str) -> None:
        nonlocal written
        for turn in range(40):
            await mem.write(
                [{"role": "user", "content": f"I live in Town{turn} and I like tea number {turn}"}],
                session_id=session_id,
                user_id="ann",
            )
            written += 1
            await asyncio.sleep(0.02)

    async with client_kill_storm(server.url, every=0.03) as kills:
        await asyncio.gather(*(writer(s) for s in sessions))
    assert kills[0] > 20
    assert written == len(sessions) * 40
    deadline = time.monotonic() + 120
    while not await mem.flush(user_id="ann", timeout=5):
        assert time.monotonic() < deadline, workers.logs()[-4000:]
    snapshot = await QueueStats(raw, mem.layout).snapshot()
    assert snapshot["counters"].get("failures", 0) == 0, (snapshot["failures"], workers.logs())
    assert snapshot["failures"] == []
    assert all(w.alive for w in workers.started), workers.logs()
    # The work was done: every session summarized down to its recent messages.
    for session_id in sessions:
        context = await mem.context(session_id=session_id, user_id="ann")
        assert context.summary is not None
        assert context.summary.message_count + len(context.messages) - 1 == 40
