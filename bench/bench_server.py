"""Server benchmark: ``redismem serve`` over HTTP (and MCP over stdio) against the library.

The baseline is the same work done with the library in one process, which is
what a Python agent would do without the server: ``Memory.write`` and
``Memory.search`` on a ``Memory`` of its own. Measured in one run, on one
machine, with a throwaway ``redis-server`` (or ``--url``):

1. Appends: 16 concurrent clients each appending one message per request to
   its own session. Over HTTP: 16 ``httpx.AsyncClient`` (keep-alive, one
   connection each) posting to ``redismem serve`` (one process, an API key,
   rate limit off); directly: 16 tasks calling ``Memory.write``. Throughput
   of each, their ratio, and the HTTP request latency p50/p99 (client side,
   so it includes httpx). Rounds alternate the order of the sides; medians.
   Then the latency of appends sent one at a time by one client, which wait
   for no other request.
2. Search at 10,000 indexed messages of one user (indexed by a real
   ``redismem worker``): p50 of ``Memory.search`` against p50 of
   ``POST .../search`` over HTTP, sequential, the same queries.
3. MCP over stdio: p50 of the ``search_conversations`` tool called with the SDK's
   client on ``redismem mcp`` (skipped with a note when the MCP server or the
   ``mcp`` package is missing).

It also reads the CPU time the server process and the benchmark's own
process (the httpx clients) spend per append, and from the server's the
appends one server process could take per core when its clients run
elsewhere, as in a fleet.

Goals (issue 21): appends over HTTP >= 0.5x the library's, p50 <= 2 ms and
p99 <= 20 ms; HTTP search p50 <= library p50 + 1 ms; MCP search p50 <= 10 ms.
The client (httpx), the server and Redis share the machine's cores: on two
cores the HTTP side pays for the client's own CPU too.

    .venv/bin/python bench/bench_server.py           # full run, ~2 minutes
    .venv/bin/python bench/bench_server.py --quick   # smoke check, ~30 s
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

from _util import Table, conversation, percentile, throwaway_redis

from redismem import Memory

try:
    import httpx
except ImportError:  # pragma: no cover - the bench needs the server extra
    raise SystemExit("bench_server needs httpx: pip install 'redismem[server]' httpx") from None

NAMESPACE = "benchsrv"
QUEUE = "redismem/queue-benchsrv"
CLIENTS = 16
QUERIES = (
    "flight booking price",
    "weather forecast city",
    "refund invoice customer",
    "database index cache",
    "deploy service cluster",
    "password email account",
    "timeout retry request",
    "hotel date confirmed",
)


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cli_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDISMEM_")}
    env.update(REDISMEM_URL=url, REDISMEM_NAMESPACE=NAMESPACE, REDISMEM_QUEUE_NAME=QUEUE)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextlib.contextmanager
def running_server(url: str, workdir: Path) -> Iterator[tuple[str, str, int]]:
    """``redismem serve`` on a free port; yields (base URL of the namespace,
    an admin key, the server's process id)."""
    from redismem.server.apikeys import create_key

    keys_file = workdir / "keys.jsonl"
    key, _ = create_key(keys_file, namespace=NAMESPACE, role="admin", name="bench")
    port = free_port()
    logfile = (workdir / "server.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "redismem",
            "serve",
            "--port",
            str(port),
            "--keys-file",
            str(keys_file),
            "--rate",
            "0",
        ],
        env=cli_env(url),
        stdout=logfile,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise SystemExit(f"redismem serve exited:\n{(workdir / 'server.log').read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("redismem serve did not answer within 30 s")
            time.sleep(0.05)
        yield f"{base}/v1/namespaces/{NAMESPACE}", key, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        logfile.close()


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- 1. appends --------------------------------------------------------------


async def library_appends(mem: Memory, run: str, per_client: int) -> float:
    message = conversation(1, 1)[0]

    async def client(n: int) -> None:
        for _ in range(per_client):
            await mem.write([message], session_id=f"lib-{run}-{n}", user_id=f"lib-{run}")

    start = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    return CLIENTS * per_client / (time.perf_counter() - start)


async def http_appends(api: str, key: str, run: str, per_client: int) -> tuple[float, list[float]]:
    message = conversation(1, 1)[0]
    body = {"messages": [message]}
    samples: list[float] = []
    clients = [
        httpx.AsyncClient(
            base_url=api,
            headers={"Authorization": f"Bearer {key}"},
            limits=httpx.Limits(max_connections=1),
            timeout=30,
        )
        for _ in range(CLIENTS)
    ]

    async def client(n: int) -> None:
        path = f"/users/http-{run}/sessions/http-{run}-{n}/messages"
        for _ in range(per_client):
            began = time.perf_counter()
            reply = await clients[n].post(path, json=body)
            samples.append((time.perf_counter() - began) * 1000)
            if reply.status_code != 201:
                raise SystemExit(f"append answered {reply.status_code}: {reply.text[:300]}")

    try:
        # One warm-up request per connection, not counted.
        await asyncio.gather(*(c.get("/users/warm/sessions") for c in clients))
        start = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(CLIENTS)))
        rate = CLIENTS * per_client / (time.perf_counter() - start)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    return rate, samples


async def sequential_http_appends(api: str, key: str, count: int) -> list[float]:
    """Milliseconds of each of ``count`` appends made one after another by
    one client: the latency of a request that waits for no other."""
    message = conversation(2, 1)[0]
    samples: list[float] = []
    async with httpx.AsyncClient(
        base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as client:
        path = f"/users/seq-{uuid.uuid4().hex[:6]}/sessions/one/messages"
        for i in range(count + 20):
            began = time.perf_counter()
            reply = await client.post(path, json={"messages": [message]})
            if i >= 20:  # warm-up
                samples.append((time.perf_counter() - began) * 1000)
            if reply.status_code != 201:
                raise SystemExit(f"append answered {reply.status_code}: {reply.text[:300]}")
    return samples


# -- 2. search ---------------------------------------------------------------


async def fill_and_index(mem: Memory, url: str, user: str, messages: int, workdir: Path) -> float:
    """Write ``messages`` messages of ``user`` (20 sessions, turns as agents
    write them), then index them with a ``redismem worker``; seconds until
    ``flush`` saw them all indexed."""
    convo = conversation(7, messages)
    per_session = max(1, messages // 20)
    semaphore = asyncio.Semaphore(32)

    async def write(session: int, batch: list[dict[str, Any]]) -> None:
        async with semaphore:
            await mem.write(batch, session_id=f"s{session}", user_id=user)

    jobs = []
    for session in range(20):
        chunk = convo[session * per_session : (session + 1) * per_session]
        jobs.extend(write(session, chunk[i : i + 4]) for i in range(0, len(chunk), 4))
    await asyncio.gather(*jobs)
    log(f"wrote {messages:,} messages; indexing them with a redismem worker")
    began = time.perf_counter()
    with (workdir / "worker.log").open("wb") as out:
        worker = subprocess.Popen(  # noqa: ASYNC220 - started once, before any timing
            [sys.executable, "-m", "redismem", "worker"],
            env=cli_env(url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            indexed = await mem.flush(user_id=user, timeout=600)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
    if not indexed:
        raise SystemExit(f"not indexed in 600 s:\n{(workdir / 'worker.log').read_text()[-3000:]}")
    return time.perf_counter() - began


async def search_latencies(
    mem: Memory, api: str, key: str, user: str, rounds: int
) -> tuple[list[float], list[float], int, int]:
    lib: list[float] = []
    web: list[float] = []
    lib_hits = web_hits = 0
    async with httpx.AsyncClient(
        base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as client:
        for i in range(rounds):
            query = QUERIES[i % len(QUERIES)]
            order = ("lib", "http") if i % 2 == 0 else ("http", "lib")
            for side in order:
                began = time.perf_counter()
                if side == "lib":
                    hits = await mem.search(query, user_id=user, limit=10)
                    lib.append((time.perf_counter() - began) * 1000)
                    lib_hits += len(hits)
                else:
                    reply = await client.post(
                        f"/users/{user}/search", json={"query": query, "limit": 10}
                    )
                    web.append((time.perf_counter() - began) * 1000)
                    reply.raise_for_status()
                    web_hits += len(reply.json()["hits"])
    return lib, web, lib_hits, web_hits


# -- 3. MCP over stdio ---------------------------------------------------------


async def mcp_search(url: str, user: str, calls: int) -> list[float] | str:
    """Milliseconds of each ``search_conversations`` call over stdio, or why not measured."""
    try:
        from mcp import ClientSession, StdioServerParameters, stdio_client
    except ImportError:
        return "the mcp package is not installed (pip install 'redismem[server]')"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "redismem", "mcp", "--user", user],
        env=cli_env(url),
    )
    samples: list[float] = []
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        if "search_conversations" not in tools:
            return f"redismem mcp has no search_conversations tool (it has {sorted(tools)})"
        for i in range(calls + 5):
            query = QUERIES[i % len(QUERIES)]
            began = time.perf_counter()
            result = await session.call_tool("search_conversations", {"query": query, "limit": 10})
            elapsed = (time.perf_counter() - began) * 1000
            if result.is_error:
                return f"search_conversations failed: {result.content}"
            if i >= 5:  # the first calls warm the server's connection and caches
                samples.append(elapsed)
    return samples


# -- the run -----------------------------------------------------------------


async def run(url: str, quick: bool) -> int:
    per_client = 100 if quick else 400
    rounds = 2 if quick else 5
    indexed = 2_000 if quick else 10_000
    searches = 40 if quick else 200
    workdir = Path(tempfile.mkdtemp(prefix="bench-server-"))
    table = Table(label_width=60)
    mem = await Memory.connect(url, namespace=NAMESPACE, queue_name=QUEUE)
    try:
        with running_server(url, workdir) as (api, key, server_pid):
            log(f"appends: {CLIENTS} clients x {per_client}, {rounds} rounds")
            lib_rates: list[float] = []
            http_rates: list[float] = []
            http_samples: list[float] = []
            server_ms: list[float] = []
            client_ms: list[float] = []
            for r in range(rounds):
                sides = ("lib", "http") if r % 2 == 0 else ("http", "lib")
                for side in sides:
                    tag = f"{r}-{uuid.uuid4().hex[:6]}"
                    if side == "lib":
                        lib_rates.append(await library_appends(mem, tag, per_client))
                    else:
                        server_cpu, client_cpu = cpu_seconds(server_pid), time.process_time()
                        rate, samples = await http_appends(api, key, tag, per_client)
                        requests = CLIENTS * per_client
                        server_ms.append((cpu_seconds(server_pid) - server_cpu) / requests * 1e3)
                        client_ms.append((time.process_time() - client_cpu) / requests * 1e3)
                        http_rates.append(rate)
                        http_samples.extend(samples)
                log(f"round {r + 1}: library {lib_rates[-1]:,.0f}/s, HTTP {http_rates[-1]:,.0f}/s")
            lib_rate, http_rate = median(lib_rates), median(http_rates)
            ratio = http_rate / lib_rate
            p50, p99 = percentile(http_samples, 50), percentile(http_samples, 99)
            table.header(f"appends, {CLIENTS} concurrent clients", "library", "HTTP", "HTTP/lib")
            table.row(
                "appends/s (median of rounds)",
                f"{lib_rate:,.0f}",
                f"{http_rate:,.0f}",
                f"{ratio:.2f}x",
                table.goal(">= 0.5x", ratio >= 0.5),
            )
            table.row("HTTP append p50 (ms)", "", f"{p50:.2f}", "", table.goal("<= 2", p50 <= 2))
            table.row("HTTP append p99 (ms)", "", f"{p99:.2f}", "", table.goal("<= 20", p99 <= 20))
            alone = await sequential_http_appends(api, key, 200 if quick else 1000)
            table.row(
                "HTTP append p50 / p99, one client alone (ms)",
                "",
                f"{percentile(alone, 50):.2f} / {percentile(alone, 99):.2f}",
            )
            server_cost, client_cost = median(server_ms), median(client_ms)
            table.row("server CPU per append (ms)", "", f"{server_cost:.3f}")
            table.row("client (httpx) CPU per append (ms)", "", f"{client_cost:.3f}")
            table.row(
                "appends/s one server process can take per core (1 / its CPU)",
                f"{lib_rate:,.0f}",
                f"{1000 / server_cost:,.0f}",
                f"{1000 / server_cost / lib_rate:.2f}x",
            )

            user = f"search-{uuid.uuid4().hex[:6]}"
            seconds = await fill_and_index(mem, url, user, indexed, workdir)
            log(f"indexed in {seconds:.1f} s; {searches} searches on each side")
            lib, web, lib_hits, web_hits = await search_latencies(mem, api, key, user, searches)
            lib50, web50 = percentile(lib, 50), percentile(web, 50)
            table.header(f"search, {indexed:,} indexed messages", "library", "HTTP", "HTTP-lib")
            table.row(
                "search p50 (ms)",
                f"{lib50:.2f}",
                f"{web50:.2f}",
                f"+{web50 - lib50:.2f} ms",
                table.goal("<= +1 ms", web50 <= lib50 + 1),
            )
            table.row("search p99 (ms)", f"{percentile(lib, 99):.2f}", f"{percentile(web, 99):.2f}")
            table.row("hits returned (both sides)", str(lib_hits), str(web_hits))
            if lib_hits != web_hits:
                table.note("hits differ between the library and HTTP: check the search route")
                table.all_pass = False

            log("MCP search over stdio")
            outcome = await mcp_search(url, user, searches)
            table.header("MCP search_conversations over stdio", "", "MCP", "")
            if isinstance(outcome, str):
                table.note(f"not measured: {outcome}")
            else:
                mcp50 = percentile(outcome, 50)
                table.row(
                    "search_conversations p50 (ms)",
                    "",
                    f"{mcp50:.2f}",
                    "",
                    table.goal("<= 10", mcp50 <= 10),
                )
                table.row("search_conversations p99 (ms)", "", f"{percentile(outcome, 99):.2f}")
        if quick:
            table.note("smoke run (--quick): smaller sizes than the goals are set for")
        print(table.text())
        return 0 if table.all_pass else 1
    finally:
        await mem.clear_all()
        await mem.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("REDISMEM_BENCH_URL"))
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    args = parser.parse_args(argv)
    if args.url:
        return asyncio.run(run(args.url, args.quick))
    with throwaway_redis() as url:
        return asyncio.run(run(url, args.quick))


if __name__ == "__main__":
    sys.exit(main())
