"""The worker's jobs: summarize one session, and sweep for orphaned sessions.

Both run in arq worker processes and take their settings and shared
resources from ``ctx`` (see ``context.py``): the ``WorkerConfig``, one
``Memory`` per namespace, and the queue's Redis for stats.

A summarization job is ``summarize_session(user_id, session_id, namespace,
settings)``, ``settings`` being ``SummarizeArgs.encode()`` of the write that
made the session due: the form the write script also stores in the session
meta, from which a job without it (the sweep's, or an older client's) reads it.

How a summarization job ends when it fails (every Redis call goes through the
``Memory``'s call policy, so redis-py errors arrive mapped into redismem's tree):

* ``SummarizerError`` or ``BackendUnavailable`` (the LLM endpoint or Redis is
  away; a retry may succeed): retried with backoff (``retry_delay``), at most
  ``MAX_TRIES`` tries in all; then the failure is recorded for ``redismem
  stats``. A summarizer that kept failing also has its pending mark cleared
  (the session's next due write tries again); while Redis is unreachable the
  mark is left, so the reconcile sweep enqueues the session once it is back.
* Anything else (``CorruptData``, ``InvalidInput``, ``BackendError``, or a bug):
  a retry cannot help, so the failure is recorded at once (its text names the
  type and, for corrupt data, the key) and the pending mark is cleared. The
  sweep only enqueues marked sessions, so a poisoned session is not retried
  forever; a later write that makes it due again tries once more.

A job whose session is no longer marked pending when it starts (settled,
cleared or given up meanwhile) does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from arq import Retry

from redismem import metrics
from redismem.config import WorkerConfig
from redismem.core.backend import Backend
from redismem.core.connection import scan_once
from redismem.core.epochs import EpochMoved
from redismem.core.guard import current_epoch, finish_clear, unfinished_clear
from redismem.core.keys import KeyLayout, validate_id
from redismem.core.queue import SummarizeArgs
from redismem.errors import (
    BackendUnavailable,
    CorruptData,
    EmbedderError,
    ExtractorError,
    InvalidInput,
    RedisMemError,
    SummarizerError,
)
from redismem.longterm.extraction.job import ExtractOutcome, extract_pass
from redismem.recall.index import IndexOutcome, index_pass
from redismem.recall.purge import forget_cleared
from redismem.recall.upgrade import upgrade
from redismem.summarization.job import SummarizeOutcome, settle_pending, summarize_pass
from redismem.workers.context import backend_for, config_of, queue_of, stats_for

__all__ = [
    "MAX_TRIES",
    "reconcile_pending",
    "retry_delay",
    "stored_settings",
    "summarize_session",
]

logger = logging.getLogger(__name__)

#: Tries before a transient failure (summarizer, Redis unreachable) is
#: recorded and given up.
MAX_TRIES = 4
#: Keys examined per sweep run (the SCAN cursor is kept between runs).
SWEEP_COUNT = 1000
#: Shortest lease of a running job, in seconds (it is the sweep grace).
LEASE_MIN = 1.0
#: Errors a later try may not meet again: retried, up to ``MAX_TRIES`` tries.
TRANSIENT_ERRORS = (SummarizerError, EmbedderError, ExtractorError, BackendUnavailable)


def retry_delay(tries: int) -> float:
    """Seconds before the next try after ``tries`` failed ones (1, 2, 4, ... 30)."""
    return float(min(30.0, 0.5 * 2**tries))


async def stored_settings(
    backend: Backend, namespace: str, user_id: str, session_id: str
) -> tuple[bool, SummarizeArgs | None]:
    """``(found, settings)``: the summarization settings the write that marked
    the session stored with it (None: the session is only indexed); found is
    False when the session is gone. ``CorruptData`` if unreadable."""
    meta = backend.layout.session(user_id, session_id, backend.epochs.get(user_id)).meta
    raw = await backend.call(lambda redis: redis.hget(meta, "sumcfg"))
    if raw is None:
        return False, None
    try:
        return True, SummarizeArgs.decode_optional(namespace, raw)
    except InvalidInput as exc:
        raise CorruptData(meta, str(exc)) from exc


async def clear_mark(backend: Backend, user_id: str, session_id: str) -> None:
    """Remove the session's pending mark (idempotent)."""
    pending = backend.layout.pending(user_id, backend.epochs.get(user_id))
    await backend.call(lambda redis: redis.zrem(pending, session_id))


def failure_text(exc: BaseException) -> str:
    """The error of a failure record: its type, then its text (which, for
    ``CorruptData``, names the key)."""
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Progress:
    status: str = "ok"
    summarized: int = 0
    indexed: int = 0
    extracted: int = 0
    memories: int = 0
    passes: int = 0


async def summarize_session(
    ctx: dict[str, Any],
    user_id: str,
    session_id: str,
    namespace: str,
    settings: str | None = None,
    **_older: Any,
) -> dict[str, Any]:
    """Summarize a session's backlog until it is no longer due (or the time
    budget runs out, then re-enqueue). ``settings``: ``SummarizeArgs.encode()``,
    else read from the session meta (jobs of older clients carried
    ``keep_recent``, ``batch`` and ``compact`` keywords instead: the meta holds
    the same settings, so those are ignored). How failures end: see the module
    docstring. Recorded in the metrics as job ``session``."""
    started = time.perf_counter()
    outcome = "cancelled"  # arq's job timeout, or the worker stopping
    try:
        async with _leased(ctx, namespace):
            result = await _summarize_job(ctx, user_id, session_id, namespace, settings)
        outcome = result["status"]
        return result
    except Retry:
        outcome = "retry"
        raise
    finally:
        metrics.job_done("session", outcome, time.perf_counter() - started)


def lease_seconds(config: WorkerConfig) -> float:
    """A running job's lease TTL: the sweep grace (at least ``LEASE_MIN``)."""
    return max(float(config.sweep_grace), LEASE_MIN)


@contextlib.asynccontextmanager
async def _leased(ctx: dict[str, Any], namespace: str) -> AsyncIterator[None]:
    """Hold the running job's lease (``core.queue.lease_key``) while the
    block runs: taken at once, renewed every third of its TTL, left to
    expire after (the sweep reads a job in progress without one as lost: its
    worker died)."""
    job = ctx.get("job_id")
    if job is None:  # called outside arq
        yield
        return
    queue = queue_of(ctx)

    async def renew() -> None:
        ttl = lease_seconds(config_of(ctx))
        try:
            await queue.renew_lease(namespace, str(job), ttl)
        except Exception as exc:  # the job goes on; its lease may lapse
            logger.warning("could not renew the lease of job %s: %s", job, exc)

    async def keep() -> None:
        while True:
            await asyncio.sleep(lease_seconds(config_of(ctx)) / 3)
            await renew()

    await renew()
    keeper = asyncio.create_task(keep())
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


async def _summarize_job(
    ctx: dict[str, Any], user_id: str, session_id: str, namespace: str, settings: str | None
) -> dict[str, Any]:
    tries = int(ctx.get("job_try", 1))
    progress = _Progress()
    try:
        await _summarize(ctx, progress, user_id, session_id, namespace, settings)
    except EpochMoved:
        # The user was cleared while the job ran: what it read is gone, and
        # so is the work (nothing recorded: the user's ids must not linger).
        progress.status = "gone"
    except TRANSIENT_ERRORS as exc:
        metrics.count_error(exc)
        if tries < MAX_TRIES:
            logger.warning("summarizing %r failed (try %d): %s", session_id, tries, exc)
            raise Retry(defer=retry_delay(tries)) from exc
        logger.error("summarizing %r failed after %d tries: %s", session_id, tries, exc)
        # Redis unreachable: keep the mark, for the sweep to enqueue the
        # session once Redis is back.
        clear = not isinstance(exc, BackendUnavailable)
        return await _give_up(ctx, progress, namespace, user_id, session_id, exc, tries, clear)
    except Exception as exc:
        # Corrupt data, invalid input, an error reply, a bug: a retry meets it again.
        metrics.count_error(exc)
        logger.error(
            "summarizing %r failed, not retried: %s",
            session_id,
            failure_text(exc),
            exc_info=not isinstance(exc, RedisMemError),
        )
        return await _give_up(ctx, progress, namespace, user_id, session_id, exc, tries, True)
    return {
        "status": progress.status,
        "summarized": progress.summarized,
        "indexed": progress.indexed,
        "extracted": progress.extracted,
        "memories": progress.memories,
        "passes": progress.passes,
    }


async def _summarize(
    ctx: dict[str, Any],
    progress: _Progress,
    user_id: str,
    session_id: str,
    namespace: str,
    settings: str | None,
) -> None:
    config = config_of(ctx)
    backend = await backend_for(ctx, namespace)
    user_id = validate_id(user_id, "user_id")
    session_id = validate_id(session_id, "session_id")
    # The user's epoch now: a job of a cleared epoch finds nothing pending.
    keys = backend.layout.session(user_id, session_id, await current_epoch(backend, user_id))
    recall_keys = backend.layout.recall(user_id, keys.epoch)
    # Cleared sessions whose clear() died before it removed their docs from
    # the recall index (format 1's graves, format 2's ordinals to purge).
    commands: list[tuple[Any, ...]] = [
        ("ZSCORE", keys.pending, session_id),
        ("SCARD", recall_keys.graves),
        ("SCARD", recall_keys.i_purge),
    ]
    if config.extractor is None:
        # Extraction is off (or was turned off): its watermark and outbox must
        # not hold back compaction or the pending mark. In the same round trip.
        commands.append(("HDEL", keys.meta, "xwm", "xbox"))
    marked, graves, purges, *_ = await backend.atomic(commands, key=keys.meta)
    # When the session became pending (ms): its first write not yet indexed.
    index_lag_from = float(marked) / 1000 if marked is not None else None
    if graves or purges:
        await forget_cleared(backend, recall_keys)
    if marked is None:
        # Settled, cleared or given up since this job was enqueued (the sweep
        # may enqueue a session just as its job ends): nothing to do.
        progress.status = "not pending"
        return
    episode = int(float(marked))  # the pending episode: its jobs' ids derive from it
    if settings is None:
        found, args = await stored_settings(backend, namespace, user_id, session_id)
        if not found:
            await clear_mark(backend, user_id, session_id)
            progress.status = "gone"
            return
    else:
        args = SummarizeArgs.decode_optional(namespace, settings)
    stats = stats_for(ctx, backend.layout)
    deadline = time.monotonic() + config.job_timeout - config.summarizer_timeout - 5
    while True:
        index = await _index_until_idle(
            backend, config, stats, progress, user_id, session_id, deadline
        )
        if index_lag_from is not None and progress.indexed and index.status == "idle":
            metrics.observe_lag("index", time.time() - index_lag_from)
            index_lag_from = None  # once per job: later passes index later writes
        if index.status == "timeout":  # out of time: go on in a new job
            await _continue_later(ctx, user_id, session_id, namespace, episode, args)
            break
        if index.status != "gone" and config.extractor is not None:
            extracted = await _extract_until_idle(
                backend, config, stats, progress, user_id, session_id, deadline
            )
            if extracted.status in ("wait", "timeout"):
                # A burst is still being written (or out of time): come back
                # when it is over. The mark stays, so the sweep also would.
                await _continue_later(
                    ctx, user_id, session_id, namespace, episode, args, delay=extracted.wait
                )
                break
        if index.status == "gone":
            outcome = SummarizeOutcome("gone")
        elif args is None:
            outcome = SummarizeOutcome("idle", seq=index.seq, gen=index.gen)
        else:
            outcome = await metrics.timed_job(
                "summarize",
                summarize_pass(
                    backend,
                    config.summarizer,
                    user_id=user_id,
                    session_id=session_id,
                    keep_recent=args.keep_recent,
                    batch=args.batch,
                    compact=args.compact,
                    summarizer_timeout=config.summarizer_timeout,
                ),
            )
            progress.passes += 1
        if outcome.status == "committed":
            progress.summarized += outcome.summarized
            await stats.record_commit(outcome.summarized, outcome.lag_ms)
            if outcome.lag_ms is not None:
                metrics.observe_lag("summarize", outcome.lag_ms / 1000)
        elif outcome.status == "stale":
            await stats.incr(stale_commits=1)
        if outcome.status in ("idle", "gone"):
            # Nothing to do now: clear the mark so the next write that makes
            # the session due enqueues again, unless a write arrived since
            # the index pass read the session; then look again.
            if await settle_pending(
                backend,
                user_id=user_id,
                session_id=session_id,
                seq=index.seq if outcome.status == "idle" else 0,
                gen=index.gen if outcome.status == "idle" else "",
            ):
                break
        elif not outcome.still_pending:
            break
        if time.monotonic() > deadline:
            await _continue_later(ctx, user_id, session_id, namespace, episode, args)
            break
    await stats.incr(jobs=1)


async def _index_until_idle(
    backend: Backend,
    config: WorkerConfig,
    stats: Any,
    progress: _Progress,
    user_id: str,
    session_id: str,
    deadline: float,
) -> IndexOutcome:
    """Index the session's unindexed messages: the last pass's outcome
    ("idle" or "gone"), or "timeout" when the job ran out of time first."""
    upgraded = False
    while True:
        outcome = await metrics.timed_job(
            "index",
            index_pass(
                backend,
                user_id=user_id,
                session_id=session_id,
                embedder=config.embedder_object,
                extracting=config.extractor is not None,
            ),
        )
        if outcome.status in ("idle", "gone"):
            return outcome
        if outcome.status == "indexed":
            progress.indexed += outcome.indexed
            await stats.incr(messages_indexed=outcome.indexed)
        if outcome.format1 and not upgraded:
            # The user's index is still in format 1: move it, in the time
            # this job has left (a later commit's job resumes the copy).
            upgraded = True
            moved = await upgrade(
                backend, user_id=user_id, time_budget=max(0.0, deadline - time.monotonic())
            )
            logger.info("recall index of a user moved to format 2: %s", moved.status)
        if time.monotonic() > deadline:
            return IndexOutcome("timeout")


async def _extract_until_idle(
    backend: Backend,
    config: WorkerConfig,
    stats: Any,
    progress: _Progress,
    user_id: str,
    session_id: str,
    deadline: float,
) -> ExtractOutcome:
    """Extract memories from the session's indexed messages: the last
    pass's outcome ("idle", "gone" or "wait"), or "timeout"."""
    while True:
        outcome = await metrics.timed_job(
            "extract",
            extract_pass(
                backend,
                config.extractor,
                user_id=user_id,
                session_id=session_id,
                quiet=config.extract_quiet,
                extractor_timeout=config.summarizer_timeout,
                consolidator=config.consolidator,
            ),
        )
        if outcome.memories:
            progress.memories += outcome.memories
            await stats.incr(memories_added=outcome.memories)
        if outcome.status in ("idle", "gone", "wait"):
            return outcome
        if outcome.status == "extracted":
            progress.extracted += outcome.messages
            await stats.incr(messages_extracted=outcome.messages)
        if time.monotonic() > deadline:
            return ExtractOutcome("timeout")


async def _continue_later(
    ctx: dict[str, Any],
    user_id: str,
    session_id: str,
    namespace: str,
    episode: int,
    args: SummarizeArgs | None,
    delay: float = 0.0,
) -> None:
    """Enqueue the next job of the episode, under an id of the episode the
    sweep looks at (``SummaryQueue.reenqueue_episode``, this job's own id
    read as taken), unless another job of the episode waits or runs: that
    one goes on."""
    queue = queue_of(ctx)
    config = config_of(ctx)
    following = await queue.reenqueue_episode(
        user_id,
        session_id,
        episode,
        namespace,
        running=ctx.get("job_id"),
        lease=lease_seconds(config),
        job_timeout=config.job_timeout,
    )
    if following is not None:
        await queue.enqueue(user_id, session_id, following, namespace, args, delay=delay)


async def _give_up(
    ctx: dict[str, Any],
    progress: _Progress,
    namespace: str,
    user_id: str,
    session_id: str,
    exc: BaseException,
    tries: int,
    clear: bool,
) -> dict[str, Any]:
    """Record the failure for ``redismem stats`` and (with ``clear``) clear
    the pending mark. Best effort: what fails here is logged, not raised (a
    raise would only end the job unrecorded)."""
    error = failure_text(exc)
    result = {"status": "failed", "error": error, "summarized": progress.summarized}
    # The mark goes before the failure is recorded: whoever sees the failure
    # (an operator, a test) and writes again then marks the session anew and
    # gets a job, instead of a write whose mark this clear would take away.
    if clear:
        try:
            backend = await backend_for(ctx, namespace)
            await clear_mark(backend, validate_id(user_id, "user_id"), session_id)
        except Exception as clear_exc:
            logger.error(
                "could not clear the pending mark of %r (the sweep will enqueue it again): %s",
                session_id,
                clear_exc,
            )
    try:
        layout = KeyLayout(namespace)
        await stats_for(ctx, layout).record_failure(user_id, session_id, error, tries)
    except Exception as record_exc:
        logger.error("could not record the failure of %r: %s", session_id, record_exc)
    return result


async def reconcile_pending(ctx: dict[str, Any]) -> dict[str, int]:
    """Enqueue sessions marked pending whose job never arrived (a client that
    died between its write and its enqueue), and finish clears whose caller
    died halfway (``redismem.core.guard.unfinished_clear``). Each run examines a
    bounded slice of the keyspace, resuming the SCAN cursors where the last
    run ended. Recorded in the metrics as job ``sweep``."""
    return await metrics.timed_job("sweep", _reconcile(ctx))


async def _reconcile(ctx: dict[str, Any]) -> dict[str, int]:
    enqueued = finished = 0
    for namespace in config_of(ctx).namespaces:
        try:
            enqueued += await _sweep_namespace(ctx, namespace)
            finished += await _finish_clears(ctx, namespace)
        except RedisMemError as exc:
            logger.warning("reconcile sweep of %r failed: %s", namespace, exc)
    return {"enqueued": enqueued, "clears_finished": finished}


async def _scan_slice(backend: Backend, cursor_name: str, pattern: str) -> list[bytes]:
    """The next slice of a SCAN over ``pattern`` (at most ``SWEEP_COUNT``
    keys examined), its cursor kept between runs under ``cursor_name``."""
    cursor_key = backend.layout.queue_key(cursor_name)
    raw_cursor = await backend.call(lambda redis: redis.get(cursor_key))
    cursor = raw_cursor.decode("ascii", "replace") if raw_cursor else "0"
    cursor, found = await backend.call(
        functools.partial(scan_once, cursor=cursor, pattern=pattern, count=SWEEP_COUNT)
    )
    await backend.call(lambda redis: redis.set(cursor_key, cursor, px=24 * 3600 * 1000))
    return found


async def _finish_clears(ctx: dict[str, Any], namespace: str) -> int:
    backend = await backend_for(ctx, namespace)
    finished = 0
    for key in await _scan_slice(backend, "guard-sweep", backend.layout.guard_pattern()):
        unfinished = await unfinished_clear(backend, key)
        if unfinished is not None:
            user_id, epoch = unfinished
            removed = await finish_clear(backend, user_id, epoch)
            logger.info("finished an interrupted clear_user (%d keys removed)", removed)
            finished += 1
    return finished


async def _marked_before(backend: Backend, key: bytes, cutoff: int) -> list[tuple[bytes, float]]:
    """``(session id, marked at)`` of the marks in ``key`` older than ``cutoff`` (ms)."""
    due: list[tuple[bytes, float]] = await backend.call(
        lambda redis: redis.zrangebyscore(key, "-inf", cutoff, withscores=True)
    )
    return due


async def _sweep_namespace(ctx: dict[str, Any], namespace: str) -> int:
    backend = await backend_for(ctx, namespace)
    layout = backend.layout
    pending_keys = await _scan_slice(backend, "sweep", layout.pending_pattern())
    config = config_of(ctx)
    cutoff = int((time.time() - config.sweep_grace) * 1000)
    queue = queue_of(ctx)
    enqueued = 0
    for key in pending_keys:
        parsed = layout.parse_pending(key)
        if parsed is None or parsed.epoch != await current_epoch(backend, parsed.user_id):
            continue  # not a pending index, or one of a cleared epoch
        user_id = parsed.user_id
        due = await _marked_before(backend, key, cutoff)
        for raw_sid, since in due:
            session_id = raw_sid.decode()
            episode = await queue.reenqueue_episode(
                user_id,
                session_id,
                int(since),
                namespace,
                lease=lease_seconds(config),
                job_timeout=config.job_timeout,
            )
            if episode is None:
                continue  # its job waits or runs (see reenqueue_episode)
            try:
                found, args = await stored_settings(backend, namespace, user_id, session_id)
            except CorruptData as exc:
                # Not retried: recorded once, and the mark cleared.
                progress = _Progress()
                await _give_up(ctx, progress, namespace, user_id, session_id, exc, 1, True)
                continue
            if not found:
                await clear_mark(backend, user_id, session_id)
                continue
            if await queue.enqueue(user_id, session_id, episode, namespace, args, delay=0):
                enqueued += 1
    if enqueued:
        await stats_for(ctx, layout).incr(swept=enqueued)
    return enqueued
