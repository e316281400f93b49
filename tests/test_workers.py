"""Summarization by REAL worker processes (``python -m arq workers.WorkerSettings``)
on the session's real Redis, plus the in-process worker on the embedded backend.

Every test uses its own namespace and its own arq queue name, so workers of
one test never see another test's jobs. Workers are always reaped at teardown.
Throughout, the invariant "stored + summarized == written" is checked at
every poll (atomically, see ``worker_support.session_state``).
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from conftest import MemoryFactory
from helpers import assistant, snapshot, tool_result, user
from worker_support import (
    FakeChatServer,
    RecordedRequest,
    Reply,
    SessionState,
    WorkerPool,
    WorkerProcess,
    assert_invariant,
    backlog,
    dialogue,
    eventually,
    wait_ready,
    worker_env,
)

from redismem import Memory, Message
from redismem.core.queue import QueueStats, SummaryQueue
from redismem.summarization.summarizers import TruncationSummarizer
from redismem.workers.inprocess import InProcessWorker
from redismem.workers.jobs import MAX_TRIES

SID = "s1"
KEEP, BATCH = 10, 20


@pytest.fixture
def llm() -> Iterator[Callable[..., FakeChatServer]]:
    servers: list[FakeChatServer] = []

    def start(responder: Callable[[int, RecordedRequest], Reply] | None = None) -> FakeChatServer:
        server = FakeChatServer(responder).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest_asyncio.fixture(loop_scope="function")
async def raw(raw_factory: Any, redis_url: str) -> Any:
    """A raw client on the real Redis (the workers' backend)."""
    return await raw_factory(redis_url)


@dataclass
class Rig:
    """Real workers and ``Memory`` clients on the test's real Redis, namespace
    and queue: ``rig.worker(**env)`` starts a worker process (``env``: its
    variables without the ``REDISMEM_`` prefix), ``await rig.memory(**options)``
    connects a client (``keep_recent=KEEP, summarize_batch=BATCH`` unless
    given). The conftest fixtures behind it close and reap both at teardown."""

    redis_url: str
    namespace: str
    queue_name: str
    raw: Any
    workers: WorkerPool
    memory_factory: MemoryFactory

    def worker(self, name: str | None = None, **env: Any) -> WorkerProcess:
        variables = worker_env(self.redis_url, self.namespace, self.queue_name, **env)
        return self.workers.start(variables, name=name)

    async def memory(self, **options: Any) -> Memory:
        defaults = {"keep_recent": KEEP, "summarize_batch": BATCH, "queue_name": self.queue_name}
        return await self.memory_factory(self.redis_url, **(defaults | options))

    async def settled(self, memory: Memory, *, written: int, **kwargs: Any) -> SessionState:
        return await settled(
            memory, self.raw, self.queue_name, self.workers, written=written, **kwargs
        )


@pytest.fixture
def rig(
    redis_url: str,
    namespace: str,
    queue_name: str,
    raw: Any,
    workers: WorkerPool,
    memory_factory: MemoryFactory,
) -> Rig:
    return Rig(redis_url, namespace, queue_name, raw, workers, memory_factory)


def llm_env(server: FakeChatServer) -> dict[str, Any]:
    return {
        "SUMMARIZER": "llm",
        "LLM_BASE_URL": server.base_url,
        "LLM_MODEL": "fake-model",
        "LLM_API_KEY": "sk-test",
        "LLM_TIMEOUT": 20,
    }


def no_enqueue(memory: Memory) -> Memory:
    """Writes still mark the session pending, but never enqueue its job: the
    state a client leaves when it dies between its write and its enqueue."""

    async def skip(*args: Any) -> None:
        return None

    memory._enqueue_summary = skip  # type: ignore[method-assign]
    return memory


async def summary_jobs(raw: Any, queue_name: str) -> list[bytes]:
    """Summarization jobs still queued (waiting, deferred or running)."""
    return [j for j in await raw.zrange(queue_name, 0, -1) if j.startswith(b"sum:")]


async def settled(
    memory: Memory,
    raw: Any,
    queue_name: str,
    workers: WorkerPool,
    *,
    written: int,
    within: float = 20.0,
    keep_recent: int = KEEP,
    batch: int = BATCH,
) -> SessionState:
    """Poll until the session is summarized and no job is left, checking the
    invariant at every poll."""
    pending = memory.layout.pending("default")
    last: list[SessionState] = []

    async def check() -> SessionState | None:
        state = await assert_invariant(memory, SID, written=written)
        last[:] = [state]
        if state.summary_text is None or backlog(state, keep_recent) >= batch:
            return None
        if await raw.zscore(pending, SID) is not None or await summary_jobs(raw, queue_name):
            return None
        return state

    result: SessionState = await eventually(
        check,
        within=within,
        what="the session to be summarized",
        describe=lambda: f"last state: {last}\n{workers.logs()}",
    )
    return result


async def stats(raw: Any, memory: Memory) -> dict[str, Any]:
    return await QueueStats(raw, memory.layout).snapshot()


# ---------------------------------------------------------------------------


async def test_burst_of_writes_coalesces_into_a_handful_of_jobs(rig: Rig) -> None:
    worker = rig.worker()  # default summarizer: keypoints
    memory = await rig.memory(summarize_delay=1.0)
    enqueued: list[int] = []
    enqueue = memory._enqueue_summary

    async def counting(*args: Any) -> None:  # (uid, sid, episode, ...)
        enqueued.append(args[2])
        await enqueue(*args)

    memory._enqueue_summary = counting  # type: ignore[method-assign]
    await wait_ready(rig.raw, worker)

    async def writer(k: int) -> None:
        for i in range(20):
            await memory.write(dialogue(1, start=k * 20 + i), session_id=SID)
            await asyncio.sleep(0.1)  # the burst lasts ~2 s: jobs run while writes go on

    # 1,000 writes from 50 concurrent tasks, the invariant checked all along.
    writers = asyncio.gather(*(writer(k) for k in range(50)))
    checks = 0
    while not writers.done():
        await assert_invariant(memory, SID)
        checks += 1
        await asyncio.sleep(0.02)
    await writers
    assert checks > 10

    state = await rig.settled(memory, written=1000)
    assert backlog(state, KEEP) < BATCH
    summary = await memory.summary(session_id=SID)
    assert summary is not None
    assert summary.message_count + len(await memory.read(session_id=SID)) == 1000
    # The default summarizer (key points) wrote it.
    assert summary.text.splitlines()[0] in ("Facts and preferences:", "Decisions:")
    assert all(line.endswith(":") or line.startswith("- ") for line in summary.text.splitlines())

    counters = (await stats(rig.raw, memory))["counters"]
    assert 1 <= len(enqueued) <= 10, enqueued
    assert 1 <= counters["jobs"] <= len(enqueued), counters
    assert counters["messages_summarized"] == summary.message_count
    assert counters.get("failures", 0) == 0
    assert worker.alive


async def test_worker_killed_mid_summarization(rig: Rig, llm: Any) -> None:
    hold = threading.Event()

    def responder(index: int, request: RecordedRequest) -> Reply:
        if index == 0:  # the first worker's call: in flight until the worker is dead
            return Reply(content="never delivered", hold=hold)
        return Reply(content=f"summary #{index}")

    server = llm(responder)
    first = rig.worker("first", **llm_env(server))
    memory = await rig.memory(summarize_delay=0.1)
    written = dialogue(40)
    for i in range(0, 40, 4):
        await memory.write(written[i : i + 4], session_id=SID)

    await server.wait_requests(1)  # the job is mid-flight in the first worker
    state = await assert_invariant(memory, SID, written=40)
    assert state.summary_text is None
    first.kill()
    hold.set()
    assert not first.alive
    await assert_invariant(memory, SID, written=40)
    assert await memory.summary(session_id=SID) is None

    # Writes go on while no worker is alive; the session is already pending.
    await memory.write(dialogue(5, start=40), session_id=SID)
    await assert_invariant(memory, SID, written=45)

    in_progress = [
        k async for k in rig.raw.scan_iter(match=f"arq:in-progress:sum:{rig.namespace}:*")
    ]
    assert len(in_progress) == 1, in_progress
    second = rig.worker("second", **llm_env(server))
    await wait_ready(rig.raw, second)
    await asyncio.sleep(0.5)
    assert server.count == 1  # the job is still "in progress" for arq
    # arq lets another worker re-run a crashed worker's job only once its
    # in-progress key expires (JOB_TIMEOUT_S + 10 s = 55 s); simulate that
    # expiry instead of waiting for it.
    await rig.raw.delete(*in_progress)

    state = await rig.settled(memory, written=45)
    summary = await memory.summary(session_id=SID)
    assert summary is not None
    assert summary.message_count == 35  # each message counted once
    assert summary.text == "summary #1"
    assert len(await memory.read(session_id=SID)) == KEEP
    assert server.count == 2
    assert state.summarized == 35
    counters = (await stats(rig.raw, memory))["counters"]
    assert counters["summaries"] == 1
    assert counters["messages_summarized"] == 35


async def test_same_session_job_run_twice_by_two_workers(rig: Rig, llm: Any) -> None:
    server = llm(lambda index, request: Reply(content=f"run {index}", delay=1.0))
    pair = [rig.worker("a", **llm_env(server)), rig.worker("b", **llm_env(server))]
    memory = no_enqueue(await rig.memory())
    await memory.write(dialogue(40), session_id=SID)
    for worker in pair:
        await wait_ready(rig.raw, worker)
    args = memory.summarize_args()
    assert args is not None
    namespace = rig.namespace
    queue = SummaryQueue(rig.redis_url, queue_name=rig.queue_name, delay=0)
    try:
        # The same session's job under two episode ids; the same id twice coalesces.
        assert await queue.enqueue("default", SID, "episode-a", namespace, args)
        assert not await queue.enqueue("default", SID, "episode-a", namespace, args)
        await server.wait_requests(1)

        async def runner_of_a() -> Any:
            return next((w for w in pair if "episode-a:summarize_session(" in w.log()), None)

        first = await eventually(runner_of_a, what="the worker running episode-a")
        second = next(w for w in pair if w is not first)
        # Freeze the first worker mid-call, so the second one must take episode-b:
        # two processes then summarize the same backlog concurrently.
        first.pause()
        try:
            assert await queue.enqueue("default", SID, "episode-b", namespace, args)
            await server.wait_requests(2)
        finally:
            first.resume()
    finally:
        await queue.aclose()

    requests = server.requests
    assert requests[0].transcript == requests[1].transcript  # both on the same backlog
    await rig.settled(memory, written=40)
    assert "episode-b:summarize_session(" in second.log()
    summary = await memory.summary(session_id=SID)
    assert summary is not None
    assert summary.message_count == 30
    assert summary.text in ("run 0", "run 1")
    assert len(await memory.read(session_id=SID)) == KEEP
    counters = (await stats(rig.raw, memory))["counters"]
    assert counters["summaries"] == 1
    assert counters["messages_summarized"] == 30
    assert counters["stale_commits"] == 1
    assert counters["jobs"] == 2
    assert server.count == 2


async def test_summarizer_failures_are_retried(rig: Rig, llm: Any) -> None:
    def flaky(index: int, request: RecordedRequest) -> Reply:
        if index < 2:
            return Reply(status=500, body=b'{"error": "overloaded"}')
        return Reply(content="third time lucky")

    server = llm(flaky)
    rig.worker(**llm_env(server))
    memory = await rig.memory(summarize_delay=0.1)
    await memory.write(dialogue(30), session_id=SID)

    await rig.settled(memory, written=30)
    summary = await memory.summary(session_id=SID)
    assert summary is not None
    assert (summary.text, summary.message_count) == ("third time lucky", 20)
    assert server.count == 3
    snap = await stats(rig.raw, memory)
    assert snap["failures"] == []
    assert snap["counters"].get("failures", 0) == 0
    assert snap["counters"]["summaries"] == 1


async def test_summarizer_that_always_fails_is_recorded_and_given_up(rig: Rig, llm: Any) -> None:
    server = llm(lambda index, request: Reply(status=500, body=b'{"error": "down"}'))
    worker = rig.worker(**llm_env(server))
    memory = await rig.memory(
        summarize_delay=0.1,
        index=False,  # the session stays byte for byte (indexing would add its watermark)
    )
    raw, workers = rig.raw, rig.workers
    written = dialogue(30)
    await memory.write(written, session_id=SID)
    session_pattern = memory.layout.session("default", SID).msgs.removesuffix("msgs") + "*"
    before = await snapshot(raw, session_pattern)
    assert {k.rsplit(b":", 1)[1] for k in before} == {b"msgs", b"meta", b"entries", b"writes"}

    async def failed() -> list[dict[str, Any]]:
        await assert_invariant(memory, SID, written=30)
        records: list[dict[str, Any]] = (await stats(raw, memory))["failures"]
        return records

    [record] = await eventually(failed, within=30, what="the failure record", describe=workers.logs)
    assert record["session"] == SID
    assert record["user"] == "default"
    assert record["tries"] == MAX_TRIES
    assert "HTTP 500" in record["error"]
    snap = await stats(raw, memory)
    assert snap["counters"]["failures"] == 1
    assert "summaries" not in snap["counters"]

    async def job_gone() -> bool:
        return not await summary_jobs(raw, rig.queue_name)

    await eventually(job_gone, what="the failed job to leave the queue", describe=workers.logs)
    assert server.count == MAX_TRIES
    assert await raw.zscore(memory.layout.pending("default"), SID) is None
    # The session is exactly as written: nothing summarized, nothing removed.
    assert await snapshot(raw, session_pattern) == before
    assert await memory.summary(session_id=SID) is None
    assert [m.content for m in await memory.read(session_id=SID)] == [m["content"] for m in written]
    assert worker.alive


async def test_reconcile_sweep_picks_up_an_orphaned_session(rig: Rig) -> None:
    memory = no_enqueue(await rig.memory())
    await memory.write(dialogue(30), session_id=SID)
    assert await rig.raw.zscore(memory.layout.pending("default"), SID) is not None
    assert await summary_jobs(rig.raw, rig.queue_name) == []  # orphaned: marked, no job

    rig.worker(SUMMARIZER="truncate", SWEEP_SECONDS=1, SWEEP_GRACE=1)
    state = await rig.settled(memory, written=30)
    assert state.summarized == 20
    counters = (await stats(rig.raw, memory))["counters"]
    assert counters["swept"] >= 1
    assert counters["jobs"] >= 1


async def test_worker_configuration_comes_from_the_environment(rig: Rig) -> None:
    rig.worker(SUMMARIZER="truncate", SUMMARY_MAX_CHARS=200)
    memory = await rig.memory(summarize_delay=0.1)
    await memory.write(dialogue(30), session_id=SID)
    await rig.settled(memory, written=30)

    summary = await memory.summary(session_id=SID)
    assert summary is not None
    messages = [Message.model_validate(m) for m in dialogue(20)]
    expected = await TruncationSummarizer(200).summarize(None, messages)
    assert summary.text == expected
    assert len(summary.text) <= 200
    assert summary.text.splitlines()[-1].startswith("assistant: msg 19:")


async def test_in_process_worker_on_the_embedded_backend(
    memory_factory: Any, namespace: str, queue_name: str
) -> None:
    url = f"memory://{namespace}"
    memory = await memory_factory(
        url,
        keep_recent=4,
        summarize_batch=5,
        summarize_delay=0.0,
        queue_name=queue_name,
    )
    worker = InProcessWorker(
        url, summarizer=TruncationSummarizer(), namespaces=[namespace], queue_name=queue_name
    )
    await worker.start()
    try:
        for i in range(0, 30, 3):
            await memory.write(dialogue(3, start=i), session_id=SID)
            await assert_invariant(memory, SID, written=i + 3)

        async def done() -> SessionState | None:
            state = await assert_invariant(memory, SID, written=30)
            pending = await memory.redis.zscore(memory.layout.pending("default"), SID)
            if state.summary_text is None or pending is not None or backlog(state, 4) >= 5:
                return None
            return state

        state = await eventually(done, what="the in-process worker to summarize")
    finally:
        await worker.aclose()
    assert state.summarized >= 21
    summary = await memory.summary(session_id=SID)
    assert summary is not None
    last_summarized = dialogue(1, start=state.wm - 1)[0]["content"]
    assert summary.text.splitlines()[-1].endswith(last_summarized)
    assert len(await memory.read(session_id=SID)) == 30 - summary.message_count


async def test_in_process_worker_closes_without_warnings(namespace: str) -> None:
    worker = InProcessWorker(
        f"memory://{namespace}",
        summarizer=TruncationSummarizer(),
        namespaces=[namespace],
        queue_name=f"redismem/queue-{namespace}",
    )
    await worker.start()
    await asyncio.sleep(0.2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            await worker.aclose()
    finally:
        await worker.aclose()


async def test_memory_aclose_closes_queue_connections(
    redis_url: str, namespace: str, queue_name: str, raw: Any
) -> None:  # raw: the conftest cleanup of this namespace's keys on the real Redis
    memory = await Memory.connect(
        redis_url,
        namespace=namespace,
        keep_recent=0,
        summarize_batch=1,
        summarize_delay=60,
        queue_name=queue_name,
    )
    await memory.write(dialogue(2), session_id=SID)  # enqueues: opens the queue pool

    async def enqueued() -> bool:
        return bool(await raw.zcard(queue_name))

    await eventually(enqueued, within=10, what="the write's job enqueued (in the background)")
    pool = memory.queue.pool.connection_pool
    try:
        await memory.aclose()
        assert not [c for c in pool._available_connections if c.is_connected]
    finally:
        await pool.disconnect()


async def test_idle_pass_does_not_stall_a_due_session(rig: Rig) -> None:
    rig.worker(SUMMARIZER="truncate")
    memory = await rig.memory(keep_recent=2, summarize_batch=3, summarize_delay=0.1)
    raw, queue_name, workers = rig.raw, rig.queue_name, rig.workers
    calls = [{"id": f"c{i}", "name": "lookup", "arguments": {}} for i in range(4)]
    results = [tool_result(f"c{i}", f"r{i}") for i in range(4)]
    # 5 messages, 3 beyond the window: due, but every cut falls inside the tool sequence.
    await memory.write(
        [{"role": "assistant", "content": "", "tool_calls": calls}, *results], session_id=SID
    )

    async def first_job_done() -> bool:
        counters = (await stats(raw, memory))["counters"]
        return counters.get("jobs", 0) >= 1 and not await summary_jobs(raw, queue_name)

    await eventually(first_job_done, what="the first (idle) job", describe=workers.logs)
    assert await memory.summary(session_id=SID) is None

    await memory.write([user("thanks"), assistant("you're welcome")], session_id=SID)

    async def summarized() -> bool:
        await assert_invariant(memory, SID, written=7)
        return await memory.summary(session_id=SID) is not None

    await eventually(summarized, within=6, what="the summary", describe=workers.logs)


async def test_concurrent_jobs_llm_calls_do_not_wait_for_threads(rig: Rig, llm: Any) -> None:
    # Regression: LLM calls once ran in asyncio's default executor (min(32, cpus + 4)
    # threads), so with 16 concurrent jobs on a small machine calls waited for a
    # thread past their timeout. Every call here is answered in 1.8 s, within 2 s.
    server = llm(lambda index, request: Reply(content=f"summary {index}", delay=1.8))
    worker = rig.worker(**(llm_env(server) | {"LLM_TIMEOUT": 2}))
    await wait_ready(rig.raw, worker)
    memory = await rig.memory(keep_recent=2, summarize_batch=3, summarize_delay=0.5)
    sessions = [f"s{i}" for i in range(16)]  # WorkerSettings.max_jobs jobs at once
    await asyncio.gather(*(memory.write(dialogue(5), session_id=s) for s in sessions))

    async def all_summarized() -> bool:
        found = [await memory.summary(session_id=s) for s in sessions]
        return all(s is not None for s in found)

    await eventually(all_summarized, within=6, what="16 summaries", describe=rig.workers.logs)
    assert server.count == 16  # no call failed and was retried


@pytest.mark.parametrize("how", ["clear", "clear_user"])
async def test_job_of_a_cleared_session_commits_nothing_into_its_new_incarnation(
    rig: Rig, llm: Any, how: str
) -> None:
    """Issue 7, defect 1, with a real worker: the summary of a cleared
    conversation never reaches the session written after the clear."""
    hold = threading.Event()

    def responder(index: int, request: RecordedRequest) -> Reply:
        return Reply(content="summary of the cleared conversation", hold=hold)

    server = llm(responder)
    rig.worker(**llm_env(server))
    memory = await rig.memory(keep_recent=5, summarize_batch=10, summarize_delay=0.1)
    for i in range(25):
        await memory.write([user(f"old {i}")], session_id=SID)
    await server.wait_requests(1)  # the worker is summarizing the old conversation

    if how == "clear":
        await memory.clear(session_id=SID)
    else:
        await memory.clear_user("default")
    for i in range(5):
        await memory.write([user(f"new {i}")], session_id=SID)
    hold.set()

    async def job_done() -> bool:
        return not await summary_jobs(rig.raw, rig.queue_name)

    await eventually(job_done, what="the job to end", describe=rig.workers.logs)
    new = [f"new {i}" for i in range(5)]
    assert [m.content for m in await memory.read(session_id=SID)] == new
    context = await memory.context(session_id=SID)
    assert context.summary is None
    assert [m.content for m in context.messages] == new
    stats = await QueueStats(rig.raw, memory.layout).snapshot()
    assert stats["counters"].get("summaries", 0) == 0
