"""Seam races of one shape: a writer reads (or holds) a user's data, then a
later call writes what it derived from it, and a clear, delete or purge ran
in between: the late write must be refused, never bring the data back
("cleared means gone"). Each test runs the deletion deterministically at
that point by wrapping the writer's next call, on both backends. (The record
block seal's case is in test_recall_format2.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from redismem import InvalidInput, Memory
from redismem.longterm.consolidation import Decision
from redismem.longterm.memories import Knowledge
from redismem.longterm.memory_items import CHUNKS, MemoryItems
from redismem.longterm.records import Document, Goal, MemoryRecord

MemoryFactory = Callable[..., Awaitable[Memory]]

BODY = " ".join(f"word{i}" for i in range(600)) + " zebracrossing " + "tail " * 50


async def chunks_left(mem: Memory, user_id: str) -> list[Any]:
    """Every chunk item (with a version or a history) of the user's documents."""
    return await mem.store.histories((user_id, CHUNKS))


async def test_a_document_update_whose_chunks_follow_a_purge_leaves_no_chunk(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # update() reads the document, puts its new version, then writes its
    # chunks from what it read: a purge of the document that ran between the
    # put and the chunks must not see the chunks (its text) written back.
    mem = await make_memory()
    added = await mem.memories.add(Document(text=BODY, title="Notes"), user_id="alice")
    assert added is not None
    mid = added.record.id
    original = MemoryItems._put_chunks
    purged: list[int] = []

    async def chunks_after_a_purge(self: MemoryItems, *args: Any, **kwargs: Any) -> None:
        if not purged:
            purged.append(await mem.memories.purge(mid, user_id="alice"))
        await original(self, *args, **kwargs)

    monkeypatch.setattr(MemoryItems, "_put_chunks", chunks_after_a_purge)
    # The purge won: the update says so, as when the purge came first.
    with pytest.raises(InvalidInput, match="no memory"):
        await mem.memories.update(mid, user_id="alice", text=BODY + " more")
    assert purged == [1]
    assert await mem.memories.get(mid, user_id="alice") is None
    assert await chunks_left(mem, "alice") == []
    assert await mem.memories.search("zebracrossing", user_id="alice") == []


async def test_a_purge_between_whose_steps_a_document_writes_its_chunks_leaves_no_chunk(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A purge of one document is two store calls (its record, its chunks);
    # an add of that document that put its record before the purge and
    # writes its chunks between the purge's two calls must leave nothing.
    mem = await make_memory()
    store = mem.store
    original_chunks = MemoryItems._put_chunks
    record_put, between, written = asyncio.Event(), asyncio.Event(), asyncio.Event()
    ids: list[str] = []

    async def chunks_when_told(self: MemoryItems, user_id: str, document: Any, *rest: Any) -> None:
        ids.append(document.id)
        record_put.set()
        await between.wait()
        try:
            await original_chunks(self, user_id, document, *rest)
        finally:
            written.set()

    monkeypatch.setattr(MemoryItems, "_put_chunks", chunks_when_told)
    purger: list[asyncio.Task[int]] = []
    steps: list[str] = []

    def pausing(name: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def step(*args: Any, **kwargs: Any) -> Any:
            result = await call(*args, **kwargs)
            if purger and asyncio.current_task() is purger[0]:
                steps.append(name)
                if len(steps) == 1:
                    between.set()  # the add writes its chunks now
                    await written.wait()
            return result

        return step

    monkeypatch.setattr(store, "purge", pausing("purge", store.purge))
    monkeypatch.setattr(store, "purge_item", pausing("purge_item", store.purge_item))
    adder = asyncio.create_task(
        mem.memories.add(Document(text=BODY, title="Notes"), user_id="alice")
    )
    await record_put.wait()
    purger.append(asyncio.create_task(mem.memories.purge(ids[0], user_id="alice")))
    assert await purger[0] == 1
    await adder
    assert sorted(steps) == ["purge", "purge_item"]
    assert await mem.memories.get(ids[0], user_id="alice") is None
    assert await chunks_left(mem, "alice") == []


class CorrectedMeanwhile:
    """A consolidator that merges the new record into the first one it is
    shown; on its first call the user corrects that record while it decides
    (as a slow LLM call lets happen)."""

    def __init__(self, memories: Knowledge, correction: str) -> None:
        self.memories = memories
        self.correction = correction
        self.shown: list[str] = []

    async def decide(self, new: MemoryRecord, existing: Sequence[MemoryRecord]) -> Decision:
        target = existing[0]
        self.shown.append(target.text)
        if len(self.shown) == 1:
            await self.memories.update(target.id, user_id="alice", text=self.correction)
        return Decision("update", target.id, f"{target.text}; every morning", "merged")


async def test_a_consolidation_decided_on_a_record_corrected_meanwhile_decides_again(
    make_memory: MemoryFactory,
) -> None:
    # The consolidator's merged text derives from the record as the search
    # read it; the user's correction of that record (e.g. a detail removed)
    # made while it decided must not be overwritten by the stale merge.
    mem = await make_memory()
    memories = Knowledge(mem)
    first = await memories.add(Goal(text="Drink more green tea at 5 Main St"), user_id="alice")
    assert first is not None
    judge = CorrectedMeanwhile(memories, "Drink more green tea")
    consolidating = Knowledge(mem, consolidator=judge)
    second = await consolidating.add(Goal(text="Drink green tea every morning"), user_id="alice")
    assert second is not None and second.outcome == "updated"
    got = await memories.get(first.record.id, user_id="alice")
    assert got is not None and got.text == "Drink more green tea; every morning"
    assert judge.shown == ["Drink more green tea at 5 Main St", "Drink more green tea"]
