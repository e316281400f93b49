"""``redismem.adapters.langchain``: a LangChain chat message history over a session.

``langchain-tests`` (1.1.x) has standard tests for chat models, embeddings,
tools, retrievers, vector stores, caches and key-value stores, but none for
chat message histories, so this is our own round-trip suite, on a real Redis
and on the embedded backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from conftest import MemoryFactory
from helpers import session_ttls
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from redismem import ClientClosed, InvalidInput, Memory
from redismem.adapters.langchain import (
    METADATA_KEY,
    RedisMemChatMessageHistory,
    from_langchain,
    to_langchain,
)
from redismem.models import Message

HistoryFactory = Callable[..., RedisMemChatMessageHistory]


@pytest_asyncio.fixture(loop_scope="function")
async def histories(make_memory: MemoryFactory) -> AsyncIterator[HistoryFactory]:
    """``histories(memory, session_id, ...)``; closes their sync twins at teardown."""
    made: list[RedisMemChatMessageHistory] = []

    def make(memory: Memory, session_id: str = "s1", **kwargs: Any) -> RedisMemChatMessageHistory:
        history = RedisMemChatMessageHistory(memory, session_id, **kwargs)
        made.append(history)
        return history

    yield make
    for history in made:
        await history.aclose()


def conversation() -> list[BaseMessage]:
    """Every field the adapter maps, with unicode and nested JSON."""
    return [
        HumanMessage(
            "Météo à Oslo et à 東京 ? 🌧",
            id="m-1",
            name="alice",
            additional_kwargs={"client": {"locale": "fr-FR", "retries": [1, 2.5, None]}},
        ),
        AIMessage(
            "",
            id="m-2",
            tool_calls=[
                {"name": "weather", "args": {"city": "Oslo", "days": 3}, "id": "call-1"},
                {"name": "weather", "args": {"city": "東京", "opts": {"units": "C"}}, "id": "c-2"},
            ],
            response_metadata={"model_name": "stub", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
        ),
        ToolMessage("4 °C, rain", tool_call_id="call-1", name="weather", artifact={"raw": [4]}),
        ToolMessage("timeout", tool_call_id="c-2", status="error"),
        AIMessage(
            [
                {"type": "text", "text": "Oslo: 4 °C. "},
                {"type": "text", "text": "東京: unknown."},
            ],
            id="m-5",
            invalid_tool_calls=[
                {
                    "name": "retry",
                    "args": "{not json",
                    "id": "c-3",
                    "error": "bad json",
                    "type": "invalid_tool_call",
                }
            ],
        ),
        HumanMessage([{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}, "?"]),
    ]


async def test_round_trip_is_exact_and_one_entry(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    mem = await make_memory()
    history = histories(mem, "trip", user_id="alice", agent_name="planner", tags={"t": "x"})
    sent = conversation()
    await history.aadd_messages(sent)

    assert await history.aget_messages() == sent
    entries = await mem.entries(session_id="trip", user_id="alice")
    assert len(entries) == 1  # one aadd_messages, one atomic entry
    assert entries[0].metadata.agent_name == "planner"
    assert entries[0].metadata.tags == {"t": "x"}

    stored = await mem.read(session_id="trip", user_id="alice")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    assert stored[0].name == "alice"
    assert stored[0].content == "Météo à Oslo et à 東京 ? 🌧"
    assert stored[0].metadata[METADATA_KEY]["id"] == "m-1"
    assert [(c.id, c.name, c.arguments) for c in stored[1].tool_calls] == [
        ("call-1", "weather", {"city": "Oslo", "days": 3}),
        ("c-2", "weather", {"city": "東京", "opts": {"units": "C"}}),
    ]
    assert [m.tool_call_id for m in stored[2:4]] == ["call-1", "c-2"]
    # List content: the blocks in metadata, their text as the content.
    assert stored[4].content == "Oslo: 4 °C. 東京: unknown."
    assert stored[5].content == "?"
    # A plain message carries no metadata at all.
    await history.aadd_messages([HumanMessage("plain")])
    last = (await mem.read(session_id="trip", user_id="alice", limit=1))[0]
    assert last.metadata == {}
    assert (await history.aget_messages())[-1] == HumanMessage("plain")


async def test_appends_keep_order_and_calls_are_never_interleaved(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    mem = await make_memory()
    writers = [histories(mem, "busy") for _ in range(8)]

    def turn(i: int) -> list[BaseMessage]:
        return [
            AIMessage("", tool_calls=[{"name": "f", "args": {"i": i}, "id": f"c{i}"}]),
            ToolMessage(f"r{i}", tool_call_id=f"c{i}"),
        ]

    await asyncio.gather(*(w.aadd_messages(turn(i)) for i, w in enumerate(writers)))
    got = await writers[0].aget_messages()
    assert len(got) == 16
    for call, result in zip(got[::2], got[1::2], strict=True):
        assert isinstance(call, AIMessage) and isinstance(result, ToolMessage)
        assert result.tool_call_id == call.tool_calls[0]["id"]
    assert sorted(m.tool_calls[0]["args"]["i"] for m in got[::2]) == list(range(8))


async def test_limit_and_max_tokens_never_split_a_tool_call(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    mem = await make_memory()
    full = histories(mem, "s")
    sent: list[BaseMessage] = [
        HumanMessage("weather?"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": "w"}]),
        ToolMessage("sunny", tool_call_id="w"),
        AIMessage("It is sunny."),
    ]
    await full.aadd_messages(sent)
    assert await histories(mem, "s", limit=3).aget_messages() == sent[1:]
    # The last two would start with a tool result cut off from its call: dropped.
    assert await histories(mem, "s", limit=2).aget_messages() == sent[3:]
    budget = histories(mem, "s", max_tokens=1_000_000)
    assert await budget.aget_messages() == sent
    small = await histories(mem, "s", max_tokens=12).aget_messages()
    assert small == sent[len(sent) - len(small) :]
    assert not small or not isinstance(small[0], ToolMessage)


async def test_system_messages_are_stored(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    # An adapter stores exactly what its framework gives it: a SystemMessage
    # too, whatever the Memory's store_system_messages (which is off here).
    mem = await make_memory()
    run = [SystemMessage("Be terse.", id="sys"), HumanMessage("hi")]
    history = histories(mem, "s")
    await history.aadd_messages(run)
    assert await history.aget_messages() == run
    assert [m.role for m in await mem.read(session_id="s")] == ["system", "user"]
    await asyncio.to_thread(history.add_messages, [SystemMessage("Now verbose.")])
    assert await asyncio.to_thread(lambda: history.messages) == [
        *run,
        SystemMessage("Now verbose."),
    ]


async def test_a_leading_tool_result_reads_back(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    # Without a limit a read returns exactly what was stored, even a tool
    # result whose call is not in the session.
    mem = await make_memory()
    history = histories(mem, "s")
    sent = [ToolMessage("r", tool_call_id="c0"), HumanMessage("next")]
    await history.aadd_messages(sent)
    assert await history.aget_messages() == sent
    await asyncio.to_thread(history.add_messages, [AIMessage("ok")])
    assert await asyncio.to_thread(lambda: history.messages) == [*sent, AIMessage("ok")]
    # A window is still cut at a tool boundary (the call may have been cut off).
    assert await histories(mem, "s", limit=3).aget_messages() == [*sent[1:], AIMessage("ok")]


async def test_a_chat_is_kept_until_deleted_unless_a_ttl_is_given(
    make_memory: MemoryFactory, histories: HistoryFactory, raw: Any
) -> None:
    # LangChain's own Redis history keeps a chat until it is deleted: so does
    # the adapter, whatever the Memory's ttl (an hour here).
    mem = await make_memory(ttl=3600)
    kept = histories(mem, "kept-chat", user_id="alice")
    await kept.aadd_messages([HumanMessage("hi")])
    await asyncio.to_thread(kept.add_messages, [AIMessage("hello")])
    assert len(await kept.aget_messages()) == 2
    assert len(await asyncio.to_thread(lambda: kept.messages)) == 2
    assert set(await session_ttls(mem, raw, "kept-chat", "alice")) == {-1}

    # An explicit ttl (seconds) expires the chat that long after its last use.
    expiring = histories(mem, "short-chat", user_id="alice", ttl=120)
    await expiring.aadd_messages([HumanMessage("hi")])
    await asyncio.to_thread(expiring.add_messages, [AIMessage("hello")])
    ttls = await session_ttls(mem, raw, "short-chat", "alice")
    assert all(60_000 < t <= 130_000 for t in ttls), ttls
    with pytest.raises(InvalidInput, match="ttl"):
        RedisMemChatMessageHistory(mem, "s", ttl=0)


async def test_chunks_are_stored_as_messages(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    history = histories(await make_memory())
    chunk = AIMessageChunk("streamed", id="run-1", response_metadata={"finish_reason": "stop"})
    await history.aadd_messages([chunk])
    assert await history.aget_messages() == [
        AIMessage("streamed", id="run-1", response_metadata={"finish_reason": "stop"})
    ]


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (HumanMessage("x", additional_kwargs={"blob": b"\x00"}), "messages\\[1\\]"),
        (HumanMessage("x", response_metadata={"n": float("nan")}), "messages\\[1\\]"),
        (HumanMessage([{"type": "image", "data": b"\x89PNG"}]), "messages\\[1\\]"),
        (AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}]), "has no id"),
        (
            AIMessage("", tool_calls=[{"name": "f", "args": {"t": (1, 2)}, "id": "c"}]),
            "messages\\[1\\]",
        ),
        (ToolMessage("r", tool_call_id="c", artifact=object()), "messages\\[1\\]"),
        (ChatMessage("x", role="critic"), "ChatMessage"),
        (FunctionMessage("x", name="f"), "FunctionMessage"),
        (HumanMessage("x", surprise=1), "would not come back"),
    ],
    ids=[
        "bytes-kwargs",
        "nan-metadata",
        "bytes-block",
        "call-without-id",
        "tuple-args",
        "object-artifact",
        "chat-message",
        "function-message",
        "extra-field",
    ],
)
async def test_what_cannot_round_trip_is_rejected_and_nothing_is_written(
    make_memory: MemoryFactory, histories: HistoryFactory, bad: BaseMessage, match: str
) -> None:
    mem = await make_memory()
    history = histories(mem, "s")
    with pytest.raises(InvalidInput, match=match):
        await history.aadd_messages([HumanMessage("fine"), bad])
    assert await history.aget_messages() == []
    assert await mem.read(session_id="s") == []


async def test_bad_arguments_are_typed(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    mem = await make_memory()
    history = histories(mem, "s")
    with pytest.raises(InvalidInput, match="sequence of LangChain messages"):
        await history.aadd_messages(HumanMessage("not a list"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="must be a LangChain BaseMessage"):
        await history.aadd_messages([{"role": "user", "content": "dict"}])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="session_id"):
        await histories(mem, "").aget_messages()
    with pytest.raises(InvalidInput, match="expected a Memory"):
        RedisMemChatMessageHistory(object(), "s")  # type: ignore[arg-type]
    await history.aadd_messages([])  # nothing to write: no error, no entry
    assert await mem.entries(session_id="s") == []


async def test_messages_written_by_other_means_read_back(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    mem = await make_memory()
    await mem.write(
        [
            {"role": "user", "content": "go", "metadata": {"app": 1}},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "a", "name": "f", "arguments": '{"x": 1}'},
                    {"id": "b", "name": "g", "arguments": "not json"},
                    {"id": "c", "name": "h"},
                ],
            },
            {"role": "tool", "content": "ok", "tool_call_id": "a"},
        ],
        session_id="s",
    )
    human, ai, tool = await histories(mem, "s").aget_messages()
    assert human == HumanMessage("go")
    assert isinstance(ai, AIMessage)
    assert ai.tool_calls == [
        {"name": "f", "args": {"x": 1}, "id": "a", "type": "tool_call"},
        {"name": "h", "args": {}, "id": "c", "type": "tool_call"},
    ]
    assert ai.invalid_tool_calls == [
        {"name": "g", "args": "not json", "id": "b", "error": None, "type": "invalid_tool_call"}
    ]
    assert tool == ToolMessage("ok", tool_call_id="a")
    assert to_langchain(Message(role="user", content="x")) == HumanMessage("x")


async def test_clear(make_memory: MemoryFactory, histories: HistoryFactory) -> None:
    mem = await make_memory()
    history = histories(mem, "s")
    other = histories(mem, "other")
    await history.aadd_messages([HumanMessage("a")])
    await other.aadd_messages([HumanMessage("b")])
    await history.aclear()
    assert await history.aget_messages() == []
    assert await other.aget_messages() == [HumanMessage("b")]
    await history.aclear()  # clearing nothing is fine


async def test_sync_methods_run_on_a_background_loop(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    mem = await make_memory()
    history = histories(mem, "s")
    sent = conversation()

    # From a thread without an event loop (a sync program, a framework's worker thread).
    await asyncio.to_thread(history.add_messages, sent[:2])
    await asyncio.to_thread(history.add_message, sent[2])
    await history.aadd_messages(sent[3:])
    assert await asyncio.to_thread(lambda: history.messages) == sent
    assert await history.aget_messages() == sent
    assert len(await mem.entries(session_id="s")) == 3
    assert "4 °C, rain" in await asyncio.to_thread(str, history)  # LangChain's __str__

    # Inside a running event loop (a notebook cell) they work too: they block
    # this loop while the background loop runs them.
    asyncio.get_running_loop()
    assert history.messages == sent
    history.add_messages([HumanMessage("x")])
    assert history.messages == [*sent, HumanMessage("x")]
    history.clear()
    assert history.messages == []
    assert await history.aget_messages() == []
    await history.aadd_messages(sent)
    # Bad input is rejected, and nothing is written.
    with pytest.raises(InvalidInput):
        history.add_messages([HumanMessage("y"), FunctionMessage("x", name="f")])
    assert history.messages == sent

    # close() releases the background connection; the next sync call reopens one.
    history.close()
    assert history.messages == sent
    await asyncio.to_thread(history.close)
    await asyncio.to_thread(history.clear)
    assert await history.aget_messages() == []
    await asyncio.to_thread(history.add_messages, [HumanMessage("again")])
    assert await history.aget_messages() == [HumanMessage("again")]

    # Closing the Memory passed in closes the sync path too.
    await mem.aclose()
    with pytest.raises(ClientClosed):
        await asyncio.to_thread(lambda: history.messages)


def _chain(model: FakeListChatModel, get_history: Callable[[str], Any]) -> Any:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are terse."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    return RunnableWithMessageHistory(
        prompt | model,
        get_history,
        input_messages_key="question",
        history_messages_key="history",
    )


# LangChain deprecated RunnableWithMessageHistory (and BaseChatMessageHistory
# itself) in 1.6.4 in favour of LangGraph persistence; it is still what drives
# a chat history, so the test runs it.
@pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")
async def test_runnable_with_message_history(
    make_memory: MemoryFactory, histories: HistoryFactory
) -> None:
    mem = await make_memory()
    model = FakeListChatModel(responses=["Oslo.", "Lima.", "Pune."])

    def get_history(session_id: str) -> RedisMemChatMessageHistory:
        return histories(mem, session_id, user_id="alice")

    chain = _chain(model, get_history)
    config: Any = {"configurable": {"session_id": "chat"}}
    first = await chain.ainvoke({"question": "Capital of Norway?"}, config=config)
    assert first.content == "Oslo."
    # Sync, inside this running event loop (as in a notebook cell).
    second = chain.invoke({"question": "Of Peru?"}, config)
    assert second.content == "Lima."
    third = await chain.ainvoke({"question": "A city in India?"}, config=config)
    assert third.content == "Pune."
    seen = await get_history("chat").aget_messages()

    assert [(type(m).__name__, m.content) for m in seen] == [
        ("HumanMessage", "Capital of Norway?"),
        ("AIMessage", "Oslo."),
        ("HumanMessage", "Of Peru?"),
        ("AIMessage", "Lima."),
        ("HumanMessage", "A city in India?"),
        ("AIMessage", "Pune."),
    ]
    stored = await mem.read(session_id="chat", user_id="alice")
    assert [(m.role, m.content) for m in stored] == [
        ("user", "Capital of Norway?"),
        ("assistant", "Oslo."),
        ("user", "Of Peru?"),
        ("assistant", "Lima."),
        ("user", "A city in India?"),
        ("assistant", "Pune."),
    ]
    assert len(await mem.entries(session_id="chat", user_id="alice")) == 3  # one per turn


def test_conversion_helpers_reject_what_they_cannot_store() -> None:
    assert from_langchain(HumanMessage("x")).model_dump(include={"role", "content"}) == {
        "role": "user",
        "content": "x",
    }
    with pytest.raises(InvalidInput, match="messages\\[3\\]"):
        from_langchain(HumanMessage("x", additional_kwargs={"b": b""}), 3)
