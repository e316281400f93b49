"""``redismem.adapters.langgraph``: the LangGraph checkpointer on plain Redis.

* LangGraph's own ``langgraph-checkpoint-conformance`` suite, every test of
  every capability (base and extended), one pytest case each, plus its
  ``validate()`` report, on a real Redis and on the embedded backend;
* a real compiled graph (an agent node and a tool node, the tool asking for
  approval with ``interrupt()``) interrupted, resumed with
  ``Command(resume=...)`` from a new client, and its checkpoint history;
* the same graph run synchronously (``invoke``);
* the Redis side: every key under the thread's hash tag, TTLs set and
  refreshed, ``delete_thread`` and ``clear_all`` leaving nothing, writes
  re-sent stored once, no pickle.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypedDict

import msgpack
import pytest
from conftest import MemoryFactory
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.spec import (
    test_copy_thread,
    test_delete_for_runs,
    test_delete_thread,
    test_get_tuple,
    test_list,
    test_prune,
    test_put,
    test_put_writes,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from redismem import InvalidInput, Memory
from redismem.adapters.langgraph import RedisMemSaver

SUITES: dict[str, Sequence[Callable[[BaseCheckpointSaver[Any]], Awaitable[None]]]] = {
    "put": test_put.ALL_PUT_TESTS,
    "put_writes": test_put_writes.ALL_PUT_WRITES_TESTS,
    "get_tuple": test_get_tuple.ALL_GET_TUPLE_TESTS,
    "list": test_list.ALL_LIST_TESTS,
    "delete_thread": test_delete_thread.ALL_DELETE_THREAD_TESTS,
    "delete_for_runs": test_delete_for_runs.ALL_DELETE_FOR_RUNS_TESTS,
    "copy_thread": test_copy_thread.ALL_COPY_THREAD_TESTS,
    "prune": test_prune.ALL_PRUNE_TESTS,
}
CONFORMANCE = [
    pytest.param(check, id=f"{suite}:{check.__name__}")
    for suite, checks in SUITES.items()
    for check in checks
]


async def keys_of(raw: Any, pattern: str) -> list[bytes]:
    return sorted([k async for k in raw.scan_iter(match=pattern, count=1000)])


def thread_pattern(memory: Memory, thread_id: str) -> str:
    return f"{memory.layout.namespace}:{{lg:{thread_id}}}:*"


# -- the conformance suite ----------------------------------------------------------------


@pytest.mark.parametrize("check", CONFORMANCE)
async def test_conformance(make_memory: MemoryFactory, check: Any) -> None:
    await check(RedisMemSaver(await make_memory()))


@pytest.mark.every_server
async def test_conformance_report(make_memory: MemoryFactory) -> None:
    memory = await make_memory()

    @checkpointer_test(name="RedisMemSaver")
    async def saver() -> Any:
        yield RedisMemSaver(memory)

    report = await validate(saver)
    assert report.passed_all(), report.to_dict()
    assert set(report.results) == set(SUITES)
    assert all(result.detected and result.passed for result in report.results.values())


async def test_conformance_with_ttl(make_memory: MemoryFactory) -> None:
    memory = await make_memory()

    @checkpointer_test(name="RedisMemSaver(ttl=60)")
    async def saver() -> Any:
        yield RedisMemSaver(memory, ttl=60)

    report = await validate(saver)
    assert report.passed_all(), report.to_dict()


# -- a real graph: tool call, interrupt, resume ---------------------------------------------


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@tool
def get_weather(city: str) -> str:
    """The weather in a city (asks a human first)."""
    answer = interrupt({"question": f"look up the weather in {city}?"})
    return f"{city}: 4 °C, rain" if answer == "yes" else "not allowed"


def agent(state: State) -> dict[str, list[AnyMessage]]:
    last = state["messages"][-1]
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(f"Done. {last.content}", id="ai-2")]}
    call = {"name": "get_weather", "args": {"city": "Oslo"}, "id": "call-1"}
    return {"messages": [AIMessage("", tool_calls=[call], id="ai-1")]}


def route(state: State) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def build(saver: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


def check_final(messages: list[Any]) -> None:
    assert [type(m).__name__ for m in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert messages[1].tool_calls[0]["id"] == "call-1"
    assert messages[2].content == "Oslo: 4 °C, rain"
    assert messages[2].tool_call_id == "call-1"
    assert messages[3].content == "Done. Oslo: 4 °C, rain"


def summary(snapshot: Any) -> tuple[Any, ...]:
    """What a history snapshot shows, but the random ids of tool messages."""
    messages = [(type(m).__name__, m.content) for m in snapshot.values.get("messages", [])]
    interrupts = [i.value for task in snapshot.tasks for i in task.interrupts]
    return snapshot.next, snapshot.metadata, messages, interrupts


@pytest.mark.every_server
async def test_graph_interrupt_and_resume(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    config: Any = {"configurable": {"thread_id": "chat-ünï 1"}}
    graph = build(RedisMemSaver(memory))

    first = await graph.ainvoke({"messages": [HumanMessage("Weather in Oslo?", id="h-1")]}, config)
    assert first["__interrupt__"][0].value == {"question": "look up the weather in Oslo?"}
    paused = await graph.aget_state(config)
    assert paused.next == ("tools",)
    assert paused.tasks[0].interrupts[0].value == {"question": "look up the weather in Oslo?"}
    assert [m.id for m in paused.values["messages"]] == ["h-1", "ai-1"]

    # Resume from another client and saver: the state is in Redis, not in the process.
    other = build(RedisMemSaver(await make_memory()))
    final = await other.ainvoke(Command(resume="yes"), config)
    check_final(final["messages"])

    state = await graph.aget_state(config)
    assert state.next == ()
    check_final(state.values["messages"])
    history = [snapshot async for snapshot in graph.aget_state_history(config)]
    steps = [snapshot.metadata["step"] for snapshot in history]
    assert steps == sorted(steps, reverse=True) and steps[-1] == -1
    assert [s.metadata["source"] for s in history][-1] == "input"
    ids = [s.config["configurable"]["checkpoint_id"] for s in history]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    for child, parent in itertools.pairwise(history):
        assert child.parent_config is not None
        assert (
            child.parent_config["configurable"]["checkpoint_id"]
            == (parent.config["configurable"]["checkpoint_id"])
        )
    assert history[-1].parent_config is None
    # The same run on LangGraph's reference saver leaves the same history.
    reference = build(InMemorySaver())
    await reference.ainvoke({"messages": [HumanMessage("Weather in Oslo?", id="h-1")]}, config)
    await reference.ainvoke(Command(resume="yes"), config)
    expected = [s async for s in reference.aget_state_history(config)]
    assert [summary(s) for s in history] == [summary(s) for s in expected]
    assert len(history) == 5  # input, start, agent (-> tools, interrupted), tools, agent
    # Time travel: the state before the tool ran is still there.
    before_tool = next(s for s in history if s.next == ("tools",))
    assert [m.id for m in before_tool.values["messages"]] == ["h-1", "ai-1"]


async def test_graph_sync_invoke(make_memory: MemoryFactory) -> None:
    saver = RedisMemSaver(await make_memory())
    graph = build(saver)
    config: Any = {"configurable": {"thread_id": "sync"}}

    def run() -> Any:
        graph.invoke({"messages": [HumanMessage("Weather in Oslo?")]}, config)
        assert graph.get_state(config).next == ("tools",)
        return graph.invoke(Command(resume="yes"), config)

    try:
        final = await asyncio.to_thread(run)
        check_final(final["messages"])
        history = await asyncio.to_thread(lambda: list(graph.get_state_history(config)))
        assert len(history) == 5
    finally:
        await saver.aclose()


async def test_graph_sync_invoke_inside_a_running_loop(make_memory: MemoryFactory) -> None:
    # A notebook cell: an event loop runs in this thread and the graph is run
    # with the sync API, as InMemorySaver allows.
    asyncio.get_running_loop()
    memory = await make_memory()
    saver = RedisMemSaver(memory)
    graph = build(saver)
    config: Any = {"configurable": {"thread_id": "notebook"}}
    try:
        first = graph.invoke({"messages": [HumanMessage("Weather in Oslo?")]}, config)
        assert first["__interrupt__"][0].value == {"question": "look up the weather in Oslo?"}
        assert graph.get_state(config).next == ("tools",)
        check_final(graph.invoke(Command(resume="yes"), config)["messages"])
        history = list(graph.get_state_history(config))
        assert len(history) == 5
        # The async API on the Memory passed in sees the same thread.
        assert len([t async for t in saver.alist(config)]) == 5
        assert saver.get_tuple(config) == await saver.aget_tuple(config)
        saver.delete_thread("notebook")
        assert await saver.aget_tuple(config) is None
        saver.close()
        assert list(saver.list(config)) == []
    finally:
        await saver.aclose()


# -- the Redis side -----------------------------------------------------------------------


async def put_one(
    saver: RedisMemSaver, thread_id: str, *, run_id: str = "run-1", ns: str = ""
) -> Any:
    checkpoint: Any = {
        "v": 1,
        "id": str(uuid.uuid4()),
        "ts": "2025-01-01T00:00:00+00:00",
        "channel_values": {"a": {"x": [1, "ü"]}},
        "channel_versions": {"a": 1},
        "versions_seen": {},
        "updated_channels": None,
    }
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    meta: Any = {"source": "loop", "step": 0, "run_id": run_id}
    return await saver.aput(config, checkpoint, meta, {"a": 1})


async def test_keys_share_the_thread_tag_and_clear_all(
    make_memory: MemoryFactory, raw: Any
) -> None:
    memory = await make_memory()
    saver = RedisMemSaver(memory)
    stored = await put_one(saver, "t:{1}*")
    await saver.aput_writes(stored, [("ch", "v")], "task-1")
    namespace = memory.layout.namespace
    keys = [k.decode() for k in await keys_of(raw, f"{namespace}:*")]
    thread_keys = [k for k in keys if k.startswith(f"{namespace}:{{lg:t%3A%7B1%7D%2A}}:")]
    assert {k.rsplit(":", 1)[1] for k in thread_keys} == {
        "ck",
        "ix",
        "ids",
        "bl",
        "wr",
        "wi",
        "runs",
    }
    assert sorted(keys) == sorted([*thread_keys, f"{namespace}:{{lgr:run-1}}:threads"])
    assert await memory.clear_all() == len(keys)
    assert await keys_of(raw, f"{namespace}:*") == []


@pytest.mark.every_server
async def test_delete_thread_leaves_nothing(make_memory: MemoryFactory, raw: Any) -> None:
    memory = await make_memory()
    saver = RedisMemSaver(memory)
    for ns in ("", "child:1"):
        stored = await put_one(saver, "gone", ns=ns)
        await saver.aput_writes(stored, [("ch", "v"), (ERROR, "boom")], "task-1")
    await put_one(saver, "kept", run_id="run-1")
    await saver.adelete_thread("gone")
    namespace = memory.layout.namespace
    assert await keys_of(raw, thread_pattern(memory, "gone")) == []
    assert len(await keys_of(raw, thread_pattern(memory, "kept"))) == 5  # no writes
    assert await raw.smembers(f"{namespace}:{{lgr:run-1}}:threads") == {b"kept"}
    await saver.adelete_for_runs(["run-1"])
    assert await keys_of(raw, f"{namespace}:*") == []


async def test_ttl_set_and_refreshed_on_every_write(make_memory: MemoryFactory, raw: Any) -> None:
    memory = await make_memory()
    saver = RedisMemSaver(memory, ttl=100)
    stored = await put_one(saver, "t")
    await saver.aput_writes(stored, [("ch", "v")], "task-1")
    keys = await keys_of(raw, f"{memory.layout.namespace}:*")
    assert len(keys) == 8
    for key in keys:
        assert 90_000 < await raw.pttl(key) <= 100_000, key
    for key in keys:
        await raw.pexpire(key, 5_000)
    await put_one(saver, "t")  # a write refreshes every key of the thread
    for key in keys:
        assert 90_000 < await raw.pttl(key) <= 100_000, key
    for key in keys:
        await raw.pexpire(key, 5_000)
    await saver.aput_writes(stored, [("other", "v")], "task-2")
    for key in keys:
        if b"lgr:" not in key:
            assert 90_000 < await raw.pttl(key) <= 100_000, key
    assert [await raw.pttl(k) for k in await keys_of(raw, thread_pattern(memory, "t"))]


async def test_ttl_expires_the_thread(make_memory: MemoryFactory) -> None:
    saver = RedisMemSaver(await make_memory(), ttl=1)
    await put_one(saver, "t")
    assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is not None
    await asyncio.sleep(1.3)
    assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), "60", True])
async def test_bad_ttl(make_memory: MemoryFactory, ttl: Any) -> None:
    with pytest.raises(InvalidInput):
        RedisMemSaver(await make_memory(), ttl=ttl)


async def test_writes_resent_are_stored_once(make_memory: MemoryFactory) -> None:
    saver = RedisMemSaver(await make_memory())
    stored = await put_one(saver, "t")
    await saver.aput_writes(stored, [("a", 1), ("b", 2), (INTERRUPT, "first")], "task-1")
    # Re-sent: regular writes keep their first value, special channels are replaced.
    await saver.aput_writes(stored, [("a", 10), ("b", 20), (INTERRUPT, "second")], "task-1")
    await saver.aput_writes(stored, [("a", 3)], "task-0", task_path="~0")
    tup = await saver.aget_tuple(stored)
    assert tup is not None
    # (task_path, task_id, idx) order: the task without a path first.
    assert tup.pending_writes == [
        ("task-1", INTERRUPT, "second"),
        ("task-1", "a", 1),
        ("task-1", "b", 2),
        ("task-0", "a", 3),
    ]
    assert WRITES_IDX_MAP[INTERRUPT] < 0


async def test_no_pickle(make_memory: MemoryFactory, raw: Any) -> None:
    memory = await make_memory()
    saver = RedisMemSaver(memory)
    stored = await put_one(saver, "t")
    await saver.aput_writes(stored, [("ch", {"k": b"bytes", "t": (1, 2)})], "task-1")
    types: set[str] = set()
    for key in await keys_of(raw, thread_pattern(memory, "t")):
        if key.endswith((b":ck", b":bl", b":wr")):
            for value in (await raw.hgetall(key)).values():
                fields = msgpack.unpackb(value, raw=False)
                types.update(f for f in fields if f in ("msgpack", "json", "pickle", "bytes"))
    assert types and "pickle" not in types
    assert getattr(saver.serde, "pickle_fallback", False) is False


async def test_list_across_threads_and_namespaces(make_memory: MemoryFactory) -> None:
    saver = RedisMemSaver(await make_memory())
    first = await put_one(saver, "t1")
    await put_one(saver, "t1", ns="child:1")
    await put_one(saver, "t2", run_id="run-2")
    everything = [t async for t in saver.alist(None)]
    assert sorted(t.config["configurable"]["thread_id"] for t in everything) == ["t1", "t1", "t2"]
    run2 = [t async for t in saver.alist(None, filter={"run_id": "run-2"})]
    assert [t.config["configurable"]["thread_id"] for t in run2] == ["t2"]
    assert len([t async for t in saver.alist(None, limit=2)]) == 2
    # A config without checkpoint_ns lists every namespace of the thread.
    both = [t async for t in saver.alist({"configurable": {"thread_id": "t1"}})]
    assert sorted(t.config["configurable"]["checkpoint_ns"] for t in both) == ["", "child:1"]
    one = [t async for t in saver.alist(first)]
    assert [t.config for t in one] == [first]


async def test_list_pages_through_long_threads(make_memory: MemoryFactory) -> None:
    saver = RedisMemSaver(await make_memory())
    config: Any = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    ids = []
    for step in range(75):
        checkpoint: Any = {
            "v": 1,
            "id": f"{step:04d}",
            "ts": "",
            "channel_values": {},
            "channel_versions": {},
            "versions_seen": {},
            "updated_channels": None,
        }
        meta: Any = {"source": "loop", "step": step, "parity": step % 2}
        config = await saver.aput(config, checkpoint, meta, {})
        ids.append(checkpoint["id"])
    assert config["configurable"]["checkpoint_id"] == "0074"
    config = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    listed = [t.checkpoint["id"] async for t in saver.alist(config)]
    assert listed == ids[::-1]
    odd = [t.checkpoint["id"] async for t in saver.alist(config, filter={"parity": 1}, limit=30)]
    assert odd == [i for i in ids[::-1] if int(i) % 2][:30]
    before: Any = {"configurable": {"thread_id": "long", "checkpoint_id": "0040"}}
    page = [t.checkpoint["id"] async for t in saver.alist(config, before=before, limit=35)]
    assert page == ids[39::-1][:35]
    assert [t async for t in saver.alist(config, limit=0)] == []


async def test_prune_rejects_unknown_strategy(make_memory: MemoryFactory) -> None:
    saver = RedisMemSaver(await make_memory())
    with pytest.raises(InvalidInput):
        await saver.aprune(["t"], strategy="oldest")


async def test_prune_drops_unreferenced_values(make_memory: MemoryFactory, raw: Any) -> None:
    memory = await make_memory()
    saver = RedisMemSaver(memory)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for step in range(3):
        checkpoint: Any = {
            "v": 1,
            "id": f"{step:04d}",
            "ts": "",
            "channel_values": {"a": step, "b": "same"},
            "channel_versions": {"a": step + 1, "b": 1},
            "versions_seen": {},
            "updated_channels": None,
        }
        new: ChannelVersions = {"a": step + 1, "b": 1} if step == 0 else {"a": step + 1}
        config = await saver.aput(config, checkpoint, {"step": step}, new)
    bl = saver.keys("t").bl
    assert await raw.hlen(bl) == 4
    await saver.aprune(["t"])
    assert await raw.hlen(bl) == 2
    tup = await saver.aget_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"] == {"a": 2, "b": "same"}
