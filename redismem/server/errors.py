"""The one place where an exception becomes an HTTP response.

Every error response has the same body::

    {"error": {"type": "<ExceptionClass>", "message": "...", ...}}

=========================================  ======  =================================
exception                                  status  extra
=========================================  ======  =================================
``InvalidInput``                           422     the library's message, unchanged
request validation (FastAPI, pydantic)     422     ``errors``: where and why
``VersionConflict``                        409     ``expected``, ``current``
``BackendFull``                            507
``BackendUnavailable``                     503     ``Retry-After``; ``write_id`` (and the
                                                   ``Idempotency-Key`` header) to retry with
``ClientClosed`` (the server is stopping)  503     ``Retry-After``; ``write_id`` too
other ``BackendError``                     502     (Redis answered with an error)
``EmbedderError`` and the like             502     (a model endpoint failed)
``CorruptData``, ``ConfigurationError``    500
malformed JSON, invalid UTF-8              400
``Problem`` subclasses below               their own (401, 403, 404, 413, 415, 429)
anything else                              500     no detail (logged)
=========================================  ======  =================================

A write route (one taking an ``Idempotency-Key``) keeps its write id in the
request's state (``WRITE_ID``, set by ``auth.write_once`` before Redis is
touched): every 503 of such a route names it, even one raised before the
library saw the write (Redis never reached since the server started).

A request still running when the server's shutdown timeout ends is cancelled
by uvicorn, which would answer 500: ``CancelledRequests`` answers 503 with
``Retry-After`` instead (``ClientClosed``; a write route's with its write
id), so the client retries against another replica.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from redismem import metrics
from redismem.checks import check_write_id, new_write_id
from redismem.errors import (
    BackendError,
    BackendFull,
    BackendUnavailable,
    ClientClosed,
    EmbedderError,
    ExtractorError,
    InvalidInput,
    RedisMemError,
    SummarizerError,
    VersionConflict,
)

__all__ = [
    "BadRequest",
    "CancelledRequests",
    "Forbidden",
    "NotServed",
    "PayloadTooLarge",
    "Problem",
    "RateLimited",
    "Unauthorized",
    "UnsupportedMediaType",
    "WRITE_ID",
    "error_body",
    "error_response",
    "install",
    "response_for",
    "state_write_id",
    "unavailable",
]

logger = logging.getLogger(__name__)

#: Seconds a client is told to wait before retrying a 503.
RETRY_AFTER_UNAVAILABLE = 1
#: Where a write route keeps its write id in the request's state
#: (``scope["state"]``, which ``request.state`` reads).
WRITE_ID = "redismem_write_id"


def state_write_id(scope: Mapping[str, Any]) -> str | None:
    """The write id a write route drew for this request, if any."""
    state = scope.get("state")
    found = state.get(WRITE_ID) if isinstance(state, Mapping) else None
    return found if isinstance(found, str) else None


class Problem(Exception):
    """An HTTP-level refusal the server makes itself (not the library's)."""

    status: ClassVar[int] = 400
    default_headers: ClassVar[Mapping[str, str]] = {}

    def __init__(self, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers: dict[str, str] = dict(headers or self.default_headers)


class BadRequest(Problem):
    """The body is not JSON (malformed, not UTF-8, nested too deep)."""

    status = 400


class Unauthorized(Problem):
    """No API key, or not a valid one."""

    status = 401
    default_headers: ClassVar[Mapping[str, str]] = {"WWW-Authenticate": "Bearer"}


class Forbidden(Problem):
    """The key is valid but not for this namespace, or its role is too low."""

    status = 403


class NotServed(Problem):
    """This server does not serve the namespace in the path."""

    status = 404


class PayloadTooLarge(Problem):
    status = 413


class UnsupportedMediaType(Problem):
    status = 415


class RateLimited(Problem):
    """The key made more requests than its rate allows; ``Retry-After`` says
    when the next one will be accepted."""

    status = 429

    def __init__(self, retry_after: float) -> None:
        seconds = max(1, math.ceil(retry_after))
        super().__init__(
            f"rate limit reached: retry in {seconds} s", headers={"Retry-After": str(seconds)}
        )


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, **extra}}


def error_response(
    status: int,
    kind: str,
    message: str,
    *,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    return JSONResponse(error_body(kind, message, **extra), status_code=status, headers=headers)


def unavailable(kind: str, message: str, write_id: str | None) -> JSONResponse:
    """A 503: ``Retry-After``, and the write id to retry with (body and
    ``Idempotency-Key`` header) when there is one."""
    headers = {"Retry-After": str(RETRY_AFTER_UNAVAILABLE)}
    extra: dict[str, Any] = {}
    if write_id is not None:
        extra["write_id"] = write_id
        headers["Idempotency-Key"] = write_id
    return error_response(503, kind, message, headers=headers, **extra)


def response_for(exc: Exception, *, write_id: str | None = None) -> JSONResponse:
    """The response for ``exc`` (see the module's table); ``write_id``: the
    request's, for a 503 whose exception does not name one."""
    metrics.count_error(exc)
    if isinstance(exc, Problem):
        return error_response(exc.status, type(exc).__name__, str(exc), headers=exc.headers or None)
    if isinstance(exc, InvalidInput):
        return error_response(422, "InvalidInput", str(exc))
    if isinstance(exc, VersionConflict):
        return error_response(
            409, "VersionConflict", str(exc), expected=exc.expected, current=exc.current
        )
    if isinstance(exc, BackendFull):
        return error_response(507, "BackendFull", str(exc))
    if isinstance(exc, BackendUnavailable):
        return unavailable("BackendUnavailable", str(exc), exc.write_id or write_id)
    if isinstance(exc, ClientClosed):
        return unavailable("ClientClosed", "the server is shutting down", write_id)
    if isinstance(exc, BackendError):
        return error_response(502, type(exc).__name__, str(exc))
    if isinstance(exc, EmbedderError | ExtractorError | SummarizerError):
        return error_response(502, type(exc).__name__, str(exc))
    if isinstance(exc, RedisMemError):
        logger.error("request failed: %s", exc, exc_info=exc)
        return error_response(500, type(exc).__name__, str(exc))
    # Starlette's ServerErrorMiddleware sends this, then raises the exception
    # again for the server to log its traceback.
    return error_response(500, "InternalError", "internal server error (logged)")


def _validation(exc: RequestValidationError) -> JSONResponse:
    metrics.count_error(exc)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        first = next(e for e in errors if e.get("type") == "json_invalid")
        why = (first.get("ctx") or {}).get("error", "malformed JSON")
        return error_response(400, "BadRequest", f"the body is not valid JSON: {why}")
    details = [
        {
            "loc": [str(part) for part in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in errors
    ]
    message = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details[:5])
    return error_response(422, "RequestValidationError", message, errors=details)


_HTTP_NAMES = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
}


def _http(exc: StarletteHTTPException) -> JSONResponse:
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code == 400 and message == "There was an error parsing the body":
        # FastAPI's answer when the body could not be decoded at all.
        message = "the body is not valid JSON (malformed, not UTF-8, or nested too deep)"
    kind = _HTTP_NAMES.get(exc.status_code, f"HTTP{exc.status_code}")
    return error_response(exc.status_code, kind, message, headers=exc.headers)


def _takes_write_id(route: Any) -> bool:
    """Whether ``route`` (a FastAPI route) reads an ``Idempotency-Key``."""
    pending = [getattr(route, "dependant", None)]
    while pending:
        dependant = pending.pop()
        if dependant is None:
            continue
        if any(str(p.alias).lower() == "idempotency-key" for p in dependant.header_params):
            return True
        pending.extend(dependant.dependencies)
    return False


def _write_id_at_cancel(scope: Scope) -> str | None:
    """The id a cancelled request's client should retry with: the one its
    route drew, else (cancelled before the route ran: nothing was written)
    its ``Idempotency-Key``, else a fresh one; None for a route that takes
    no write id."""
    drawn = state_write_id(scope)
    if drawn is not None or not _takes_write_id(scope.get("route")):
        return drawn
    for name, value in scope.get("headers", ()):
        if bytes(name).lower() == b"idempotency-key":
            try:
                return check_write_id(bytes(value).decode("latin-1"))
            except InvalidInput:
                break
    return new_write_id()


class CancelledRequests:
    """ASGI middleware: a request cancelled before its answer started gets
    a 503 (``ClientClosed``, ``Retry-After``, a write route's write id)
    instead of uvicorn's 500. uvicorn cancels the requests still running
    when ``--shutdown-timeout`` ends, and nothing else: the cancellation is
    taken here, the 503 sent, and the request ends."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if started:
                raise  # too late for another answer: uvicorn closes the connection
            logger.warning(
                "%s %s cancelled (the shutdown timeout ended): answered 503",
                scope.get("method", ""),
                scope.get("path", ""),
            )
            response = unavailable(
                "ClientClosed", "the server is shutting down", _write_id_at_cancel(scope)
            )
            metrics.count_error(ClientClosed("the server is shutting down"))
            response.headers["Connection"] = "close"
            await response(scope, receive, send)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        return response_for(exc, write_id=state_write_id(request.scope))

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _validation(exc)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return _http(exc)

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(RedisMemError, on_problem)
    # Anything else: a 500 with the same body (Starlette's ServerErrorMiddleware
    # sends it, then the server logs the traceback).
    app.add_exception_handler(Exception, on_problem)
