"""The work-queue side: enqueueing summarization jobs on arq, and queue stats.

Jobs go through arq with msgpack as its ``job_serializer`` (never pickle).
A session gets at most one job per *pending episode*: the write script marks
the session pending (``ZADD NX``) only when it first becomes due, and only
that write enqueues, with a job id naming the episode. Writes that arrive
while the session is already pending add no round trip at all.

Queue-side keys (``redismem/q:<namespace>:*``, see ``keys.py``) live on the
queue's Redis, which may differ from the memory Redis (arq does not run on
Redis Cluster); neither they nor arq's keys lie inside a memory namespace.

A job that waits longer than ``JOB_EXPIRES`` is dropped by arq, and its job
key expires with it. The workers' reconcile sweep enqueues a session still
pending after the grace period only when no job of its episode is waiting or
running (``SummaryQueue.reenqueue_episode``): under the episode's own id when
that id is free (the enqueue never landed, or the job ended and left the
mark), else under the next id of the episode (``EPISODE~1``, ``EPISODE~2``,
...) that a lost job does not hold: a job key left behind without its queue
entry (the queue deleted under it, or a failover that kept one and lost the
other) holds its id until the key expires.

A running job holds a *lease* (``lease_key``: ``redismem/q:<namespace>:lease:<job
id>``, TTL the sweep grace, renewed every third of it by the job): arq's own
in-progress mark outlives a killed worker until the job timeout (+ 10 s), so
a job in progress counts as running only while its lease exists. A job whose
worker died is lost within about the grace, and the sweep enqueues the
episode again (a job that merely stalled past its lease may then run twice:
the passes' watermarks make that harmless).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgpack

from redismem.core.connection import RetryPolicy, open_redis, redis_errors
from redismem.core.keys import QUEUE_KEY_PREFIX, KeyLayout, user_digest
from redismem.errors import InvalidInput

__all__ = [
    "DEFAULT_QUEUE_NAME",
    "SUMMARIZE_JOB",
    "SUMMARIZE_OFF",
    "QueueStats",
    "SummarizeArgs",
    "SummaryQueue",
    "job_id",
    "lease_key",
    "pack_job",
    "unpack_job",
]

DEFAULT_QUEUE_NAME = "redismem/queue"
#: How long an enqueued job may wait for a worker before arq drops it.
JOB_EXPIRES = timedelta(minutes=10)
SUMMARIZE_JOB = "summarize_session"
#: The settings of a job whose session is not summarized, only indexed.
SUMMARIZE_OFF = "-"
RECONCILE_JOB = "reconcile_pending"

_STATS_TTL_MS = int(timedelta(days=7).total_seconds() * 1000)
_FAILURES_KEPT = 200
_LAG_SAMPLES_KEPT = 2000


def pack_job(obj: Any) -> bytes:
    """arq ``job_serializer``: msgpack, with exceptions stored as their repr."""
    return msgpack.packb(obj, use_bin_type=True, default=repr)  # type: ignore[no-any-return]


def unpack_job(raw: bytes) -> Any:
    """arq ``job_deserializer``."""
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


def job_id(namespace: str, user_id: str, session_id: str, episode: int | str) -> str:
    """One job id per session and pending episode, so a burst coalesces into
    one job. It names the user and the session by digests (``user_jobs``
    finds a user's jobs), never by their ids."""
    session = hashlib.blake2b(session_id.encode(), digest_size=12).hexdigest()
    return f"{user_jobs(namespace, user_id)}{session}:{episode}"


def lease_key(namespace: str, job: str) -> str:
    """The lease of a running job (see the module docstring), on the queue's
    Redis: ``KeyLayout(namespace).queue_key("lease:" + job)``."""
    return f"{QUEUE_KEY_PREFIX}:{namespace}:lease:{job}"


#: Extra seconds arq gives its in-progress mark over the job timeout.
ARQ_IN_PROGRESS_EXTRA = 10.0


def user_jobs(namespace: str, user_id: str) -> str:
    """The prefix of the ids of a user's jobs."""
    return f"sum:{namespace}:{user_digest(namespace, user_id)}:"


def arq_pool(url: str, *, connect_timeout: float = 2.0) -> Any:
    """An ``ArqRedis`` on ``url`` (``memory://`` too) using the msgpack codec."""
    from arq.connections import ArqRedis

    base = open_redis(url, connect_timeout=connect_timeout)
    return ArqRedis(
        connection_pool=base.connection_pool,
        job_serializer=pack_job,
        job_deserializer=unpack_job,
    )


@dataclass(frozen=True, slots=True)
class SummarizeArgs:
    """What a summarization job needs besides the session: the writer's settings.

    They have one form outside Python, ``encode()``'s ``"keep_recent,batch,compact"``:
    the write script stores it in the session meta (``sumcfg``) and the job
    carries it, and ``decode`` turns it back into this object wherever it is read.
    """

    namespace: str
    keep_recent: int
    batch: int
    compact: bool

    def encode(self) -> str:
        """``"keep_recent,batch,compact"``, e.g. ``"20,20,1"``."""
        return f"{self.keep_recent},{self.batch},{int(self.compact)}"

    @staticmethod
    def encode_optional(args: SummarizeArgs | None) -> str:
        """``encode()``, or ``SUMMARIZE_OFF`` for a session that is not
        summarized (its job only indexes)."""
        return SUMMARIZE_OFF if args is None else args.encode()

    @classmethod
    def decode_optional(cls, namespace: str, raw: str | bytes) -> SummarizeArgs | None:
        """``decode``, with ``SUMMARIZE_OFF`` (or "") decoded as None."""
        if raw in (SUMMARIZE_OFF, SUMMARIZE_OFF.encode(), "", b""):
            return None
        return cls.decode(namespace, raw)

    @classmethod
    def decode(cls, namespace: str, raw: str | bytes) -> SummarizeArgs:
        """The settings ``encode()`` made; ``InvalidInput`` if ``raw`` is not that form."""
        try:
            if not isinstance(raw, str | bytes):
                raise ValueError(type(raw).__name__)
            text = raw.decode() if isinstance(raw, bytes) else raw
            keep_recent, batch, compact = text.split(",")
            if compact not in ("0", "1"):
                raise ValueError(compact)
            args = cls(namespace, int(keep_recent), int(batch), compact == "1")
            if args.keep_recent < 0 or args.batch < 1:
                raise ValueError(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidInput(
                f"summarization settings must be 'keep_recent,batch,0|1', got {raw!r:.60}"
            ) from exc
        return args


class SummaryQueue:
    """Enqueues summarization jobs for one namespace."""

    def __init__(
        self,
        url: str,
        *,
        queue_name: str = DEFAULT_QUEUE_NAME,
        delay: float = 1.0,
        policy: RetryPolicy | None = None,
    ) -> None:
        self._url = url
        self._queue_name = queue_name
        self._delay = delay
        self._policy = policy or RetryPolicy(url)
        self._pool: Any = None

    @property
    def pool(self) -> Any:
        if self._pool is None:
            self._pool = arq_pool(self._url)
        return self._pool

    async def enqueue(
        self,
        user_id: str,
        session_id: str,
        episode: int | str,
        namespace: str,
        args: SummarizeArgs | None,
        *,
        delay: float | None = None,
    ) -> bool:
        """Enqueue the job of one pending episode, ``summarize_session(user_id,
        session_id, namespace, settings)`` with ``settings`` encoded (``args``
        None: the session is only indexed); False when it is already queued
        (the job id names the episode, so a retried enqueue is harmless)."""
        job = await self._policy.run(
            lambda: self.pool.enqueue_job(
                SUMMARIZE_JOB,
                user_id,
                session_id,
                namespace,
                SummarizeArgs.encode_optional(args),
                _job_id=job_id(namespace, user_id, session_id, episode),
                _queue_name=self._queue_name,
                _defer_by=self._delay if delay is None else delay,
                _expires=JOB_EXPIRES,
            )
        )
        return job is not None

    async def reenqueue_episode(
        self,
        user_id: str,
        session_id: str,
        episode: int | str,
        namespace: str,
        *,
        running: str | None = None,
        lease: float = 0.0,
        job_timeout: float | None = None,
    ) -> str | None:
        """The episode id under which the reconcile sweep (or a job going on
        in a new one, whose own id is ``running``, read as taken) enqueues a
        pending episode's job again, or None while one of its jobs is waiting
        (deferred or not) or running: that job settles or clears the mark,
        and a second one would run the session twice (a poisoned session
        failing twice) or grow a backlog by one job per sweep.

        The episode's jobs take the ids ``EPISODE``, ``EPISODE~1``, ... in
        turn. Each id is *alive* (waiting: on the queue with its job key, not
        in progress; or running: in progress with its lease, ``lease_key``,
        or marked in progress less than ``lease`` seconds ago by arq, which
        gives the mark ``job_timeout`` + 10 s: the job is starting and takes
        its lease), *lost* (in progress without a lease: its worker died;
        its job key without a queue entry; or a result kept under it: arq
        refuses the id) or *free*. The ids are read in order up to two free
        ones in a row (an earlier id frees when its lost key expires, while a
        later one may still be alive): None if one is alive, else the first
        free id."""
        ids = functools.partial(job_id, namespace, user_id, session_id)
        starting = None
        if job_timeout is not None and lease > 0:
            # An in-progress mark with more than this left was set < lease ago.
            starting = int((job_timeout + ARQ_IN_PROGRESS_EXTRA - lease) * 1000)
        return await self._policy.run(
            functools.partial(
                self._reenqueue_episode,
                self.pool,
                ids,
                functools.partial(lease_key, namespace),
                str(episode),
                running,
                starting,
            )
        )

    async def _reenqueue_episode(
        self,
        redis: Any,
        ids: Callable[[str], str],
        leases: Callable[[str], str],
        episode: str,
        running: str | None,
        starting: int | None,
    ) -> str | None:
        from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix

        free: str | None = None
        previous_free = False
        start, window = 0, 2
        while True:
            episodes = [f"{episode}~{n}" if n else episode for n in range(start, start + window)]
            with redis_errors(self._url):
                pipe = redis.pipeline(transaction=True)  # one consistent look
                for job in map(ids, episodes):
                    pipe.exists(job_key_prefix + job)
                    pipe.zscore(self._queue_name, job)
                    pipe.pttl(in_progress_key_prefix + job)
                    pipe.exists(result_key_prefix + job)
                    pipe.exists(leases(job))
                replies = await pipe.execute()
            for n, candidate in enumerate(episodes):
                key, queued, in_progress_ms, result, leased = replies[5 * n : 5 * n + 5]
                in_progress = in_progress_ms != -2
                young = starting is not None and in_progress_ms > starting
                if ids(candidate) == running:
                    key = True  # the caller's own job: taken
                elif in_progress and (leased or young):
                    return None  # alive: running
                elif not in_progress and key and queued is not None:
                    return None  # alive: waiting
                if key or result or in_progress:
                    previous_free = False  # lost: the next id, if no job is alive
                    continue
                if previous_free:
                    return free
                free = free or candidate
                previous_free = True
            start += window
            window *= 2

    async def renew_lease(self, namespace: str, job: str, ttl: float) -> None:
        """Take or renew a running job's lease (``lease_key``) for ``ttl``
        seconds; one try (the job renews it again a third of ``ttl`` later)."""
        with redis_errors(self._url):
            await self.pool.set(lease_key(namespace, job), b"1", px=max(1, int(ttl * 1000)))

    async def forget_user(self, layout: KeyLayout, user_id: str | None) -> int:
        """Remove the jobs still waiting on the queue of one user (None:
        every user of the namespace) and their failure records; a job already
        running finds its user cleared and changes nothing. Returns the
        number of jobs removed."""
        return int(
            await self._policy.run(functools.partial(self._forget_user, self.pool, layout, user_id))
        )

    async def _forget_user(self, redis: Any, layout: KeyLayout, user_id: str | None) -> int:
        from arq.constants import (
            in_progress_key_prefix,
            job_key_prefix,
            result_key_prefix,
            retry_key_prefix,
        )

        if user_id is None:
            pattern = f"sum:{layout.namespace}:*"
        else:
            pattern = user_jobs(layout.namespace, user_id) + "*"
        removed = 0
        with redis_errors(self._url):
            async for raw in redis.zscan_iter(self._queue_name, match=pattern, count=1000):
                member = raw[0] if isinstance(raw, tuple) else raw
                job = member.decode() if isinstance(member, bytes) else str(member)
                if await redis.exists(in_progress_key_prefix + job):
                    continue
                pipe = redis.pipeline(transaction=False)
                pipe.zrem(self._queue_name, job)
                pipe.delete(job_key_prefix + job, retry_key_prefix + job, result_key_prefix + job)
                await pipe.execute()
                removed += 1
            failures = layout.queue_key("failures")
            for record in await redis.lrange(failures, 0, -1):
                try:
                    user = unpack_job(record).get("user")
                except Exception:
                    continue
                if user_id is None or user == user_id:
                    await redis.lrem(failures, 0, record)
        return removed

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose(close_connection_pool=True)
            self._pool = None


class QueueStats:
    """Counters, recent failures and lag samples, on the queue's Redis.

    ``redismem/q:ns:stats``     HASH  counters (jobs, summaries, messages_summarized,
                                      failures, ...)
    ``redismem/q:ns:failures``  LIST  msgpack records of jobs that failed their last try
    ``redismem/q:ns:lag``       LIST  recent summarization lags in ms (write that made
                                      the session due -> summary commit)
    ``redismem/q:ns:sweep``     STRING the reconcile sweep's SCAN cursor (memory Redis)
    ``redismem/q:ns:lease:<job>`` STRING a running job's lease (``lease_key``; its TTL
                                      the sweep grace, not 7 days)
    Every key carries a TTL (7 days, refreshed on update).
    """

    def __init__(self, redis: Any, layout: KeyLayout, url: str = "") -> None:
        self._redis = redis
        self._layout = layout
        self._url = url

    def key(self, name: str) -> str:
        return self._layout.queue_key(name)

    async def incr(self, **counters: int) -> None:
        key = self.key("stats")
        with redis_errors(self._url):
            pipe = self._redis.pipeline(transaction=False)
            for name, value in counters.items():
                pipe.hincrby(key, name, value)
            pipe.pexpire(key, _STATS_TTL_MS)
            await pipe.execute()

    async def record_commit(self, messages: int, lag_ms: int | None) -> None:
        with redis_errors(self._url):
            pipe = self._redis.pipeline(transaction=False)
            stats = self.key("stats")
            pipe.hincrby(stats, "summaries", 1)
            pipe.hincrby(stats, "messages_summarized", messages)
            pipe.pexpire(stats, _STATS_TTL_MS)
            if lag_ms is not None:
                lag = self.key("lag")
                pipe.lpush(lag, lag_ms)
                pipe.ltrim(lag, 0, _LAG_SAMPLES_KEPT - 1)
                pipe.pexpire(lag, _STATS_TTL_MS)
            await pipe.execute()

    async def record_failure(self, user_id: str, session_id: str, error: str, tries: int) -> None:
        record = pack_job(
            {
                "at": int(time.time() * 1000),
                "user": user_id,
                "session": session_id,
                "error": error,
                "tries": tries,
            }
        )
        with redis_errors(self._url):
            pipe = self._redis.pipeline(transaction=False)
            failures = self.key("failures")
            pipe.lpush(failures, record)
            pipe.ltrim(failures, 0, _FAILURES_KEPT - 1)
            pipe.pexpire(failures, _STATS_TTL_MS)
            pipe.hincrby(self.key("stats"), "failures", 1)
            pipe.pexpire(self.key("stats"), _STATS_TTL_MS)
            await pipe.execute()

    async def snapshot(self) -> dict[str, Any]:
        """Counters, lag percentiles and recent failures, for ``redismem stats``."""
        with redis_errors(self._url):
            pipe = self._redis.pipeline(transaction=False)
            pipe.hgetall(self.key("stats"))
            pipe.lrange(self.key("lag"), 0, -1)
            pipe.lrange(self.key("failures"), 0, 19)
            counters, lags, failures = await pipe.execute()
        lag_values = sorted(int(x) for x in lags)
        return {
            "counters": {k.decode(): int(v) for k, v in counters.items()},
            "lag_ms": lag_values,
            "failures": [unpack_job(f) for f in failures],
        }
