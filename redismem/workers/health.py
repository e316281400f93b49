"""Per-worker health: heartbeats, and ``redismem worker --check``.

Each worker records its own health under ``<queue>:health-check:<name>``
(arq's ``health_check_key``, written by arq's poll loop with a TTL of the
interval + 1 s) and registers its name in the ``<queue>:workers`` sorted set
(score: last heartbeat, ms), which is how ``--check`` knows a worker that went
quiet. ``<queue>:health-check`` still says that some worker is alive, for
arq's own ``--check`` and older probes. With each heartbeat it also records
what it runs (``runs.WorkerRuns``: namespaces, plug-in names) under
``<queue>:runs:<name>``, kept as long as the registry remembers it: arq
writes its health record itself, in its own format, so that record is not
extended. The keys are built in ``redismem.core.keys``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.exceptions as rexc

from redismem import env
from redismem.core.connection import open_redis, redis_errors
from redismem.core.keys import worker_health_key, worker_registry_key, worker_runs_key
from redismem.workers.runs import WorkerRuns

__all__ = [
    "FORGET_S",
    "HEALTH_INTERVAL_S",
    "WorkerHealth",
    "check",
    "health_key",
    "heartbeat",
    "registry_key",
    "worker_health",
]

logger = logging.getLogger(__name__)

#: arq's health-check interval; a worker's health record lives this + 1 s.
HEALTH_INTERVAL_S = 5
#: A registered worker not heard from for this long is forgotten (it was
#: replaced or stopped without deregistering).
FORGET_S = 120


health_key = worker_health_key
registry_key = worker_registry_key


async def heartbeat(redis: Any, queue: str, name: str, runs: WorkerRuns | None = None) -> None:
    """Keep this worker registered, with what it ``runs``, and
    ``<queue>:health-check`` alive (runs until cancelled; a failed beat is
    logged, not raised). After each beat Redis took, touch
    ``REDISMEM_HEARTBEAT_FILE`` if set: a probe reads its age without
    starting Python (deploy/)."""
    ttl_ms = (HEALTH_INTERVAL_S + 1) * 1000
    beat_file = env.text("REDISMEM_HEARTBEAT_FILE")
    record = None if runs is None else runs.encode()
    while True:
        now = int(time.time() * 1000)
        try:
            pipe = redis.pipeline(transaction=False)
            pipe.zadd(registry_key(queue), {name: now})
            pipe.zremrangebyscore(registry_key(queue), "-inf", now - FORGET_S * 1000)
            pipe.pexpire(registry_key(queue), FORGET_S * 1000)
            if record is not None:
                pipe.set(worker_runs_key(queue, name), record, px=FORGET_S * 1000)
            pipe.set(f"{queue}:health-check", f"worker {name} alive", px=ttl_ms)
            await pipe.execute()
            if beat_file:
                await asyncio.to_thread(Path(beat_file).touch)
        except (rexc.RedisError, OSError) as exc:
            logger.warning("could not record the heartbeat of worker %s: %s", name, exc)
        await asyncio.sleep(HEALTH_INTERVAL_S)


async def deregister(redis: Any, queue: str, name: str) -> None:
    """Forget this worker (it is stopping cleanly). Best effort."""
    try:
        pipe = redis.pipeline(transaction=False)
        pipe.zrem(registry_key(queue), name)
        pipe.delete(worker_runs_key(queue, name))
        await pipe.execute()
    except (rexc.RedisError, OSError) as exc:
        logger.info("could not deregister worker %s: %s", name, exc)


@dataclass(frozen=True)
class WorkerHealth:
    """One worker as ``redismem worker --check`` sees it."""

    name: str
    healthy: bool  # its health record is fresh
    seen_ago: float | None  # seconds since its last heartbeat; None: not registered
    record: str | None  # arq's health record (jobs complete, failed, ...)
    #: What it runs; None when unknown (not registered, or a worker of an
    #: older version).
    runs: WorkerRuns | None = None

    def describe(self) -> str:
        """One line on its health, then one on what it runs (when known)."""
        runs = "" if self.runs is None else f"\n  {self.runs.describe()}"
        return self._health() + runs

    def _health(self) -> str:
        if self.healthy:
            return f"worker {self.name}: healthy ({self.record})"
        if self.seen_ago is None:
            # Not in the registry and no health record: no worker of that
            # name has run on this queue lately (a stopped one deregisters).
            return (
                f"worker {self.name}: never registered on this queue (no worker of that "
                "name runs here, or it stopped); check the name and REDISMEM_QUEUE_NAME"
            )
        seen = f"seen {self.seen_ago:.0f}s ago"
        return (
            f"worker {self.name}: STALE, no health record in the last "
            f"{HEALTH_INTERVAL_S + 1}s ({seen})"
        )


def health_client(url: str) -> Any:
    """A client of the queue Redis at ``url`` for ``worker_health`` (its
    caller closes it)."""
    return open_redis(url, connect_timeout=2.0, socket_timeout=5.0)


async def worker_health(
    url: str, queue: str, name: str | None = None, *, client: Any = None
) -> list[WorkerHealth]:
    """Health of the worker ``name``, or of every worker of ``queue`` heard
    from in the last ``FORGET_S`` seconds (oldest heartbeat first), read from
    the queue Redis at ``url``: through ``client`` (a ``health_client``, kept
    open by a caller that looks often) or a connection of its own."""
    redis = client if client is not None else health_client(url)
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
            keys = [health_key(queue, n) for n in seen] + [worker_runs_key(queue, n) for n in seen]
            values = await redis.mget(keys) if seen else []
    finally:
        if client is None:
            await redis.aclose()
    records, runs = values[: len(seen)], values[len(seen) :]
    return [
        WorkerHealth(
            name=n,
            healthy=record is not None,
            seen_ago=None if score is None else max(0.0, now - score / 1000),
            record=record.decode() if record is not None else None,
            runs=WorkerRuns.decode(ran),
        )
        for (n, score), record, ran in zip(seen.items(), records, runs, strict=True)
    ]


async def check(url: str, queue: str, name: str | None = None) -> tuple[bool, list[str]]:
    """``redismem worker --check [NAME]``: whether every worker seen (or the
    worker ``name``) is healthy, and one line per worker (or why none is)."""
    health = await worker_health(url, queue, name)
    if not health:
        seen = f"no worker seen on queue {queue!r} in the last {FORGET_S}s"
        return False, [f"{seen} (start one: redismem worker)"]
    return all(w.healthy for w in health), [w.describe() for w in health]
