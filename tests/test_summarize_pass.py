"""``summarize_pass``: one summarization pass over a session, on a real Redis
and on the embedded backend. The pass is called directly here; the workers
that call it are tested in ``test_workers.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from helpers import assistant, snapshot, tool_call, tool_result, user
from worker_support import assert_invariant, dialogue, session_state

from redismem import Memory, Message
from redismem.client import SUMMARY_LABEL
from redismem.context.quoting import MEMORY_DATA_HEADER, unfence
from redismem.errors import SummarizerError
from redismem.summarization.job import MAX_SUMMARY_CHARS, split_at_tool_boundary, summarize_pass
from redismem.summarization.summarizers import KeyPointsSummarizer, TruncationSummarizer

pytestmark = pytest.mark.every_server

SID = "s1"


class Recorder:
    """A summarizer that records what it is given and answers a fixed shape."""

    def __init__(self, delay: float = 0.0, text: str | None = None) -> None:
        self.calls: list[tuple[str | None, list[Message]]] = []
        self.delay = delay
        self.text = text

    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        self.calls.append((previous, list(messages)))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.text is not None:
            return self.text
        ids = [m.id for m in messages]
        return f"{previous or ''}[{ids[0]}..{ids[-1]}]"


def quiet(memory: Memory) -> Memory:
    """Summarization settings on, but no job enqueued: the pass is run by hand."""

    async def no_enqueue(*args: Any) -> None:
        return None

    memory._enqueue_summary = no_enqueue  # type: ignore[method-assign]
    return memory


async def write_each(memory: Memory, messages: list[dict[str, Any]], sid: str = SID) -> None:
    for message in messages:
        await memory.write([message], session_id=sid)


async def run_pass(memory: Memory, summarizer: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("keep_recent", 5)
    kwargs.setdefault("batch", 10)
    kwargs.setdefault("compact", memory.config.compact)
    return await summarize_pass(
        memory.backend, summarizer, user_id="default", session_id=SID, **kwargs
    )


def contents(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages]


# ---------------------------------------------------------------------------
# commit
# ---------------------------------------------------------------------------


async def test_commit_summarizes_backlog_and_compacts(make_memory: Any) -> None:
    memory = await make_memory()
    written = dialogue(30)
    await memory.write(written[:12], session_id=SID)
    await write_each(memory, written[12:])
    recorder = Recorder()

    outcome = await run_pass(memory, recorder, keep_recent=5, batch=10, compact=True)

    assert outcome.status == "committed"
    assert outcome.summarized == 25
    [(previous, batch)] = recorder.calls
    assert previous is None
    assert contents(batch) == contents([Message(**m) for m in written[:25]])
    summary = await memory.summary(session_id=SID)
    assert summary is not None
    assert summary.message_count == 25
    assert summary.summarized_until == "000000000025"
    assert summary.text == "[000000000001..000000000025]"
    recent = await memory.read(session_id=SID)
    assert [m.id for m in recent] == [f"{i:012d}" for i in range(26, 31)]
    assert contents(recent) == [m["content"] for m in written[25:]]
    assert all(m.created_at is not None for m in recent)
    state = await assert_invariant(memory, SID, written=30)
    assert state.wm == 25
    # Entry records of fully summarized writes are gone; the rest still decode.
    entries = await memory.entries(session_id=SID)
    assert sum(len(e.messages) for e in entries) == 5
    # Nothing more to do: the recent window is never summarized.
    assert (await run_pass(memory, recorder, keep_recent=5)).status == "idle"
    assert len(recorder.calls) == 1


async def test_passes_accumulate_and_fold_the_previous_summary(make_memory: Any) -> None:
    memory = await make_memory()
    await write_each(memory, dialogue(15))
    recorder = Recorder()
    assert (await run_pass(memory, recorder, keep_recent=5)).summarized == 10
    await write_each(memory, dialogue(12, start=15))
    outcome = await run_pass(memory, recorder, keep_recent=5)
    assert outcome.summarized == 12
    previous, batch = recorder.calls[1]
    assert previous == "[000000000001..000000000010]"
    assert [m.id for m in batch] == [f"{i:012d}" for i in range(11, 23)]
    summary = await memory.summary(session_id=SID)
    assert summary is not None
    assert summary.message_count == 22
    assert summary.text == "[000000000001..000000000010][000000000011..000000000022]"
    await assert_invariant(memory, SID, written=27)


async def test_without_compaction_messages_stay_but_context_starts_after_watermark(
    make_memory: Any,
) -> None:
    memory = await make_memory(compact=False)
    written = dialogue(20)
    await write_each(memory, written)
    outcome = await run_pass(memory, TruncationSummarizer(), keep_recent=4, compact=False)
    assert outcome.summarized == 16
    everything = await memory.read(session_id=SID)
    assert contents(everything) == [m["content"] for m in written]
    context = await memory.context(session_id=SID)
    summary, *recent = context.messages
    assert summary.role == "system"
    assert contents(recent) == [m["content"] for m in written[16:]]
    state = await session_state(memory, SID)
    assert (state.stored, state.wm, state.summarized) == (20, 16, 16)
    assert len(recent) + state.summarized == 20
    # A second pass starts at the watermark, not at the head of the list.
    await write_each(memory, dialogue(6, start=20))
    recorder = Recorder()
    assert (await run_pass(memory, recorder, keep_recent=4, compact=False)).summarized == 6
    assert [m.id for m in recorder.calls[0][1]] == [f"{i:012d}" for i in range(17, 23)]
    assert len(await memory.read(session_id=SID)) == 26


async def test_cap_bounds_one_pass_and_pending_mark_clears_when_done(make_memory: Any) -> None:
    memory = quiet(await make_memory(keep_recent=5, summarize_batch=10))
    await write_each(memory, dialogue(40))
    pending = memory.layout.pending("default")
    assert await memory.redis.zscore(pending, SID) is not None

    first = await run_pass(memory, Recorder(), keep_recent=5, batch=10, cap=12)
    assert (first.status, first.summarized, first.still_pending) == ("committed", 12, True)
    assert first.lag_ms is not None and first.lag_ms >= 0
    assert await memory.redis.zscore(pending, SID) is not None

    second = await run_pass(memory, Recorder(), keep_recent=5, batch=10, cap=12)
    assert (second.summarized, second.still_pending) == (12, True)
    # 11 left beyond the window, then 0 < batch: the mark is cleared.
    third = await run_pass(memory, Recorder(), keep_recent=5, batch=10, cap=12)
    assert (third.summarized, third.still_pending) == (11, False)
    assert await memory.redis.zscore(pending, SID) is None
    state = await assert_invariant(memory, SID, written=40)
    assert state.summarized == 35


async def test_gone_and_idle(make_memory: Any) -> None:
    memory = await make_memory()
    assert (await run_pass(memory, Recorder())).status == "gone"
    await write_each(memory, dialogue(5))
    assert (await run_pass(memory, Recorder(), keep_recent=5)).status == "idle"
    assert await memory.summary(session_id=SID) is None


# ---------------------------------------------------------------------------
# tool-call boundaries
# ---------------------------------------------------------------------------

# seq: 1 u, 2 a, 3 u, 4 assistant calls c1+c2, 5 result c1, 6 result c2, 7 a, 8 u,
#      9 a calls c3, 10 result c3, 11 a, 12 u, 13 a, 14 u
TOOL_HISTORY = [
    user("u1"),
    assistant("a2"),
    user("u3 please look up two things"),
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "name": "lookup", "arguments": {"q": "one"}},
            {"id": "c2", "name": "lookup", "arguments": {"q": "two"}},
        ],
    },
    tool_result("c1", "r5"),
    tool_result("c2", "r6"),
    assistant("a7"),
    user("u8"),
    tool_call("c3"),
    tool_result("c3", "r10"),
    assistant("a11"),
    user("u12"),
    assistant("a13"),
    user("u14"),
]


@pytest.mark.parametrize(
    ("cap", "keep_recent", "expected_last"),
    [
        (3, 0, 3),
        (4, 0, 3),  # would end on the assistant tool call
        (5, 0, 3),  # would end between the two results
        (6, 0, 6),  # ends after the last result: fine
        (9, 0, 8),  # would end on the second tool call
        (10, 0, 10),
        (100, 10, 3),  # cut by the recent window: seq 4 is the last candidate
        (100, 9, 3),  # seq 5
        (100, 8, 6),  # seq 6
        (100, 5, 8),  # seq 9
        (100, 4, 10),  # seq 10
    ],
)
async def test_batch_never_ends_inside_a_tool_sequence(
    make_memory: Any, cap: int, keep_recent: int, expected_last: int
) -> None:
    memory = await make_memory()
    await memory.write(TOOL_HISTORY[:3], session_id=SID)
    await memory.write(TOOL_HISTORY[3:6], session_id=SID)
    await write_each(memory, TOOL_HISTORY[6:])
    recorder = Recorder()
    outcome = await run_pass(memory, recorder, keep_recent=keep_recent, cap=cap)
    assert outcome.status == "committed"
    assert outcome.summarized == expected_last
    [(_, batch)] = recorder.calls
    assert batch[-1].id == f"{expected_last:012d}"
    assert not batch[-1].tool_calls
    stored = await memory.read(session_id=SID)
    assert stored[0].role != "tool"
    assert stored[0].id == f"{expected_last + 1:012d}"
    await assert_invariant(memory, SID, written=len(TOOL_HISTORY))
    context = await memory.context(session_id=SID)
    assert context.messages[1].role != "tool"


async def test_batch_that_is_all_one_tool_sequence_is_left_alone(make_memory: Any) -> None:
    memory = await make_memory()
    messages = [tool_call("c1"), tool_result("c1", "r"), tool_result("c1", "r2"), user("u")]
    await memory.write(messages, session_id=SID)
    recorder = Recorder()
    assert (await run_pass(memory, recorder, keep_recent=0, cap=2)).status == "idle"
    assert recorder.calls == []
    assert await memory.summary(session_id=SID) is None
    # With room for the whole sequence, it goes in whole.
    assert (await run_pass(memory, recorder, keep_recent=1, cap=3)).summarized == 3
    assert [m.role for m in await memory.read(session_id=SID)] == ["user"]


def test_split_at_tool_boundary_unit() -> None:
    def m(item: dict[str, Any]) -> Message:
        return Message.model_validate(item)

    call, result, plain = m(tool_call("c")), m(tool_result("c", "r")), m(user("u"))
    assert split_at_tool_boundary([plain, call], None) == [plain]
    assert split_at_tool_boundary([plain, call, result], None) == [plain, call, result]
    assert split_at_tool_boundary([plain, call, result], result) == [plain]
    assert split_at_tool_boundary([plain, call, result], plain) == [plain, call, result]
    assert split_at_tool_boundary([call, result], result) == []
    assert split_at_tool_boundary([], plain) == []


# ---------------------------------------------------------------------------
# concurrency
# ---------------------------------------------------------------------------


async def test_two_concurrent_passes_commit_once(make_memory: Any) -> None:
    first = quiet(await make_memory(keep_recent=5, summarize_batch=10))
    second = await make_memory()
    await write_each(first, dialogue(30))
    slow_a, slow_b = Recorder(delay=0.3, text="from A"), Recorder(delay=0.3, text="from B")

    outcomes = await asyncio.gather(
        run_pass(first, slow_a, keep_recent=5, batch=10),
        run_pass(second, slow_b, keep_recent=5, batch=10),
    )

    assert sorted(o.status for o in outcomes) == ["committed", "stale"]
    assert len(slow_a.calls) == len(slow_b.calls) == 1  # both worked on the same backlog
    winner = "from A" if outcomes[0].status == "committed" else "from B"
    summary = await first.summary(session_id=SID)
    assert summary is not None
    assert (summary.text, summary.message_count) == (winner, 25)
    assert len(await first.read(session_id=SID)) == 5
    await assert_invariant(first, SID, written=30)
    assert await first.redis.zscore(first.layout.pending("default"), SID) is None
    # The loser, run again, finds nothing left.
    assert (await run_pass(second, Recorder(), keep_recent=5)).status == "idle"


async def test_concurrent_passes_with_concurrent_writes_keep_invariant(make_memory: Any) -> None:
    memory = await make_memory()
    others = [await make_memory() for _ in range(3)]
    await write_each(memory, dialogue(25))
    written = 25

    async def writer() -> None:
        nonlocal written
        for i in range(30):
            await memory.write(dialogue(1, start=100 + i), session_id=SID)
            written += 1
            await asyncio.sleep(0.005)

    async def passes(client: Memory) -> None:
        for _ in range(6):
            await run_pass(client, Recorder(delay=0.02), keep_recent=3, batch=4, cap=7)
            await assert_invariant(memory, SID)

    await asyncio.gather(writer(), *(passes(c) for c in others))
    await run_pass(memory, Recorder(), keep_recent=3)
    state = await assert_invariant(memory, SID, written=written)
    assert state.stored == 3
    assert state.summarized == written - 3


# ---------------------------------------------------------------------------
# failures leave the session untouched
# ---------------------------------------------------------------------------


class Raising:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        raise self.exc


class Sleeping:
    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        await asyncio.sleep(10)
        return "too late"


class Returning:
    def __init__(self, value: Any) -> None:
        self.value = value

    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> Any:
        return self.value


@pytest.mark.parametrize(
    ("summarizer", "error"),
    [
        (Raising(RuntimeError("boom")), "raised"),
        (Raising(SummarizerError("upstream down")), "upstream down"),
        (Raising(KeyError("x")), "raised"),
        (Sleeping(), "timed out"),
        (Returning(""), "unusable"),
        (Returning("   \n"), "unusable"),
        (Returning("x" * (MAX_SUMMARY_CHARS + 1)), "unusable"),
        (Returning(None), "unusable"),
        (Returning(42), "unusable"),
        (Returning(b"bytes"), "unusable"),
    ],
    ids=[
        "runtime-error",
        "summarizer-error",
        "key-error",
        "timeout",
        "empty",
        "blank",
        "huge",
        "none",
        "int",
        "bytes",
    ],
)
async def test_summarizer_failure_leaves_session_byte_for_byte_unchanged(
    make_memory: Any, raw: Any, namespace: str, summarizer: Any, error: str
) -> None:
    memory = quiet(await make_memory(keep_recent=3, summarize_batch=5))
    await memory.write([tool_call("c0"), tool_result("c0", "r0")], session_id=SID)
    await write_each(memory, dialogue(20))
    await run_pass(memory, Recorder(), keep_recent=3, batch=5, cap=8)  # there is a summary
    await write_each(memory, dialogue(10, start=20))
    before = await snapshot(raw, f"{namespace}:*")
    assert any(key.endswith(b":summary") for key in before)
    assert any(key.endswith(b":pending") for key in before)

    with pytest.raises(SummarizerError, match=error):
        await run_pass(memory, summarizer, keep_recent=3, batch=5, summarizer_timeout=0.2)

    assert await snapshot(raw, f"{namespace}:*") == before


async def test_keypoints_end_to_end_pass(make_memory: Any) -> None:
    memory = await make_memory()
    await memory.write(
        [
            user("My name is Alice. Can you book a table for two?"),
            assistant("Booked for 8pm.", tool_calls=[]),
            user("thanks"),
            assistant("You're welcome."),
        ],
        session_id=SID,
    )
    assert (await run_pass(memory, KeyPointsSummarizer(), keep_recent=2)).summarized == 2
    summary = await memory.summary(session_id=SID)
    assert summary is not None
    assert "My name is Alice." in summary.text
    assert "Booked for 8pm." in summary.text


async def test_default_summarizer_can_summarize_small_talk(make_memory: Any) -> None:
    memory = await make_memory()
    await memory.write(
        [user("hello"), assistant("Hi there!"), user("nice weather"), assistant("Indeed.")],
        session_id=SID,
    )
    assert (await run_pass(memory, KeyPointsSummarizer(), keep_recent=1)).status == "committed"


# ---------------------------------------------------------------------------
# context()
# ---------------------------------------------------------------------------


async def test_context_puts_summary_first_within_budget(make_memory: Any) -> None:
    memory = await make_memory()
    written = dialogue(40)
    await write_each(memory, written)
    long_summary = " ".join(f"point-{i}" for i in range(1500))  # ~3,000 tokens
    await run_pass(memory, Recorder(text=long_summary), keep_recent=10)
    recent_contents = [m["content"] for m in written[30:]]

    full = await memory.context(session_id=SID)
    head, *recent = full.messages
    assert head.role == "system"
    assert head.content.startswith(MEMORY_DATA_HEADER)
    assert unfence(head.content) == {SUMMARY_LABEL: long_summary}
    assert head.metadata == {"redismem": "summary"}
    assert contents(recent) == recent_contents
    assert full.summary is not None and full.summary.message_count == 30
    assert full.token_count == sum(m.token_count or 0 for m in full.messages)

    for budget in (4000, 1000, 300, 120, 60, 25, 12, 5, 1):
        context = await memory.context(session_id=SID, max_tokens=budget)
        assert context.token_count <= budget, budget
        assert context.token_count == sum(m.token_count or 0 for m in context.messages)
        assert context.summary is not None  # the Summary object is returned whole
        rest = context.messages
        if rest and rest[0].role == "system":
            assert rest[0].content.startswith(MEMORY_DATA_HEADER)
            assert long_summary.startswith(unfence(rest[0].content)[SUMMARY_LABEL])
            rest = rest[1:]
        # The recent part is a suffix of the unsummarized messages, oldest first.
        assert contents(rest) == recent_contents[len(recent_contents) - len(rest) :]
        assert all(m.role != "system" for m in rest)
        if budget >= 300:
            # The summary is cut to fit and does not crowd out the recent messages.
            assert context.messages[0].role == "system"
            assert len(rest) >= 1

    empty = await memory.context(session_id=SID, max_tokens=0)
    assert (empty.messages, empty.token_count) == ([], 0)


async def test_context_without_summary_has_no_system_message(make_memory: Any) -> None:
    memory = await make_memory()
    await write_each(memory, dialogue(6))
    context = await memory.context(session_id=SID, max_tokens=1000)
    assert context.summary is None
    assert [m.role for m in context.messages] == ["user", "assistant"] * 3
