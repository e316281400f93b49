"""The extraction pass (``redismem.longterm.extraction.job``): each indexed message is handed
to the extractor once, each memory found is added once, across failures
between any two steps; a burst waits for its quiet period; a cleared session
gets no memories; summarization never compacts a message not yet extracted.
Every test runs on a real Redis and on the embedded backend, calling the
passes directly (the worker processes are tested in ``test_extract_workers``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from helpers import assistant, user

from redismem import Decision, ExtractorError, Fact, Message, Provenance
from redismem.core.codec import message_id
from redismem.longterm.extraction.job import extract_pass
from redismem.longterm.memories import Knowledge
from redismem.longterm.records import MemoryRecord
from redismem.recall.index import catch_up
from redismem.summarization.job import summarize_pass
from redismem.summarization.summarizers import TruncationSummarizer

LIVES = re.compile(r"I live in (\w+)")


class CityExtractor:
    """Finds "I live in X" in user messages; records every batch it saw."""

    name = "rules"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.before_return: Any = None

    async def extract(self, messages: Sequence[Message], *, user_id: str) -> list[MemoryRecord]:
        self.batches.append([m.content for m in messages])
        if self.before_return is not None:
            await self.before_return()
        found: list[MemoryRecord] = []
        for message in messages:
            match = LIVES.search(message.content) if message.role == "user" else None
            if match:
                city = match.group(1)
                found.append(
                    Fact(
                        text=f"The user lives in {city}.",
                        subject="user",
                        predicate="lives_in",
                        object=city,
                        sources=[Provenance(message_ids=[message.id or ""], origin="rules")],
                    )
                )
        return found


async def indexed(make_memory: Any, sid: str, messages: list[dict[str, Any]]) -> Any:
    mem = await make_memory(index=True)
    await mem.write(messages, session_id=sid, user_id="alice", agent_name="planner")
    await catch_up(mem.backend, user_id="alice", session_id=sid)
    return mem


async def test_each_message_is_extracted_once_with_its_provenance(make_memory):
    mem = await indexed(
        make_memory, "s1", [user("Hi! I live in Lisbon"), assistant("I live in Mars (not me)")]
    )
    extractor = CityExtractor()
    first = await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    assert (first.status, first.messages, first.memories) == ("extracted", 2, 1)
    assert first.lag_ms is not None and first.lag_ms >= 0
    again = await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    assert again.status == "idle"
    await mem.write([user("Actually I live in Porto now")], session_id="s1", user_id="alice")
    assert (
        await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    ).status == "idle"
    await catch_up(mem.backend, user_id="alice", session_id="s1")
    third = await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    assert (third.status, third.messages) == ("extracted", 1)
    assert extractor.batches == [
        ["Hi! I live in Lisbon", "I live in Mars (not me)"],
        ["Actually I live in Porto now"],
    ]
    current = await mem.memories.search(user_id="alice")
    assert [h.record.text for h in current] == ["The user lives in Porto."]
    source = current[0].record.sources[0]
    assert (source.session_id, source.message_ids, source.agent, source.origin) == (
        "s1",
        [message_id(3)],
        None,  # the third write named no agent
        "rules",
    )
    first_source = (await mem.memories.search(user_id="alice", status="superseded"))[
        0
    ].record.sources[0]
    assert (first_source.message_ids, first_source.agent) == ([message_id(1)], "planner")
    old = await mem.memories.search(user_id="alice", status="superseded")
    assert [h.record.text for h in old] == ["The user lives in Lisbon."]


async def test_a_failing_extractor_changes_nothing_and_the_next_pass_retries(make_memory):
    mem = await indexed(make_memory, "s1", [user("I live in Lisbon")])

    class Failing(CityExtractor):
        async def extract(self, messages: Sequence[Message], *, user_id: str) -> list[MemoryRecord]:
            raise RuntimeError("endpoint away")

    with pytest.raises(ExtractorError):
        await extract_pass(mem.backend, Failing(), user_id="alice", session_id="s1", quiet=0)
    assert await mem.memories.search(user_id="alice", status="any") == []
    extractor = CityExtractor()
    outcome = await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    assert (outcome.status, outcome.memories) == ("extracted", 1)


async def test_a_pass_dying_while_it_applies_is_finished_by_the_next_once(make_memory, monkeypatch):
    mem = await indexed(
        make_memory,
        "s1",
        [user("I live in Lisbon"), user("I live in Porto"), user("I live in Faro")],
    )
    real_add = Knowledge.add_guarded
    calls = {"n": 0}

    async def dying_add(self: Knowledge, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        result = await real_add(self, *args, **kwargs)
        if calls["n"] == 2:
            raise ConnectionError("killed after the second memory landed")
        return result

    monkeypatch.setattr(Knowledge, "add_guarded", dying_add)
    extractor = CityExtractor()
    with pytest.raises(ConnectionError):
        await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    monkeypatch.setattr(Knowledge, "add_guarded", real_add)
    outcome = await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    assert outcome.status == "idle" and outcome.memories == 3  # the outbox, re-applied
    assert len(extractor.batches) == 1  # the messages were not extracted again
    every = await mem.memories.search(user_id="alice", status="any", limit=50)
    assert sorted(h.record.text for h in every) == [
        "The user lives in Faro.",
        "The user lives in Lisbon.",
        "The user lives in Porto.",
    ]
    assert all(len(h.record.sources) == 1 for h in every)
    assert [h.record.text for h in await mem.memories.search(user_id="alice")] == [
        "The user lives in Faro."
    ]
    for hit in every:
        changes = [c.change for c in await mem.memories.history(hit.record.id, user_id="alice")]
        assert changes in (["added"], ["added", "superseded"])


async def test_a_burst_waits_for_its_quiet_period(make_memory):
    mem = await indexed(make_memory, "s1", [user("I live in Lisbon")])
    extractor = CityExtractor()
    outcome = await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=30)
    assert outcome.status == "wait" and 25 < outcome.wait <= 30
    assert extractor.batches == []


async def test_a_session_cleared_during_extraction_gets_no_memories(make_memory):
    mem = await indexed(make_memory, "s1", [user("I live in Lisbon")])
    extractor = CityExtractor()

    async def clear() -> None:
        await mem.clear(session_id="s1", user_id="alice")
        await mem.write([user("I live in Rome")], session_id="s1", user_id="alice")

    extractor.before_return = clear
    outcome = await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    assert outcome.status == "gone"
    assert await mem.memories.search(user_id="alice", status="any") == []


async def test_summarization_never_compacts_a_message_not_yet_extracted(make_memory):
    mem = await indexed(make_memory, "s1", [user(f"I live in City{i}") for i in range(6)])
    extractor = CityExtractor()
    # The session's first extraction read starts its watermark; the burst waits.
    assert (
        await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=30)
    ).status == "wait"
    outcome = await summarize_pass(
        mem.backend,
        TruncationSummarizer(),
        user_id="alice",
        session_id="s1",
        keep_recent=0,
        batch=1,
        compact=True,
    )
    assert outcome.status == "idle"
    assert len(await mem.read(session_id="s1", user_id="alice")) == 6
    done = await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    assert done.messages == 6
    outcome = await summarize_pass(
        mem.backend,
        TruncationSummarizer(),
        user_id="alice",
        session_id="s1",
        keep_recent=0,
        batch=1,
        compact=True,
    )
    assert outcome.status == "committed" and outcome.summarized == 6


async def test_near_duplicates_found_by_extraction_go_to_the_consolidator(make_memory):
    mem = await indexed(make_memory, "s1", [user("I live in Lisbon")])
    extractor = CityExtractor()
    await extract_pass(mem.backend, extractor, user_id="alice", session_id="s1", quiet=0)
    shown: list[tuple[str, list[str]]] = []

    class KeepOld:
        async def decide(self, new: MemoryRecord, existing: Sequence[MemoryRecord]) -> Decision:
            shown.append((new.text, [r.text for r in existing]))
            return Decision("noop", existing[0].id, None, "the same home")

    # Another single-valued predicate for the same city: not a supersede,
    # a near duplicate by its words.
    class HomeExtractor(CityExtractor):
        async def extract(self, messages: Sequence[Message], *, user_id: str) -> list[MemoryRecord]:
            return [
                Fact(
                    text="The user lives in Lisbon, Portugal.",
                    subject="user",
                    predicate="home_city",
                    object="Lisbon",
                    sources=[Provenance(message_ids=[messages[0].id or ""])],
                )
            ]

    await mem.write([user("Home is Lisbon, Portugal")], session_id="s1", user_id="alice")
    await catch_up(mem.backend, user_id="alice", session_id="s1")
    outcome = await extract_pass(
        mem.backend,
        HomeExtractor(),
        user_id="alice",
        session_id="s1",
        quiet=0,
        consolidator=KeepOld(),
    )
    assert outcome.memories == 1
    assert shown == [("The user lives in Lisbon, Portugal.", ["The user lives in Lisbon."])]
    [hit] = await mem.memories.search(user_id="alice", status="any")
    assert [s.message_ids for s in hit.record.sources] == [[message_id(1)], [message_id(2)]]


async def test_a_custom_extractor_s_values_are_ordered_by_when_they_were_said(make_memory):
    """Issue 19, defect 6: an extractor that sets no times still gets each
    memory dated by the messages it cites, so the value said last is current
    whatever the order of the batch (here an import, newest first)."""
    from datetime import UTC, datetime

    mem = await make_memory(index=True)
    day = datetime(2024, 5, 1, tzinfo=UTC)
    for city, when in (("Porto", day.replace(day=3)), ("Lisbon", day.replace(day=2))):
        await mem.write(
            [user(f"I live in {city}")], session_id="s1", user_id="alice", created_at=when
        )
    await catch_up(mem.backend, user_id="alice", session_id="s1")
    outcome = await extract_pass(
        mem.backend, CityExtractor(), user_id="alice", session_id="s1", quiet=0
    )
    assert outcome.status == "extracted"
    [current] = await mem.memories.search(user_id="alice")
    assert current.record.text == "The user lives in Porto."
    assert current.record.sources[0].at == day.replace(day=3)
    [older] = await mem.memories.search(user_id="alice", status="superseded")
    assert older.record.sources[0].at == day.replace(day=2)
