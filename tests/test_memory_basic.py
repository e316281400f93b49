"""Write/read behaviour of ``Memory``, on a real Redis and on the embedded backend."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from helpers import assistant, keys_matching, pttls, tool_call, tool_result, user

from redismem import (
    ClientClosed,
    EntryMetadata,
    InvalidInput,
    Memory,
    MemoryEntry,
    Message,
    RedisMemError,
)
from redismem.context.tokens import message_tokens
from redismem.core.transport import MultiplexedConnection

pytestmark = pytest.mark.every_server

STORE_FIELDS = {"id", "created_at", "token_count"}

ALL_FIELDS: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": "héllo wörld 👋 — 你好 — Ελληνικά",
        "name": "alice",
        "metadata": {
            "lang": "mixed",
            "n": 1,
            "f": 1.5,
            "ok": True,
            "none": None,
            "nested": {"list": [1, "two", {"three": 3}], "ünï": "ç"},
        },
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "name": "search",
                "arguments": {"query": "redis ✓", "limit": 5, "filters": {"tags": ["a", "b"]}},
            },
            {"id": "call_2", "name": "calc", "arguments": '{"expr": "1+1"}'},
            {"id": "call_3", "name": "noargs"},
        ],
    },
    {"role": "tool", "content": "result 1", "tool_call_id": "call_1", "name": "search"},
    {"role": "tool", "content": "2", "tool_call_id": "call_2"},
    {"role": "tool", "content": "", "tool_call_id": "call_3"},
    {"role": "assistant", "content": "long " + "x" * 200_000 + " end"},
    {"role": "user", "content": "pipes | commas , NUL \x00 newlines\n\r\t %41 {u:x} *?[]\\ 😀"},
]


def _user_fields(message: Message) -> dict[str, Any]:
    return message.model_dump(exclude=STORE_FIELDS)


def _as_messages(items: list[dict[str, Any]]) -> list[Message]:
    return [Message.model_validate(item) for item in items]


def _close_to_now(moment: datetime | None, slack: float = 10.0) -> bool:
    assert moment is not None
    assert moment.tzinfo is not None
    return abs((datetime.now(UTC) - moment).total_seconds()) < slack


async def test_round_trip_every_message_field(make_memory):
    mem = await make_memory()
    entry = await mem.write(ALL_FIELDS, session_id="s1", agent_name="planner", tags={"k": "v"})
    got = await mem.read(session_id="s1")

    expected = _as_messages(ALL_FIELDS)
    assert [_user_fields(m) for m in got] == [_user_fields(m) for m in expected]
    # Dict arguments come back as dicts, string arguments as the same string.
    assert got[1].tool_calls[0].arguments == ALL_FIELDS[1]["tool_calls"][0]["arguments"]
    assert got[1].tool_calls[1].arguments == '{"expr": "1+1"}'
    assert got[1].tool_calls[2].arguments == ""
    assert got[5].content.endswith(" end") and len(got[5].content) == 200_009

    # Store-filled fields: ids 1..n, one creation time per entry, token counts.
    assert [int(m.id or "") for m in got] == list(range(1, len(ALL_FIELDS) + 1))
    assert all(m.created_at == entry.metadata.created_at for m in got)
    assert _close_to_now(got[0].created_at)
    assert [m.token_count for m in got] == [message_tokens(m) for m in expected]

    # What write returned is what read gives back.
    assert entry.messages == got
    assert entry.id == got[0].id
    assert (entry.session_id, entry.user_id) == ("s1", "default")
    assert entry.metadata.agent_name == "planner"
    assert entry.metadata.tags == {"k": "v"}
    assert entry.metadata.token_count == sum(m.token_count or 0 for m in got)


async def test_message_objects_and_dicts_are_accepted_and_store_fields_ignored(make_memory):
    mem = await make_memory()
    stale = datetime(2001, 1, 1, tzinfo=UTC)
    await mem.write(
        [
            Message(role="user", content="a", id="999", created_at=stale, token_count=12345),
            {"role": "assistant", "content": "b", "id": "7", "token_count": 1},
        ],
        session_id="s",
    )
    got = await mem.read(session_id="s")
    assert [m.content for m in got] == ["a", "b"]
    assert [int(m.id or "") for m in got] == [1, 2]
    assert all(m.created_at != stale and _close_to_now(m.created_at) for m in got)
    assert [m.token_count for m in got] == [
        message_tokens(Message(role="user", content="a")),
        message_tokens(Message(role="assistant", content="b")),
    ]


async def test_ids_unique_increasing_and_order_kept_across_many_writes(make_memory):
    mem = await make_memory()
    written: list[str] = []
    returned_ids: list[str] = []
    for i in range(60):
        batch = [user(f"w{i}-m{j}") for j in range(1 + i % 4)]
        entry = await mem.write(batch, session_id="s")
        written += [m["content"] for m in batch]
        returned_ids += [m.id or "" for m in entry.messages]
    got = await mem.read(session_id="s")
    assert [m.content for m in got] == written
    ids = [m.id or "" for m in got]
    assert ids == returned_ids
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # they sort as strings too
    assert [int(i) for i in ids] == list(range(1, len(written) + 1))


async def test_limit_returns_the_most_recent(make_memory):
    mem = await make_memory()
    await mem.write([user(f"m{i}") for i in range(10)], session_id="s")
    assert [m.content for m in await mem.read(session_id="s", limit=3)] == ["m7", "m8", "m9"]
    assert [m.content for m in await mem.read(session_id="s", limit=1)] == ["m9"]
    assert await mem.read(session_id="s", limit=0) == []
    assert len(await mem.read(session_id="s", limit=10)) == 10
    assert len(await mem.read(session_id="s", limit=1000)) == 10
    assert len(await mem.read(session_id="s", limit=None)) == 10


async def test_missing_session_reads_empty(make_memory):
    mem = await make_memory()
    assert await mem.read(session_id="nope") == []
    assert await mem.read(session_id="nope", limit=5, max_tokens=100) == []
    assert await mem.entries(session_id="nope") == []
    assert await mem.sessions() == []
    assert await mem.sessions(user_id="nobody") == []


async def test_last_n_of_a_10k_message_session(make_memory):
    mem = await make_memory()
    for batch in range(10):
        await mem.write(
            [user(f"m{batch * 1000 + i}") for i in range(1000)], session_id="big", agent_name="b"
        )
    last = await mem.read(session_id="big", limit=7)
    assert [m.content for m in last] == [f"m{i}" for i in range(9993, 10000)]
    assert [int(m.id or "") for m in last] == list(range(9994, 10001))
    assert all(m.created_at is not None for m in last)
    one = await mem.read(session_id="big", limit=1)
    assert [m.content for m in one] == ["m9999"]
    cost = one[0].token_count or 0
    budget = await mem.read(session_id="big", max_tokens=cost * 5 + cost - 1)
    assert [m.content for m in budget] == [f"m{i}" for i in range(9995, 10000)]
    info = await mem.sessions()
    assert [(s.session_id, s.message_count) for s in info] == [("big", 10_000)]


def _expected_budget_suffix(history: list[Message], budget: int) -> list[str]:
    """The most recent messages that fit, minus leading orphaned tool results."""
    used, start = 0, len(history)
    while start > 0 and used + (history[start - 1].token_count or 0) <= budget:
        start -= 1
        used += history[start].token_count or 0
    kept = history[start:]
    while kept and kept[0].role == "tool":
        kept = kept[1:]
    return [m.id or "" for m in kept]


async def test_max_tokens_keeps_the_most_recent_that_fit(make_memory):
    mem = await make_memory()
    await mem.write(
        [
            user("first question, rather long " * 3),
            assistant("short"),
            user("look this up"),
            tool_call("c1", "calling"),
            tool_result("c1", "a long tool result " * 5),
            tool_call("c2"),
            tool_result("c2", "r2"),
            tool_result("c2", "r2 again"),
            assistant("final answer"),
        ],
        session_id="s",
    )
    history = await mem.read(session_id="s")
    total = sum(m.token_count or 0 for m in history)
    for budget in range(total + 2):
        got = await mem.read(session_id="s", max_tokens=budget)
        assert sum(m.token_count or 0 for m in got) <= budget
        assert [m.id for m in got] == _expected_budget_suffix(history, budget), budget
        assert not got or got[0].role != "tool"
    assert await mem.read(session_id="s", max_tokens=0) == []
    assert len(await mem.read(session_id="s", max_tokens=total)) == len(history)


async def test_max_tokens_drops_a_tool_result_whose_call_was_cut(make_memory):
    mem = await make_memory()
    await mem.write(
        [user("q"), tool_call("c1", "x" * 400), tool_result("c1", "ok"), assistant("done")],
        session_id="s",
    )
    history = await mem.read(session_id="s")
    tail = (history[2].token_count or 0) + (history[3].token_count or 0)
    got = await mem.read(session_id="s", max_tokens=tail)
    assert [m.content for m in got] == ["done"]
    with_call = tail + (history[1].token_count or 0)
    got = await mem.read(session_id="s", max_tokens=with_call)
    assert [m.role for m in got] == ["assistant", "tool", "assistant"]


async def test_limit_drops_a_tool_result_whose_call_was_cut(make_memory):
    mem = await make_memory()
    await mem.write(
        [user("q"), tool_call("c1"), tool_result("c1", "ok"), assistant("done")], session_id="s"
    )
    assert [m.content for m in await mem.read(session_id="s", limit=2)] == ["done"]
    got = await mem.read(session_id="s", limit=3)
    assert [m.role for m in got] == ["assistant", "tool", "assistant"]


async def test_limit_and_max_tokens_together(make_memory):
    mem = await make_memory()
    await mem.write([user(f"message {i}") for i in range(20)], session_id="s")
    cost = (await mem.read(session_id="s", limit=1))[0].token_count or 0
    got = await mem.read(session_id="s", limit=3, max_tokens=cost * 10)
    assert [m.content for m in got] == ["message 17", "message 18", "message 19"]
    got = await mem.read(session_id="s", limit=10, max_tokens=cost * 2)
    assert [m.content for m in got] == ["message 18", "message 19"]


async def test_entries_one_per_write_with_metadata(make_memory):
    mem = await make_memory()
    e1 = await mem.write([user("a"), assistant("b")], session_id="s", agent_name="one")
    e2 = await mem.write([user("c")], session_id="s", tags={"t": "1"})
    entries = await mem.entries(session_id="s")
    assert [e.id for e in entries] == [e1.id, e2.id]
    assert [[m.content for m in e.messages] for e in entries] == [["a", "b"], ["c"]]
    assert [e.metadata.agent_name for e in entries] == ["one", None]
    assert [e.metadata.tags for e in entries] == [{}, {"t": "1"}]
    assert [e.metadata.token_count for e in entries] == [
        e1.metadata.token_count,
        e2.metadata.token_count,
    ]
    assert [e.metadata.created_at for e in entries] == [
        e1.metadata.created_at,
        e2.metadata.created_at,
    ]
    for entry in entries:
        assert isinstance(entry, MemoryEntry)
        assert (entry.session_id, entry.user_id) == ("s", "default")
        assert entry.metadata.accessed_at is not None
        assert entry.metadata.accessed_at >= entry.metadata.created_at
    assert entries[0].messages == (await mem.read(session_id="s"))[:2]


async def test_sessions_describe_live_sessions(make_memory):
    mem = await make_memory(ttl=3.2)  # TTL refresh slack: 100 ms
    await mem.write([user("a"), assistant("b")], session_id="s1", tags={"x": "1"})
    await mem.write([user("c")], session_id="s1", tags={"y": "2"})
    await asyncio.sleep(0.01)
    await mem.write([user("d")], session_id="s2")
    await mem.write([user("e")], session_id="other", user_id="bob")

    infos = await mem.sessions()
    assert [s.session_id for s in infos] == ["s1", "s2"]  # soonest expiry first
    s1 = infos[0]
    stored = await mem.read(session_id="s1")
    assert s1.user_id == "default"
    assert s1.message_count == 3
    assert s1.token_count == sum(m.token_count or 0 for m in stored)
    assert s1.tags == {"x": "1", "y": "2"}
    assert s1.created_at <= s1.accessed_at
    assert s1.expires_at is not None
    expected_deadline = datetime.now(UTC) + timedelta(seconds=3.2)
    assert abs((s1.expires_at - expected_deadline).total_seconds()) < 10
    assert [s.session_id for s in await mem.sessions(user_id="bob")] == ["other"]

    # A read slides s1's deadline past s2's (once the 100 ms slack has passed).
    await asyncio.sleep(0.15)
    await mem.read(session_id="s1")
    assert [s.session_id for s in await mem.sessions()] == ["s2", "s1"]


async def test_system_messages_are_skipped_by_default(make_memory):
    mem = await make_memory()
    entry = await mem.write([{"role": "system", "content": "be nice"}, user("hi")], session_id="s")
    assert [m.role for m in entry.messages] == ["user"]
    assert [m.role for m in await mem.read(session_id="s")] == ["user"]
    only_system = await mem.write([{"role": "system", "content": "x"}], session_id="s2")
    assert only_system.messages == []
    assert await mem.read(session_id="s2") == []
    assert [s.session_id for s in await mem.sessions()] == ["s"]


async def test_system_messages_are_stored_when_asked(make_memory):
    mem = await make_memory(store_system_messages=True)
    await mem.write([{"role": "system", "content": "be nice"}, user("hi")], session_id="s")
    got = await mem.read(session_id="s")
    assert [(m.role, m.content) for m in got] == [("system", "be nice"), ("user", "hi")]


async def test_max_messages_trims_oldest_and_keeps_counters_exact(make_memory, raw):
    mem = await make_memory(max_messages=5)
    await mem.write([user("m1"), user("m2"), user("m3")], session_id="s", tags={"e": "1"})
    await mem.write([user("m4"), user("m5" * 40), user("m6")], session_id="s", tags={"e": "2"})
    await mem.write([user("m7"), user("m8"), user("m9" * 7)], session_id="s", tags={"e": "3"})

    got = await mem.read(session_id="s")
    assert [m.content[:2] for m in got] == ["m5", "m6", "m7", "m8", "m9"]
    assert [int(m.id or "") for m in got] == [5, 6, 7, 8, 9]
    (info,) = await mem.sessions()
    assert info.message_count == 5
    assert info.token_count == sum(m.token_count or 0 for m in got)

    entries = await mem.entries(session_id="s")
    assert [e.metadata.tags["e"] for e in entries] == ["2", "3"]  # the first entry is gone
    assert [[m.content[:2] for m in e.messages] for e in entries] == [
        ["m5", "m6"],
        ["m7", "m8", "m9"],
    ]
    keys = mem.layout.session("default", "s")
    assert await raw.llen(keys.entries) == 2
    assert await raw.llen(keys.msgs) == 5


async def test_max_messages_with_one_write_larger_than_the_cap(make_memory):
    mem = await make_memory(max_messages=3)
    await mem.write([user("old")], session_id="s")
    entry = await mem.write([user(f"n{i}") for i in range(8)], session_id="s")
    assert len(entry.messages) == 8  # the write returns what it wrote
    got = await mem.read(session_id="s")
    assert [m.content for m in got] == ["n5", "n6", "n7"]
    entries = await mem.entries(session_id="s")
    assert len(entries) == 1
    assert [m.content for m in entries[0].messages] == ["n5", "n6", "n7"]
    (info,) = await mem.sessions()
    assert (info.message_count, info.token_count) == (3, sum(m.token_count or 0 for m in got))


async def test_token_counter_exact_under_repeated_trimming(make_memory):
    mem = await make_memory(max_messages=7)
    for i in range(40):
        await mem.write([user("w" * (i * 7 % 23)) for _ in range(1 + i % 3)], session_id="s")
        got = await mem.read(session_id="s")
        (info,) = await mem.sessions()
        assert info.message_count == len(got) <= 7
        assert info.token_count == sum(m.token_count or 0 for m in got)


async def test_on_write_and_on_read_hooks_get_keyword_arguments(make_memory):
    calls: list[tuple[str, dict[str, Any]]] = []

    def on_write(*, session_id: str, user_id: str, messages: list[Message]) -> None:
        calls.append(("write", {"session_id": session_id, "user_id": user_id, "m": messages}))

    async def on_read(*, session_id: str, user_id: str, messages: list[Message]) -> None:
        await asyncio.sleep(0)
        calls.append(("read", {"session_id": session_id, "user_id": user_id, "m": messages}))

    mem = await make_memory(on_write=on_write, on_read=on_read)
    entry = await mem.write([user("a"), assistant("b")], session_id="s", user_id="u")
    got = await mem.read(session_id="s", user_id="u", limit=1)
    assert calls == [
        ("write", {"session_id": "s", "user_id": "u", "m": entry.messages}),
        ("read", {"session_id": "s", "user_id": "u", "m": got}),
    ]
    assert calls[0][1]["m"][0].id is not None


async def test_async_write_hook_and_sync_read_hook(make_memory):
    seen: list[str] = []

    async def on_write(**kwargs: Any) -> None:
        seen.append(f"w:{kwargs['session_id']}:{len(kwargs['messages'])}")

    def on_read(**kwargs: Any) -> None:
        seen.append(f"r:{kwargs['user_id']}:{len(kwargs['messages'])}")

    mem = await make_memory(on_write=on_write, on_read=on_read)
    await mem.write([user("a")], session_id="s")
    await mem.read(session_id="s")
    assert seen == ["w:s:1", "r:default:1"]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_raising_hook_does_not_break_the_call(make_memory, caplog, kind):
    def boom(**kwargs: Any) -> None:
        raise RuntimeError("hook exploded")

    async def aboom(**kwargs: Any) -> None:
        raise RuntimeError("hook exploded")

    hook = boom if kind == "sync" else aboom
    mem = await make_memory(on_write=hook, on_read=hook)
    with caplog.at_level(logging.ERROR, logger="redismem"):
        entry = await mem.write([user("kept")], session_id="s")
        got = await mem.read(session_id="s")
    assert [m.content for m in entry.messages] == ["kept"]
    assert [m.content for m in got] == ["kept"]
    assert sum("hook exploded" in (r.exc_text or str(r.exc_info)) for r in caplog.records) >= 2


async def test_use_after_aclose_raises_client_closed(make_memory):
    mem = await make_memory()
    await mem.write([user("a")], session_id="s")
    await mem.aclose()
    await mem.aclose()  # idempotent
    calls = [
        mem.write([user("b")], session_id="s"),
        mem.read(session_id="s"),
        mem.entries(session_id="s"),
        mem.sessions(),
        mem.clear(session_id="s"),
        mem.clear_user("default"),
        mem.clear_all(),
        mem.ping(),
    ]
    for call in calls:
        with pytest.raises(ClientClosed) as info:
            await call
        assert isinstance(info.value, RedisMemError)
    with pytest.raises(ClientClosed):
        _ = mem.redis


async def test_async_with_closes_the_client(make_memory):
    mem = await make_memory()
    async with mem as same:
        assert same is mem
        await mem.write([user("a")], session_id="s")
    with pytest.raises(ClientClosed):
        await mem.read(session_id="s")


async def test_two_clients_share_one_store(make_memory):
    writer = await make_memory()
    reader = await make_memory()
    await writer.write([user("shared")], session_id="s", user_id="u")
    assert [m.content for m in await reader.read(session_id="s", user_id="u")] == ["shared"]


async def test_namespaces_are_isolated(make_memory, namespace, raw):
    one = await make_memory()
    two = await make_memory(namespace=namespace + "b")
    await one.write([user("in one")], session_id="s")
    await two.write([user("in two")], session_id="s")
    assert [m.content for m in await one.read(session_id="s")] == ["in one"]
    assert [m.content for m in await two.read(session_id="s")] == ["in two"]
    await two.clear_all()
    assert [m.content for m in await one.read(session_id="s")] == ["in one"]
    assert await keys_matching(raw, f"{namespace}b:*") == []


async def test_connect_without_url_or_env_is_embedded(memory_factory, clean_env, namespace):
    mem = await Memory.connect(namespace=namespace)
    try:
        assert mem.config.url == "memory://"
        assert mem.config.embedded
        await mem.write([user("local")], session_id="s")
        again = await memory_factory("memory://")
        assert [m.content for m in await again.read(session_id="s")] == ["local"]
    finally:
        await mem.clear_all()
        await mem.aclose()


async def test_env_url_is_honoured(backend_url, raw, monkeypatch, clean_env, namespace):
    monkeypatch.setenv("REDISMEM_URL", backend_url)
    mem = await Memory.connect(namespace=namespace)
    try:
        assert mem.config.url == backend_url
        await mem.write([user("via env")], session_id="s")
    finally:
        await mem.aclose()
    assert len(await keys_matching(raw, f"{namespace}:*")) >= 3


async def test_explicit_url_wins_over_env(make_memory, monkeypatch):
    monkeypatch.setenv("REDISMEM_URL", "redis://127.0.0.1:1/0")
    mem = await make_memory()
    await mem.write([user("a")], session_id="s")
    assert len(await mem.read(session_id="s")) == 1


async def test_named_embedded_servers_are_separate(memory_factory, namespace):
    a = await memory_factory(f"memory://test-{namespace}-a")
    b = await memory_factory(f"memory://test-{namespace}-b")
    a2 = await memory_factory(f"memory://test-{namespace}-a")
    await a.write([user("only in a")], session_id="s")
    assert await b.read(session_id="s") == []
    assert [m.content for m in await a2.read(session_id="s")] == ["only in a"]
    await a.clear_all()


async def test_write_and_read_are_one_round_trip_each(make_memory, monkeypatch, is_embedded):
    mem = await make_memory()
    await mem.write([user("warm up")], session_id="s")  # loads the scripts
    await mem.read(session_id="s", max_tokens=1000)
    await mem.read(session_id="s", limit=10)
    sent: list[str] = []
    original = mem.redis.execute_command
    pipeline, transaction = MultiplexedConnection.pipeline, MultiplexedConnection.transaction
    evalsha, evalsha_now = MultiplexedConnection.evalsha, MultiplexedConnection.evalsha_now

    async def counting(*args: Any, **kwargs: Any) -> Any:
        sent.append(str(args[0]))
        return await original(*args, **kwargs)

    async def counting_pipeline(link: MultiplexedConnection, commands: Any, **options: Any) -> Any:
        sent.extend(str(command[0]) for command in commands)
        return await pipeline(link, commands, **options)

    async def counting_evalsha(link: MultiplexedConnection, *args: Any, **options: Any) -> Any:
        sent.append("EVALSHA")
        return await evalsha(link, *args, **options)

    def counting_evalsha_now(link: MultiplexedConnection, *args: Any, **options: Any) -> Any:
        started = evalsha_now(link, *args, **options)
        if started is not None:
            sent.append("EVALSHA")
        return started

    async def counting_transaction(
        link: MultiplexedConnection, commands: Any, **options: Any
    ) -> Any:
        sent.append("MULTI")
        return await transaction(link, commands, **options)

    # Both paths to the server: redis-py's client and the hot path's link.
    monkeypatch.setattr(mem.redis, "execute_command", counting)
    monkeypatch.setattr(MultiplexedConnection, "pipeline", counting_pipeline)
    monkeypatch.setattr(MultiplexedConnection, "transaction", counting_transaction)
    monkeypatch.setattr(MultiplexedConnection, "evalsha", counting_evalsha)
    monkeypatch.setattr(MultiplexedConnection, "evalsha_now", counting_evalsha_now)
    await mem.write([user(f"m{i}") for i in range(50)], session_id="s", tags={"a": "1", "b": "2"})
    assert sent == ["EVALSHA"]
    sent.clear()
    await mem.read(session_id="s", limit=10, max_tokens=1000)
    assert sent == ["EVALSHA"]
    sent.clear()
    await mem.read(session_id="s", limit=10)
    # One MULTI block (the embedded backend's pipeline bypasses execute_command).
    assert sent == ([] if is_embedded else ["MULTI"])


async def test_env_namespace_and_ttl_are_honoured(
    backend_url, raw, monkeypatch, clean_env, namespace
):
    monkeypatch.setenv("REDISMEM_NAMESPACE", namespace)
    monkeypatch.setenv("REDISMEM_TTL", "30")
    mem = await Memory.connect(backend_url)
    try:
        assert mem.layout.namespace == namespace
        await mem.write([user("a")], session_id="s")
    finally:
        await mem.aclose()
    found = await pttls(raw, f"{namespace}:*")
    assert found and all(29_000 < ttl <= 30_000 + 30_000 // 32 for ttl in found.values())

    monkeypatch.setenv("REDISMEM_TTL", "none")
    mem = await Memory.connect(backend_url, namespace=namespace)  # keyword arguments win
    try:
        await mem.write([user("b")], session_id="forever")
    finally:
        await mem.aclose()
    forever = await pttls(raw, mem.layout.user_prefix("default") + "s:forever:*")
    assert forever and set(forever.values()) == {-1}


async def test_bad_env_ttl_is_invalid_input(backend_url, monkeypatch, clean_env):
    monkeypatch.setenv("REDISMEM_TTL", "soon")
    with pytest.raises(InvalidInput):
        await Memory.connect(backend_url)


async def test_a_write_can_record_an_earlier_time(make_memory):
    """``created_at`` dates an entry that records the past (importing
    history): kept to the millisecond, returned and read back as stored, a
    time after the server's clock counts as now, and a re-sent write keeps
    its first time."""
    mem = await make_memory()
    then = datetime(2023, 5, 8, 13, 56, 12, 345678, tzinfo=timezone(timedelta(hours=2)))
    stored = then.replace(microsecond=345000).astimezone(UTC)
    entry = await mem.write(
        [user("a"), user("b")], session_id="s", created_at=then, write_id="import-1"
    )
    assert entry.metadata.created_at == stored
    assert [m.created_at for m in entry.messages] == [stored, stored]
    assert [m.created_at for m in await mem.read(session_id="s")] == [stored, stored]
    [listed] = await mem.entries(session_id="s")
    assert listed.metadata.created_at == stored

    again = await mem.write(
        [user("a"), user("b")],
        session_id="s",
        created_at=then + timedelta(days=1),
        write_id="import-1",
    )
    assert again.metadata.created_at == stored
    assert len(await mem.read(session_id="s")) == 2

    before = datetime.now(UTC)
    now = await mem.write([user("c")], session_id="s")
    future = await mem.write([user("d")], session_id="s", created_at=before + timedelta(days=9))
    after = datetime.now(UTC)
    for written in (now, future):
        assert before - timedelta(seconds=5) <= written.metadata.created_at <= after
    times = [m.created_at for m in await mem.read(session_id="s")]
    assert times[:2] == [stored, stored] and all(t > stored for t in times[2:])


async def test_a_written_entry_is_a_complete_valid_model(make_memory):
    """The entry ``write`` builds without validation equals its validated
    copy: every field present once, the store fields set and marked set."""
    mem = await make_memory()
    entry = await mem.write(
        [user("hi"), tool_call("c1"), tool_result("c1", "ok")],
        session_id="s",
        tags={"k": "v"},
        agent_name="a",
    )
    assert MemoryEntry.model_validate(entry.model_dump()) == entry
    # Exactly the model's fields (pydantic's equality ignores anything else).
    assert list(entry.__dict__) == list(MemoryEntry.model_fields)
    assert list(entry.metadata.__dict__) == list(EntryMetadata.model_fields)
    assert all(list(m.__dict__) == list(Message.model_fields) for m in entry.messages)
    assert entry.metadata.accessed_at == entry.metadata.created_at is not None
    assert entry.id == entry.messages[0].id
    for message in entry.messages:
        assert {"id", "created_at", "token_count"} <= message.model_fields_set
        assert message.created_at == entry.metadata.created_at
