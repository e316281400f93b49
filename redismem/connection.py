"""Opening Redis connections, and mapping redis-py errors at the boundary.

``redis://``, ``rediss://`` (TLS), ``unix://`` URLs with ACL username and
password and a db number go to redis-py. ``memory://`` (optionally
``memory://NAME``) is the embedded backend: an in-process fakeredis server,
shared by every client of this process that names it. Its data lives only in
this process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from .errors import MissingDependency, StoreError, StoreUnavailable

__all__ = ["open_redis", "redis_errors", "describe_url"]

logger = logging.getLogger(__name__)

_embedded_servers: dict[str, Any] = {}
_embedded_logged: set[str] = set()


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


def open_redis(
    url: str, *, connect_timeout: float = 2.0, socket_timeout: float = 5.0, retries: int = 3
) -> aioredis.Redis:
    """A redis-py asyncio client for ``url``, retrying connection errors with backoff."""
    if url.startswith("memory://"):
        import fakeredis

        name = url[len("memory://") :].strip("/") or "default"
        client: aioredis.Redis = fakeredis.FakeAsyncRedis(server=_embedded_server(name))
        return client
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries)
    try:
        client = aioredis.Redis.from_url(
            url,
            retry=retry,
            retry_on_error=[rexc.ConnectionError, rexc.TimeoutError],
            socket_connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            health_check_interval=30,
        )
    except ValueError as exc:
        from .errors import InvalidInput

        raise InvalidInput(f"cannot use Redis URL {describe_url(url)!r}: {exc}") from exc
    return client


@contextmanager
def redis_errors(url: str) -> Iterator[None]:
    """Re-raise redis-py errors as redismem errors, keeping the cause."""
    try:
        yield
    except (rexc.AuthenticationError, rexc.AuthorizationError) as exc:
        # A connection error in redis-py, but retrying cannot fix credentials.
        raise StoreError(f"Redis at {describe_url(url)} refused the credentials: {exc}") from exc
    except (rexc.ConnectionError, rexc.TimeoutError, ConnectionError, TimeoutError) as exc:
        raise StoreUnavailable(f"Redis at {describe_url(url)} is unavailable: {exc}") from exc
    except rexc.RedisError as exc:
        raise StoreError(f"Redis at {describe_url(url)} answered with an error: {exc}") from exc
