"""``redismem.adapters.langgraph_store``: LangGraph's ``BaseStore`` over ``mem.store``.

Modelled on LangGraph's own store tests (``InMemoryStore`` is the reference:
several tests run the same calls on it and compare), on a real Redis and on
the embedded backend:

* put/get/delete, updates, non-ASCII and nested values, JSON-only values;
* namespace rules (LangGraph's and ours), prefix search, ``list_namespaces``
  with prefix/suffix, ``"*"`` wildcards, ``max_depth`` and pagination;
* filters with every operator, keyword search, pagination;
* vector search with a deterministic embedder (the order is checked against
  ``InMemoryStore``), redismem's ``HashingEmbedder``, LangChain embeddings and
  plain functions, per-put ``index`` overrides, vectors removed on delete;
* batches of mixed ops run in order; TTL in minutes, and expiry;
* the sync methods from a thread; a compiled graph using the store.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Sequence
from typing import Any, TypedDict

import msgpack
import pytest
from conftest import MemoryFactory
from langchain_core.embeddings import DeterministicFakeEmbedding
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from redismem import InvalidInput, Memory
from redismem.adapters.langgraph_store import VECTORS_KEY, RedisMemStore
from redismem.core.keys import store_ref
from redismem.recall.embeddings import HashingEmbedder

WORDS = ("cat", "dog", "fish", "bird")


class WordEmbedder:
    """A deterministic 4-dimensional embedder: how often each of ``WORDS``
    occurs in the text (none of them: the zero vector, similarity 0)."""

    model_id = "words-4"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def vector(self, text: str) -> list[float]:
        tokens = text.lower().replace('"', " ").replace(",", " ").split()
        counts = [float(tokens.count(word)) for word in WORDS]
        return counts

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.vector(text) for text in texts]

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:  # a sync function too
        return [self.vector(text) for text in texts]


async def store_of(make_memory: MemoryFactory, **options: Any) -> tuple[Memory, RedisMemStore]:
    memory = await make_memory()
    return memory, RedisMemStore(memory, **options)


def keys(items: Sequence[Item]) -> list[str]:
    return [item.key for item in items]


async def raw_value(memory: Memory, namespace: tuple[str, ...], key: str) -> dict[str, Any]:
    stored = await memory.store.get(namespace, key)
    assert stored is not None
    return stored.value


# -- put / get / delete ---------------------------------------------------------------------


async def test_put_get_update_delete(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    ns = ("alice", "prefs")
    assert await store.aget(ns, "food") is None
    await store.aput(ns, "food", {"text": "likes ramen", "stars": 5})
    first = await store.aget(ns, "food")
    assert isinstance(first, Item)
    assert (first.namespace, first.key, first.value) == (
        ns,
        "food",
        {"text": "likes ramen", "stars": 5},
    )
    assert first.created_at == first.updated_at
    assert first.created_at.tzinfo is not None

    await asyncio.sleep(0.01)
    await store.aput(ns, "food", {"text": "likes udon"})
    second = await store.aget(ns, "food")
    assert second is not None and second.value == {"text": "likes udon"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at

    await store.adelete(ns, "food")
    assert await store.aget(ns, "food") is None
    await store.adelete(ns, "food")  # deleting a missing item does nothing
    assert await store.asearch(("alice",)) == []


async def test_non_ascii_and_nested_values_round_trip(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    ns = ("ünïcödé 用户", "记忆", "😀")
    value = {
        "texte": "aimé les ramen 🍜 — “quoted”",
        "nested": {"list": [1, 2.5, None, True, {"deep": ["ж", "ß"]}], "empty": {}},
        "zero": 0,
        "neg": -1.25e-7,
        "big": 2**63,
        "🔑": "value",
    }
    await store.aput(ns, "clé/ключ:1", value)
    item = await store.aget(ns, "clé/ключ:1")
    assert item is not None
    assert item.value == value and item.namespace == ns and item.key == "clé/ключ:1"
    assert type(item.value["neg"]) is float and type(item.value["big"]) is int
    assert await store.alist_namespaces() == [ns]
    assert await store.alist_namespaces(prefix=("ünïcödé 用户", "*", "😀")) == [ns]
    found = await store.asearch(("ünïcödé 用户",), query="ramen")
    assert keys(found) == ["clé/ключ:1"] and found[0].value == value


@pytest.mark.parametrize(
    "value",
    [
        {"when": __import__("datetime").datetime(2024, 1, 1)},
        {"n": float("nan")},
        {"t": (1, 2)},
        {"b": b"bytes"},
        {1: "int key"},
        {VECTORS_KEY: [[1]]},
        ["not", "a", "dict"],
    ],
    ids=["datetime", "nan", "tuple", "bytes", "int-key", "reserved", "list"],
)
async def test_non_json_values_are_rejected(make_memory: MemoryFactory, value: Any) -> None:
    _, store = await store_of(make_memory)
    with pytest.raises(InvalidInput):
        await store.aput(("alice",), "k", value)
    # A bad put in a batch fails it before anything is written.
    with pytest.raises(InvalidInput):
        await store.abatch([PutOp(("alice",), "first", {"ok": 1}), PutOp(("alice",), "k", value)])
    assert await store.aget(("alice",), "first") is None


@pytest.mark.parametrize(
    ("labels", "error"),
    [
        (("a.b",), InvalidNamespaceError),
        (("alice", ""), InvalidNamespaceError),
        (("alice", "x\x00y"), InvalidNamespaceError),
        (("langgraph", "x"), InvalidNamespaceError),
        ((), InvalidNamespaceError),
        (("alice", "x" * 4097), InvalidInput),
    ],
    ids=["dot", "empty-label", "nul", "langgraph-root", "empty", "too-long"],
)
async def test_namespace_rules(make_memory: MemoryFactory, labels: Any, error: Any) -> None:
    _, store = await store_of(make_memory)
    with pytest.raises(error):
        await store.aput(labels, "k", {"v": 1})
    with pytest.raises(error):  # a PutOp given to abatch is checked the same way
        await store.abatch([PutOp(labels, "k", {"v": 1})])
    # LangGraph's InMemoryStore refuses the same namespaces (but the length).
    if error is InvalidNamespaceError:
        with pytest.raises(InvalidNamespaceError):
            InMemoryStore().put(labels, "k", {"v": 1})
    assert await store.alist_namespaces() == []


async def test_keys_and_namespace_reads(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    with pytest.raises(InvalidInput, match="key"):
        await store.aput(("alice",), "", {"v": 1})
    with pytest.raises(InvalidInput, match="tenant"):
        await store.aget((), "k")
    with pytest.raises(InvalidNamespaceError):
        await store.asearch(("a.b",))
    with pytest.raises(InvalidNamespaceError):
        await store.alist_namespaces(prefix=("a.b",))
    with pytest.raises(InvalidInput):
        await store.aput(["alice"], "k", {"v": 1})  # type: ignore[arg-type]
    # Labels with ':' '{' '%' '/' are fine (escaped in keys).
    ns = ("a:b", "{x}", "50%", "c/d")
    await store.aput(ns, "k", {"v": 1})
    assert (await store.aget(ns, "k")) is not None


# -- search ---------------------------------------------------------------------------------

DOCS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("test", "docs"), "doc1", {"color": "red", "score": 4.5, "size": 10, "meta": {"lang": "en"}}),
    (("test", "docs"), "doc2", {"color": "blue", "score": 3.2, "size": 20, "meta": {"lang": "fr"}}),
    (("test", "docs", "old"), "doc3", {"color": "red", "score": 2.8, "meta": {"lang": "en"}}),
    (("test", "notes"), "doc4", {"color": "green", "score": 4.0, "size": 5}),
    (("other",), "doc5", {"color": "red", "score": 5.0, "size": 1}),
]

#: (filter, expected keys, whether InMemoryStore agrees: it raises on a missing
#: field under $gt-style operators, float(None), and needs a nested filter's
#: parent to be a dict where ours treats the missing nested field as missing).
FILTERS: list[tuple[dict[str, Any], set[str], bool]] = [
    ({"color": "red"}, {"doc1", "doc3"}, True),
    ({"color": {"$eq": "red"}}, {"doc1", "doc3"}, True),
    ({"color": {"$ne": "red"}}, {"doc2", "doc4"}, True),
    ({"score": {"$gt": 4.0}}, {"doc1"}, True),
    ({"score": {"$gte": 4.0}}, {"doc1", "doc4"}, True),
    ({"score": {"$lt": 3.2}}, {"doc3"}, True),
    ({"score": {"$lte": 3.2}}, {"doc2", "doc3"}, True),
    ({"score": {"$gt": 3.0, "$lt": 4.5}}, {"doc2", "doc4"}, True),
    ({"score": {"$gte": 3.0}, "color": "red"}, {"doc1"}, True),
    ({"meta": {"lang": "en"}}, {"doc1", "doc3"}, True),
    ({"meta": {"lang": {"$ne": "en"}}}, {"doc2", "doc4"}, False),
    ({"size": {"$lte": 10}}, {"doc1", "doc4"}, False),
    ({"color": "purple"}, set(), True),
]


async def fill(store: BaseStore) -> None:
    for namespace, key, value in DOCS:
        await store.aput(namespace, key, value)
        await asyncio.sleep(0.002)  # distinct updated_at: newest first is doc5 .. doc1


@pytest.mark.parametrize(
    ("flt", "expected", "agrees"), FILTERS, ids=[repr(f) for f, _, _ in FILTERS]
)
async def test_filters_match_inmemorystore(
    make_memory: MemoryFactory, flt: dict[str, Any], expected: set[str], agrees: bool
) -> None:
    _, store = await store_of(make_memory)
    await fill(store)
    found = await store.asearch(("test",), filter=flt, limit=100)
    assert set(keys(found)) == expected
    assert all(isinstance(item, SearchItem) and item.score is None for item in found)
    if agrees:
        reference = InMemoryStore()
        await fill(reference)
        assert set(keys(await reference.asearch(("test",), filter=flt, limit=100))) == expected


async def test_filter_errors(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    await fill(store)
    for flt in ({"meta.lang": "en"}, {"meta": {}}, {"score": {"$regex": "x"}}, {"x": {"$in": 1}}):
        with pytest.raises(InvalidInput):
            await store.asearch(("test",), filter=flt)
    # Our $in passes through.
    found = await store.asearch(("test",), filter={"color": {"$in": ["blue", "green"]}})
    assert set(keys(found)) == {"doc2", "doc4"}


#: Numbers at the edges: huge floats, the largest int values hold, 2**70 as a float.
EDGE_NUMBERS: list[int | float] = [-1.5e300, -5, 0, 2.5, 7, 2**63 - 1, 1e30, float(2**70), 1.5e300]

INF, NAN = math.inf, math.nan
#: Filter bounds our values never hold (non-finite floats, ints beyond 64
#: bits), as InMemoryStore takes them: (filter, whether InMemoryStore takes
#: it: float() of an int beyond a float's range raises OverflowError there).
EDGE_FILTERS: list[tuple[dict[str, Any], bool]] = [
    ({"n": {"$gt": -INF}}, True),
    ({"n": {"$gte": -INF}}, True),
    ({"n": {"$lt": INF}}, True),
    ({"n": {"$lte": INF}}, True),
    ({"n": {"$gt": INF}}, True),
    ({"n": {"$gte": INF}}, True),
    ({"n": {"$lt": -INF}}, True),
    ({"n": {"$lte": -INF}}, True),
    ({"n": {"$gt": NAN}}, True),
    ({"n": {"$lte": NAN}}, True),
    ({"n": {"$eq": NAN}}, True),
    ({"n": {"$ne": NAN}}, True),
    ({"n": NAN}, True),
    ({"n": INF}, True),
    ({"n": {"$ne": -INF}}, True),
    ({"n": {"$gt": 2**70}}, True),
    ({"n": {"$gte": 2**70}}, True),
    ({"n": {"$lt": -(2**100)}}, True),
    ({"n": {"$gte": -(2**100)}}, True),
    ({"n": {"$lt": 2**100}}, True),
    ({"n": 2**70}, True),
    ({"n": {"$eq": 2**70}}, True),
    ({"n": {"$ne": 2**70}}, True),
    ({"n": 2**64 + 1}, True),
    ({"n": {"$ne": 2**64 + 1}}, True),
    ({"n": {"$gt": -INF, "$lt": 10}}, True),
    ({"n": {"$gte": -INF, "$gt": 1}}, True),
    ({"n": {"$gt": -INF, "$lte": INF}}, True),
    ({"n": {"$gt": NAN, "$lt": 10}}, True),
    ({"n": {"$ne": NAN, "$lt": 1}}, True),
    ({"n": {"$gt": 10**400}}, False),
    ({"n": {"$gte": -(10**400)}}, False),
    ({"n": 10**400}, True),
    ({"n": {"$ne": 10**400}}, True),
    ({"n": {"$in": [INF, 7, NAN, 2**70, 2**64 + 1]}}, False),
    ({"n": {"$in": [INF, NAN]}}, False),
    ({"n": [INF]}, True),
    ({"n": {"$gt": -INF}, "m": {"$lt": INF}}, True),
]
EDGE_EXPECTED: list[set[int]] = [
    set(range(9)),
    set(range(9)),
    set(range(9)),
    set(range(9)),
    set(),
    set(),
    set(),
    set(),
    set(),
    set(),
    set(),
    set(range(9)),
    set(),
    set(),
    set(range(9)),
    {6, 8},
    {6, 7, 8},
    {0},
    set(range(1, 9)),
    {0, 1, 2, 3, 4, 5, 6, 7},
    {7},
    {7},
    set(range(9)) - {7},
    set(),
    set(range(9)),
    {0, 1, 2, 3, 4},
    {3, 4, 5, 6, 7, 8},
    set(range(9)),
    set(),
    {0, 1, 2},
    set(),
    set(range(9)),
    set(),
    set(range(9)),
    {4, 7},
    set(),
    set(),
    set(range(9)),
]


@pytest.mark.parametrize(
    ("flt", "agrees", "expected"),
    [(f, a, e) for (f, a), e in zip(EDGE_FILTERS, EDGE_EXPECTED, strict=True)],
    ids=[f"edge{i}" for i in range(len(EDGE_FILTERS))],
)
async def test_filter_bounds_beyond_stored_numbers_match_inmemorystore(
    make_memory: MemoryFactory, flt: dict[str, Any], agrees: bool, expected: set[int]
) -> None:
    # ±inf, NaN and ints beyond 64 bits as bounds: accepted, and the same
    # items found as InMemoryStore finds.
    _, store = await store_of(make_memory)
    reference = InMemoryStore()
    for i, number in enumerate(EDGE_NUMBERS):
        for target in (store, reference):
            await target.aput(("edge",), f"k{i}", {"n": number, "m": -number})
    found = {int(item.key[1:]) for item in await store.asearch(("edge",), filter=flt, limit=100)}
    assert found == expected
    if agrees:
        theirs = await reference.asearch(("edge",), filter=flt, limit=100)
        assert {int(item.key[1:]) for item in theirs} == expected


async def test_a_list_as_namespace_prefix_is_taken_as_the_tuple(
    make_memory: MemoryFactory,
) -> None:
    # InMemoryStore takes a list wherever a namespace prefix or suffix goes.
    _, store = await store_of(make_memory)
    reference = InMemoryStore()
    await fill(store)
    await fill(reference)
    for options in ({"prefix": ["test"]}, {"suffix": ["docs"]}, {"prefix": ["*", "docs"]}):
        expected = await reference.alist_namespaces(**options)
        assert expected
        assert await store.alist_namespaces(**options) == expected
        assert await asyncio.to_thread(store.list_namespaces, **options) == expected
    # Search: the same items as with the tuple (InMemoryStore, which compares
    # its tuples with the list, finds nothing; it does not refuse it either).
    assert await reference.asearch(["test", "docs"]) == []  # type: ignore[arg-type]
    assert keys(await store.asearch(["test", "docs"])) == ["doc3", "doc2", "doc1"]  # type: ignore[arg-type]
    assert keys(await asyncio.to_thread(store.search, ["test"])) == keys(
        await store.asearch(("test",))
    )
    (found,) = await store.abatch([SearchOp(["test"], {"color": "red"})])  # type: ignore[arg-type]
    assert keys(found) == ["doc3", "doc1"]
    # Namespaces of items stay tuples, as in InMemoryStore (which cannot hash a list).
    with pytest.raises(InvalidInput):
        await store.aput(["alice"], "k", {"v": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await reference.aput(["alice"], "k", {"v": 1})  # type: ignore[arg-type]
    await store.aclose()


async def test_prefix_search_and_pagination(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    await fill(store)
    assert keys(await store.asearch(("test",))) == ["doc4", "doc3", "doc2", "doc1"]
    assert keys(await store.asearch(("test", "docs"))) == ["doc3", "doc2", "doc1"]
    assert keys(await store.asearch(("test", "docs", "old"))) == ["doc3"]
    assert keys(await store.asearch(("test", "doc"))) == []  # labels, not string prefixes
    assert keys(await store.asearch(())) == ["doc5", "doc4", "doc3", "doc2", "doc1"]
    assert keys(await store.asearch(("test",), limit=2)) == ["doc4", "doc3"]
    assert keys(await store.asearch(("test",), limit=2, offset=2)) == ["doc2", "doc1"]
    assert keys(await store.asearch(("test",), limit=2, offset=4)) == []
    assert keys(await store.asearch(("test",), filter={"color": "red"}, limit=1, offset=1)) == [
        "doc1"
    ]
    with pytest.raises(InvalidInput):
        await store.asearch(("test",), limit=-1)


async def test_keyword_search_without_index(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    ns = ("alice", "memories")
    await store.aput(ns, "a", {"text": "Alice likes ramen and ramen broth"})
    await store.aput(ns, "b", {"text": "Alice went hiking"})
    await store.aput(ns, "c", {"text": "ramen once", "tags": ["food"]})
    found = await store.asearch(("alice",), query="ramen")
    assert keys(found) == ["a", "c"]
    assert all(item.score is not None and item.score > 0 for item in found)
    assert found[0].score is not None and found[1].score is not None
    assert found[0].score > found[1].score
    assert keys(await store.asearch(("alice",), query="ramen", filter={"tags": ["food"]})) == ["c"]
    assert keys(await store.asearch(("alice",), query="ramen", limit=1, offset=1)) == ["c"]
    assert await store.asearch(("alice",), query="sushi") == []


# -- list_namespaces ----------------------------------------------------------------------------

NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]

LISTINGS: list[dict[str, Any]] = [
    {},
    {"prefix": ("a", "b")},
    {"prefix": ("a", "*", "f")},
    {"prefix": ("*", "b")},
    {"suffix": ("f",)},
    {"suffix": ("*", "f")},
    {"prefix": ("a",), "suffix": ("f",)},
    {"prefix": ("users",), "max_depth": 2},
    {"max_depth": 1},
    {"max_depth": 2, "limit": 3},
    {"max_depth": 2, "limit": 3, "offset": 3},
    {"prefix": ("a",), "max_depth": 3, "offset": 1},
    {"prefix": ("a", "b", "c", "d", "e")},
    {"prefix": ("nope",)},
    {"limit": 0},
    {"offset": 100},
]


@pytest.mark.parametrize("options", LISTINGS, ids=[repr(o) for o in LISTINGS])
async def test_list_namespaces_matches_inmemorystore(
    make_memory: MemoryFactory, options: dict[str, Any]
) -> None:
    _, store = await store_of(make_memory)
    reference = InMemoryStore()
    for namespace in NAMESPACES:
        await store.aput(namespace, "k", {"v": 1})
        await reference.aput(namespace, "k", {"v": 1})
    expected = await reference.alist_namespaces(**options)
    assert await store.alist_namespaces(**options) == expected
    assert store.list_namespaces is not None


async def test_list_namespaces_spot_checks_and_ops(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    for namespace in NAMESPACES:
        await store.aput(namespace, "k", {"v": 1})
    assert await store.alist_namespaces(prefix=("a", "*", "f")) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert await store.alist_namespaces(suffix=("*", "f")) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert await store.alist_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    # Several conditions of one kind, as a ListNamespacesOp allows.
    op = ListNamespacesOp(
        match_conditions=(
            MatchCondition("prefix", ("a",)),
            MatchCondition("prefix", ("*", "b")),
            MatchCondition("suffix", ("d", "*")),
        )
    )
    [listed] = await store.abatch([op])
    assert listed == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    # A deleted item's namespace is gone.
    await store.adelete(("users", "123"), "k")
    assert await store.alist_namespaces(prefix=("users",)) == [("users", "456", "settings")]
    with pytest.raises(InvalidInput):
        await store.alist_namespaces(max_depth=0)


# -- vector search ------------------------------------------------------------------------------

ANIMALS: list[tuple[str, dict[str, Any]]] = [
    ("fishy", {"text": "fish fish fish bird"}),
    ("doggo", {"text": "dog dog cat"}),
    ("catty", {"text": "cat cat cat dog"}),
    ("kitten", {"text": "cat"}),
    ("birdy", {"text": "bird bird fish"}),
    ("nothing", {"text": "no animals here"}),
]


async def animals(store: BaseStore, ns: tuple[str, ...] = ("zoo", "animals")) -> None:
    for key, value in ANIMALS:
        await store.aput(ns, key, value)
        await asyncio.sleep(0.002)


@pytest.mark.parametrize(
    "query", ["cat", "dog", "fish bird", "cat dog", "bird"], ids=lambda q: q.replace(" ", "+")
)
async def test_vector_search_ranks_like_inmemorystore(
    make_memory: MemoryFactory, query: str
) -> None:
    embedder = WordEmbedder()
    index: Any = {"dims": 4, "embed": embedder, "fields": ["text"]}
    _, store = await store_of(make_memory, index=index)
    reference = InMemoryStore(index={"dims": 4, "embed": embedder, "fields": ["text"]})
    await animals(store)
    await animals(reference)
    found = await store.asearch(("zoo",), query=query, limit=10)
    expected = await reference.asearch(("zoo",), query=query, limit=10)
    ours = {item.key: item.score for item in found}
    theirs = {item.key: item.score for item in expected}
    # Same items, same scores (ours from int8 vectors: close, not equal).
    assert ours.keys() == theirs.keys() == {key for key, _ in ANIMALS}
    for key, score in theirs.items():
        assert ours[key] == pytest.approx(score, abs=0.02)
    # Best first, in the reference's order wherever the scores really differ.
    for before, after in itertools.combinations(keys(found), 2):
        assert ours[before] >= ours[after]  # type: ignore[operator]
        assert theirs[before] >= theirs[after] - 0.02  # type: ignore[operator]
    q = embedder.vector(query)
    for item in found:
        vector = embedder.vector(item.value["text"])
        norms = math.hypot(*q) * math.hypot(*vector)
        exact = sum(a * b for a, b in zip(q, vector, strict=True)) / norms if norms else 0.0
        assert item.score == pytest.approx(exact, abs=0.02)


async def test_vector_search_order_filters_and_pages(make_memory: MemoryFactory) -> None:
    embedder = WordEmbedder()
    _, store = await store_of(make_memory, index={"dims": 4, "embed": embedder, "fields": ["text"]})
    await animals(store)
    found = await store.asearch(("zoo",), query="cat")
    # kitten (pure cat), catty (3 cat 1 dog), doggo (1 cat 2 dog), then no cat at all.
    assert keys(found)[:3] == ["kitten", "catty", "doggo"]
    assert found[0].score == pytest.approx(1.0)
    assert keys(await store.asearch(("zoo",), query="cat", limit=2, offset=1)) == ["catty", "doggo"]
    assert keys(await store.asearch(("zoo",), query="fish"))[:2] == ["fishy", "birdy"]
    assert keys(await store.asearch(("zoo",), query="cat", filter={"text": {"$ne": "cat"}}))[
        :2
    ] == ["catty", "doggo"]
    # No query: newest first, no score.
    plain = await store.asearch(("zoo",))
    assert keys(plain) == [key for key, _ in reversed(ANIMALS)]
    assert all(item.score is None for item in plain)
    # Values come back without the stored vectors.
    assert all(VECTORS_KEY not in item.value for item in found + plain)
    assert (await store.aget(("zoo", "animals"), "catty")) is not None
    # Puts embed in one call per batch; a query once.
    embedder.calls.clear()
    await store.abatch(
        [
            PutOp(("zoo", "b"), "x", {"text": "dog"}),
            PutOp(("zoo", "b"), "y", {"text": "bird"}),
            SearchOp(("zoo",), query="dog"),
            SearchOp(("zoo",), query="dog", limit=1),
        ]
    )
    assert sorted(map(sorted, embedder.calls)) == [["bird", "dog"], ["dog"]]


async def test_vectors_are_stored_in_the_item_and_deleted_with_it(
    make_memory: MemoryFactory,
) -> None:
    memory, store = await store_of(make_memory, index={"dims": 4, "embed": WordEmbedder()})
    ns = ("zoo",)
    await store.aput(ns, "k", {"text": "cat", "other": "dog"})
    stored = await raw_value(memory, ns, "k")
    # Default fields ["$"]: the whole value as one text, one vector of int8 ints.
    assert stored[VECTORS_KEY] == [[127, 127, 0, 0]]
    assert {k: v for k, v in stored.items() if k != VECTORS_KEY} == {"text": "cat", "other": "dog"}
    item = await store.aget(ns, "k")
    assert item is not None and item.value == {"text": "cat", "other": "dog"}
    await store.adelete(ns, "k")
    assert await memory.store.get(ns, "k") is None
    assert await store.asearch(ns, query="cat") == []
    # A put replaces the vectors; index=False stores none.
    await store.aput(ns, "k", {"text": "fish"})
    assert (await raw_value(memory, ns, "k"))[VECTORS_KEY] == [[0, 0, 127, 0]]
    await store.aput(ns, "k", {"text": "fish"}, index=False)
    assert VECTORS_KEY not in await raw_value(memory, ns, "k")
    await store.aput(ns, "k", {"text": "fish"}, index=[])  # no field: no vector either
    assert VECTORS_KEY not in await raw_value(memory, ns, "k")


async def test_put_index_overrides_and_many_vectors(make_memory: MemoryFactory) -> None:
    memory, store = await store_of(
        make_memory, index={"dims": 4, "embed": WordEmbedder(), "fields": ["title"]}
    )
    ns = ("zoo",)
    await store.aput(ns, "titled", {"title": "cat", "body": "fish"})
    await store.aput(ns, "bodied", {"title": "cat", "body": "fish fish"}, index=["body"])
    await store.aput(
        ns,
        "parts",
        {"parts": [{"t": "dog"}, {"t": "bird"}, {"t": "fish cat"}]},
        index=["parts[*].t"],
    )
    await store.aput(ns, "last", {"parts": [{"t": "dog"}, {"t": "bird"}]}, index=["parts[-1].t"])
    await store.aput(ns, "unindexed", {"title": "fish"}, index=False)
    assert len((await raw_value(memory, ns, "parts"))[VECTORS_KEY]) == 3
    assert len((await raw_value(memory, ns, "last"))[VECTORS_KEY]) == 1
    fish = await store.asearch(ns, query="fish")
    # bodied (fish only), parts (best: "fish cat"), zero scores, then unindexed (unscored).
    assert keys(fish)[:2] == ["bodied", "parts"]
    assert fish[1].score == pytest.approx(math.sqrt(0.5), abs=0.01)
    assert keys(fish)[-1] == "unindexed" and fish[-1].score is None
    assert all(item.score is not None for item in fish[:-1])
    bird = await store.asearch(ns, query="bird")
    assert keys(bird)[:2] == ["last", "parts"] or keys(bird)[:2] == ["parts", "last"]
    assert bird[0].score == pytest.approx(1.0) and bird[1].score == pytest.approx(1.0)


async def test_hashing_embedder_and_other_embedding_kinds(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    words = WordEmbedder()

    async def async_fn(texts: Sequence[str]) -> list[list[float]]:
        return [words.vector(t) for t in texts]

    kinds: dict[str, Any] = {
        "hashing": (HashingEmbedder(64), 64),
        "sync-fn": (words, 4),  # WordEmbedder has an async embed: used as an Embedder
        "plain-sync-fn": (words.__call__, 4),
        "async-fn": (async_fn, 4),
        "langchain": (DeterministicFakeEmbedding(size=8), 8),
    }
    for name, (embed, dims) in kinds.items():
        store = RedisMemStore(memory, index={"dims": dims, "embed": embed, "fields": ["text"]})
        ns = (f"t-{name}",)
        await store.aput(ns, "match", {"text": "cat dog ramen"})
        await store.aput(ns, "miss", {"text": "bird fish sushi"})
        found = await store.asearch(ns, query="cat dog ramen")
        assert keys(found) == ["match", "miss"], name
        assert found[0].score == pytest.approx(1.0, abs=0.01), name
        if name == "hashing":
            assert found[1].score is not None and found[1].score < 0.5


async def test_index_config_errors(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    words = WordEmbedder()
    for bad in (
        {"dims": 4},
        {"embed": words},
        {"dims": 0, "embed": words},
        {"dims": True, "embed": words},
        {"dims": 4, "embed": words, "fields": "text"},
        {"dims": 4, "embed": words, "fields": [3]},
        {"dims": 4, "embed": words, "typo": 1},
        {"dims": 4, "embed": 12},
    ):
        with pytest.raises(InvalidInput):
            RedisMemStore(memory, index=bad)  # type: ignore[arg-type]
    store = RedisMemStore(memory, index={"dims": 3, "embed": words})
    with pytest.raises(InvalidInput, match="dimensions"):
        await store.aput(("zoo",), "k", {"text": "cat"})
    assert await store.aget(("zoo",), "k") is None
    store = RedisMemStore(memory, index={"dims": 4, "embed": words})
    with pytest.raises(InvalidInput):
        await store.aput(("zoo",), "k", {"text": "cat"}, index="text")  # type: ignore[arg-type]


# -- batches ------------------------------------------------------------------------------------


async def test_batch_runs_mixed_ops_in_order(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    await store.aput(("test", "foo"), "key1", {"data": "value1"})
    results = await store.abatch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "value2"}),
            GetOp(("test", "bar"), "key2"),  # sees the put before it
            SearchOp(("test",), filter={"data": "value1"}),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("test",)),)),
            PutOp(("test", "foo"), "key1", None),  # a delete
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "value3"}),
            PutOp(("test", "bar"), "key2", {"data": "value4"}),  # the last put wins
            GetOp(("test", "missing"), "nope"),
            SearchOp(("test",), query="value4"),
        ]
    )
    assert len(results) == 11
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[1] is None
    assert isinstance(results[2], Item) and results[2].value == {"data": "value2"}
    assert isinstance(results[3], list) and keys(results[3]) == ["key1"]
    assert results[4] == [("test", "bar"), ("test", "foo")]
    assert results[5] is None and results[6] is None
    assert results[9] is None
    assert isinstance(results[10], list) and [i.value for i in results[10]] == [{"data": "value4"}]
    assert await store.alist_namespaces() == [("test", "bar")]
    assert await store.abatch([]) == []
    with pytest.raises(InvalidInput, match="unknown store operation"):
        await store.abatch(["not an op"])  # type: ignore[list-item]


# -- TTL ----------------------------------------------------------------------------------------


async def test_ttl_in_minutes_is_set_on_the_keys(make_memory: MemoryFactory, raw: Any) -> None:
    memory, store = await store_of(make_memory, ttl={"default_ttl": 2})
    assert store.supports_ttl is True
    assert store.ttl_config == {"refresh_on_read": False, "default_ttl": 2.0}
    ns = ("alice", "prefs")
    await store.aput(ns, "default", {"v": 1})
    await store.aput(ns, "own", {"v": 1}, ttl=0.5)
    await store.aput(ns, "forever", {"v": 1}, ttl=None)
    await store.abatch([PutOp(ns, "op", {"v": 1})])  # a PutOp's ttl None: no expiry
    item_key = memory.layout.store("alice").item

    async def pttl(key: str) -> int:
        return int(await raw.pttl(item_key(store_ref(ns, key))))

    assert 119_000 < await pttl("default") <= 120_000
    assert 29_000 < await pttl("own") <= 30_000
    assert await pttl("forever") == -1
    assert await pttl("op") == -1
    # Reads do not refresh the ttl.
    await asyncio.sleep(0.05)
    await store.aget(ns, "own")
    await store.asearch(ns)
    assert await pttl("own") < 29_960


async def test_ttl_expiry(make_memory: MemoryFactory) -> None:
    _, store = await store_of(make_memory)
    ns = ("alice", "tmp")
    await store.aput(ns, "short", {"text": "ephemeral ramen"}, ttl=0.3 / 60)  # 0.3 s
    await store.aput(ns, "long", {"text": "lasting ramen"})
    assert await store.aget(ns, "short") is not None
    await asyncio.sleep(0.6)
    assert await store.aget(ns, "short") is None
    assert keys(await store.asearch(("alice",))) == ["long"]
    assert keys(await store.asearch(("alice",), query="ramen")) == ["long"]
    assert await store.alist_namespaces() == [ns]


async def test_ttl_config_errors(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    for bad in (
        {"refresh_on_read": True},
        {"default_ttl": 0},
        {"default_ttl": -1},
        {"default_ttl": "5"},
        {"default_ttl": float("inf")},
        {"sweep_interval_minutes": 0},
        {"typo": 1},
    ):
        with pytest.raises(InvalidInput):
            RedisMemStore(memory, ttl=bad)  # type: ignore[arg-type]
    store = RedisMemStore(
        memory, ttl={"refresh_on_read": False, "omit_expired": True, "sweep_interval_minutes": 5}
    )
    assert RedisMemStore(memory).ttl_config == {"refresh_on_read": False}
    for ttl in (0, -1, float("nan"), True):
        with pytest.raises(InvalidInput):
            await store.aput(("alice",), "k", {"v": 1}, ttl=ttl)
    assert await store.aget(("alice",), "k") is None


# -- sync methods and graphs ------------------------------------------------------------------


async def test_sync_methods_from_a_thread(make_memory: MemoryFactory) -> None:
    memory, store = await store_of(make_memory, index={"dims": 4, "embed": WordEmbedder()})

    def work() -> Any:
        store.put(("alice", "pets"), "a", {"text": "cat"})
        store.put(("alice", "pets"), "b", {"text": "dog"})
        store.put(("alice", "pets"), "c", {"text": "temporary"}, ttl=5)
        store.delete(("alice", "pets"), "c")
        got = store.get(("alice", "pets"), "a")
        found = store.search(("alice",), query="dog")
        listed = store.list_namespaces(prefix=("alice",))
        return got, found, listed

    try:
        got, found, listed = await asyncio.to_thread(work)
        assert got is not None and got.value == {"text": "cat"}
        assert keys(found) == ["b", "a"]
        assert listed == [("alice", "pets")]
        # The async side sees what the sync side wrote.
        assert keys(await store.asearch(("alice",))) == ["b", "a"]
        # Inside a running event loop (a notebook cell) they work too.
        asyncio.get_running_loop()
        again = work()[0]
        assert again is not None and again.value == got.value
        assert keys(store.search(("alice",), query="cat")) == ["a", "b"]
        assert store.batch([GetOp(("alice", "pets"), "b")])[0] is not None
    finally:
        await store.aclose()
    assert memory.store is not None


async def test_a_sync_call_on_the_background_loop_raises(make_memory: MemoryFactory) -> None:
    # The sync methods run on redismem's background loop; code the adapter runs
    # there (an embedder) calling a sync method would wait for itself: it raises
    # rather than deadlock.
    memory = await make_memory()
    seen: list[str] = []

    class Reentrant:
        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            try:
                store.get(("alice", "pets"), "a")
            except RuntimeError as exc:
                seen.append(str(exc))
            return [[1.0, 0.0] for _ in texts]

    store = RedisMemStore(memory, index={"dims": 2, "embed": Reentrant()})
    try:
        store.put(("alice", "pets"), "a", {"text": "cat"})
        assert len(seen) == 1 and "background event loop" in seen[0]
        assert "aget" in seen[0] or "abatch" in seen[0]
        got = store.get(("alice", "pets"), "a")
        assert got is not None and got.value == {"text": "cat"}
    finally:
        await store.aclose()


class State(TypedDict, total=False):
    user: str
    text: str
    found: list[str]
    count: int


async def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    ns = (state["user"], "memories")
    await store.aput(ns, f"m{len(state['text'])}", {"text": state["text"]})
    found = await store.asearch((state["user"],), query="ramen")
    return {"found": [item.value["text"] for item in found]}


async def count(state: State) -> dict[str, Any]:
    store = get_store()
    return {"count": len(await store.asearch((state["user"],), limit=100))}


async def test_compiled_graph_uses_the_store(make_memory: MemoryFactory) -> None:
    memory = await make_memory()
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("count", count)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "count")
    builder.add_edge("count", END)
    graph = builder.compile(store=RedisMemStore(memory))

    first = await graph.ainvoke({"user": "ü1", "text": "likes ramen"})
    assert first["found"] == ["likes ramen"] and first["count"] == 1
    second = await graph.ainvoke({"user": "ü1", "text": "hates cold ramen"})
    assert sorted(second["found"]) == ["hates cold ramen", "likes ramen"]
    assert second["count"] == 2
    # Read back through another client: the items are in Redis.
    other = RedisMemStore(await make_memory())
    item = await other.aget(("ü1", "memories"), "m11")
    assert item is not None and item.value == {"text": "likes ramen"}
    assert await other.alist_namespaces() == [("ü1", "memories")]


async def test_stored_layout_is_the_long_term_store(make_memory: MemoryFactory, raw: Any) -> None:
    memory, store = await store_of(make_memory)
    await store.aput(("alice", "prefs"), "food", {"text": "ramen"})
    # The same item through mem.store, and under the tenant's hash tag.
    stored = await memory.store.get(("alice", "prefs"), "food")
    assert stored is not None and stored.value == {"text": "ramen"}
    raw_item = await raw.get(
        memory.layout.store("alice").item(store_ref(("alice", "prefs"), "food"))
    )
    assert raw_item is not None
    payload = raw_item.split(b",", 4)[4]
    assert msgpack.unpackb(payload, raw=False)[1] == {"text": "ramen"}
