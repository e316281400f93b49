"""The automatic upgrade of a recall index from format 1 to format 2
(``redismem.recall.upgrade``): every doc copied once with its hits
unchanged, format 1 serving until the switch and gone after it, cleared
sessions staying cleared, a resumed or re-sent copy adding nothing; and a
real worker doing it unasked."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from helpers import keys_matching
from worker_support import WorkerPool, eventually, wait_ready, worker_env

from redismem import Memory, Message
from redismem.core.backend import Backend, backend_of
from redismem.recall import index, postings, purge, upgrade
from redismem.recall.index import catch_up

MemoryFactory = Callable[..., Awaitable[Memory]]

SESSIONS = ("s0", "s1", "s2", "s3")
PER_SESSION = 23


def token(session: int, i: int) -> str:
    return f"tok{session}x{i}"


async def write_old_index(
    memory: Memory, monkeypatch: pytest.MonkeyPatch, user_id: str = "u"
) -> dict[str, tuple[str, str | None]]:
    """A user indexed in format 1: {token: (session id, message id)}."""
    monkeypatch.setattr(index, "NEW_INDEX_FORMAT", 1)
    expected = {}
    for s, sid in enumerate(SESSIONS):
        for i in range(PER_SESSION):
            text = f"{token(s, i)} shared words about tea and trains"
            entry = await memory.write(
                [Message(role="user" if i % 2 else "assistant", content=text, name=f"spk{s}")],
                session_id=sid,
                user_id=user_id,
                agent_name=f"agent{s % 2}",
                tags={"kind": f"k{s}"},
            )
            expected[token(s, i)] = (sid, entry.messages[0].id)
    backend = backend_of(memory)
    for sid in SESSIONS:
        await catch_up(backend, user_id=user_id, session_id=sid)
    recall = backend.layout.recall(user_id)
    assert await backend.redis.exists(recall.stats)
    assert await backend.redis.hget(recall.i_meta, "v") is None
    monkeypatch.setattr(index, "NEW_INDEX_FORMAT", 2)
    return expected


async def found(memory: Memory, query: str, user_id: str = "u", **filters: Any) -> list[Any]:
    hits = await memory.search(query, user_id=user_id, limit=50, **filters)
    return [(h.session_id, h.message.id) for h in hits]


async def token_hits(memory: Memory, tokens: list[str]) -> dict[str, list[Any]]:
    return {t: await found(memory, t) for t in tokens}


async def best_hits(memory: Memory, tokens: list[str]) -> dict[str, list[Any]]:
    """The best hit of each token: its own message (the next messages hold
    it as context, the previous one gets a share of it: they follow)."""
    return {t: (await found(memory, t))[:1] for t in tokens}


async def format_of(backend: Backend, user_id: str = "u") -> bytes | None:
    result: bytes | None = await backend.redis.hget(backend.layout.recall(user_id).i_meta, "v")
    return result


async def test_an_old_index_is_copied_once_with_the_same_hits_and_then_deleted(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    expected = await write_old_index(memory, monkeypatch)
    await memory.clear(session_id="s3", user_id="u")
    tokens = sorted(expected)
    before = await token_hits(memory, tokens)
    by_filter = {
        "agent": await found(memory, "tea", agent_name="agent1"),
        "tag": await found(memory, "trains", tags={"kind": "k0"}),
        "session": await found(memory, "shared", session_id="s2"),
        "recent": await found(memory, "", session_id="s1"),
    }
    monkeypatch.setattr(upgrade, "MIGRATE_BATCH", 7)
    outcome = await upgrade.upgrade(backend, user_id="u")
    assert outcome.status == "done"
    assert outcome.copied == 3 * PER_SESSION  # s3 was cleared before
    recall = backend.layout.recall("u")
    assert await format_of(backend) == b"2"
    assert await keys_matching(backend.redis, recall.prefix + "*") == []
    after = await token_hits(memory, tokens)
    assert after == before
    for t in tokens:
        sid = expected[t][0]
        assert after[t][:1] == ([] if sid == "s3" else [expected[t]])
    assert by_filter["agent"] and by_filter["tag"] and by_filter["session"]
    assert await found(memory, "tea", agent_name="agent1") == by_filter["agent"]
    assert await found(memory, "trains", tags={"kind": "k0"}) == by_filter["tag"]
    assert await found(memory, "shared", session_id="s2") == by_filter["session"]
    assert await found(memory, "", session_id="s1") == by_filter["recent"]
    # Every copied doc once in its session's list.
    sess = await backend.redis.hgetall(recall.i_sess)
    for sid in SESSIONS[:3]:
        listed = await backend.redis.get(recall.i_session_list(int(sess[sid.encode()])))
        assert len(postings.decode_postings(listed)) == PER_SESSION
    # Again: nothing to do, nothing changes.
    assert (await upgrade.upgrade(backend, user_id="u")).status == "done"
    assert await token_hits(memory, tokens) == before
    # New messages go to format 2, after the old docids, linked to their session.
    await memory.write(
        [Message(role="user", content="brand newword")], session_id="s0", user_id="u"
    )
    outcome_new = await index.index_pass(backend, user_id="u", session_id="s0")
    assert outcome_new.status == "indexed" and not outcome_new.format1
    # The previous doc comes second through the link (it lends it a share).
    assert await found(memory, "newword") == [
        ("s0", (await memory.read(session_id="s0", user_id="u"))[-1].id),
        expected[token(0, PER_SESSION - 1)],
    ]


async def test_format_1_serves_until_the_switch_and_a_resumed_copy_adds_nothing(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    expected = await write_old_index(memory, monkeypatch)
    monkeypatch.setattr(upgrade, "MIGRATE_BATCH", 10)
    partial = await upgrade.upgrade(backend, user_id="u", time_budget=0)
    assert partial.status == "partial"
    recall = backend.layout.recall("u")
    assert await backend.redis.hget(recall.i_meta, "mig") == b"10"
    assert await format_of(backend) is None
    # A re-sent call (the cursor it read has moved) copies nothing.
    stale = await backend.scripts.index_migrate(recall, cursor="", batch=10)
    assert (stale.status, stale.cursor, stale.copied) == (0, 10, 0)
    # Format 1 still serves, and still takes commits (docids past the cursor).
    await memory.write(
        [Message(role="user", content="late lateword")], session_id="s1", user_id="u"
    )
    late = await index.index_pass(backend, user_id="u", session_id="s1")
    assert late.status == "indexed" and late.format1
    late_hits = await found(memory, "lateword")
    assert late_hits[0][0] == "s1"
    tokens = sorted(expected)
    assert await best_hits(memory, tokens) == {t: [expected[t]] for t in tokens}
    done = await upgrade.upgrade(backend, user_id="u")
    assert done.status == "done"
    assert done.copied == 4 * PER_SESSION + 1 - 10
    assert await best_hits(memory, tokens) == {t: [expected[t]] for t in tokens}
    assert await found(memory, "lateword") == late_hits
    meta = await backend.redis.hgetall(recall.i_meta)
    assert int(meta[b"n"]) == 4 * PER_SESSION + 1
    assert int(meta[b"next"]) == 4 * PER_SESSION + 1


async def test_a_session_cleared_during_the_upgrade_stays_cleared(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    expected = await write_old_index(memory, monkeypatch)
    monkeypatch.setattr(upgrade, "MIGRATE_BATCH", 30)  # s0 and part of s1 copied
    assert (await upgrade.upgrade(backend, user_id="u", time_budget=0)).status == "partial"
    # A clear whose graves are not forgotten yet (the client died after the
    # clear script): its docs are still in format 1's docs, listed in a grave.
    monkeypatch.setattr(purge, "forget_cleared", _no_forget)
    await memory.clear(session_id="s1", user_id="u")
    await memory.clear(session_id="s2", user_id="u")
    monkeypatch.undo()
    monkeypatch.setattr(upgrade, "MIGRATE_BATCH", 30)
    assert (await upgrade.upgrade(backend, user_id="u")).status == "done"
    hits = await best_hits(memory, sorted(expected))
    for t, (sid, mid) in expected.items():
        assert hits[t][:1] == ([] if sid in ("s1", "s2") else [(sid, mid)]), t
    assert await found(memory, "tea", session_id="s1") == []


async def _no_forget(*_args: Any, **_kwargs: Any) -> None:
    return None


async def test_clear_user_during_the_upgrade_leaves_nothing(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await make_memory(recall_ttl=None)
    backend = backend_of(memory)
    await write_old_index(memory, monkeypatch)
    monkeypatch.setattr(upgrade, "MIGRATE_BATCH", 10)
    assert (await upgrade.upgrade(backend, user_id="u", time_budget=0)).status == "partial"
    old = backend.layout.recall("u")
    await memory.clear_user("u")
    assert (await upgrade.upgrade(backend, user_id="u")).status in ("done", "gone")
    assert await keys_matching(backend.redis, old.prefix + "*") == []
    assert await keys_matching(backend.redis, old.i_prefix + "*") == []
    assert await memory.search("tea", user_id="u") == []


@pytest.mark.timeout(120)
async def test_a_worker_upgrades_an_old_index_unasked(
    memory_factory: MemoryFactory,
    redis_url: str,
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
    workers: WorkerPool,
) -> None:
    memory = await memory_factory(redis_url, queue_name=queue_name, summarize_delay=0.05)
    backend = backend_of(memory)
    expected = await write_old_index(memory, monkeypatch)
    env = worker_env(redis_url, memory.layout.namespace, queue_name, SUMMARIZER="truncate")
    worker = workers.start(env, name="upgrader")
    await wait_ready(backend.redis, worker)
    await memory.write(
        [Message(role="user", content="fresh freshword")], session_id="s2", user_id="u"
    )
    assert await memory.flush(user_id="u", timeout=60)
    recall = backend.layout.recall("u")

    async def moved() -> bool:
        return await format_of(backend) == b"2" and not await backend.redis.exists(recall.stats)

    await eventually(moved, within=60)
    tokens = sorted(expected)
    assert await best_hits(memory, tokens) == {t: [expected[t]] for t in tokens}
    assert (await found(memory, "freshword"))[0][0] == "s2"
