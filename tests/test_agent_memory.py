"""AgentMemory: in-process window, persistence, manage, auto-manage, snapshots."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from datetime import UTC
from typing import Any

import pytest
import pytest_asyncio
from conftest import MemoryFactory
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redismem import InvalidInput, Memory, Message, SummarizerError, ToolCall
from redismem.client import SUMMARY_LABEL
from redismem.context.agent_memory import (
    SNAPSHOT_VERSION,
    AgentMemory,
    AgentMemoryState,
    ManageResult,
)
from redismem.context.providers import SummarizingMemory
from redismem.context.quoting import unfence
from redismem.context.strategies import Hybrid, LastMessages, TokenBudget
from redismem.context.tokens import estimate_messages_tokens
from redismem.summarization.summarizers import KeyPointsSummarizer, TruncationSummarizer

pytestmark = pytest.mark.every_server

PROPERTY = settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# -- conversations -----------------------------------------------------------------


def user(content: str) -> Message:
    return Message(role="user", content=content)


def answer(content: str) -> Message:
    return Message(role="assistant", content=content)


def calls(*ids: str, content: str = "") -> Message:
    return Message(
        role="assistant",
        content=content,
        tool_calls=[ToolCall(id=i, name="search", arguments={"q": i, "n": 3}) for i in ids],
    )


def result(call_id: str, content: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=content)


def research_turn(n: int) -> list[Message]:
    """A research agent's turn: a question, two parallel searches, an answer."""
    return [
        user(f"Frage {n}: what changed in the Ümlaut library v{n}.0? I prefer short answers."),
        calls(f"s{n}a", f"s{n}b", content="Searching the changelog and the issues."),
        result(f"s{n}a", f"v{n}.0 changelog: " + "faster parsing; " * 12),
        result(f"s{n}b", f'{{"issues": [{n}, {n + 1}], "note": "ünïcödé ✓"}}'),
        answer(f"v{n}.0 parses faster. We decided to upgrade to v{n}.0."),
    ]


def assert_no_split_groups(messages: Sequence[Message]) -> None:
    pending: list[str] = []
    for position, message in enumerate(messages):
        if message.role == "tool":
            assert pending, f"orphan tool result at {position}"
            assert message.tool_call_id == pending.pop(0)
            continue
        if message.role == "system":
            continue
        assert not pending, f"tool results cut before {position}"
        if message.role == "assistant" and message.tool_calls:
            pending = [c.id for c in message.tool_calls]


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 8) -> list[Message]:
    text = st.text(alphabet=st.characters(codec="utf-8"), max_size=160)
    out: list[Message] = []
    counter = 0
    for turn in range(draw(st.integers(1, max_turns))):
        out.append(user(draw(text)))
        for _ in range(draw(st.integers(0, 2))):
            ids = []
            for _ in range(draw(st.integers(1, 3))):
                counter += 1
                ids.append(f"c{turn}_{counter}")
            out.append(calls(*ids))
            out.extend(result(i, draw(text)) for i in ids)
        if draw(st.booleans()) or turn < max_turns - 1:
            out.append(answer(draw(text)))
    return out


class CountingSummarizer:
    """KeyPoints, counting calls, optionally slow or failing."""

    def __init__(self, *, delay: float = 0.0, fail: bool = False) -> None:
        self.calls = 0
        self.delay = delay
        self.fail = fail
        self.inner = KeyPointsSummarizer()

    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("the model is down")
        text = await self.inner.summarize(previous, messages)
        return text or f"{len(messages)} messages without key points"


@pytest_asyncio.fixture(loop_scope="function")
async def mem(make_memory: MemoryFactory) -> Memory:
    """A Memory on each backend: a real Redis and a fresh embedded server."""
    return await make_memory()


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


# -- adding, flushing, loading -----------------------------------------------------


async def test_messages_are_buffered_then_flushed_as_one_entry(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    am = AgentMemory(memory, "run-1", agent_name="researcher")
    am.add_message({"role": "system", "content": "You are a research agent."})
    am.add_messages(research_turn(1))
    assert am.state().unsaved == 6
    assert await memory.read(session_id="run-1") == []  # nothing written yet

    await am.flush()
    entries = await memory.entries(session_id="run-1")
    assert len(entries) == 1 and entries[0].metadata.agent_name == "researcher"
    assert len(entries[0].messages) == 5  # the system message is not stored
    state = am.state()
    assert state.unsaved == 0 and state.total_messages_processed == 6
    assert state.messages[0].role == "system" and state.messages[0].id is None
    assert [m.id for m in state.messages[1:]] == [m.id for m in entries[0].messages]
    assert all(m.token_count for m in state.messages[1:])

    await am.flush()  # nothing new: nothing written
    assert len(await memory.entries(session_id="run-1")) == 1

    # Another process loads the session; the local system message survives load().
    other = memory.agent_memory("run-1")
    await other.load()
    assert [m.content for m in other.state().messages] == [m.content for m in research_turn(1)]
    am.add_messages(research_turn(2))
    await am.load()
    assert am.state().messages[0].role == "system"
    assert len(am.state().messages) == 11


async def test_add_validates_and_copies(mem: Memory) -> None:
    am = mem.agent_memory("s")
    original = user("hi").model_copy(update={"id": "000000000099", "token_count": 1})
    am.add_message(original)
    copy = am.state().messages[0]
    assert copy is not original and copy.id is None and copy.token_count is None
    with pytest.raises(InvalidInput):
        am.add_messages([user("ok"), {"role": "robot"}])
    assert len(am.state().messages) == 1  # all or nothing
    with pytest.raises(InvalidInput):
        am.add_messages(user("not a list"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        am.add_message(42)  # type: ignore[arg-type]


async def test_constructor_validates(mem: Memory) -> None:
    with pytest.raises(InvalidInput):
        AgentMemory("memory://", "s")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        mem.agent_memory("")
    with pytest.raises(InvalidInput):
        mem.agent_memory("s", strategy="window")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        mem.agent_memory("s", max_context_tokens=0)
    with pytest.raises(InvalidInput):
        mem.agent_memory("s", auto_manage=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        mem.agent_memory("s", on_managed="print")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        mem.agent_memory("s", summarizer=object())  # type: ignore[arg-type]


# -- manage ------------------------------------------------------------------------


async def test_manage_without_summarizer_trims_the_window_only(mem: Memory) -> None:
    am = mem.agent_memory("s", strategy=LastMessages(5))
    for n in range(3):
        am.add_messages(research_turn(n))
    result = await am.manage()
    assert result.before.message_count == 15 and result.after.message_count == 5
    assert len(result.dropped) == 10 and result.summarized == 0 and result.summary is None
    assert result.after.estimated_tokens == estimate_messages_tokens(am.state().messages)
    assert len(await mem.read(session_id="s")) == 15  # manage persisted, dropped nothing
    # load() brings the dropped messages back; manage() drops the same ones again.
    kept = [m.id for m in am.state().messages]
    await am.load()
    assert len(am.state().messages) == 15
    again = await am.manage()
    assert [m.id for m in am.state().messages] == kept
    assert len(again.dropped) == 10

    plain = mem.agent_memory("s")
    await plain.load()
    nothing = await plain.manage()
    assert nothing.dropped == [] and nothing.before == nothing.after


async def test_manage_folds_dropped_messages_into_the_stored_summary(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory()
    summarizer = CountingSummarizer()
    am = memory.agent_memory(
        "s", strategy=TokenBudget(300, preserve_recent=2), summarizer=summarizer
    )
    for n in range(6):
        am.add_messages(research_turn(n))
    result = await am.manage()
    assert result.after.estimated_tokens <= 300
    assert result.summarized == len(result.dropped) > 0
    assert summarizer.calls == 1
    stored = await memory.summary(session_id="s")
    assert stored is not None and stored.text == result.summary
    assert stored.message_count == result.summarized
    assert "I prefer short answers" in stored.text and "ünïcödé ✓" in stored.text
    # Compaction: the store keeps what the window keeps.
    assert [m.id for m in await memory.read(session_id="s")] == [m.id for m in am.state().messages]
    context = am.get_context_messages()
    assert context[0].role == "system" and result.summary
    assert unfence(context[0].content) == {SUMMARY_LABEL: result.summary}
    assert context[1:] == am.state().messages
    assert am.state().summaries == [result.summary]

    # A second manage folds into the same running summary.
    am.add_messages(research_turn(6))
    second = await am.manage()
    summary = await memory.summary(session_id="s")
    assert summary is not None
    assert summary.message_count == result.summarized + second.summarized
    assert am.state().total_messages_processed == 35

    # Another agent loading the session sees the summary and the window.
    other = memory.agent_memory("s")
    await other.load()
    assert other.state().summaries == am.state().summaries
    assert [m.id for m in other.state().messages] == [m.id for m in am.state().messages]
    assert other.state().total_messages_processed == 35


async def test_manage_continues_a_stored_summary_it_had_not_loaded(mem: Memory) -> None:
    provider = SummarizingMemory(
        mem, recent_messages=2, summarizer=KeyPointsSummarizer(), summarize_every=2
    )
    await provider.write(research_turn(1), session_id="s")
    earlier = await mem.summary(session_id="s")
    assert earlier is not None
    am = mem.agent_memory("s", strategy=LastMessages(2), summarizer=CountingSummarizer())
    am.add_messages(research_turn(2))
    result = await am.manage()
    assert result.resynced
    summary = await mem.summary(session_id="s")
    assert summary is not None and summary.message_count == earlier.message_count + 8
    assert result.summarized == 8 and am.state().summaries == [summary.text]
    assert [m.id for m in am.state().messages] == [m.id for m in await mem.read(session_id="s")]


async def test_get_context_messages_respects_max_context_tokens(mem: Memory) -> None:
    am = mem.agent_memory(
        "s", strategy=LastMessages(50), summarizer=CountingSummarizer(), max_context_tokens=200
    )
    for n in range(5):
        am.add_messages(research_turn(n))
    # Over max_context_tokens before managing: the context still fits.
    context = am.get_context_messages()
    assert estimate_messages_tokens(context) <= 200
    assert_no_split_groups(context)
    result = await am.manage()
    assert result.after.estimated_tokens <= 200
    context = am.get_context_messages()
    assert context[0].role == "system"
    assert estimate_messages_tokens(context) <= 200


async def test_a_failing_summarizer_leaves_the_state_unchanged(mem: Memory) -> None:
    errors: list[BaseException] = []
    managed: list[ManageResult] = []
    am = mem.agent_memory(
        "s",
        strategy=LastMessages(3),
        summarizer=CountingSummarizer(fail=True),
        on_managed=managed.append,
        on_manage_error=errors.append,
    )
    am.add_messages(research_turn(1))
    before = am.export()
    with pytest.raises(SummarizerError):
        await am.manage()
    assert len(errors) == 1 and isinstance(errors[0], SummarizerError)
    assert managed == []
    after = am.export()
    assert after["messages"] == [
        {**m, "id": a["id"], "created_at": a["created_at"], "token_count": a["token_count"]}
        for m, a in zip(before["messages"], after["messages"], strict=True)
    ]  # the same messages, now persisted
    assert after["unsaved"] == 0 and after["summary"] is None
    assert await mem.summary(session_id="s") is None
    assert len(await mem.read(session_id="s")) == 5
    assert not am.is_managing


async def test_callbacks_may_be_coroutines_and_their_errors_are_logged(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[ManageResult] = []

    async def on_managed(result: ManageResult) -> None:
        await asyncio.sleep(0)
        seen.append(result)
        raise ValueError("callback bug")

    am = mem.agent_memory("s", strategy=LastMessages(2), on_managed=on_managed)
    am.add_messages(research_turn(1))
    result = await am.manage()
    assert seen == [result]
    assert "on_managed callback raised" in caplog.text


async def test_concurrent_manage_calls_share_one_run(mem: Memory) -> None:
    summarizer = CountingSummarizer(delay=0.05)
    results: list[ManageResult] = []
    am = mem.agent_memory(
        "s", strategy=LastMessages(4), summarizer=summarizer, on_managed=results.append
    )
    for n in range(3):
        am.add_messages(research_turn(n))
    first = asyncio.create_task(am.manage())
    await asyncio.sleep(0.01)
    assert am.is_managing
    am.add_message(user("a message added while managing"))
    second = await am.manage()
    assert await first is second
    assert summarizer.calls == 1 and results == [second]
    assert not am.is_managing
    state = am.state()
    assert state.messages[-1].content == "a message added while managing"
    assert state.unsaved == 1
    await am.flush()
    assert (await mem.read(session_id="s"))[-1].content == "a message added while managing"


async def test_auto_manage_runs_in_the_background_and_flush_waits(mem: Memory) -> None:
    managed: list[ManageResult] = []
    am = mem.agent_memory(
        "s",
        strategy=Hybrid(8, 400),
        summarizer=TruncationSummarizer(),
        auto_manage=True,
        on_managed=managed.append,
    )
    am.add_messages(research_turn(1))
    assert not am.is_managing  # within the limits
    am.add_messages(research_turn(2))
    await asyncio.sleep(0)
    assert am.is_managing  # started by add_messages
    await am.flush()
    assert managed and not am.is_managing
    assert am.state().estimated_tokens <= 400 and len(am.state().messages) <= 8
    summary = await mem.summary(session_id="s")
    assert summary is not None and summary.message_count == managed[-1].summarized


def test_auto_manage_without_an_event_loop_waits_for_flush() -> None:
    async def make() -> tuple[Memory, AgentMemory]:
        memory = await Memory.connect(f"memory://t-{uuid.uuid4().hex}", namespace="am")
        return memory, memory.agent_memory("s", strategy=LastMessages(3), auto_manage=True)

    loop = asyncio.new_event_loop()
    try:
        memory, am = loop.run_until_complete(make())
        am.add_messages(research_turn(1))  # no running loop: nothing scheduled
        assert len(am.state().messages) == 5
        loop.run_until_complete(am.flush())
        assert len(am.state().messages) == 1
        loop.run_until_complete(memory.aclose())
    finally:
        loop.close()


async def test_clear_forgets_the_state_and_the_stored_session(mem: Memory) -> None:
    am = mem.agent_memory("s", strategy=LastMessages(2), summarizer=CountingSummarizer())
    am.add_messages(research_turn(1))
    await am.manage()
    await am.clear()
    assert am.state() == AgentMemoryState(
        messages=[], summaries=[], total_messages_processed=0, estimated_tokens=0, unsaved=0
    )
    assert await mem.read(session_id="s") == []
    assert await mem.summary(session_id="s") is None


# -- several agents ----------------------------------------------------------------


async def test_agents_sharing_one_session(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    planner = AgentMemory(
        memory,
        "team",
        strategy=LastMessages(3),
        summarizer=CountingSummarizer(),
        agent_name="planner",
    )
    coder = AgentMemory(
        memory,
        "team",
        strategy=LastMessages(3),
        summarizer=CountingSummarizer(),
        agent_name="coder",
    )
    planner.add_messages(research_turn(1))
    await planner.flush()
    await coder.load()
    coder.add_messages(research_turn(2))
    await coder.flush()
    planner.add_messages(research_turn(3))
    await planner.flush()
    # The planner's window misses the coder's turn, which its dropped messages
    # would skip over: manage reloads the session before summarizing.
    result = await planner.manage()
    assert result.resynced and result.summarized == 14
    stored = await memory.read(session_id="team")
    assert [m.id for m in planner.state().messages] == [m.id for m in stored]
    assert [m.content for m in stored] == [research_turn(3)[-1].content]
    summary = await memory.summary(session_id="team")
    assert summary is not None and summary.message_count == 14
    assert "v2.0" in summary.text  # the coder's turn is in the summary
    # The coder's window is stale too: its manage resyncs, and loses nothing.
    coder_result = await coder.manage()
    assert coder_result.resynced and coder_result.summarized == 0
    assert coder.state().summaries == planner.state().summaries
    assert [m.id for m in coder.state().messages] == [m.id for m in stored]
    writers = [e.metadata.agent_name for e in await memory.entries(session_id="team") if e.messages]
    assert writers == ["planner"]


async def test_agents_managing_one_session_at_once_lose_nothing(
    make_memory: MemoryFactory,
) -> None:
    memory = await make_memory()
    agents = [
        AgentMemory(
            memory,
            "team",
            strategy=LastMessages(4),
            summarizer=CountingSummarizer(delay=0.01),
            agent_name=f"agent-{i}",
        )
        for i in range(3)
    ]
    for i, am in enumerate(agents):
        am.add_messages(research_turn(i))
        await am.flush()
    for i, am in enumerate(agents):
        am.add_messages(research_turn(10 + i))
    await asyncio.gather(*(am.manage() for am in agents))
    summary = await memory.summary(session_id="team")
    stored = await memory.read(session_id="team")
    assert summary is not None
    # Every message written is either covered by the summary or still stored.
    assert summary.message_count + len(stored) == 30
    assert_no_split_groups(stored)
    for am in agents:
        await am.load()
        assert [m.id for m in am.state().messages] == [m.id for m in stored]
        assert am.state().total_messages_processed == 30


async def test_agents_with_their_own_sessions_are_independent(mem: Memory) -> None:
    agents = {
        name: mem.agent_memory(
            f"{name}-session", strategy=TokenBudget(200), summarizer=CountingSummarizer()
        )
        for name in ("researcher", "writer")
    }
    agents["researcher"].add_messages(research_turn(1) + research_turn(2))
    agents["writer"].add_messages([user("Write a haiku about Redis."), answer("Keys in memory…")])
    await asyncio.gather(*(am.manage() for am in agents.values()))
    assert agents["researcher"].state().summaries
    assert agents["writer"].state().summaries == []
    assert len(await mem.read(session_id="writer-session")) == 2
    assert await mem.summary(session_id="writer-session") is None


# -- snapshots ---------------------------------------------------------------------


def _plain(value: Any, path: str = "") -> None:
    """Only dict, list, str and int outside messages' metadata and tool arguments."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str)
            if key not in ("metadata", "arguments"):
                _plain(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _plain(item, f"{path}[{i}]")
    else:
        assert type(value) in (str, int) or (value is None and path == ".summary"), path


async def test_export_import_round_trips_exactly(mem: Memory) -> None:
    am = mem.agent_memory("s", strategy=LastMessages(4), summarizer=CountingSummarizer())
    am.add_message({"role": "system", "content": "Be brief."})
    am.add_messages(research_turn(1) + research_turn(2))
    await am.manage()
    am.add_message(Message(role="user", content="unsaved ✓", metadata={"trace": [1, "x"]}))
    snapshot = am.export()
    assert snapshot["version"] == SNAPSHOT_VERSION and snapshot["unsaved"] == 1
    _plain(snapshot)
    assert json.loads(json.dumps(snapshot)) == snapshot

    restored = mem.agent_memory("s")
    restored.import_(json.loads(json.dumps(snapshot)))
    assert restored.export() == snapshot
    assert restored.state() == am.state()
    assert restored.get_context_messages() == am.get_context_messages()
    await restored.flush()  # the unsaved message is written by the restored object
    assert (await mem.read(session_id="s"))[-1].content == "unsaved ✓"


async def test_import_rejects_foreign_or_malformed_snapshots(mem: Memory) -> None:
    am = mem.agent_memory("s")
    am.add_message(user("hello"))
    good = am.export()
    other = mem.agent_memory("other")
    with pytest.raises(InvalidInput, match="session"):
        other.import_(good)
    for bad in (
        {**good, "version": 99},
        {**good, "format": "something"},
        {**good, "messages": [{"role": "robot"}]},
        {**good, "messages": "nope"},
        {**good, "unsaved": 5},
        {**good, "total_messages_processed": -1},
        {**good, "summary": {"text": 1}},
        "not a dict",
    ):
        with pytest.raises(InvalidInput):
            am.import_(bad)  # type: ignore[arg-type]
    assert am.export() == good  # unchanged by the failed imports


@st.composite
def snapshots(draw: st.DrawFn) -> dict[str, Any]:
    messages = draw(conversations(max_turns=4))
    stored = draw(st.integers(0, len(messages)))
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=5,
    )
    out = []
    for i, m in enumerate(messages):
        metadata = st.dictionaries(st.text(max_size=5), json_values, max_size=2)
        update: dict[str, Any] = {"metadata": draw(metadata)}
        if i < stored:
            update.update(id=f"{i + 1:012d}", token_count=draw(st.integers(1, 500)))
            update["created_at"] = draw(st.datetimes(timezones=st.just(UTC)))
        out.append(m.model_copy(update=update))
    summary = None
    if draw(st.booleans()):
        summary = {
            "text": draw(st.text(min_size=1, max_size=200)),
            "message_count": draw(st.integers(1, 10_000)),
            "summarized_until": "000000000007",
            "updated_at": "2024-05-01T12:30:00.123000Z",
        }
    return {
        "format": "redismem.context.agent_memory",
        "version": SNAPSHOT_VERSION,
        "session_id": "s",
        "user_id": "default",
        "messages": [Message.model_validate(m.model_dump()).model_dump(mode="json") for m in out],
        "unsaved": len(out) - stored,
        "summary": summary,
        "total_messages_processed": len(out) + draw(st.integers(0, 100)),
    }


@PROPERTY
@given(snapshot=snapshots())
async def test_random_snapshots_round_trip(mem: Memory, snapshot: dict[str, Any]) -> None:
    first = mem.agent_memory("s")
    first.import_(snapshot)
    exported = first.export()
    _plain(exported)
    second = mem.agent_memory("s")
    second.import_(json.loads(json.dumps(exported)))
    assert second.export() == exported
    assert second.state() == first.state()
    assert second.state().messages == [Message.model_validate(m) for m in snapshot["messages"]]


# -- manage properties -------------------------------------------------------------


@PROPERTY
@given(
    history=conversations(),
    budget=st.integers(20, 400),
    preserve=st.integers(0, 4),
    summarize=st.booleans(),
)
async def test_manage_keeps_within_budget_and_tool_groups_whole(
    mem: Memory, history: list[Message], budget: int, preserve: int, summarize: bool
) -> None:
    session = sid()
    am = mem.agent_memory(
        session,
        strategy=TokenBudget(budget, preserve_recent=preserve),
        summarizer=TruncationSummarizer(max_chars=400) if summarize else None,
    )
    am.add_messages(history)
    result = await am.manage()
    kept = am.state().messages
    assert_no_split_groups(kept)
    assert result.after.message_count == len(kept)
    assert result.before.message_count == len(history)
    assert len(kept) + len(result.dropped) == len(history)
    strategy = TokenBudget(budget, preserve_recent=preserve)
    expected = strategy.apply(history)
    assert [m.content for m in kept] == [m.content for m in expected.kept]
    assert [m.content for m in result.dropped] == [m.content for m in expected.dropped]
    if estimate_messages_tokens(kept) > budget:
        # Over budget only by the preserved messages, extended to whole groups:
        # a budget nothing fits in keeps exactly those.
        preserved = TokenBudget(1, preserve_recent=preserve).apply(history).kept
        assert [m.content for m in kept] == [m.content for m in preserved]
    stored = await mem.read(session_id=session)
    if summarize and result.dropped:
        summary = await mem.summary(session_id=session)
        assert summary is not None and summary.message_count == result.summarized
        assert [m.id for m in stored] == [m.id for m in kept]
    else:
        assert len(stored) == len(history)
