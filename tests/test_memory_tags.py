"""Tag filters on read, entries and sessions."""

from __future__ import annotations

import pytest
from helpers import user

pytestmark = pytest.mark.every_server

WEIRD = {
    "k:{x}": "v*?[]\\",
    "ünï": "çødé 🚀",
    "1:a": "1:b",
    "empty": "",
    "sp ace": "new\nline",
}


async def _tagged_session(mem, session_id: str = "s1", user_id: str = "default") -> None:
    await mem.write(
        [user("e1a"), user("e1b")],
        session_id=session_id,
        user_id=user_id,
        tags={"a": "1", "b": "2"},
    )
    await mem.write([user("e2")], session_id=session_id, user_id=user_id, tags={"a": "1"})
    await mem.write([user("e3")], session_id=session_id, user_id=user_id, tags={"b": "2"})
    await mem.write([user("e4")], session_id=session_id, user_id=user_id)
    await mem.write([user("e5")], session_id=session_id, user_id=user_id, tags={"a": "12"})


async def test_read_filters_by_tags(make_memory):
    mem = await make_memory()
    await _tagged_session(mem)
    contents = lambda ms: [m.content for m in ms]  # noqa: E731
    assert contents(await mem.read(session_id="s1", tags={"a": "1"})) == ["e1a", "e1b", "e2"]
    assert contents(await mem.read(session_id="s1", tags={"b": "2"})) == ["e1a", "e1b", "e3"]
    assert contents(await mem.read(session_id="s1", tags={"a": "1", "b": "2"})) == ["e1a", "e1b"]
    assert contents(await mem.read(session_id="s1", tags={"a": "12"})) == ["e5"]
    assert await mem.read(session_id="s1", tags={"a": "2"}) == []
    assert await mem.read(session_id="s1", tags={"zzz": "1"}) == []
    assert len(await mem.read(session_id="s1", tags={})) == 6  # empty filter = no filter
    assert contents(await mem.read(session_id="s1", tags={"a": "1"}, limit=2)) == ["e1b", "e2"]
    assert await mem.read(session_id="s1", tags={"a": "1"}, limit=0) == []
    tagged = await mem.read(session_id="s1", tags={"a": "1"})
    cost = (tagged[-1].token_count or 0) + (tagged[-2].token_count or 0)
    assert contents(await mem.read(session_id="s1", tags={"a": "1"}, max_tokens=cost)) == [
        "e1b",
        "e2",
    ]
    # Filtered messages keep their store ids.
    assert [int(m.id or "") for m in tagged] == [1, 2, 3]


async def test_entries_filter_by_tags(make_memory):
    mem = await make_memory()
    await _tagged_session(mem)
    ids = lambda es: [[m.content for m in e.messages] for e in es]  # noqa: E731
    assert ids(await mem.entries(session_id="s1", tags={"b": "2"})) == [["e1a", "e1b"], ["e3"]]
    assert ids(await mem.entries(session_id="s1", tags={"a": "1", "b": "2"})) == [["e1a", "e1b"]]
    assert await mem.entries(session_id="s1", tags={"a": "3"}) == []
    assert len(await mem.entries(session_id="s1")) == 5


async def test_sessions_need_all_pairs_on_one_entry(make_memory):
    mem = await make_memory()
    await mem.write([user("x")], session_id="both", tags={"a": "1", "b": "2"})
    await mem.write([user("x")], session_id="split", tags={"a": "1"})
    await mem.write([user("y")], session_id="split", tags={"b": "2"})
    await mem.write([user("z")], session_id="none")

    names = lambda infos: sorted(s.session_id for s in infos)  # noqa: E731
    assert names(await mem.sessions(tags={"a": "1"})) == ["both", "split"]
    assert names(await mem.sessions(tags={"b": "2"})) == ["both", "split"]
    assert names(await mem.sessions(tags={"a": "1", "b": "2"})) == ["both"]
    assert names(await mem.sessions(tags={"a": "2"})) == []
    assert names(await mem.sessions()) == ["both", "none", "split"]
    # SessionInfo.tags is the union of the session's entries' tags.
    split = next(s for s in await mem.sessions() if s.session_id == "split")
    assert split.tags == {"a": "1", "b": "2"}


async def test_sessions_tag_filter_sees_only_the_user(make_memory):
    mem = await make_memory()
    await mem.write([user("x")], session_id="s", user_id="alice", tags={"team": "red"})
    await mem.write([user("x")], session_id="s", user_id="bob", tags={"team": "red"})
    got = await mem.sessions(user_id="alice", tags={"team": "red"})
    assert [(s.user_id, s.session_id) for s in got] == [("alice", "s")]


async def test_weird_tag_strings_round_trip_and_filter(make_memory):
    mem = await make_memory()
    await mem.write([user("weird")], session_id="w", tags=WEIRD)
    await mem.write([user("plain")], session_id="w", tags={"k": "x"})
    await mem.write([user("other")], session_id="v", tags={"1:a": "1:c"})
    (entry, _) = await mem.entries(session_id="w")
    assert entry.metadata.tags == WEIRD
    for key, value in WEIRD.items():
        assert [m.content for m in await mem.read(session_id="w", tags={key: value})] == ["weird"]
        assert [s.session_id for s in await mem.sessions(tags={key: value})] == ["w"]
    assert [s.session_id for s in await mem.sessions(tags=WEIRD)] == ["w"]
    assert await mem.sessions(tags={"k:{x}": "v*"}) == []
    assert await mem.sessions(tags={"k": "x", "1:a": "1:b"}) == []


async def test_tag_filter_on_session_ids_that_look_like_tag_members(make_memory):
    # Session ids are length-prefixed in the tag index: a session id that
    # continues a tag value must not match a longer value.
    mem = await make_memory()
    await mem.write([user("x")], session_id="2:xyz", tags={"a": "1"})
    await mem.write([user("y")], session_id="xyz", tags={"a": "12"})
    assert [s.session_id for s in await mem.sessions(tags={"a": "1"})] == ["2:xyz"]
    assert [s.session_id for s in await mem.sessions(tags={"a": "12"})] == ["xyz"]


async def test_tags_after_trimming(make_memory):
    mem = await make_memory(max_messages=2)
    await mem.write([user("old")], session_id="s", tags={"gen": "1"})
    await mem.write([user("n1"), user("n2")], session_id="s", tags={"gen": "2"})
    assert await mem.read(session_id="s", tags={"gen": "1"}) == []
    assert [m.content for m in await mem.read(session_id="s", tags={"gen": "2"})] == ["n1", "n2"]
    assert [e.metadata.tags for e in await mem.entries(session_id="s")] == [{"gen": "2"}]
