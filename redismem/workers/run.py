"""Running a worker: ``MemoryWorker`` (arq's ``Worker``, riding out
connection resets) and ``redismem worker`` (``serve``).

Three resets are not retried by redis-py, and arq 0.28 lets them end a
worker: a connection lost while arq watches a job's in-progress key
(``WatchError``, the watch being gone), the same while it enqueues a cron
job, and one lost during a new connection's handshake inside a job's
bookkeeping (``ConnectionError`` from the pool). ``MemoryWorker`` overrides
``start_jobs`` (the job's slot is given back; the job stays queued and the
next poll starts it), ``run_cron`` (the tick is skipped; the next one
enqueues) and ``run_job`` (the job's in-progress key expires and arq runs it
again; our jobs are idempotent). arq's own ``Worker`` is left as it is.

``serve`` logs one start-up line naming what the worker runs (queue,
namespaces swept, summarizer, extractor, consolidator, embedder), and arq's
"recording health" lines at DEBUG (arq logs one at INFO each time its health
record changes: every 5 s while jobs run). It waits (a bounded time) for
Redis at start-up, fails at once on refused credentials or an invalid URL,
and restarts its worker in place if a connection error still escapes arq's
loop (its pool already retries for up to ``OUTAGE_S``, see
``connections.py``). Run workers under a supervisor anyway: past
``OUTAGE_S`` they exit.

arq's own CLI (``arq redismem.workers.WorkerSettings``, ``arq
workers.WorkerSettings`` from a checkout) builds the ``Worker`` class it
imports and takes no other: when it looks ``WorkerSettings`` up,
``use_in_arq_cli`` points that CLI's runner at ``MemoryWorker``
(``arq.cli.run_worker`` and ``create_worker``, nothing else), so both
commands run the same worker.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import datetime
from typing import Any

import redis.exceptions as rexc
from arq.worker import Worker, get_kwargs

from redismem.config import WorkerConfig, check_url
from redismem.workers.connections import OUTAGE_S, queue_pool, wait_for_redis
from redismem.workers.runs import runs_of
from redismem.workers.settings import worker_settings

__all__ = [
    "CLOSE_TIMEOUT_S",
    "MemoryWorker",
    "create_worker",
    "describe",
    "serve",
    "use_in_arq_cli",
]

logger = logging.getLogger(__name__)

#: Seconds a stopping worker may spend closing (its jobs are safe to cut short).
CLOSE_TIMEOUT_S = 5.0

# Connection trouble the worker restarts on (a WatchError escapes arq when the
# connection drops while a job start is being watched).
_CONNECTION_ERRORS = (rexc.ConnectionError, rexc.TimeoutError, rexc.WatchError, OSError)


class MemoryWorker(Worker):
    """arq's ``Worker``, riding out the connection resets arq lets end it
    (see the module docstring). Built from the same keyword arguments
    (``worker_settings(config)`` and a Redis pool)."""

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        try:
            await super().start_jobs(job_ids)
        except rexc.WatchError:
            # Lost while arq held a slot for the job it was checking (semaphore
            # and counter taken, job not started): give the slot back. The job,
            # and the ones after it, stay queued for the next poll.
            logger.warning(
                "connection lost while starting a job; it stays queued for the next poll"
            )
            self.job_counter -= 1
            self.sem.release()

    async def run_job(self, job_id: str, score: int) -> None:
        try:
            await super().run_job(job_id, score)
        except (rexc.ConnectionError, rexc.TimeoutError) as exc:
            logger.warning(
                "connection lost around job %s (%s); arq runs it again later", job_id, exc
            )

    async def run_cron(self, n: datetime, delay: float, num_windows: int = 2) -> None:
        try:
            await super().run_cron(n, delay, num_windows)
        except (rexc.WatchError, rexc.ConnectionError, rexc.TimeoutError) as exc:
            # Lost while arq enqueued a cron job (the reconcile sweep) under a
            # WATCH: that tick is skipped; the sweep runs again next period.
            logger.warning(
                "connection lost while enqueueing a cron job (%s); next tick retries", exc
            )


def create_worker(settings_cls: Any, **kwargs: Any) -> MemoryWorker:
    """arq's ``create_worker``, building a ``MemoryWorker``."""
    return MemoryWorker(**{**get_kwargs(settings_cls), **kwargs})


def _run_worker(settings_cls: Any, **kwargs: Any) -> MemoryWorker:
    """arq's ``run_worker``, running a ``MemoryWorker``."""
    worker = create_worker(settings_cls, **kwargs)
    worker.run()
    return worker


def use_in_arq_cli() -> None:
    """When arq's CLI runs this process (``arq ...WorkerSettings``), make it
    build a ``MemoryWorker``: arq offers no setting for the class, so its
    CLI's two runner functions are pointed at ours. Nothing else changes, and
    nothing at all outside arq's CLI."""
    cli = sys.modules.get("arq.cli")
    if cli is None:
        return
    cli.run_worker = _run_worker  # type: ignore[attr-defined]
    cli.create_worker = create_worker  # type: ignore[attr-defined]


async def _close(worker: Worker) -> None:
    """Close the worker within ``CLOSE_TIMEOUT_S`` even while Redis is away
    (running jobs are cut short: their commits are compare-and-set, and arq
    re-runs them)."""
    try:
        await asyncio.wait_for(worker.close(), CLOSE_TIMEOUT_S)
    except (TimeoutError, asyncio.CancelledError, rexc.RedisError, OSError) as exc:
        task = asyncio.current_task()
        if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
            raise
        logger.warning("worker did not close cleanly: %r", exc)


def describe(config: WorkerConfig) -> str:
    """What a worker with ``config`` runs, in one line (its start-up log)."""
    runs = runs_of(config)
    return f"worker {config.name} on queue {config.queue_name!r}, sweeping {runs.describe()}"


class _HealthAtDebug(logging.Filter):
    """On arq's worker logger: "recording health" records go out at DEBUG
    (dropped unless that logger is enabled for DEBUG), not at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and str(record.msg).startswith("recording health"):
            if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
                return False
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _health_at_debug() -> None:
    arq_logger = logging.getLogger("arq.worker")
    if not any(isinstance(f, _HealthAtDebug) for f in arq_logger.filters):
        arq_logger.addFilter(_HealthAtDebug())


async def serve(config: WorkerConfig, *, burst: bool = False, wait: float = 30.0) -> None:
    """Run one worker with ``config`` until SIGTERM or SIGINT (with ``burst``,
    until the queue is empty). Waits up to ``wait`` seconds for Redis at
    start-up; raises a ``RedisMemError`` for what cannot work (a URL that is
    not a Redis server's, refused credentials, Redis unreachable)."""
    check_url(config.url, "REDISMEM_URL")
    check_url(config.queue_url, "REDISMEM_QUEUE_URL")
    servers = tuple(dict.fromkeys((config.url, config.queue_url)))
    for url in servers:
        await wait_for_redis(url, wait)
    _health_at_debug()
    logger.info("%s", describe(config))
    while True:
        worker = MemoryWorker(
            **worker_settings(config),
            redis_pool=queue_pool(config.queue_url, config.queue_name),
            burst=burst,
        )
        try:
            await worker.async_run()
            return  # a burst ended
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return  # arq's SIGTERM/SIGINT handler cancelled the worker
        except _CONNECTION_ERRORS as exc:
            logger.warning("worker lost Redis (%s); restarting it once Redis is back", exc)
        finally:
            await _close(worker)
        for url in servers:
            await wait_for_redis(url, OUTAGE_S)
