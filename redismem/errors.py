"""Every error redismem raises.

Exception tree::

    RedisMemError
    ├── InvalidInput          (also ValueError) bad arguments; nothing was written
    ├── BackendUnavailable    Redis could not be reached, or did not answer in
    │                         time, after retries with backoff
    ├── ConfigurationError    the connection cannot work as configured (a TLS
    │                         certificate failed verification); never retried
    ├── BackendError          Redis answered with an error (wrong type, refused
    │   │                     credentials, ...)
    │   ├── BackendFull       Redis is out of memory (maxmemory reached)
    │   └── VersionConflict   a conditional write found another version; nothing written
    ├── CorruptData           a stored value failed to decode; names the key
    ├── ClientClosed          the Memory was used after ``aclose()``
    ├── SummarizerError       a summarizer failed (exception, timeout, unusable output)
    ├── ExtractorError        an extractor failed (endpoint away, timeout, unusable
    │                         output); retried by the workers
    ├── EmbedderError         an embedder failed (recall vectors)
    └── MissingDependency     (also ImportError) an optional package is not installed

"Backend" is the Redis (or Valkey, or embedded) server the memory lives on.
The names ``StoreError``, ``StoreUnavailable`` and ``StoreFull`` of earlier
releases still work, with a ``DeprecationWarning``.

redis-py exceptions never escape: they are mapped at the boundary with
``raise ... from exc`` so the cause stays visible in tracebacks.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendFull",
    "BackendUnavailable",
    "ClientClosed",
    "ConfigurationError",
    "CorruptData",
    "EmbedderError",
    "ExtractorError",
    "InvalidInput",
    "MissingDependency",
    "RedisMemError",
    "SummarizerError",
    "VersionConflict",
]


class RedisMemError(Exception):
    """Root of every error raised by redismem."""


class InvalidInput(RedisMemError, ValueError):
    """The arguments were rejected before anything was sent to Redis."""


class BackendUnavailable(RedisMemError):
    """Redis could not be reached (connection refused, timed out) after retries.

    A write that raises it may still have been stored (its command can reach
    Redis after the client gave up). ``write_id`` is the id of that write:
    call ``write(..., write_id=exc.write_id)`` again to store it exactly once.
    """

    write_id: str | None = None


class ConfigurationError(RedisMemError):
    """The connection cannot work as configured, so it is not retried: the
    server's TLS certificate failed verification (untrusted, expired, issued
    for another host name) or the TLS handshake failed for another reason
    than a lost connection. Fix the URL, the CA the client trusts or the
    server's certificate."""


class BackendError(RedisMemError):
    """Redis answered a command with an error."""


class BackendFull(BackendError):
    """Redis refused a write because it is out of memory (``maxmemory`` with
    ``noeviction``). Nothing of the call was stored."""


class VersionConflict(BackendError):
    """A conditional write (``if_version``) found the item at another version
    (``current``: its live version, 0 when there is none). Nothing was written:
    read it again and decide."""

    def __init__(self, what: str, expected: int, current: int) -> None:
        super().__init__(f"{what} is at version {current}, not {expected}: nothing was written")
        self.expected = expected
        self.current = current


class CorruptData(RedisMemError):
    """A stored value could not be decoded.

    ``key`` names the Redis key holding it; other sessions stay readable.
    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"corrupt data in key {key!r}: {reason}")
        self.key = key
        self.reason = reason


class ClientClosed(RedisMemError):
    """The client was used after ``aclose()``."""


class SummarizerError(RedisMemError):
    """A summarizer failed to produce a usable summary."""


class ExtractorError(RedisMemError):
    """An extractor (or consolidator) failed: its endpoint was away or timed
    out, or its output was unusable. The workers retry the job."""


class EmbedderError(RedisMemError):
    """An embedder failed to give one vector per text."""


class MissingDependency(RedisMemError, ImportError):
    """An optional dependency is needed for this feature."""

    def __init__(self, package: str, extra: str | None = None) -> None:
        hint = f"pip install 'redismem[{extra}]'" if extra else f"pip install {package}"
        super().__init__(f"this feature needs the {package!r} package: {hint}")
        self.package = package


def __getattr__(name: str) -> object:
    from redismem._moved import renamed

    return renamed(__name__, name, globals())
