"""Sliding TTLs: every key of a session expires together, and no key is left
without a TTL when one is configured.

These tests hold on a loaded machine: a bound on a remaining TTL is taken
from the time the test measured around the calls (never a fixed window),
waits for expiry are lower bounds (a sleep only ever lasts longer), and a
setup that has to finish within a short TTL is run again with a longer one
when the machine was too slow for it (``_within_a_ttl``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest
from helpers import keys_matching, pttls, user

pytestmark = pytest.mark.every_server

WEEK_MS = 7 * 24 * 3600 * 1000
#: A TTL long enough that its slack (ttl/32, 45 min) never runs out during a
#: test: a write to such a session does not slide its TTL, whatever the load.
DAY = 24 * 3600
#: Clock tolerance (ms) between the server's TTLs and the test's monotonic clock.
TOLERANCE_MS = 20


def longest(ttl_ms: int) -> int:
    """Keys get the TTL plus a slack of ttl/32 (refreshed once per slack)."""
    return ttl_ms + ttl_ms // 32


def since_ms(began: float) -> int:
    """Milliseconds since ``began`` (``time.monotonic()``), rounded up."""
    return int((time.monotonic() - began) * 1000) + 1


def assert_set_after(found: dict[bytes, int], ttl_ms: int, began: float) -> None:
    """Every TTL in ``found`` was set to ``ttl_ms`` (plus its slack) at some
    moment after ``began``: what is left of it is within these bounds however
    long the calls took."""
    low = ttl_ms - since_ms(began) - TOLERANCE_MS
    assert found and all(low < ttl <= longest(ttl_ms) for ttl in found.values()), (low, found)


async def _within_a_ttl(build: Callable[[int, str], Awaitable[bool]]) -> tuple[int, str]:
    """``build(ttl, user_id)`` writes sessions with a ``ttl``-second TTL for
    ``user_id`` and says whether all of them were still there when it
    finished. One that took longer than the TTL (a loaded machine) may see
    some expire first: it is run again for a fresh user with a 4x longer TTL.
    Returns the TTL and user id of the run that fit."""
    for ttl in (1, 4, 16):
        user_id = f"u{ttl}"
        began = time.monotonic()
        if await build(ttl, user_id):
            return ttl, user_id
        took = time.monotonic() - began
        assert took >= ttl, f"sessions were missing {took:.2f} s into a {ttl} s TTL"
    pytest.fail("the sessions could not even be written within a 16 s TTL")


async def _populate(mem) -> None:
    """Sessions of two users, with tags, several writes and some reads."""
    await mem.write([user("a"), user("b")], session_id="s1", tags={"k": "v", "t": "1"})
    await mem.write([user("c")], session_id="s1", tags={"k": "w"})
    await mem.write([user("d")], session_id="s2", user_id="bob", agent_name="x")
    await mem.write([user("e")], session_id="s3", user_id="bob", tags={"k": "v"})
    await mem.read(session_id="s1")
    await mem.entries(session_id="s2", user_id="bob")


async def test_every_key_has_the_ttl_after_writes(make_memory, raw, namespace):
    mem = await make_memory(ttl=30)
    began = time.monotonic()
    await _populate(mem)
    found = await pttls(raw, f"{namespace}:*")
    kinds = {key.rsplit(b":", 1)[-1] for key in found}
    assert {b"msgs", b"meta", b"entries", b"tags", b"sessions", b"tagidx"} <= kinds
    assert_set_after(found, 30_000, began)


async def test_default_ttl_is_seven_days(make_memory, raw, namespace):
    mem = await make_memory()
    began = time.monotonic()
    await _populate(mem)
    assert_set_after(await pttls(raw, f"{namespace}:*"), WEEK_MS, began)


async def test_timedelta_ttl(make_memory, raw, namespace):
    mem = await make_memory(ttl=timedelta(minutes=2))
    began = time.monotonic()
    await _populate(mem)
    assert_set_after(await pttls(raw, f"{namespace}:*"), 120_000, began)


async def test_no_ttl_when_ttl_is_none(make_memory, raw, namespace):
    mem = await make_memory(ttl=None)
    await _populate(mem)
    found = await pttls(raw, f"{namespace}:*")
    assert found and set(found.values()) == {-1}, found
    assert all(s.expires_at is None for s in await mem.sessions(user_id="bob"))


async def test_ttl_survives_trimming_clearing_and_other_sessions(make_memory, raw, namespace):
    mem = await make_memory(ttl=30, max_messages=2)
    await _populate(mem)
    await mem.write([user(f"x{i}") for i in range(5)], session_id="s1", tags={"z": "1"})
    await mem.clear(session_id="s2", user_id="bob")
    await mem.read(session_id="s3", user_id="bob", tags={"k": "v"})
    found = await pttls(raw, f"{namespace}:*")
    assert found and all(ttl > 0 for ttl in found.values()), found


async def _ttls_after_pause(raw, namespace: str) -> dict[bytes, int]:
    await asyncio.sleep(0.3)
    return await pttls(raw, f"{namespace}:*")


# A refresh is due once the slack (5 s / 32 = 156 ms) has run out: after the
# 300 ms pause, a refreshed key has more left than ``5_000 - (time since the
# refreshing call began)``, which a key that was not refreshed cannot have
# (it has at most 5_156 - 300 - that time), however slow the machine is.


async def test_write_refreshes_the_ttl(make_memory, raw, namespace):
    mem = await make_memory(ttl=5)
    await mem.write([user("a")], session_id="s", tags={"k": "v"})
    before = await _ttls_after_pause(raw, namespace)
    assert all(ttl <= longest(5_000) - 250 for ttl in before.values()), before
    began = time.monotonic()
    await mem.write([user("b")], session_id="s")
    after = await pttls(raw, f"{namespace}:*")
    assert after.keys() == before.keys()
    assert_set_after(after, 5_000, began)


async def test_reads_refresh_the_ttl(make_memory, raw, namespace):
    mem = await make_memory(ttl=5)
    await mem.write([user("a")], session_id="s", tags={"k": "v"})
    for read in (
        lambda: mem.read(session_id="s"),
        lambda: mem.read(session_id="s", limit=1, max_tokens=100),
        lambda: mem.read(session_id="s", tags={"k": "v"}),
        lambda: mem.entries(session_id="s"),
    ):
        before = await _ttls_after_pause(raw, namespace)
        began = time.monotonic()
        await read()
        after = await pttls(raw, f"{namespace}:*")
        assert after.keys() == before.keys()
        assert_set_after(after, 5_000, began)


async def test_refresh_ttl_on_read_false_leaves_the_ttl_alone(make_memory, raw, namespace):
    mem = await make_memory(ttl=5, refresh_ttl_on_read=False)
    await mem.write([user("a")], session_id="s", tags={"k": "v"})
    before = await _ttls_after_pause(raw, namespace)
    await mem.read(session_id="s")
    await mem.read(session_id="s", tags={"k": "v"})
    await mem.entries(session_id="s")
    await mem.sessions()
    after = await pttls(raw, f"{namespace}:*")
    assert after.keys() == before.keys()
    assert all(0 < after[k] <= before[k] for k in after), (before, after)


async def test_user_index_lives_as_long_as_its_longest_session(make_memory, raw):
    long = await make_memory(ttl=60)
    short = await make_memory(ttl=5)
    began = time.monotonic()
    await long.write([user("a")], session_id="long", tags={"k": "v"})
    await short.write([user("b")], session_id="short", tags={"k": "v"})
    layout = long.layout
    index = {layout.sessions("default"), layout.tagidx("default")}
    assert_set_after({key: await raw.pttl(key) for key in index}, 60_000, began)
    assert 0 < await raw.pttl(layout.session("default", "short").msgs) <= longest(5_000)


async def test_sessions_expire_and_their_index_entries_are_pruned(make_memory, raw, namespace):
    # A day's TTL: the keeper's next write to "long" is not due to slide it.
    keeper = await make_memory(ttl=DAY)
    layout = keeper.layout

    async def build(ttl: int, uid: str) -> bool:
        brief = await make_memory(ttl=ttl)
        # A long-lived session keeps the user's index keys alive past the brief one.
        await keeper.write([user("stays")], session_id="long", user_id=uid, tags={"k": "v"})
        await brief.write(
            [user("goes")], session_id="brief", user_id=uid, tags={"k": "v", "only": "brief"}
        )
        for i in range(40):  # more than one write prunes (16)
            await brief.write(
                [user("goes")], session_id=f"brief{i}", user_id=uid, tags={"only": "brief"}
            )
        return len(await keeper.sessions(user_id=uid)) == 42

    ttl, uid = await _within_a_ttl(build)
    await asyncio.sleep(ttl * 1.2)  # past ttl + ttl/32
    assert [s.session_id for s in await keeper.sessions(user_id=uid)] == ["long"]
    assert [s.session_id for s in await keeper.sessions(user_id=uid, tags={"k": "v"})] == ["long"]
    assert await keeper.sessions(user_id=uid, tags={"only": "brief"}) == []
    assert await keeper.read(session_id="brief", user_id=uid) == []
    assert await keeper.entries(session_id="brief", user_id=uid) == []
    assert await keys_matching(raw, layout.user_prefix(uid) + "s:brief:*") == []

    # A write that is not due to slide its session's TTL leaves the index
    # alone (readers skip expired members); one that slides it (a new session
    # here, or a busy one once per ttl/32) prunes up to 16 stale members.
    await keeper.write([user("again")], session_id="long", user_id=uid)
    assert len(await raw.zrange(layout.sessions(uid), 0, -1)) == 42
    for i in range(3):
        await keeper.write([user("again")], session_id=f"new{i}", user_id=uid)
    members = await raw.zrange(layout.sessions(uid), 0, -1)
    assert sorted(members) == [b"long", b"new0", b"new1", b"new2"]
    tag_members = await raw.zrange(layout.tagidx(uid), 0, -1)
    assert tag_members and not any(b"brief" in m for m in tag_members), tag_members
    assert [m.content for m in await keeper.read(session_id="long", user_id=uid)] == [
        "stays",
        "again",
    ]


async def test_a_fully_expired_user_leaves_no_keys(make_memory, raw, namespace):
    mem = await make_memory(ttl=1)
    await mem.write([user("a")], session_id="s1", tags={"k": "v"})
    await mem.write([user("b")], session_id="s2")
    await asyncio.sleep(1.2)
    assert await mem.sessions() == []
    assert await mem.read(session_id="s1") == []
    assert await keys_matching(raw, f"{namespace}:*") == []


async def test_a_session_written_again_after_expiry_keeps_its_new_tags(make_memory, raw):
    keeper = await make_memory(ttl=60)
    brief = await make_memory(ttl=1)
    # The long-lived session keeps the user's index alive, holding the expired
    # session's stale members until a write prunes them.
    await keeper.write([user("stays")], session_id="long")
    await brief.write([user("old")], session_id="s", tags={"gen": "old", "k": "v"})
    await asyncio.sleep(1.2)
    await brief.write([user("new")], session_id="s", tags={"gen": "new", "k": "v"})

    assert [m.content for m in await brief.read(session_id="s")] == ["new"]
    assert [s.session_id for s in await brief.sessions(tags={"gen": "new"})] == ["s"]
    assert [s.session_id for s in await brief.sessions(tags={"k": "v"})] == ["s"]
    assert await brief.sessions(tags={"gen": "old"}) == []
    tag_members = await raw.zrange(keeper.layout.tagidx("default"), 0, -1)
    assert not any(b"old" in m for m in tag_members), tag_members


async def _server_ms(raw) -> int:
    seconds, micros = await raw.time()
    return seconds * 1000 + micros // 1000


@pytest.mark.parametrize("limit", [None, 5], ids=["tail", "budget"])
async def test_a_read_records_its_access_when_it_moves_by_a_second(
    make_memory, raw, namespace, is_embedded, limit
):
    # meta `accessed` is within a second of the last read or write: a read
    # writes it only when it would move by 1 s or more (or the TTL slides), so
    # most reads write nothing at all (no AOF or replica traffic).
    mem = await make_memory(ttl=DAY)
    await mem.write([user("a")], session_id="s")
    meta = mem.layout.session("default", "s").meta

    async def read() -> None:
        if limit is None:
            await mem.read(session_id="s")
        else:
            await mem.read(session_id="s", limit=limit, max_tokens=1_000)

    long_ago = await _server_ms(raw) - 5_000
    await raw.hset(meta, "accessed", long_ago)
    before = await _server_ms(raw)
    await read()
    assert int(await raw.hget(meta, "accessed")) >= before

    for _ in range(5):  # a loaded machine may take a second between the calls
        recent = await _server_ms(raw)
        await raw.hset(meta, "accessed", recent)
        changes = None if is_embedded else await _changes(raw)
        await read()
        if await _server_ms(raw) - recent >= 900:
            continue
        assert int(await raw.hget(meta, "accessed")) == recent
        if changes is not None:
            assert await _changes(raw) == changes  # the read wrote nothing
        break
    else:
        pytest.fail("no read came within 900 ms of the one before")


async def _changes(raw) -> int | None:
    """Writes since the last save (None where the server does not say: a cluster)."""
    found = (await raw.info("persistence")).get("rdb_changes_since_last_save")
    return None if found is None else int(found)


async def test_a_read_that_slides_the_ttl_records_its_access(make_memory, raw, namespace):
    mem = await make_memory(ttl=5)  # the TTL slides once its 156 ms slack is gone
    await mem.write([user("a")], session_id="s")
    meta = mem.layout.session("default", "s").meta
    await asyncio.sleep(0.3)
    recent = await _server_ms(raw)
    await raw.hset(meta, "accessed", recent - 500)
    await mem.read(session_id="s")
    assert int(await raw.hget(meta, "accessed")) >= recent
