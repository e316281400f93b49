"""``create_app(settings)``: the ASGI app ``redismem serve`` runs.

Routes under ``/v1/namespaces/{namespace}`` (``redismem.server.routes``),
``/healthz`` (the process answers; no Redis call), ``/readyz`` (Redis and the
queue answer and a worker was seen recently; cached for a second, so probes
every few seconds cost one look; ``?workers=optional``: the same checks, but
ready while Redis and the queue answer, for a readiness probe: a worker
outage leaves the server taking writes, whose work waits in the queue),
``/openapi.json`` and ``/docs``. MCP (``/mcp``) and metrics (``/metrics``)
are mounted in ``_mount_extras``.

``create_app_from_env`` is the factory uvicorn calls in each process of
``redismem serve --workers N``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse

from redismem import metrics
from redismem.errors import RedisMemError
from redismem.server import errors
from redismem.server.apikeys import KeyRing
from redismem.server.auth import Gate, document_keys
from redismem.server.limits import BodyGuard, RateLimiter
from redismem.server.namespaces import Namespaces
from redismem.server.routes import ROUTERS
from redismem.server.schemas import ErrorBody
from redismem.server.settings import ServerSettings

__all__ = ["ReadyLook", "Readiness", "create_app", "create_app_from_env"]

logger = logging.getLogger(__name__)

#: Seconds a readiness answer is reused.
READY_CACHE_S = 1.0
#: Seconds one readiness look may take (Redis away or stalled: not ready).
READY_TIMEOUT_S = 2.0


def _version() -> str:
    try:
        return version("redismem")
    except PackageNotFoundError:  # pragma: no cover - an uninstalled checkout
        return "unknown"


@dataclass(frozen=True, slots=True)
class ReadyLook:
    """One look of ``Readiness``: each check's finding, and which failed."""

    checks: dict[str, str]
    failed: frozenset[str]

    def ready(self, *, workers: bool = True) -> bool:
        """Whether every check passed (``workers`` False: but the workers')."""
        return not (self.failed if workers else self.failed - {"workers"})

    def why(self, *, workers: bool = True) -> str:
        """The failed checks' findings."""
        counted = self.failed if workers else self.failed - {"workers"}
        return "; ".join(f"{k}: {v}" for k, v in self.checks.items() if k in counted)


class Readiness:
    """``/readyz``: the memory Redis answers PING, the queue Redis answers and
    a worker of the queue has a fresh health record (as ``redismem worker
    --check`` reads it). One look per ``READY_CACHE_S`` whatever the number
    of probes."""

    def __init__(self, settings: ServerSettings, namespaces: Namespaces) -> None:
        self._settings = settings
        self._namespaces = namespaces
        self._lock = asyncio.Lock()
        self._answer: ReadyLook | None = None
        self._at = 0.0
        #: The queue Redis client of every look (one connection, not one per probe).
        self._queue_client: Any = None

    async def aclose(self) -> None:
        if self._queue_client is not None:
            client, self._queue_client = self._queue_client, None
            await client.aclose()

    async def check(self) -> ReadyLook:
        if self._answer is not None and time.monotonic() - self._at < READY_CACHE_S:
            return self._answer
        async with self._lock:
            if self._answer is None or time.monotonic() - self._at >= READY_CACHE_S:
                self._answer = await self._look()
                self._at = time.monotonic()
            return self._answer

    async def _look(self) -> ReadyLook:
        from redismem.workers.health import FORGET_S, health_client, worker_health

        settings = self._settings
        checks: dict[str, str] = {}
        failed: set[str] = set()
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                memory = await self._namespaces.get(settings.namespaces[0])
                await memory.ping()
            checks["redis"] = "ok"
        except (RedisMemError, OSError, TimeoutError) as exc:
            checks["redis"] = f"unreachable: {exc or 'no answer in time'}"
            failed.add("redis")
        queue_url = settings.queue_url or settings.url
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                if self._queue_client is None:
                    self._queue_client = health_client(queue_url)
                health = await worker_health(
                    queue_url, settings.queue_name, client=self._queue_client
                )
            checks["queue"] = "ok"
            healthy = sum(1 for h in health if h.healthy)
            if healthy:
                checks["workers"] = f"{healthy} of {len(health)} healthy"
            else:
                checks["workers"] = (
                    f"no healthy worker on queue {settings.queue_name!r} "
                    f"(seen in the last {FORGET_S} s: {len(health)})"
                )
                failed.add("workers")
        except (RedisMemError, OSError, TimeoutError) as exc:
            checks["queue"] = f"unreachable: {exc or 'no answer in time'}"
            failed.add("queue")
        return ReadyLook(checks, frozenset(failed))


def create_app(settings: ServerSettings) -> FastAPI:
    """The app serving ``settings.namespaces``."""
    namespaces = Namespaces(settings)
    keys = None if settings.insecure_no_auth else KeyRing(settings.keys_file or "")
    gate = Gate(keys, RateLimiter(settings.rate, settings.bucket_size), namespaces)
    readiness = Readiness(settings, namespaces)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await readiness.aclose()
            await namespaces.aclose()

    app = FastAPI(
        title="redismem",
        version=_version(),
        summary="Shared, durable memory for fleets of LLM agents, on plain Redis.",
        description="Every route under /v1 needs an API key (Authorization: Bearer <key>) "
        "bound to the namespace in its path, with the role the route names: read, write "
        'or admin. Errors have one body: {"error": {"type": ..., "message": ...}}.',
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.gate = gate
    app.state.namespaces = namespaces
    app.state.readiness = readiness
    errors.install(app)
    app.add_middleware(BodyGuard, max_bytes=settings.max_body_bytes)
    # Outside the guard, inside the metrics (added last): a request the
    # shutdown cancels is counted as the 503 it gets.
    app.add_middleware(errors.CancelledRequests)

    @app.get("/healthz", tags=["probes"], summary="The process answers (no Redis call)")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["probes"],
        summary="Redis and the queue answer, and a worker was seen recently",
        description="With workers=optional the same checks are reported, but the server is "
        "ready while Redis and the queue answer: for a readiness probe, as a worker outage "
        "leaves the server taking writes (their work waits in the queue).",
        responses={
            422: {"model": ErrorBody, "description": "workers is neither required nor optional"},
            503: {"description": "not ready; the checks say why"},
        },
    )
    async def readyz(
        workers: Annotated[
            Literal["required", "optional"],
            Query(description="optional: ready without a worker seen recently"),
        ] = "required",
    ) -> JSONResponse:
        look = await readiness.check()
        required = workers == "required"
        if look.ready(workers=required):
            return JSONResponse({"status": "ready", "checks": look.checks})
        failed = look.why(workers=required)
        body: dict[str, Any] = errors.error_body("NotReady", failed)
        body.update(status="unready", checks=look.checks)
        return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})

    for router in ROUTERS:
        app.include_router(router)
    _mount_extras(app, settings)
    _document_keys(app)
    return app


def _document_keys(app: FastAPI) -> None:
    """The app's OpenAPI document says how a key is sent (``auth.document_keys``)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()  # FastAPI's, cached until the routes change
        if "securitySchemes" not in document.get("components", {}):
            document_keys(document, [route for router in ROUTERS for route in router.routes])
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _mount_extras(app: FastAPI, settings: ServerSettings) -> None:
    """Mounts beside the API: MCP (streamable HTTP) at ``/mcp`` and the
    Prometheus scrape endpoint at ``/metrics``."""
    metrics.enable()
    app.add_middleware(metrics.RequestMetrics, routes=app.router.routes)
    app.add_route("/metrics", metrics.asgi_app(), methods=["GET"], include_in_schema=False)
    from redismem.server import mcp

    mcp.mount(app, app.state.gate)


def create_app_from_env() -> FastAPI:
    """The app from the ``REDISMEM_*`` variables (uvicorn's factory for
    ``redismem serve --workers N``: each process calls it)."""
    return create_app(ServerSettings.from_env())
