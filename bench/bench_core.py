"""Core benchmark: ``redismem.Memory`` against a default raw redis-py client and the peers.

The baseline is what an application writes without redismem, on a
*default-configured* client, ``redis.asyncio.Redis.from_url(url)`` (no
timeouts, no retries, nothing of ours):

* append: a pipeline (no MULTI) of ``RPUSH key json.dumps(message)`` and
  ``EXPIRE key 3600``, one message per write;
* read: ``LRANGE key -50 -1`` and ``json.loads`` of each element.

redismem does one script call per write (messages, entry record, counters,
tag index, TTLs) and per read (last 50 messages, their entry timestamps,
sliding TTL), under its call policy (a time bound per attempt, retries), and
returns validated ``Message`` objects.

Measured in one run, each over several rounds (medians reported; the order
of the sides rotates between rounds):

1. 16 concurrent asyncio tasks over 16 sessions: write and read-last-50
   throughput of redismem and the raw client, and their ratio; sequential
   write and read-last-50 latency, p50 and p99; read-last-50 p50 latency for
   sessions of 100, 1,000 and 10,000 messages (flatness); Redis memory per
   stored message (``MEMORY USAGE`` summed over the session's keys).
2. The cost of client options, on the same raw pipeline and 16 tasks:
   the default client against one with ``socket_timeout=5`` (what redismem
   used to set) and against redismem's own client and call policy
   (``Memory.call``: ``asyncio.timeout`` per attempt, retries, error mapping).
3. Sequential, one task: 3,000 appends of one message to one session, then
   reads of the last 50 of those 3,000, for redismem, the raw asyncio
   pipeline, LangChain's ``RedisChatMessageHistory`` (langchain-community,
   sync redis-py) and LlamaIndex's ``RedisChatStore`` (sync API). A peer
   that is not installed is skipped with a note saying what to install.

By default a throwaway ``redis-server`` is started on a free loopback port
(no persistence). With ``--url`` or ``$REDISMEM_BENCH_URL`` an existing
server is used instead; only keys under ``bench:``, ``benchraw*:``,
``benchlangchain:`` and ``benchllama:`` are written and removed.

    .venv/bin/python bench/bench_core.py           # full run, a few minutes on 2 cores
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
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import redis
import redis.asyncio as aioredis
from _util import (
    Table,
    conversation,
    latencies,
    median,
    package_version,
    percentile,
    rotated,
    sequential_rate,
    throughput,
    throwaway_redis,
    turns,
    write_json,
)

from redismem import Memory

TTL = 3600
READ_LIMIT = 50
NAMESPACE = "bench"
SEQ_USER = "seq"


@dataclass(frozen=True)
class Plan:
    rounds: int
    tasks: int  # concurrent tasks, one session each
    ops_per_task: int  # per round, throughput runs
    seq_ops: int  # per round, latency runs
    read_prefill: int  # messages in each session of the read runs
    flat_sizes: tuple[int, ...]
    flat_reads: int  # reads of each size per round
    appends: int  # sequential section: appends to one session per side and round
    seq_reads: int  # sequential section: at most this many reads per side and round
    seq_read_seconds: float  # ... or reads for this long, whichever ends first
    length_sizes: tuple[int, ...]  # read latency by session length, every side
    length_reads: int  # at most this many reads of each size per side and round
    length_seconds: float  # ... or reads for this long (at least 3)
    smoke: bool = False  # too small to judge the goals by


FULL = Plan(
    rounds=7,
    tasks=16,
    ops_per_task=500,
    seq_ops=2000,
    read_prefill=200,
    flat_sizes=(100, 1_000, 10_000),
    flat_reads=1000,
    appends=3000,
    seq_reads=2000,
    seq_read_seconds=1.5,
    length_sizes=(10, 100, 1_000, 3_000, 10_000),
    length_reads=300,
    length_seconds=0.5,
)
QUICK = Plan(
    rounds=2,
    tasks=16,
    ops_per_task=40,
    seq_ops=200,
    read_prefill=100,
    flat_sizes=(100, 1_000),
    flat_reads=50,
    appends=300,
    seq_reads=100,
    seq_read_seconds=0.1,
    length_sizes=(10, 100, 1_000),
    length_reads=20,
    length_seconds=0.1,
    smoke=True,
)


# -- the sides -------------------------------------------------------------------


class Side(Protocol):
    """One way of storing a conversation: what every measurement drives."""

    name: str

    def native(self, message: dict[str, Any]) -> Any:
        """``message`` in the form this side's users hold (built before timing)."""
        ...

    async def prepare(self, uid: str, sid: str) -> None:
        """Anything a session needs before it is timed (e.g. a peer's object)."""
        ...

    async def write(self, uid: str, sid: str, message: Any) -> None: ...

    async def read(self, uid: str, sid: str) -> int:
        """Read the session's last ``READ_LIMIT`` messages; how many came back."""
        ...

    async def cleanup(self) -> None: ...

    async def aclose(self) -> None: ...


class Ours:
    name = "redismem"

    def __init__(self, mem: Memory) -> None:
        self.mem = mem

    def native(self, message: dict[str, Any]) -> Any:
        return message

    async def prepare(self, uid: str, sid: str) -> None:
        pass

    async def write(self, uid: str, sid: str, message: Any) -> None:
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
        client = self.mem.redis
        total = 0
        async for key in client.scan_iter(match=self.mem.layout.user_pattern(uid), count=100):
            total += await client.memory_usage(key, samples=0) or 0
        return total

    async def cleanup(self) -> None:
        await self.mem.clear_all()

    async def aclose(self) -> None:
        await self.mem.aclose()


Call = Callable[[Callable[[Any], Awaitable[Any]]], Awaitable[Any]]


class Raw:
    """The raw pipeline on a given redis-py asyncio client; with ``call``, each
    operation runs through it (``Memory.call``: redismem's call policy)."""

    def __init__(self, name: str, client: Any, prefix: str, call: Call | None = None) -> None:
        self.name = name
        self.redis = client
        self.prefix = prefix
        self.call = call

    def key(self, uid: str, sid: str) -> str:
        return f"{self.prefix}:{uid}:{sid}"

    def native(self, message: dict[str, Any]) -> Any:
        return message

    async def prepare(self, uid: str, sid: str) -> None:
        pass

    @staticmethod
    async def _append(client: Any, key: str, data: str) -> None:
        pipe = client.pipeline(transaction=False)
        pipe.rpush(key, data)
        pipe.expire(key, TTL)
        await pipe.execute()

    async def write(self, uid: str, sid: str, message: Any) -> None:
        key, data = self.key(uid, sid), json.dumps(message)
        if self.call is None:
            await self._append(self.redis, key, data)
        else:
            await self.call(lambda client: self._append(client, key, data))

    async def read(self, uid: str, sid: str) -> int:
        key = self.key(uid, sid)
        if self.call is None:
            raw = await self.redis.lrange(key, -READ_LIMIT, -1)
        else:
            raw = await self.call(lambda client: client.lrange(key, -READ_LIMIT, -1))
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
        batch = [k async for k in self.redis.scan_iter(match=f"{self.prefix}:*", count=500)]
        for i in range(0, len(batch), 500):
            await self.redis.unlink(*batch[i : i + 500])

    async def aclose(self) -> None:
        if self.call is None:  # under Memory.call the client is the Memory's
            await self.redis.aclose()


def delete_keys(client: redis.Redis, pattern: str) -> None:
    """Delete the keys matching ``pattern`` with a sync client."""
    batch = list(client.scan_iter(match=pattern, count=500))
    for i in range(0, len(batch), 500):
        client.unlink(*batch[i : i + 500])


class LangChainPeer:
    """``langchain_community``'s ``RedisChatMessageHistory``: a plain Redis list
    per session (``LPUSH`` of a JSON message, then ``EXPIRE`` when a ttl is set;
    reading loads the whole list). Sync redis-py, one client per history."""

    name = "LangChain"
    what = "langchain_community RedisChatMessageHistory"
    package = "langchain-community"
    prefix = "benchlangchain:"

    def __init__(self, url: str) -> None:
        with warnings.catch_warnings():  # the package announces its sunset on import
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.chat_message_histories import RedisChatMessageHistory
            from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        self.url = url
        self.history_cls = RedisChatMessageHistory
        self.human, self.ai, self.tool = HumanMessage, AIMessage, ToolMessage
        self.histories: dict[tuple[str, str], Any] = {}

    def native(self, message: dict[str, Any]) -> Any:
        content = message["content"]
        if message["role"] == "user":
            return self.human(content=content)
        if message["role"] == "tool":
            return self.tool(content=content, tool_call_id=message["tool_call_id"])
        calls = [
            {"name": c["name"], "args": json.loads(c["arguments"]), "id": c["id"]}
            for c in message.get("tool_calls", [])
        ]
        return self.ai(content=content, tool_calls=calls)

    async def prepare(self, uid: str, sid: str) -> None:
        history = self.history_cls(f"{uid}:{sid}", url=self.url, key_prefix=self.prefix, ttl=TTL)
        history.redis_client.ping()  # connect before the clock starts
        self.histories[uid, sid] = history

    async def write(self, uid: str, sid: str, message: Any) -> None:
        self.histories[uid, sid].add_message(message)

    async def read(self, uid: str, sid: str) -> int:
        return len(self.histories[uid, sid].messages[-READ_LIMIT:])

    async def cleanup(self) -> None:
        with redis.Redis.from_url(self.url) as client:
            delete_keys(client, f"{self.prefix}*")

    async def aclose(self) -> None:
        for history in self.histories.values():
            history.redis_client.close()
        self.histories.clear()


class LlamaIndexPeer:
    """LlamaIndex's ``RedisChatStore`` (sync API): a plain Redis list per key
    (``RPUSH`` of a JSON message, then ``EXPIRE`` when a ttl is set; reading
    loads and validates the whole list)."""

    name = "LlamaIndex"
    what = "llama_index RedisChatStore"
    package = "llama-index-storage-chat-store-redis"
    prefix = "benchllama:"

    def __init__(self, url: str) -> None:
        from llama_index.core.llms import ChatMessage, MessageRole
        from llama_index.storage.chat_store.redis import RedisChatStore

        self.message_cls, self.roles = ChatMessage, MessageRole
        # The clients it builds itself for a plain redis:// URL (Redis.from_url
        # and its asyncio twin, default options), passed in so we can close them.
        self.sync = redis.Redis.from_url(url)
        self.async_ = aioredis.Redis.from_url(url)
        self.store = RedisChatStore(redis_client=self.sync, aredis_client=self.async_, ttl=TTL)

    def key(self, uid: str, sid: str) -> str:
        return f"{self.prefix}{uid}:{sid}"

    def native(self, message: dict[str, Any]) -> Any:
        role = {"user": "USER", "assistant": "ASSISTANT", "tool": "TOOL"}[message["role"]]
        extra: dict[str, Any] = {}
        if message.get("tool_calls"):
            extra["tool_calls"] = message["tool_calls"]
        if message.get("tool_call_id"):
            extra["tool_call_id"] = message["tool_call_id"]
        return self.message_cls(
            role=self.roles[role], content=message["content"], additional_kwargs=extra
        )

    async def prepare(self, uid: str, sid: str) -> None:
        self.sync.ping()

    async def write(self, uid: str, sid: str, message: Any) -> None:
        self.store.add_message(self.key(uid, sid), message)

    async def read(self, uid: str, sid: str) -> int:
        return len(self.store.get_messages(self.key(uid, sid))[-READ_LIMIT:])

    async def cleanup(self) -> None:
        delete_keys(self.sync, f"{self.prefix}*")

    async def aclose(self) -> None:
        self.sync.close()
        await self.async_.aclose()


PEERS: tuple[type[LangChainPeer] | type[LlamaIndexPeer], ...] = (LangChainPeer, LlamaIndexPeer)


def load_peers(url: str, log: Callable[[str], None]) -> tuple[list[Side], list[str]]:
    """The peers that are installed, and a line for each one that is not."""
    found: list[Side] = []
    skipped: list[str] = []
    for peer in PEERS:
        try:
            found.append(peer(url))
        except ImportError as exc:
            log(f"{peer.name} ({peer.what}) skipped: {exc}; pip install {peer.package}")
            skipped.append(f"{peer.name} ({peer.what}) skipped: pip install {peer.package}")
    return found, skipped


# -- measurements ------------------------------------------------------------------


def user(task: int) -> str:
    return f"agent-{task % 4}"


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: median(values) for name, values in samples.items()}


async def warm_up(sides: list[Side], plan: Plan, streams: list[list[dict[str, Any]]]) -> None:
    """Scripts loaded, connection pools filled, code paths hot."""
    for side in sides:

        async def write(t: int, i: int, side: Side = side) -> None:
            await side.write("warm", f"w{t}", streams[t][i])

        async def read(t: int, i: int, side: Side = side) -> None:
            await side.read("warm", f"w{t}")

        await throughput(plan.tasks, 20, write)
        await throughput(plan.tasks, 20, read)


async def write_throughput(
    sides: list[Side], plan: Plan, streams: list[list[dict[str, Any]]]
) -> dict[str, float]:
    """Writes/s of ``plan.tasks`` concurrent tasks, each on its own new session."""
    samples: dict[str, list[float]] = {s.name: [] for s in sides}
    for r in range(plan.rounds):
        for side in rotated(sides, r):

            async def op(t: int, i: int, side: Side = side, r: int = r) -> None:
                await side.write(user(t), f"w{r}-{t}", streams[t][i])

            samples[side.name].append(await throughput(plan.tasks, plan.ops_per_task, op))
    return medians(samples)


async def read_throughput(sides: list[Any], plan: Plan) -> dict[str, float]:
    """Reads of the last 50/s of ``plan.tasks`` concurrent tasks, each on its
    own session of ``plan.read_prefill`` messages."""
    prefills = [conversation(seed=500 + t, count=plan.read_prefill) for t in range(plan.tasks)]
    for side in sides:
        await asyncio.gather(
            *(side.prefill(user(t), f"r{t}", prefills[t]) for t in range(plan.tasks))
        )
        got = await side.read(user(0), "r0")
        assert got >= READ_LIMIT - 3, f"{side.name} read {got} messages"
    samples: dict[str, list[float]] = {s.name: [] for s in sides}
    for r in range(plan.rounds):
        for side in rotated(sides, r):

            async def op(t: int, i: int, side: Side = side) -> None:
                await side.read(user(t), f"r{t}")

            samples[side.name].append(await throughput(plan.tasks, plan.ops_per_task, op))
    return medians(samples)


async def write_latency(
    sides: list[Side], plan: Plan, stream: list[dict[str, Any]]
) -> dict[str, tuple[float, float]]:
    """p50 and p99 milliseconds of one write at a time."""
    p50: dict[str, list[float]] = {s.name: [] for s in sides}
    p99: dict[str, list[float]] = {s.name: [] for s in sides}
    for r in range(plan.rounds):
        for side in rotated(sides, r):

            async def op(i: int, side: Side = side, r: int = r) -> None:
                await side.write("solo", f"lw{r}", stream[i])

            samples = await latencies(plan.seq_ops, op)
            p50[side.name].append(percentile(samples, 50))
            p99[side.name].append(percentile(samples, 99))
    return {name: (median(p50[name]), median(p99[name])) for name in p50}


async def read_latency(sides: list[Side], plan: Plan) -> dict[str, tuple[float, float]]:
    """p50 and p99 milliseconds of one read of the last 50 at a time (on the
    sessions ``read_throughput`` filled)."""
    p50: dict[str, list[float]] = {s.name: [] for s in sides}
    p99: dict[str, list[float]] = {s.name: [] for s in sides}
    for r in range(plan.rounds):
        for side in rotated(sides, r):

            async def op(i: int, side: Side = side) -> None:
                await side.read(user(0), "r0")

            samples = await latencies(plan.seq_ops, op)
            p50[side.name].append(percentile(samples, 50))
            p99[side.name].append(percentile(samples, 99))
    return {name: (median(p50[name]), median(p99[name])) for name in p50}


async def flatness(sides: list[Any], plan: Plan) -> dict[str, dict[int, float]]:
    """p50 milliseconds of a read of the last 50 from sessions of each size in
    ``plan.flat_sizes``, reads interleaved across the sizes so drift hits all alike."""
    for side in sides:
        await asyncio.gather(
            *(
                side.prefill(f"size-{n}", "s", conversation(seed=2000 + n, count=n))
                for n in plan.flat_sizes
            )
        )
    p50: dict[str, dict[int, list[float]]] = {
        s.name: {n: [] for n in plan.flat_sizes} for s in sides
    }
    for r in range(plan.rounds):
        for side in rotated(sides, r):
            samples: dict[int, list[float]] = {n: [] for n in plan.flat_sizes}
            for _ in range(plan.flat_reads):
                for n in plan.flat_sizes:
                    start = time.perf_counter()
                    await side.read(f"size-{n}", "s")
                    samples[n].append((time.perf_counter() - start) * 1000)
            for n in plan.flat_sizes:
                p50[side.name][n].append(percentile(samples[n], 50))
    return {name: {n: median(v) for n, v in by.items()} for name, by in p50.items()}


async def memory_per_message(sides: list[Any], plan: Plan) -> dict[str, dict[int, float]]:
    """Redis bytes per stored message of the sessions ``flatness`` filled."""
    return {
        side.name: {n: await side.memory_usage(f"size-{n}", "s") / n for n in plan.flat_sizes}
        for side in sides
    }


async def read_by_length(sides: list[Side], plan: Plan) -> dict[str, dict[int, float]]:
    """p50 milliseconds of a read of the last 50 from one session of each size in
    ``plan.length_sizes``, every side, peers included (they load the whole session).
    Sessions written one message per call (the peers' own append, untimed)."""
    for side in sides:
        for n in plan.length_sizes:
            uid = f"len-{n}"
            await side.prepare(uid, "s")
            messages = conversation(seed=4000 + n, count=n)
            if isinstance(side, Ours | Raw):
                await side.prefill(uid, "s", messages)
            else:
                for m in messages:
                    await side.write(uid, "s", side.native(m))
            got = await side.read(uid, "s")
            assert got == min(n, READ_LIMIT), f"{side.name} read {got} of {n} messages"
    p50: dict[str, dict[int, list[float]]] = {
        s.name: {n: [] for n in plan.length_sizes} for s in sides
    }
    for r in range(plan.rounds):
        for side in rotated(sides, r):
            for n in plan.length_sizes:
                samples: list[float] = []
                until = time.perf_counter() + plan.length_seconds
                while len(samples) < plan.length_reads and (
                    len(samples) < 3 or time.perf_counter() < until
                ):
                    start = time.perf_counter()
                    await side.read(f"len-{n}", "s")
                    samples.append((time.perf_counter() - start) * 1000)
                p50[side.name][n].append(percentile(samples, 50))
    return {name: {n: median(v) for n, v in by.items()} for name, by in p50.items()}


async def sequential_round(
    side: Side, sid: str, batch: list[Any], plan: Plan
) -> tuple[float, float]:
    """One side's phase of a round: appends/s of ``batch`` to a new session
    one at a time, then reads/s of its last 50."""
    await side.prepare(SEQ_USER, sid)

    async def append(i: int) -> None:
        await side.write(SEQ_USER, sid, batch[i])

    async def read(i: int) -> None:
        await side.read(SEQ_USER, sid)

    appends = await sequential_rate(append, len(batch))
    got = await side.read(SEQ_USER, sid)
    assert got >= READ_LIMIT - 3, f"{side.name} read {got} messages"
    reads = await sequential_rate(read, plan.seq_reads, plan.seq_read_seconds)
    return appends, reads


async def sequential(
    sides: list[Side], plan: Plan, messages: list[dict[str, Any]]
) -> dict[str, tuple[float, float]]:
    """Appends/s and reads-of-the-last-50/s of one task on one session."""
    batches = {side.name: [side.native(m) for m in messages] for side in sides}
    for side in sides:  # warm up
        await sequential_round(side, "warm", batches[side.name][:50], replace(plan, seq_reads=5))
    appends: dict[str, list[float]] = {s.name: [] for s in sides}
    reads: dict[str, list[float]] = {s.name: [] for s in sides}
    for r in range(plan.rounds):
        for side in rotated(sides, r):
            a, b = await sequential_round(side, f"seq{r}", batches[side.name], plan)
            appends[side.name].append(a)
            reads[side.name].append(b)
    return {name: (median(appends[name]), median(reads[name])) for name in appends}


# -- the run -------------------------------------------------------------------------

OURS = "redismem"
RAW = "raw redis-py"
RAW_SOCKET_TIMEOUT = "raw, socket_timeout=5"
RAW_CALL = "raw, under Memory.call"
RAW_SEQ = "raw pipeline"


@dataclass
class Results:
    redis_version: str = "?"
    write_tp: dict[str, float] = field(default_factory=dict)
    read_tp: dict[str, float] = field(default_factory=dict)
    write_lat: dict[str, tuple[float, float]] = field(default_factory=dict)
    read_lat: dict[str, tuple[float, float]] = field(default_factory=dict)
    flat: dict[str, dict[int, float]] = field(default_factory=dict)
    mem: dict[str, dict[int, float]] = field(default_factory=dict)
    seq: dict[str, tuple[float, float]] = field(default_factory=dict)
    by_length: dict[str, dict[int, float]] = field(default_factory=dict)
    peers: list[str] = field(default_factory=list)  # names of the peers measured
    peer_what: list[str] = field(default_factory=list)  # what each of them is
    skipped: list[str] = field(default_factory=list)  # a line per peer not installed


async def bench(url: str, plan: Plan, log: Callable[[str], None]) -> Results:
    res = Results()
    mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
    ours = Ours(mem)
    raw = Raw(RAW, aioredis.Redis.from_url(url), "benchraw")
    options: list[Side] = [
        Raw(RAW_SOCKET_TIMEOUT, aioredis.Redis.from_url(url, socket_timeout=5), "benchraw-st"),
        Raw(RAW_CALL, mem.redis, "benchraw-call", call=mem.backend.call),
    ]
    raw_seq = Raw(RAW_SEQ, aioredis.Redis.from_url(url), "benchraw-seq")
    peers, res.skipped = load_peers(url, log)
    res.peers = [p.name for p in peers]
    res.peer_what = [f"{p.name} = {p.what}" for p in PEERS if p.name in res.peers]
    everything: list[Side] = [ours, raw, *options, raw_seq, *peers]
    try:
        res.redis_version = (await raw.redis.info("server")).get("redis_version", "?")
        for side in everything:
            await side.cleanup()

        pair: list[Side] = [ours, raw]
        with_options: list[Side] = [*pair, *options]
        streams = [conversation(seed=t, count=plan.ops_per_task) for t in range(plan.tasks)]
        await warm_up(with_options, plan, streams)

        log(f"writes: {plan.tasks} tasks, throughput (with the client-option variants)")
        res.write_tp = await write_throughput(with_options, plan, streams)
        log("writes: sequential latency")
        res.write_lat = await write_latency(pair, plan, conversation(seed=1000, count=plan.seq_ops))
        log(f"reads: {plan.tasks} tasks, throughput (with the client-option variants)")
        res.read_tp = await read_throughput(with_options, plan)
        log("reads: sequential latency")
        res.read_lat = await read_latency(pair, plan)
        log(f"reads by session size {', '.join(f'{n:,}' for n in plan.flat_sizes)} (interleaved)")
        res.flat = await flatness(pair, plan)
        log("memory per message")
        res.mem = await memory_per_message(pair, plan)

        seq_sides: list[Side] = [ours, raw_seq, *peers]
        log(f"sequential: {plan.appends:,} appends then reads, {len(seq_sides)} sides")
        res.seq = await sequential(seq_sides, plan, conversation(seed=3000, count=plan.appends))
        log(f"read latency by session length {', '.join(f'{n:,}' for n in plan.length_sizes)}")
        res.by_length = await read_by_length([ours, raw, *peers], plan)
    finally:
        for side in everything:
            try:
                await side.cleanup()
            finally:
                await side.aclose()
    return res


# -- report --------------------------------------------------------------------------


def versions_line() -> str:
    parts = [f"redis-py {package_version('redis')}"]
    hiredis = package_version("hiredis")
    parts[0] += f" (hiredis {hiredis})" if hiredis else " (no hiredis)"
    for dist in ("langchain-community", "langchain-core", "llama-index-storage-chat-store-redis"):
        version = package_version(dist)
        if version:
            parts.append(f"{dist} {version}")
    llama_core = package_version("llama-index-core")
    if llama_core and package_version("llama-index-storage-chat-store-redis"):
        parts.append(f"llama-index-core {llama_core}")
    return ", ".join(parts)


def report_pair(t: Table, res: Results, plan: Plan) -> None:
    """redismem against the default raw client: throughput, latency, flatness, memory."""
    t.header(f"{plan.tasks} tasks / one at a time", OURS, RAW, "ours/raw")
    for label, figures, target in (
        ("write", res.write_tp, 0.6),
        (f"read-last-{READ_LIMIT}", res.read_tp, 0.7),
    ):
        ratio = figures[OURS] / figures[RAW]
        t.row(
            f"{label} throughput, {plan.tasks} tasks (ops/s)",
            f"{figures[OURS]:,.0f}",
            f"{figures[RAW]:,.0f}",
            f"{ratio:.2f}x",
            t.goal(f">= {target:.2f}x", ratio >= target),
        )
    for label, lat in (("write", res.write_lat), (f"read-last-{READ_LIMIT}", res.read_lat)):
        (a50, a99), (b50, b99) = lat[OURS], lat[RAW]
        t.row(
            f"{label} latency, sequential, p50 / p99 (ms)",
            f"{a50:.3f} / {a99:.3f}",
            f"{b50:.3f} / {b99:.3f}",
            f"{a50 / b50:.2f}x",
        )
    sizes = plan.flat_sizes
    for n in sizes:
        a, b = res.flat[OURS][n], res.flat[RAW][n]
        t.row(f"read-last-{READ_LIMIT} p50, session of {n:,} msgs (ms)", f"{a:.3f}", f"{b:.3f}")
    fa = res.flat[OURS][sizes[-1]] / res.flat[OURS][sizes[0]]
    fb = res.flat[RAW][sizes[-1]] / res.flat[RAW][sizes[0]]
    t.row(
        f"  flatness: p50 {sizes[-1]:,} / p50 {sizes[0]:,}",
        f"{fa:.2f}",
        f"{fb:.2f}",
        "",
        t.goal("<= 1.20", fa <= 1.2),
    )
    for n in sizes[1:]:
        a, b = res.mem[OURS][n], res.mem[RAW][n]
        goal = t.goal("<= 1.00x", a <= b) if n == sizes[-1] else ""
        t.row(
            f"Redis memory per message, {n:,} msgs (bytes)",
            f"{a:,.0f}",
            f"{b:,.0f}",
            f"{a / b:.2f}x",
            goal,
        )


def report_options(t: Table, res: Results, plan: Plan) -> None:
    """What client options cost on the raw pipeline, against the default client."""
    t.header(
        f"client options: raw pipeline, {plan.tasks} tasks", "with option", "default", "opt/default"
    )
    variants = (
        (RAW_SOCKET_TIMEOUT, "socket_timeout=5 (redismem before)"),
        (RAW_CALL, "redismem's client + Memory.call"),
    )
    for label, figures in (("write", res.write_tp), (f"read-last-{READ_LIMIT}", res.read_tp)):
        for name, what in variants:
            t.row(
                f"{label} ops/s, {what}",
                f"{figures[name]:,.0f}",
                f"{figures[RAW]:,.0f}",
                f"{figures[name] / figures[RAW]:.2f}x",
            )


def report_sequential(t: Table, res: Results, plan: Plan) -> None:
    """One task, one session: appends and reads against the raw pipeline and each peer."""
    t.header(f"one task, {plan.appends:,} appends to one session", OURS, "other", "ours/other")
    ours_append, ours_read = res.seq[OURS]
    others = [RAW_SEQ, *res.peers]
    for name in others:
        append = res.seq[name][0]
        t.row(
            f"appends/s vs {name}",
            f"{ours_append:,.0f}",
            f"{append:,.0f}",
            f"{ours_append / append:.2f}x",
        )
    if res.peers:
        fastest = max(res.peers, key=lambda name: res.seq[name][0])
        ratio = ours_append / res.seq[fastest][0]
        t.row(
            f"  vs the faster peer ({fastest})",
            "",
            "",
            f"{ratio:.2f}x",
            t.goal(">= 1.00x", ratio >= 1.0),
        )
    for name in others:
        read = res.seq[name][1]
        ratio = ours_read / read
        goal = t.goal(">= 50x", ratio >= 50) if name in res.peers else ""
        shown = f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2f}x"
        t.row(
            f"read-last-{READ_LIMIT}/s of the {plan.appends:,} vs {name}",
            f"{ours_read:,.0f}",
            f"{read:,.0f}" if read >= 100 else f"{read:,.1f}",
            shown,
            goal,
        )
    t.note("raw pipeline = the RPUSH + EXPIRE pipeline above, on a default asyncio client")
    for line in res.peer_what:
        t.note(f"{line}, sync redis-py on a default client")
    for line in res.skipped:
        t.note(f"{line} (its goals are not checked)")


def report_by_length(t: Table, res: Results, plan: Plan) -> None:
    """Read latency by session length, every side."""
    names = list(res.by_length)
    t.header(f"read-last-{READ_LIMIT} p50 (ms) by session length", "", "", "")
    t.row("messages in the session", *(f"{n:,}" for n in plan.length_sizes[:3]))
    for name in names:
        t.row(f"  {name}", *(f"{res.by_length[name][n]:.3f}" for n in plan.length_sizes[:3]))
    if len(plan.length_sizes) > 3:
        t.row("messages in the session", *(f"{n:,}" for n in plan.length_sizes[3:]))
        for name in names:
            t.row(f"  {name}", *(f"{res.by_length[name][n]:.3f}" for n in plan.length_sizes[3:]))


def results_json(res: Results, plan: Plan, where: str) -> dict[str, Any]:
    """The raw figures of the report, for ``bench/plots.py``."""
    return {
        "where": where,
        "redis": res.redis_version,
        "versions": versions_line(),
        "plan": {
            "rounds": plan.rounds,
            "tasks": plan.tasks,
            "appends": plan.appends,
            "smoke": plan.smoke,
        },
        "peers": res.peers,
        "skipped": res.skipped,
        "write_throughput": res.write_tp,
        "read_throughput": res.read_tp,
        "write_latency_ms": {k: {"p50": a, "p99": b} for k, (a, b) in res.write_lat.items()},
        "read_latency_ms": {k: {"p50": a, "p99": b} for k, (a, b) in res.read_lat.items()},
        "memory_per_message": {k: {str(n): b for n, b in v.items()} for k, v in res.mem.items()},
        "sequential": {k: {"appends_per_s": a, "reads_per_s": b} for k, (a, b) in res.seq.items()},
        # side -> session length -> p50 ms of a read of the last 50
        "read_p50_ms_by_length": {
            k: {str(n): ms for n, ms in v.items()} for k, v in res.by_length.items()
        },
    }


def report(res: Results, plan: Plan, where: str) -> tuple[str, bool]:
    t = Table()
    t.note(
        f"redismem core benchmark: Redis {res.redis_version} ({where}), "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    t.note(versions_line())
    t.note(
        f"medians of {plan.rounds} rounds, order of the sides rotating; messages of 100-600 "
        f"chars, ~1 in 10 turns a tool call; every side sets a TTL of {TTL} s"
    )
    report_pair(t, res, plan)
    report_options(t, res, plan)
    report_sequential(t, res, plan)
    report_by_length(t, res, plan)
    t.note("")
    if plan.smoke:
        t.note("smoke run (--quick): the sizes are too small for the figures to judge the goals")
    else:
        t.note("all goals met" if t.all_pass else "some goals MISSED")
    return t.text(), t.all_pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("REDISMEM_BENCH_URL"),
        help="use this Redis instead of a throwaway redis-server (default: $REDISMEM_BENCH_URL)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the event loop every asyncio side runs on (uvloop: what uvicorn picks when it "
        "is installed; the sync peers do not use a loop)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the raw results as JSON (e.g. bench/results/core.json, what "
        "bench/plots.py reads)",
    )
    args = parser.parse_args(argv)
    run: Callable[..., Results] = asyncio.run
    if args.loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            print("bench_core: --loop uvloop needs uvloop: pip install uvloop", file=sys.stderr)
            return 2
        run = uvloop.run

    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = replace(plan, rounds=args.rounds)

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.url:
        res = run(bench(args.url, plan, log))
        where = "given by --url"
    else:
        with throwaway_redis() as url:
            log(f"started throwaway redis-server at {url}")
            res = run(bench(url, plan, log))
        where = "throwaway redis-server on loopback"
    if args.loop != "asyncio":
        where += f", every asyncio side on {args.loop}"
    text, _ = report(res, plan, where)
    print(text)
    if args.json:
        write_json(args.json, "core", results_json(res, plan, where))
    log("done")
    return 0  # a benchmark: missed goals are reported, not an error


if __name__ == "__main__":
    sys.exit(main())
