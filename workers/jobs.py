"""The worker's jobs: summarize one session, and sweep for orphaned sessions.

Both run in arq worker processes and take their shared resources from
``ctx`` (see ``workers.settings``): one ``Memory`` per namespace, the
summarizer, and the queue's Redis for stats.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from arq import Retry

from redismem import Memory
from redismem.errors import RedisMemError, SummarizerError
from redismem.queue import QueueStats, SummarizeArgs, SummaryQueue
from redismem.summarize import settle_pending, summarize_pass

__all__ = ["reconcile_pending", "summarize_session"]

logger = logging.getLogger(__name__)

#: Tries before a failing summarization is recorded and given up.
MAX_TRIES = 4
#: arq's timeout for a summarization job. Short, so arq re-runs the job of a
#: crashed worker soon (its in-progress key lives job_timeout + 10 s); a job
#: starts another pass only while that pass can end before this timeout.
JOB_TIMEOUT_S = max(1, int(float(os.environ.get("REDISMEM_JOB_TIMEOUT", "45"))))
#: How long a pending mark may wait for its job before the sweep re-enqueues it.
SWEEP_GRACE_MS = int(float(os.environ.get("REDISMEM_SWEEP_GRACE", "30")) * 1000)
#: Keys examined per sweep run (the SCAN cursor is kept between runs).
SWEEP_COUNT = 1000


async def memory_for(ctx: dict[str, Any], namespace: str) -> Memory:
    """The worker's ``Memory`` for a namespace, opened on first use."""
    memories: dict[str, Memory] = ctx["memories"]
    if namespace not in memories:
        memories[namespace] = await Memory.connect(ctx["memory_url"], namespace=namespace)
    return memories[namespace]


def stats_for(ctx: dict[str, Any], memory: Memory) -> QueueStats:
    return QueueStats(ctx["redis"], memory.layout, ctx.get("queue_url", ""))


async def summarize_session(
    ctx: dict[str, Any],
    user_id: str,
    session_id: str,
    *,
    namespace: str,
    keep_recent: int | None = None,
    batch: int | None = None,
    compact: bool = True,
) -> dict[str, Any]:
    """Summarize a session's backlog until it is no longer due (or the time
    budget runs out, then re-enqueue). Failures retry with backoff; the last
    try records the failure for ``redismem stats`` and clears the mark."""
    memory = await memory_for(ctx, namespace)
    layout = memory.layout
    if keep_recent is None or batch is None:
        raw = await memory.redis.hget(layout.session(user_id, session_id).meta, "sumcfg")
        if raw is None:
            await memory.redis.zrem(layout.pending(user_id), session_id)
            return {"status": "gone"}
        args = SummarizeArgs.decode(namespace, raw.decode())
    else:
        args = SummarizeArgs(namespace, keep_recent, batch, compact)
    stats = stats_for(ctx, memory)
    summarized, passes = 0, 0
    summarizer_timeout = float(ctx.get("summarizer_timeout", 30.0))
    deadline = time.monotonic() + JOB_TIMEOUT_S - summarizer_timeout - 5
    try:
        while True:
            outcome = await summarize_pass(
                memory,
                ctx["summarizer"],
                user_id=user_id,
                session_id=session_id,
                keep_recent=args.keep_recent,
                batch=args.batch,
                compact=args.compact,
                summarizer_timeout=summarizer_timeout,
            )
            passes += 1
            if outcome.status == "committed":
                summarized += outcome.summarized
                await stats.record_commit(outcome.summarized, outcome.lag_ms)
            elif outcome.status == "stale":
                await stats.incr(stale_commits=1)
            if outcome.status in ("idle", "gone"):
                # Nothing to summarize now: clear the mark so the next write
                # that makes the session due enqueues again, unless a write
                # arrived meanwhile; then look again.
                if await settle_pending(
                    memory, user_id=user_id, session_id=session_id, seq=outcome.seq
                ):
                    break
            elif not outcome.still_pending:
                break
            if time.monotonic() > deadline:
                episode = f"{int(time.time() * 1000)}"
                queue: SummaryQueue = ctx["queue"]
                await queue.enqueue(user_id, session_id, episode, args, delay=0)
                break
    except SummarizerError as exc:
        tries = int(ctx.get("job_try", 1))
        if tries < MAX_TRIES:
            logger.warning("summarizing %r failed (try %d): %s", session_id, tries, exc)
            raise Retry(defer=min(30.0, 0.5 * 2**tries)) from exc
        logger.error("summarizing %r failed after %d tries: %s", session_id, tries, exc)
        await stats.record_failure(user_id, session_id, str(exc), tries)
        await memory.redis.zrem(layout.pending(user_id), session_id)
        return {"status": "failed", "error": str(exc), "summarized": summarized}
    await stats.incr(jobs=1)
    return {"status": "ok", "summarized": summarized, "passes": passes}


async def reconcile_pending(ctx: dict[str, Any]) -> dict[str, int]:
    """Enqueue sessions marked pending whose job never arrived (a client that
    died between its write and its enqueue). Each run examines a bounded
    slice of the keyspace, resuming the SCAN cursor where the last run ended."""
    enqueued = 0
    for namespace in ctx["namespaces"]:
        try:
            enqueued += await _sweep_namespace(ctx, namespace)
        except RedisMemError as exc:
            logger.warning("reconcile sweep of %r failed: %s", namespace, exc)
    return {"enqueued": enqueued}


async def _sweep_namespace(ctx: dict[str, Any], namespace: str) -> int:
    memory = await memory_for(ctx, namespace)
    layout = memory.layout
    redis = memory.redis
    cursor_key = layout.queue_key("sweep")
    cursor = int(await redis.get(cursor_key) or 0)
    cursor, pending_keys = await redis.scan(
        cursor, match=layout.pending_pattern(), count=SWEEP_COUNT
    )
    await redis.set(cursor_key, cursor, px=24 * 3600 * 1000)
    cutoff = int(time.time() * 1000) - SWEEP_GRACE_MS
    queue: SummaryQueue = ctx["queue"]
    enqueued = 0
    for key in pending_keys:
        user_id = layout.parse_key(key.decode()).user_id
        due = await redis.zrangebyscore(key, "-inf", cutoff, withscores=True)
        for raw_sid, since in due:
            session_id = raw_sid.decode()
            raw = await redis.hget(layout.session(user_id, session_id).meta, "sumcfg")
            if raw is None:
                await redis.zrem(key, raw_sid)
                continue
            args = SummarizeArgs.decode(namespace, raw.decode())
            if await queue.enqueue(user_id, session_id, int(since), args, delay=0):
                enqueued += 1
    if enqueued:
        await QueueStats(ctx["redis"], layout).incr(swept=enqueued)
    return enqueued
