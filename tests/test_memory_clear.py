"""Deleting: one session, one user, the whole namespace."""

from __future__ import annotations

import pytest
from helpers import keys_matching, snapshot, user

from redismem.core.queue import user_jobs

pytestmark = pytest.mark.every_server

# Users whose ids are close to "alice" (prefixes, glob look-alikes, escapes).
NEIGHBOURS = ["alice2", "alic", "Alice", "*", "alice*", "alice}:x", "%61lice", "al?ce", "bob"]


async def test_clear_removes_one_session(make_memory, raw):
    mem = await make_memory()
    await mem.write([user("a")], session_id="gone", tags={"k": "v"})
    await mem.write([user("b")], session_id="gone", tags={"k": "w"})
    await mem.write([user("c")], session_id="kept", tags={"k": "v"})
    layout = mem.layout
    kept_before = await snapshot(raw, layout.user_prefix("default") + "s:kept:*")

    removed = await mem.clear(session_id="gone")
    assert removed == 5  # msgs, meta, entries, tags, writes
    assert await keys_matching(raw, layout.user_prefix("default") + "s:gone:*") == []
    assert await mem.read(session_id="gone") == []
    assert await mem.entries(session_id="gone") == []
    assert [s.session_id for s in await mem.sessions()] == ["kept"]
    assert [s.session_id for s in await mem.sessions(tags={"k": "v"})] == ["kept"]
    assert await raw.zrange(layout.sessions("default"), 0, -1) == [b"kept"]
    tag_members = await raw.zrange(layout.tagidx("default"), 0, -1)
    assert tag_members and not any(b"gone" in m for m in tag_members)
    assert await snapshot(raw, layout.user_prefix("default") + "s:kept:*") == kept_before

    assert await mem.clear(session_id="gone") == 0
    assert await mem.clear(session_id="never-existed") == 0
    # A new session under the same id starts from scratch.
    entry = await mem.write([user("fresh")], session_id="gone")
    assert int(entry.id) == 1
    assert [m.content for m in await mem.read(session_id="gone")] == ["fresh"]


async def test_clearing_the_last_session_leaves_no_user_key(make_memory, raw):
    mem = await make_memory()
    await mem.write([user("a")], session_id="only", tags={"k": "v"})
    await mem.clear(session_id="only")
    assert await keys_matching(raw, mem.layout.user_pattern("default")) == []


async def test_clear_user_removes_every_key_of_the_user_and_nothing_else(
    make_memory, raw, namespace
):
    mem = await make_memory(index=False)  # the session key layout (recall: test_recall.py)
    for uid in ["alice", *NEIGHBOURS]:
        for sid in ("s1", "s2"):
            await mem.write([user(f"{uid}/{sid}")], session_id=sid, user_id=uid, tags={"t": uid})
    alice_keys = await keys_matching(raw, mem.layout.user_pattern("alice"))
    assert len(alice_keys) == 12
    everything_before = await snapshot(raw, f"*{namespace}*")  # the test's keys (shared server)
    others_before = {k: v for k, v in everything_before.items() if k not in alice_keys}

    removed = await mem.clear_user("alice")
    assert removed == len(alice_keys)
    assert await keys_matching(raw, mem.layout.user_pattern("alice")) == []
    assert await snapshot(raw, f"*{namespace}*") == others_before
    assert await mem.sessions(user_id="alice") == []
    for uid in NEIGHBOURS:
        assert [m.content for m in await mem.read(session_id="s1", user_id=uid)] == [f"{uid}/s1"]
    assert await mem.clear_user("alice") == 0


async def test_another_client_sees_a_cleared_user_as_cleared_and_writes_after_it(make_memory, raw):
    """A client that last saw the user before another process cleared it:
    its reads find nothing of before, its writes land after the clear (and
    are kept), whatever it had remembered."""
    a = await make_memory()
    b = await make_memory()
    await a.write([user("before")], session_id="s", user_id="u", tags={"k": "v"})
    await a.store.put(("u", "notes"), "n", {"text": "before"})
    assert [m.content for m in await a.read(session_id="s", user_id="u")] == ["before"]

    await b.clear_user("u")
    assert await a.read(session_id="s", user_id="u") == []
    assert await a.store.get(("u", "notes"), "n") is None
    assert await a.sessions(user_id="u") == []
    await a.write([user("after")], session_id="s", user_id="u", tags={"k": "w"})
    await a.store.put(("u", "notes"), "m", {"text": "after"})
    for client in (a, b):
        assert [m.content for m in await client.read(session_id="s", user_id="u")] == ["after"]
        assert [s.tags for s in await client.sessions(user_id="u")] == [{"k": "w"}]
        assert await client.sessions(user_id="u", tags={"k": "v"}) == []
        assert (await client.store.get(("u", "notes"), "m")).value == {"text": "after"}
        assert await client.store.get(("u", "notes"), "n") is None
        assert [
            e.messages[0].content for e in await client.entries(session_id="s", user_id="u")
        ] == ["after"]
    # Nothing of the user is left but what was written after the clear.
    await a.clear_user("u")
    assert await keys_matching(raw, a.layout.user_pattern("u")) == []
    assert await b.read(session_id="s", user_id="u") == []


async def test_a_client_behind_a_new_epoch_reads_and_writes_in_it(make_memory, raw):
    """The user came back during a clear (its guard stays, in a new epoch):
    a client that remembers the old epoch is refused by every script and
    plain read, and goes on in the new one; nothing of the old is visible."""
    from redismem.core.guard import GUARD_MIN_TTL_MS, reap

    a = await make_memory()
    b = await make_memory()
    await a.write([user("before")], session_id="s", user_id="u")
    await a.store.put(("u", "notes"), "n", {"text": "before"})
    guard = b.layout.guard("u")
    epoch = await b.backend.scripts.bump_epoch(guard, min_ttl_ms=GUARD_MIN_TTL_MS, clear_id="c1")
    # A re-sent bump (same clear) starts no further epoch.
    assert (
        await b.backend.scripts.bump_epoch(guard, min_ttl_ms=GUARD_MIN_TTL_MS, clear_id="c1")
        == epoch
    )
    b.backend.epochs.set("u", epoch)
    await b.write([user("during")], session_id="s", user_id="u")  # in the new epoch
    assert await a.read(session_id="s", user_id="u") != []  # a goes on...
    assert [m.content for m in await a.read(session_id="s", user_id="u")] == ["during"]
    assert a.backend.epochs.get("u") == epoch  # ...in the new epoch, told by the script
    a.backend.epochs.set("u", 0)
    assert await a.store.get(("u", "notes"), "n") is None  # a plain read, guarded too
    a.backend.epochs.set("u", 0)
    await a.write([user("after")], session_id="s", user_id="u")
    a.backend.epochs.set("u", 0)
    assert [s.message_count for s in await a.sessions(user_id="u")] == [2]
    assert [m.content for m in await b.read(session_id="s", user_id="u")] == ["during", "after"]
    assert await reap(b.backend, "u", below=epoch) > 0  # the old epoch's keys
    for key in await keys_matching(raw, a.layout.user_pattern("u")):
        parsed = a.layout.parse_key(key.decode())
        assert parsed.kind == "guard" or parsed.epoch == epoch
    assert await raw.pttl(guard) > 0
    await a.clear_user("u")
    assert await keys_matching(raw, a.layout.user_pattern("u")) == []


async def test_clear_user_with_more_keys_than_one_scan_batch(make_memory, raw):
    mem = await make_memory(ttl=None, index=False)
    for i in range(160):
        await mem.write([user("x")], session_id=f"s{i}", user_id="many", tags={"i": str(i)})
    await mem.write([user("y")], session_id="s0", user_id="few")
    assert await mem.clear_user("many") == 160 * 5 + 2
    assert await keys_matching(raw, mem.layout.user_pattern("many")) == []
    assert len(await mem.read(session_id="s0", user_id="few")) == 1


async def test_clear_all_removes_the_namespace_and_nothing_outside(make_memory, raw, namespace):
    mem = await make_memory()
    sibling = await make_memory(namespace=namespace + "2")
    for uid in ("alice", "bob", "*"):
        await mem.write([user("x")], session_id="s", user_id=uid, tags={"k": "v"})
    await sibling.write([user("sibling")], session_id="s", user_id="alice")
    await raw.set(f"other:{{{namespace}}}", b"foreign")
    await raw.set(f"{namespace}2:{{u:alice}}:s:s:msgs-copy", b"foreign")
    await raw.set(f"{namespace}", b"bare namespace, no colon")
    await raw.set(f"{namespace}x:y", b"namespace prefix")
    await raw.set(f"x{namespace}:y", b"namespace inside")
    await raw.rpush(f"{namespace}-list", b"a", b"b")
    own = await keys_matching(raw, f"{namespace}:*")
    await mem.aclose()  # its enqueues (in the background) have landed
    mem = await make_memory()
    # The jobs still queued for this namespace's users go with the users; the
    # sibling namespace's job stays.
    own_jobs = [f"arq:job:{user_jobs(namespace, uid)}".encode() for uid in ("alice", "bob", "*")]
    # Every key holding the namespace anywhere (the test's keys: the server is shared).
    everything_before = await snapshot(raw, f"*{namespace}*")
    outside_before = {
        k: v
        for k, v in everything_before.items()
        if k not in own and not any(k.startswith(job) for job in own_jobs)
    }
    assert len(outside_before) >= 8

    assert await mem.clear_all() == len(own)
    assert await keys_matching(raw, f"{namespace}:*") == []
    assert await snapshot(raw, f"*{namespace}*") == outside_before
    assert [m.content for m in await sibling.read(session_id="s", user_id="alice")] == ["sibling"]
    assert await mem.clear_all() == 0
