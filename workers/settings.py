"""arq ``WorkerSettings`` for redismem, and running a worker: ``redismem worker``
(or ``arq workers.WorkerSettings`` from a checkout).

Configured from the environment (``ENVIRONMENT`` below, also printed by
``redismem worker --help``), read when the worker starts. Jobs are serialized
with msgpack, never pickle.

Riding out Redis outages: the worker's arq pool retries connection errors and
timeouts with capped exponential backoff for up to ``OUTAGE_S`` seconds
(``OutageRetry``), so a Redis restart or failover only pauses the worker.
``redismem worker`` also waits (a bounded time) for Redis at start-up, fails
at once on refused credentials or an invalid URL, and restarts its arq worker
in place if a connection error still escapes arq's loop. Run workers under a
supervisor anyway: past ``OUTAGE_S`` they exit.

Health: each worker records its own health under
``<queue>:health-check:<worker name>`` (arq's ``health_check_key``, written by
arq's poll loop, with a TTL of the interval + 1 s) and registers its name in
the ``<queue>:workers`` sorted set (score: last heartbeat, ms), which is how
``--check`` knows a worker that went quiet. ``<queue>:health-check`` still
says that some worker is alive, for arq's own ``--check`` and older probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import redis.asyncio as aioredis
import redis.exceptions as rexc
from arq import cron, func
from arq.connections import ArqRedis, RedisSettings
from arq.worker import Worker, create_worker
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from redismem.config import EMBEDDED_URL
from redismem.connection import describe_url, redis_errors
from redismem.errors import InvalidInput, StoreUnavailable
from redismem.keys import KeyLayout
from redismem.queue import DEFAULT_QUEUE_NAME, SUMMARIZE_JOB, SummaryQueue, pack_job, unpack_job
from redismem.summarizers import summarizer_from_env

from .jobs import JOB_TIMEOUT_S, reconcile_pending, summarize_session

__all__ = [
    "ENVIRONMENT",
    "OutageRetry",
    "WorkerHealth",
    "WorkerSettings",
    "check_url",
    "serve",
    "worker_ctx",
    "worker_health",
]

logger = logging.getLogger(__name__)

ENVIRONMENT = """\
environment (read when the worker starts):
  REDISMEM_URL                 memory Redis (sessions, summaries)
  REDISMEM_QUEUE_URL           queue Redis (arq jobs, stats; default REDISMEM_URL). arq
                               does not run on Redis Cluster: keep the queue on a standalone
                               or Sentinel Redis while memory lives on a cluster
  REDISMEM_NAMESPACE           namespace(s) the reconcile sweep covers, comma separated
                               (default redismem)
  REDISMEM_QUEUE_NAME          arq queue name (default redismem/queue); clients must match
  REDISMEM_WORKER_NAME         this worker's name in health checks (default HOST-PID)
  REDISMEM_SUMMARIZER          keypoints (default), truncate or llm
  REDISMEM_SUMMARY_MAX_CHARS   truncate: characters kept (default 2000)
  REDISMEM_LLM_BASE_URL, REDISMEM_LLM_MODEL, REDISMEM_LLM_API_KEY
                               llm: any OpenAI-compatible chat-completions endpoint
  REDISMEM_LLM_TIMEOUT         llm: seconds per HTTP request (default 30)
  REDISMEM_SUMMARIZER_TIMEOUT  seconds per summarizer call (default 30)
  REDISMEM_JOB_TIMEOUT         arq job timeout, seconds (default 45; must exceed the
                               summarizer timeout; a crashed worker's job re-runs after it + 10 s)
  REDISMEM_SWEEP_SECONDS       how often the reconcile sweep runs (default 10)
  REDISMEM_SWEEP_GRACE         seconds a pending mark waits for its job before the sweep
                               re-enqueues it (default 30)
"""

#: How long a worker rides out an unreachable Redis before giving up (and
#: exiting, for its supervisor to restart it).
OUTAGE_S = 300.0
#: arq's health-check interval; a worker's health record lives this + 1 s.
HEALTH_INTERVAL_S = 5
#: A registered worker not heard from for this long is forgotten (it was
#: replaced or stopped without deregistering).
FORGET_S = 120
#: Seconds a stopping worker may spend closing (its jobs are safe to cut short).
CLOSE_TIMEOUT_S = 5.0
REDIS_SCHEMES = ("redis", "rediss", "unix")

# Connection trouble the worker restarts on (a WatchError escapes arq when the
# connection drops while a job start is being watched).
_CONNECTION_ERRORS = (rexc.ConnectionError, rexc.TimeoutError, rexc.WatchError, OSError)

T = TypeVar("T")


# -- configuration ---------------------------------------------------------


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name) or str(default)
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InvalidInput(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


def memory_url() -> str:
    return _env("REDISMEM_URL", EMBEDDED_URL)


def queue_url() -> str:
    return _env("REDISMEM_QUEUE_URL", memory_url())


def queue_name() -> str:
    return _env("REDISMEM_QUEUE_NAME", DEFAULT_QUEUE_NAME)


def worker_name() -> str:
    return _env("REDISMEM_WORKER_NAME", f"{socket.gethostname()}-{os.getpid()}")


def namespaces() -> list[str]:
    return [n.strip() for n in _env("REDISMEM_NAMESPACE", "redismem").split(",") if n.strip()]


def check_url(url: str, what: str = "the URL") -> str:
    """``url`` if it is a Redis server URL, else ``InvalidInput`` naming ``what``."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        raise InvalidInput(
            f"{what} {url!r} is the embedded in-process backend, which no other process can see"
        )
    if scheme not in REDIS_SCHEMES:
        raise InvalidInput(
            f"{what} {describe_url(url)!r} is not a Redis URL: use "
            "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], rediss://... (TLS) or unix:///PATH"
        )
    return url


def health_key(queue: str, name: str) -> str:
    """arq's ``health_check_key`` of one worker."""
    return f"{queue}:health-check:{name}"


def registry_key(queue: str) -> str:
    """Sorted set of the queue's workers, scored by their last heartbeat (ms)."""
    return f"{queue}:workers"


def worker_ctx(
    summarizer: Any = None,
    *,
    url: str | None = None,
    queue: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The parts of ``ctx`` the jobs need, besides arq's own ``redis``; the
    environment fills what is not given."""
    if url is None:
        url, queue = memory_url(), queue or queue_url()
    queue = queue or url
    return {
        "memory_url": url,
        "queue_url": queue,
        "queue_name": queue_name(),
        "worker_name": name or worker_name(),
        "namespaces": namespaces(),
        "memories": {},
        "summarizer": summarizer if summarizer is not None else summarizer_from_env(),
        "summarizer_timeout": _env_seconds("REDISMEM_SUMMARIZER_TIMEOUT", 30),
        "queue": SummaryQueue(queue, queue_name=queue_name()),
    }


# -- riding out outages ----------------------------------------------------


class OutageRetry(Retry):
    """redis-py ``Retry`` bounded by time rather than tries: connection errors
    (refused connects too) and timeouts are retried with capped exponential
    backoff (0.2 s doubling to 2 s) for up to ``seconds``. Refused credentials
    are not retried."""

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
                if isinstance(error, rexc.AuthenticationError) or remaining <= 0:
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


def redis_settings(url: str) -> RedisSettings:
    """arq ``RedisSettings`` for ``url`` that ride out outages (``arq
    workers.WorkerSettings``; ``redismem worker`` builds its pool with
    ``queue_pool``, which keeps every URL option)."""
    settings = RedisSettings.from_dsn(url)
    settings.retry = OutageRetry()
    settings.retry_on_error = [rexc.ConnectionError, rexc.TimeoutError]
    settings.retry_on_timeout = True
    settings.conn_retries = 0  # OutageRetry already waits
    return settings


def queue_pool(url: str, queue: str) -> ArqRedis:
    """The worker's arq pool on ``url``: msgpack jobs, bounded socket waits,
    connection errors retried for up to ``OUTAGE_S``."""
    pool = aioredis.ConnectionPool.from_url(
        url,
        retry=OutageRetry(),
        retry_on_error=[rexc.ConnectionError, rexc.TimeoutError],
        socket_connect_timeout=2.0,
        socket_timeout=10.0,
        socket_keepalive=True,
    )
    return ArqRedis(
        connection_pool=pool,
        job_serializer=pack_job,
        job_deserializer=unpack_job,
        default_queue_name=queue,
    )


async def wait_for_redis(url: str, seconds: float) -> None:
    """Return once Redis at ``url`` answers PING. ``StoreUnavailable`` after
    ``seconds`` of trying; ``StoreError`` at once for refused credentials."""
    deadline = time.monotonic() + seconds
    warned = False
    while True:
        client = aioredis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=5.0)
        try:
            with redis_errors(url):
                await client.ping()
            return
        except StoreUnavailable as exc:
            if time.monotonic() + 1.0 > deadline:
                raise StoreUnavailable(f"{exc} (waited {seconds:g} s)") from exc
            if not warned:
                logger.warning("%s; waiting up to %g s", exc, seconds)
                warned = True
        finally:
            await client.aclose()
        await asyncio.sleep(1.0)


# -- health ----------------------------------------------------------------


async def _heartbeat(redis: Any, queue: str, name: str) -> None:
    """Keep this worker registered, and ``<queue>:health-check`` alive."""
    ttl_ms = (HEALTH_INTERVAL_S + 1) * 1000
    while True:
        now = int(time.time() * 1000)
        try:
            pipe = redis.pipeline(transaction=False)
            pipe.zadd(registry_key(queue), {name: now})
            pipe.zremrangebyscore(registry_key(queue), "-inf", now - FORGET_S * 1000)
            pipe.pexpire(registry_key(queue), FORGET_S * 1000)
            pipe.set(f"{queue}:health-check", f"worker {name} alive", px=ttl_ms)
            await pipe.execute()
        except (rexc.RedisError, OSError) as exc:
            logger.warning("could not record the heartbeat of worker %s: %s", name, exc)
        await asyncio.sleep(HEALTH_INTERVAL_S)


@dataclass(frozen=True)
class WorkerHealth:
    """One worker as ``redismem worker --check`` sees it."""

    name: str
    healthy: bool  # its health record is fresh
    seen_ago: float | None  # seconds since its last heartbeat; None: not registered
    record: str | None  # arq's health record (jobs complete, failed, ...)

    def describe(self) -> str:
        seen = "never registered" if self.seen_ago is None else f"seen {self.seen_ago:.0f}s ago"
        if self.healthy:
            return f"worker {self.name}: healthy ({self.record})"
        return (
            f"worker {self.name}: STALE, no health record in the last "
            f"{HEALTH_INTERVAL_S + 1} s ({seen})"
        )


async def worker_health(url: str, queue: str, name: str | None = None) -> list[WorkerHealth]:
    """Health of the worker ``name``, or of every worker of ``queue`` heard
    from in the last ``FORGET_S`` seconds (oldest heartbeat first), read from
    the queue Redis at ``url``."""
    redis = aioredis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=5.0)
    now = time.time()
    try:
        with redis_errors(url):
            if name is not None:
                seen = {name: await redis.zscore(registry_key(queue), name)}
            else:
                rows = await redis.zrangebyscore(
                    registry_key(queue), (now - FORGET_S) * 1000, "+inf", withscores=True
                )
                seen = {member.decode(): score for member, score in rows}
            records = await redis.mget([health_key(queue, n) for n in seen]) if seen else []
    finally:
        await redis.aclose()
    return [
        WorkerHealth(
            name=n,
            healthy=record is not None,
            seen_ago=None if score is None else max(0.0, now - score / 1000),
            record=record.decode() if record is not None else None,
        )
        for (n, score), record in zip(seen.items(), records, strict=True)
    ]


# -- the worker ------------------------------------------------------------


async def startup(ctx: dict[str, Any]) -> None:
    if "memory_url" not in ctx:  # arq workers.WorkerSettings: from the environment
        ctx.update(worker_ctx(ctx.get("summarizer")))
    ctx["heartbeat"] = asyncio.create_task(
        _heartbeat(ctx["redis"], ctx["queue_name"], ctx["worker_name"])
    )


async def shutdown(ctx: dict[str, Any]) -> None:
    heartbeat = ctx.pop("heartbeat", None)
    if heartbeat is not None:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
        with contextlib.suppress(rexc.RedisError, OSError):
            await ctx["redis"].zrem(registry_key(ctx["queue_name"]), ctx["worker_name"])
    for memory in ctx.get("memories", {}).values():
        await memory.aclose()
    queue = ctx.get("queue")
    if queue is not None:
        await queue.aclose()


def _redis_settings() -> RedisSettings:
    try:
        return redis_settings(check_url(queue_url()))
    except InvalidInput:
        # memory:// (workers.inprocess brings its own pool) or an invalid URL,
        # which redismem worker reports; arq then fails to connect at once.
        return RedisSettings()


def _sweep_seconds() -> int:
    try:
        return max(1, int(_env_seconds("REDISMEM_SWEEP_SECONDS", 10)))
    except InvalidInput:
        return 10  # serve() reports it


_sweep_every = _sweep_seconds()


class WorkerSettings:
    """Pass to arq: ``arq workers.WorkerSettings``."""

    functions: ClassVar[list[Any]] = [
        func(summarize_session, name=SUMMARIZE_JOB, keep_result=0, timeout=JOB_TIMEOUT_S)
    ]
    cron_jobs: ClassVar[list[Any]] = [
        cron(
            reconcile_pending,
            # One sweep schedule per queue: deployments sharing a Redis with
            # different queue names must not take each other's ticks.
            name=f"reconcile_pending:{queue_name()}",
            second=set(range(0, 60, _sweep_every)),
            run_at_startup=True,
            keep_result=0,
            timeout=JOB_TIMEOUT_S,
            unique=True,
        )
    ]
    on_startup = startup
    on_shutdown = shutdown
    redis_settings = _redis_settings()
    queue_name = queue_name()
    health_check_key = health_key(queue_name, worker_name())
    job_serializer = pack_job
    job_deserializer = unpack_job
    keep_result = 0
    max_tries = 10
    max_jobs = 16
    health_check_interval = HEALTH_INTERVAL_S
    poll_delay = 0.1


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


async def serve(
    *, url: str, queue: str, name: str, burst: bool = False, wait: float = 30.0
) -> None:
    """Run one worker until SIGTERM or SIGINT (with ``burst``, until the queue
    is empty). Waits up to ``wait`` seconds for Redis at start-up; raises a
    ``RedisMemError`` for what cannot work (invalid URL or settings, refused
    credentials, Redis unreachable)."""
    check_url(url, "REDISMEM_URL")
    check_url(queue, "REDISMEM_QUEUE_URL")
    for namespace in namespaces():
        KeyLayout(namespace)  # InvalidInput for a bad REDISMEM_NAMESPACE
    for variable in ("REDISMEM_SWEEP_SECONDS", "REDISMEM_SUMMARIZER_TIMEOUT"):
        _env_seconds(variable, 1)  # InvalidInput for a value that is not seconds
    summarizer = summarizer_from_env()
    for each in dict.fromkeys((url, queue)):
        await wait_for_redis(each, wait)
    qname = queue_name()
    while True:
        worker = create_worker(
            WorkerSettings,  # type: ignore[arg-type]
            redis_pool=queue_pool(queue, qname),
            queue_name=qname,
            health_check_key=health_key(qname, name),
            burst=burst,
            ctx=worker_ctx(summarizer, url=url, queue=queue, name=name),
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
        for each in dict.fromkeys((url, queue)):
            await wait_for_redis(each, OUTAGE_S)
