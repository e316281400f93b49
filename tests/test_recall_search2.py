"""Recall search on index format 2 (``recall_search.lua``'s ``search2``): exact.

The index is written by ``postings.build`` (the reference writer) and loaded
into the test's backend, so these tests do not depend on the commit path;
the search must equal ``ranking.rank`` over the quantized postings with no
per-term cap, under the same filters, on real Redis and the embedded backend.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgpack
import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redismem import Memory
from redismem.core.keys import (
    RecallKeys,
    agent_filter_suffix,
    session_filter_suffix,
    tag_filter_suffix,
)
from redismem.recall import index, postings, ranking
from redismem.recall.terms import terms

PROPERTY = settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: Index terms (each its own ``terms``) and speaker names.
WORDS = ["river", "stone", "cloud", "music", "garden", "window", "travel", "bob", "smith"]
NAMES = ["", "bob", "bob smith", "window"]
SESSIONS = ["s1", "s2", "s 3", "s4"]
AGENTS = [None, "a", "b/x"]
TAGS: list[dict[str, str]] = [{}, {"k": "v"}, {"k": "w"}, {"k": "v", "z": "1"}]
NOW = int(time.time() * 1000)
PAST = NOW - 3_600_000
FUTURE = NOW + 3_600_000 * 24 * 365


@dataclass(frozen=True)
class Corpus:
    docs: list[postings.Doc]
    cleared: list[str]


def _record(role: int, name: str, session_id: str, docid: int, agent: Any, tags: Any) -> bytes:
    names = " ".join(sorted(set(terms(name)))) if name else ""
    # seq = docid: the hit says which doc it is.
    payload = msgpack.packb([1, session_id, docid, agent, tags, b""], use_bin_type=True)
    return f"{role}|{names}|".encode() + payload


@st.composite
def corpora(draw: st.DrawFn, max_docs: int = 160) -> Corpus:
    n = draw(st.integers(min_value=1, max_value=max_docs))
    docs = []
    created = 1_700_000_000_000
    for docid in range(1, n + 1):
        created += draw(st.integers(min_value=-5_000, max_value=60_000))
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True))
        weights = {w: draw(st.floats(min_value=0.01, max_value=2.2)) for w in words}
        sid = draw(st.sampled_from(SESSIONS))
        agent = draw(st.sampled_from(AGENTS))
        tags = draw(st.sampled_from(TAGS))
        role = draw(st.integers(min_value=0, max_value=3))
        name = draw(st.sampled_from(NAMES))
        deadline = draw(st.sampled_from([None, None, FUTURE, PAST]))
        record = _record(role, name, sid, docid, agent, tags)
        docs.append(postings.Doc(sid, created, record, weights, agent, tags, deadline))
    cleared = draw(st.lists(st.sampled_from(SESSIONS), max_size=1))
    return Corpus(docs, cleared)


@dataclass(frozen=True)
class Query:
    words: list[str]
    limit: int
    session: str | None = None
    agent: str | None = None
    tags: Mapping[str, str] | None = None
    roles: str = ""
    since: int | None = None
    until: int | None = None
    min_score: float | None = None


queries = st.builds(
    Query,
    words=st.lists(st.sampled_from(WORDS), max_size=3, unique=True),
    limit=st.sampled_from([1, 3, 10, 1000]),
    session=st.one_of(st.none(), st.sampled_from([*SESSIONS, "nope"])),
    agent=st.one_of(st.none(), st.sampled_from(["a", "b/x"])),
    tags=st.one_of(st.none(), st.sampled_from([{"k": "v"}, {"z": "1"}])),
    roles=st.sampled_from(["", "0", "13"]),
    since=st.one_of(st.none(), st.just(1_700_000_300_000)),
    until=st.one_of(st.none(), st.just(1_700_003_000_000)),
    min_score=st.one_of(st.none(), st.just(1.0)),
)


async def load(memory: Memory, user_id: str, built: Mapping[str, Any]) -> RecallKeys:
    """Write a built index under the user's epoch-0 prefix."""
    recall = memory.layout.recall(user_id)
    prefix = memory.layout.user_prefix(user_id)
    redis = memory.redis
    for suffix, value in built.items():
        if isinstance(value, dict):
            await redis.hset(prefix + suffix, mapping=value)
        else:
            await redis.set(prefix + suffix, value)
    return recall


async def unload(memory: Memory, user_id: str, built: Mapping[str, Any]) -> None:
    prefix = memory.layout.user_prefix(user_id)
    await memory.redis.delete(*[prefix + suffix for suffix in built])


def reference(corpus: Corpus, built: Mapping[str, Any], q: Query) -> list[tuple[int, float]]:
    """``ranking.rank`` over what ``built`` holds, decoded, no cap."""
    lists: dict[str, list[tuple[int, float]]] = {}
    for suffix, value in built.items():
        if suffix.startswith("i:t:"):
            lists[suffix[4:]] = [
                (d, ranking.dequantize_weight(level))
                for d, level in postings.decode_postings(value)
            ]
    slots: dict[int, postings.Slot] = {}
    for suffix, value in built.items():
        if suffix.startswith("i:dt:"):
            slots.update(postings.decode_slots(int(suffix[5:]), value))
    speakers = {int(f[1:]): v.decode() for f, v in built.get("i:spk", {}).items() if f[0] == "#"}
    links = {d: ranking.DocLinks(s.prev, s.next, speakers.get(s.speaker)) for d, s in slots.items()}
    sess = built.get("i:sess", {})

    def members(suffix: str) -> set[int] | None:
        if suffix.startswith("f:s:"):
            ordinal = sess.get(suffix[4:])
            if ordinal is None:
                return set()
            suffix = f"f:s:{int(ordinal)}"
        value = built.get("i:" + suffix)
        return {d for d, _ in postings.decode_postings(value)} if value else set()

    allowed: set[int] | None = None
    for suffix in _suffixes(q):
        found = members(suffix)
        allowed = found if allowed is None else allowed & found
    dead = built.get("i:dead", b"")

    def accept(d: int) -> bool:
        s = slots.get(d)
        if s is None or (allowed is not None and d not in allowed):
            return False
        if postings.is_expired(s.deadline, NOW) or (q.roles and str(s.role) not in q.roles):
            return False
        if q.since is not None and s.created_ms < q.since:
            return False
        if q.until is not None and s.created_ms > q.until:
            return False
        byte = s.session // 8
        return not (byte < len(dead) and dead[byte] & (0x80 >> (s.session % 8)))

    n_docs = int(built["i:meta"]["n"])
    if not q.words:
        # newest by write time (the corpora are far smaller than the walk's window)
        newest = sorted(
            (d for d in slots if accept(d)), key=lambda d: (slots[d].created_ms, d), reverse=True
        )
        return [(d, math.nan) for d in newest[: q.limit]]
    params = replace(ranking.DEFAULT, max_postings=None)
    ranked = ranking.rank(
        " ".join(q.words), lists, n_docs, links, len(slots) + 1, accept=accept, params=params
    )
    if q.min_score is not None:
        ranked = [(d, s) for d, s in ranked if s >= q.min_score]
    return ranked[: q.limit]


def _suffixes(q: Query) -> list[str]:
    out = []
    if q.session is not None:
        out.append(session_filter_suffix(q.session))
    if q.agent is not None:
        out.append(agent_filter_suffix(q.agent))
    out += [tag_filter_suffix(k, v) for k, v in (q.tags or {}).items()]
    return out


async def run(memory: Memory, recall: RecallKeys, q: Query) -> list[tuple[int, float]]:
    filters = index._Filters(recall.prefix, q.since, q.until, q.roles, _suffixes(q))
    qterms = ranking.query_terms(" ".join(q.words)) if q.words else {}
    found = await index._run_search(memory.backend, recall, filters, qterms, q.limit, q.min_score)
    return [(f.seq, math.nan if f.score is None else f.score) for f in found]


def same(got: Sequence[tuple[int, float]], want: Sequence[tuple[int, float]]) -> None:
    assert [d for d, _ in got] == [d for d, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12)


@PROPERTY
@given(corpus=corpora(), qs=st.lists(queries, min_size=1, max_size=6))
async def test_search_equals_rank_without_cap(make_memory, corpus, qs):
    """Random corpora, random queries and filters: format 2's hits and scores
    are ``ranking.rank``'s over the quantized postings, every posting read."""
    memory = await make_memory()
    user = "u" + format(random.getrandbits(48), "x")
    built = postings.build(corpus.docs, cleared=corpus.cleared, seal=True)
    recall = await load(memory, user, built)
    try:
        for q in qs:
            same(await run(memory, recall, q), reference(corpus, built, q))
    finally:
        await unload(memory, user, built)


def _doc(sid: str, created: int, weights: dict[str, float], name: str = "") -> postings.Doc:
    return postings.Doc(sid, created, _record(1, name, sid, 0, None, {}), weights)


def _numbered(docs: list[postings.Doc]) -> list[postings.Doc]:
    """The docs with their record's seq = their docid."""
    return [
        replace(d, record=_record(1, "", d.session_id, i, None, {}))
        for i, d in enumerate(docs, start=1)
    ]


async def test_no_cap_and_limit_1000(make_memory):
    """2,500 docs hold the term: a search reads every posting (format 1 read
    the 300 heaviest) and returns up to 1,000 hits, in rank's order."""
    memory = await make_memory()
    user = "u" + format(random.getrandbits(48), "x")
    rng = random.Random(7)
    docs = _numbered(
        [
            _doc(f"s{i % 50}", 1_700_000_000_000 + i, {"river": rng.uniform(0.05, 2.2)})
            for i in range(2500)
        ]
    )
    # The best doc's weight is the lowest level, but its reply (next doc of
    # its session) pushes it up: only reading the whole list finds it.
    built = postings.build(docs)
    recall = await load(memory, user, built)
    try:
        q = Query(["river"], 1000)
        got = await run(memory, recall, q)
        assert len(got) == 1000
        same(got, reference(Corpus(docs, []), built, q))
        cap = replace(ranking.DEFAULT, max_postings=ranking.MAX_POSTINGS)
        lists = {
            "river": [
                (d, ranking.dequantize_weight(w))
                for d, w in postings.decode_postings(built["i:t:river"])
            ]
        }
        capped = ranking.rank("river", lists, 2500, {}, 1000, params=cap)
        assert len(capped) == ranking.MAX_POSTINGS < len(got)
        newest = await run(memory, recall, Query([], 1000))
        assert [d for d, _ in newest] == list(range(2500, 1500, -1))
    finally:
        await unload(memory, user, built)


async def test_hits_decode_records_from_blocks_and_open_records(make_memory):
    """Hits come back with their created time and message, whether their
    record sits in a sealed block (inflated in Python) or in i:rec."""
    memory = await make_memory()
    user = "u" + format(random.getrandbits(48), "x")
    docs = _numbered([_doc("s", 1_700_000_000_000 + i, {"stone": 1.0}) for i in range(100)])
    built = postings.build(docs)
    assert list(built["i:docs"]) == ["0"] and len(built["i:rec"]) == 37
    recall = await load(memory, user, built)
    try:
        filters = index._Filters(recall.prefix, None, None, "", [])
        found = await index._run_search(memory.backend, recall, filters, {"stone": 1.0}, 100, None)
        assert sorted(f.seq for f in found) == list(range(1, 101))
        assert {f.created_ms - f.seq for f in found} == {1_700_000_000_000 - 1}
        assert all(f.session_id == "s" for f in found)
    finally:
        await unload(memory, user, built)


async def read_index(memory: Memory, user_id: str) -> dict[str, Any]:
    """Every format-2 key of the user, as ``postings.build`` returns them."""
    prefix = memory.layout.user_prefix(user_id)
    redis = memory.redis
    out: dict[str, Any] = {}
    async for key in redis.scan_iter(match=prefix + "i:*", count=1000):
        suffix = key.decode()[len(prefix) :]
        if (await redis.type(key)) == b"hash":
            out[suffix] = {f.decode(): v for f, v in (await redis.hgetall(key)).items()}
        else:
            out[suffix] = await redis.get(key)
    return out


async def test_committed_index_searches_as_rank(make_memory):
    """End to end on the workers' write path (index_pass, format 2 for a new
    user): the search equals ``ranking.rank`` over what the commit stored,
    with speakers, agents, tags, a cleared session and sealed blocks."""
    memory = await make_memory(index=True)
    user = "u" + format(random.getrandbits(48), "x")
    rng = random.Random(3)
    sessions = ["s1", "s2", "s 3"]
    for _ in range(6):
        for sid in sessions:
            batch = [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": " ".join(rng.sample(WORDS, rng.randint(2, 5))),
                    "name": rng.choice(["bob", "smith", None]),
                }
                for i in range(rng.randint(5, 15))
            ]
            await memory.write(
                batch,
                session_id=sid,
                user_id=user,
                agent_name=rng.choice(["a", "b/x"]),
                tags={"k": rng.choice(["v", "w"])},
            )
    for sid in sessions:
        await index.catch_up(memory.backend, user_id=user, session_id=sid)
    await memory.clear(session_id="s2", user_id=user)
    try:
        built = await read_index(memory, user)
        assert built["i:meta"]["v"] == b"2" and "i:docs" in built
        records = {int(d): r for d, r in built.get("i:rec", {}).items()}
        for b, block in built["i:docs"].items():
            for i, r in enumerate(postings.decode_block(block)):
                if r is not None:
                    records[int(b) * postings.BLOCK + i] = r
        ident = {}
        for d, r in records.items():
            fields = msgpack.unpackb(r.split(b"|", 2)[2], raw=False)
            ident[d] = (fields[1], fields[2])
        recall = memory.layout.recall(user)
        for q in [
            Query(["river"], 10),
            Query(["bob", "stone"], 1000),
            Query(["music", "garden", "window"], 5, agent="a"),
            Query(["cloud"], 20, session="s1", roles="0"),
            Query(["travel", "smith"], 50, tags={"k": "v"}),
            Query([], 30, session="s 3"),
            Query([], 1000),
        ]:
            want = [(ident[d], score) for d, score in reference(Corpus([], []), built, q)]
            filters = index._Filters(recall.prefix, q.since, q.until, q.roles, _suffixes(q))
            qterms = ranking.query_terms(" ".join(q.words)) if q.words else {}
            found = await index._run_search(
                memory.backend, recall, filters, qterms, q.limit, q.min_score
            )
            got = [((f.session_id, f.seq), math.nan if f.score is None else f.score) for f in found]
            same(got, want)  # type: ignore[arg-type]
        hits = await memory.search("river stone", user_id=user, limit=1000)
        assert hits and all(h.session_id != "s2" for h in hits)
    finally:
        await memory.clear_user(user)
