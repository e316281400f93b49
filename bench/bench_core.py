"""Core benchmark: ``redismem.Memory`` against bare redis-py on one real Redis.

The baseline is what an application would write without redismem, with the
same ``redis.asyncio`` client options (both clients come from
``redismem.connection.open_redis``):

* append: a pipeline (no MULTI) of ``RPUSH key json.dumps(message)`` and
  ``EXPIRE key 3600``, one message per write;
* read: ``LRANGE key -50 -1`` and ``json.loads`` of each element.

redismem does one script call per write (messages, entry record, counters,
tag index, TTLs) and per read (last 50 messages, their entry timestamps,
sliding TTL), and returns validated ``Message`` objects.

Measured, each over several rounds (medians reported; the order of the two
sides alternates between rounds):

* write and read-last-50 throughput with 16 concurrent asyncio tasks over 16
  sessions, and their ratio;
* sequential write and read-last-50 latency, p50 and p99;
* read-last-50 p50 latency for sessions of 100, 1,000 and 10,000 messages
  (reads interleaved across the sizes, so drift hits all alike);
* Redis memory per stored message: ``MEMORY USAGE`` summed over the
  session's keys, divided by its message count.

By default a throwaway ``redis-server`` is started on a free loopback port
(no persistence). With ``--url`` or ``$REDISMEM_BENCH_URL`` an existing
server is used instead; only keys under ``bench:`` and ``benchraw:`` are
written and removed.

    .venv/bin/python bench/bench_core.py           # full run, about a minute on 2 cores
    .venv/bin/python bench/bench_core.py --quick   # smoke check, a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from _util import conversation, median, percentile, throwaway_redis, turns

from redismem import Memory
from redismem.connection import open_redis

TTL = 3600
READ_LIMIT = 50
NAMESPACE = "bench"
RAW_PREFIX = "benchraw"


@dataclass(frozen=True)
class Plan:
    rounds: int
    tasks: int  # concurrent tasks, one session each
    ops_per_task: int  # per round, throughput runs
    seq_ops: int  # per round, latency runs
    read_prefill: int  # messages in each session of the read runs
    flat_sizes: tuple[int, ...]
    flat_reads: int  # reads of each size per round


FULL = Plan(
    rounds=7,
    tasks=16,
    ops_per_task=500,
    seq_ops=2000,
    read_prefill=200,
    flat_sizes=(100, 1_000, 10_000),
    flat_reads=1000,
)
QUICK = Plan(
    rounds=3,
    tasks=16,
    ops_per_task=40,
    seq_ops=200,
    read_prefill=100,
    flat_sizes=(100, 1_000, 10_000),
    flat_reads=100,
)


# -- the two sides -------------------------------------------------------------


class Ours:
    name = "redismem"

    def __init__(self, mem: Memory) -> None:
        self.mem = mem

    async def write(self, uid: str, sid: str, message: dict[str, Any]) -> None:
        await self.mem.write([message], session_id=sid, user_id=uid)

    async def read(self, uid: str, sid: str) -> int:
        return len(await self.mem.read(session_id=sid, user_id=uid, limit=READ_LIMIT))

    async def prefill(self, uid: str, sid: str, messages: list[dict[str, Any]]) -> None:
        # As agents write: one call per turn (a user message and the replies).
        for turn in turns(messages):
            await self.mem.write(turn, session_id=sid, user_id=uid)

    async def memory_usage(self, uid: str, sid: str) -> int:
        # Every key of the user (the user holds only this session): the
        # session's keys and the user's session index, counted honestly.
        redis = self.mem.redis
        total = 0
        async for key in redis.scan_iter(match=self.mem.layout.user_pattern(uid), count=100):
            total += await redis.memory_usage(key, samples=0) or 0
        return total

    async def cleanup(self) -> None:
        await self.mem.clear_all()


class Raw:
    name = "raw redis-py"

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    @staticmethod
    def key(uid: str, sid: str) -> str:
        return f"{RAW_PREFIX}:{uid}:{sid}"

    async def write(self, uid: str, sid: str, message: dict[str, Any]) -> None:
        key = self.key(uid, sid)
        pipe = self.redis.pipeline(transaction=False)
        pipe.rpush(key, json.dumps(message))
        pipe.expire(key, TTL)
        await pipe.execute()

    async def read(self, uid: str, sid: str) -> int:
        raw = await self.redis.lrange(self.key(uid, sid), -READ_LIMIT, -1)
        return len([json.loads(item) for item in raw])

    async def prefill(self, uid: str, sid: str, messages: list[dict[str, Any]]) -> None:
        key = self.key(uid, sid)
        for i in range(0, len(messages), 500):
            pipe = self.redis.pipeline(transaction=False)
            pipe.rpush(key, *[json.dumps(m) for m in messages[i : i + 500]])
            pipe.expire(key, TTL)
            await pipe.execute()

    async def memory_usage(self, uid: str, sid: str) -> int:
        return int(await self.redis.memory_usage(self.key(uid, sid), samples=0) or 0)

    async def cleanup(self) -> None:
        batch = [k async for k in self.redis.scan_iter(match=f"{RAW_PREFIX}:*", count=500)]
        for i in range(0, len(batch), 500):
            await self.redis.unlink(*batch[i : i + 500])


Side = Ours | Raw


# -- measurements --------------------------------------------------------------


async def throughput(tasks: int, ops: int, op: Callable[[int, int], Awaitable[Any]]) -> float:
    """Operations per second of ``tasks`` concurrent tasks doing ``ops`` each;
    ``op(task, i)`` is one operation."""

    async def run(task: int) -> None:
        for i in range(ops):
            await op(task, i)

    start = time.perf_counter()
    await asyncio.gather(*(run(t) for t in range(tasks)))
    return tasks * ops / (time.perf_counter() - start)


async def latencies(ops: int, op: Callable[[int], Awaitable[Any]]) -> list[float]:
    """Milliseconds of each of ``ops`` sequential operations."""
    out = []
    for i in range(ops):
        start = time.perf_counter()
        await op(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def ordered(sides: tuple[Side, Side], round_: int) -> tuple[Side, ...]:
    return sides if round_ % 2 == 0 else sides[::-1]


def user(task: int) -> str:
    return f"agent-{task % 4}"


async def bench(url: str, plan: Plan, log: Callable[[str], None]) -> dict[str, Any]:
    mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
    raw_client = open_redis(url)
    ours, raw = Ours(mem), Raw(raw_client)
    sides: tuple[Side, Side] = (ours, raw)
    res: dict[str, Any] = {}
    try:
        info = await raw_client.info("server")
        res["redis_version"] = info.get("redis_version", "?")
        await ours.cleanup()
        await raw.cleanup()

        streams = [conversation(seed=t, count=plan.ops_per_task) for t in range(plan.tasks)]
        seq_stream = conversation(seed=1000, count=plan.seq_ops)

        # Warm up: scripts loaded, connection pools filled, code paths hot.
        for side in sides:
            await throughput(
                plan.tasks, 20, lambda t, i, s=side: s.write("warm", f"w{t}", streams[t][i])
            )
            await throughput(plan.tasks, 20, lambda t, i, s=side: s.read("warm", f"w{t}"))

        log("writes: concurrent throughput")
        w_tp: dict[str, list[float]] = {s.name: [] for s in sides}
        for r in range(plan.rounds):
            for side in ordered(sides, r):
                w_tp[side.name].append(
                    await throughput(
                        plan.tasks,
                        plan.ops_per_task,
                        lambda t, i, s=side, r=r: s.write(user(t), f"w{r}-{t}", streams[t][i]),
                    )
                )
        res["write_tp"] = {k: median(v) for k, v in w_tp.items()}

        log("writes: sequential latency")
        w_lat: dict[str, tuple[list[float], list[float]]] = {s.name: ([], []) for s in sides}
        for r in range(plan.rounds):
            for side in ordered(sides, r):
                samples = await latencies(
                    plan.seq_ops,
                    lambda i, s=side, r=r: s.write("solo", f"lw{r}", seq_stream[i]),
                )
                w_lat[side.name][0].append(percentile(samples, 50))
                w_lat[side.name][1].append(percentile(samples, 99))
        res["write_lat"] = {k: (median(a), median(b)) for k, (a, b) in w_lat.items()}

        log("reads: prefill")
        read_msgs = [conversation(seed=500 + t, count=plan.read_prefill) for t in range(plan.tasks)]
        for side in sides:
            await asyncio.gather(
                *(side.prefill(user(t), f"r{t}", read_msgs[t]) for t in range(plan.tasks))
            )
            got = await side.read(user(0), "r0")
            assert got >= READ_LIMIT - 3, f"{side.name} read {got} messages"

        log("reads: concurrent throughput")
        r_tp: dict[str, list[float]] = {s.name: [] for s in sides}
        for r in range(plan.rounds):
            for side in ordered(sides, r):
                r_tp[side.name].append(
                    await throughput(
                        plan.tasks, plan.ops_per_task, lambda t, i, s=side: s.read(user(t), f"r{t}")
                    )
                )
        res["read_tp"] = {k: median(v) for k, v in r_tp.items()}

        log("reads: sequential latency")
        r_lat: dict[str, tuple[list[float], list[float]]] = {s.name: ([], []) for s in sides}
        for r in range(plan.rounds):
            for side in ordered(sides, r):
                samples = await latencies(plan.seq_ops, lambda i, s=side: s.read(user(0), "r0"))
                r_lat[side.name][0].append(percentile(samples, 50))
                r_lat[side.name][1].append(percentile(samples, 99))
        res["read_lat"] = {k: (median(a), median(b)) for k, (a, b) in r_lat.items()}

        log(f"reads by session size: prefill {', '.join(f'{n:,}' for n in plan.flat_sizes)}")
        for side in sides:
            await asyncio.gather(
                *(
                    side.prefill(f"size-{n}", "s", conversation(seed=2000 + n, count=n))
                    for n in plan.flat_sizes
                )
            )

        log("reads by session size: latency (interleaved)")
        flat: dict[str, dict[int, list[float]]] = {
            s.name: {n: [] for n in plan.flat_sizes} for s in sides
        }
        for r in range(plan.rounds):
            for side in ordered(sides, r):
                samples: dict[int, list[float]] = {n: [] for n in plan.flat_sizes}
                for _ in range(plan.flat_reads):
                    for n in plan.flat_sizes:
                        start = time.perf_counter()
                        await side.read(f"size-{n}", "s")
                        samples[n].append((time.perf_counter() - start) * 1000)
                for n in plan.flat_sizes:
                    flat[side.name][n].append(percentile(samples[n], 50))
        res["flat"] = {k: {n: median(v) for n, v in by.items()} for k, by in flat.items()}

        log("memory per message")
        res["mem"] = {
            side.name: {n: await side.memory_usage(f"size-{n}", "s") / n for n in plan.flat_sizes}
            for side in sides
        }
    finally:
        try:
            await ours.cleanup()
            await raw.cleanup()
        finally:
            await mem.aclose()
            await raw_client.aclose()
    return res


# -- report --------------------------------------------------------------------


def report(res: dict[str, Any], plan: Plan, where: str) -> tuple[str, bool]:
    us, them = Ours.name, Raw.name
    lines = [
        f"redismem core benchmark: Redis {res['redis_version']} ({where}), "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs",
        f"medians of {plan.rounds} rounds; concurrency {plan.tasks} tasks over {plan.tasks} "
        f"sessions; messages of 100-600 chars, ~1 in 10 turns a tool call",
        "",
    ]
    header = f"{'':50}{'redismem':>16}{'raw redis-py':>16}{'ours/raw':>10}  goal"
    lines += [header, "-" * (len(header) + 16)]
    all_pass = True

    def verdict(ok: bool) -> str:
        nonlocal all_pass
        all_pass &= ok
        return "PASS" if ok else "MISS"

    def row(label: str, a: str, b: str, ratio: str = "", goal: str = "") -> None:
        lines.append(f"{label:50}{a:>16}{b:>16}{ratio:>10}  {goal}".rstrip())

    wr = res["write_tp"][us] / res["write_tp"][them]
    row(
        f"write throughput, {plan.tasks} tasks (ops/s)",
        f"{res['write_tp'][us]:,.0f}",
        f"{res['write_tp'][them]:,.0f}",
        f"{wr:.2f}x",
        f">= 0.60x  {verdict(wr >= 0.6)}",
    )
    rr = res["read_tp"][us] / res["read_tp"][them]
    row(
        f"read-last-{READ_LIMIT} throughput, {plan.tasks} tasks (ops/s)",
        f"{res['read_tp'][us]:,.0f}",
        f"{res['read_tp'][them]:,.0f}",
        f"{rr:.2f}x",
        f">= 0.70x  {verdict(rr >= 0.7)}",
    )
    for label, key in (("write", "write_lat"), (f"read-last-{READ_LIMIT}", "read_lat")):
        (a50, a99), (b50, b99) = res[key][us], res[key][them]
        row(
            f"{label} latency, sequential, p50 / p99 (ms)",
            f"{a50:.3f} / {a99:.3f}",
            f"{b50:.3f} / {b99:.3f}",
            f"{a50 / b50:.2f}x",
        )
    sizes = plan.flat_sizes
    for n in sizes:
        a, b = res["flat"][us][n], res["flat"][them][n]
        row(f"read-last-{READ_LIMIT} p50, session of {n:,} msgs (ms)", f"{a:.3f}", f"{b:.3f}")
    fa = res["flat"][us][sizes[-1]] / res["flat"][us][sizes[0]]
    fb = res["flat"][them][sizes[-1]] / res["flat"][them][sizes[0]]
    row(
        f"  flatness: p50 {sizes[-1]:,} / p50 {sizes[0]:,}",
        f"{fa:.2f}",
        f"{fb:.2f}",
        "",
        f"<= 1.20   {verdict(fa <= 1.2)}",
    )
    for n in sizes[1:]:
        a, b = res["mem"][us][n], res["mem"][them][n]
        goal = f"<= 1.00x  {verdict(a <= b)}" if n == sizes[-1] else ""
        row(
            f"Redis memory per message, {n:,} msgs (bytes)",
            f"{a:,.0f}",
            f"{b:,.0f}",
            f"{a / b:.2f}x",
            goal,
        )
    lines.append("")
    lines.append("all goals met" if all_pass else "some goals MISSED")
    return "\n".join(lines), all_pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("REDISMEM_BENCH_URL"),
        help="use this Redis instead of a throwaway redis-server (default: $REDISMEM_BENCH_URL)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = replace(plan, rounds=args.rounds)

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.url:
        res = asyncio.run(bench(args.url, plan, log))
        where = "given by --url"
    else:
        with throwaway_redis() as url:
            log(f"started throwaway redis-server at {url}")
            res = asyncio.run(bench(url, plan, log))
        where = "throwaway redis-server on loopback"
    text, _ = report(res, plan, where)
    print(text)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
