"""The long-term store against LangGraph's ``BaseStore`` behaviour, after
LangGraph's own store tests: namespace prefixes and ``*`` wildcards,
``max_depth``, pagination, search by prefix and filter, non-ASCII and
hostile labels, and deletion that leaves no key behind (checked with SCAN
on the raw client). Every test runs on a real Redis and on the embedded
backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from redismem.core.keys import store_namespace_ref, store_ref
from redismem.longterm.store import LongTermStore

pytestmark = pytest.mark.every_server

HOSTILE = ["a:b", "{x}", "*", "%41", "A", "a/b", "a#b", "ünï 🚀", "a b", "?", "[a]", "\\", "\n"]


async def new_store(make_memory: Any) -> LongTermStore:
    return LongTermStore(await make_memory())


async def scan(raw: Any, pattern: str) -> list[bytes]:
    return [k async for k in raw.scan_iter(match=pattern, count=1000)]


# -- list_namespaces -------------------------------------------------------------------

BASIC = [
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


async def put_all(store: LongTermStore, namespaces: list[tuple[str, ...]]) -> None:
    for i, namespace in enumerate(namespaces):
        await store.put(namespace, f"id_{i}", {"data": f"value_{i:02d}"})


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, sorted(BASIC)),
        (
            {"prefix": ("a", "b")},
            [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")],
        ),
        ({"suffix": ("f",)}, [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]),
        ({"prefix": ("a",), "suffix": ("f",)}, [("a", "b", "f"), ("a", "c", "f")]),
        (
            {"prefix": ("a", "b"), "max_depth": 3},
            [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")],
        ),
        ({"prefix": ("a", "*", "f")}, [("a", "b", "f"), ("a", "c", "f")]),
        ({"suffix": ("*", "f")}, [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]),
        ({"prefix": ("*", "users")}, [("admin", "users", "789")]),
        ({"prefix": ("*",), "max_depth": 1}, [("a",), ("admin",), ("b",), ("users",)]),
        ({"prefix": ("nonexistent",)}, []),
        ({"prefix": ("users", "123")}, [("users", "123")]),
        ({"prefix": ("users", "123", "more")}, []),
        ({"suffix": ("a", "b", "c", "d", "e")}, []),
        ({"prefix": ()}, sorted(BASIC)),
        (
            {"max_depth": 2},
            [
                ("a", "b"),
                ("a", "c"),
                ("admin", "users"),
                ("b", "a"),
                ("users", "123"),
                ("users", "456"),
            ],
        ),
    ],
    ids=str,
)
async def test_list_namespaces(make_memory, options, expected):
    store = await new_store(make_memory)
    await put_all(store, BASIC)
    assert await store.list_namespaces(**options) == expected


async def test_list_namespaces_max_depth(make_memory):
    store = await new_store(make_memory)
    await put_all(
        store,
        [
            ("a", "b", "c", "d"),
            ("a", "b", "c", "e"),
            ("a", "b", "f", "g"),
            ("a", "h", "i", "j"),
            ("k", "l", "m", "n"),
        ],
    )
    assert await store.list_namespaces(max_depth=2) == [("a", "b"), ("a", "h"), ("k", "l")]
    assert await store.list_namespaces(max_depth=3, prefix=("a",)) == [
        ("a", "b", "c"),
        ("a", "b", "f"),
        ("a", "h", "i"),
    ]
    assert await store.list_namespaces(max_depth=10) == await store.list_namespaces()


async def test_list_namespaces_pagination(make_memory):
    store = await new_store(make_memory)
    await put_all(store, [("namespace", f"sub_{i:02d}") for i in range(20)])
    pages = [
        await store.list_namespaces(prefix=("namespace",), limit=5, offset=offset)
        for offset in (0, 5, 15, 20)
    ]
    assert pages[0] == [("namespace", f"sub_{i:02d}") for i in range(5)]
    assert pages[1] == [("namespace", f"sub_{i:02d}") for i in range(5, 10)]
    assert pages[2] == [("namespace", f"sub_{i:02d}") for i in range(15, 20)]
    assert pages[3] == []
    assert await store.list_namespaces(limit=0) == []


async def test_a_namespace_lasts_while_it_holds_an_item(make_memory):
    store = await new_store(make_memory)
    await store.put(("t", "n"), "k1", {"v": 1})
    await store.put(("t", "n"), "k2", {"v": 1})
    await store.delete(("t", "n"), "k1")
    assert await store.list_namespaces() == [("t", "n")]
    await store.delete(("t", "n"), "k2")
    assert await store.list_namespaces() == []
    await store.put(("t", "n"), "k1", {"v": 2})
    assert await store.list_namespaces() == [("t", "n")]


# -- search ---------------------------------------------------------------------------------


async def test_search_prefix_semantics(make_memory):
    store = await new_store(make_memory)
    await store.put(("test", "foo"), "key1", {"data": "value1", "n": 1})
    await store.put(("test", "bar"), "key2", {"data": "value2", "n": 2})
    await store.put(("test", "foo", "deep"), "key3", {"data": "value3", "n": 3})
    await store.put(("test", "foobar"), "key4", {"data": "value4", "n": 4})
    # Another tenant, another clock: each tenant's is strictly increasing, and
    # may run a few milliseconds ahead of the server's after a burst of writes.
    await asyncio.sleep(0.02)
    await store.put(("other",), "key5", {"data": "value5", "n": 5})

    async def keys(prefix: tuple[str, ...], **options: Any) -> list[str]:
        return [i.key for i in await store.search(prefix, **options)]

    assert await keys(("test", "foo")) == ["key3", "key1"]  # not ("test", "foobar")
    assert await keys(("test",)) == ["key4", "key3", "key2", "key1"]
    assert await keys(("test", "foo", "deep")) == ["key3"]
    assert await keys(("test", "foo", "deep", "more")) == []
    assert await keys(("test", "f")) == []
    assert await keys(("nope",)) == []
    assert await keys(()) == ["key5", "key4", "key3", "key2", "key1"]
    assert await keys(("test",), filter={"data": "value2"}) == ["key2"]
    assert await keys(("test",), filter={"n": {"$gte": 2}}, limit=2) == ["key4", "key3"]
    assert await keys(("test",), filter={"n": {"$gte": 2}}, limit=2, offset=2) == ["key2"]
    assert await keys((), limit=2, offset=1) == ["key4", "key3"]


async def test_search_items_carry_their_namespace(make_memory):
    store = await new_store(make_memory)
    await store.put(("test", "foo", "deep"), "key", {"text": "hello"})
    [found] = await store.search(("test",), query="hello")
    assert (found.namespace, found.key, found.value, found.version) == (
        ("test", "foo", "deep"),
        "key",
        {"text": "hello"},
        1,
    )
    assert found.score is not None and found.score > 0


async def test_search_pagination_is_stable(make_memory):
    store = await new_store(make_memory)
    for i in range(25):
        await store.put(("p", "n"), f"k{i:02d}", {"text": "word " * (i + 1)})
    for query in (None, "word"):
        pages = [
            [i.key for i in await store.search(("p",), query=query, limit=10, offset=offset)]
            for offset in (0, 10, 20)
        ]
        every = [i.key for i in await store.search(("p",), query=query, limit=100)]
        assert [k for page in pages for k in page] == every
        assert len(every) == 25 and len(set(every)) == 25


async def test_non_ascii(make_memory):
    store = await new_store(make_memory)
    ns = ("用户", "ñamespace", "émoji 🚀")
    await store.put(ns, "clé", {"texte": "Café au lait à Zürich", "名前": "東京"})
    got = await store.get(ns, "clé")
    assert got is not None and got.value == {"texte": "Café au lait à Zürich", "名前": "東京"}
    assert [i.key for i in await store.search(("用户",), query="zürich")] == ["clé"]
    assert [i.key for i in await store.search(("用户",), query="東京")] == ["clé"]
    assert [i.key for i in await store.search(("用户",), filter={"名前": "東京"})] == ["clé"]
    assert await store.list_namespaces(prefix=("用户",)) == [ns]
    assert await store.list_namespaces(suffix=("émoji 🚀",)) == [ns]


# -- hostile labels --------------------------------------------------------------------------


def test_hostile_namespaces_never_collide():
    namespaces = [("t", label) for label in HOSTILE] + [
        ("t", "a", "b"),
        ("t", "a"),
        ("t", "ab"),
        ("t", "a#b", "c"),
        ("t", "a", "#b"),
        ("t/a",),
        ("t", "%2F"),
    ]
    refs = {store_namespace_ref(ns) for ns in namespaces}
    assert len(refs) == len(namespaces)
    items = {store_ref(ns, key) for ns in namespaces for key in ["k", "#k", "k/", "/", "a#b"]}
    assert len(items) == len(namespaces) * 5
    # No ref is a label-wise prefix of another that is not its namespace prefix.
    for ns in namespaces:
        for other in namespaces:
            starts = store_namespace_ref(other).startswith(store_namespace_ref(ns))
            assert starts == (other[: len(ns)] == ns)


async def test_hostile_labels_round_trip(make_memory):
    store = await new_store(make_memory)
    for i, label in enumerate(HOSTILE):
        await store.put(("t", label), label, {"i": i, "label": label})
        await store.put((label, "n"), "k", {"i": i})
    for i, label in enumerate(HOSTILE):
        got = await store.get(("t", label), label)
        assert got is not None and got.value == {"i": i, "label": label}
        assert [x.value["i"] for x in await store.search(("t", label))] == [i]
        assert [x.value["i"] for x in await store.search((label,))] == [i]
    # "*" is a label like any other in search; a wildcard only in list_namespaces.
    assert await store.search(("t", "*"), filter={"i": 0}) == []
    listed = await store.list_namespaces(prefix=("t",))
    assert listed == sorted(("t", label) for label in HOSTILE)
    assert len(await store.list_namespaces(suffix=("n",))) == len(HOSTILE)


async def test_a_hostile_tenant_reaches_no_other_tenant(make_memory, raw):
    mem = await make_memory()
    store = LongTermStore(mem)
    for tenant in ["alice", "*", "a*", "{alice}", "alice}:x"]:
        await store.put((tenant, "n"), "k", {"text": f"tenant {tenant}"})
    assert await store.purge(("*",)) == 1
    assert await mem.clear_user("a*") > 0
    assert await store.purge(("{alice}",)) == 1
    left = sorted(ns[0] for ns in await store.list_namespaces())
    assert left == ["alice", "alice}:x"]
    assert await scan(raw, mem.layout.user_pattern("*")) == []
    assert await scan(raw, mem.layout.user_pattern("a*")) == []
    assert await scan(raw, mem.layout.user_pattern("alice")) != []


# -- purge and clear_user: no key left -----------------------------------------------------------


async def fill(store: LongTermStore, tenant: str) -> None:
    await store.put((tenant, "a"), "k1", {"text": "hello world"}, source={"s": 1})
    await store.put((tenant, "a"), "k1", {"text": "hello again world"}, source={"s": 2})
    await store.put((tenant, "a", "deep"), "k2", {"text": "deep thoughts"}, ttl=60)
    await store.put((tenant, "b"), "k3", {"text": "bee"})
    await store.delete((tenant, "b"), "k3")  # only history left
    await store.put((tenant,), "k4", {"text": "top level"}, index=False)


async def test_purge_of_a_tenant_leaves_no_key(make_memory, raw):
    mem = await make_memory()
    store = LongTermStore(mem)
    await fill(store, "alice")
    await fill(store, "bob")
    assert await store.purge(("alice",)) == 4
    assert await scan(raw, mem.layout.user_pattern("alice")) == []
    assert await store.history(("alice", "b"), "k3") == []
    assert await store.search(("alice",)) == []
    assert {ns[0] for ns in await store.list_namespaces()} == {"bob"}
    assert len(await store.search(("bob",))) == 3
    assert await store.purge(("alice",)) == 0


async def test_purge_of_a_namespace_prefix(make_memory, raw):
    mem = await make_memory()
    store = LongTermStore(mem)
    await fill(store, "alice")
    await store.put(("alice", "ab"), "k", {"text": "hello neighbour"})
    assert await store.purge(("alice", "a")) == 2
    assert await store.get(("alice", "a"), "k1") is None
    assert await store.history(("alice", "a"), "k1") == []
    assert await store.get(("alice", "ab"), "k") is not None
    assert {i.key for i in await store.search(("alice",), query="hello")} == {"k"}
    assert await store.list_namespaces() == [("alice",), ("alice", "ab")]
    keys = [k.decode() for k in await scan(raw, mem.layout.user_pattern("alice"))]
    assert not [k for k in keys if "alice/a/" in k]
    assert await store.purge(("alice",)) == 3
    assert await scan(raw, mem.layout.user_pattern("alice")) == []


async def test_purge_in_many_batches(make_memory, raw):
    mem = await make_memory()
    store = LongTermStore(mem)
    await asyncio.gather(*(store.put(("t", "n"), f"k{i}", {"text": f"w{i}"}) for i in range(450)))
    assert await store.purge(("t",)) == 450
    assert await scan(raw, mem.layout.user_pattern("t")) == []


async def test_clear_user_leaves_no_store_key(make_memory, raw):
    mem = await make_memory()
    store = LongTermStore(mem)
    await fill(store, "alice")
    await fill(store, "bob")
    await mem.clear_user("alice")
    assert await scan(raw, mem.layout.user_pattern("alice")) == []
    assert await store.list_namespaces(prefix=("alice",)) == []
    assert len(await store.search(())) == 3
    await mem.clear_all()
    assert await scan(raw, mem.layout.namespace_pattern()) == []
