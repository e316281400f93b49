"""Summarization pass details the mutation run found unpinned (see
docs/mutation-testing.md). Through ``summarize_pass`` and ``settle_pending``,
the documented functions of ``redismem.summarization.job``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from redismem import Memory, Message, SummarizerError
from redismem.recall import index as recall
from redismem.summarization.job import (
    MAX_SUMMARY_CHARS,
    SummarizeOutcome,
    settle_pending,
    summarize_pass,
)

SID = "s"


def turns(n: int, start: int = 0) -> list[Message]:
    return [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
        for i in range(start, start + n)
    ]


class Fixed:
    """A summarizer answering ``text`` (and recording what it was given)."""

    def __init__(self, text: str = "summary") -> None:
        self.text = text
        self.seen: list[list[Message]] = []

    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        self.seen.append(list(messages))
        return self.text


async def run(memory: Memory, summarizer: Any, **kwargs: Any) -> SummarizeOutcome:
    kwargs.setdefault("keep_recent", 2)
    kwargs.setdefault("batch", 1)
    return await summarize_pass(
        memory.backend, summarizer, user_id="default", session_id=SID, **kwargs
    )


async def pending_mark(memory: Memory) -> Any:
    return await memory.redis.zscore(memory.layout.pending("default"), SID)


@pytest.fixture
def summarizing(make_memory, namespace):
    """A Memory that marks sessions due (and enqueues on a queue of its own,
    which no worker serves): passes are run by hand."""

    async def make(**options: Any) -> Memory:
        options.setdefault("keep_recent", 2)
        options.setdefault("summarize_batch", 1)
        options.setdefault("index", False)
        return await make_memory(
            queue_name=f"redismem/strength-{namespace}", summarize_delay=3600, **options
        )

    return make


async def test_a_summary_of_exactly_the_limit_is_accepted(make_memory):
    assert MAX_SUMMARY_CHARS == 32_000  # the documented contract for summarizers
    memory = await make_memory()
    await memory.write(turns(6), session_id=SID)
    outcome = await run(memory, Fixed("x" * 32_000))
    assert outcome.status == "committed"
    summary = await memory.summary(session_id=SID)
    assert summary is not None and len(summary.text) == 32_000


async def test_a_summary_one_character_over_the_limit_is_refused(make_memory):
    memory = await make_memory()
    await memory.write(turns(6), session_id=SID)
    with pytest.raises(SummarizerError):
        await run(memory, Fixed("x" * 32_001))
    assert await memory.summary(session_id=SID) is None
    assert len(await memory.read(session_id=SID)) == 6


async def test_keep_recent_zero_summarizes_the_whole_session(make_memory):
    memory = await make_memory()
    await memory.write(turns(5), session_id=SID)
    summarizer = Fixed()
    outcome = await run(memory, summarizer, keep_recent=0)
    assert (outcome.status, outcome.summarized) == ("committed", 5)
    assert [m.content for m in summarizer.seen[0]] == [f"m{i}" for i in range(5)]
    assert await memory.read(session_id=SID) == []


async def test_a_pass_compacts_by_default(make_memory):
    memory = await make_memory()
    await memory.write(turns(6), session_id=SID)
    outcome = await summarize_pass(
        memory.backend, Fixed(), user_id="default", session_id=SID, keep_recent=2, batch=1
    )
    assert (outcome.status, outcome.summarized) == ("committed", 4)
    assert [m.content for m in await memory.read(session_id=SID)] == ["m4", "m5"]


async def test_outcomes_of_passes_that_did_nothing(make_memory):
    memory = await make_memory()
    gone = await run(memory, Fixed())
    assert gone == SummarizeOutcome(
        "gone", summarized=0, still_pending=False, lag_ms=None, seq=0, gen=""
    )
    await memory.write(turns(2), session_id=SID)
    idle = await run(memory, Fixed(), keep_recent=5)
    assert (idle.status, idle.summarized, idle.still_pending, idle.lag_ms) == (
        "idle",
        0,
        False,
        None,
    )
    assert idle.seq == 2 and idle.gen != ""


async def test_a_pass_that_loses_the_race_is_stale_and_leaves_the_session_pending(summarizing):
    memory = await summarizing()
    await memory.write(turns(6), session_id=SID)

    class Overtaken(Fixed):
        """While this pass waits for its summary, another pass commits."""

        async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
            inner = await run(memory, Fixed("the winner"))
            assert inner.status == "committed"
            return await super().summarize(previous, messages)

    outcome = await run(memory, Overtaken("the loser"))
    assert outcome == SummarizeOutcome("stale", still_pending=True)
    summary = await memory.summary(session_id=SID)
    assert summary is not None and summary.text == "the winner"


async def test_settle_clears_the_mark_after_an_idle_pass(summarizing):
    memory = await summarizing()
    await memory.write(turns(4), session_id=SID)
    assert await pending_mark(memory) is not None
    idle = await run(memory, Fixed(), keep_recent=10)
    assert idle.status == "idle"
    assert await settle_pending(
        memory.backend, user_id="default", session_id=SID, seq=idle.seq, gen=idle.gen
    )
    assert await pending_mark(memory) is None


async def test_settle_keeps_the_mark_while_messages_wait_for_indexing(summarizing):
    memory = await summarizing(index=True)
    await memory.write(turns(4), session_id=SID)
    idle = await run(memory, Fixed(), keep_recent=10)
    assert not await settle_pending(
        memory.backend, user_id="default", session_id=SID, seq=idle.seq, gen=idle.gen
    )
    assert await pending_mark(memory) is not None
    await recall.catch_up(memory.backend, user_id="default", session_id=SID)
    assert await settle_pending(
        memory.backend, user_id="default", session_id=SID, seq=idle.seq, gen=idle.gen
    )
    assert await pending_mark(memory) is None


async def test_settle_keeps_the_mark_when_a_write_came_after_the_pass(summarizing):
    memory = await summarizing()
    await memory.write(turns(4), session_id=SID)
    idle = await run(memory, Fixed(), keep_recent=10)
    await memory.write(turns(1, start=4), session_id=SID)
    assert not await settle_pending(
        memory.backend, user_id="default", session_id=SID, seq=idle.seq, gen=idle.gen
    )
    assert await pending_mark(memory) is not None
