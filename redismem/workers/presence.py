"""Whether a client's work queue has a live worker, and saying so when not.

A ``Memory`` on a Redis server queues its background work (indexing for
``search``, summaries, extraction) for worker processes. With none running,
``search`` finds nothing new and ``flush`` returns False, silently.
``WorkerPresence`` reads the queue's worker registry (``workers.health``)
lazily: after an enqueue, in the enqueue's own background task (never on a
write's path), at most once per ``CHECK_EVERY_S``; and when ``flush`` times
out. When no worker is live it logs one WARNING naming the queue and the
command that starts a worker, at most once per ``WARN_EVERY_S`` per client.

On the embedded backend (``memory://``) workers run in the client's own
process (``InProcessWorker``): nothing is checked and nothing is said.
``Workers`` is what ``Memory.workers()`` returns, as ``redismem stats`` shows it:
each worker's health and what it runs (namespaces, plug-in names).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from redismem.config import MemoryConfig
from redismem.core.connection import describe_url
from redismem.core.queue import DEFAULT_QUEUE_NAME
from redismem.workers.health import HEALTH_INTERVAL_S, WorkerHealth, worker_health
from redismem.workers.runs import WorkerRuns

__all__ = ["CHECK_EVERY_S", "WARN_EVERY_S", "WorkerPresence", "WorkerStatus", "Workers"]

logger = logging.getLogger(__name__)

#: Seconds a look at the registry is reused after an enqueue.
CHECK_EVERY_S = 30.0
#: Seconds between two warnings of one client that no worker runs.
WARN_EVERY_S = 600.0
#: What an in-process worker's name ends with (``InProcessWorker``).
_IN_PROCESS = "-inprocess-"


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One worker of the queue, as ``redismem worker --check`` sees it."""

    name: str
    #: Its health record is fresh (written in the last ``HEALTH_INTERVAL_S`` + 1 s).
    healthy: bool
    #: When it last recorded a heartbeat (None: never registered).
    last_seen: datetime | None
    #: arq's health record: jobs complete, failed, retried, ongoing, queued.
    record: str | None
    #: An ``InProcessWorker`` (the embedded backend's workers).
    in_process: bool
    #: What it runs, as its start-up line says: the namespaces it sweeps and
    #: its plug-ins by name (``"keypoints"``, ``"rules"``, ``"llm (gpt-4o-mini)"``,
    #: ``"off"``, ``"none"``). Empty / None when unknown: a worker that never
    #: registered, or one of a version that does not record it.
    namespaces: tuple[str, ...] = ()
    summarizer: str | None = None
    extractor: str | None = None
    consolidator: str | None = None
    embedder: str | None = None

    @property
    def stale(self) -> bool:
        return not self.healthy

    def runs(self) -> str | None:
        """``namespace redismem: summarizer keypoints, extractor rules, ...``
        (None when unknown)."""
        if self.summarizer is None or self.extractor is None:
            return None
        if self.consolidator is None or self.embedder is None:
            return None
        return WorkerRuns(
            self.namespaces, self.summarizer, self.extractor, self.consolidator, self.embedder
        ).describe()

    def describe(self) -> str:
        """A line on its health, then one on what it runs (when known)."""
        runs = self.runs()
        return self._health() + ("" if runs is None else f"\n  {runs}")

    def _health(self) -> str:
        where = " (in process)" if self.in_process else ""
        if self.healthy:
            return f"worker {self.name}{where}: healthy ({self.record})"
        if self.last_seen is None:
            return f"worker {self.name}{where}: never registered"
        ago = (datetime.now(UTC) - self.last_seen).total_seconds()
        return (
            f"worker {self.name}{where}: STALE, no health record in the last "
            f"{HEALTH_INTERVAL_S + 1} s (seen {ago:.0f}s ago)"
        )


@dataclass(frozen=True, slots=True)
class Workers:
    """The workers of a client's queue (``await mem.workers()``): iterate it
    for each ``WorkerStatus``; ``live`` are the healthy ones."""

    #: The queue's name, and its Redis (password hidden).
    queue: str
    url: str
    namespace: str
    #: The memory Redis (password hidden), when it is not the queue's.
    memory_url: str | None
    #: The embedded backend: workers run in this process (``InProcessWorker``).
    embedded: bool
    workers: tuple[WorkerStatus, ...]

    def __iter__(self) -> Iterator[WorkerStatus]:
        return iter(self.workers)

    def __len__(self) -> int:
        return len(self.workers)

    @property
    def live(self) -> list[WorkerStatus]:
        return [w for w in self.workers if w.healthy]

    def describe(self) -> str:
        """A line as ``redismem stats`` prints it, then one per worker."""
        if not self.workers:
            return f"no worker seen on queue {self.queue!r}: {start_hint(self)}"
        stale = [w.name for w in self.workers if not w.healthy]
        head = f"{len(self.workers) - len(stale)} of {len(self.workers)} healthy"
        head += f" (stale: {', '.join(stale)})" if stale else ""
        lines = [f"workers on queue {self.queue!r}: {head}", *(w.describe() for w in self)]
        return "\n".join(lines)


def start_hint(workers: Workers) -> str:
    """How to start a worker for this client's queue."""
    if workers.embedded:
        return (
            "the embedded backend runs workers in this process: "
            f"async with InProcessWorker({workers.url!r}): ..."
        )
    command = f"redismem worker --url {workers.memory_url or workers.url}"
    if workers.memory_url is not None:
        command += f" --queue-url {workers.url}"
    if workers.namespace != "redismem":
        command += f" --namespace {workers.namespace}"
    if workers.queue != DEFAULT_QUEUE_NAME:
        command = f"REDISMEM_QUEUE_NAME={workers.queue} {command}"
    return f"start one with `{command}`"


def _status(health: WorkerHealth, now: float) -> WorkerStatus:
    seen = None
    if health.seen_ago is not None:
        seen = datetime.fromtimestamp(now, UTC) - timedelta(seconds=health.seen_ago)
    status = WorkerStatus(
        name=health.name,
        healthy=health.healthy,
        last_seen=seen,
        record=health.record,
        in_process=_IN_PROCESS in health.name,
    )
    runs = health.runs
    if runs is None:
        return status
    return replace(
        status,
        namespaces=runs.namespaces,
        summarizer=runs.summarizer,
        extractor=runs.extractor,
        consolidator=runs.consolidator,
        embedder=runs.embedder,
    )


class WorkerPresence:
    """One client's view of its queue's workers (see the module docstring).
    ``client()`` gives a Redis client of the queue (the client's own queue
    pool: no connection of its own)."""

    def __init__(self, config: MemoryConfig, client: Callable[[], Any]) -> None:
        self._config = config
        self._client = client
        self._queue_url = config.queue_url or config.url
        self._checked_at = float("-inf")
        self._warned_at = float("-inf")

    async def workers(self) -> Workers:
        """The queue's workers heard from in the last ``FORGET_S`` seconds."""
        now = time.time()
        found = await worker_health(self._queue_url, self._config.queue_name, client=self._client())
        return Workers(
            queue=self._config.queue_name,
            url=describe_url(self._queue_url),
            namespace=self._config.layout.namespace,
            memory_url=(
                None if self._queue_url == self._config.url else describe_url(self._config.url)
            ),
            embedded=self._config.embedded,
            workers=tuple(_status(h, now) for h in found),
        )

    async def check(self, *, max_age: float = CHECK_EVERY_S, why: str = "work was queued") -> None:
        """Warn (rate-limited) if no worker is live, looking again when the
        last look is older than ``max_age`` seconds. Never raises."""
        if self._config.embedded:
            return
        moment = time.monotonic()
        if moment - self._checked_at >= max_age:
            self._checked_at = moment  # concurrent callers reuse this look
            try:
                found = await self.workers()
            except Exception as exc:  # a warning must never fail the caller
                logger.debug("could not look for workers on %s: %s", self._queue_url, exc)
                return
            if not found.live and moment - self._warned_at >= WARN_EVERY_S:
                self._warned_at = moment
                logger.warning(
                    "%s but no redismem worker is running on queue %r at %s: nothing indexes, "
                    "summarizes or extracts (search finds no new messages, flush() times out); "
                    "%s",
                    why,
                    found.queue,
                    found.url,
                    start_hint(found),
                )
