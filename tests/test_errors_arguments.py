"""Wrong arguments fail at once with ``InvalidInput``, before anything is sent
to Redis (issue 19, defect 10): ints out of the range a Lua script holds
exactly, bools and floats where an int is asked for, ``nan``/``inf`` where a
number is, and metadata nested deeper than ``MAX_DEPTH``. Nothing of the
namespace changes."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from conftest import MemoryFactory
from helpers import snapshot, user

from redismem import BufferMemory, InvalidInput, LastTurnsMemory, Memory
from redismem.checks import (
    MAX_INT,
    check_count,
    check_int,
    check_optional_int,
    check_optional_number,
    check_seconds,
)
from redismem.config import WorkerConfig
from redismem.values import MAX_DEPTH

#: Every int argument gets these (the last two: not an int at all).
BAD_INTS: list[Any] = [2**63, 2**100, -(2**100), MAX_INT + 1, 10**5000, True, 1.5]
#: Every number argument gets these.
BAD_NUMBERS: list[Any] = [
    math.nan,
    -math.nan,
    math.inf,
    -math.inf,
    True,
    "1",
    2**1100,
    -(2**1100),
    10**5000,
]

Call = Callable[[Memory, Any], Awaitable[Any]]

#: Each public call with an int argument that reaches Redis (directly, as a
#: script argument, or bounding what a script returns).
INT_CALLS: dict[str, Call] = {
    "read limit": lambda m, v: m.read(session_id="s", user_id="u", limit=v),
    "read max_tokens": lambda m, v: m.read(session_id="s", user_id="u", max_tokens=v),
    "read tags limit": lambda m, v: m.read(session_id="s", user_id="u", tags={"a": "b"}, limit=v),
    "context max_tokens": lambda m, v: m.context(session_id="s", user_id="u", max_tokens=v),
    "search limit": lambda m, v: m.search("hello", user_id="u", limit=v),
    "build_context max_tokens": lambda m, v: m.build_context(
        session_id="s", user_id="u", request="hello", max_tokens=v
    ),
    "build_context recall": lambda m, v: m.build_context(
        session_id="s", user_id="u", request="hello", max_tokens=100, recall=v
    ),
    "build_context memories": lambda m, v: m.build_context(
        session_id="s", user_id="u", request="hello", max_tokens=100, memories=v
    ),
    "memories.search limit": lambda m, v: m.memories.search("hello", user_id="u", limit=v),
    "memories.search offset": lambda m, v: m.memories.search("hello", user_id="u", offset=v),
    "memories.profile limit": lambda m, v: m.memories.profile(user_id="u", limit=v),
    "store.put if_version": lambda m, v: m.store.put(("u", "n"), "k", {"a": 2}, if_version=v),
    "store.search limit": lambda m, v: m.store.search(("u",), limit=v),
    "store.search offset": lambda m, v: m.store.search(("u",), offset=v),
    "store.list_namespaces limit": lambda m, v: m.store.list_namespaces(limit=v),
    "store.list_namespaces offset": lambda m, v: m.store.list_namespaces(offset=v),
    "store.list_namespaces max_depth": lambda m, v: m.store.list_namespaces(max_depth=v),
    "BufferMemory max_messages": lambda m, v: BufferMemory(m, max_messages=v).read(session_id="s"),
    "BufferMemory max_tokens": lambda m, v: BufferMemory(m, max_tokens=v).read(session_id="s"),
    "BufferMemory read limit": lambda m, v: BufferMemory(m).read(session_id="s", limit=v),
    "LastTurnsMemory max_tokens": lambda m, v: LastTurnsMemory(m, max_tokens=v).read(
        session_id="s"
    ),
}

#: Each public call with a number argument (a float or an int).
NUMBER_CALLS: dict[str, Call] = {
    "search min_score": lambda m, v: m.search("hello", user_id="u", min_score=v),
    "memories.search min_score": lambda m, v: m.memories.search("hello", user_id="u", min_score=v),
    "flush timeout": lambda m, v: m.flush(user_id="u", timeout=v),
    "store.put ttl": lambda m, v: m.store.put(("u", "n"), "k", {"a": 1}, ttl=v),
}

#: Options of ``Memory.connect`` that are ints.
INT_OPTIONS = [
    "max_messages",
    "max_message_bytes",
    "summarize_batch",
    "keep_recent",
    "retries",
    "replica_acks",
]


async def _seeded(make_memory: MemoryFactory) -> Memory:
    # Not indexed: no job is enqueued in the background while the test
    # compares snapshots.
    mem = await make_memory(index=False)
    await mem.write([user("hello world")], session_id="s", user_id="u")
    await mem.store.put(("u", "n"), "k", {"a": 1})
    return mem


async def test_int_arguments_out_of_range_are_rejected_and_change_nothing(
    make_memory: MemoryFactory, raw: Any, namespace: str
) -> None:
    mem = await _seeded(make_memory)
    before = await snapshot(raw, f"*{namespace}*")
    wrong = []
    for name, call in INT_CALLS.items():
        for value in BAD_INTS:
            try:
                await call(mem, value)
            except InvalidInput as exc:
                if name.rsplit(" ", 1)[1] not in str(exc):
                    wrong.append((name, value, exc))
            except Exception as exc:
                wrong.append((name, value, exc))
            else:
                wrong.append((name, value, "accepted"))
    assert wrong == []
    assert await snapshot(raw, f"*{namespace}*") == before


async def test_the_largest_int_is_accepted(make_memory: MemoryFactory) -> None:
    """``MAX_INT`` itself is a usable limit: no limit in effect."""
    mem = await _seeded(make_memory)
    await mem.write([user("second")], session_id="s", user_id="u")
    read = await mem.read(session_id="s", user_id="u", limit=MAX_INT, max_tokens=MAX_INT)
    assert [m.content for m in read] == ["hello world", "second"]
    tagged = await mem.read(session_id="s", user_id="u", tags={"x": "y"}, limit=MAX_INT)
    assert tagged == []
    context = await mem.context(session_id="s", user_id="u", max_tokens=MAX_INT)
    assert [m.content for m in context.messages] == ["hello world", "second"]
    found = await mem.store.search(("u",), limit=MAX_INT, offset=0)
    assert [item.key for item in found] == ["k"]
    assert await mem.store.list_namespaces(max_depth=MAX_INT, limit=MAX_INT) == [("u", "n")]


async def test_numbers_must_be_finite(make_memory: MemoryFactory, raw: Any, namespace: str) -> None:
    """``nan`` compares false with everything: ``min_score=nan`` filtered
    nothing and ``flush(timeout=nan)`` never returned."""
    mem = await _seeded(make_memory)
    before = await snapshot(raw, f"*{namespace}*")
    wrong = []
    for name, call in NUMBER_CALLS.items():
        for value in BAD_NUMBERS:
            try:
                await asyncio.wait_for(call(mem, value), 10)
            except InvalidInput as exc:
                if name.rsplit(" ", 1)[1] not in str(exc):
                    wrong.append((name, value, exc))
            except Exception as exc:
                wrong.append((name, value, repr(exc)))
            else:
                wrong.append((name, value, "accepted"))
    assert wrong == []
    assert await snapshot(raw, f"*{namespace}*") == before
    # Finite numbers still work, an int among them.
    assert await mem.search("hello", user_id="u", min_score=0) == []  # no workers: not indexed
    assert await mem.memories.search("hello", user_id="u", min_score=0.5) == []
    assert await mem.flush(user_id="u", timeout=0) in (True, False)


@pytest.mark.parametrize("option", INT_OPTIONS)
async def test_int_options_out_of_range_are_rejected(
    make_memory: MemoryFactory, option: str
) -> None:
    for value in BAD_INTS:
        with pytest.raises(InvalidInput, match=option):
            await make_memory(**{option: value})


@pytest.mark.parametrize(
    "option",
    ["ttl", "memory_ttl", "recall_ttl", "connect_timeout", "socket_timeout", "summarize_delay"],
)
async def test_number_options_must_be_finite(make_memory: MemoryFactory, option: str) -> None:
    for value in (True, math.nan, math.inf, -1, 10**5000):
        with pytest.raises(InvalidInput, match=option.split("_")[-1]):
            await make_memory(**{option: value})


@pytest.mark.parametrize("option", ["job_timeout", "sweep_seconds"])
def test_worker_int_settings_out_of_range_are_rejected(option: str) -> None:
    """``job_timeout`` reaches Redis as arq's in-progress key expiry (ms)."""
    for value in [*BAD_INTS, 0]:
        with pytest.raises(InvalidInput, match=option):
            WorkerConfig(url="redis://127.0.0.1:6379/0", **{option: value})


async def test_metadata_nesting_limit_is_exact(
    make_memory: MemoryFactory, raw: Any, namespace: str
) -> None:
    """Metadata may nest ``MAX_DEPTH`` (32, as the README says) lists and
    dicts, the metadata dict itself included; one more is refused with
    ``InvalidInput`` and nothing is written."""
    assert MAX_DEPTH == 32

    def nested(depth: int) -> dict[str, Any]:
        value: Any = "leaf"
        for i in range(depth - 1):
            value = [value] if i % 2 else {"k": value}
        return {"top": value}

    mem = await make_memory(index=False)
    deepest = nested(MAX_DEPTH)
    await mem.write([user("deep", metadata=deepest)], session_id="s", user_id="u")
    (read,) = await mem.read(session_id="s", user_id="u")
    assert read.metadata == deepest

    before = await snapshot(raw, f"*{namespace}*")
    for depth in (MAX_DEPTH + 1, 200):
        with pytest.raises(InvalidInput, match=f"nests more than {MAX_DEPTH}"):
            await mem.write([user("deeper", metadata=nested(depth))], session_id="s", user_id="u")
    assert await snapshot(raw, f"*{namespace}*") == before


def test_the_checks_name_the_argument_and_print_any_int() -> None:
    """An int too long for ``repr`` (over 4,300 digits) is described, not
    printed: the check must raise ``InvalidInput``, not Python's ``ValueError``."""
    huge = 10**5000
    for check in (check_int, check_optional_int):
        for value in (huge, -huge):
            with pytest.raises(InvalidInput, match=r"^n must be an int .* got an int of \d+ bits"):
                check("n", value)
    with pytest.raises(InvalidInput, match=r"limit must be an int in \[0, 9007199254740991\]"):
        check_count("limit", MAX_INT + 1)
    assert check_count("limit", MAX_INT) == MAX_INT
    assert check_int("n", 5, minimum=1, maximum=5) == 5
    with pytest.raises(InvalidInput, match=r"^s must be a finite number or None, got an int"):
        check_optional_number("s", huge)
    assert check_optional_number("s", 2) == 2.0
    assert check_optional_number("s", None) is None
    with pytest.raises(InvalidInput, match="t must be a finite number of seconds >= 0"):
        check_seconds("t", -0.5)
    assert check_seconds("t", 0) == 0.0


#: The adapters' ttl options (seconds; the LangGraph store's in minutes) and
#: the LangGraph store's per-item ttl.
ADAPTER_TTLS: dict[str, Callable[[Memory, Any], Any]] = {
    "langchain": lambda m, v: _langchain().RedisMemChatMessageHistory(m, "s", ttl=v),
    "langgraph": lambda m, v: _langgraph().RedisMemSaver(m, ttl=v),
    "llamaindex": lambda m, v: _llamaindex().RedisMemChatStore(m, ttl=v),
    "langgraph store": lambda m, v: _store().RedisMemStore(m, ttl={"default_ttl": v}),
    "langgraph store put": lambda m, v: _store().RedisMemStore(m).aput(("u",), "k", {}, ttl=v),
}


def _langchain() -> Any:
    return pytest.importorskip("redismem.adapters.langchain")


def _langgraph() -> Any:
    return pytest.importorskip("redismem.adapters.langgraph")


def _llamaindex() -> Any:
    return pytest.importorskip("redismem.adapters.llamaindex")


def _store() -> Any:
    return pytest.importorskip("redismem.adapters.langgraph_store")


@pytest.mark.parametrize("adapter", sorted(ADAPTER_TTLS))
async def test_adapter_ttls_are_positive_finite_and_bounded(
    make_memory: MemoryFactory, raw: Any, namespace: str, adapter: str
) -> None:
    """Each adapter's ttl goes through one check (``checks.check_ttl``): a
    huge int was an ``OverflowError`` (from ``math.isfinite``) or a
    ``ValueError`` (from printing it), not ``InvalidInput``."""
    mem = await make_memory(index=False)
    before = await snapshot(raw, f"*{namespace}*")
    wrong = []
    for value in [*BAD_NUMBERS, 0, -1, 10**12 * 60]:
        try:
            made = ADAPTER_TTLS[adapter](mem, value)
            if asyncio.iscoroutine(made):
                await made
        except InvalidInput as exc:
            if "ttl" not in str(exc):
                wrong.append((value, exc))
        except Exception as exc:
            wrong.append((value, repr(exc)))
        else:
            wrong.append((value, "accepted"))
    assert wrong == []
    assert await snapshot(raw, f"*{namespace}*") == before
