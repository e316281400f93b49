"""The long-term store (``redismem.longterm.store``): items, versions and history,
idempotent writes, TTLs, keyword search, input checks and the key layout.
Every test runs on a real Redis and on the embedded backend."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

import msgpack
import pytest

from redismem import BackendUnavailable, CorruptData, InvalidInput, Memory
from redismem.core.keys import STORE_KEY_KINDS, KeyLayout, store_ref
from redismem.longterm import jsonpaths
from redismem.longterm import store as store_module
from redismem.longterm.store import Item, ItemHistory, ItemVersion, LongTermStore, SearchItem
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


# -- histories: every item of a tenant, to put it back ------------------------------------


async def test_histories_give_every_item_with_its_versions_index_and_deadline(make_memory):
    _, store = await store_of(make_memory)
    prefs, notes = ("alice", "prefs"), ("alice", "notes", "a/b")
    await store.put(prefs, "food", {"title": "ramen", "body": "sushi"}, index=["title"])
    await store.put(prefs, "drink", {"text": "green tea"}, index=False, ttl=3600)
    await store.put(notes, "n1", {"sections": [{"body": "alpha"}]}, index=("sections[*].body",))
    await store.put(prefs, "empty", {"text": "x"}, index=[])
    await store.put(prefs, "gone", {"text": "first"}, index=["text"])
    await store.delete(prefs, "gone", source={"why": "asked"})
    await store.put(prefs, "back", {"text": "one"}, index=["text"])
    await store.delete(prefs, "back")
    await store.put(prefs, "back", {"text": "two"}, source={"s": 1})
    await store.put(("alice",), "top", {"text": "hello"}, index=["$"])
    await store.put(("alice", "pre"), "p", {"text": "not prefs"})
    await store.put(("bob", "prefs"), "food", {"text": "pizza"})

    found = await store.histories(("alice",))
    assert all(isinstance(i, ItemHistory) for i in found)
    names = [(i.namespace, i.key) for i in found]
    assert names == sorted(names)
    by_key = {i.key: i for i in found}
    assert set(by_key) == {"food", "drink", "n1", "empty", "gone", "back", "top", "p"}
    for item in found:
        assert item.versions == await store.history(item.namespace, item.key)
    assert {k: i.index for k, i in by_key.items()} == {
        "food": ["title"],
        "drink": False,
        "n1": ["sections[*].body"],  # as given, not as found in the value
        "empty": False,
        "gone": ["text"],  # deleted: its last put's
        "back": None,
        "top": ["$"],
        "p": None,
    }
    assert [(v.version, v.deleted, v.source) for v in by_key["back"].versions] == [
        (1, False, None),
        (2, True, None),
        (3, False, {"s": 1}),
    ]
    assert by_key["gone"].versions[-1].deleted and by_key["gone"].versions[-1].value == {}
    deadline = by_key["drink"].expires_at
    assert deadline is not None
    assert abs(deadline - datetime.now(UTC) - timedelta(hours=1)) < timedelta(seconds=5)
    assert [k for k, i in by_key.items() if i.expires_at is not None] == ["drink"]

    # A narrower prefix: whole labels only.
    assert {i.key for i in await store.histories(prefs)} == {
        "food",
        "drink",
        "empty",
        "gone",
        "back",
    }
    assert [i.key for i in await store.histories(("alice", "notes"))] == ["n1"]
    assert [i.key for i in await store.histories(("alice", "pre"))] == ["p"]
    assert await store.histories(("alice", "none")) == []
    assert [i.value for i in (await store.histories(("bob",)))[0].versions] == [{"text": "pizza"}]
    assert await store.histories(("carol",)) == []
    # Purged items are gone; a new put after a purge starts a new history.
    assert await store.purge_item(prefs, "gone")
    assert "gone" not in {i.key for i in await store.histories(prefs)}
    for bad in ((), ["alice"], ("",), None):
        with pytest.raises(InvalidInput):
            await store.histories(bad)  # type: ignore[arg-type]


async def test_histories_read_page_by_page(make_memory, monkeypatch):
    _, store = await store_of(make_memory)
    for n in range(7):
        await store.put(("alice", f"n{n % 3}"), f"k{n}", {"text": f"item {n}"})
    await store.put(("alice", "o"), "after", {"text": "outside the prefix"})
    whole = await store.histories(("alice",))
    monkeypatch.setattr(store_module, "_PAGE", 2)
    assert await store.histories(("alice",)) == whole
    assert [i.key for i in await store.histories(("alice", "n1"))] == ["k1", "k4"]
    assert len(whole) == 8


async def test_histories_leave_out_expired_items(make_memory):
    _, store = await store_of(make_memory)
    await store.put(NS, "short", {"text": "soon gone"}, ttl=0.2)
    await store.put(NS, "long", {"text": "stays"})
    await asyncio.sleep(0.35)
    assert [i.key for i in await store.histories(("alice",))] == ["long"]


async def test_a_put_keeps_its_index_in_its_record(make_memory, raw):
    mem, store = await store_of(make_memory)
    keys = mem.layout.store("alice")

    async def payload(key: str, redis_key: str | None = None) -> list[Any]:
        record = await raw.get(redis_key or keys.item(store_ref(NS, key)))
        return msgpack.unpackb(record.split(b",", 4)[4], raw=False)

    await store.put(NS, "a", {"t": "x"}, index=["t", "u[*].v"])
    await store.put(NS, "b", {"t": "x"}, source={"s": 1})
    await store.put(NS, "c", {"t": "x"}, index=False)
    assert await payload("a") == [1, {"t": "x"}, None, ["t", "u[*].v"]]
    assert await payload("b") == [1, {"t": "x"}, {"s": 1}, None]
    assert await payload("c") == [1, {"t": "x"}, None, False]
    await store.delete(NS, "c", source={"s": 2})
    tombstone = await raw.lindex(keys.history(store_ref(NS, "c")), -1)
    assert msgpack.unpackb(tombstone.split(b",", 4)[4], raw=False) == [1, None, {"s": 2}]
    # A record whose index is not one: CorruptData.
    key = keys.item(store_ref(NS, "a"))
    for index in ([1], "t", [""], True):
        body = msgpack.packb([1, {"t": "x"}, None, index])
        await raw.set(key, b"1,2,3,p," + body)
        with pytest.raises(CorruptData):
            await store.get(NS, "a")
    await raw.set(key, b"1,2,3,d," + msgpack.packb([1, None, None, None]))
    with pytest.raises(CorruptData):
        await store.history(NS, "a")


async def forget_indexes(raw: Any, mem: Memory, namespace: tuple[str, ...], key: str) -> None:
    """Make the records of an item as puts stored them before they kept
    their ``index`` (no fourth field), the Redis TTL left as it was."""
    keys = mem.layout.store(namespace[0])
    ref = store_ref(namespace, key)

    def old(record: bytes) -> bytes:
        head = record.split(b",", 4)
        fields = msgpack.unpackb(head[4], raw=False)[:3]
        return b",".join(head[:4]) + b"," + msgpack.packb(fields, use_bin_type=True)

    current = await raw.get(keys.item(ref))
    if current is not None:
        await raw.set(keys.item(ref), old(current), keepttl=True)
    history = await raw.lrange(keys.history(ref), 0, -1)
    for n, record in enumerate(history):
        await raw.lset(keys.history(ref), n, old(record))


async def test_the_index_of_items_stored_before_puts_kept_it_is_found(make_memory, raw):
    mem, store = await store_of(make_memory)
    cases = {
        "every": ({"a": "ramen", "b": "sushi"}, None, None),
        "none": ({"a": "ramen", "b": "sushi"}, False, False),
        "one": ({"a": "ramen", "b": "sushi"}, ["b"], ["b"]),
        "stars": ({"t": "x", "b": {"c": ["sushi", "tea"]}}, ["b.c[*]"], ["b.c[0]", "b.c[1]"]),
        "counts": ({"a": "ramen", "b": "ramen ramen"}, ["a"], ["a"]),
    }
    for key, (value, index, _) in cases.items():
        await store.put(NS, key, value, index=index)
    await store.put(NS, "deleted", {"a": "ramen"}, index=["a"])
    await store.delete(NS, "deleted")
    await store.put(NS, "mixed", {"a": "ramen", "b": "sushi"}, index=["b"])
    await store.put(NS, "mixed", {"a": "ramen", "b": "tea"}, index=["a"], ttl=60)
    for key in [*cases, "deleted"]:
        await forget_indexes(raw, mem, NS, key)
    # Only the history of "mixed" is old: its live put kept its index.
    ref = store_ref(NS, "mixed")
    history_key = mem.layout.store("alice").history(ref)
    [first] = await raw.lrange(history_key, 0, -1)
    head = first.split(b",", 4)
    fields = msgpack.unpackb(head[4], raw=False)[:3]
    await raw.lset(history_key, 0, b",".join(head[:4]) + b"," + msgpack.packb(fields))

    found = {i.key: i for i in await store.histories(NS)}
    for key, (_, _, expected) in cases.items():
        assert found[key].index == expected, key
    assert found["deleted"].index is False
    assert found["mixed"].index == ["a"]
    assert found["mixed"].expires_at is not None
    # The old records read as before.
    assert (await store.get(NS, "every")) is not None
    assert [v.version for v in found["mixed"].versions] == [1, 2]


@pytest.mark.parametrize(
    ("value", "index", "expected"),
    [
        ({"a": "ramen", "b": "sushi"}, None, None),
        ({"a": "ramen", "b": "sushi"}, False, False),
        ({"a": "ramen", "b": "sushi"}, ["b"], ["b"]),
        ({"t": "ramen", "b": {"c": ["sushi", "tea"]}}, ["b.c[*]"], ["b.c[0]", "b.c[1]"]),
        # The same words in two fields: the counts tell which was indexed.
        ({"a": "ramen", "b": "ramen ramen"}, ["b"], ["b"]),
        ({"a": "ramen", "b": "ramen ramen"}, ["a"], ["a"]),
        # No string to index: nothing indexed.
        ({"n": 1}, None, False),
        # A key no path can name: every string (the closest superset).
        ({"p": {"x.y": "ramen"}, "b": "sushi"}, ["p"], None),
        ({"$": "ramen", "b": "sushi"}, ["$"], None),
    ],
)
def test_the_index_is_found_from_the_terms(value, index, expected):
    paths = jsonpaths.check_index(index)
    held: Counter[str] | None = jsonpaths.indexed_terms(value, paths) or None
    assert store_module._index_of(value, held) == expected
    if expected is not None and expected is not False:
        assert jsonpaths.indexed_terms(value, expected) == held


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
