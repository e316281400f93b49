"""``redismem.adapters.llamaindex``: a LlamaIndex chat store over sessions, on a
real Redis and on the embedded backend: round trips (roles, tool calls, content
blocks, unicode), the store's methods, and chat-engine runs on a stub LLM
through ``ChatMemoryBuffer``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from conftest import MemoryFactory
from helpers import session_ttls
from llama_index.core.agent.workflow import ReActAgent
from llama_index.core.base.llms.types import ImageBlock, TextBlock, ToolCallBlock
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import (
    ChatMessage,
    CompletionResponse,
    CustomLLM,
    LLMMetadata,
    MockLLM,
)
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.memory import ChatMemoryBuffer, ChatSummaryMemoryBuffer
from llama_index.core.storage.chat_store import SimpleChatStore
from llama_index.core.tools import FunctionTool

from redismem import ClientClosed, InvalidInput, Memory
from redismem.adapters.llamaindex import (
    METADATA_KEY,
    RedisMemChatStore,
    from_llamaindex,
    to_llamaindex,
)

StoreFactory = Callable[..., RedisMemChatStore]


@pytest_asyncio.fixture(loop_scope="function")
async def stores(make_memory: MemoryFactory) -> AsyncIterator[StoreFactory]:
    """``stores(memory, user_id=...)``; closes their sync twins at teardown."""
    made: list[RedisMemChatStore] = []

    def make(memory: Memory, user_id: str = "default", **kwargs: Any) -> RedisMemChatStore:
        store = RedisMemChatStore(memory, user_id, **kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()


def tool_turn() -> list[ChatMessage]:
    """A user question, an OpenAI-style tool call, its results, the answer."""
    return [
        ChatMessage(role="user", content="Météo à Oslo et à 東京 ? 🌧"),
        ChatMessage(
            role="assistant",
            content="",
            additional_kwargs={
                "tool_calls": [
                    {
                        "id": "call-1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    },
                    {
                        "id": "call-2",
                        "type": "function",
                        "function": {"name": "weather", "arguments": {"city": "東京"}},
                    },
                ]
            },
        ),
        ChatMessage(
            role="tool",
            content="4 °C",
            additional_kwargs={"tool_call_id": "call-1", "name": "weather"},
        ),
        ChatMessage(
            role="tool",
            content="12 °C",
            additional_kwargs={"tool_call_id": "call-2", "name": "weather"},
        ),
        ChatMessage(
            role="assistant", content="Oslo 4 °C, 東京 12 °C.", additional_kwargs={"x": [1]}
        ),
    ]


def other_shapes() -> list[ChatMessage]:
    """Roles redismem has no name for, content blocks, ToolCallBlocks, opaque kwargs."""
    return [
        ChatMessage(role="chatbot", content="I am Cohere-shaped."),
        ChatMessage(role="model", content="I am Gemini-shaped."),
        ChatMessage(
            role="assistant",
            blocks=[
                TextBlock(text="Looking it up."),
                ToolCallBlock(tool_call_id="tc-9", tool_name="search", tool_kwargs={"q": "ß"}),
            ],
        ),
        ChatMessage(role="function", content="found", additional_kwargs={"name": "search"}),
        ChatMessage(
            role="user",
            blocks=[TextBlock(text="What is this?"), ImageBlock(url="https://x.test/a.png")],
        ),
        # Image bytes: LlamaIndex keeps them base64-encoded, as JSON text.
        ChatMessage(role="user", blocks=[ImageBlock(image=b"\x89PNG\r\n\x1a\n\x00\xff")]),
        ChatMessage(role="assistant", blocks=[]),  # content None
        ChatMessage(role="user", content=""),
        ChatMessage(
            role="assistant",
            content="opaque",
            additional_kwargs={"tool_calls": [{"id": "z", "index": 0}], "name": 7},
        ),
    ]


async def test_round_trip_is_exact(make_memory: MemoryFactory, stores: StoreFactory) -> None:
    mem = await make_memory()
    store = stores(mem, "alice", agent_name="li", tags={"app": "x"})
    sent = tool_turn() + other_shapes()
    await store.aset_messages("s1", sent)
    assert await store.aget_messages("s1") == sent
    assert len(await mem.entries(session_id="s1", user_id="alice")) == 1

    stored = await mem.read(session_id="s1", user_id="alice")
    assert [m.role for m in stored] == [
        *("user", "assistant", "tool", "tool", "assistant"),
        *("assistant", "assistant", "assistant", "tool", "user", "user", "assistant", "user"),
        "assistant",
    ]
    # Tool calls are redismem tool calls (kept with their results by reads).
    assert [(c.id, c.name, c.arguments) for c in stored[1].tool_calls] == [
        ("call-1", "weather", '{"city": "Oslo"}'),
        ("call-2", "weather", {"city": "東京"}),
    ]
    assert stored[1].metadata == {}
    assert [(m.tool_call_id, m.name, m.metadata) for m in stored[2:4]] == [
        ("call-1", "weather", {}),
        ("call-2", "weather", {}),
    ]
    assert stored[0].content == "Météo à Oslo et à 東京 ? 🌧"
    assert stored[0].metadata == {}  # a plain message carries no metadata
    assert stored[5].metadata == {METADATA_KEY: {"role": "chatbot"}}
    assert [(c.id, c.name, c.arguments) for c in stored[7].tool_calls] == [
        ("tc-9", "search", {"q": "ß"})
    ]
    assert stored[7].content == "Looking it up."
    assert stored[9].content == "What is this?"
    assert to_llamaindex(stored[0]) == sent[0]


async def test_system_and_developer_messages_are_stored(
    make_memory: MemoryFactory, stores: StoreFactory
) -> None:
    # An adapter stores exactly what its framework gives it, whatever the
    # Memory's store_system_messages (off here).
    run = [
        ChatMessage(role="system", content="Be terse."),
        ChatMessage(role="developer", content="No emojis."),
        ChatMessage(role="user", content="hi"),
    ]
    mem = await make_memory()
    store = stores(mem)
    await store.aset_messages("s", run)
    assert await store.aget_messages("s") == run
    await asyncio.to_thread(store.add_message, "s", run[0])
    assert await asyncio.to_thread(store.get_messages, "s") == [*run, run[0]]
    assert [m.role for m in await mem.read(session_id="s")] == [
        "system",
        "system",
        "user",
        "system",
    ]


async def test_a_summary_buffer_keeps_its_summary_as_on_llamaindexs_own(
    make_memory: MemoryFactory, stores: StoreFactory
) -> None:
    # ChatSummaryMemoryBuffer rewrites the store as [system summary, *recent]:
    # the summary must be stored, as SimpleChatStore keeps it.
    mem = await make_memory()
    turns = [
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"message number {i}")
        for i in range(8)
    ]

    def run(store: Any) -> tuple[list[ChatMessage], list[ChatMessage]]:
        buffer = ChatSummaryMemoryBuffer.from_defaults(
            chat_store=store, chat_store_key="s", llm=MockLLM(max_tokens=4), token_limit=30
        )
        for message in turns:
            buffer.put(message)
        return buffer.get(), buffer.get_all()

    theirs = await asyncio.to_thread(run, SimpleChatStore())
    ours = await asyncio.to_thread(run, stores(mem))
    assert theirs[0][0].role.value == "system"  # the summary
    assert len(theirs[0]) < len(turns)  # some turns were summarized
    assert ours == theirs
    assert (await mem.read(session_id="s"))[0].role == "system"


async def test_deleting_a_tool_call_keeps_its_results_as_on_llamaindexs_own(
    make_memory: MemoryFactory, stores: StoreFactory
) -> None:
    # Unbounded reads return exactly what was stored, even a tool result
    # whose call was deleted.
    history = [
        ChatMessage(
            role="assistant",
            content="",
            additional_kwargs={
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]
            },
        ),
        ChatMessage(role="tool", content="result", additional_kwargs={"tool_call_id": "c1"}),
        ChatMessage(role="assistant", content="done"),
    ]
    theirs = SimpleChatStore()
    theirs.set_messages("k", list(history))  # it keeps (and pops from) the list it is given
    theirs.delete_message("k", 0)
    store = stores(await make_memory())
    await store.aset_messages("k", history)
    assert await store.adelete_message("k", 0) == history[0]
    assert await store.aget_messages("k") == theirs.get_messages("k") == history[1:]
    # Sync, and once more: the next rewrite keeps it too.
    assert await asyncio.to_thread(store.delete_message, "k", 1) == history[2]
    assert await asyncio.to_thread(store.get_messages, "k") == [history[1]]


async def test_a_chat_is_kept_until_deleted_unless_a_ttl_is_given(
    make_memory: MemoryFactory, stores: StoreFactory, raw: Any
) -> None:
    # LlamaIndex's own Redis chat store keeps a chat until it is deleted: so
    # does the adapter, whatever the Memory's ttl (an hour here).
    mem = await make_memory(ttl=3600)
    kept = stores(mem, "alice")
    message = ChatMessage(role="user", content="hi")
    await kept.async_add_message("kept-chat", message)
    await asyncio.to_thread(kept.add_message, "kept-chat", message)
    await asyncio.to_thread(kept.get_messages, "kept-chat")
    assert await kept.aget_messages("kept-chat") == [message, message]
    assert set(await session_ttls(mem, raw, "kept-chat", "alice")) == {-1}

    expiring = stores(mem, "alice", ttl=120)
    await expiring.aset_messages("short-chat", [message])
    await asyncio.to_thread(expiring.add_message, "short-chat", message)
    ttls = await session_ttls(mem, raw, "short-chat", "alice")
    assert all(60_000 < t <= 130_000 for t in ttls), ttls
    with pytest.raises(InvalidInput, match="ttl"):
        RedisMemChatStore(mem, ttl=-1)


class _Opaque:
    pass


@pytest.mark.parametrize(
    "bad",
    [
        ChatMessage(role="user", content="x", additional_kwargs={"blob": b"\x00\xff"}),
        ChatMessage(role="user", content="x", additional_kwargs={"obj": _Opaque()}),
        ChatMessage(role="user", content="x", additional_kwargs={"n": float("inf")}),
        ChatMessage(role="user", content="x", additional_kwargs={"t": (1, 2)}),
        ChatMessage(role="assistant", content="x", additional_kwargs={"tool_calls": [_Opaque()]}),
    ],
    ids=["bytes", "object", "inf", "tuple", "sdk-tool-call"],
)
async def test_what_cannot_round_trip_is_rejected_and_nothing_is_written(
    make_memory: MemoryFactory, stores: StoreFactory, bad: ChatMessage
) -> None:
    mem = await make_memory()
    store = stores(mem)
    await store.async_add_message("s", ChatMessage(role="user", content="kept"))
    with pytest.raises(InvalidInput, match="messages\\[1\\]"):
        await store.aset_messages("s", [ChatMessage(role="user", content="ok"), bad])
    with pytest.raises(InvalidInput):
        await store.async_add_message("s", bad)
    # Rejected before anything was cleared or written.
    assert await store.aget_messages("s") == [ChatMessage(role="user", content="kept")]


async def test_bad_arguments_are_typed(make_memory: MemoryFactory, stores: StoreFactory) -> None:
    mem = await make_memory()
    store = stores(mem)
    with pytest.raises(InvalidInput, match="list of LlamaIndex ChatMessage"):
        await store.aset_messages("s", ChatMessage(content="x"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="must be a LlamaIndex ChatMessage"):
        await store.async_add_message("s", {"role": "user", "content": "x"})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="session_id"):
        await store.aget_messages("")
    with pytest.raises(InvalidInput, match="idx must be an int"):
        await store.adelete_message("s", "0")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="expected a Memory"):
        RedisMemChatStore(object())  # type: ignore[arg-type]


async def test_store_methods(make_memory: MemoryFactory, stores: StoreFactory) -> None:
    mem = await make_memory()
    store = stores(mem, "alice")
    other_user = stores(mem, "bob")

    def msg(text: str) -> ChatMessage:
        return ChatMessage(role="user", content=text)

    assert await store.aget_messages("a") == []
    await store.aset_messages("a", [msg("1"), msg("2")])
    await store.async_add_message("a", msg("3"))
    await store.async_add_message("b", msg("only"))
    await other_user.async_add_message("c", msg("bob's"))
    assert [m.content for m in await store.aget_messages("a")] == ["1", "2", "3"]
    assert sorted(await store.aget_keys()) == ["a", "b"]
    assert await other_user.aget_keys() == ["c"]

    # set_messages replaces (and with [] just clears).
    await store.aset_messages("a", [msg("x"), msg("y"), msg("z"), msg("w")])
    assert [m.content for m in await store.aget_messages("a")] == ["x", "y", "z", "w"]

    assert await store.adelete_message("a", 1) == msg("y")
    assert [m.content for m in await store.aget_messages("a")] == ["x", "z", "w"]
    assert await store.adelete_message("a", -1) == msg("w")
    assert await store.adelete_message("a", 5) is None
    assert await store.adelete_message("a", -3) is None
    assert await store.adelete_last_message("a") == msg("z")
    assert await store.adelete_last_message("a") == msg("x")
    assert await store.adelete_last_message("a") is None
    assert await store.aget_keys() == ["b"]

    assert await store.adelete_messages("b") == [msg("only")]
    assert await store.adelete_messages("b") is None
    await store.aset_messages("c", [])
    assert await store.aget_keys() == []
    assert await other_user.aget_messages("c") == [msg("bob's")]


async def test_sync_methods(make_memory: MemoryFactory, stores: StoreFactory) -> None:
    mem = await make_memory()
    store = stores(mem)
    turn = tool_turn()

    def sync_session() -> list[Any]:
        store.set_messages("s", turn[:2])
        store.add_message("s", turn[2])
        got = store.get_messages("s")
        keys = store.get_keys()
        last = store.delete_last_message("s")
        first = store.delete_message("s", 0)
        rest = store.delete_messages("s")
        return [got, keys, last, first, rest, store.get_messages("s")]

    got, keys, last, first, rest, after = await asyncio.to_thread(sync_session)
    assert got == turn[:3]
    assert keys == ["s"]
    assert (last, first, rest, after) == (turn[2], turn[0], [turn[1]], [])

    # The sync and async paths see the same session.
    await store.aset_messages("s", turn)
    assert await asyncio.to_thread(store.get_messages, "s") == turn

    # Inside a running event loop (a notebook cell) they work too: they block
    # this loop while the background loop runs them.
    asyncio.get_running_loop()
    assert sync_session() == [turn[:3], ["s"], turn[2], turn[0], [turn[1]], []]
    store.set_messages("s", turn)
    assert store.get_messages("s") == await store.aget_messages("s") == turn
    store.close()
    assert store.get_keys() == ["s"]

    await mem.aclose()
    with pytest.raises(ClientClosed):
        await asyncio.to_thread(store.get_keys)


async def test_chat_engine_runs_on_chat_memory_buffer(
    make_memory: MemoryFactory, stores: StoreFactory
) -> None:
    mem = await make_memory()
    store = stores(mem, "alice")
    memory = ChatMemoryBuffer.from_defaults(
        chat_store=store, chat_store_key="s1", token_limit=10_000
    )
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=3), memory=memory)

    assert str(await engine.achat("Capital of Norway?")) == "text text text"
    assert str(await asyncio.to_thread(engine.chat, "And of Peru?")) == "text text text"
    assert str(await engine.achat("Thanks, ßye 👋")) == "text text text"

    stored = await mem.read(session_id="s1", user_id="alice")
    assert [(m.role, m.content) for m in stored] == [
        ("user", "Capital of Norway?"),
        ("assistant", "text text text"),
        ("user", "And of Peru?"),
        ("assistant", "text text text"),
        ("user", "Thanks, ßye 👋"),
        ("assistant", "text text text"),
    ]
    assert len(await mem.entries(session_id="s1", user_id="alice")) == 6  # one per put
    assert await memory.aget_all() == [to_llamaindex(m) for m in stored]

    # A new buffer on the same session (another process, another agent) sees it all.
    again = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="s1")
    assert len(await again.aget_all()) == 6
    await memory.areset()
    assert await mem.read(session_id="s1", user_id="alice") == []


async def test_chat_memory_buffer_sync_inside_a_running_loop(
    make_memory: MemoryFactory, stores: StoreFactory
) -> None:
    # A notebook cell: an event loop runs in this thread, and LlamaIndex's
    # sync API is called from it.
    asyncio.get_running_loop()
    mem = await make_memory()
    buffer = ChatMemoryBuffer.from_defaults(chat_store=stores(mem, "alice"), chat_store_key="nb")
    buffer.put(ChatMessage(role="user", content="Capital of Norway?"))
    buffer.put_messages([ChatMessage(role="assistant", content="Oslo.")])
    assert [m.content for m in buffer.get()] == ["Capital of Norway?", "Oslo."]
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=3), memory=buffer)
    assert str(engine.chat("And of Peru?")) == "text text text"
    assert len(buffer.get_all()) == 4
    stored = await mem.read(session_id="nb", user_id="alice")
    assert [m.content for m in stored] == [
        "Capital of Norway?",
        "Oslo.",
        "And of Peru?",
        "text text text",
    ]
    buffer.reset()
    assert await mem.read(session_id="nb", user_id="alice") == []


async def test_buffer_with_tool_calls_and_a_small_budget(
    make_memory: MemoryFactory, stores: StoreFactory
) -> None:
    mem = await make_memory()
    store = stores(mem)
    memory = ChatMemoryBuffer.from_defaults(
        chat_store=store, chat_store_key="agent", token_limit=40
    )
    turn = tool_turn()
    await memory.aput_messages(turn)
    await memory.aput(ChatMessage(role="user", content="word " * 20))
    assert await memory.aget_all() == [*turn, ChatMessage(role="user", content="word " * 20)]
    window = await memory.aget()
    assert window and window[0].role.value == "user"  # never starts on a tool result
    # redismem's own reads keep the tool call with its results too.
    tail = await mem.read(session_id="agent", limit=4)
    assert tail[0].role != "tool"


async def test_buffer_from_defaults_with_history_and_set(
    make_memory: MemoryFactory, stores: StoreFactory
) -> None:
    mem = await make_memory()
    store = stores(mem)
    seed = [ChatMessage(role="user", content="a"), ChatMessage(role="assistant", content="b")]
    memory = await asyncio.to_thread(
        ChatMemoryBuffer.from_defaults, chat_history=seed, chat_store=store, chat_store_key="k"
    )
    assert await memory.aget_all() == seed
    await memory.aset(seed[:1])
    assert await store.aget_messages("k") == seed[:1]
    assert store.model_dump()["user_id"] == "default"


def test_conversion_helper_names_the_message() -> None:
    assert from_llamaindex(ChatMessage(role="user", content="x")).content == "x"
    with pytest.raises(InvalidInput, match="messages\\[4\\]"):
        from_llamaindex(ChatMessage(content="x", additional_kwargs={"b": b"\x00"}), 4)


class ScriptedLLM(CustomLLM):
    """A stub LLM answering from a script, recording the prompts it was given."""

    replies: list[str]
    prompts: list[str]

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=False)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.replies.pop(0))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        self.prompts.append(prompt)
        text = self.replies.pop(0)
        yield CompletionResponse(text=text, delta=text)


def weather(city: str) -> str:
    """The weather in a city."""
    return f"4 C and rain in {city}"


async def run_agent(buffer: ChatMemoryBuffer, question: str) -> tuple[str, ScriptedLLM]:
    llm = ScriptedLLM(
        replies=[
            'Thought: I need the weather.\nAction: weather\nAction Input: {"city": "Oslo"}',
            "Thought: I can answer without using any more tools.\nAnswer: Take an umbrella.",
        ],
        prompts=[],
    )
    agent = ReActAgent(tools=[FunctionTool.from_defaults(weather)], llm=llm)
    answer = await agent.run(question, memory=buffer)
    return str(answer), llm


# LlamaIndex's tools and agents use APIs pydantic and its workflows deprecate.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20")
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211")
@pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning")
async def test_a_react_agent_with_a_tool_runs_on_the_store_as_on_llamaindexs_own(
    make_memory: MemoryFactory, stores: StoreFactory
) -> None:
    mem = await make_memory()
    ours = ChatMemoryBuffer.from_defaults(chat_store=stores(mem, "alice"), chat_store_key="s1")
    theirs = ChatMemoryBuffer.from_defaults(chat_store=SimpleChatStore(), chat_store_key="s1")
    for buffer in (ours, theirs):
        answer, llm = await run_agent(buffer, "Weather in Oslo? ✈")
        assert answer == "Take an umbrella."
        assert "4 C and rain in Oslo" in llm.prompts[-1]  # the tool ran
    # The agent left the same memory in our store as in LlamaIndex's own.
    assert await ours.aget_all() == await theirs.aget_all()
    stored = await mem.read(session_id="s1", user_id="alice")
    assert stored[0].content == "Weather in Oslo? ✈" and len(stored) == len(await ours.aget_all())
    # A second run (a new process, a new agent) starts from what is stored.
    again = ChatMemoryBuffer.from_defaults(chat_store=stores(mem, "alice"), chat_store_key="s1")
    _answer, llm = await run_agent(again, "And tomorrow?")
    assert "Weather in Oslo? ✈" in llm.prompts[0]
