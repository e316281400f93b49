"""The reconcile sweep enqueues a pending session only when no job of its
episode is waiting or running: with REAL worker processes
(``arq workers.WorkerSettings``) on the suite's real Redis.

A job that waits in a backlog, is deferred past the grace, retries with
backoff or is in flight gets no duplicate (a duplicate of a poisoned session
would fail it twice, and a backlog would grow by one job per session per
grace period); a job that was really lost (its enqueue never landed, or its
queue entry vanished while its job key stayed) is still enqueued again, once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from conftest import MemoryFactory
from worker_support import (
    FakeChatServer,
    RecordedRequest,
    Reply,
    WorkerPool,
    dialogue,
    eventually,
    wait_ready,
    worker_env,
)

from redismem import Memory
from redismem.config import WorkerConfig
from redismem.core.keys import KeyLayout
from redismem.core.queue import QueueStats, job_id, lease_key
from redismem.summarization.summarizers import TruncationSummarizer
from redismem.workers.context import resources
from redismem.workers.jobs import MAX_TRIES, reconcile_pending

SID = "s1"


@pytest_asyncio.fixture(loop_scope="function")
async def raw(raw_factory: Any, redis_url: str) -> Any:
    """A raw client on the real Redis (memory and queue alike)."""
    return await raw_factory(redis_url)


@pytest.fixture
def llm() -> Iterator[Callable[..., FakeChatServer]]:
    servers: list[FakeChatServer] = []

    def start(responder: Callable[[int, RecordedRequest], Reply]) -> FakeChatServer:
        server = FakeChatServer(responder).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def llm_env(server: FakeChatServer) -> dict[str, Any]:
    return {
        "SUMMARIZER": "llm",
        "LLM_BASE_URL": server.base_url,
        "LLM_MODEL": "fake-model",
        "LLM_API_KEY": "sk-test",
        "LLM_TIMEOUT": 20,
    }


@pytest_asyncio.fixture(loop_scope="function")
async def sweeper(
    redis_url: str, raw: Any, namespace: str, queue_name: str
) -> AsyncIterator[Callable[[], Any]]:
    """``await sweep()``: one whole pass of the reconcile sweep (its SCAN
    slices until the cursor is back at 0) with a 0.5 s grace, run here as a
    worker runs it; returns how many jobs it enqueued."""
    config = WorkerConfig(
        url=redis_url,
        queue_url=redis_url,
        queue_name=queue_name,
        namespaces=(namespace,),
        summarizer=TruncationSummarizer(),
        sweep_grace=0.5,
    )
    ctx: dict[str, Any] = {"redis": raw, **resources(config)}
    cursor = KeyLayout(namespace).queue_key("sweep")

    async def sweep() -> int:
        enqueued = 0
        while True:
            enqueued += (await reconcile_pending(ctx))["enqueued"]
            if await raw.get(cursor) == b"0":
                return enqueued

    yield sweep
    await ctx["queue"].aclose()
    for backend in ctx["backends"].values():
        await backend.aclose()


async def summary_jobs(raw: Any, queue_name: str) -> list[bytes]:
    """Summarization jobs on the queue (waiting, deferred or running), sorted."""
    return sorted(j for j in await raw.zrange(queue_name, 0, -1) if j.startswith(b"sum:"))


async def waiting_jobs(raw: Any, queue_name: str) -> int:
    """Summarization jobs on the queue not running (waiting or deferred)."""
    running = [
        await raw.exists(b"arq:in-progress:" + j) for j in await summary_jobs(raw, queue_name)
    ]
    return running.count(0)


def job_starts(log: str) -> int:
    """How many summarization jobs (tries included) arq started."""
    return log.count(":summarize_session(")


async def counters(raw: Any, memory: Memory) -> dict[str, int]:
    snap: dict[str, Any] = await QueueStats(raw, memory.layout).snapshot()
    return dict(snap["counters"])


async def failures(raw: Any, memory: Memory) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = (await QueueStats(raw, memory.layout).snapshot())["failures"]
    return records


def no_enqueue(memory: Memory) -> Memory:
    """Writes still mark the session pending but never enqueue its job (a
    client that died between its write and its enqueue)."""

    async def skip(*args: Any) -> None:
        return None

    memory._enqueue_summary = skip  # type: ignore[method-assign]
    return memory


async def all_settled(raw: Any, memory: Memory, queue_name: str, sessions: list[str]) -> bool:
    """Every session summarized, no mark left, no job on the queue."""
    pending = memory.layout.pending("default")
    for session in sessions:
        if await memory.summary(session_id=session) is None:
            return False
        if await raw.zscore(pending, session) is not None:
            return False
    return not await summary_jobs(raw, queue_name)


# ---------------------------------------------------------------------------


async def test_a_backlog_gets_no_duplicate_jobs_from_the_sweeps(
    memory_factory: MemoryFactory,
    raw: Any,
    redis_url: str,
    namespace: str,
    queue_name: str,
    workers: WorkerPool,
    sweeper: Callable[[], Any],
) -> None:
    worker = workers.start(
        worker_env(
            redis_url, namespace, queue_name, SUMMARIZER="truncate", SWEEP_SECONDS=1, SWEEP_GRACE=1
        )
    )
    await wait_ready(raw, worker)
    worker.pause()  # a backlog: every job waits, none starts
    memory = await memory_factory(
        redis_url, keep_recent=4, summarize_batch=6, summarize_delay=0.1, queue_name=queue_name
    )
    sessions = [f"s{i}" for i in range(5)]
    for session in sessions:
        await memory.write(dialogue(12), session_id=session)

    async def all_queued() -> list[bytes] | None:
        jobs = await summary_jobs(raw, queue_name)
        return jobs if len(jobs) == len(sessions) else None

    try:
        jobs = await eventually(all_queued, what="one job per session")
        # Sweeps past the grace, one a second: each session's job is still
        # waiting, so none of them adds a job.
        for _ in range(3):
            await asyncio.sleep(1.0)
            assert await sweeper() == 0
            assert await summary_jobs(raw, queue_name) == jobs
    finally:
        worker.resume()

    await eventually(
        lambda: all_settled(raw, memory, queue_name, sessions),
        what="every session summarized",
        describe=workers.logs,
    )
    await asyncio.sleep(1.5)  # one more sweep of the worker's own
    assert job_starts(worker.log()) == len(sessions), worker.log()
    seen = await counters(raw, memory)
    assert seen["jobs"] == len(sessions), seen
    assert "swept" not in seen, seen


async def test_a_job_deferred_past_the_grace_is_not_duplicated(
    memory_factory: MemoryFactory,
    raw: Any,
    redis_url: str,
    namespace: str,
    queue_name: str,
    workers: WorkerPool,
) -> None:
    worker = workers.start(
        worker_env(
            redis_url, namespace, queue_name, SUMMARIZER="truncate", SWEEP_SECONDS=1, SWEEP_GRACE=1
        )
    )
    await wait_ready(raw, worker)
    memory = await memory_factory(
        redis_url, keep_recent=4, summarize_batch=6, summarize_delay=6.0, queue_name=queue_name
    )
    sessions = ["a", "b"]
    for session in sessions:
        await memory.write(dialogue(12), session_id=session)
    await asyncio.sleep(3.0)  # sweeps past the grace, the jobs still deferred
    assert job_starts(worker.log()) == 0, worker.log()
    assert len(await summary_jobs(raw, queue_name)) == len(sessions)

    await eventually(
        lambda: all_settled(raw, memory, queue_name, sessions),
        what="both sessions summarized",
        describe=workers.logs,
    )
    assert job_starts(worker.log()) == len(sessions), worker.log()
    assert "swept" not in await counters(raw, memory)


async def test_a_poisoned_session_in_flight_fails_once_while_sweeps_run(
    memory_factory: MemoryFactory,
    raw: Any,
    redis_url: str,
    namespace: str,
    queue_name: str,
    workers: WorkerPool,
    llm: Any,
) -> None:
    hold = threading.Event()

    def responder(index: int, request: RecordedRequest) -> Reply:
        return Reply(content=f"summary #{index}", hold=hold if index == 0 else None)

    server = llm(responder)
    worker = workers.start(
        worker_env(
            redis_url, namespace, queue_name, SWEEP_SECONDS=1, SWEEP_GRACE=1, **llm_env(server)
        )
    )
    await wait_ready(raw, worker)
    memory = await memory_factory(
        redis_url, keep_recent=4, summarize_batch=6, summarize_delay=0.1, queue_name=queue_name
    )
    await memory.write(dialogue(12), session_id=SID)
    keys = memory.layout.session("default", SID)
    pending = memory.layout.pending("default")
    try:
        await server.wait_requests(1)  # the job is in flight, its first pass held
        # More messages, one of them corrupt: the job meets it in its next
        # pass, once the held one has committed.
        await memory.write(dialogue(10, start=12), session_id=SID)
        await raw.lset(keys.msgs, 19, b"garbage")
        await asyncio.sleep(3.0)  # sweeps run past the grace meanwhile
    finally:
        hold.set()

    [record] = await eventually(
        lambda: failures(raw, memory), what="the failure record", describe=workers.logs
    )

    async def ended() -> bool:
        return not await summary_jobs(raw, queue_name)

    await eventually(ended, what="the job to end", describe=workers.logs)
    assert record["error"].startswith("CorruptData: ")
    assert keys.msgs in record["error"]
    assert (record["session"], record["tries"]) == (SID, 1)
    assert await raw.zscore(pending, SID) is None
    await asyncio.sleep(1.5)  # one more sweep
    seen = await counters(raw, memory)
    assert seen.get("failures") == 1, seen
    assert "swept" not in seen, seen
    assert job_starts(worker.log()) == 1, worker.log()
    assert server.count == 1
    assert len(await failures(raw, memory)) == 1


async def test_a_job_retrying_with_backoff_gets_no_duplicate(
    memory_factory: MemoryFactory,
    raw: Any,
    redis_url: str,
    namespace: str,
    queue_name: str,
    workers: WorkerPool,
    llm: Any,
) -> None:
    # The tries span 1 + 2 + 4 s of backoff: sweeps past the 1 s grace run
    # while the job is deferred between them.
    server = llm(lambda index, request: Reply(status=500, body=b'{"error": "down"}'))
    worker = workers.start(
        worker_env(
            redis_url, namespace, queue_name, SWEEP_SECONDS=1, SWEEP_GRACE=1, **llm_env(server)
        )
    )
    await wait_ready(raw, worker)
    memory = await memory_factory(
        redis_url, keep_recent=4, summarize_batch=6, summarize_delay=0.1, queue_name=queue_name
    )
    await memory.write(dialogue(12), session_id=SID)

    [record] = await eventually(
        lambda: failures(raw, memory), within=30, what="the failure record", describe=workers.logs
    )
    assert record["tries"] == MAX_TRIES
    await asyncio.sleep(2.5)  # sweeps after the give-up: the mark is cleared
    assert server.count == MAX_TRIES
    seen = await counters(raw, memory)
    assert seen.get("failures") == 1, seen
    assert "swept" not in seen, seen
    assert job_starts(worker.log()) == MAX_TRIES, worker.log()
    assert await summary_jobs(raw, queue_name) == []


async def test_a_lost_job_is_enqueued_again_once(
    memory_factory: MemoryFactory,
    raw: Any,
    redis_url: str,
    namespace: str,
    queue_name: str,
    workers: WorkerPool,
    sweeper: Callable[[], Any],
) -> None:
    memory = await memory_factory(
        redis_url, keep_recent=4, summarize_batch=6, summarize_delay=60, queue_name=queue_name
    )
    await memory.write(dialogue(12), session_id=SID)
    orphan = no_enqueue(
        await memory_factory(redis_url, keep_recent=4, summarize_batch=6, queue_name=queue_name)
    )
    await orphan.write(dialogue(12), session_id="orphan")
    pending = memory.layout.pending("default")

    def ids(session: str, since: float, *retries: int) -> list[bytes]:
        episode = str(int(since))
        return [
            job_id(namespace, "default", session, f"{episode}~{n}" if n else episode).encode()
            for n in retries
        ]

    since = await raw.zscore(pending, SID)
    [first] = ids(SID, since, 0)
    [orphan_job] = ids("orphan", await raw.zscore(pending, "orphan"), 0)

    async def queued() -> bool:
        return await summary_jobs(raw, queue_name) == [first]

    await eventually(queued, what="the first session's job")
    await asyncio.sleep(0.6)  # both marks past the grace

    # The job whose enqueue never landed is enqueued, under its episode's id;
    # the one still waiting (deferred) is left alone.
    assert await sweeper() == 1
    assert await summary_jobs(raw, queue_name) == sorted([first, orphan_job])
    await raw.zrem(queue_name, orphan_job)
    await raw.delete(b"arq:job:" + orphan_job)
    await raw.zrem(pending, "orphan")  # out of the way: the first session's chain follows

    # Its queue entry vanishes, its job key stays: enqueued again under ~1, once.
    await raw.zrem(queue_name, first)
    assert await raw.exists(b"arq:job:" + first)
    assert await sweeper() == 1
    [retry1] = ids(SID, since, 1)
    assert await summary_jobs(raw, queue_name) == [retry1]
    assert await sweeper() == 0
    assert await summary_jobs(raw, queue_name) == [retry1]

    # Lost again: ~2, once.
    await raw.zrem(queue_name, retry1)
    assert await sweeper() == 1
    [retry2] = ids(SID, since, 2)
    assert await summary_jobs(raw, queue_name) == [retry2]
    # The first lost job's key expires: its id is free again, but ~2 waits.
    await raw.delete(b"arq:job:" + first)
    assert await sweeper() == 0
    assert await summary_jobs(raw, queue_name) == [retry2]

    worker = workers.start(
        worker_env(redis_url, namespace, queue_name, SUMMARIZER="truncate", SWEEP_GRACE=1)
    )
    await eventually(
        lambda: all_settled(raw, memory, queue_name, [SID]),
        what="the session summarized",
        describe=workers.logs,
    )
    assert job_starts(worker.log()) == 1, worker.log()
    assert f"{retry2.decode()}:summarize_session(" in worker.log()
    seen = await counters(raw, memory)
    assert (seen["swept"], seen["jobs"]) == (3, 1), seen


async def test_a_job_going_on_in_a_new_one_keeps_the_sweep_out(
    memory_factory: MemoryFactory,
    raw: Any,
    redis_url: str,
    namespace: str,
    queue_name: str,
    workers: WorkerPool,
) -> None:
    # Extraction waits for the session to be quiet for 3 s: while a burst
    # goes on, each job enqueues the next one, deferred, and ends.
    worker = workers.start(
        worker_env(
            redis_url,
            namespace,
            queue_name,
            SUMMARIZER="truncate",
            EXTRACTOR="rules",
            EXTRACT_QUIET=3,
            SWEEP_SECONDS=1,
            SWEEP_GRACE=1,
        )
    )
    await wait_ready(raw, worker)
    memory = await memory_factory(
        redis_url, keep_recent=4, summarize_batch=6, summarize_delay=0.1, queue_name=queue_name
    )
    most = 0

    async def look() -> None:
        nonlocal most
        most = max(most, await waiting_jobs(raw, queue_name))

    for i in range(8):  # a 4 s burst
        await memory.write(dialogue(2, start=2 * i), session_id=SID)
        await look()
        await asyncio.sleep(0.5)

    async def settled() -> bool:
        await look()
        return await all_settled(raw, memory, queue_name, [SID])

    await eventually(settled, what="the session summarized", describe=workers.logs)
    await asyncio.sleep(1.5)  # one more sweep
    assert most == 1, worker.log()  # one job of the episode waits at a time
    seen = await counters(raw, memory)
    assert "swept" not in seen, seen
    assert seen["jobs"] == job_starts(worker.log()), seen
    assert seen["messages_extracted"] == 16, seen


async def test_a_job_whose_worker_died_is_run_again_within_a_few_graces(
    memory_factory: MemoryFactory,
    raw: Any,
    redis_url: str,
    namespace: str,
    queue_name: str,
    workers: WorkerPool,
    llm: Any,
) -> None:
    # arq's in-progress mark outlives a SIGKILLed worker until the job
    # timeout (+ 10 s); the job's lease lapses within the grace, and the
    # sweep of a second worker enqueues the episode again then.
    hold = threading.Event()

    def responder(index: int, request: RecordedRequest) -> Reply:
        return Reply(content=f"summary #{index}", hold=hold if index == 0 else None)

    server = llm(responder)
    env = worker_env(
        redis_url,
        namespace,
        queue_name,
        SWEEP_SECONDS=1,
        SWEEP_GRACE=1,
        JOB_TIMEOUT=60,
        **llm_env(server),
    )
    first = workers.start(env)
    await wait_ready(raw, first)
    memory = await memory_factory(
        redis_url, keep_recent=4, summarize_batch=6, summarize_delay=0.1, queue_name=queue_name
    )
    await memory.write(dialogue(12), session_id=SID)
    since = await raw.zscore(memory.layout.pending("default"), SID)
    job = job_id(namespace, "default", SID, str(int(since)))
    try:
        await server.wait_requests(1)  # the job is in flight, its first pass held
        assert await raw.exists(lease_key(namespace, job))
        first.kill()
        killed = time.monotonic()
        second = workers.start(env)
        await wait_ready(raw, second)

        async def summarized() -> bool:
            # (the dead job stays on arq's queue until its mark expires)
            if await memory.summary(session_id=SID) is None:
                return False
            return await raw.zscore(memory.layout.pending("default"), SID) is None

        await eventually(
            summarized,
            within=15,
            what="the session summarized by the second worker",
            describe=workers.logs,
        )
    finally:
        hold.set()
    took = time.monotonic() - killed
    assert took < 12, took  # a few graces, not the 70 s of arq's in-progress mark
    assert await raw.exists(b"arq:in-progress:" + job.encode())  # still: arq's mark
    assert f"{job}~1:summarize_session(" in second.log(), second.log()
    seen = await counters(raw, memory)
    assert seen["swept"] == 1, seen
