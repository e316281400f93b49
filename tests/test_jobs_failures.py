"""How summarization jobs fail (issue 7, defect 5): a job that fails on one
session shows in ``redismem stats`` and stops; an unreachable Redis is retried
with backoff; no redis-py error escapes the jobs unmapped.

The first test runs a REAL worker process (``arq workers.WorkerSettings``);
the others call the job functions directly, with a ``ctx`` like the worker's,
against real ``redis-server`` processes (one of them killed).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from arq import Retry
from helpers import redismem_command
from worker_support import ROOT, dialogue, eventually, wait_ready, worker_env

from redismem import Memory
from redismem.config import WorkerConfig
from redismem.core.queue import QueueStats, SummarizeArgs, unpack_job
from redismem.errors import InvalidInput
from redismem.summarization.summarizers import TruncationSummarizer
from redismem.workers.context import resources
from redismem.workers.jobs import MAX_TRIES, reconcile_pending, retry_delay, summarize_session

SID = "s1"
KEEP, BATCH = 4, 6


@pytest_asyncio.fixture(loop_scope="function")
async def raw(raw_factory: Any, redis_url: str) -> Any:
    """A raw client on the real Redis (the workers' backend)."""
    return await raw_factory(redis_url)


async def stats(raw: Any, memory: Memory) -> dict[str, Any]:
    return await QueueStats(raw, memory.layout).snapshot()


async def summary_jobs(raw: Any, queue_name: str) -> list[bytes]:
    return [j for j in await raw.zrange(queue_name, 0, -1) if j.startswith(b"sum:")]


async def jobs_ended(raw: Any, queue_name: str) -> bool:
    """No summarization job waiting or running: arq keeps a job in its queue
    until the job has returned."""
    return not await summary_jobs(raw, queue_name)


def run_stats(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``redismem stats``, as an operator runs it."""
    return subprocess.run(
        [*redismem_command(), "stats"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def job_starts(log: str) -> int:
    """How many summarization jobs arq started (``→ <id>:summarize_session(``)."""
    return log.count(":summarize_session(")


# ---------------------------------------------------------------------------


async def test_a_corrupt_session_fails_once_shows_in_stats_and_is_not_retried(
    memory_factory: Any, raw: Any, redis_url: str, namespace: str, queue_name: str, workers: Any
) -> None:
    memory = await memory_factory(
        redis_url,
        keep_recent=KEEP,
        summarize_batch=BATCH,
        summarize_delay=0.1,
        queue_name=queue_name,
    )
    await memory.write(dialogue(12), session_id=SID)  # due: its job is enqueued
    keys = memory.layout.session("default", SID)
    pending = memory.layout.pending("default")
    assert await raw.zscore(pending, SID) is not None
    await raw.lset(keys.msgs, 0, b"garbage")

    env = worker_env(
        redis_url, namespace, queue_name, SUMMARIZER="truncate", SWEEP_SECONDS=1, SWEEP_GRACE=1
    )
    worker = workers.start(env)
    await wait_ready(raw, worker)

    async def failed() -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = (await stats(raw, memory))["failures"]
        return records

    [record] = await eventually(failed, what="the failure record", describe=workers.logs)
    # The job records the failure (queue Redis), then clears the mark (memory
    # Redis): what it leaves is checked once it has ended.
    await eventually(
        lambda: jobs_ended(raw, queue_name), what="the job to end", describe=workers.logs
    )
    [record] = await failed()
    assert (record["user"], record["session"], record["tries"]) == ("default", SID, 1)
    assert record["error"].startswith("CorruptData: ")
    assert keys.msgs in record["error"]  # names the key
    assert await raw.zscore(pending, SID) is None  # the mark is cleared

    # Several sweep runs later: not retried, not re-enqueued, nothing else ran.
    starts = job_starts(worker.log())
    await asyncio.sleep(3.5)
    snap = await stats(raw, memory)
    assert snap["counters"].get("failures") == 1, snap["counters"]
    assert "swept" not in snap["counters"] and "jobs" not in snap["counters"], snap["counters"]
    assert len(snap["failures"]) == 1
    assert await summary_jobs(raw, queue_name) == []
    assert job_starts(worker.log()) == starts, worker.log()
    assert worker.alive

    # ``redismem stats`` shows it.
    cli = await asyncio.to_thread(run_stats, worker_env(redis_url, namespace, queue_name))
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "recent failures" in cli.stdout
    assert f"CorruptData: corrupt data in key '{keys.msgs}'" in cli.stdout, cli.stdout

    # The reads fail the same way, and the session is otherwise intact: a
    # later write that makes it due again tries once more, and fails once more.
    await memory.write(dialogue(1, start=12), session_id=SID)
    await eventually(
        lambda: _failures_reach(raw, memory, 2), what="a second record", describe=workers.logs
    )
    await eventually(
        lambda: jobs_ended(raw, queue_name), what="the job to end", describe=workers.logs
    )
    assert await raw.zscore(pending, SID) is None
    starts = job_starts(worker.log())
    await asyncio.sleep(2.5)
    assert (await stats(raw, memory))["counters"].get("failures") == 2
    assert job_starts(worker.log()) == starts
    assert await raw.zscore(pending, SID) is None


async def _failures_reach(raw: Any, memory: Memory, n: int) -> bool:
    return int((await stats(raw, memory))["counters"].get("failures", 0)) >= n


# -- the job functions, called directly ----------------------------------------


@pytest_asyncio.fixture(loop_scope="function")
async def make_ctx(redis_url: str, raw: Any, namespace: str, queue_name: str) -> AsyncIterator[Any]:
    """``make_ctx(memory_url, memory, **extra)``: the ``ctx`` a worker gives its
    jobs, with the queue (stats) on the session's real Redis."""
    contexts: list[dict[str, Any]] = []

    async def make(memory_url: str, memory: Memory | None = None, **extra: Any) -> dict[str, Any]:
        config = WorkerConfig(
            url=memory_url,
            queue_url=redis_url,
            queue_name=queue_name,
            namespaces=(namespace,),
            summarizer=TruncationSummarizer(),
            summarizer_timeout=5.0,
        )
        ctx = {"redis": raw, **resources(config), **extra}
        if memory is not None:
            ctx["backends"][namespace] = memory.backend
        contexts.append(ctx)
        return ctx

    yield make
    for ctx in contexts:
        await ctx["queue"].aclose()
        for backend in ctx["backends"].values():
            await backend.aclose()


async def test_an_unreachable_redis_is_retried_with_backoff_then_recorded_keeping_the_mark(
    redis_server_factory: Any,
    memory_factory: Any,
    raw: Any,
    namespace: str,
    make_ctx: Any,
) -> None:
    server = redis_server_factory(extra_args=("--appendonly", "yes", "--appendfsync", "always"))
    writer = await memory_factory(server.url, keep_recent=KEEP, summarize_batch=BATCH)
    writer._enqueue_summary = _skip  # type: ignore[method-assign]
    await writer.write(dialogue(12), session_id=SID)
    worker_memory = await Memory.connect(server.url, namespace=namespace, retries=1)
    server.kill()  # Redis is gone while the worker holds its connection

    ctx = await make_ctx(server.url, worker_memory)
    for tries in range(1, MAX_TRIES):
        ctx["job_try"] = tries
        with pytest.raises(Retry) as info:
            await summarize_session(ctx, "default", SID, namespace=namespace)
        assert info.value.defer_score == int(retry_delay(tries) * 1000)
    assert [retry_delay(n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    snap = await QueueStats(raw, writer.layout).snapshot()
    assert snap["failures"] == []  # nothing recorded while retrying

    ctx["job_try"] = MAX_TRIES
    result = await summarize_session(ctx, "default", SID, namespace=namespace)
    assert result["status"] == "failed"
    [record] = (await QueueStats(raw, writer.layout).snapshot())["failures"]
    assert record["tries"] == MAX_TRIES
    assert record["error"].startswith("BackendUnavailable: ")

    # The session is not poisoned: its mark stays, for the sweep to enqueue it
    # once Redis is back.
    server.restart()
    check = await Memory.connect(server.url, namespace=namespace)
    try:
        assert await check.redis.zscore(check.layout.pending("default"), SID) is not None
    finally:
        await check.aclose()


async def _skip(*args: Any) -> None:
    return None


async def test_an_error_reply_is_mapped_recorded_at_once_and_clears_the_mark(
    memory_factory: Any, raw: Any, redis_url: str, namespace: str, make_ctx: Any
) -> None:
    memory = await memory_factory(redis_url, keep_recent=KEEP, summarize_batch=BATCH)
    memory._enqueue_summary = _skip  # type: ignore[method-assign]
    await memory.write(dialogue(12), session_id=SID)
    meta = memory.layout.session("default", SID).meta
    pending = memory.layout.pending("default")
    await raw.delete(meta)
    await raw.set(meta, b"not a hash")  # redis-py raises ResponseError (WRONGTYPE)

    ctx = await make_ctx(redis_url, memory, job_try=1)
    result = await summarize_session(ctx, "default", SID, namespace=namespace)
    assert result["status"] == "failed"
    assert result["error"].startswith("BackendError: ")
    assert "WRONGTYPE" in result["error"]
    [record] = (await stats(raw, memory))["failures"]
    assert (record["tries"], record["error"]) == (1, result["error"])
    assert await raw.zscore(pending, SID) is None


async def test_invalid_job_arguments_are_recorded_not_retried(
    memory_factory: Any, raw: Any, redis_url: str, namespace: str, make_ctx: Any
) -> None:
    memory = await memory_factory(redis_url)
    ctx = await make_ctx(redis_url, memory, job_try=1)
    result = await summarize_session(ctx, "default", "", namespace=namespace)
    assert result["status"] == "failed"
    assert result["error"].startswith("InvalidInput: session_id")
    assert (await stats(raw, memory))["counters"] == {"failures": 1}


async def test_the_sweep_gives_up_on_unreadable_settings_and_enqueues_nothing(
    memory_factory: Any, raw: Any, redis_url: str, namespace: str, queue_name: str, make_ctx: Any
) -> None:
    memory = await memory_factory(redis_url, keep_recent=KEEP, summarize_batch=BATCH)
    memory._enqueue_summary = _skip  # type: ignore[method-assign]
    await memory.write(dialogue(12), session_id=SID)
    meta = memory.layout.session("default", SID).meta
    pending = memory.layout.pending("default")
    await raw.hset(meta, "sumcfg", b"\xffgarbage")
    await raw.zadd(pending, {SID: 1})  # marked long ago: the sweep takes it

    ctx = await make_ctx(redis_url, memory)

    async def recorded() -> list[dict[str, Any]]:
        await reconcile_pending(ctx)  # one SCAN slice per run
        records: list[dict[str, Any]] = (await stats(raw, memory))["failures"]
        return records

    [record] = await eventually(recorded, within=10, step=0, what="the sweep's record")
    assert record["error"].startswith("CorruptData: ")
    assert meta in record["error"]
    assert await raw.zscore(pending, SID) is None
    assert await summary_jobs(raw, queue_name) == []
    assert "swept" not in (await stats(raw, memory))["counters"]


# -- the job's arguments: the session, and the settings in their one encoded form --------


async def test_a_job_carries_the_session_and_the_encoded_settings_only(
    memory_factory: Any, raw: Any, redis_url: str, namespace: str, queue_name: str
) -> None:
    memory = await memory_factory(
        redis_url,
        keep_recent=KEEP,
        summarize_batch=BATCH,
        summarize_delay=60,  # stays queued: no worker here anyway
        queue_name=queue_name,
    )
    await memory.write(dialogue(KEEP + BATCH), session_id=SID)

    async def queued() -> list[bytes]:
        return [k async for k in raw.scan_iter(match=f"arq:job:sum:{namespace}:*")]

    # Enqueued in the background: the write never waits on the queue.
    [key] = await eventually(queued, within=10, what="the job enqueued")
    job = unpack_job(await raw.get(key))
    settings = f"{KEEP},{BATCH},1"
    assert (job["f"], job["a"], job["k"]) == (
        "summarize_session",
        ["default", SID, namespace, settings],
        {},
    )
    # The same form the write script stored in the session meta, for the sweep.
    assert await raw.hget(memory.layout.session("default", SID).meta, "sumcfg") == settings.encode()
    assert SummarizeArgs.decode(namespace, settings) == memory.summarize_args()


@pytest.mark.parametrize(
    "raw_settings", ["4,6", "4,six,1", "-1,6,1", "4,0,1", "4,6,yes", b"4,6,1", 7]
)
def test_settings_decode_only_their_encoded_form(raw_settings: Any) -> None:
    if raw_settings == b"4,6,1":
        assert SummarizeArgs.decode("ns", raw_settings) == SummarizeArgs("ns", 4, 6, True)
        return
    with pytest.raises(InvalidInput, match="summarization settings"):
        SummarizeArgs.decode("ns", raw_settings)


async def test_older_job_keywords_are_tolerated_and_bad_settings_are_recorded_not_retried(
    memory_factory: Any, raw: Any, redis_url: str, namespace: str, make_ctx: Any
) -> None:
    memory = await memory_factory(redis_url, keep_recent=KEEP, summarize_batch=BATCH)
    memory._enqueue_summary = _skip  # type: ignore[method-assign]
    await memory.write(dialogue(KEEP + BATCH), session_id=SID)
    ctx = await make_ctx(redis_url, memory, job_try=1)
    # An older client's job: the settings as keywords (read from the meta instead).
    result = await summarize_session(
        ctx, "default", SID, namespace=namespace, keep_recent=KEEP, batch=BATCH, compact=True
    )
    assert (result["status"], result["summarized"]) == ("ok", BATCH)

    pending = memory.layout.pending("default")
    await raw.zadd(pending, {SID: 1})
    result = await summarize_session(ctx, "default", SID, namespace, "4,six,1")
    assert result["status"] == "failed"
    assert result["error"].startswith("InvalidInput: summarization settings")
    assert await raw.zscore(pending, SID) is None
