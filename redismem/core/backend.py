"""``Backend``: the Redis side every feature shares, owned by the ``Memory`` façade.

One object holds what each feature needs to talk to Redis, and nothing else:

* the redis-py client and, where the URL allows, the multiplexed connection
  the scripts run on (``redismem.core.transport``);
* the retry policy every call runs under (bounded in time, retried while
  Redis is unreachable, redis-py errors mapped into redismem's tree);
* the script runner (``redismem.core.scripts``) and the key layout
  (``redismem.core.keys``);
* each user's epoch as this client last saw it (``redismem.core.epochs``);
* the job queue the writes enqueue on, made on first use.

Sessions, recall, the long-term store, memories, summarization, extraction,
the workers and the adapters take a ``Backend``; none of them imports the
façade. ``Memory.backend`` hands it out, and anything that accepts a
``Backend`` also accepts an object holding one (``backend_of``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from redismem.core.connection import RetryPolicy, describe_url, open_redis
from redismem.core.epochs import UserEpochs, in_epoch
from redismem.core.keys import KeyLayout, SessionKeys
from redismem.core.scripts import ScriptRunner
from redismem.core.transport import MultiplexedCluster, MultiplexedConnection, open_multiplexed
from redismem.errors import ClientClosed, InvalidInput

if TYPE_CHECKING:
    from redismem.config import MemoryConfig
    from redismem.core.queue import SummaryQueue

__all__ = ["Backend", "HasBackend", "backend_of", "open_backend"]

T = TypeVar("T")


class Backend:
    """Connections, retry policy, scripts, key layout and epochs of one client."""

    def __init__(self, config: MemoryConfig, redis: Any) -> None:
        self._config = config
        self._redis = redis
        self._policy = config.policy
        self._multiplexed = open_multiplexed(
            config.url, redis, connect_timeout=config.connect_timeout
        )
        if config.replica_acks and self._multiplexed is None:
            raise InvalidInput(
                "replica_acks needs a redis://, unix://, redis+sentinel:// or redis+cluster:// "
                f"URL without TLS, not {describe_url(config.url)!r}"
            )
        self._scripts = ScriptRunner(
            redis,
            self._policy,
            self._multiplexed,
            replica_acks=config.replica_acks,
            replica_timeout_ms=round(config.replica_timeout * 1000),
        )
        self._queue: SummaryQueue | None = None
        self._closed = False
        #: Each user's epoch as this client last saw it.
        self.epochs = UserEpochs()

    @property
    def config(self) -> MemoryConfig:
        return self._config

    @property
    def layout(self) -> KeyLayout:
        return self._config.layout

    @property
    def policy(self) -> RetryPolicy:
        return self._policy

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def redis(self) -> Any:
        """The redis-py client (for operators and tests). Its calls are not
        bounded, retried or mapped: use ``call`` for that."""
        self.check_open()
        return self._redis

    @property
    def multiplexed(self) -> MultiplexedConnection | MultiplexedCluster | None:
        """The multiplexed connection scripts run on, when the URL allows one."""
        return self._multiplexed

    @property
    def scripts(self) -> ScriptRunner:
        """The one script runner (see ``redismem.core.scripts``)."""
        self.check_open()
        return self._scripts

    @property
    def queue(self) -> SummaryQueue:
        """The work queue jobs are enqueued on (made on first use)."""
        if self._queue is None:
            from redismem.core.queue import SummaryQueue

            config = self._config
            queue_url = config.queue_url or config.url
            self._queue = SummaryQueue(
                queue_url,
                queue_name=config.queue_name,
                delay=config.summarize_delay,
                policy=self._policy.for_url(queue_url),
            )
        return self._queue

    def check_open(self) -> None:
        """Raise ``ClientClosed`` once ``aclose()`` ran."""
        if self._closed:
            raise ClientClosed("this Memory was closed with aclose()")

    async def call(self, operation: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``operation(redis)`` under the retry policy: bounded in time,
        retried when Redis is unreachable, redis-py errors mapped.
        ``operation`` may run more than once: it must be idempotent."""
        self.check_open()
        redis = self._redis
        return await self._policy.run(lambda: operation(redis))

    async def atomic(self, commands: Sequence[Sequence[Any]], *, key: str) -> list[Any]:
        """Run ``commands`` in one MULTI under the retry policy and return
        their replies (bytes, ints, lists; a score may come back as bytes or,
        through redis-py, a float: convert what you read). Every key they name
        must share ``key``'s slot (one user's keys do); on a cluster they run
        on that slot's master. Reads, or idempotent writes only: the call may
        be attempted more than once."""
        self.check_open()
        multiplexed = self._multiplexed
        if multiplexed is not None:
            return await self._policy.run_until(
                lambda deadline: multiplexed.transaction(commands, key=key, deadline=deadline)
            )

        async def multi(redis: Any) -> list[Any]:
            pipe = redis.pipeline(transaction=True)
            for command in commands:
                pipe.execute_command(*command)
            result: list[Any] = await pipe.execute()
            return result

        return await self.call(multi)

    async def ping(self) -> None:
        await self.call(lambda redis: redis.ping())

    async def in_session(
        self, user_id: str, session_id: str, op: Callable[[SessionKeys], Awaitable[T]]
    ) -> T:
        """``op(keys)`` on the session's keys in the user's current epoch
        (checked ids): built again and run again when the user was cleared
        since this client last looked (see ``redismem.core.guard``)."""
        layout = self.layout
        return await in_epoch(
            self.epochs, user_id, lambda epoch: op(layout.session(user_id, session_id, epoch))
        )

    async def aclose(self) -> None:
        """Close the queue's pool, the multiplexed connection and the client."""
        if self._closed:
            return
        self._closed = True
        if self._queue is not None:
            await self._queue.aclose()
        if self._multiplexed is not None:
            await self._multiplexed.aclose()
        await self._redis.aclose()

    def __repr__(self) -> str:
        return (
            f"Backend(url={describe_url(self._config.url)!r}, namespace={self.layout.namespace!r})"
        )


class HasBackend(Protocol):
    """Anything that holds a ``Backend`` (the ``Memory`` façade does)."""

    @property
    def backend(self) -> Backend: ...


def backend_of(owner: Backend | HasBackend) -> Backend:
    """``owner`` itself, or the ``Backend`` it holds."""
    if isinstance(owner, Backend):
        return owner
    backend = getattr(owner, "backend", None)
    if not isinstance(backend, Backend):
        raise InvalidInput(f"expected a Memory or a Backend, not {type(owner).__name__}")
    return backend


async def open_backend(config: MemoryConfig) -> Backend:
    """A ``Backend`` for ``config``, with Redis reached once (``BackendUnavailable``
    when it cannot be after retries)."""
    backend = Backend(config, open_redis(config.url, connect_timeout=config.connect_timeout))
    try:
        await backend.ping()
    except BaseException:
        await backend.aclose()
        raise
    return backend
