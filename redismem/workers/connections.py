"""The worker's Redis connections, which ride out outages.

The worker's arq pool retries connection errors and timeouts with capped
exponential backoff for up to ``OUTAGE_S`` seconds (``OutageRetry``), so a
Redis restart or failover only pauses the worker; past that it gives up (and
its supervisor restarts it). Refused credentials and a TLS certificate that
fails verification are never retried.

Three resets are not retried by redis-py, and arq 0.28 lets them end the
worker: a connection lost while arq watches a job's in-progress key
(``WatchError``, the watch being gone), the same while it enqueues a cron
job, and one lost during a new connection's handshake inside a job's
bookkeeping (``ConnectionError`` from the pool). Importing this module wraps
arq's ``Worker.start_jobs`` (the job's slot is given back; the job stays
queued and the next poll starts it), ``Worker.run_cron`` (the tick is
skipped; the next one enqueues) and ``Worker.run_job`` (the job's
in-progress key expires and arq runs it again; our jobs are idempotent).
The worker's own pool (``queue_pool``) also retries taking a connection, so
a reset during a handshake in arq's poll loop only delays the poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import arq.worker
import redis.exceptions as rexc
from arq.connections import ArqRedis, RedisSettings
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from redismem.config import check_queue_url
from redismem.core.connection import open_redis, redis_errors, tls_failure
from redismem.core.queue import pack_job, unpack_job
from redismem.core.urls import parse_url
from redismem.errors import BackendUnavailable

__all__ = ["OUTAGE_S", "OutageRetry", "queue_pool", "redis_settings", "wait_for_redis"]

logger = logging.getLogger(__name__)

#: How long a worker rides out an unreachable Redis before giving up (and
#: exiting, for its supervisor to restart it).
OUTAGE_S = 300.0

T = TypeVar("T")


class OutageRetry(Retry):
    """redis-py ``Retry`` bounded by time rather than tries: connection errors
    (refused connects too) and timeouts are retried with capped exponential
    backoff (0.2 s doubling to 2 s) for up to ``seconds``. Refused credentials
    and TLS failures (``connection.tls_failure``) are not retried."""

    __slots__ = ("_seconds",)

    def __init__(self, seconds: float = OUTAGE_S) -> None:
        super().__init__(ExponentialBackoff(cap=2.0, base=0.1), retries=-1)
        # redis-py maps a refused connect (OSError) only after its retry loop.
        self.update_supported_errors([OSError])
        self._seconds = seconds

    async def call_with_retry(
        self, do: Callable[[], Awaitable[T]], fail: Callable[[rexc.RedisError], Any]
    ) -> T:
        deadline = time.monotonic() + self._seconds
        failures = 0
        while True:
            try:
                result = await do()
            except self._supported_errors as error:
                failures += 1
                await fail(error)
                remaining = deadline - time.monotonic()
                if (
                    isinstance(error, rexc.AuthenticationError)
                    or tls_failure(error) is not None
                    or remaining <= 0
                ):
                    raise
                if failures in (1, 10) or failures % 100 == 0:
                    logger.warning(
                        "Redis unavailable (%s); retrying for up to %.0f s more", error, remaining
                    )
                await asyncio.sleep(min(self._backoff.compute(failures), remaining))
                continue
            if failures:
                logger.info("Redis is back after %d failed tries", failures)
            return result


_arq_start_jobs = arq.worker.Worker.start_jobs


async def _start_jobs_riding_out_resets(self: arq.worker.Worker, job_ids: list[bytes]) -> None:
    try:
        await _arq_start_jobs(self, job_ids)
    except rexc.WatchError:
        # Lost while arq held a slot for the job it was checking (semaphore
        # and counter taken, job not started): give the slot back. The job,
        # and the ones after it, stay queued for the next poll.
        logger.warning("connection lost while starting a job; it stays queued for the next poll")
        self.job_counter -= 1
        self.sem.release()


_arq_run_job = arq.worker.Worker.run_job


async def _run_job_riding_out_resets(self: arq.worker.Worker, job_id: str, score: int) -> None:
    try:
        await _arq_run_job(self, job_id, score)
    except (rexc.ConnectionError, rexc.TimeoutError) as exc:
        logger.warning("connection lost around job %s (%s); arq runs it again later", job_id, exc)


_arq_run_cron = arq.worker.Worker.run_cron


async def _run_cron_riding_out_resets(self: arq.worker.Worker, *args: Any, **kwargs: Any) -> None:
    try:
        await _arq_run_cron(self, *args, **kwargs)
    except (rexc.WatchError, rexc.ConnectionError, rexc.TimeoutError) as exc:
        # Lost while arq enqueued a cron job (the reconcile sweep) under a
        # WATCH: that tick is skipped; the sweep runs again next period.
        logger.warning("connection lost while enqueueing a cron job (%s); next tick retries", exc)


if getattr(arq.worker.Worker.start_jobs, "__name__", "") != _start_jobs_riding_out_resets.__name__:
    arq.worker.Worker.start_jobs = _start_jobs_riding_out_resets  # type: ignore[method-assign]
    arq.worker.Worker.run_job = _run_job_riding_out_resets  # type: ignore[method-assign]
    arq.worker.Worker.run_cron = _run_cron_riding_out_resets  # type: ignore[method-assign]


def redis_settings(url: str) -> RedisSettings:
    """arq ``RedisSettings`` for ``url`` that ride out outages, for arq's own
    CLI (``arq workers.WorkerSettings``); ``redismem worker`` builds its pool
    with ``queue_pool``, which keeps every URL option."""
    target = parse_url(url)
    if target.kind == "sentinel":
        settings = RedisSettings(
            host=list(target.nodes),
            sentinel=True,
            sentinel_master=target.service or "mymaster",
            database=target.db,
            username=target.username,
            password=target.password,
        )
    else:
        settings = RedisSettings.from_dsn(url)
    settings.retry = OutageRetry()
    settings.retry_on_error = [rexc.ConnectionError, rexc.TimeoutError]
    settings.retry_on_timeout = True
    settings.conn_retries = 0  # OutageRetry already waits
    return settings


def queue_pool(url: str, queue: str) -> ArqRedis:
    """The worker's arq pool on ``url`` (one server or a Sentinel's master):
    msgpack jobs, bounded socket waits, connection errors retried for up to
    ``OUTAGE_S``."""
    base = open_redis(
        check_queue_url(url),
        connect_timeout=2.0,
        retry=OutageRetry(),
        retry_on_error=[rexc.ConnectionError, rexc.TimeoutError],
        socket_timeout=10.0,
        socket_keepalive=True,
    )
    pool = base.connection_pool
    _retry_connects(pool, OutageRetry())
    return ArqRedis(
        connection_pool=pool,
        job_serializer=pack_job,
        job_deserializer=unpack_job,
        default_queue_name=queue,
    )


def _retry_connects(pool: Any, retry: OutageRetry) -> None:
    """Make ``pool`` ride out a reset during a new connection's handshake.

    redis-py retries a command on a connection it already has, but takes the
    connection (``get_connection``: connect, ``HELLO``/``AUTH``) outside its
    retry; a reset there reached arq's poll loop and ended the worker (seen
    under the CLIENT KILL storm test). A failed handshake gives its connection
    back, so taking another is safe.
    """
    take = pool.get_connection

    async def get_connection(*args: Any, **kwargs: Any) -> Any:
        return await retry.call_with_retry(lambda: take(*args, **kwargs), _ignore)

    pool.get_connection = get_connection


async def _ignore(error: BaseException) -> None:
    return None


async def wait_for_redis(url: str, seconds: float) -> None:
    """Return once Redis at ``url`` answers PING. ``BackendUnavailable`` after
    ``seconds`` of trying; ``BackendError`` at once for refused credentials,
    ``ConfigurationError`` for a TLS certificate that fails verification."""
    deadline = time.monotonic() + seconds
    warned = False
    while True:
        client = open_redis(url, connect_timeout=2.0, socket_timeout=5.0)
        try:
            with redis_errors(url):
                await client.ping()
            return
        except BackendUnavailable as exc:
            if time.monotonic() + 1.0 > deadline:
                raise BackendUnavailable(f"{exc} (waited {seconds:g} s)") from exc
            if not warned:
                logger.warning("%s; waiting up to %g s", exc, seconds)
                warned = True
        finally:
            await client.aclose()
        await asyncio.sleep(1.0)
