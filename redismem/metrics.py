"""Prometheus metrics of the library, the workers and the server.

Off until ``enable()`` (``redismem serve`` and ``redismem worker
--metrics-port`` enable them; a program using the library may too, before
it connects). While off, every recording call here returns at once, and a
``Memory`` runs its calls untouched: it times them only when it is made
with the metrics on (``instrument``). ``prometheus-client`` (in the extra
``redismem[server]``) is imported by ``enable()`` only, so the library works
without it; enabling without it raises ``MissingDependency`` naming
``redismem[server]``.

=====================================================  ============================================
metric                                                 recorded by
=====================================================  ============================================
``redismem_http_requests_total{route,method,status}``  the server (``RequestMetrics``); ``route``
``redismem_http_request_duration_seconds{route,        is the route's template (``/v1/namespaces/
method}``                                              {namespace}/...``), never the raw path
``redismem_call_duration_seconds{operation}``          the façade's calls (``instrument``): write,
                                                       read, context, summary, entries, sessions,
                                                       search, flush, clear, clear_user
``redismem_writes_total``, ``redismem_reads_total``,   the same calls, when they succeed (reads:
``redismem_searches_total``                            read, context, summary, entries)
``redismem_errors_total{type}``                        errors raised to a caller, by class: the
                                                       façade's calls, the server's error mapping
                                                       (``count_error``), the workers' passes;
                                                       each error once
``redismem_jobs_total{job,outcome}``,                  the workers: ``job`` is ``session`` (one
``redismem_job_duration_seconds{job,outcome}``         arq job), its passes ``index``,
                                                       ``extract``, ``summarize``, and ``sweep``;
                                                       ``outcome`` the pass's status (indexed,
                                                       idle, committed, ...) or ``error``
``redismem_summarize_lag_seconds``,                    the workers: from the write that made the
``redismem_index_lag_seconds``                         session pending to its summary commit, or
                                                       to its messages being indexed
``redismem_queue_depth{queue}``                        the workers, refreshed in the background
``redismem_sessions_pending{namespace}``,              (``redismem.workers.gauges``): bounded
``redismem_index_documents{namespace}``                reads, never per job
=====================================================  ============================================

The index's size in bytes is not reported: Redis knows it only key by key
(``MEMORY USAGE`` of every posting list), which is not cheap.

**Processes.** Each process has its own values. Every ``redismem worker``
serves its own on ``--metrics-port``: scrape each worker (one target per
worker or pod). ``redismem serve --workers N`` runs N processes behind one
port, where a scrape would reach one of them at random: there
prometheus-client's multiprocess mode applies, in ``PROMETHEUS_MULTIPROC_DIR``
(an empty directory, wiped before each start) or, when it is not set, a
private temporary directory the command makes and removes: every process
writes its values to files there and ``/metrics`` merges them. The gauges,
which the workers set, report the most recent value in that mode.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar

from redismem import env
from redismem.errors import MissingDependency

__all__ = [
    "METRICS",
    "MetricSpec",
    "RequestMetrics",
    "asgi_app",
    "count_error",
    "enable",
    "enabled",
    "exposition_registry",
    "instrument",
    "job_done",
    "observe_lag",
    "serve_http",
    "set_index_documents",
    "set_queue_depth",
    "set_sessions_pending",
    "timed",
    "timed_job",
]

#: What a library call's success counts: ``redismem_<counted>_total``.
Counted = Literal["writes", "reads", "searches"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

#: Request and call latencies (seconds): fine below 25 ms, where the goals are.
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
#: Job and pass durations (seconds): a summarizer may take its 30 s.
JOB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: Write -> summarized / indexed (seconds): jobs wait ~1 s to coalesce a burst.
LAG_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: its exposed name, kind, help and labels."""

    name: str
    kind: Literal["counter", "histogram", "gauge"]
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


#: Every metric, in one place (the dashboard's test checks its queries against it).
METRICS = (
    MetricSpec(
        "redismem_http_requests_total",
        "counter",
        "HTTP requests answered, by route template, method and status",
        ("route", "method", "status"),
    ),
    MetricSpec(
        "redismem_http_request_duration_seconds",
        "histogram",
        "Time to answer an HTTP request, by route template and method",
        ("route", "method"),
        FAST_BUCKETS,
    ),
    MetricSpec(
        "redismem_call_duration_seconds",
        "histogram",
        "Time a library call took, by operation",
        ("operation",),
        FAST_BUCKETS,
    ),
    MetricSpec("redismem_writes_total", "counter", "Writes (entries appended) that succeeded"),
    MetricSpec("redismem_reads_total", "counter", "Session reads that succeeded"),
    MetricSpec("redismem_searches_total", "counter", "Searches that succeeded"),
    MetricSpec(
        "redismem_errors_total", "counter", "Errors raised to a caller, by class", ("type",)
    ),
    MetricSpec(
        "redismem_jobs_total",
        "counter",
        "Worker jobs and passes finished, by job and outcome",
        ("job", "outcome"),
    ),
    MetricSpec(
        "redismem_job_duration_seconds",
        "histogram",
        "Time a worker job or pass took, by job and outcome",
        ("job", "outcome"),
        JOB_BUCKETS,
    ),
    MetricSpec(
        "redismem_summarize_lag_seconds",
        "histogram",
        "From the write that made a session pending to its summary commit",
        (),
        LAG_BUCKETS,
    ),
    MetricSpec(
        "redismem_index_lag_seconds",
        "histogram",
        "From the write that made a session pending to its messages being indexed",
        (),
        LAG_BUCKETS,
    ),
    MetricSpec("redismem_queue_depth", "gauge", "Jobs waiting on the queue", ("queue",)),
    MetricSpec(
        "redismem_sessions_pending",
        "gauge",
        "Sessions marked pending (indexing, extraction or summarization due)",
        ("namespace",),
    ),
    MetricSpec(
        "redismem_index_documents",
        "gauge",
        "Messages in the recall index (documents)",
        ("namespace",),
    ),
)


class _Metrics:
    """The metric objects of this process (made by ``enable``)."""

    def __init__(self, prometheus: Any, registry: Any) -> None:
        made: dict[str, Any] = {}
        for spec in METRICS:
            options: dict[str, Any] = {"registry": registry}
            if spec.kind == "histogram":
                options["buckets"] = spec.buckets
                kind = prometheus.Histogram
            elif spec.kind == "gauge":
                options["multiprocess_mode"] = "mostrecent"
                kind = prometheus.Gauge
            else:
                kind = prometheus.Counter
            made[spec.name] = kind(spec.name, spec.help, spec.labels, **options)
        self.registry = registry
        self.requests = made["redismem_http_requests_total"]
        self.request_seconds = made["redismem_http_request_duration_seconds"]
        self.call_seconds = made["redismem_call_duration_seconds"]
        self.counts = {
            "writes": made["redismem_writes_total"],
            "reads": made["redismem_reads_total"],
            "searches": made["redismem_searches_total"],
        }
        self.errors = made["redismem_errors_total"]
        self.jobs = made["redismem_jobs_total"]
        self.job_seconds = made["redismem_job_duration_seconds"]
        self.lags = {
            "summarize": made["redismem_summarize_lag_seconds"],
            "index": made["redismem_index_lag_seconds"],
        }
        self.queue_depth = made["redismem_queue_depth"]
        self.sessions_pending = made["redismem_sessions_pending"]
        self.index_documents = made["redismem_index_documents"]
        # A labelled child is looked up once per operation, not per call.
        self._calls: dict[str, Any] = {}

    def call_done(self, operation: str, counts: str | None, seconds: float) -> None:
        child = self._calls.get(operation)
        if child is None:
            child = self._calls[operation] = self.call_seconds.labels(operation)
        child.observe(seconds)
        if counts is not None:
            self.counts[counts].inc()


#: The metrics of this process; None while off.
_active: _Metrics | None = None
#: Set on an exception once ``redismem_errors_total`` counted it.
_COUNTED = "_redismem_metrics_counted"


def enable(registry: Any = None) -> Any:
    """Turn the metrics on in this process (once; later calls change
    nothing) and return the registry they are in: ``registry``, else
    prometheus-client's default one. ``MissingDependency`` without
    prometheus-client."""
    global _active
    if _active is None:
        prometheus = _prometheus()
        _active = _Metrics(prometheus, registry or prometheus.REGISTRY)
    return _active.registry


def enabled() -> bool:
    """Whether ``enable()`` ran in this process."""
    return _active is not None


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise MissingDependency("prometheus-client", "server") from exc
    return prometheus_client


def exposition_registry() -> Any:
    """What a scrape reads: the metrics' registry, or, in multiprocess mode
    (``PROMETHEUS_MULTIPROC_DIR`` set), a registry merging every process's
    files. Enables the metrics first."""
    registry = enable()
    if env.prometheus_multiproc_dir() is None:
        return registry
    from prometheus_client import CollectorRegistry, multiprocess

    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
    return merged


def serve_http(port: int, host: str = "0.0.0.0") -> Any:
    """Serve ``/metrics`` on ``host:port`` from a thread of this process (the
    workers' ``--metrics-port``); returns the server (``shutdown()`` stops it).
    ``OSError`` when the port is taken."""
    registry = exposition_registry()
    server, _thread = _prometheus().start_http_server(port, host, registry=registry)
    return server


def asgi_app() -> Any:
    """The ASGI app answering scrapes (the server's ``GET /metrics``): an
    object, not a function, so that a Starlette ``Route`` runs it as an app."""
    return _ScrapeApp(_prometheus().make_asgi_app(registry=exposition_registry()))


# -- library calls -----------------------------------------------------------


def instrument(target: object, calls: Mapping[str, tuple[str, Counted | None]]) -> None:
    """With the metrics on, time the async methods of ``target`` named in
    ``calls`` (name -> operation, what a success counts), on this object
    alone (``timed``); with them off, leave it untouched, so its calls cost
    nothing more. ``Memory.__init__`` calls it."""
    if _active is None:
        return
    for name, (operation, counts) in calls.items():
        setattr(target, name, timed(operation, counts=counts)(getattr(target, name)))


def timed(
    operation: str, *, counts: Counted | None = None
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Decorate an async library call: its latency under ``operation``, its
    errors by class, and ``counts`` (``redismem_<counts>_total``) when it
    succeeds. While the metrics are off, the call runs as it is after one
    global lookup."""

    def decorate(call: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(call)
        async def measured(*args: P.args, **kwargs: P.kwargs) -> R:
            active = _active
            if active is None:
                return await call(*args, **kwargs)
            started = time.perf_counter()
            try:
                result = await call(*args, **kwargs)
            except Exception as exc:
                active.call_done(operation, None, time.perf_counter() - started)
                count_error(exc)
                raise
            active.call_done(operation, counts, time.perf_counter() - started)
            return result

        return measured

    return decorate


def count_error(error: BaseException | str) -> None:
    """Count one error in ``redismem_errors_total`` under its class name (or
    the name given). An exception already counted (by a library call, before
    the server mapped it) is not counted again."""
    if _active is None:
        return
    if isinstance(error, BaseException):
        if getattr(error, _COUNTED, False):
            return
        with contextlib.suppress(AttributeError):  # an exception class with __slots__
            setattr(error, _COUNTED, True)
        error = type(error).__name__
    _active.errors.labels(error).inc()


# -- workers -----------------------------------------------------------------


def job_done(job: str, outcome: str, seconds: float) -> None:
    """One job or pass finished with ``outcome`` after ``seconds``."""
    if _active is None:
        return
    outcome = outcome.replace(" ", "_")
    _active.jobs.labels(job, outcome).inc()
    _active.job_seconds.labels(job, outcome).observe(seconds)


async def timed_job(job: str, call: Awaitable[T]) -> T:
    """Await a worker pass (or job) and record it: its outcome is the
    result's ``status`` (a dict's ``"status"``; else ``ok``), or ``error``
    when it raises (the error is counted)."""
    if _active is None:
        return await call
    started = time.perf_counter()
    try:
        result = await call
    except Exception as exc:
        job_done(job, "error", time.perf_counter() - started)
        count_error(exc)
        raise
    status = result.get("status") if isinstance(result, dict) else getattr(result, "status", None)
    job_done(job, str(status or "ok"), time.perf_counter() - started)
    return result


def observe_lag(kind: Literal["summarize", "index"], seconds: float) -> None:
    """A write -> summarized (``summarize``) or write -> indexed (``index``) lag."""
    if _active is not None:
        _active.lags[kind].observe(max(0.0, seconds))


def set_queue_depth(queue: str, jobs: int) -> None:
    if _active is not None:
        _active.queue_depth.labels(queue).set(jobs)


def set_sessions_pending(namespace: str, sessions: int) -> None:
    if _active is not None:
        _active.sessions_pending.labels(namespace).set(sessions)


def set_index_documents(namespace: str, documents: int) -> None:
    if _active is not None:
        _active.index_documents.labels(namespace).set(documents)


# -- the server --------------------------------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The route of a request no route matched (a 404 of the router).
UNMATCHED = "unmatched"


App = Callable[[Scope, Receive, Send], Awaitable[None]]


class _ScrapeApp:
    def __init__(self, app: App) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


class RequestMetrics:
    """ASGI middleware counting and timing HTTP requests by route template,
    method and status (a request that raises counts as a 500). ``routes``
    (the app's, e.g. ``app.router.routes``) names the route of a request
    refused before routing (413, 415, 429 from middleware).

    The labelled series of each (route, method, status) are looked up once
    and kept (``labels()`` takes a lock and checks its arguments on every
    call): route templates, methods and statuses are few."""

    def __init__(self, app: App, routes: Sequence[Any] = ()) -> None:
        self.app = app
        self.routes = routes
        #: (route, method, status) -> (its counter, its histogram), of ``_of``
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._of: _Metrics | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        active = _active
        if active is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        root = scope.get("root_path", "")
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            route = route_template(scope, root, self.routes)
            self._record(active, route, scope.get("method", ""), status, seconds)

    def _record(
        self, active: _Metrics, route: str, method: str, status: int, seconds: float
    ) -> None:
        if self._of is not active:  # metrics enabled again, on another registry
            self._series, self._of = {}, active
        series = self._series.get((route, method, status))
        if series is None:
            series = (
                active.requests.labels(route, method, str(status)),
                active.request_seconds.labels(route, method),
            )
            self._series[route, method, status] = series
        series[0].inc()
        series[1].observe(seconds)


def route_template(scope: Scope, root_path: str = "", routes: Sequence[Any] = ()) -> str:
    """The template of the route that answered (``/v1/namespaces/{namespace}/...``;
    a mounted app's mount path), from the scope the router filled in, else
    of the first of ``routes`` matching the request."""
    route = scope.get("route")
    if route is None:
        for candidate in routes:
            match, _child = candidate.matches(scope)
            # Match.PARTIAL or Match.FULL; FastAPI's included routers have no path
            if getattr(match, "value", match) and hasattr(candidate, "path"):
                return str(candidate.path)
        return UNMATCHED
    mounted = str(scope.get("root_path", ""))[len(root_path) :]
    if hasattr(route, "endpoint"):  # a route, perhaps inside a mounted router
        return mounted + str(getattr(route, "path", ""))
    return mounted or str(getattr(route, "path", UNMATCHED))  # a mounted app
