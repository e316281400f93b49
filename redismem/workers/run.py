"""``redismem worker``: run one worker, riding out Redis outages.

``serve`` waits (a bounded time) for Redis at start-up, fails at once on
refused credentials or an invalid URL, and restarts its arq worker in place if
a connection error still escapes arq's loop (its pool already retries for up
to ``OUTAGE_S``, see ``connections.py``). Run workers under a supervisor
anyway: past ``OUTAGE_S`` they exit.
"""

from __future__ import annotations

import asyncio
import logging

import redis.exceptions as rexc
from arq.worker import Worker, create_worker

from redismem.config import WorkerConfig, check_url
from redismem.workers.connections import OUTAGE_S, queue_pool, wait_for_redis
from redismem.workers.settings import worker_settings

__all__ = ["CLOSE_TIMEOUT_S", "serve"]

logger = logging.getLogger(__name__)

#: Seconds a stopping worker may spend closing (its jobs are safe to cut short).
CLOSE_TIMEOUT_S = 5.0

# Connection trouble the worker restarts on (a WatchError escapes arq when the
# connection drops while a job start is being watched).
_CONNECTION_ERRORS = (rexc.ConnectionError, rexc.TimeoutError, rexc.WatchError, OSError)


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
    while True:
        worker = create_worker(
            worker_settings(config),
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
