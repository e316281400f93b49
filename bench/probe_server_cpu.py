"""The server app's CPU per request, in one process (no sockets, no uvicorn).

An ``httpx.AsyncClient`` on ``httpx.ASGITransport`` sends requests one at a
time to ``create_app`` (an API key, rate limit off, metrics on, as
``redismem serve`` runs it) against a throwaway ``redis-server``, and
``time.process_time`` measures the process's CPU per request. The same loop
is timed for the library call alone (``Memory.write``, ``Memory.read``) and
for httpx against a bare ASGI app answering ``{}`` (the client's and the
transport's share); what is left is the app's own: routing, the key check,
validation, middlewares, serialization.

    .venv/bin/python bench/probe_server_cpu.py            # 3 rounds of 2,000 requests each
    .venv/bin/python bench/probe_server_cpu.py --profile  # and a cProfile of the appends
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from statistics import median
from typing import Any

import httpx
from _util import throwaway_redis

from redismem import Memory
from redismem.server import create_app
from redismem.server.apikeys import create_key
from redismem.server.settings import ServerSettings

NAMESPACE = "probesrv"
MESSAGE = {"role": "user", "content": "book the cheapest flight to Lisbon on Friday, please"}


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least an ASGI app can answer: httpx's and the transport's share."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def cpu_per_call(call: Callable[[int], Awaitable[Any]], count: int) -> float:
    """CPU milliseconds per ``call`` (after a warm-up)."""
    for n in range(50):
        await call(n)
    started = time.process_time()
    for n in range(count):
        await call(n)
    return (time.process_time() - started) / count * 1e3


async def run(url: str, count: int, rounds: int, profile: bool) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="probe-server-"))
    keys_file = workdir / "keys.jsonl"
    key, _ = create_key(keys_file, namespace=NAMESPACE, role="admin", name="probe")
    settings = ServerSettings(
        url=url, namespaces=(NAMESPACE,), keys_file=str(keys_file), rate=0, queue_name="probe-q"
    )
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {key}"}
    api = f"/v1/namespaces/{NAMESPACE}"
    run_id = uuid.uuid4().hex[:8]
    user = f"u-{run_id}"
    body = {"messages": [MESSAGE], "tags": {"topic": "travel"}}
    mem = await Memory.connect(url, namespace=NAMESPACE, queue_name="probe-q")
    transport = httpx.ASGITransport(app=app)
    results: dict[str, list[float]] = {}
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://probe") as client,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=bare_app), base_url="http://b") as bare,
    ):

        async def http_append(n: int) -> None:
            answer = await client.post(
                f"{api}/users/{user}/sessions/s{n % 50}/messages", json=body, headers=headers
            )
            assert answer.status_code == 201, answer.text

        async def lib_append(n: int) -> None:
            await mem.write([MESSAGE], session_id=f"l{n % 50}", user_id=user, tags=body["tags"])

        async def http_read(n: int) -> None:
            answer = await client.get(
                f"{api}/users/{user}/sessions/s{n % 50}/messages?limit=20", headers=headers
            )
            assert answer.status_code == 200, answer.text

        async def lib_read(n: int) -> None:
            await mem.read(session_id=f"s{n % 50}", user_id=user, limit=20)

        async def bare_post(n: int) -> None:
            await bare.post(f"{api}/users/{user}/sessions/s/messages", json=body, headers=headers)

        calls = {
            "append over ASGI": http_append,
            "Memory.write": lib_append,
            "read (20) over ASGI": http_read,
            "Memory.read (20)": lib_read,
            "httpx + transport alone": bare_post,
        }
        for _ in range(rounds):
            for name, call in calls.items():
                results.setdefault(name, []).append(await cpu_per_call(call, count))
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for n in range(count):
                await http_append(n)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
        await mem.clear_user(user)
    await mem.aclose()
    await app.state.namespaces.aclose()
    figures = {name: median(values) for name, values in results.items()}
    print(f"CPU ms per request, median of {rounds} rounds of {count}:")
    for name, value in figures.items():
        print(f"  {name:<26} {value:.3f}")
    floor = figures["httpx + transport alone"]
    for kind, http, lib in (
        ("append", "append over ASGI", "Memory.write"),
        ("read", "read (20) over ASGI", "Memory.read (20)"),
    ):
        print(f"  app's own, {kind:<15} {figures[http] - figures[lib] - floor:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a Redis to use (default: a throwaway redis-server)")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.url:
        asyncio.run(run(args.url, args.count, args.rounds, args.profile))
        return
    with throwaway_redis() as url:
        asyncio.run(run(url, args.count, args.rounds, args.profile))


if __name__ == "__main__":
    main()
