"""Faults around one session, on a real Redis (and the embedded backend where
the fault can be made there): a summary job racing ``clear``/expiry, re-sent
writes, keys evicted apart, ``clear_user`` racing writers, bad options.

The process-level faults (SIGKILL, SIGSTOP, CLIENT KILL, full memory) are in
``test_faults_server.py``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import pytest
from helpers import snapshot, user

from redismem import CorruptData, InvalidInput, Memory, Message
from redismem.summarization.job import summarize_pass

SID = "s1"


class GatedSummarizer:
    """A summarizer that holds its answer until the test opens the gate."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.gate = asyncio.Event()

    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        self.started.set()
        await self.gate.wait()
        return f"summary of {len(messages)} messages of the old conversation"


async def quiet(memory: Memory) -> Memory:
    """Summarization settings on, but no job enqueued: the pass is run by hand."""

    async def no_enqueue(*args: Any) -> None:
        return None

    memory._enqueue_summary = no_enqueue  # type: ignore[method-assign]
    return memory


async def _pass_racing(mem: Memory, between: Any) -> Any:
    """Start a pass over 25 messages, run ``between()`` while the summarizer
    works, then let the pass commit."""
    for i in range(25):
        await mem.write([user(f"old {i}")], session_id=SID)
    summarizer = GatedSummarizer()
    job = asyncio.create_task(
        summarize_pass(
            mem.backend, summarizer, user_id="default", session_id=SID, keep_recent=5, batch=10
        )
    )
    await asyncio.wait_for(summarizer.started.wait(), 10)
    await between()
    summarizer.gate.set()
    return await asyncio.wait_for(job, 10)


@pytest.mark.parametrize("how", ["clear", "expire"])
async def test_summary_job_never_commits_into_a_session_cleared_and_written_again(make_memory, how):
    mem = await quiet(await make_memory(keep_recent=5, summarize_batch=10, ttl=1.0))

    async def end_and_write_again() -> None:
        if how == "clear":
            await mem.clear(session_id=SID)
        else:
            await asyncio.sleep(1.3)
            assert await mem.read(session_id=SID) == []
        for i in range(5):
            await mem.write([user(f"new {i}")], session_id=SID)

    outcome = await _pass_racing(mem, end_and_write_again)

    assert outcome.status == "gone"
    assert [m.content for m in await mem.read(session_id=SID)] == [f"new {i}" for i in range(5)]
    context = await mem.context(session_id=SID)
    assert context.summary is None
    assert [m.content for m in context.messages] == [f"new {i}" for i in range(5)]
    assert await mem.summary(session_id=SID) is None
    # Later writes stay visible (the watermark of the old session did not leak).
    await mem.write([user("later")], session_id=SID)
    assert (await mem.context(session_id=SID)).messages[-1].content == "later"


async def test_summary_job_still_commits_when_only_new_messages_arrived(make_memory):
    mem = await quiet(await make_memory(keep_recent=5, summarize_batch=10))

    async def write_more() -> None:
        await mem.write([user("more")], session_id=SID)

    outcome = await _pass_racing(mem, write_more)
    assert outcome.status == "committed"
    assert (await mem.summary(session_id=SID)) is not None


async def test_a_resent_write_is_stored_once_and_returns_the_first_result(make_memory, raw):
    mem = await make_memory(keep_recent=5, summarize_batch=10)
    await quiet(mem)
    first = await mem.write([user("a"), user("b")], session_id=SID, write_id="w-1")
    state = await snapshot(raw, mem.layout.user_pattern("default"))
    again = await mem.write([user("a"), user("b")], session_id=SID, write_id="w-1")
    assert again.id == first.id
    assert again.metadata.created_at == first.metadata.created_at
    assert [m.id for m in again.messages] == [m.id for m in first.messages]
    assert await snapshot(raw, mem.layout.user_pattern("default")) == state
    assert [m.content for m in await mem.read(session_id=SID)] == ["a", "b"]
    other = await mem.write([user("c")], session_id=SID, write_id="w-2")
    assert other.id != first.id
    assert [m.content for m in await mem.read(session_id=SID)] == ["a", "b", "c"]


async def test_write_ids_are_remembered_for_the_latest_thousand_writes(make_memory):
    mem = await make_memory()
    for i in range(2100):
        await mem.write([user(f"m{i}")], session_id=SID, write_id=f"w{i}")
    messages = await mem.read(session_id=SID)
    assert len(messages) == 2100
    await mem.write([user("again")], session_id=SID, write_id="w2099")
    await mem.write([user("again")], session_id=SID, write_id="w1100")
    assert len(await mem.read(session_id=SID)) == 2100
    held = await mem.redis.hlen(mem.layout.session("default", SID).writes)
    assert 1000 <= held < 2000


@pytest.mark.parametrize("bad", ["", " ", "a b", "x" * 129, "é", 5, b"id"], ids=repr)
async def test_bad_write_ids_are_rejected(make_memory, bad):
    mem = await make_memory()
    with pytest.raises(InvalidInput, match="write_id"):
        await mem.write([user("x")], session_id=SID, write_id=bad)
    assert await mem.read(session_id=SID) == []


@pytest.mark.parametrize("evicted", ["meta", "msgs", "entries"])
async def test_a_session_whose_keys_were_evicted_apart_raises_corrupt_data(
    make_memory, raw, evicted
):
    mem = await make_memory()
    for i in range(4):
        await mem.write([user(f"m{i}")], session_id=SID)
    await mem.write([user("other")], session_id="other")
    keys = mem.layout.session("default", SID)
    await raw.delete(getattr(keys, evicted))
    before = await snapshot(raw, mem.layout.namespace_pattern())

    for call in (
        lambda: mem.write([user("x")], session_id=SID),
        lambda: mem.read(session_id=SID),
        lambda: mem.read(session_id=SID, max_tokens=100),
        lambda: mem.entries(session_id=SID),
        lambda: mem.context(session_id=SID),
    ):
        with pytest.raises(CorruptData) as info:
            await call()
        assert info.value.key.startswith(mem.layout.user_prefix("default") + "s:s1:")
        assert "clear" in str(info.value)
    # Nothing changed, no id was renumbered; other sessions are fine.
    assert await snapshot(raw, mem.layout.namespace_pattern()) == before
    assert [m.content for m in await mem.read(session_id="other")] == ["other"]
    # Clearing the session heals it.
    await mem.clear(session_id=SID)
    entry = await mem.write([user("fresh")], session_id=SID)
    assert entry.messages[0].id == "000000000001"


async def test_summary_evicted_while_the_watermark_says_summarized(make_memory, raw):
    mem = await quiet(await make_memory(keep_recent=5, summarize_batch=10))
    for i in range(25):
        await mem.write([user(f"m{i}")], session_id=SID)
    outcome = await summarize_pass(
        mem.backend, GatedOpen(), user_id="default", session_id=SID, keep_recent=5, batch=10
    )
    assert outcome.status == "committed"
    await raw.delete(mem.layout.session("default", SID).summary)
    with pytest.raises(CorruptData):
        await mem.context(session_id=SID)


class GatedOpen:
    async def summarize(self, previous: str | None, messages: Sequence[Message]) -> str:
        return f"{len(messages)} messages"


async def _consistent(mem: Memory, raw: Any, uid: str, sid: str) -> str | None:
    """Why the session is inconsistent, or None when it is whole (or gone)."""
    keys = mem.layout.session(uid, sid)
    pipe = raw.pipeline(transaction=True)
    pipe.hgetall(keys.meta)
    pipe.llen(keys.msgs)
    pipe.llen(keys.entries)
    pipe.exists(keys.writes)
    meta, length, entries, writes = await pipe.execute()
    if not meta:
        return f"msgs={length} entries={entries} without meta" if length or entries else None
    seq, dropped = int(meta[b"seq"]), int(meta.get(b"dropped", 0))
    if length != seq - dropped or not entries or not writes:
        return f"seq={seq} dropped={dropped} msgs={length} entries={entries} writes={writes}"
    messages = await mem.read(session_id=sid, user_id=uid)
    ids = [int(m.id or "0") for m in messages]
    if ids != list(range(seq - length + 1, seq + 1)):
        return f"ids {ids[:3]}... for seq {seq}"
    return None


async def test_clear_user_racing_writers_leaves_no_damaged_session(make_memory, raw):
    mem = await make_memory()
    uid, sessions = "racer", [f"s{i}" for i in range(120)]
    for sid in sessions:
        await mem.write([user("seed")], session_id=sid, user_id=uid, tags={"k": "v"})
    stop = asyncio.Event()

    async def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            sid = sessions[(n * 37 + i) % len(sessions)]
            await mem.write([user(f"w{n}-{i}"), user("pair")], session_id=sid, user_id=uid)
            i += 1

    for _ in range(3):
        stop.clear()
        tasks = [asyncio.create_task(writer(n)) for n in range(8)]
        await asyncio.sleep(0.05)
        await mem.clear_user(uid)
        await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*tasks)
        damaged = {sid: why for sid in sessions if (why := await _consistent(mem, raw, uid, sid))}
        assert damaged == {}
    await mem.clear_user(uid)
    assert [k async for k in raw.scan_iter(match=mem.layout.user_pattern(uid))] == []


@pytest.mark.parametrize(
    "ttl", [math.inf, -math.inf, math.nan, 10**400, 10**12, 0, -1, "60"], ids=repr
)
async def test_bad_ttls_are_invalid_input(backend_url, ttl):
    with pytest.raises(InvalidInput, match="ttl"):
        await Memory.connect(backend_url, ttl=ttl)


@pytest.mark.parametrize(
    "option",
    [
        {"socket_timeout": math.nan},
        {"socket_timeout": math.inf},
        {"connect_timeout": 0},
        {"retries": -1},
        {"retries": 10**9},
        {"retries": True},
        {"summarize_delay": math.nan},
        {"queue_name": "redismem:queue"},
        {"namespace": "arq"},
    ],
    ids=repr,
)
async def test_bad_options_are_invalid_input(backend_url, option):
    with pytest.raises(InvalidInput):
        await Memory.connect(backend_url, **option)


async def test_the_longest_ttl_is_accepted_and_writes_work(make_memory):
    mem = await make_memory(ttl=36_500 * 86_400)
    await mem.write([user("kept")], session_id=SID)
    assert [m.content for m in await mem.read(session_id=SID)] == ["kept"]


async def test_every_call_survives_a_flushed_script_cache(make_memory, raw):
    """A restarted or failed-over server has no scripts: each call reloads its own."""
    mem = await quiet(await make_memory(keep_recent=2, summarize_batch=2))
    for i in range(6):
        await mem.write([user(f"m{i}")], session_id=SID)
    calls = [
        lambda: mem.read(session_id=SID),
        lambda: mem.read(session_id=SID, limit=2),
        lambda: mem.read(session_id=SID, max_tokens=100),
        lambda: mem.context(session_id=SID),
        lambda: mem.entries(session_id=SID),
        lambda: mem.sessions(),
        lambda: mem.write([user("after")], session_id=SID),
        lambda: summarize_pass(
            mem.backend, GatedOpen(), user_id="default", session_id=SID, keep_recent=2, batch=2
        ),
        lambda: mem.clear(session_id=SID),
    ]
    for call in calls:
        await raw.script_flush()
        await call()
    assert await mem.read(session_id=SID) == []
