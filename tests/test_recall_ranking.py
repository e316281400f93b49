"""The search script ranks as ``ranking.rank``, its Python reference, does.

Messages are indexed in this process (``recall.catch_up``, what a worker's
job runs), then every query's hits from ``Memory.search`` are compared with
``ranking.rank`` over the postings, doc count and links read back from Redis.
The corpus is small enough that the script's speaker boost, which re-scores
the head of the ranking only, sees every candidate: the two must agree
exactly, order and scores.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from redismem.core import codec
from redismem.recall import index as recall
from redismem.recall import ranking

SESSIONS = {
    "trip": [
        ("user", "Ann", "I want to fly to Oslo in May, the cheapest flight please"),
        ("assistant", "Bot", "There is a direct flight on May 3 at 07:10"),
        ("user", "Ann", "Book it, and a hotel near the harbour"),
        ("assistant", "Bot", "Booked the flight and the Harbour Hotel"),
    ],
    "pets": [
        ("user", "Ann", "My cat Tom hates flying"),
        ("assistant", "Bot", "Cats travel best in a soft carrier"),
        ("user", "Ann", "Tom also hates the vet"),
        ("assistant", "Bot", "Try treats before the vet visit"),
    ],
    "work": [
        ("user", "Ben", "The quarterly report is due in May"),
        ("assistant", "Bot", "I drafted the report outline"),
        ("user", "Ben", "Add the flights budget to the report"),
        ("assistant", "Bot", "Added travel and flight costs"),
    ],
}
QUERIES = [
    "flight to Oslo",
    "what did Ann say about her cat",
    "report due in May",
    "Ben flights budget",
    "hotel harbour",
    "vet",
    "May",
]


async def _reference(raw: Any, mem: Any) -> tuple[dict[str, Any], int, dict[int, Any], dict]:
    keys = mem.layout.recall("default")
    postings: dict[str, list[tuple[int, float]]] = {}
    async for key in raw.scan_iter(match=keys.prefix + "t:*"):
        term = key.decode()[len(keys.prefix) + 2 :]
        members = await raw.zrange(key, 0, -1, withscores=True)
        postings[term] = [(int(member), weight) for member, weight in members]
    n_docs = int(await raw.hget(keys.stats, "n"))
    docs = {int(doc): record for doc, record in (await raw.hgetall(keys.docs)).items()}
    prev = {
        int(doc): (int(link.split(b"|")[0]) if link.split(b"|")[0] else None)
        for doc, link in (await raw.hgetall(keys.links)).items()
    }
    following = {p: doc for doc, p in prev.items() if p is not None}
    where: dict[int, tuple[str, str]] = {}
    links: dict[int, ranking.DocLinks] = {}
    for doc, record in docs.items():
        payload = record.split(b"|", 2)[2]
        _version, sid, seq, _agent, _tags, element = msgpack.unpackb(payload, raw=False)
        created = int(record.split(b",", 1)[0])
        [message] = codec.decode_messages([element], seq, [(seq, created)], "k")
        where[doc] = (sid, message.id)
        links[doc] = ranking.DocLinks(
            prev=prev.get(doc), next=following.get(doc), name=message.name
        )
    return postings, n_docs, links, where


@pytest.mark.parametrize("query", QUERIES)
async def test_search_ranks_as_the_python_reference(make_memory, raw, query, monkeypatch):
    # The reference reads format 1's keys (r:*), which users indexed before
    # format 2 keep until migrated; format 2's counterpart is
    # tests/test_recall_search2.py.
    monkeypatch.setattr(recall, "NEW_INDEX_FORMAT", 1)
    mem = await make_memory(summarize_delay=3600)
    for sid, turns in SESSIONS.items():
        for role, name, text in turns:
            await mem.write([{"role": role, "name": name, "content": text}], session_id=sid)
        await recall.catch_up(mem.backend, user_id="default", session_id=sid)

    postings, n_docs, links, where = await _reference(raw, mem)
    expected = ranking.rank(query, postings, n_docs, links, 10)
    hits = await mem.search(query, limit=10)
    assert expected, query
    assert [(h.session_id, h.message.id) for h in hits] == [where[doc] for doc, _ in expected]
    assert [h.score for h in hits] == pytest.approx([score for _, score in expected], rel=1e-6)
