"""Opening Redis connections, running calls with bounded retries, and mapping
redis-py errors into redismem's tree, at the boundary.

``redis://``, ``rediss://`` (TLS), ``unix://`` URLs with ACL username and
password and a db number go to redis-py. ``memory://`` (optionally
``memory://NAME``) is the embedded backend: an in-process fakeredis server,
shared by every client of this process that names it. Its data lives only in
this process.

Retries live here and only here (``CallPolicy``): the redis-py clients we open
never re-send a command themselves. A call is attempted at most
``retries + 1`` times, each attempt limited to ``attempt_timeout`` seconds
(connecting included), with capped exponential backoff in between, so every
call ends, with a result or an error, within ``CallPolicy.bound()`` seconds
however long Redis stalls. Only errors that say the server could not be
reached or did not answer in time are retried; a retried script must
therefore be idempotent (the session scripts are: see ``scripts/``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis.asyncio as aioredis
import redis.exceptions as rexc

from .errors import (
    CorruptData,
    InvalidInput,
    MissingDependency,
    RedisMemError,
    StoreError,
    StoreFull,
    StoreUnavailable,
)

__all__ = [
    "SCAN_BATCH",
    "CallPolicy",
    "describe_url",
    "map_error",
    "open_redis",
    "redis_errors",
    "scan_once",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_embedded_servers: dict[str, Any] = {}
_embedded_logged: set[str] = set()

#: Error code the scripts raise when a session's keys disagree (see _common.lua).
CORRUPT_CODE = "REDISMEM_CORRUPT"
#: Replies meaning "not now" during a restart or failover: retried.
_TRANSIENT_REPLIES = ("LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")
#: Replies meaning the credentials are wrong or missing: never retried.
_CREDENTIAL_REPLIES = ("NOAUTH", "WRONGPASS", "NOPERM", "INVALIDPASSWORD")


def describe_url(url: str) -> str:
    """The URL with any password masked, for logs and errors."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


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


def open_redis(url: str, *, connect_timeout: float = 2.0) -> aioredis.Redis:
    """A redis-py asyncio client for ``url`` that never retries by itself.

    No socket timeout is set on the client: ``CallPolicy`` limits each attempt
    as a whole, which is cheaper than redis-py's per-read timers. Connection
    health checks are off: they block inside connection setup during a stall.
    """
    if url.startswith("memory://"):
        import fakeredis

        name = url[len("memory://") :].strip("/") or "default"
        client: aioredis.Redis = fakeredis.FakeAsyncRedis(server=_embedded_server(name))
        return client
    try:
        client = aioredis.Redis.from_url(
            url, socket_connect_timeout=connect_timeout, health_check_interval=0
        )
    except ValueError as exc:
        raise InvalidInput(f"cannot use Redis URL {describe_url(url)!r}: {exc}") from exc
    return client


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

    ``StoreUnavailable`` marks what a retry may fix.
    """
    where = f"Redis at {describe_url(url)}"
    if isinstance(exc, RedisMemError):
        return exc
    code = _reply_code(exc)
    if isinstance(exc, rexc.AuthenticationError | rexc.AuthorizationError) or (
        isinstance(exc, rexc.ResponseError) and code in _CREDENTIAL_REPLIES
    ):
        hint = "check the user and password in the URL"
        return StoreError(f"{where} refused the credentials ({hint}): {exc}")
    if isinstance(exc, rexc.ResponseError) and code == CORRUPT_CODE:
        _, key, reason = [*_reply_text(exc).split(" ", 2), "", ""][:3]
        return CorruptData(
            key, f"{reason}; the session's keys were evicted or deleted apart (clear it)"
        )
    if isinstance(exc, rexc.OutOfMemoryError) or code == "OOM":
        return StoreFull(f"{where} is out of memory (maxmemory reached): {exc}")
    if isinstance(exc, rexc.ResponseError) and code in _TRANSIENT_REPLIES:
        return StoreUnavailable(f"{where} is not ready: {exc}")
    if isinstance(exc, rexc.ConnectionError | rexc.TimeoutError | OSError | TimeoutError):
        detail = str(exc) or "no answer in time"
        return StoreUnavailable(f"{where} is unavailable: {detail}")
    if isinstance(exc, rexc.RedisError):
        return StoreError(f"{where} answered with an error: {exc}")
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
class CallPolicy:
    """How one call to Redis is attempted (see the module docstring)."""

    url: str
    attempt_timeout: float = 5.0
    retries: int = 3
    backoff_base: float = 0.1
    backoff_cap: float = 2.0

    def for_url(self, url: str) -> CallPolicy:
        """The same policy for another server (e.g. the queue's)."""
        return replace(self, url=url)

    def backoff(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failed attempt."""
        return float(min(self.backoff_cap, self.backoff_base * 2 ** (failures - 1)))

    def bound(self) -> float:
        """Longest time a call can take, in seconds."""
        waits = sum(self.backoff(n) for n in range(1, self.retries + 1))
        return (self.retries + 1) * self.attempt_timeout + waits

    async def run(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Await ``attempt()`` until it succeeds, retrying what a retry may fix.

        Raises the mapped redismem error of the last failure.
        """
        failures = 0
        while True:
            try:
                async with asyncio.timeout(self.attempt_timeout):
                    return await attempt()
            except Exception as exc:
                error = map_error(exc, self.url)
                if error is None or error is exc:
                    raise
                failures += 1
                if not isinstance(error, StoreUnavailable) or failures > self.retries:
                    raise error from exc
                logger.debug("attempt %d failed, retrying: %s", failures, error)
            await asyncio.sleep(self.backoff(failures))


#: Keys asked for per SCAN call.
SCAN_BATCH = 500


async def scan_once(redis: Any, *, cursor: int, pattern: str) -> tuple[int, list[bytes]]:
    """One ``SCAN`` step (never ``KEYS``): the next cursor and a batch of keys."""
    result: tuple[int, list[bytes]] = await redis.scan(cursor, match=pattern, count=SCAN_BATCH)
    return result
