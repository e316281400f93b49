"""Framework adapters benchmark: redismem's LangChain and LlamaIndex adapters
against the frameworks' own Redis histories (issue 12, item 5).

Pairs, each measured in one run on one Redis:

* LangChain: ``redismem.adapters.langchain.RedisMemChatMessageHistory``
  (constructed with ``limit=50``: reads return the last 50 messages) against
  ``langchain_community``'s ``RedisChatMessageHistory(session_id, url=url,
  ttl=3600)`` (sync redis-py; ``messages`` loads the whole list, the last 50
  are sliced off in Python).
* LlamaIndex: ``redismem.adapters.llamaindex.RedisMemChatStore`` against
  ``llama_index``'s ``RedisChatStore(redis_url=url, ttl=3600)``. Neither has a
  bounded read: ``get_messages`` / ``aget_messages`` return the whole session
  on both sides, the last 50 are sliced off in Python (what
  ``ChatMemoryBuffer`` does before trimming to its token limit).

For each side: 3,000 sequential appends of one message to one new session
(ours through the async method and, as a separate side, the sync one; the
LlamaIndex store also through its own async methods), then reads of the last
50 of those 3,000 for up to a time bound, then Redis bytes per message
(``MEMORY USAGE`` summed over the keys the side wrote: for redismem every key
of the session's user, found by SCAN, so the user's session index counts
too). Medians of several rounds, the order of the sides rotating; each
round's sessions are deleted after they are measured.

Sync methods run in a worker thread (``asyncio.to_thread``) with no event
loop of its own, as a sync caller would: redismem's sync adapter methods
refuse to run inside a running loop.

Last, ``langgraph-checkpoint-redis`` is probed: a subprocess of a separate
Python that has it installed (``--lgcr-python``, default
``/tmp/lgcr/bin/python``; create it with ``python3 -m venv /tmp/lgcr &&
/tmp/lgcr/bin/pip install langgraph-checkpoint-redis langgraph``, never in the
project venv) runs ``RedisSaver.from_conn_string(url)`` and ``setup()``
against the same server and the outcome is reported. On a Redis without the
RediSearch/RedisJSON modules it fails; on one with them ``setup()`` creates
its indexes (``checkpoint*``), so with ``--url`` pass ``--no-lgcr`` to leave
the server alone.

By default a throwaway ``redis-server`` is started on a free loopback port.
With ``--url`` or ``$REDISMEM_BENCH_URL`` an existing server is used instead;
only redismem's namespace ``benchadapt`` and keys under ``benchadapt-lc:``
and ``benchadapt-li:`` are written and removed.

    .venv/bin/python bench/bench_adapters.py           # full run, a few minutes on 2 cores
    .venv/bin/python bench/bench_adapters.py --quick   # smoke check, seconds
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
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import redis.asyncio as aioredis
from _util import Table, conversation, median, package_version, rotated, throwaway_redis

from redismem import Memory
from redismem.adapters.langchain import RedisMemChatMessageHistory
from redismem.adapters.llamaindex import RedisMemChatStore

TTL = 3600
READ_LIMIT = 50
NAMESPACE = "benchadapt"
LC_PREFIX = "benchadapt-lc:"
LI_PREFIX = "benchadapt-li:"
DEFAULT_LGCR_PYTHON = "/tmp/lgcr/bin/python"


@dataclass(frozen=True)
class Plan:
    rounds: int
    appends: int  # messages appended one at a time to one session, per side and round
    reads: int  # at most this many reads of the last 50 per side and round
    read_seconds: float  # ... or reads for this long, whichever ends first
    smoke: bool = False


FULL = Plan(rounds=5, appends=3000, reads=2000, read_seconds=1.5)
QUICK = Plan(rounds=2, appends=300, reads=50, read_seconds=0.1, smoke=True)


# -- timing ----------------------------------------------------------------------


async def async_rate(
    op: Callable[[int], Awaitable[Any]], max_ops: int, max_seconds: float | None = None
) -> float:
    """Ops/s of ``op(i)`` one after another, ``max_ops`` times or until
    ``max_seconds`` have passed (at least 3 ops); as ``_util.sequential_rate``."""
    start = time.perf_counter()
    done = 0
    while done < max_ops:
        await op(done)
        done += 1
        if max_seconds is not None and done >= 3 and time.perf_counter() - start >= max_seconds:
            break
    return done / (time.perf_counter() - start)


def sync_rate(op: Callable[[int], Any], max_ops: int, max_seconds: float | None = None) -> float:
    """``async_rate`` for a sync ``op`` (run it in a thread with no event loop)."""
    start = time.perf_counter()
    done = 0
    while done < max_ops:
        op(done)
        done += 1
        if max_seconds is not None and done >= 3 and time.perf_counter() - start >= max_seconds:
            break
    return done / (time.perf_counter() - start)


# -- messages in each framework's form -------------------------------------------


def openai_tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in message.get("tool_calls", [])
    ]


def to_langchain(message: dict[str, Any]) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    content = message["content"]
    if message["role"] == "user":
        return HumanMessage(content=content)
    if message["role"] == "tool":
        return ToolMessage(content=content, tool_call_id=message["tool_call_id"])
    calls = [
        {"name": c["name"], "args": json.loads(c["arguments"]), "id": c["id"]}
        for c in message.get("tool_calls", [])
    ]
    return AIMessage(content=content, tool_calls=calls)


def to_llamaindex(message: dict[str, Any]) -> Any:
    """A LlamaIndex ``ChatMessage``; tool calls OpenAI-style in
    ``additional_kwargs``, as LlamaIndex's OpenAI LLM produces them."""
    from llama_index.core.llms import ChatMessage, MessageRole

    role = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}.get(
        message["role"], MessageRole.TOOL
    )
    extra: dict[str, Any] = {}
    if message.get("tool_calls"):
        extra["tool_calls"] = openai_tool_calls(message)
    if message.get("tool_call_id"):
        extra["tool_call_id"] = message["tool_call_id"]
    return ChatMessage(role=role, content=message["content"], additional_kwargs=extra)


# -- the sides -------------------------------------------------------------------


class Side:
    """One way of appending to and reading a session. ``is_async`` sides are
    timed on the event loop, the others in a worker thread."""

    name: str
    framework: str  # "LangChain" or "LlamaIndex"
    is_async: bool

    def native(self, message: dict[str, Any]) -> Any:
        raise NotImplementedError

    def session(self, sid: str) -> None:
        """Set up the session ``sid`` for the calls that follow (untimed)."""

    # exactly one of each pair is implemented, by is_async
    async def aappend(self, message: Any) -> None:
        raise NotImplementedError

    async def aread(self) -> int:
        raise NotImplementedError

    def append(self, message: Any) -> None:
        raise NotImplementedError

    def read(self) -> int:
        raise NotImplementedError

    async def count(self) -> int:
        """Messages in the session (a full read, untimed)."""
        raise NotImplementedError

    async def memory_usage(self) -> int:
        raise NotImplementedError

    async def drop(self) -> None:
        """Delete the session (after it was measured)."""
        raise NotImplementedError


class OursBase(Side):
    def __init__(self, mem: Memory, label: str) -> None:
        self.mem = mem
        self.label = label
        self.uid = ""
        self.sid = ""

    def session(self, sid: str) -> None:
        # A user of its own per side and round: SCAN of the user's keys then
        # finds exactly what this side wrote.
        self.uid, self.sid = f"{self.label}-{sid}", sid

    async def count(self) -> int:
        return len(await self.mem.read(session_id=self.sid, user_id=self.uid))

    async def memory_usage(self) -> int:
        client = self.mem.redis
        total = 0
        async for key in client.scan_iter(match=self.mem.layout.user_pattern(self.uid), count=100):
            total += await client.memory_usage(key, samples=0) or 0
        return total

    async def drop(self) -> None:
        await self.mem.clear(session_id=self.sid, user_id=self.uid)


class OursLangChain(OursBase):
    framework = "LangChain"

    def __init__(self, mem: Memory, is_async: bool) -> None:
        super().__init__(mem, "lc-async" if is_async else "lc-sync")
        self.is_async = is_async
        self.name = "ours " + ("aadd/aget_messages" if is_async else "add_messages/messages")
        self.history: RedisMemChatMessageHistory | None = None

    def native(self, message: dict[str, Any]) -> Any:
        return to_langchain(message)

    def session(self, sid: str) -> None:
        super().session(sid)
        self.history = RedisMemChatMessageHistory(self.mem, sid, self.uid, limit=READ_LIMIT)

    async def aappend(self, message: Any) -> None:
        assert self.history is not None
        await self.history.aadd_messages([message])

    async def aread(self) -> int:
        assert self.history is not None
        return len(await self.history.aget_messages())

    def append(self, message: Any) -> None:
        assert self.history is not None
        self.history.add_messages([message])

    def read(self) -> int:
        assert self.history is not None
        return len(self.history.messages)


class OursLlamaIndex(OursBase):
    framework = "LlamaIndex"

    def __init__(self, mem: Memory, is_async: bool) -> None:
        super().__init__(mem, "li-async" if is_async else "li-sync")
        self.is_async = is_async
        self.name = "ours " + (
            "async_add_message/aget_messages" if is_async else "add_message/get_messages"
        )
        self.store = RedisMemChatStore(mem, "unused")

    def native(self, message: dict[str, Any]) -> Any:
        return to_llamaindex(message)

    def session(self, sid: str) -> None:
        super().session(sid)
        self.store = RedisMemChatStore(self.mem, self.uid)

    async def aappend(self, message: Any) -> None:
        await self.store.async_add_message(self.sid, message)

    async def aread(self) -> int:
        return len((await self.store.aget_messages(self.sid))[-READ_LIMIT:])

    def append(self, message: Any) -> None:
        self.store.add_message(self.sid, message)

    def read(self) -> int:
        return len(self.store.get_messages(self.sid)[-READ_LIMIT:])


class TheirsLangChain(Side):
    """``RedisChatMessageHistory``: ``LPUSH`` of the message's JSON then
    ``EXPIRE``; ``messages`` is ``LRANGE 0 -1`` and a parse of every item."""

    framework = "LangChain"
    is_async = False
    name = "theirs add_messages/messages (sync)"

    def __init__(self, url: str) -> None:
        with warnings.catch_warnings():  # the package announces its sunset on import
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.chat_message_histories import RedisChatMessageHistory
        self.cls = RedisChatMessageHistory
        self.url = url
        self.history: Any = None
        self.client = aioredis.Redis.from_url(url)  # for MEMORY USAGE and cleanup

    def native(self, message: dict[str, Any]) -> Any:
        return to_langchain(message)

    def session(self, sid: str) -> None:
        if self.history is not None:
            self.history.redis_client.close()
        self.history = self.cls(sid, url=self.url, ttl=TTL, key_prefix=LC_PREFIX)
        self.history.redis_client.ping()  # connect before the clock starts

    def append(self, message: Any) -> None:
        self.history.add_messages([message])

    def read(self) -> int:
        return len(self.history.messages[-READ_LIMIT:])

    async def count(self) -> int:
        return len(await asyncio.to_thread(lambda: self.history.messages))

    async def memory_usage(self) -> int:
        return int(await self.client.memory_usage(self.history.key, samples=0) or 0)

    async def drop(self) -> None:
        await self.client.unlink(self.history.key)

    def close(self) -> None:
        if self.history is not None:
            self.history.redis_client.close()


class TheirsLlamaIndex(Side):
    """``RedisChatStore``: ``RPUSH`` of the message's JSON then ``EXPIRE``;
    ``get_messages`` is ``LRANGE 0 -1`` and a validation of every item."""

    framework = "LlamaIndex"

    def __init__(self, store: Any, client: Any, is_async: bool) -> None:
        self.store = store
        self.client = client
        self.is_async = is_async
        self.name = "theirs " + (
            "async_add_message/aget_messages" if is_async else "add_message/get_messages"
        )
        self.key = ""

    def native(self, message: dict[str, Any]) -> Any:
        return to_llamaindex(message)

    def session(self, sid: str) -> None:
        self.key = f"{LI_PREFIX}{'a' if self.is_async else 's'}:{sid}"

    async def aappend(self, message: Any) -> None:
        await self.store.async_add_message(self.key, message)

    async def aread(self) -> int:
        return len((await self.store.aget_messages(self.key))[-READ_LIMIT:])

    def append(self, message: Any) -> None:
        self.store.add_message(self.key, message)

    def read(self) -> int:
        return len(self.store.get_messages(self.key)[-READ_LIMIT:])

    async def count(self) -> int:
        return len(await self.store.aget_messages(self.key))

    async def memory_usage(self) -> int:
        return int(await self.client.memory_usage(self.key, samples=0) or 0)

    async def drop(self) -> None:
        await self.client.unlink(self.key)


def llamaindex_store(url: str) -> Any:
    from llama_index.storage.chat_store.redis import RedisChatStore

    return RedisChatStore(redis_url=url, ttl=TTL)


# -- measurement -----------------------------------------------------------------


@dataclass
class Figures:
    appends: list[float] = field(default_factory=list)
    reads: list[float] = field(default_factory=list)
    bytes_per_message: list[float] = field(default_factory=list)


async def one_round(side: Side, sid: str, batch: list[Any], plan: Plan) -> tuple[float, float]:
    """Appends/s of ``batch`` to a new session, then reads of the last 50 per second."""
    side.session(sid)
    if side.is_async:
        appends = await async_rate(lambda i: side.aappend(batch[i]), len(batch))
        got = await side.aread()
    else:
        appends = await asyncio.to_thread(sync_rate, lambda i: side.append(batch[i]), len(batch))
        got = await asyncio.to_thread(side.read)
    # Ours never starts a read with a tool result cut off from its call: a few fewer.
    assert got >= min(READ_LIMIT, len(batch)) - 3, f"{side.name} read {got} messages"
    total = await side.count()
    assert total == len(batch), f"{side.name}: {total} messages stored, {len(batch)} appended"
    if side.is_async:
        reads = await async_rate(lambda i: side.aread(), plan.reads, plan.read_seconds)
    else:
        reads = await asyncio.to_thread(
            sync_rate, lambda i: side.read(), plan.reads, plan.read_seconds
        )
    return appends, reads


async def measure(
    sides: list[Side], plan: Plan, messages: list[dict[str, Any]], log: Callable[[str], None]
) -> dict[str, Figures]:
    batches = {side.name: [side.native(m) for m in messages] for side in sides}
    warm = replace(plan, reads=5, read_seconds=0.05)
    for side in sides:  # scripts loaded, connections (and the sync twin) open, code hot
        await one_round(side, "warm", batches[side.name][:60], warm)
        await side.drop()
    out = {side.name: Figures() for side in sides}
    for r in range(plan.rounds):
        log(f"  round {r + 1}/{plan.rounds}")
        for side in rotated(sides, r):
            a, b = await one_round(side, f"s{r}", batches[side.name], plan)
            out[side.name].appends.append(a)
            out[side.name].reads.append(b)
            out[side.name].bytes_per_message.append(await side.memory_usage() / plan.appends)
            await side.drop()
    return out


# -- langgraph-checkpoint-redis --------------------------------------------------

LGCR_SCRIPT = """
import sys
from importlib import metadata
print("langgraph-checkpoint-redis", metadata.version("langgraph-checkpoint-redis"), flush=True)
from langgraph.checkpoint.redis import RedisSaver
with RedisSaver.from_conn_string(sys.argv[1]) as saver:
    saver.setup()
print("RedisSaver.setup() succeeded", flush=True)
"""


def probe_lgcr(python: str, url: str) -> list[str]:
    """Lines saying what ``RedisSaver.from_conn_string(url)`` + ``setup()`` did."""
    if not os.path.exists(python):
        return [
            f"not run: no {python}; python3 -m venv /tmp/lgcr && "
            "/tmp/lgcr/bin/pip install langgraph-checkpoint-redis langgraph"
        ]
    try:
        done = subprocess.run(
            [python, "-c", LGCR_SCRIPT, url], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return ["RedisSaver.setup() did not finish within 120 s"]
    out = [line for line in done.stdout.splitlines() if line.strip()]
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    lines = out[:1]
    if done.returncode == 0:
        lines += out[1:]
    else:
        lines.append(f"RedisSaver.setup() failed (exit {done.returncode}):")
        lines.append("  " + (errors[-1].strip() if errors else "(no error output)"))
    return lines


# -- the run ---------------------------------------------------------------------


@dataclass
class Results:
    redis_version: str = "?"
    figures: dict[str, Figures] = field(default_factory=dict)
    sides: list[Side] = field(default_factory=list)
    lgcr: list[str] = field(default_factory=list)


async def bench(
    url: str, plan: Plan, lgcr_python: str | None, log: Callable[[str], None]
) -> Results:
    res = Results()
    mem = await Memory.connect(url, namespace=NAMESPACE, ttl=TTL)
    client = aioredis.Redis.from_url(url)
    li_store = llamaindex_store(url)
    lc_theirs = TheirsLangChain(url)
    lc: list[Side] = [OursLangChain(mem, True), OursLangChain(mem, False), lc_theirs]
    li: list[Side] = [
        OursLlamaIndex(mem, True),
        OursLlamaIndex(mem, False),
        TheirsLlamaIndex(li_store, client, False),
        TheirsLlamaIndex(li_store, client, True),
    ]
    res.sides = [*lc, *li]

    async def cleanup() -> None:
        await mem.clear_all()
        for prefix in (LC_PREFIX, LI_PREFIX):
            keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=500)]
            for i in range(0, len(keys), 500):
                await client.unlink(*keys[i : i + 500])

    try:
        res.redis_version = (await client.info("server")).get("redis_version", "?")
        await cleanup()
        messages = conversation(seed=3000, count=plan.appends)
        for name, sides in (("LangChain", lc), ("LlamaIndex", li)):
            log(f"{name}: {len(sides)} sides, {plan.appends:,} appends then reads, each round")
            res.figures.update(await measure(sides, plan, messages, log))
    finally:
        try:
            await cleanup()
        finally:
            lc_theirs.close()
            await RedisMemChatMessageHistory(mem, "x").aclose()  # the sync methods' twin
            li_store._redis_client.close()
            await li_store._aredis_client.aclose()
            await client.aclose()
            await mem.aclose()
    if lgcr_python:
        log(f"langgraph-checkpoint-redis: RedisSaver.setup() via {lgcr_python}")
        res.lgcr = await asyncio.to_thread(probe_lgcr, lgcr_python, url)
    return res


# -- report ----------------------------------------------------------------------


def versions_line() -> str:
    parts = [f"redis-py {package_version('redis')}"]
    hiredis = package_version("hiredis")
    parts[0] += f" (hiredis {hiredis})" if hiredis else " (no hiredis)"
    for dist in (
        "langchain-core",
        "langchain-community",
        "llama-index-core",
        "llama-index-storage-chat-store-redis",
    ):
        parts.append(f"{dist} {package_version(dist)}")
    return ", ".join(parts)


def rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def ratio(a: float, b: float) -> str:
    r = a / b
    return f"{r:,.0f}x" if r >= 10 else f"{r:.2f}x"


def report(res: Results, plan: Plan, where: str) -> str:
    t = Table(label_width=58)
    t.note(
        f"redismem adapters benchmark: Redis {res.redis_version} ({where}), "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    t.note(versions_line())
    t.note(
        f"medians of {plan.rounds} rounds, order of the sides rotating; one task, "
        f"{plan.appends:,} appends of one message to one session, then reads of its last "
        f"{READ_LIMIT}; messages of 100-600 chars, ~1 in 10 turns a tool call; TTL {TTL} s"
    )
    med = {
        name: (median(f.appends), median(f.reads), median(f.bytes_per_message))
        for name, f in res.figures.items()
    }
    by_fw: dict[str, list[Side]] = {}
    for side in res.sides:
        by_fw.setdefault(side.framework, []).append(side)

    for fw, sides in by_fw.items():
        ours = [s for s in sides if s.name.startswith("ours")]
        theirs = [s for s in sides if s.name.startswith("theirs")]

        def peer(side: Side, theirs: list[Side] = theirs) -> Side:
            same = [s for s in theirs if s.is_async == side.is_async]
            return same[0] if same else theirs[0]

        t.header(f"{fw}", "ours", "theirs", "ours/theirs")
        for what, col in (("appends/s", 0), (f"read-last-{READ_LIMIT}/s", 1)):
            for side in ours:
                other = peer(side)
                a, b = med[side.name][col], med[other.name][col]
                mode = "async" if side.is_async else "sync"
                vs = "async" if other.is_async else "sync"
                t.row(f"{what}, {mode} vs {vs}", rate(a), rate(b), ratio(a, b))
        a = med[ours[0].name][2]
        b = med[theirs[0].name][2]
        t.row("Redis bytes per message", f"{a:,.0f}", f"{b:,.0f}", f"{a / b:.2f}x")
        for side in sides:
            t.note(f"  {side.name}")
    t.note("")
    t.note(
        "ours LangChain = RedisMemChatMessageHistory(mem, sid, uid, limit=50): reads the last 50"
    )
    t.note(
        "theirs LangChain = RedisChatMessageHistory(sid, url=url, ttl=3600): "
        "messages loads all, sliced [-50:]"
    )
    t.note(
        "LlamaIndex, both sides: get_messages/aget_messages return the whole session "
        "(no bounded read), sliced [-50:]"
    )
    t.note("ours bytes: MEMORY USAGE of every key of the session's user (SCAN); theirs: the list")
    t.note("")
    t.note("langgraph-checkpoint-redis (RedisSaver.from_conn_string(url) + setup()):")
    for line in res.lgcr or ["not run (--no-lgcr)"]:
        t.note(f"  {line}")
    t.note("")
    if plan.smoke:
        t.note("smoke run (--quick): sizes too small for the figures to mean much")
    else:
        t.note("no goals stated by the issue for these figures (goal column empty)")
    return t.text()


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
        "--lgcr-python",
        default=DEFAULT_LGCR_PYTHON,
        help="a Python with langgraph-checkpoint-redis installed (default: %(default)s)",
    )
    parser.add_argument(
        "--no-lgcr", action="store_true", help="skip the langgraph-checkpoint-redis probe"
    )
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan = replace(plan, rounds=args.rounds)
    lgcr = None if args.no_lgcr else args.lgcr_python

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.url:
        res = asyncio.run(bench(args.url, plan, lgcr, log))
        where = "given by --url"
    else:
        with throwaway_redis() as url:
            log(f"started throwaway redis-server at {url}")
            res = asyncio.run(bench(url, plan, lgcr, log))
        where = "throwaway redis-server on loopback"
    print(report(res, plan, where))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
