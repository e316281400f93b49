"""Opening Redis connections, running calls with bounded retries, and mapping
redis-py errors into redismem's tree, at the boundary.

``redis://``, ``rediss://`` (TLS), ``unix://`` URLs with ACL username and
password and a db number go to redis-py. ``memory://`` (optionally
``memory://NAME``) is the embedded backend: an in-process fakeredis server,
shared by every client of this process that names it. Its data lives only in
this process.

Retries live here and only here: ``RetryPolicy`` is the one retry type, with
its backoff, used by the client's calls, by the hot path's multiplexed
connections (``redismem.core.transport``, through ``run_until``) and by the
workers' queue pool (as redis-py's ``Retry``, ``for_redis_py``). The redis-py
clients the library opens never re-send a command otherwise. A call is
attempted at most ``retries + 1`` times (or, for the workers riding out an
outage, for a bounded time), each attempt limited to ``attempt_timeout``
seconds (connecting included), with capped exponential backoff in between,
so every call ends, with a result or an error, within ``RetryPolicy.bound()``
seconds however long Redis stalls. Only errors that say the server could not
be reached or did not answer in time are retried (a connection lost while a
transaction watched keys too); a retried script must therefore be
idempotent (the session scripts are: see ``redismem/lua/``). A TLS certificate
that fails verification is a ``ConfigurationError``, raised at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Self, TypeVar

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

from redismem.core import local
from redismem.core.urls import RedisTarget, describe_url, parse_url
from redismem.errors import (
    BackendError,
    BackendFull,
    BackendUnavailable,
    ConfigurationError,
    CorruptData,
    InvalidInput,
    MissingDependency,
    RedisMemError,
)

__all__ = [
    "SCAN_BATCH",
    "RetryPolicy",
    "describe_url",
    "map_error",
    "open_redis",
    "redis_errors",
    "scan_once",
    "server_url",
    "tls_failure",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_embedded_servers: dict[str, Any] = {}
_embedded_logged: set[str] = set()

#: Error code the scripts raise when a session's keys disagree (see _common.lua).
CORRUPT_CODE = "REDISMEM_CORRUPT"
#: Error code of a user-scoped script whose keys are of another epoch (_guard.lua).
EPOCH_CODE = "REDISMEM_EPOCH"


class EpochMoved(BackendError):
    """Internal, never raised to a user: a user-scoped script found the user
    cleared since its keys were built (``redismem.core.guard``). The caller builds
    its keys again for ``current``, or drops what it read."""

    def __init__(self, current: int) -> None:
        super().__init__(f"the user was cleared meanwhile (now at epoch {current})")
        self.current = current


#: Replies meaning "not now" during a restart or failover: retried.
_TRANSIENT_REPLIES = ("LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")
#: Cluster errors meaning "not now" (slots moving, a failover): retried.
_CLUSTER_TRANSIENT = (
    rexc.ClusterDownError,
    rexc.TryAgainError,
    rexc.MasterDownError,
    rexc.SlotNotCoveredError,
    rexc.AskError,
    rexc.MovedError,
)
#: Replies meaning the credentials are wrong or missing: never retried.
_CREDENTIAL_REPLIES = ("NOAUTH", "WRONGPASS", "NOPERM", "INVALIDPASSWORD")
#: TLS errors that mean the connection was lost, not that TLS cannot work:
#: retried like any lost connection.
_TLS_TRANSIENT = (
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
    ssl.SSLSyscallError,
    ssl.SSLWantReadError,
    ssl.SSLWantWriteError,
)
#: redis-py's text for a connection lost while a transaction watched keys.
_LOST_WATCH = "A ConnectionError occurred"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or while handling (redis-py
    wraps socket and TLS errors in its own, often without ``from``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind ``exc`` that no retry can fix (a certificate that
    fails verification, a failed handshake), or None. A connection lost
    during a handshake (``SSLEOFError``, ...) is not one: it is an outage."""
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLError) and not isinstance(cause, _TLS_TRANSIENT):
            return cause
    return None


def _lost_watch(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py's ``WatchError`` for a connection lost
    while a transaction watched keys (arq's enqueue), not for a key changed."""
    if not isinstance(exc, rexc.WatchError):
        return False
    return str(exc).startswith(_LOST_WATCH) or any(
        isinstance(cause, rexc.ConnectionError | rexc.TimeoutError | OSError)
        for cause in _causes(exc)
    )


def _embedded_server(name: str) -> Any:
    try:
        import fakeredis
    except ImportError as exc:  # pragma: no cover - fakeredis is a dependency
        raise MissingDependency("fakeredis[lua]") from exc
    server = _embedded_servers.get(name)
    if server is None:
        server = _embedded_servers[name] = fakeredis.FakeServer(version=(7,))
    if name not in _embedded_logged:
        _embedded_logged.add(name)
        logger.warning(
            "redismem is using the embedded in-process backend (memory://%s): data lives only "
            "in this process and is lost when it exits; set REDISMEM_URL to a Redis server "
            "to share memory between processes",
            name,
        )
    return server


def server_url(url: str) -> str:
    """The URL redis-py and arq connect to for ``url``: for ``local://PATH``
    its server's ``unix://`` URL (the server started unless it runs, see
    ``redismem.core.local``), else ``url`` itself."""
    target = parse_url(url)
    if target.kind == "local":
        assert target.path is not None
        return local.start(target.path)
    return url


def open_redis(url: str, *, connect_timeout: float = 2.0, **options: Any) -> Any:
    """A redis-py asyncio client for what ``url`` names (see ``redismem.core.urls``)
    that never retries by itself: a ``Redis`` for one server (``local://``:
    its server, started unless it runs) or a Sentinel's master, a
    ``RedisCluster`` for a cluster, fakeredis for ``memory://``.

    No socket timeout is set unless ``options`` asks: ``RetryPolicy`` limits
    each attempt as a whole, which is cheaper than redis-py's per-read
    timers. Connection health checks are off: they block inside connection
    setup during a stall. ``options`` go to the client's connections (the
    worker's queue pool passes its retry and socket settings).
    """
    target = parse_url(url)
    if target.kind == "embedded":
        import fakeredis

        name = url[len("memory://") :].strip("/") or "default"
        return fakeredis.FakeAsyncRedis(server=_embedded_server(name))
    settings: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "health_check_interval": 0,
        **options,
    }
    if target.kind == "cluster":
        return _open_cluster(target, settings)
    if target.kind == "sentinel":
        return _open_sentinel(target, settings)
    url = server_url(url)
    if url.lower().startswith("unix:"):  # redis-py refuses TCP options on a unix socket
        settings.pop("socket_keepalive", None)
    try:
        return aioredis.Redis.from_url(url, **settings)
    except ValueError as exc:
        raise InvalidInput(f"cannot use Redis URL {describe_url(url)!r}: {exc}") from exc


class _Cluster(RedisCluster):
    """redis-py's ``RedisCluster``, kept able to recover.

    redis-py drops a node that failed a call from its startup list and, once
    every seed is gone, can never reconnect ("Redis Cluster cannot be
    connected"): the seeds of the URL are put back before every
    (re)initialization. A connection error also makes redis-py close every
    node's connections, under the feet of other calls in flight, which then
    fail with ``AttributeError``; those are reported as the connection
    errors they are, for the retry policy to retry.
    """

    def __init__(self, seeds: tuple[tuple[str, int], ...], **options: Any) -> None:
        super().__init__(startup_nodes=[ClusterNode(h, p) for h, p in seeds], **options)
        self._seeds = seeds

    async def initialize(self) -> Self:
        known = self.nodes_manager.startup_nodes
        for host, port in self._seeds:
            name = f"{host}:{port}"
            if name not in known:
                known[name] = ClusterNode(host, port, **self.nodes_manager.connection_kwargs)
        await super().initialize()
        return self

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except (AttributeError, TypeError) as exc:
            reason = f"connection reset by a cluster reconfiguration: {exc!r}"
            raise rexc.ConnectionError(reason) from exc


def _open_cluster(target: RedisTarget, settings: dict[str, Any]) -> Any:
    return _Cluster(  # type: ignore[abstract]
        target.nodes,
        username=target.username,
        password=target.password,
        ssl=target.tls,
        # Retries are RetryPolicy's; redirects (MOVED, ASK) are still followed.
        # 1, not 0: redis-py's cluster pipeline makes this many attempts in
        # all (0 would run none), and its single calls one more than this; a
        # re-sent script is harmless (they are idempotent).
        cluster_error_retry_attempts=1,
        connection_error_retry_attempts=0,
        require_full_coverage=False,
        **settings,
    )


def _open_sentinel(target: RedisTarget, settings: dict[str, Any]) -> Any:
    sentinel_auth = {
        "username": target.options.get("sentinel_username"),
        "password": target.options.get("sentinel_password"),
        "socket_connect_timeout": settings["socket_connect_timeout"],
    }
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.nodes),
        sentinel_kwargs={k: v for k, v in sentinel_auth.items() if v is not None},
        ssl=target.tls,
        **settings,
    )
    assert target.service is not None
    return sentinel.master_for(
        target.service,
        connection_pool_class=_SentinelPool,
        db=target.db,
        username=target.username,
        password=target.password,
    )


class _SentinelPool(SentinelConnectionPool):
    """The master's connection pool; disconnecting it (closing its client)
    closes the clients of the sentinels it asks, too."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        for client in self.sentinel_manager.sentinels:
            await client.aclose()


def is_cluster(redis: Any) -> bool:
    """Whether ``redis`` is a cluster client (no MULTI, a SCAN per node)."""
    return isinstance(redis, RedisCluster)


_PIPELINE_NOTE = " of pipeline caused error: "


def _reply_text(exc: BaseException) -> str:
    """The server's error text, without redis-py's note on pipeline errors."""
    text = str(exc)
    if text.startswith("Command # ") and _PIPELINE_NOTE in text:
        text = text.split(_PIPELINE_NOTE, 1)[1]
        if text.startswith("('") and text.endswith("',)"):
            text = text[2:-3]
    return text


def _reply_code(exc: BaseException) -> str:
    text = _reply_text(exc)
    return text.split(" ", 1)[0] if text else ""


def map_error(exc: BaseException, url: str) -> RedisMemError | None:
    """The redismem error for a redis-py (or socket) error, None for others.

    ``BackendUnavailable`` marks what a retry may fix; ``ConfigurationError``
    and refused credentials never get better by retrying.
    """
    where = f"Redis at {describe_url(url)}"
    if isinstance(exc, RedisMemError):
        return exc
    code = _reply_code(exc)
    if isinstance(exc, rexc.AuthenticationError | rexc.AuthorizationError) or (
        isinstance(exc, rexc.ResponseError) and code in _CREDENTIAL_REPLIES
    ):
        hint = "check the user and password in the URL"
        return BackendError(f"{where} refused the credentials ({hint}): {exc}")
    tls = tls_failure(exc)
    if tls is not None:
        hint = (
            "check the CA the client trusts (?ssl_ca_certs=PATH in the URL), the server's "
            "certificate and the host name in the URL"
        )
        return ConfigurationError(f"{where}: the TLS handshake failed ({hint}): {tls}")
    if _lost_watch(exc):
        return BackendUnavailable(f"{where} is unavailable: the connection was lost ({exc})")
    if isinstance(exc, rexc.ResponseError) and code == EPOCH_CODE:
        return EpochMoved(int(_reply_text(exc).split(" ", 2)[1]))
    if isinstance(exc, rexc.ResponseError) and code == CORRUPT_CODE:
        _, key, reason = [*_reply_text(exc).split(" ", 2), "", ""][:3]
        return CorruptData(
            key, f"{reason}; the session's keys were evicted or deleted apart (clear it)"
        )
    if isinstance(exc, rexc.OutOfMemoryError) or code == "OOM":
        return BackendFull(f"{where} is out of memory (maxmemory reached): {exc}")
    if isinstance(exc, rexc.ResponseError) and code in _TRANSIENT_REPLIES:
        return BackendUnavailable(f"{where} is not ready: {exc}")
    if isinstance(exc, _CLUSTER_TRANSIENT):
        return BackendUnavailable(f"{where} is reconfiguring: {type(exc).__name__} {exc}")
    if isinstance(exc, rexc.RedisClusterException):
        if "not enabled" in str(exc):
            return BackendError(f"{where} is not a cluster (use redis://): {exc}")
        return BackendUnavailable(f"{where} is unavailable: {exc}")
    if isinstance(exc, rexc.ConnectionError | rexc.TimeoutError | OSError | TimeoutError):
        detail = str(exc) or "no answer in time"
        return BackendUnavailable(f"{where} is unavailable: {detail}")
    if isinstance(exc, rexc.RedisError):
        return BackendError(f"{where} answered with an error: {exc}")
    return None


@contextmanager
def redis_errors(url: str) -> Iterator[None]:
    """Re-raise redis-py errors as redismem errors, keeping the cause (no retry)."""
    try:
        yield
    except Exception as exc:
        error = map_error(exc, url)
        if error is None or error is exc:
            raise
        raise error from exc


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a call to Redis is attempted: redismem's one retry type, used by the
    client's calls, the hot path's multiplexed connections (``run_until``) and,
    through ``for_redis_py``, the workers' queue pool.

    A call is attempted, then retried while what failed is a
    ``BackendUnavailable`` (see ``map_error``: the server could not be reached
    or did not answer in time), at most ``retries`` times and, with
    ``within``, only while less than ``within`` seconds have passed since the
    first failure (a wait is cut to what is left). Between attempts it waits
    ``backoff_base`` seconds, doubling after each failure up to
    ``backoff_cap``. Each attempt is cut off after ``attempt_timeout``
    seconds (None: the attempt keeps its own time, e.g. redis-py's socket
    timeouts). Anything else raises at once. A call therefore ends within
    ``bound()`` seconds, and whatever is retried must be idempotent.
    """

    url: str
    attempt_timeout: float | None = 5.0
    #: Retries after the first attempt; None: as many as ``within`` allows.
    retries: int | None = 3
    backoff_base: float = 0.1
    backoff_cap: float = 2.0
    #: Seconds after the first failure past which no retry starts; None: no limit.
    within: float | None = None

    def __post_init__(self) -> None:
        if self.retries is None and self.within is None:
            raise InvalidInput("a retry policy needs retries or within (else it never gives up)")

    def for_url(self, url: str) -> RetryPolicy:
        """The same policy for another server (e.g. the queue's)."""
        return replace(self, url=url)

    def backoff(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failed attempt."""
        return float(min(self.backoff_cap, self.backoff_base * 2 ** (failures - 1)))

    def bound(self) -> float:
        """Longest time a call can take, in seconds (``inf`` when an attempt
        has no time limit of its own)."""
        attempt = math.inf if self.attempt_timeout is None else self.attempt_timeout
        bound = math.inf
        if self.retries is not None:
            waits = sum(self.backoff(n) for n in range(1, self.retries + 1))
            bound = (self.retries + 1) * attempt + waits
        if self.within is not None:
            # The first attempt, the retries started within ``within`` of its
            # failure, the last of them.
            bound = min(bound, 2 * attempt + self.within)
        return bound

    def deadline(self) -> float:
        """The loop time by which an attempt starting now must end."""
        if self.attempt_timeout is None:
            return math.inf
        return asyncio.get_running_loop().time() + self.attempt_timeout

    async def run(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Await ``attempt()`` until it succeeds, retrying what a retry may fix;
        each attempt is cut off after ``attempt_timeout``.

        Raises the mapped redismem error of the last failure.
        """

        async def timed(_deadline: float) -> T:
            async with asyncio.timeout(self.attempt_timeout):
                return await attempt()

        return await self.run_until(timed)

    async def run_until(
        self, attempt: Callable[[float], Awaitable[T]], *, first: Awaitable[T] | None = None
    ) -> T:
        """``run`` for an attempt that keeps its deadline itself: it is given
        the loop time by which it must end (the hot path's connection checks
        its calls' deadlines with one timer, cheaper than a timer per call).

        ``first``: the first attempt, already under way (started with
        ``deadline()``); retries call ``attempt``.
        """
        try:
            if first is not None:
                return await first
            return await attempt(self.deadline())
        except Exception as exc:
            failure: Exception = exc
        return await self._retried(attempt, failure, Exception, None, mapped=True)

    async def rerun(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        errors: tuple[type[BaseException], ...],
        after_failure: Callable[[Any], Awaitable[object]] | None = None,
    ) -> T:
        """``run`` on redis-py's terms, for ``for_redis_py``: only ``errors``
        are retried (those redis-py hands its retry: connection errors and
        timeouts; of them, what ``run`` would retry), ``after_failure`` is
        awaited after each failed attempt (redis-py drops the connection
        there), and the last error is raised as it came (arq, calling
        redis-py, catches redis-py's types)."""

        async def timed(_deadline: float) -> T:
            async with asyncio.timeout(self.attempt_timeout):
                return await attempt()

        try:
            return await timed(0.0)
        except errors as exc:
            failure: BaseException = exc
        return await self._retried(timed, failure, errors, after_failure, mapped=False)

    async def _retried(
        self,
        attempt: Callable[[float], Awaitable[T]],
        failure: BaseException,
        errors: type[BaseException] | tuple[type[BaseException], ...],
        after_failure: Callable[[Any], Awaitable[object]] | None,
        *,
        mapped: bool,
    ) -> T:
        """The retries after a first attempt failed with ``failure``."""
        loop = asyncio.get_running_loop()
        since = loop.time()
        failures = 0
        while True:
            error = map_error(failure, self.url)
            if error is None or error is failure:
                raise failure
            failures += 1
            if after_failure is not None:
                await after_failure(failure)
            wait = self._wait(failures, loop.time() - since)
            if wait is None or not isinstance(error, BackendUnavailable):
                if mapped:
                    raise error from failure
                raise failure
            self._log_retry(failures, error, since + (self.within or 0.0) - loop.time())
            await asyncio.sleep(wait)
            try:
                result = await attempt(self.deadline())
            except errors as exc:
                failure = exc
                continue
            if self.within is not None:
                logger.info("Redis is back after %d failed tries", failures)
            return result

    def _wait(self, failures: int, elapsed: float) -> float | None:
        """Seconds to wait before the next attempt, None to give up."""
        if self.retries is not None and failures > self.retries:
            return None
        backoff = self.backoff(failures)
        if self.within is None:
            return backoff
        left = self.within - elapsed
        return min(backoff, left) if left > 0 else None

    def _log_retry(self, failures: int, error: RedisMemError, left: float) -> None:
        """A short retry is routine (debug); riding out an outage is worth a
        warning now and then."""
        if self.within is None:
            logger.debug("attempt %d failed, retrying: %s", failures, error)
        elif failures in (1, 10) or failures % 100 == 0:
            logger.warning("%s; retrying for up to %.0f s more", error, left)

    def for_redis_py(self) -> Retry:
        """This policy as redis-py's ``Retry``, for a client that re-sends a
        command itself (``open_redis(..., retry=...)``): the workers' queue
        pool, whose commands arq sends."""
        return _RedisPyRetry(self)


class _RedisPyRetry(Retry):
    """redis-py's ``Retry`` interface over a ``RetryPolicy`` (its own backoff
    and count are unused: the policy decides and waits)."""

    __slots__ = ("policy",)

    def __init__(self, policy: RetryPolicy) -> None:
        super().__init__(NoBackoff(), retries=-1)
        # redis-py maps a refused connect (OSError) only after its retry loop.
        self.update_supported_errors([OSError])
        self.policy = policy

    async def call_with_retry(
        self, do: Callable[[], Awaitable[T]], fail: Callable[[Any], Any]
    ) -> T:
        return await self.policy.rerun(do, errors=self._supported_errors, after_failure=fail)


#: Keys asked for per SCAN call.
SCAN_BATCH = 500


async def scan_once(
    redis: Any, *, cursor: str, pattern: str, key: str | None = None, count: int = SCAN_BATCH
) -> tuple[str, list[bytes]]:
    """One ``SCAN`` step (never ``KEYS``): the next cursor and a batch of keys.

    ``cursor`` "0" starts a pass and is returned when the pass ends. On a
    cluster the pass visits every primary in turn (the cursor names the node,
    ``"HOST:PORT@N"``), or, given ``key``, only the primary holding ``key``'s
    slot (all keys of one user share a slot). A cursor naming a node that is
    no longer a primary starts that node's part again on the first primary.
    """
    if not is_cluster(redis):
        if key is not None or "@" in cursor:
            cursor = cursor.rpartition("@")[2]
        next_cursor, batch = await redis.scan(int(cursor), match=pattern, count=count)
        return str(next_cursor), batch
    await redis.initialize()
    if key is not None:
        primaries = [redis.get_node_from_key(key)]
    else:
        primaries = sorted(redis.get_primaries(), key=lambda node: node.name)
    names = [node.name for node in primaries]
    name, _, position = cursor.rpartition("@")
    if name not in names:
        name, position = names[0], "0"
    node = primaries[names.index(name)]
    reply = await redis.execute_command(
        "SCAN", int(position), "MATCH", pattern, "COUNT", count, target_nodes=node
    )
    raw_next, batch = reply
    if isinstance(raw_next, dict):  # redis-py's cluster client: {node name: cursor}
        raw_next = raw_next[node.name]
    next_position = int(raw_next)
    if next_position:
        return f"{name}@{next_position}", batch
    following = names.index(name) + 1
    if following < len(names):
        return f"{names[following]}@0", batch
    return "0", batch


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
