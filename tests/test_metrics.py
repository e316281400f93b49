"""Prometheus metrics (``redismem.metrics``): their names, the library's calls,
the server's requests (middleware and ``/metrics`` of a real ``redismem
serve``), a real ``redismem worker --metrics-port`` scraped over HTTP, the
workers' census, the Grafana dashboard, and the library without
prometheus-client."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import prometheus_client
import pytest
import server_support
from helpers import free_port
from prometheus_client.parser import text_string_to_metric_families
from server_support import RunningServer, new_id
from test_cli_worker import CliWorker, CliWorkers, cli_env, drop_keys
from worker_support import dialogue, eventually

from redismem import Memory, metrics
from redismem.core.backend import backend_of
from redismem.core.keys import MAX_ID_BYTES
from redismem.errors import InvalidInput
from redismem.recall.index import index_pass
from redismem.workers import gauges

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "redismem-dashboard.json"
APPEND_ROUTE = "/v1/namespaces/{namespace}/users/{user_id}/sessions/{session_id}/messages"
SEARCH_ROUTE = "/v1/namespaces/{namespace}/users/{user_id}/search"

http_server = server_support.http_server
served = server_support.served
server_factory = server_support.server_factory

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape: (name, labels) -> value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def local(name: str, **labels: str) -> float:
    """A sample of this process's registry (0 when absent)."""
    found = prometheus_client.REGISTRY.get_sample_value(name, labels)
    return 0.0 if found is None else found


# -- names and the dashboard -------------------------------------------------------


def test_the_names_follow_prometheus_conventions_and_the_design() -> None:
    names = [spec.name for spec in metrics.METRICS]
    assert len(set(names)) == len(names)
    for spec in metrics.METRICS:
        assert re.fullmatch(r"redismem_[a-z]+(_[a-z]+)*", spec.name), spec.name
        if spec.kind == "counter":
            assert spec.name.endswith("_total"), spec.name
        elif spec.kind == "histogram":
            assert spec.name.endswith("_seconds") and spec.buckets, spec.name
            assert list(spec.buckets) == sorted(spec.buckets)
        else:
            assert not spec.name.endswith(("_total", "_seconds", "_bucket")), spec.name
        assert "le" not in spec.labels
    # docs/design: every name decided for issue 21 (the index's bytes are not
    # cheaply known, see the module docstring).
    assert set(names) == {
        "redismem_http_requests_total",
        "redismem_http_request_duration_seconds",
        "redismem_call_duration_seconds",
        "redismem_writes_total",
        "redismem_reads_total",
        "redismem_searches_total",
        "redismem_errors_total",
        "redismem_queue_depth",
        "redismem_job_duration_seconds",
        "redismem_jobs_total",
        "redismem_summarize_lag_seconds",
        "redismem_index_lag_seconds",
        "redismem_sessions_pending",
        "redismem_index_documents",
    }


def exposed_names() -> set[str]:
    """The sample names a scrape of an enabled process can carry."""
    registry = metrics.enable()
    text = prometheus_client.generate_latest(registry).decode()
    families = {
        match.group(1) for match in re.finditer(r"^# TYPE (redismem_\w+) ", text, re.MULTILINE)
    }
    names = set()
    for spec in metrics.METRICS:
        base = spec.name.removesuffix("_total")
        assert base in families or spec.name in families, spec.name
        if spec.kind == "histogram":
            names |= {f"{spec.name}_bucket", f"{spec.name}_sum", f"{spec.name}_count"}
        else:
            names.add(spec.name)
    return names


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert panels
    queries = []
    for panel in panels:
        assert panel["targets"], panel["title"]
        queries += [target["expr"] for target in panel["targets"]]
    return queries


def test_every_metric_the_dashboard_queries_exists_and_each_is_shown() -> None:
    queries = dashboard_queries()
    queried = {name for query in queries for name in re.findall(r"\bredismem_\w+", query)}
    exposed = exposed_names()
    assert queried - exposed == set()
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) for name in queried}
    assert {spec.name for spec in metrics.METRICS} - shown == set()


def test_the_dashboard_is_grafana_json_on_a_chosen_prometheus() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] == "redismem"
    [variable] = board["templating"]["list"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(set(ids)) == len(ids)
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    for query in dashboard_queries():
        assert query.count("(") == query.count(")"), query
        # Route templates keep the label's cardinality low; no raw paths.
        assert "path" not in query, query


# -- the library ---------------------------------------------------------------------


async def test_library_calls_are_timed_counted_and_their_errors_counted_once() -> None:
    metrics.enable()
    before = {
        name: local(name)
        for name in ("redismem_writes_total", "redismem_reads_total", "redismem_searches_total")
    }
    calls = {
        op: local("redismem_call_duration_seconds_count", operation=op)
        for op in ("write", "read", "context", "search", "entries", "clear")
    }
    invalid = local("redismem_errors_total", type="InvalidInput")
    async with await Memory.connect("memory://metrics-library") as memory:
        await memory.write(dialogue(2), session_id="s", user_id="u")
        await memory.read(session_id="s", user_id="u")
        await memory.context(session_id="s", user_id="u")
        await memory.entries(session_id="s", user_id="u")
        await memory.search("favourite", user_id="u")
        with pytest.raises(InvalidInput) as raised:
            await memory.write([], session_id="s", user_id="u")
        metrics.count_error(raised.value)  # the server maps it too: still once
        await memory.clear(session_id="s", user_id="u")
    assert local("redismem_writes_total") == before["redismem_writes_total"] + 1
    assert local("redismem_reads_total") == before["redismem_reads_total"] + 3
    assert local("redismem_searches_total") == before["redismem_searches_total"] + 1
    after = {
        op: local("redismem_call_duration_seconds_count", operation=op) - calls[op] for op in calls
    }
    # The failed write is timed too, and not counted among the writes.
    assert after == {"write": 2, "read": 1, "context": 1, "search": 1, "entries": 1, "clear": 1}
    assert local("redismem_errors_total", type="InvalidInput") == invalid + 1


async def test_a_worker_pass_is_recorded_by_its_outcome_or_as_an_error() -> None:
    metrics.enable()

    class Outcome:
        status = "indexed"

    async def passing() -> Outcome:
        return Outcome()

    async def sweeping() -> dict[str, int]:
        return {"enqueued": 0}

    async def failing() -> None:
        raise InvalidInput("bad")

    indexed = local("redismem_jobs_total", job="index", outcome="indexed")
    swept = local("redismem_jobs_total", job="sweep", outcome="ok")
    errors = local("redismem_jobs_total", job="extract", outcome="error")
    assert (await metrics.timed_job("index", passing())).status == "indexed"
    assert await metrics.timed_job("sweep", sweeping()) == {"enqueued": 0}
    with pytest.raises(InvalidInput):
        await metrics.timed_job("extract", failing())
    metrics.job_done("session", "not pending", 0.01)
    assert local("redismem_jobs_total", job="index", outcome="indexed") == indexed + 1
    assert local("redismem_jobs_total", job="sweep", outcome="ok") == swept + 1
    assert local("redismem_jobs_total", job="extract", outcome="error") == errors + 1
    assert local("redismem_job_duration_seconds_count", job="index", outcome="indexed") >= 1
    assert local("redismem_jobs_total", job="session", outcome="not_pending") >= 1


@pytest.mark.processes
def test_without_prometheus_client_metrics_are_off_and_enabling_names_the_extra() -> None:
    script = """
import asyncio, sys
sys.modules["prometheus_client"] = None  # not installed
from redismem import Memory, metrics
from redismem.errors import MissingDependency

async def main():
    async with await Memory.connect("memory://off") as memory:
        await memory.write([{"role": "user", "content": "hi"}], session_id="s")
        assert len(await memory.read(session_id="s")) == 1
        await memory.search("hi")

asyncio.run(main())
assert not metrics.enabled()
metrics.count_error(ValueError("x"))
metrics.job_done("index", "idle", 0.1)
metrics.observe_lag("index", 1.0)
metrics.set_queue_depth("q", 1)
try:
    metrics.enable()
except MissingDependency as exc:
    print("missing:", exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "missing:" in done.stdout and "redismem[server]" in done.stdout, done.stdout

    worker = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['prometheus_client'] = None; "
            "from redismem.cli import main; main()",
            "worker",
            "--metrics-port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=cli_env("redis://127.0.0.1:1/0", "unused"),
    )
    assert worker.returncode == 1, worker.stderr
    assert "redismem[server]" in worker.stderr
    assert len(worker.stderr.strip().splitlines()) == 1, worker.stderr


@pytest.mark.processes
def test_a_taken_metrics_port_is_one_line_from_the_cli() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "redismem", "worker", "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=cli_env("redis://127.0.0.1:1/0", "unused"),
        )
    assert done.returncode == 2, done.stderr
    assert f"cannot serve metrics on port {port}" in done.stderr
    assert "--metrics-port" in done.stderr


# -- the server's middleware, in process ----------------------------------------------


def small_app() -> Any:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from starlette.applications import Starlette
    from starlette.routing import Route

    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: str) -> dict[str, str]:
        return {"id": item_id}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    @app.post("/refused/{name}")
    async def refused(name: str) -> None:  # pragma: no cover - refused before routing
        pass

    async def inner(request: Any) -> JSONResponse:
        return JSONResponse({"inner": request.path_params["part"]})

    app.mount("/sub", Starlette(routes=[Route("/inner/{part}", inner)]))

    class Refuse:
        """Refuses /refused/* with a 413 before routing (as BodyGuard does)."""

        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/refused/"):
                await JSONResponse({"error": "too large"}, status_code=413)(scope, receive, send)
                return
            await self.app(scope, receive, send)

    app.add_middleware(Refuse)
    app.add_middleware(metrics.RequestMetrics, routes=app.router.routes)
    app.add_route("/metrics", metrics.asgi_app(), methods=["GET"], include_in_schema=False)
    return app


async def test_requests_are_counted_by_route_template_method_and_status() -> None:
    metrics.enable()
    app = small_app()
    wanted = [
        ("/items/{item_id}", "GET", "200"),
        ("/boom", "GET", "500"),
        ("/sub/inner/{part}", "GET", "200"),
        ("/refused/{name}", "POST", "413"),
        (metrics.UNMATCHED, "GET", "404"),
        ("/metrics", "GET", "200"),
    ]
    before = [
        local("redismem_http_requests_total", route=r, method=m, status=s) for r, m, s in wanted
    ]
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for n in range(3):
            assert (await client.get(f"/items/{n}")).status_code == 200
        assert (await client.get("/boom")).status_code == 500
        assert (await client.get("/sub/inner/x")).json() == {"inner": "x"}
        assert (await client.post("/refused/big", content=b"{}")).status_code == 413
        assert (await client.get("/no/such/path")).status_code == 404
        scrape = await client.get("/metrics")
    assert scrape.status_code == 200
    assert "redismem_http_requests_total" in scrape.text
    after = [
        local("redismem_http_requests_total", route=r, method=m, status=s) for r, m, s in wanted
    ]
    assert [a - b for a, b in zip(after, before, strict=True)] == [3, 1, 1, 1, 1, 1]
    timed = local(
        "redismem_http_request_duration_seconds_count", route="/items/{item_id}", method="GET"
    )
    assert timed >= 3
    assert local("redismem_http_requests_total", route="/items/0", method="GET", status="200") == 0


# -- the workers' census ----------------------------------------------------------------


async def test_the_census_counts_pending_sessions_and_indexed_docs_in_bounded_steps(
    backend_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gauges, "REFRESH_S", 0.001)  # a lock period of 1 ms
    async with await Memory.connect(backend_url, namespace=namespace) as memory:
        for user in ("u1", "u2", "u3"):
            await memory.write(dialogue(3), session_id="s", user_id=user)
        await memory.write(dialogue(2), session_id="t", user_id="u1")
        backend = backend_of(memory)
        while (await index_pass(backend, user_id="u1", session_id="s")).status == "indexed":
            pass

        async def census() -> dict[str, int]:
            await asyncio.sleep(0.005)  # the last census's lock has expired
            return await gauges.census(backend, owner="test")

        assert await census() == {"pending": 4, "docs": 3}

        # One key examined per step and one step per period: the pass goes on
        # where the last one stopped, and publishes only once it has ended.
        monkeypatch.setattr(gauges, "SCAN_COUNT", 1)
        monkeypatch.setattr(gauges, "CENSUS_STEPS", 1)
        await memory.write(dialogue(1), session_id="s", user_id="u4")
        censuses = [await census()]
        while censuses[-1].get("pending") != 5 and len(censuses) < 500:
            censuses.append(await census())
        assert censuses[-1] == {"pending": 5, "docs": 3}
        assert len(censuses) > 2 and censuses[0] == {"pending": 4, "docs": 3}

        # Another worker in the same period reads the totals, advancing nothing.
        monkeypatch.setattr(gauges, "REFRESH_S", 60.0)
        await census()  # takes the lock for 60 s
        state = await memory.redis.hgetall(memory.layout.queue_key("census"))
        assert await gauges.census(backend, owner="b") == {"pending": 5, "docs": 3}
        assert await memory.redis.hgetall(memory.layout.queue_key("census")) == state


# -- a real worker, scraped over HTTP ------------------------------------------------------


@pytest.fixture
def cli_workers(tmp_path: Path) -> Iterator[CliWorkers]:
    workers = CliWorkers(tmp_path / "workers")
    try:
        yield workers
    finally:
        workers.close()


def scrape(port: int, worker: CliWorker) -> Samples:
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2.0)
            answer.raise_for_status()
            return parse(answer.text)
        except httpx.HTTPError as exc:
            if not worker.alive or time.monotonic() > deadline:
                log = worker.log()[-3000:]
                raise AssertionError(f"no metrics from the worker:\n{log}") from exc
            time.sleep(0.1)


async def test_a_worker_serves_its_jobs_lag_and_queue_metrics(
    redis_url: str, namespace: str, cli_workers: CliWorkers
) -> None:
    port = free_port()
    # No sweep re-enqueues the deferred session during the test.
    env = cli_env(redis_url, namespace, REDISMEM_METRICS_PORT=str(port), REDISMEM_SWEEP_GRACE="600")
    queue = env["REDISMEM_QUEUE_NAME"]
    worker = cli_workers.start(env)
    options: dict[str, Any] = dict(
        namespace=namespace, keep_recent=2, summarize_batch=2, queue_name=queue
    )
    try:
        scrape(port, worker)  # up
        async with (
            await Memory.connect(redis_url, summarize_delay=0.1, **options) as prompt,
            await Memory.connect(redis_url, summarize_delay=120, **options) as later,
        ):
            await prompt.write(dialogue(6), session_id="now", user_id="u")
            # Its job waits 2 minutes on the queue; its session stays pending.
            await later.write(dialogue(1), session_id="later", user_id="u")

            async def summarized() -> bool:
                return await prompt.summary(session_id="now", user_id="u") is not None

            await eventually(summarized, within=30, what="a summary", describe=cli_workers.logs)

        seen: dict[str, Samples] = {}

        async def moved() -> bool:
            samples = seen["last"] = scrape(port, worker)
            return (
                value(samples, "redismem_jobs_total", job="session", outcome="ok") >= 1
                and value(samples, "redismem_index_lag_seconds_count") >= 1
                and value(samples, "redismem_queue_depth", queue=queue) >= 1
                and value(samples, "redismem_sessions_pending", namespace=namespace) >= 1
                and value(samples, "redismem_index_documents", namespace=namespace) >= 6
            )

        await eventually(moved, within=30, what="the worker's series", describe=lambda: str(seen))
        samples = seen["last"]
        assert value(samples, "redismem_jobs_total", job="index", outcome="indexed") >= 1
        assert value(samples, "redismem_jobs_total", job="index", outcome="idle") >= 1
        assert value(samples, "redismem_jobs_total", job="summarize", outcome="committed") >= 1
        assert value(samples, "redismem_jobs_total", job="sweep", outcome="ok") >= 1
        count = value(
            samples, "redismem_job_duration_seconds_count", job="summarize", outcome="committed"
        )
        assert count >= 1
        assert value(samples, "redismem_summarize_lag_seconds_count") >= 1
        # Lag from the write to the commit: the job's 0.1 s defer and its run.
        lag = value(samples, "redismem_summarize_lag_seconds_sum") / value(
            samples, "redismem_summarize_lag_seconds_count"
        )
        assert 0.05 < lag < 30
        assert value(samples, "redismem_index_documents", namespace=namespace) == 6
        assert value(samples, "redismem_sessions_pending", namespace=namespace) == 1
        assert not any(
            name == "redismem_jobs_total" and dict(labels).get("outcome") == "error"
            for name, labels in samples
        )
    finally:
        cli_workers.close()
        drop_keys(redis_url, namespace)


# -- the server's /metrics ---------------------------------------------------------------


@pytest.mark.processes
def test_the_server_serves_request_call_and_error_metrics(served: RunningServer) -> None:
    user, session = new_id(), new_id("s")
    metrics_url = f"{served.base_url}/metrics"
    before = parse(httpx.get(metrics_url, timeout=10).text)
    with served.client(role="write") as api:
        for n in range(2):
            answer = api.post(
                f"/users/{user}/sessions/{session}/messages",
                json={"messages": [{"role": "user", "content": f"hello {n}"}]},
            )
            assert answer.status_code == 201, answer.text
        assert api.get(f"/users/{user}/sessions/{session}/messages").status_code == 200
        assert api.post(f"/users/{user}/search", json={"query": "hello"}).status_code == 200
        empty = api.post(f"/users/{user}/sessions/{session}/messages", json={"messages": []})
        assert empty.status_code == 422, empty.text  # the request's validation
        too_long = "x" * (MAX_ID_BYTES + 1)
        invalid = api.get(f"/users/{user}/sessions/{too_long}/messages")
        assert invalid.status_code == 422, invalid.text  # the library's InvalidInput
        assert invalid.json()["error"]["type"] == "InvalidInput"
    assert httpx.get(f"{served.api()}/users/{user}/sessions/{session}/messages").status_code == 401
    assert httpx.get(f"{served.base_url}/no/such/thing").status_code == 404
    answer = httpx.get(metrics_url, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    after = parse(answer.text)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    messages = APPEND_ROUTE
    assert delta("redismem_http_requests_total", route=messages, method="POST", status="201") == 2
    assert delta("redismem_http_requests_total", route=messages, method="POST", status="422") == 1
    assert delta("redismem_http_requests_total", route=messages, method="GET", status="200") == 1
    assert delta("redismem_http_requests_total", route=messages, method="GET", status="422") == 1
    assert delta("redismem_http_requests_total", route=messages, method="GET", status="401") == 1
    assert delta("redismem_http_requests_total", route=SEARCH_ROUTE, method="POST", status="200")
    assert delta("redismem_http_requests_total", route="unmatched", method="GET", status="404")
    assert delta("redismem_http_request_duration_seconds_count", route=messages, method="POST") == 3
    assert delta("redismem_call_duration_seconds_count", operation="write") == 2
    assert delta("redismem_call_duration_seconds_count", operation="read") == 2
    assert delta("redismem_call_duration_seconds_count", operation="search") == 1
    assert delta("redismem_writes_total") == 2
    assert delta("redismem_reads_total") == 1
    assert delta("redismem_searches_total") == 1
    # Each error once, though the library raised it and the server mapped it.
    assert delta("redismem_errors_total", type="InvalidInput") == 1
    assert delta("redismem_errors_total", type="RequestValidationError") == 1
    assert delta("redismem_errors_total", type="Unauthorized") == 1
    # No raw path (user or session id) in any label.
    assert user not in answer.text and session not in answer.text


@pytest.mark.processes
def test_with_workers_and_a_multiprocess_dir_metrics_add_up_every_process(
    server_factory: Any, tmp_path: Path
) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    server = server_factory(
        extra_args=("--workers", "2"), env={"PROMETHEUS_MULTIPROC_DIR": str(directory)}
    )
    before = parse(httpx.get(f"{server.base_url}/metrics", timeout=10).text)
    probes = 20
    for _ in range(probes):  # a new connection each: both processes answer some
        assert httpx.get(f"{server.base_url}/healthz", timeout=10).status_code == 200
    pids = {path.name.rpartition("_")[2] for path in directory.glob("*.db")}
    assert len(pids) >= 2, sorted(path.name for path in directory.iterdir())
    for _ in range(4):  # whichever process answers the scrape
        after = parse(httpx.get(f"{server.base_url}/metrics", timeout=10).text)
        labels = {"route": "/healthz", "method": "GET", "status": "200"}
        done = value(after, "redismem_http_requests_total", **labels) - value(
            before, "redismem_http_requests_total", **labels
        )
        assert done == probes


@pytest.mark.processes
def test_with_workers_and_no_multiprocess_dir_serve_makes_a_private_one_removed_at_exit(
    server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    server = server_factory(extra_args=("--workers", "2"))
    assert "PROMETHEUS_MULTIPROC_DIR" not in server.env
    found = re.search(r"PROMETHEUS_MULTIPROC_DIR=(\S+)", server.log())
    assert found, server.log()
    directory = Path(found.group(1))
    assert directory.is_dir() and (directory.stat().st_mode & 0o777) == 0o700
    before = parse(httpx.get(f"{server.base_url}/metrics", timeout=10).text)
    probes = 20
    for _ in range(probes):  # a new connection each: both processes answer some
        assert httpx.get(f"{server.base_url}/healthz", timeout=10).status_code == 200
    pids = {path.name.rpartition("_")[2] for path in directory.glob("*.db")}
    assert len(pids) >= 2, sorted(path.name for path in directory.iterdir())
    labels = {"route": "/healthz", "method": "GET", "status": "200"}
    for _ in range(4):  # whichever process answers the scrape
        after = parse(httpx.get(f"{server.base_url}/metrics", timeout=10).text)
        done = value(after, "redismem_http_requests_total", **labels) - value(
            before, "redismem_http_requests_total", **labels
        )
        assert done == probes
    assert server.stop() == 0, server.log()[-4000:]
    assert not directory.exists()
    # One process: nothing to merge, no directory.
    single = server_factory()
    assert "PROMETHEUS_MULTIPROC_DIR" not in single.log()
    helped = subprocess.run(
        [sys.executable, "-m", "redismem", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "PROMETHEUS_MULTIPROC_DIR" in " ".join(helped.stdout.split())
