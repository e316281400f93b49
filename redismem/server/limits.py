"""Limits on what a caller may send: body size and type (``BodyGuard``), and
request rate per API key (``RateLimiter``).

``BodyGuard`` is plain ASGI, outside the routes: a body declared larger than
the limit (``Content-Length``) is refused before it is read, and one that
grows past it while it streams in (chunked, or a lying ``Content-Length``) is
refused at the first chunk over the limit, so no route ever sees it (413,
and the connection closed once the answer is out: the rest is not read).
Under ``/v1`` a body must be JSON (``application/json`` or ``+json``), else
415, and UTF-8 (checked as it streams in), else 400: the JSON parser would
take UTF-16 or UTF-32, and let UTF-8-encoded surrogates through. Before a
415 or a 400 the rest of the body is read and dropped (up to the limit, then
the connection is closed instead): a reverse proxy still sending it would
see a reset and answer 502, where now it gets the answer and keeps the
connection. The rate limit is a token bucket per key in each server process
(429 with ``Retry-After``); the auth dependency takes a token per request.
"""

from __future__ import annotations

import codecs
import contextlib
import threading
import time
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from redismem.server.errors import (
    BadRequest,
    PayloadTooLarge,
    RateLimited,
    UnsupportedMediaType,
    response_for,
)

__all__ = ["BodyGuard", "RateLimiter"]

#: Paths whose request bodies must be JSON.
JSON_PREFIXES = ("/v1/",)


class _Refused(Exception):
    pass


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


class BodyGuard:
    """Refuse bodies over ``max_bytes`` (413), and under ``/v1`` bodies not
    declared JSON (415) or not UTF-8 (400), with the server's error body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = content_type = None
        chunked = False
        for name, value in scope["headers"]:  # one pass; the first of each counts
            name = name.lower()
            if name == b"content-length":
                declared = value if declared is None else declared
            elif name == b"content-type":
                content_type = value if content_type is None else content_type
            elif name == b"transfer-encoding":
                chunked = True
        length = 0
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                length = -1
        if not length and not chunked:
            # No body (HTTP/1.1: neither Content-Length nor chunked, or a
            # length of 0): nothing to limit or check, so no wrappers.
            await self.app(scope, receive, send)
            return
        if length > self.max_bytes:
            await self._refuse(scope, send, self._too_large())
            return
        json_body = str(scope.get("path", "")).startswith(JSON_PREFIXES)
        if json_body and (content_type is None or not _is_json(content_type)):
            shown = content_type.decode("latin-1") if content_type else "none"
            kept = await self._drain(scope, receive, 0)
            await self._refuse(
                scope,
                send,
                UnsupportedMediaType(
                    f"the body must be JSON (Content-Type: application/json), not {shown}"
                ),
                close=not kept,
            )
            return
        received = 0
        ended = False
        utf8 = codecs.getincrementaldecoder("utf-8")() if json_body else None
        refusal: Exception | None = None
        started = False

        async def limited() -> Message:
            nonlocal received, refusal, ended
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                received += len(chunk)
                ended = not message.get("more_body", False)
                if received > self.max_bytes:
                    refusal = self._too_large()
                elif utf8 is not None:
                    try:
                        utf8.decode(chunk, final=not message.get("more_body", False))
                    except UnicodeDecodeError as exc:
                        at = received - len(chunk) + exc.start
                        refusal = BadRequest(f"the body is not UTF-8 (byte {at}: {exc.reason})")
                if refusal is not None:
                    raise _Refused
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if refusal is not None:
                return  # the app's answer to the aborted read; ours goes instead
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        with contextlib.suppress(_Refused):
            await self.app(scope, limited, guarded)
        if refusal is not None and not started:
            kept = False
            if not isinstance(refusal, PayloadTooLarge):
                kept = ended or await self._drain(scope, receive, received)
            await self._refuse(scope, send, refusal, close=not kept)

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"the request body is larger than {self.max_bytes} bytes")

    async def _drain(self, scope: Scope, receive: Receive, received: int) -> bool:
        """Read and drop the rest of the body, ``received`` bytes of it read
        already; False (the connection is to be closed) when it goes past the
        limit, the client left, or it was never asked for (``Expect:
        100-continue``: asking would make the client send it)."""
        if _header(scope, b"expect") is not None:
            return False
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return False
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                return False
            if not message.get("more_body", False):
                return True

    async def _refuse(
        self, scope: Scope, send: Send, problem: Exception, *, close: bool = True
    ) -> None:
        """Answer ``problem``; ``close``: and close the connection once the
        answer is out (uvicorn writes it whole, then closes), the rest of
        the body unread."""
        response = response_for(problem)
        if close:
            response.headers["Connection"] = "close"

        async def nothing() -> Message:
            return {"type": "http.disconnect"}

        await response(scope, nothing, send)


class RateLimiter:
    """A token bucket per key: ``rate`` tokens a second, at most ``burst``;
    ``rate`` 0 lets everything through."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._lock = threading.Lock()
        #: key -> (tokens, when they were counted)
        self._buckets: MutableMapping[str, tuple[float, float]] = {}

    def take(self, key: str) -> None:
        """Spend one token of ``key``'s bucket, or raise ``RateLimited``."""
        if self.rate <= 0:
            return
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                raise RateLimited((1.0 - tokens) / self.rate)
            self._buckets[key] = (tokens - 1.0, now)

    def state(self) -> dict[str, Any]:
        return {"rate": self.rate, "burst": self.burst, "keys": len(self._buckets)}
