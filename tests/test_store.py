"""The long-term store (``redismem.longterm.store``): items, versions and history,
idempotent writes, TTLs, keyword search, input checks and the key layout.
Every test runs on a real Redis and on the embedded backend."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

import pytest

from redismem import BackendUnavailable, CorruptData, InvalidInput, Memory
from redismem.core.keys import STORE_KEY_KINDS, KeyLayout, store_ref
from redismem.longterm import store as store_module
from redismem.longterm.store import Item, ItemVersion, LongTermStore, SearchItem
from redismem.recall import bm25, ranking

NS = ("alice", "prefs")


async def store_of(make_memory: Any, **options: Any) -> tuple[Memory, LongTermStore]:
    mem = await make_memory()
    return mem, LongTermStore(mem, **options)


async def keys_of(raw: Any, pattern: str) -> list[str]:
    return sorted([k.decode() async for k in raw.scan_iter(match=pattern, count=1000)])


# -- items and versions --------------------------------------------------------------


async def test_put_then_get(make_memory):
    _, store = await store_of(make_memory)
    before = datetime.now(UTC)
    item = await store.put(NS, "food", {"text": "likes ramen"}, source={"session": "s1"})
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value, item.version) == (
        NS,
        "food",
        {"text": "likes ramen"},
        1,
    )
    assert item.source == {"session": "s1"}
    assert item.created_at == item.updated_at
    assert item.created_at.tzinfo is not None and item.created_at.utcoffset().total_seconds() == 0
    assert abs((item.created_at - before).total_seconds()) < 5
    assert await store.get(NS, "food") == item
    assert await store.get(NS, "drink") is None
    assert await store.get(("bob", "prefs"), "food") is None


async def test_put_again_makes_a_new_version(make_memory):
    _, store = await store_of(make_memory)
    first = await store.put(NS, "food", {"text": "ramen"}, source={"msg": 1})
    second = await store.put(NS, "food", {"text": "sushi"}, source={"msg": 2})
    assert second.version == 2
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    got = await store.get(NS, "food")
    assert got is not None and got.value == {"text": "sushi"} and got.source == {"msg": 2}
    history = await store.history(NS, "food")
    assert all(isinstance(v, ItemVersion) for v in history)
    assert [(v.version, v.value, v.source, v.deleted) for v in history] == [
        (1, {"text": "ramen"}, {"msg": 1}, False),
        (2, {"text": "sushi"}, {"msg": 2}, False),
    ]
    assert history[0].updated_at == first.updated_at


VALUES = [
    {"i": 0, "big": 2**64 - 1, "small": -(2**63), "neg": -7},
    {"f": 0.1, "g": 1e308, "h": -2.5e-300, "z": -0.0, "whole": 3.0},
    {"s": "ünï©ødé 🚀 中文 \u0000 \n", "empty": ""},
    {"nested": {"a": [1, [2, [3, {"b": None}]], True, False], "c": {}}, "l": []},
    {},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
async def test_values_round_trip_exactly(make_memory, value):
    _, store = await store_of(make_memory)
    await store.put(NS, "k", value, source={"deep": {"x": [1.5, "é"]}})
    got = await store.get(NS, "k")
    assert got is not None
    assert got.value == value
    assert repr(got.value) == repr(value)  # types too: 3.0 stays a float, -0.0 keeps its sign
    assert got.source == {"deep": {"x": [1.5, "é"]}}


async def test_delete_keeps_a_tombstone_in_history(make_memory):
    _, store = await store_of(make_memory)
    await store.put(NS, "food", {"text": "ramen"})
    await store.delete(NS, "food", source={"request": "r1"})
    assert await store.get(NS, "food") is None
    assert await store.search(NS) == []
    history = await store.history(NS, "food")
    assert [(v.version, v.deleted, v.value) for v in history] == [
        (1, False, {"text": "ramen"}),
        (2, True, {}),
    ]
    assert history[1].source == {"request": "r1"}
    assert history[1].updated_at > history[0].updated_at
    # Put again: the version goes on, the item is new.
    again = await store.put(NS, "food", {"text": "pho"})
    assert again.version == 3
    assert again.created_at > history[0].created_at
    assert len(await store.history(NS, "food")) == 3


async def test_deleting_a_missing_item_records_nothing(make_memory, raw):
    mem, store = await store_of(make_memory)
    await store.delete(NS, "nothing")
    assert await store.history(NS, "nothing") == []
    keys = await keys_of(raw, mem.layout.store_prefix("alice") + "*")
    assert not [k for k in keys if "item:" in k or "hist:" in k]


async def test_a_resent_put_applies_once(make_memory):
    _, store = await store_of(make_memory)
    first = await store.put(NS, "k", {"v": 1}, write_id="put-1")
    again = await store.put(NS, "k", {"v": 1}, write_id="put-1")
    assert (again.version, again.updated_at) == (first.version, first.updated_at)
    assert len(await store.history(NS, "k")) == 1
    # A late re-send, after another put, does not undo that put.
    await store.put(NS, "k", {"v": 2}, write_id="put-2")
    late = await store.put(NS, "k", {"v": 1}, write_id="put-1")
    assert late.version == 1
    got = await store.get(NS, "k")
    assert got is not None and (got.value, got.version) == ({"v": 2}, 2)
    assert len(await store.history(NS, "k")) == 2


async def test_a_resent_delete_applies_once(make_memory):
    _, store = await store_of(make_memory)
    await store.put(NS, "k", {"v": 1})
    await store.delete(NS, "k", write_id="del-1")
    await store.put(NS, "k", {"v": 2})
    await store.delete(NS, "k", write_id="del-1")  # late re-send
    got = await store.get(NS, "k")
    assert got is not None and got.value == {"v": 2}


async def test_a_put_whose_reply_was_lost_is_retried_with_its_write_id(make_memory, monkeypatch):
    mem, store = await store_of(make_memory)
    runner = mem.backend.scripts
    run = runner.run_guarded

    async def reply_lost(*args: Any, **options: Any) -> Any:
        await run(*args, **options)
        raise BackendUnavailable("the reply was lost")

    monkeypatch.setattr(runner, "run_guarded", reply_lost)
    with pytest.raises(BackendUnavailable) as info:
        await store.put(NS, "k", {"v": 1})
    monkeypatch.setattr(runner, "run_guarded", run)
    assert info.value.write_id
    again = await store.put(NS, "k", {"v": 1}, write_id=info.value.write_id)
    assert again.version == 1
    assert len(await store.history(NS, "k")) == 1


async def test_a_script_sent_twice_applies_once(make_memory, monkeypatch):
    """What the call policy does when an attempt times out after Redis ran it."""
    mem, store = await store_of(make_memory)
    runner = mem.backend.scripts
    run = runner.run_guarded
    sent: list[str] = []

    async def twice(name: str, *args: Any, **options: Any) -> Any:
        sent.append(name)
        await run(name, *args, **options)
        return await run(name, *args, **options)

    monkeypatch.setattr(runner, "run_guarded", twice)
    await store.put(NS, "k", {"v": 1})
    await store.put(NS, "k", {"v": 2})
    await store.delete(NS, "k")
    await store.put(NS, "k", {"v": 3})
    monkeypatch.setattr(runner, "run_guarded", run)
    assert sent == ["store_put", "store_put", "store_delete", "store_put"]
    history = await store.history(NS, "k")
    assert [(v.version, v.deleted) for v in history] == [
        (1, False),
        (2, False),
        (3, True),
        (4, False),
    ]


async def test_concurrent_puts_get_distinct_versions(make_memory):
    _, store = await store_of(make_memory)
    items = await asyncio.gather(*(store.put(NS, "k", {"n": n}) for n in range(20)))
    assert sorted(i.version for i in items) == list(range(1, 21))
    history = await store.history(NS, "k")
    assert [v.version for v in history] == list(range(1, 21))
    latest = max(items, key=lambda i: i.version)
    assert await store.get(NS, "k") == latest


# -- TTL ---------------------------------------------------------------------------------


async def test_an_expired_item_is_never_returned(make_memory):
    _, store = await store_of(make_memory)
    await store.put(NS, "short", {"text": "ephemeral ramen"}, ttl=0.5)
    await store.put(("alice", "other"), "long", {"text": "lasting ramen"})
    assert await store.get(NS, "short") is not None
    assert ("alice", "prefs") in await store.list_namespaces()
    await asyncio.sleep(0.7)
    assert await store.get(NS, "short") is None
    assert await store.history(NS, "short") == []
    assert [i.key for i in await store.search(("alice",))] == ["long"]
    assert [i.key for i in await store.search(("alice",), query="ramen")] == ["long"]
    assert [i.key for i in await store.search((), query="ephemeral")] == []
    assert await store.list_namespaces() == [("alice", "other")]


async def test_expired_items_leave_no_index_entries(make_memory, raw):
    mem, store = await store_of(make_memory)
    for n in range(5):
        await store.put(NS, f"k{n}", {"text": f"word{n} common"}, ttl=0.2)
    await store.put(NS, "k0", {"text": "again"}, ttl=0.2)  # history expires too
    await asyncio.sleep(0.35)
    await store.put(("alice", "x"), "live", {"text": "fresh"})  # a write prunes
    keys = await keys_of(raw, mem.layout.store_prefix("alice") + "*")
    assert [k for k in keys if ":term:" in k] == [mem.layout.store("alice").term("fresh")]
    assert not [k for k in keys if "prefs" in k]
    layout = mem.layout.store("alice")
    assert await raw.zrange(layout.refs, 0, -1) == [store_ref(("alice", "x"), "live").encode()]
    assert await raw.hkeys(layout.doclen) == [store_ref(("alice", "x"), "live").encode()]
    assert await raw.hgetall(layout.namespaces) == {b"alice/x/": b"1"}
    assert await raw.hmget(layout.stats, "docs", "len") == [b"1", b"1"]


async def test_a_write_prunes_a_bounded_batch(make_memory, raw):
    mem, store = await store_of(make_memory)
    await asyncio.gather(*(store.put(NS, f"k{n}", {"text": "x"}, ttl=1) for n in range(40)))
    expiry = mem.layout.store("alice").expiry
    assert await raw.zcard(expiry) == 40
    await asyncio.sleep(1.1)
    await store.put(NS, "live", {"text": "y"})
    assert await raw.zcard(expiry) == 40 - 32
    await store.put(NS, "live", {"text": "z"})
    assert await raw.zcard(expiry) == 0


async def test_all_expired_leaves_no_key_at_all(make_memory, raw):
    mem, store = await store_of(make_memory)
    await store.put(NS, "k", {"text": "gone soon"}, ttl=0.2)
    await asyncio.sleep(0.35)
    assert await store.list_namespaces() == []  # prunes
    assert await keys_of(raw, mem.layout.user_pattern("alice")) == []


async def test_a_put_without_ttl_keeps_the_item(make_memory):
    _, store = await store_of(make_memory)
    await store.put(NS, "k", {"v": 1}, ttl=0.5)
    await store.put(NS, "k", {"v": 2})
    await asyncio.sleep(0.7)
    got = await store.get(NS, "k")
    assert got is not None and got.version == 2
    assert len(await store.history(NS, "k")) == 2


async def test_the_default_ttl(make_memory):
    mem, _ = await store_of(make_memory)
    store = LongTermStore(mem, default_ttl=0.2)
    await store.put(NS, "k", {"v": 1})
    await store.put(NS, "kept", {"v": 1}, ttl=60)
    await asyncio.sleep(0.35)
    assert await store.get(NS, "k") is None
    assert await store.get(NS, "kept") is not None
    with pytest.raises(InvalidInput):
        LongTermStore(mem, default_ttl=0)


async def test_a_deleted_items_history_expires_with_it(make_memory):
    _, store = await store_of(make_memory)
    await store.put(NS, "k", {"v": 1}, ttl=0.5)
    await store.delete(NS, "k")
    assert len(await store.history(NS, "k")) == 2
    await asyncio.sleep(0.7)
    assert await store.history(NS, "k") == []


# -- search -------------------------------------------------------------------------------


async def test_search_without_query_is_newest_first(make_memory):
    _, store = await store_of(make_memory)
    for n in range(5):
        await store.put(("alice", "notes"), f"k{n}", {"n": n})
    await store.put(("alice", "notes"), "k1", {"n": 1, "again": True})
    found = await store.search(("alice",))
    assert all(isinstance(i, SearchItem) and i.score is None for i in found)
    assert [i.key for i in found] == ["k1", "k4", "k3", "k2", "k0"]
    assert [i.key for i in await store.search(("alice",), limit=2, offset=1)] == ["k4", "k3"]
    assert await store.search(("alice",), limit=0) == []
    assert await store.search(("alice",), offset=10) == []


async def test_search_ranks_by_keyword_relevance(make_memory):
    _, store = await store_of(make_memory)
    notes = ("alice", "notes")
    await store.put(notes, "twice", {"text": "ramen ramen noodles"})
    await store.put(notes, "once", {"text": "ramen noodles"})
    await store.put(notes, "long", {"text": "ramen " + "filler words here " * 10})
    await store.put(notes, "none", {"text": "sushi only"})
    found = await store.search(("alice",), query="ramen")
    assert [i.key for i in found] == ["twice", "once", "long"]
    scores = [i.score for i in found]
    assert all(isinstance(s, float) and s > 0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    # A rarer term weighs more: both words once, but "sushi" is in one item.
    await store.put(notes, "both", {"text": "sushi ramen"})
    assert (await store.search(("alice",), query="sushi ramen"))[0].key == "both"
    assert await store.search(("alice",), query="pizza") == []
    assert await store.search(("alice",), query="the and of") == []  # stop words only


async def test_store_and_recall_score_with_the_one_bm25(make_memory, monkeypatch):
    """One BM25 (``recall.bm25.score``) serves the store's search and
    recall's index-time weights; each passes its own parameters."""
    calls: list[tuple[float, float]] = []
    one_score = bm25.score

    def spy(*args: Any, k1: float, b: float, idf: float = 1.0) -> float:
        calls.append((k1, b))
        return one_score(*args, k1=k1, b=b, idf=idf)

    monkeypatch.setattr(bm25, "score", spy)
    _, store = await store_of(make_memory)
    await store.put(("alice", "notes"), "n1", {"text": "ramen noodles"})
    [found] = await store.search(("alice",), query="ramen")
    assert set(calls) == {(store_module.K1, store_module.B)} == {(1.2, 0.75)}
    # One item of two terms, the average length: BM25 is the idf alone.
    assert found.score == pytest.approx(bm25.idf(1, 1))
    calls.clear()
    ranking.doc_weights("ramen noodles")
    assert set(calls) == {(ranking.K1, ranking.B)} == {(1.2, 0.2)}


async def test_index_chooses_the_searchable_fields(make_memory):
    _, store = await store_of(make_memory)
    notes = ("alice", "notes")
    await store.put(notes, "all", {"a": "apple", "meta": {"title": "banana", "tags": ["cherry"]}})
    await store.put(
        notes, "title", {"a": "apple", "meta": {"title": "banana"}}, index=["meta.title"]
    )
    await store.put(notes, "tags", {"items": [{"n": "date"}, {"n": "fig"}]}, index=["items[*].n"])
    await store.put(
        notes, "first", {"items": [{"n": "grape"}, {"n": "kiwi"}]}, index=["items[0].n"]
    )
    await store.put(notes, "off", {"a": "apple banana"}, index=False)

    async def keys(query: str) -> set[str]:
        return {i.key for i in await store.search(("alice",), query=query)}

    assert await keys("apple") == {"all"}
    assert await keys("banana") == {"all", "title"}
    assert await keys("cherry") == {"all"}
    assert await keys("fig") == {"tags"}
    assert await keys("grape") == {"first"}
    assert await keys("kiwi") == set()
    # Not searchable by query, but listed and filtered.
    assert "off" in {i.key for i in await store.search(("alice",))}
    # A new version replaces the indexed text.
    await store.put(notes, "all", {"a": "mango"})
    assert await keys("apple") == set()
    assert await keys("mango") == {"all"}


async def test_search_with_query_respects_prefix_filter_and_pages(make_memory):
    _, store = await store_of(make_memory)
    for n in range(6):
        await store.put(
            ("alice", "a" if n % 2 else "b"), f"k{n}", {"text": "ramen " * (n + 1), "n": n}
        )
    found = await store.search(("alice", "a"), query="ramen")
    assert [i.key for i in found] == ["k5", "k3", "k1"]
    found = await store.search(("alice",), query="ramen", filter={"n": {"$lt": 4}})
    assert [i.key for i in found] == ["k3", "k2", "k1", "k0"]
    page = await store.search(("alice",), query="ramen", limit=2, offset=2)
    assert [i.key for i in page] == ["k3", "k2"]


async def test_search_never_crosses_tenants(make_memory):
    _, store = await store_of(make_memory)
    await store.put(("alice", "n"), "k", {"text": "secret ramen"})
    await store.put(("bob", "n"), "k", {"text": "public ramen"})
    await store.put(("alice2", "n"), "k", {"text": "other ramen"})
    assert [i.namespace for i in await store.search(("alice",), query="ramen")] == [("alice", "n")]
    assert [i.namespace for i in await store.search(("alice",))] == [("alice", "n")]
    everyone = await store.search((), query="ramen")
    assert sorted(i.namespace[0] for i in everyone) == ["alice", "alice2", "bob"]
    assert len(await store.search(())) == 3


FILTER_CASES = [
    ({"kind": "fruit"}, {"apple", "cherry"}),
    ({"kind": {"$eq": "fruit"}}, {"apple", "cherry"}),
    ({"kind": {"$ne": "fruit"}}, {"bread", "nothing"}),
    ({"price": {"$gt": 2}}, {"cherry", "bread"}),
    ({"price": {"$gte": 2}}, {"apple", "cherry", "bread"}),
    ({"price": {"$lt": 3}}, {"apple"}),
    ({"price": {"$lte": 3}}, {"apple", "cherry"}),
    ({"price": {"$gt": 1, "$lt": 4}}, {"apple", "cherry"}),
    ({"kind": {"$in": ["bakery", "none"]}}, {"bread"}),
    ({"meta.origin": "fr"}, {"apple", "bread"}),
    ({"meta.origin": {"$ne": "fr"}}, {"cherry", "nothing"}),
    ({"tags.0": "red"}, {"apple", "cherry"}),
    ({"tags": ["red", "sweet"]}, {"cherry"}),
    ({"organic": True}, {"apple"}),
    ({"organic": 1}, set()),  # bool never equals a number
    ({"price": 2.0}, {"apple"}),  # numbers by value
    ({"kind": "fruit", "meta.origin": "fr"}, {"apple"}),
    ({"price": {"$gt": "a"}}, set()),  # no order between a number and a str
    ({"kind": {"$gte": "c"}}, {"apple", "cherry"}),
    ({"missing": None}, set()),
    ({"meta": {"origin": "fr", "year": 2020}}, {"apple"}),
]


@pytest.mark.parametrize(("flt", "expected"), FILTER_CASES, ids=[str(c[0]) for c in FILTER_CASES])
async def test_filters(make_memory, flt, expected):
    _, store = await store_of(make_memory)
    ns = ("shop", "items")
    await store.put(
        ns,
        "apple",
        {
            "kind": "fruit",
            "price": 2,
            "organic": True,
            "tags": ["red"],
            "meta": {"origin": "fr", "year": 2020},
        },
    )
    await store.put(
        ns,
        "cherry",
        {"kind": "fruit", "price": 3.0, "tags": ["red", "sweet"], "meta": {"origin": "es"}},
    )
    await store.put(ns, "bread", {"kind": "bakery", "price": 4, "meta": {"origin": "fr"}})
    await store.put(ns, "nothing", {})
    assert {i.key for i in await store.search(("shop",), filter=flt)} == expected


# -- input checks -------------------------------------------------------------------------

BAD_CALLS = [
    ("put", (["alice"], "k", {}), {}),
    ("put", ((), "k", {}), {}),
    ("put", (("alice", ""), "k", {}), {}),
    ("put", (("alice", 1), "k", {}), {}),
    ("put", ("alice", "k", {}), {}),
    ("put", (NS, 1, {}), {}),
    ("put", (NS, "", {}), {}),
    ("put", (NS, "k", [1]), {}),
    ("put", (NS, "k", None), {}),
    ("put", (NS, "k", {"x": float("nan")}), {}),
    ("put", (NS, "k", {"x": (1, 2)}), {}),
    ("put", (NS, "k", {1: "x"}), {}),
    ("put", (NS, "k", {"x": b"bytes"}), {}),
    ("put", (NS, "k", {"x": 2**64}), {}),
    ("put", (NS, "k", {}), {"ttl": 0}),
    ("put", (NS, "k", {}), {"ttl": -1}),
    ("put", (NS, "k", {}), {"ttl": "5"}),
    ("put", (NS, "k", {}), {"ttl": True}),
    ("put", (NS, "k", {}), {"ttl": float("inf")}),
    ("put", (NS, "k", {}), {"index": "text"}),
    ("put", (NS, "k", {}), {"index": True}),
    ("put", (NS, "k", {}), {"index": [""]}),
    ("put", (NS, "k", {}), {"index": [1]}),
    ("put", (NS, "k", {}), {"index": ["a[x]"]}),
    ("put", (NS, "k", {}), {"source": "s"}),
    ("put", (NS, "k", {}), {"source": {"x": {1, 2}}}),
    ("put", (NS, "k", {}), {"write_id": "has space"}),
    ("get", ((), "k"), {}),
    ("get", (NS, None), {}),
    ("delete", (("alice", None), "k"), {}),
    ("delete", (NS, "k"), {"source": 5}),
    ("history", (NS, 5), {}),
    ("purge", ((),), {}),
    ("purge", ("alice",), {}),
    ("search", ("alice",), {}),
    ("search", (NS,), {"filter": {"x": {"$regex": "a"}}}),
    ("search", (NS,), {"filter": {"x": {"$in": "abc"}}}),
    ("search", (NS,), {"filter": {"x": {"$eq": 1, "y": 2}}}),
    ("search", (NS,), {"filter": "x"}),
    ("search", (NS,), {"filter": {"": 1}}),
    ("search", (NS,), {"limit": -1}),
    ("search", (NS,), {"offset": -1}),
    ("search", (NS,), {"limit": True}),
    ("search", (NS,), {"query": 5}),
    ("list_namespaces", (), {"prefix": "alice"}),
    ("list_namespaces", (), {"suffix": ("",)}),
    ("list_namespaces", (), {"max_depth": 0}),
    ("list_namespaces", (), {"limit": -1}),
    ("list_namespaces", (), {"offset": 1.5}),
]


async def test_bad_input_raises_invalid_input_and_writes_nothing(make_memory, raw):
    mem, store = await store_of(make_memory)
    for name, args, kwargs in BAD_CALLS:
        with pytest.raises(InvalidInput):
            await getattr(store, name)(*args, **kwargs)
        assert issubclass(InvalidInput, ValueError)
    assert await keys_of(raw, mem.layout.namespace_pattern()) == []


async def test_corrupt_records_raise_corrupt_data(make_memory, raw):
    mem, store = await store_of(make_memory)
    await store.put(NS, "k", {"v": 1})
    key = mem.layout.store("alice").item(store_ref(NS, "k"))
    await raw.set(key, b"1,2,3,p,\xc1not msgpack")
    with pytest.raises(CorruptData) as info:
        await store.get(NS, "k")
    assert info.value.key == key
    with pytest.raises(CorruptData):
        await store.search(NS)


# -- key layout -------------------------------------------------------------------------------


async def test_store_keys_belong_to_the_tenant(make_memory, raw):
    mem, store = await store_of(make_memory)
    await store.put(("alice", "a:b", "{x}"), "k:1", {"text": "hello world"}, ttl=60)
    await store.put(("alice",), "k", {"text": "hello"}, write_id="w-1")
    await store.put(("alice",), "k", {"text": "noodles"})
    await store.delete(("alice", "a:b", "{x}"), "k:1")
    keys = await keys_of(raw, mem.layout.namespace_pattern())
    assert len(keys) >= 10
    layout = mem.layout
    for key in keys:
        assert key.startswith(layout.store_prefix("alice"))
        parsed = layout.parse_key(key)
        assert parsed.user_id == "alice" and parsed.session_id is None
        assert parsed.kind.startswith("kv:")
        assert re.search(r"\{([^}]*)\}", key).group(1) == "u:alice"
        assert fnmatchcase(key, layout.user_pattern("alice"))
    kinds = {layout.parse_key(k).kind for k in keys}
    assert {f"kv:{kind}" for kind in STORE_KEY_KINDS} <= kinds


async def test_clear_user_removes_the_tenants_store(make_memory, raw):
    mem, store = await store_of(make_memory)
    await store.put(("alice", "n"), "k", {"text": "hello"}, ttl=60)
    await store.put(("alice", "n"), "k", {"text": "hello again"})
    await store.put(("bob", "n"), "k", {"text": "hello"})
    await mem.write([{"role": "user", "content": "hi"}], session_id="s", user_id="alice")
    assert await mem.clear_user("alice") > 0
    assert await keys_of(raw, mem.layout.user_pattern("alice")) == []
    assert await store.get(("alice", "n"), "k") is None
    assert await store.list_namespaces() == [("bob", "n")]
    assert [i.namespace for i in await store.search((), query="hello")] == [("bob", "n")]


def test_store_keys_parse_as_tenant_keys():
    layout = KeyLayout("ns")
    keys = layout.store("a:b")
    ref = store_ref(("a:b", "x"), "k")
    every = [*keys.tenant_keys(), keys.item(ref), keys.history(ref), keys.term("wörd")]
    for key in every:
        parsed = layout.parse_key(key)
        assert (parsed.user_id, parsed.session_id) == ("a:b", None)
        assert fnmatchcase(key, layout.user_pattern("a:b"))
    assert fnmatchcase(keys.updated, layout.store_pattern("updated"))
    assert not fnmatchcase(keys.item(ref), layout.store_pattern("updated"))
    with pytest.raises(InvalidInput):
        layout.store_pattern("item")
