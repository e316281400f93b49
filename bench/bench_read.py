"""Reads of the last 50: ``Memory.read(limit=50)`` against the default raw client, and
against another checkout of redismem, side by side in one run.

Issue 22, goal 4: reads of the last 50 at least 0.9x a default-configured
``redis.asyncio.Redis.from_url(url)`` doing ``LRANGE key -50 -1`` and
``json.loads`` of each element. On a throwaway ``redis-server``
(``_util.throwaway_redis``: loopback, no persistence), ``--sessions``
sessions of ``--users`` users are written by ``Memory.write``, one message
per call (so each of the 50 messages read has its own entry record: the
most records a read of 50 can need), at least 100 messages each, and each
session's raw twin (``RPUSH`` of the same messages as JSON).

Sides, each run in its own child process (the same Python), in an order
rotated every round:

* ``raw``: ``LRANGE`` + ``json.loads`` on ``redis.asyncio.Redis.from_url(url)``;
* ``redismem``: ``Memory.read(session_id=..., user_id=..., limit=50)`` of this
  checkout (``Memory.connect(url, namespace=..., ttl=3600)``, defaults);
* ``redismem @ <path>`` with ``--baseline PATH``: the same, importing
  redismem from another checkout (e.g. ``/work/main``), to pair a change
  with what it changes in one run.

Per side and round: reads/s of 16 tasks (sessions taken in turn), then
sequential reads: p50 µs, the server's µs per read in commands (``INFO
commandstats``: ``MULTI`` + ``EXEC`` for redismem, whose ``EXEC`` includes
the script and both ``LRANGE``; ``LRANGE`` for raw) and its CPU µs per read
(``INFO cpu``, user + system: also the network and the event loop), both
measured by the child around its sequential reads. Reported: the median
over rounds of each, and of the per-round ratio to ``raw`` (the pairing
removes most of the machine's drift).

    .venv/bin/python bench/bench_read.py                          # about 2 minutes
    .venv/bin/python bench/bench_read.py --baseline /work/main    # with main paired
    .venv/bin/python bench/bench_read.py --quick                  # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import redis
from _util import conversation, percentile, rotated, throughput, throwaway_redis

NAMESPACE = "bread"
TTL = 3600
READ_LIMIT = 50
TASKS = 16
RAW = "raw"
OURS = "redismem"


def session_of(i: int, sessions: int, users: int) -> tuple[str, str]:
    return f"u{i % sessions % users}", f"s{i % sessions}"


async def fill(url: str, sessions: int, users: int, per: int) -> None:
    from redismem import Memory

    messages = conversation(23, 1000)
    client = redis.Redis.from_url(url)
    client.flushall()
    mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
    for s in range(sessions):
        uid, sid = session_of(s, sessions, users)
        chosen = [messages[(s + j) % len(messages)] for j in range(per)]
        for m in chosen:
            await mem.write([m], session_id=sid, user_id=uid)
        client.rpush(f"benchraw:s{s}", *[json.dumps(m) for m in chosen])
        client.expire(f"benchraw:s{s}", TTL)
    await mem.aclose()
    client.close()


# -- a child: one side, one measurement per line read from stdin ---------------


def server_usec(client: redis.Redis) -> tuple[float, float]:
    """The server's µs in commands run by clients (a ``MULTI`` block counts
    as its ``EXEC``, which includes what runs inside it; the ``INFO`` calls
    themselves left out), and its CPU µs (user + system: also the network
    and the event loop)."""
    stats = {k.removeprefix("cmdstat_"): v["usec"] for k, v in client.info("commandstats").items()}
    if "exec" in stats:
        commands = stats["exec"] + stats.get("multi", 0)
    else:
        commands = sum(v for k, v in stats.items() if k != "info")
    cpu = client.info("cpu")
    return float(commands), (cpu["used_cpu_user"] + cpu["used_cpu_sys"]) * 1e6


async def child(side: str, url: str, sessions: int, users: int, reads: int) -> None:
    client = redis.Redis.from_url(url)
    if side == RAW:
        import redis.asyncio as aioredis

        raw = aioredis.Redis.from_url(url)

        async def op(i: int) -> Any:
            key = f"benchraw:s{i % sessions}"
            return [json.loads(m) for m in await raw.lrange(key, -READ_LIMIT, -1)]

        close = raw.aclose
    else:
        from redismem import Memory

        mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)

        async def op(i: int) -> Any:
            uid, sid = session_of(i, sessions, users)
            return await mem.read(session_id=sid, user_id=uid, limit=READ_LIMIT)

        close = mem.aclose
    got = await op(0)
    assert len(got) == READ_LIMIT, (side, len(got))
    await throughput(TASKS, 20, lambda t, i: op(t * 20 + i))  # warm up
    print("ready", flush=True)
    ops = max(1, reads // TASKS)
    for _line in sys.stdin:
        rate = await throughput(TASKS, ops, lambda t, i: op(t * ops + i))
        lat = []
        client.config_resetstat()
        _, cpu_before = server_usec(client)
        for i in range(reads):
            t0 = time.perf_counter()
            await op(i)
            lat.append((time.perf_counter() - t0) * 1e6)
        commands, cpu_after = server_usec(client)
        result = {
            "rate": rate,
            "p50": percentile(lat, 50),
            "server": commands / reads,
            "cpu": (cpu_after - cpu_before) / reads,
        }
        print(json.dumps(result), flush=True)
    await close()
    client.close()


# -- the parent ----------------------------------------------------------------


class Side:
    def __init__(self, name: str, kind: str, tree: str, opts: argparse.Namespace, url: str):
        env = dict(os.environ, PYTHONPATH=tree)
        args = [sys.executable, __file__, "--child", kind, "--url", url]
        args += ["--sessions", str(opts.sessions), "--users", str(opts.users)]
        args += ["--reads", str(opts.reads)]
        self.name = name
        self.proc = subprocess.Popen(
            args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"{name}: the child did not start ({line!r})")

    def measure(self) -> dict[str, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        result: dict[str, float] = json.loads(self.proc.stdout.readline())
        return result

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, 2 rounds")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--per-session", type=int, default=100, help="messages per session")
    parser.add_argument("--reads", type=int, default=2_000, help="reads per measurement")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", help="another checkout of redismem to pair with this one")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        asyncio.run(child(opts.child, opts.url, opts.sessions, opts.users, opts.reads))
        return
    if opts.quick:
        opts.sessions, opts.per_session, opts.reads, opts.rounds = 16, 60, 200, 2
    here = str(Path(__file__).resolve().parent.parent)
    with throwaway_redis() as url:
        client = redis.Redis.from_url(url)
        print(
            f"read bench: Redis {client.info('server')['redis_version']} (throwaway, loopback), "
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"{opts.sessions} sessions of {opts.users} users, {opts.per_session} messages each "
            f"(one per write); per side and round: {opts.reads:,} reads by {TASKS} tasks, "
            f"then {opts.reads:,} sequential; medians of {opts.rounds} rounds"
        )
        asyncio.run(fill(url, opts.sessions, opts.users, opts.per_session))
        sides = [Side(RAW, RAW, here, opts, url), Side(OURS, OURS, here, opts, url)]
        if opts.baseline:
            sides.append(Side(f"redismem @ {opts.baseline}", OURS, opts.baseline, opts, url))
        results: dict[str, list[dict[str, float]]] = {s.name: [] for s in sides}
        started = time.perf_counter()
        for r in range(opts.rounds):
            for side in rotated(sides, r):
                results[side.name].append(side.measure())
        for side in sides:
            side.close()
        took = time.perf_counter() - started
        print(f"load average at the end {os.getloadavg()[0]:.2f}; {took:.0f} s of measuring")
        base = results[RAW]
        print(
            f"  {'side':34}{'reads/s':>9}{'vs raw':>8}{'p50 µs':>9}{'vs raw':>8}"
            f"{'server µs':>11}{'cpu µs':>8}  per-round reads/s ratios"
        )
        for name, rows in results.items():
            ratios = [row["rate"] / b["rate"] for row, b in zip(rows, base, strict=True)]
            lat = [row["p50"] / b["p50"] for row, b in zip(rows, base, strict=True)]
            print(
                f"  {name:34}{median(r['rate'] for r in rows):9,.0f}{median(ratios):8.2f}"
                f"{median(r['p50'] for r in rows):9.0f}{median(lat):8.2f}"
                f"{median(r['server'] for r in rows):11.1f}{median(r['cpu'] for r in rows):8.1f}  "
                + " ".join(f"{x:.2f}" for x in ratios)
            )


if __name__ == "__main__":
    main()
