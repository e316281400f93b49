"""Memory providers: Buffer, LastMessages, Summarizing and Composite memory."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import MemoryFactory
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redismem import InvalidInput, Memory, Message, ToolCall
from redismem.context.composite import MERGE_MODES, CombinedProvider, merge_messages
from redismem.context.providers import (
    BufferMemory,
    LastTurnsMemory,
    MemoryProvider,
    SummarizingMemory,
)
from redismem.context.quoting import MEMORY_DATA_HEADER
from redismem.context.strategies import Hybrid, LastMessages, TokenBudget, Turns
from redismem.context.tokens import message_tokens
from redismem.models import MemoryEntry
from redismem.summarization.summarizers import KeyPointsSummarizer, TruncationSummarizer

pytestmark = pytest.mark.every_server

PROPERTY = settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "memory-types.md"


# -- conversations -----------------------------------------------------------------


def user(content: str) -> Message:
    return Message(role="user", content=content)


def answer(content: str) -> Message:
    return Message(role="assistant", content=content)


def calls(*tool_calls: ToolCall, content: str = "") -> Message:
    return Message(role="assistant", content=content, tool_calls=list(tool_calls))


def result(call_id: str, content: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=content)


def support_run() -> list[Message]:
    """A support agent's run: two tool rounds, long JSON results, unicode."""
    orders = json.dumps(
        [{"order": f"A-{1000 + i}", "item": "Kaffeemühle ☕", "eur": 49.9 + i} for i in range(15)],
        ensure_ascii=False,
    )
    return [
        user("Hallo! Wo ist meine Bestellung? Ich heiße Zoë Ølund."),
        calls(ToolCall(id="c1", name="find_customer", arguments={"name": "Zoë Ølund"})),
        result("c1", '{"customer": "C-77", "tier": "gold"}'),
        calls(
            ToolCall(id="c2", name="list_orders", arguments={"customer": "C-77"}),
            ToolCall(id="c3", name="shipping_status", arguments='{"order": "A-1014"}'),
            content="Looking up your orders.",
        ),
        result("c2", orders),
        result("c3", '{"status": "in transit", "eta": "2024-05-03"}'),
        answer("Order A-1014 (Kaffeemühle ☕) is in transit and arrives on 3 May."),
        user("Danke 🙏 — can you also change the address to Åkersgata 5, Oslo?"),
        calls(ToolCall(id="c4", name="update_address", arguments={"street": "Åkersgata 5"})),
        result("c4", '{"ok": true}'),
        answer("Done: the address is now Åkersgata 5, Oslo."),
    ]


def assert_no_split_groups(messages: Sequence[Message]) -> None:
    """No orphan tool result; every tool call's results follow it (unless it is last)."""
    pending: list[str] = []
    for position, message in enumerate(messages):
        if message.role == "tool":
            assert pending, f"orphan tool result at {position}: {message}"
            assert message.tool_call_id == pending.pop(0)
            continue
        if message.role == "system":
            continue
        assert not pending, f"tool call results cut before {position}"
        if message.role == "assistant" and message.tool_calls:
            pending = [c.id for c in message.tool_calls]


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 8) -> list[Message]:
    """Well-formed histories: turns of a user message, tool rounds, an answer."""
    text = st.text(alphabet=st.characters(codec="utf-8"), max_size=120)
    out: list[Message] = []
    counter = 0
    for turn in range(draw(st.integers(1, max_turns))):
        out.append(user(draw(text)))
        for _ in range(draw(st.integers(0, 2))):
            ids = []
            for _ in range(draw(st.integers(1, 3))):
                counter += 1
                ids.append(f"call_{turn}_{counter}")
            out.append(calls(*(ToolCall(id=i, name="lookup", arguments={"q": i}) for i in ids)))
            out.extend(result(i, draw(text)) for i in ids)
        if draw(st.booleans()) or turn < max_turns - 1:
            out.append(answer(draw(text)))
    return out


# -- fixtures ----------------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="function")
async def mem(make_memory: MemoryFactory) -> Memory:
    """A Memory on each backend: a real Redis and a fresh embedded server."""
    return await make_memory()


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


# -- the protocol ------------------------------------------------------------------


class ListProvider:
    """A provider outside redismem: a fixed history, writes kept in a list."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = list(messages)
        self.written: list[list[Message]] = []

    async def read(
        self,
        *,
        session_id: str,
        user_id: str = "default",
        limit: int | None = None,
        query: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[Message]:
        return list(self.messages)

    async def write(
        self,
        messages: Any,
        *,
        session_id: str,
        user_id: str = "default",
        tags: Mapping[str, str] | None = None,
        agent_name: str | None = None,
    ) -> MemoryEntry | None:
        self.written.append(list(messages))
        return None

    async def clear(self, *, session_id: str, user_id: str = "default") -> None:
        self.messages = []

    async def entries(self, *, session_id: str, user_id: str = "default") -> list[MemoryEntry]:
        return []


async def test_every_provider_satisfies_the_protocol(mem: Memory) -> None:
    providers = [
        BufferMemory(mem),
        LastTurnsMemory(mem, max_turns=3),
        SummarizingMemory(mem, recent_messages=4),
        CombinedProvider([BufferMemory(mem)]),
        ListProvider([]),
    ]
    for provider in providers:
        assert isinstance(provider, MemoryProvider)


async def test_invalid_arguments_are_rejected(mem: Memory) -> None:
    with pytest.raises(InvalidInput):
        BufferMemory("redis://localhost")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        BufferMemory(mem, max_messages=0)
    with pytest.raises(InvalidInput):
        BufferMemory(mem, max_tokens=-5)
    with pytest.raises(InvalidInput):
        BufferMemory(mem, store_system="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        LastTurnsMemory(mem)
    with pytest.raises(InvalidInput):
        SummarizingMemory(mem, recent_messages=-1)
    with pytest.raises(InvalidInput):
        SummarizingMemory(mem, recent_messages=2, summarize_every=0)
    with pytest.raises(InvalidInput, match="header"):
        SummarizingMemory(mem, recent_messages=2, max_summary_tokens=10)
    with pytest.raises(InvalidInput):
        SummarizingMemory(mem, recent_messages=2, summarizer="keypoints")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        CombinedProvider([])
    with pytest.raises(InvalidInput):
        CombinedProvider([BufferMemory(mem), "nope"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput):
        CombinedProvider([BufferMemory(mem)], merge="zip")  # type: ignore[arg-type]
    buffer = BufferMemory(mem)
    with pytest.raises(InvalidInput):
        await buffer.read(session_id="s", limit=-1)
    with pytest.raises(InvalidInput):
        await buffer.read(session_id="s", query=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await buffer.read(session_id="", limit=0)
    with pytest.raises(InvalidInput):
        await buffer.write([], session_id="s")


# -- BufferMemory ------------------------------------------------------------------


async def test_buffer_reads_the_newest_messages_without_splitting_tool_groups(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory()
    buffer = BufferMemory(memory, max_messages=6)
    run = support_run()
    await buffer.write(run[:7], session_id="s", agent_name="support")
    await buffer.write(run[7:], session_id="s", agent_name="support")

    history = await buffer.read(session_id="s")
    # The last 6 messages start inside the first turn's second tool round.
    assert [m.content for m in history] == [m.content for m in run[6:]]
    assert_no_split_groups(history)

    everything = await BufferMemory(memory).read(session_id="s")
    assert [m.content for m in everything] == [m.content for m in run]

    # The read's limit tightens max_messages; limit=0 reads nothing.
    assert len(await buffer.read(session_id="s", limit=2)) == 1  # a tool group is 2
    assert len(await buffer.read(session_id="s", limit=3)) == 3
    assert await buffer.read(session_id="s", limit=0) == []

    # max_tokens: the newest whole groups that fit.
    tokens = BufferMemory(memory, max_tokens=60)
    kept = await tokens.read(session_id="s")
    assert sum(m.token_count or 0 for m in kept) <= 60
    assert_no_split_groups(kept)
    assert kept == TokenBudget(60).apply(everything).kept


async def test_buffer_does_not_store_system_messages_unless_asked(mem: Memory) -> None:
    session = sid()
    prompt = Message(role="system", content="You are a support agent.")
    entry = await BufferMemory(mem).write([prompt, user("hi")], session_id=session)
    assert [m.role for m in entry.messages] == ["user"]
    assert [m.role for m in await mem.read(session_id=session)] == ["user"]

    entry = await BufferMemory(mem, store_system=True).write([prompt], session_id=session)
    assert [m.role for m in entry.messages] == ["system"]
    # Only system messages, not stored: an empty entry, nothing written.
    empty = await BufferMemory(mem).write([prompt], session_id=session)
    assert empty.id == "" and empty.messages == []
    assert len(await mem.read(session_id=session)) == 2


async def test_buffer_filters_by_tags_and_ignores_query(mem: Memory) -> None:
    buffer = BufferMemory(mem, max_messages=10)
    await buffer.write([user("billing question")], session_id="s", tags={"topic": "billing"})
    await buffer.write([user("weather question")], session_id="s", tags={"topic": "weather"})
    tagged = await buffer.read(session_id="s", tags={"topic": "billing"})
    assert [m.content for m in tagged] == ["billing question"]
    searched = await buffer.read(session_id="s", query="anything")
    assert [m.content for m in searched] == ["billing question", "weather question"]


@PROPERTY
@given(
    history=conversations(),
    max_messages=st.none() | st.integers(1, 12),
    max_tokens=st.none() | st.integers(1, 200),
    limit=st.none() | st.integers(0, 12),
)
async def test_buffer_read_equals_its_strategy_over_the_whole_session(
    mem: Memory,
    history: list[Message],
    max_messages: int | None,
    max_tokens: int | None,
    limit: int | None,
) -> None:
    """The windowed read gives what the strategy gives over the full history."""
    session = sid()
    await mem.write(history, session_id=session)
    full = await mem.read(session_id=session)
    got = await BufferMemory(mem, max_messages, max_tokens).read(session_id=session, limit=limit)
    count = max_messages if limit is None else min(limit, max_messages or limit)
    if count == 0:
        assert got == []
        return
    if count is not None and max_tokens is not None:
        expected = Hybrid(count, max_tokens).apply(full).kept
    elif count is not None:
        expected = LastMessages(count).apply(full).kept
    elif max_tokens is not None:
        expected = TokenBudget(max_tokens).apply(full).kept
    else:
        expected = full
    assert got == expected
    assert_no_split_groups(got)


# -- LastTurnsMemory -----------------------------------------------------------


async def test_sliding_window_keeps_whole_turns(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    window = LastTurnsMemory(memory, max_turns=1)
    run = support_run()
    await window.write(run, session_id="s")
    last_turn = await window.read(session_id="s")
    assert [m.content for m in last_turn] == [m.content for m in run[7:]]

    both = await LastTurnsMemory(memory, max_turns=5).read(session_id="s")
    assert len(both) == len(run)

    # Token-aware: the first turn (with a long JSON result) does not fit.
    budget = sum(m.token_count or 0 for m in last_turn) + 20
    tight = await LastTurnsMemory(memory, max_tokens=budget, max_turns=5).read(session_id="s")
    assert tight == last_turn
    full = await memory.read(session_id="s")
    assert tight == Turns(5, budget).apply(full).kept

    # A read's limit cuts whole tool groups of the kept turns.
    limited = await window.read(session_id="s", limit=3)
    assert [m.content for m in limited] == [m.content for m in run[8:]]
    assert await window.read(session_id="s", limit=0) == []


# -- SummarizingMemory -------------------------------------------------------------


async def test_summarizing_memory_summarizes_inline_and_bounds_the_summary(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory()
    provider = SummarizingMemory(
        memory,
        recent_messages=4,
        summarizer=TruncationSummarizer(max_chars=5000),
        summarize_every=6,
        max_summary_tokens=80,
    )
    run = support_run()
    for round_ in range(4):
        await provider.write(run, session_id="s", agent_name=f"agent-{round_}")

    history = await provider.read(session_id="s")
    note, recent = history[0], history[1:]
    assert note.role == "system" and note.id is None
    assert note.content.startswith(MEMORY_DATA_HEADER)
    assert message_tokens(note, memory.config.tokenizer) <= 80
    # The stored summary itself was cut to fit when written.
    summary = await memory.summary(session_id="s")
    assert summary is not None and summary.message_count > 0
    assert summary.text in note.content
    # Recent messages: all unsummarized ones, at least recent_messages of them.
    assert 4 <= len(recent) < 4 + 6 + len(run)
    assert recent[-1].content == run[-1].content
    assert_no_split_groups(recent)
    assert all(int(m.id or 0) > int(summary.summarized_until) for m in recent)
    # Compaction removed what the summary covers.
    stored = await memory.read(session_id="s")
    assert len(stored) == len(recent)

    limited = await provider.read(session_id="s", limit=1)
    assert limited == [note, recent[-1]]


async def test_summarizing_memory_survives_a_failing_summarizer(mem: Memory) -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("model overloaded")
            return "the user talked about orders"

    flaky = Flaky()
    provider = SummarizingMemory(mem, recent_messages=2, summarizer=flaky, summarize_every=2)
    entry = await provider.write([user(f"m{i}") for i in range(5)], session_id="s")
    assert len(entry.messages) == 5  # stored although the summarizer failed
    assert await mem.summary(session_id="s") is None
    # The next write retries, although the session was already due: also from
    # another process (another provider object).
    restarted = SummarizingMemory(mem, recent_messages=2, summarizer=flaky, summarize_every=2)
    await restarted.write([user("m5")], session_id="s")
    summary = await mem.summary(session_id="s")
    assert summary is not None and summary.text == "the user talked about orders"
    assert flaky.calls == 2
    assert await mem.redis.zscore(mem.layout.pending("default"), "s") is None


async def test_summarizing_memory_waits_for_tool_results(mem: Memory) -> None:
    provider = SummarizingMemory(
        mem, recent_messages=0, summarizer=TruncationSummarizer(), summarize_every=1
    )
    await provider.write([user("Look up order A-1014.")], session_id="s")
    await provider.write(
        [calls(ToolCall(id="c1", name="find_order", arguments={"id": "A-1014"}))],
        session_id="s",
    )
    summary = await mem.summary(session_id="s")
    assert summary is not None and summary.message_count == 1  # the call waits
    await provider.write(
        [result("c1", '{"status": "shipped"}'), answer("Shipped.")], session_id="s"
    )
    summary = await mem.summary(session_id="s")
    assert summary is not None and summary.message_count == 4
    assert "find_order" in summary.text and "Shipped." in summary.text
    assert await mem.redis.zscore(mem.layout.pending("default"), "s") is None


async def test_summarizing_memory_without_summarizer_uses_the_workers(
    memory_factory: MemoryFactory,
) -> None:
    from redismem.workers.inprocess import InProcessWorker

    url = f"memory://t-{uuid.uuid4().hex}"
    memory = await memory_factory(url, summarize_delay=0.0)
    provider = SummarizingMemory(memory, recent_messages=2, summarize_every=3)
    worker = InProcessWorker(
        url, summarizer=KeyPointsSummarizer(), namespaces=[memory.layout.namespace]
    )
    await worker.start()
    try:
        await provider.write(
            [user("I live in Lyon."), answer("Noted."), user("I prefer trains.")],
            session_id="s",
        )
        await provider.write([answer("We decided: train to Paris."), user("ok")], session_id="s")
        deadline = time.monotonic() + 10
        while await memory.summary(session_id="s") is None:
            assert time.monotonic() < deadline, "the worker did not summarize"
            await asyncio.sleep(0.02)
    finally:
        # arq 0.28's Worker.close() calls redis-py's deprecated Redis.close().
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Call to deprecated close", DeprecationWarning)
            await worker.aclose()
    history = await provider.read(session_id="s")
    assert history[0].role == "system" and "Lyon" in history[0].content
    assert [m.content for m in history[1:]][-2:] == ["We decided: train to Paris.", "ok"]


async def test_summarizing_memory_reads_tagged_messages_after_the_summary(mem: Memory) -> None:
    provider = SummarizingMemory(
        mem, recent_messages=2, summarizer=KeyPointsSummarizer(), summarize_every=2
    )
    for i in range(4):
        topic = "billing" if i % 2 else "weather"
        await provider.write([user(f"{topic} {i}?")], session_id="s", tags={"topic": topic})
    history = await provider.read(session_id="s", tags={"topic": "billing"})
    assert history[0].role == "system"
    assert [m.content for m in history[1:]] == ["billing 3?"]


# -- CombinedProvider ---------------------------------------------------------------


async def test_composite_over_one_memory_writes_once_and_merges(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory()
    summarizing = SummarizingMemory(
        memory, recent_messages=3, summarizer=KeyPointsSummarizer(), summarize_every=4
    )
    recent = BufferMemory(memory, max_messages=4)
    composite = CombinedProvider([summarizing, recent])
    run = support_run()
    entry = await composite.write(run, session_id="s", agent_name="support")
    assert entry is not None and len(entry.messages) == len(run)
    await composite.write([user("and my invoice?")], session_id="s")
    entries = await composite.entries(session_id="s")
    assert len(entries) == 2  # one write each, not one per provider

    merged = await composite.read(session_id="s")
    assert merged[0].role == "system" and merged[0].id is None  # the summary first
    ids = [int(m.id) for m in merged[1:] if m.id]
    assert ids == sorted(set(ids))  # write order, no duplicates
    assert merged[-1].content == "and my invoice?"
    assert_no_split_groups(merged)

    concat = await CombinedProvider([recent, summarizing], merge="concat").read(session_id="s")
    assert concat[: len(await recent.read(session_id="s"))] == await recent.read(session_id="s")
    assert len({(m.id, m.content) for m in concat}) == len(concat)

    priority = CombinedProvider([recent, summarizing], merge="priority")
    assert await priority.read(session_id="s") == await recent.read(session_id="s")

    await composite.clear(session_id="s")
    assert await memory.read(session_id="s") == []


async def test_composite_writes_every_distinct_store(mem: Memory) -> None:
    # In the test's namespace: on the cluster backend its jobs go to the shared
    # test server (REDISMEM_QUEUE_URL), whose teardown deletes them by namespace.
    other = await Memory.connect(
        f"memory://t-{uuid.uuid4().hex}", namespace=f"{mem.layout.namespace}-other"
    )
    try:
        custom = ListProvider([])
        composite = CombinedProvider([BufferMemory(mem), BufferMemory(other), custom])
        await composite.write([user("hello")], session_id="s")
        assert [m.content for m in await mem.read(session_id="s")] == ["hello"]
        assert [m.content for m in await other.read(session_id="s")] == ["hello"]
        assert [[m.content for m in batch] for batch in custom.written] == [["hello"]]
        # Equal ids from two stores are not duplicates: the messages differ.
        await other.write([user("only in the other store")], session_id="t")
        await mem.write([user("only in the first store")], session_id="t")
        merged = await CombinedProvider([BufferMemory(mem), BufferMemory(other)]).read(
            session_id="t"
        )
        assert {m.content for m in merged} == {"only in the first store", "only in the other store"}
        # Mirrored messages (same id, same content) are one.
        both = await CombinedProvider([BufferMemory(mem), BufferMemory(other)]).read(session_id="s")
        assert [m.content for m in both] == ["hello"]
    finally:
        await other.aclose()


async def test_priority_falls_back_to_the_next_provider(mem: Memory) -> None:
    empty = BufferMemory(mem)
    fallback = ListProvider([user("from the fallback")])
    composite = CombinedProvider([empty, fallback], merge="priority")
    assert [m.content for m in await composite.read(session_id="s")] == ["from the fallback"]
    await mem.write([user("stored")], session_id="s")
    assert [m.content for m in await composite.read(session_id="s")] == ["stored"]


async def test_composite_raises_a_providers_write_error_after_trying_all(mem: Memory) -> None:
    class Broken(ListProvider):
        async def write(self, messages: Any, **kwargs: Any) -> MemoryEntry | None:
            raise RuntimeError("disk full")

    composite = CombinedProvider([Broken([]), BufferMemory(mem)])
    with pytest.raises(RuntimeError, match="disk full"):
        await composite.write([user("hi")], session_id="s")
    assert [m.content for m in await mem.read(session_id="s")] == ["hi"]


# -- merge_messages properties -----------------------------------------------------


def _stored(history: list[Message]) -> list[Message]:
    """``history`` as a store returns it: ids and write times, some shared by an entry."""
    start = datetime(2024, 5, 1, tzinfo=UTC)
    return [
        m.model_copy(
            update={
                "id": f"{i + 1:012d}",
                "created_at": start + timedelta(milliseconds=(i // 3) * 10),
            }
        )
        for i, m in enumerate(history)
    ]


def _unit_starts(messages: Sequence[Message]) -> list[int]:
    starts = []
    in_group = False
    for i, m in enumerate(messages):
        if m.role == "tool" and in_group:
            continue
        starts.append(i)
        in_group = m.role == "assistant" and bool(m.tool_calls)
    return [*starts, len(messages)]


@st.composite
def provider_views(draw: st.DrawFn) -> tuple[list[Message], list[list[Message]]]:
    """One stored history and what 1-4 providers return of it: whole-group windows,
    sometimes with a summary system message first."""
    history = _stored(draw(conversations(max_turns=6)))
    starts = _unit_starts(history)
    views = []
    for index in range(draw(st.integers(1, 4))):
        a, b = sorted(draw(st.lists(st.sampled_from(starts), min_size=2, max_size=2)))
        view = history[a:b]
        if draw(st.booleans()):
            view = [Message(role="system", content=f"summary {index % 2}"), *view]
        views.append(view)
    return history, views


def _key(m: Message) -> tuple[Any, ...]:
    return (m.id, m.role, m.content, m.tool_call_id)


@PROPERTY
@given(data=provider_views(), mode=st.sampled_from(MERGE_MODES))
def test_merge_has_no_duplicates_and_follows_its_mode(
    data: tuple[list[Message], list[list[Message]]], mode: Any
) -> None:
    history, views = data
    merged = merge_messages(views, mode)
    keys = [_key(m) for m in merged]
    assert len(keys) == len(set(keys)), "duplicates"
    assert_no_split_groups(merged)
    position = {_key(m): i for i, m in enumerate(history)}
    union = {_key(m) for view in views for m in view}
    if mode == "priority":
        first = next((v for v in views if v), [])
        assert merged == first
        return
    assert set(keys) == union  # nothing lost (the views hold no orphans)
    if mode == "concat":
        # Provider order: the order of first appearance across the lists.
        first_seen: list[tuple[Any, ...]] = []
        for view in views:
            for m in view:
                if _key(m) not in first_seen:
                    first_seen.append(_key(m))
        assert keys == first_seen
    else:
        summaries = [k for k in keys if k[0] is None]
        assert keys[: len(summaries)] == summaries  # summaries first
        stored = [position[k] for k in keys[len(summaries) :]]
        assert stored == sorted(stored)  # write order


# -- docs --------------------------------------------------------------------------


def test_the_memory_types_page_runs() -> None:
    """Every python snippet of docs/memory-types.md runs as written."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 6
    for number, code in enumerate(blocks):
        namespace: dict[str, Any] = {"__name__": f"memory_types_{number}"}
        exec(compile(code, f"{DOCS.name}[{number}]", "exec"), namespace)


@pytest.mark.parametrize("kind", ["buffer", "summarizing"])
async def test_provider_writes_with_a_write_id_are_exactly_once(make_memory, kind):
    mem = await make_memory()
    provider = BufferMemory(mem) if kind == "buffer" else SummarizingMemory(mem, recent_messages=4)
    message = {"role": "user", "content": "book the evening flight"}
    first = await provider.write([message], session_id="s", write_id="turn-7")
    again = await provider.write([message], session_id="s", write_id="turn-7")
    assert [m.id for m in again.messages] == [m.id for m in first.messages]
    assert [m.content for m in await mem.read(session_id="s")] == ["book the evening flight"]
