"""The worker's Redis connections, which ride out outages.

The worker's arq pool retries connection errors and timeouts under
``outage_policy``: the library's ``RetryPolicy``, bounded by time rather than
tries (capped exponential backoff, 0.2 s doubling to 2 s, for up to
``OUTAGE_S`` seconds after the first failure), given to redis-py as its
``Retry``. A Redis restart or failover only pauses the worker; past that it
gives up (and its supervisor restarts it). Refused credentials and a TLS
certificate that fails verification are never retried. The pool also
retries taking a connection, so a reset during a handshake in arq's poll
loop only delays the poll. The resets arq itself lets end a worker are
ridden out by ``redismem.workers.run.MemoryWorker``.
"""

from __future__ import annotations

import logging
from typing import Any

import redis.exceptions as rexc
from arq.connections import ArqRedis, RedisSettings

from redismem.config import check_queue_url
from redismem.core.connection import RetryPolicy, open_redis, server_url
from redismem.core.queue import pack_job, unpack_job
from redismem.core.urls import parse_url
from redismem.errors import BackendUnavailable

__all__ = ["OUTAGE_S", "outage_policy", "queue_pool", "redis_settings", "wait_for_redis"]

logger = logging.getLogger(__name__)

#: How long a worker rides out an unreachable Redis before giving up (and
#: exiting, for its supervisor to restart it).
OUTAGE_S = 300.0


def outage_policy(url: str, seconds: float = OUTAGE_S) -> RetryPolicy:
    """The worker's retry policy on ``url``: retries for up to ``seconds``
    after the first failure, however many tries that takes, backing off
    from 0.2 s to 2 s. An attempt keeps its own time (the pool's socket
    timeouts)."""
    return RetryPolicy(
        url, attempt_timeout=None, retries=None, within=seconds, backoff_base=0.2, backoff_cap=2.0
    )


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
        settings = RedisSettings.from_dsn(server_url(url))
    settings.retry = outage_policy(url).for_redis_py()
    settings.retry_on_error = [rexc.ConnectionError, rexc.TimeoutError]
    settings.retry_on_timeout = True
    settings.conn_retries = 0  # the policy already waits
    return settings


def queue_pool(url: str, queue: str) -> ArqRedis:
    """The worker's arq pool on ``url`` (one server or a Sentinel's master):
    msgpack jobs, bounded socket waits, connection errors retried for up to
    ``OUTAGE_S``."""
    policy = outage_policy(url)
    base = open_redis(
        check_queue_url(url),
        connect_timeout=2.0,
        retry=policy.for_redis_py(),
        retry_on_error=[rexc.ConnectionError, rexc.TimeoutError],
        socket_timeout=10.0,
        socket_keepalive=True,
    )
    pool = base.connection_pool
    _retry_connects(pool, policy)
    return ArqRedis(
        connection_pool=pool,
        job_serializer=pack_job,
        job_deserializer=unpack_job,
        default_queue_name=queue,
    )


def _retry_connects(pool: Any, policy: RetryPolicy) -> None:
    """Make ``pool`` ride out a reset during a new connection's handshake.

    redis-py retries a command on a connection it already has, but takes the
    connection (``get_connection``: connect, ``HELLO``/``AUTH``) outside its
    retry; a reset there reached arq's poll loop and ended the worker (seen
    under the CLIENT KILL storm test). A failed handshake gives its connection
    back, so taking another is safe.
    """
    take = pool.get_connection

    async def get_connection(*args: Any, **kwargs: Any) -> Any:
        return await policy.rerun(lambda: take(*args, **kwargs), errors=_CONNECT_ERRORS)

    pool.get_connection = get_connection


#: What a failed connect raises (redis-py maps a refused connect, an
#: ``OSError``, only after its own retry loop).
_CONNECT_ERRORS = (rexc.ConnectionError, rexc.TimeoutError, OSError)


async def wait_for_redis(url: str, seconds: float) -> None:
    """Return once Redis at ``url`` answers PING, asking once a second.
    ``BackendUnavailable`` after ``seconds`` of trying; ``BackendError`` at
    once for refused credentials, ``ConfigurationError`` for a TLS
    certificate that fails verification."""
    policy = RetryPolicy(
        url, attempt_timeout=None, retries=None, within=seconds, backoff_base=1.0, backoff_cap=1.0
    )

    async def ping() -> None:
        client = open_redis(url, connect_timeout=2.0, socket_timeout=5.0)
        try:
            await client.ping()
        finally:
            await client.aclose()

    try:
        await policy.run(ping)
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"{exc} (waited {seconds:g} s)") from exc
