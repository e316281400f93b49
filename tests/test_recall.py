"""Recall: ``Memory.search`` over the messages the workers index, on both backends.

Every write with ``index=True`` marks its session due; the workers' coalesced
job indexes the new messages off the write path, and ``flush()`` waits for
that. On the real Redis the jobs run in real worker processes
(``arq workers.WorkerSettings``); on the embedded backend in an
``InProcessWorker`` in this process. Both are started by the ``background``
fixture below, on the test's own namespace and queue.

The ranking indexes a message with a share of the words of the message before
it in its session, so a query may also find that neighbour, further down.
Tests that need "finds this and nothing else" therefore put each message in
its own session, or use a word that every message of the corpus holds itself.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from helpers import assistant, key_values, keys_matching, snapshot, tool_result, user
from worker_support import WorkerPool, wait_ready, worker_env

import redismem
from redismem import InvalidInput, Memory, Message
from redismem.recall import postings
from redismem.recall.terms import terms
from redismem.summarization.summarizers import TruncationSummarizer
from redismem.workers.inprocess import InProcessWorker

pytestmark = pytest.mark.every_server

#: Quiet period of the jobs: short, so tests do not wait for the default 1 s.
DELAY = 0.05
#: What ``flush`` may take in a test (workers start, jobs run).
FLUSH_TIMEOUT = 30.0

# ---------------------------------------------------------------------------
# a running worker for the test's backend
# ---------------------------------------------------------------------------


@dataclass
class Background:
    """Starts the background work (worker processes on a real Redis, an
    ``InProcessWorker`` on the embedded backend) for the test's namespace(s)."""

    url: str
    namespace: str
    queue_name: str
    workers: WorkerPool
    raw: Any
    in_process: list[InProcessWorker] = field(default_factory=list)

    @property
    def embedded(self) -> bool:
        return self.url.startswith("memory://")

    async def start(self, *extra_namespaces: str) -> None:
        namespaces = [self.namespace, *extra_namespaces]
        if self.embedded:
            worker = InProcessWorker(
                self.url,
                summarizer=TruncationSummarizer(),
                namespaces=namespaces,
                queue_name=self.queue_name,
            )
            await worker.start()
            self.in_process.append(worker)
            return
        env = worker_env(self.url, ",".join(namespaces), self.queue_name, SUMMARIZER="truncate")
        process = self.workers.start(env)
        if env.get("REDISMEM_QUEUE_URL", self.url) == self.url:
            await wait_ready(self.raw, process)
            return
        queue = aioredis.Redis.from_url(env["REDISMEM_QUEUE_URL"])  # memory on a cluster
        try:
            await wait_ready(queue, process)
        finally:
            await queue.aclose()

    def logs(self) -> str:
        if self.embedded:
            return "; ".join(f"in-process worker error: {w.error!r}" for w in self.in_process)
        return self.workers.logs()

    async def aclose(self) -> None:
        for worker in self.in_process:
            await worker.aclose()
        self.in_process.clear()


@pytest_asyncio.fixture(loop_scope="function")
async def background(
    backend_url: str, namespace: str, queue_name: str, workers: WorkerPool, raw: Any
) -> AsyncIterator[Background]:
    """``await background.start()``: a worker for this test's memories."""
    bg = Background(backend_url, namespace, queue_name, workers, raw)
    try:
        yield bg
    finally:
        await bg.aclose()


@pytest_asyncio.fixture(loop_scope="function")
async def recall(
    make_memory: Callable[..., Awaitable[Memory]], queue_name: str
) -> Callable[..., Awaitable[Memory]]:
    """``await recall(**options)``: a ``Memory`` on the test's backend, namespace
    and queue, with a short quiet period before its jobs."""

    async def make(**options: Any) -> Memory:
        options.setdefault("queue_name", queue_name)
        options.setdefault("summarize_delay", DELAY)
        return await make_memory(**options)

    return make


@pytest_asyncio.fixture(loop_scope="function")
async def mem(recall: Callable[..., Awaitable[Memory]], background: Background) -> Memory:
    """An indexing ``Memory`` with a worker running for it."""
    memory = await recall()
    await background.start()
    return memory


async def settle(memory: Memory, background: Background | None = None, **kwargs: Any) -> None:
    """``flush()`` must report the background work done."""
    done = await memory.flush(timeout=FLUSH_TIMEOUT, **kwargs)
    extra = f"\n{background.logs()}" if background is not None else ""
    assert done is True, f"flush() did not finish within {FLUSH_TIMEOUT} s{extra}"


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------


def key_of(hit: Any) -> tuple[str, str | None]:
    return (hit.session_id, hit.message.id)


def contents(hits: Iterable[Any]) -> list[str]:
    return [h.message.content for h in hits]


async def recall_keys(raw: Any, pattern: str) -> list[bytes]:
    """The recall index keys (``:r:``, format 2 ``:i:``) among the keys
    matching ``pattern``."""
    return [k for k in await keys_matching(raw, pattern) if b":r:" in k or b":i:" in k]


async def element_count(raw: Any, keys: Iterable[bytes]) -> int:
    """Elements held by ``keys`` (fields, members, items; 1 per string)."""
    total = 0
    for key in keys:
        kind = (await raw.type(key)).decode()
        if kind == "hash":
            total += await raw.hlen(key)
        elif kind == "zset":
            total += await raw.zcard(key)
        elif kind == "set":
            total += await raw.scard(key)
        elif kind == "list":
            total += await raw.llen(key)
        elif kind != "none":
            total += 1
    return total


def own_hits(hits: Iterable[Any], token: str) -> list[Any]:
    """The hits whose message itself holds ``token`` (not a neighbour that
    mentions it through the context weighting)."""
    return [h for h in hits if token in h.message.content.split()]


def assert_ranked(hits: list[Any]) -> None:
    """Scored hits, best first, no message twice."""
    scores = [h.score for h in hits]
    assert all(isinstance(s, float) and math.isfinite(s) and s > 0 for s in scores), scores
    assert scores == sorted(scores, reverse=True), scores
    assert len({key_of(h) for h in hits}) == len(hits), [key_of(h) for h in hits]


def assert_newest_first(hits: list[Any]) -> None:
    """Query-less hits: no score, newest first, no message twice."""
    assert all(h.score is None for h in hits), [h.score for h in hits]
    times = [h.created_at for h in hits]
    assert times == sorted(times, reverse=True), times
    assert len({key_of(h) for h in hits}) == len(hits), [key_of(h) for h in hits]


async def one_per_session(memory: Memory, texts: Mapping[str, str], **kwargs: Any) -> None:
    """Write each text as the only message of its own session (no context)."""
    for sid, text in texts.items():
        await memory.write([user(text)], session_id=sid, **kwargs)


# ---------------------------------------------------------------------------
# finding
# ---------------------------------------------------------------------------


def test_hit_is_exported() -> None:
    assert "Hit" in redismem.__all__
    assert set(redismem.Hit.model_fields) >= {
        "message",
        "session_id",
        "tags",
        "agent_name",
        "created_at",
        "score",
    }


async def test_search_finds_messages_by_stemmed_words(mem, background):
    await one_per_session(
        mem,
        {
            "trip": "I booked two flights to Lisbon",
            "weather": "The weather in Porto is sunny",
            "late": "Running late for the standup",
            "pets": "the dog chased a ball",
            "cats": "the cat sat on a mat",
        },
    )
    await settle(mem, background)

    for query in ("flight", "flights", "FLIGHTS", "booking", "Lisbon's", "book flight"):
        hits = await mem.search(query)
        assert contents(hits) == ["I booked two flights to Lisbon"], query
        assert hits[0].session_id == "trip"
        assert_ranked(hits)
    assert contents(await mem.search("runs")) == ["Running late for the standup"]
    # "the" is a stop word: it matches nothing, the other word decides.
    assert contents(await mem.search("the dog")) == ["the dog chased a ball"]
    assert contents(await mem.search("cats")) == ["the cat sat on a mat"]
    assert await mem.search("zebra") == []
    assert await mem.search("flight", user_id="someone-else") == []


async def test_a_query_of_stop_words_only_finds_nothing(mem, background):
    await one_per_session(mem, {"a": "the plan is to do it", "b": "what is this about"})
    await settle(mem, background)
    assert await mem.search("the is to") == []
    assert await mem.search("what about this") == []


async def test_every_hit_field_round_trips(mem, background):
    tags = {"trip": "zeppelin-42", "team": "travel"}
    metadata = {
        "trace": {"ids": [1, 2, {"deep": [None, True, 2.5, "ü", -7]}]},
        "empty": {},
        "list": [],
        "text": 'quotes " and \\ and \n',
    }
    written = await mem.write(
        [
            user("Please rebook the zeppelin voyage", name="alice", metadata=metadata),
            assistant(
                "Checking the zeppelin timetable",
                name="planner_bot",
                tool_calls=[
                    {"id": "call_1", "name": "lookup", "arguments": {"q": "zeppelin", "n": [1, 2]}},
                    {"id": "call_2", "name": "price", "arguments": '{"raw": true}'},
                ],
            ),
            tool_result("call_1", "zeppelin departs at noon") | {"name": "lookup"},
        ],
        session_id="trip-9",
        user_id="traveller",
        tags=tags,
        agent_name="concierge",
    )
    plain = await mem.write(
        [user("a zeppelin without tags")], session_id="other", user_id="traveller"
    )
    await settle(mem, background)

    stored = {m.id: m for m in await mem.read(session_id="trip-9", user_id="traveller")}
    assert len(stored) == 3
    hits = await mem.search("zeppelin", user_id="traveller", limit=10)
    assert_ranked(hits)
    by_key = {key_of(h): h for h in hits}
    assert set(by_key) == {("trip-9", m.id) for m in written.messages} | {
        ("other", plain.messages[0].id)
    }
    for message in written.messages:
        hit = by_key["trip-9", message.id]
        assert isinstance(hit, redismem.Hit)
        assert isinstance(hit.message, Message)
        assert hit.message == stored[message.id]
        assert hit.message == message  # as the write returned it
        assert hit.session_id == "trip-9"
        assert hit.tags == tags
        assert hit.agent_name == "concierge"
        assert hit.created_at == stored[message.id].created_at == written.metadata.created_at
        assert hit.created_at.utcoffset() == timedelta(0)
        assert redismem.Hit.model_validate(hit.model_dump()) == hit
    first = by_key["trip-9", written.messages[0].id].message
    assert (first.name, first.metadata) == ("alice", metadata)
    second = by_key["trip-9", written.messages[1].id].message
    assert [(c.id, c.name, c.arguments) for c in second.tool_calls] == [
        ("call_1", "lookup", {"q": "zeppelin", "n": [1, 2]}),
        ("call_2", "price", '{"raw": true}'),
    ]
    third = by_key["trip-9", written.messages[2].id].message
    assert (third.role, third.tool_call_id, third.name) == ("tool", "call_1", "lookup")
    untagged = by_key["other", plain.messages[0].id]
    assert (untagged.tags, untagged.agent_name) == ({}, None)
    assert untagged.message == plain.messages[0]

    # The same hits without a query: no score, same fields.
    listed = await mem.search("", user_id="traveller", limit=10)
    assert_newest_first(listed)
    assert {key_of(h): h.model_copy(update={"score": None}) for h in hits} == {
        key_of(h): h for h in listed
    }
    assert [key_of(h) for h in await mem.search(None, user_id="traveller")] == [
        key_of(h) for h in listed
    ]


# ---------------------------------------------------------------------------
# filters
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """One written message of the filter corpus, with its entry's fields."""

    entry: str
    session_id: str
    id: str
    role: str
    tags: Mapping[str, str]
    agent_name: str | None
    created_at: datetime


#: (entry name, session, tags, agent, messages); every message holds "report".
CORPUS: list[tuple[str, str, dict[str, str], str | None, list[dict[str, Any]]]] = [
    (
        "E1",
        "s-a",
        {"team": "ops", "env": "prod"},
        "planner",
        [user("report one alpha"), assistant("report two beta")],
    ),
    (
        "E2",
        "s-a",
        {"team": "ops"},
        "coder",
        [
            user("report three"),
            {
                "role": "assistant",
                "content": "report four",
                "tool_calls": [{"id": "c2", "name": "grep", "arguments": {"q": "x"}}],
            },
            tool_result("c2", "report five"),
        ],
    ),
    (
        "E3",
        "s-b",
        {"team": "dev", "env": "prod"},
        "planner",
        [assistant("report six"), user("report seven")],
    ),
    ("E4", "s-b", {}, None, [user("report eight")]),
    (
        "E5",
        "s:c*",
        {"team": "ops", "env": "prod", "extra": "1"},
        "planner",
        [
            {
                "role": "assistant",
                "content": "report nine",
                "tool_calls": [{"id": "c5", "name": "grep", "arguments": "{}"}],
            },
            tool_result("c5", "report ten"),
        ],
    ),
]

# Filter cases: search kwargs; "E<n>" in since/until stands for that entry's time.
FILTER_CASES: list[dict[str, Any]] = [
    {},
    {"tags": {}},
    {"tags": {"team": "ops"}},
    {"tags": {"team": "ops", "env": "prod"}},
    {"tags": {"env": "prod", "team": "dev"}},
    {"tags": {"team": "nobody"}},
    {"tags": {"team": "ops", "missing": "x"}},
    {"tags": {"extra": "1"}},
    {"roles": ["user"]},
    {"roles": ("assistant", "tool")},
    {"roles": {"tool"}},
    {"roles": ["user", "assistant", "tool"]},
    {"agent_name": "planner"},
    {"agent_name": "coder"},
    {"agent_name": "nobody"},
    {"session_id": "s-b"},
    {"session_id": "s:c*"},
    {"session_id": "s-*"},
    {"since": "E3"},
    {"until": "E2"},
    {"since": "E2", "until": "E4"},
    {"since": "E3", "until": "E3"},
    {"since": "E3+1ms"},
    {"until": "E3-1ms"},
    {"since": "E3@+05:30"},
    {"tags": {"team": "ops"}, "roles": ["user", "assistant"], "agent_name": "planner"},
    {"tags": {"team": "ops"}, "session_id": "s-a", "roles": ["assistant"]},
    {"tags": {"env": "prod"}, "roles": ["assistant"], "since": "E3"},
    {"agent_name": "planner", "session_id": "s-b", "until": "E3"},
    {"tags": {"team": "ops"}, "since": "E2", "until": "E5", "roles": ["tool"]},
    {"tags": {"team": "ops"}, "agent_name": "coder", "since": "E3"},
]


def resolve(case: Mapping[str, Any], times: Mapping[str, datetime]) -> dict[str, Any]:
    """The case with entry names turned into aware datetimes."""
    out = dict(case)
    for name in ("since", "until"):
        value = case.get(name)
        if value is None:
            continue
        when = times[value[:2]]
        if value.endswith("+1ms"):
            when += timedelta(milliseconds=1)
        elif value.endswith("-1ms"):
            when -= timedelta(milliseconds=1)
        elif value.endswith("@+05:30"):
            when = when.astimezone(timezone(timedelta(hours=5, minutes=30)))
        out[name] = when
    return out


def accepts(rec: Rec, f: Mapping[str, Any]) -> bool:
    """The spec of the filters, in Python."""
    if any(rec.tags.get(k) != v for k, v in (f.get("tags") or {}).items()):
        return False
    if "roles" in f and rec.role not in set(f["roles"]):
        return False
    if "agent_name" in f and rec.agent_name != f["agent_name"]:
        return False
    if "session_id" in f and rec.session_id != f["session_id"]:
        return False
    if "since" in f and rec.created_at < f["since"]:
        return False
    return not ("until" in f and rec.created_at > f["until"])


async def write_corpus(memory: Memory) -> tuple[list[Rec], dict[str, datetime]]:
    recs: list[Rec] = []
    times: dict[str, datetime] = {}
    for name, sid, tags, agent, messages in CORPUS:
        entry = await memory.write(messages, session_id=sid, tags=tags, agent_name=agent)
        times[name] = entry.metadata.created_at
        for m in entry.messages:
            assert m.id is not None
            recs.append(Rec(name, sid, m.id, m.role, tags, agent, entry.metadata.created_at))
        await asyncio.sleep(0.02)  # distinct write times (ms resolution)
    ordered = [times[name] for name, *_ in CORPUS]
    assert ordered == sorted(set(ordered)), ordered
    return recs, times


async def test_filters_alone_and_combined_with_and_without_a_query(mem, background):
    recs, times = await write_corpus(mem)
    await settle(mem, background)
    assert len(recs) == 10

    for case in FILTER_CASES:
        f = resolve(case, times)
        expected = {(r.session_id, r.id) for r in recs if accepts(r, f)}
        for query in ("report", "reports", "Reporting", "", None):
            hits = await mem.search(query, limit=1000, **f)
            got = [key_of(h) for h in hits]
            assert set(got) == expected, f"case {case}, query {query!r}: {sorted(got)}"
            if query:
                assert_ranked(hits)
            else:
                assert_newest_first(hits)
            for h in hits:  # each hit carries its own entry's fields
                rec = next(r for r in recs if (r.session_id, r.id) == key_of(h))
                assert (h.tags, h.agent_name, h.created_at, h.message.role) == (
                    rec.tags,
                    rec.agent_name,
                    rec.created_at,
                    rec.role,
                ), case


async def test_filters_narrow_a_query_to_the_right_words(mem, background):
    recs, times = await write_corpus(mem)
    await settle(mem, background)
    alpha = [r for r in recs if r.entry == "E1" and r.role == "user"]
    assert [key_of(h) for h in await mem.search("alpha", tags={"env": "prod"})][:1] == [
        (alpha[0].session_id, alpha[0].id)
    ]
    assert own_hits(await mem.search("alpha", tags={"team": "dev"}), "alpha") == []
    assert own_hits(await mem.search("alpha", agent_name="coder"), "alpha") == []
    assert own_hits(await mem.search("alpha", since=times["E2"]), "alpha") == []
    assert own_hits(await mem.search("alpha", roles=["assistant"]), "alpha") == []
    assert own_hits(await mem.search("ten", session_id="s-a"), "ten") == []
    [ten] = own_hits(await mem.search("ten", session_id="s:c*"), "ten")
    assert ten.message.role == "tool"


async def test_limit_and_min_score(mem, background):
    # One session per message: scores differ by length and repetition only.
    texts = {f"s{i:02d}": "budget " * (1 + i % 4) + "filler words " * (i % 7) for i in range(30)}
    await one_per_session(mem, texts)
    await settle(mem, background)

    everything = await mem.search("budget", limit=1000)
    assert len(everything) == 30
    assert_ranked(everything)
    for limit in (1, 5, 29, 30):
        hits = await mem.search("budget", limit=limit)
        assert [key_of(h) for h in hits] == [key_of(h) for h in everything[:limit]], limit
    assert len(await mem.search("budget")) == 10  # the default limit

    listed = await mem.search("", limit=1000)
    assert len(listed) == 30
    assert_newest_first(listed)
    assert [key_of(h) for h in await mem.search("", limit=3)] == [key_of(h) for h in listed[:3]]

    # A threshold between two distinct scores (no float-rounding edge).
    scores = sorted({h.score for h in everything}, reverse=True)
    assert len(scores) >= 4, scores
    threshold = (scores[2] + scores[3]) / 2
    above = await mem.search("budget", limit=1000, min_score=threshold)
    assert [key_of(h) for h in above] == [
        key_of(h) for h in everything if h.score is not None and h.score >= threshold
    ]
    assert len(above) >= 3
    assert len(await mem.search("budget", limit=1000, min_score=0.0)) == 30
    assert await mem.search("budget", min_score=everything[0].score * 1.01) == []
    assert len(await mem.search("budget", limit=3, min_score=threshold)) == 3


async def test_a_rare_query_term_outranks_common_ones(mem, background):
    texts = {f"common{i}": f"weekly project status update meeting notes {i}" for i in range(12)}
    texts["rare"] = "project status: the quokka enclosure needs repairs"
    texts["both"] = "flight to lisbon tomorrow morning"
    texts["flight-only"] = "flight to porto tomorrow morning"
    texts["lisbon-only"] = "train to lisbon tomorrow morning"
    await one_per_session(mem, texts)
    await settle(mem, background)

    hits = await mem.search("quokka project status")
    assert hits[0].session_id == "rare"
    assert len(hits) == 10  # the 12 common ones match "project status" too
    assert_ranked(hits)
    hits = await mem.search("lisbon flight")
    assert [h.session_id for h in hits][:1] == ["both"]
    assert {h.session_id for h in hits} == {"both", "flight-only", "lisbon-only"}
    assert hits[0].score > hits[1].score


# ---------------------------------------------------------------------------
# isolation
# ---------------------------------------------------------------------------

HOSTILE_USERS = ["a:b", "a", "b", "{x}", "x", "*", "%41", "A", "ü", "u\u0308", "a b", "[x]", "s"]


async def test_hostile_user_ids_never_see_each_others_hits(mem, background, raw):
    for i, uid in enumerate(HOSTILE_USERS):
        await mem.write([user(f"shared secret marker{i}")], session_id="*", user_id=uid)
        await mem.write([user(f"shared secret extra{i}")], session_id="s:1", user_id=uid)
    await settle(mem, background)

    for i, uid in enumerate(HOSTILE_USERS):
        hits = await mem.search("secret", user_id=uid, limit=100)
        assert sorted(contents(hits)) == sorted(
            [f"shared secret marker{i}", f"shared secret extra{i}"]
        ), uid
        assert len(await mem.search("", user_id=uid, limit=100)) == 2
        only = await mem.search("secret", user_id=uid, session_id="*")
        assert contents(only) == [f"shared secret marker{i}"], uid
        for j in range(len(HOSTILE_USERS)):
            if j != i:
                assert await mem.search(f"marker{j}", user_id=uid) == [], (uid, j)

    # Every recall key lies under its user's prefix, and each user has some.
    layout = mem.layout
    found = await recall_keys(raw, layout.namespace_pattern())
    prefixes = {uid: layout.user_prefix(uid).encode() for uid in HOSTILE_USERS}
    for key in found:
        owners = [uid for uid, p in prefixes.items() if key.startswith(p)]
        assert len(owners) == 1, key
    for uid, prefix in prefixes.items():
        assert any(k.startswith(prefix) for k in found), uid

    # Clearing the glob-looking user touches nobody else.
    await mem.clear_user("*")
    assert await mem.search("secret", user_id="*") == []
    for uid in HOSTILE_USERS:
        if uid != "*":
            assert len(await mem.search("secret", user_id=uid, limit=100)) == 2, uid


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

BAD_SEARCHES: list[tuple[Any, dict[str, Any]]] = [
    (5, {}),
    (b"flight", {}),
    (["flight"], {}),
    ("flight", {"limit": 0}),
    ("flight", {"limit": -1}),
    ("flight", {"limit": 1001}),
    ("flight", {"limit": True}),
    ("flight", {"limit": 2.5}),
    ("flight", {"limit": "10"}),
    ("flight", {"since": datetime(2024, 1, 1)}),
    ("flight", {"until": datetime(2030, 1, 1)}),
    ("flight", {"since": "2024-01-01"}),
    ("flight", {"until": 1_700_000_000}),
    ("", {"since": datetime(2024, 1, 1)}),
    ("flight", {"roles": ["wizard"]}),
    ("flight", {"roles": ["user", "wizard"]}),
    ("flight", {"roles": [5]}),
    ("flight", {"tags": ["team"]}),
    ("flight", {"tags": "team=ops"}),
    ("flight", {"tags": {"team": 5}}),
    ("flight", {"min_score": "high"}),
    ("flight", {"user_id": ""}),
    ("flight", {"user_id": 5}),
    ("flight", {"session_id": ""}),
    ("flight", {"session_id": 5}),
    ("flight", {"agent_name": 5}),
]


@pytest.mark.parametrize(("query", "kwargs"), BAD_SEARCHES, ids=repr)
async def test_bad_search_input_is_rejected_and_writes_nothing(recall, raw, query, kwargs):
    memory = await recall()
    await memory.write([user("one flight")], session_id="s")
    before = await snapshot(raw, memory.layout.namespace_pattern())
    with pytest.raises(InvalidInput):
        await memory.search(query, **kwargs)
    assert await snapshot(raw, memory.layout.namespace_pattern()) == before


@pytest.mark.parametrize(
    "options",
    [
        {"recall_ttl": 0},
        {"recall_ttl": -1},
        {"recall_ttl": "soon"},
        {"recall_ttl": float("nan")},
        {"recall_ttl": True},
        {"recall_ttl": timedelta(seconds=-5)},
        {"index": "yes"},
        {"index": 1},
    ],
    ids=repr,
)
async def test_bad_recall_options_are_rejected(recall, options):
    with pytest.raises(InvalidInput):
        await recall(**options)


# ---------------------------------------------------------------------------
# index=False
# ---------------------------------------------------------------------------


async def test_index_false_indexes_nothing(recall, background, raw):
    memory = await recall(index=False, keep_recent=2, summarize_batch=2)
    await background.start()
    for i in range(6):
        await memory.write([user(f"unindexed flight {i}")], session_id="s")
    await settle(memory, background)
    assert await memory.summary(session_id="s") is not None  # the jobs did run
    assert await memory.search("flight") == []
    assert await memory.search("") == []
    assert await memory.search(None, session_id="s") == []
    assert await recall_keys(raw, memory.layout.namespace_pattern()) == []


async def test_index_false_without_summaries_has_nothing_to_flush(recall, raw):
    memory = await recall(index=False)
    await memory.write([user("no worker runs and none is needed")], session_id="s")
    started = time.monotonic()
    assert await memory.flush(timeout=5) is True
    assert time.monotonic() - started < 2
    assert await memory.search("worker") == []
    assert await recall_keys(raw, memory.layout.namespace_pattern()) == []


# ---------------------------------------------------------------------------
# deletion
# ---------------------------------------------------------------------------


async def assert_no_trace(raw: Any, pattern: str, words: Iterable[bytes]) -> None:
    """No recall key matching ``pattern`` names or holds any of ``words``
    (format 2's sealed record blocks are inflated to look inside)."""
    words = list(words)
    for key in await recall_keys(raw, pattern):
        assert not any(w in key for w in words), key
        if key.endswith(b":i:docs"):
            for block, data in (await raw.hgetall(key)).items():
                for record in postings.decode_block(data):
                    assert record is None or not any(w in record for w in words), (key, block)
            continue
        for value in await key_values(raw, key):
            assert not any(w in value for w in words), (key, value[:200])


async def test_clear_of_a_session_removes_its_indexed_copies(mem, background, raw):
    doomed = [f"zqxvortex{i} alpha shared" for i in range(20)]
    for i in range(0, 20, 4):
        await mem.write([user(t) for t in doomed[i : i + 4]], session_id="doomed-sess")
    await mem.write([user("kept alpha shared")], session_id="kept-sess")
    await mem.write([user("kept beta shared")], session_id="kept-sess2")
    await settle(mem, background)
    assert len(await mem.search("alpha", limit=100)) == 21

    await mem.clear(session_id="doomed-sess")
    for query in ("alpha", "shared", "zqxvortex3", ""):
        hits = await mem.search(query, limit=1000)
        assert {h.session_id for h in hits} <= {"kept-sess", "kept-sess2"}, query
    assert await mem.search("", session_id="doomed-sess") == []
    assert contents(await mem.search("alpha")) == ["kept alpha shared"]
    stems = {t.encode() for text in doomed for t in terms(text) if t.startswith("zqx")}
    words = {t.split()[0].encode() for t in doomed} | stems
    await assert_no_trace(raw, mem.layout.user_pattern("default"), words)

    # A new session under the same id is indexed from scratch.
    await mem.write([user("reborn alpha")], session_id="doomed-sess")
    await settle(mem, background)
    assert contents(await mem.search("alpha", session_id="doomed-sess")) == ["reborn alpha"]


async def test_clear_of_a_session_purges_its_docs_and_leaves_the_others_in_format_2(
    mem, background, raw
):
    """Format 2: the clear tombstones the session at once (its dead bit, its
    ordinal mapping, the live count), then purges its docs: the lists they
    were in are rewritten without them, the lists only the other sessions
    use are untouched, and nothing is left to purge."""
    pattern = mem.layout.user_pattern("default")
    for s in ("kept", "gone"):
        await mem.write([user(f"{s} alpha one"), user(f"{s} beta two")], session_id=s)
    await settle(mem, background)
    recall = mem.layout.recall("default")
    before = await snapshot(raw, pattern)
    await mem.clear(session_id="gone")
    after = await snapshot(raw, pattern)
    assert after[recall.i_term("kept").encode()] == before[recall.i_term("kept").encode()]
    assert recall.i_term("gone").encode() not in after
    assert after[recall.i_term("alpha").encode()] != before[recall.i_term("alpha").encode()]
    assert not await raw.exists(recall.i_purge)
    assert await raw.hmget(recall.i_meta, "n", "dead") == [b"2", b"0"]
    assert await raw.bitcount(recall.i_dead) == 1  # gone's ordinal
    hits = await mem.search("alpha", limit=10)
    assert hits and all(h.session_id == "kept" for h in hits)
    await assert_no_trace(raw, pattern, [b"gone"])


async def test_clearing_the_last_session_leaves_no_recall_key(mem, background, raw):
    """As with the session indexes (test_memory_clear): the user's recall
    keys go with the user's last session."""
    await mem.write([user("first words")], session_id="one")
    await mem.write([user("second words")], session_id="two")
    await settle(mem, background)
    pattern = mem.layout.user_pattern("default")
    assert await recall_keys(raw, pattern)
    await mem.clear(session_id="one")
    await mem.clear(session_id="two")
    assert await mem.search("words") == []
    assert await keys_matching(raw, pattern) == []


async def test_clear_user_removes_every_indexed_copy(mem, background, raw):
    for uid in ("victim", "victim2", "bystander"):
        for sid in ("s1", "s2"):
            await mem.write(
                [user(f"{uid} wrote about the harbour"), assistant("noted the harbour")],
                session_id=sid,
                user_id=uid,
                tags={"t": uid},
                agent_name="a",
            )
    await settle(mem, background)
    assert len(await mem.search("harbour", user_id="victim", limit=100)) == 4
    assert await recall_keys(raw, mem.layout.user_pattern("victim"))

    await mem.clear_user("victim")
    assert await keys_matching(raw, mem.layout.user_pattern("victim")) == []
    assert await mem.search("harbour", user_id="victim") == []
    assert await mem.search("", user_id="victim") == []
    for uid in ("victim2", "bystander"):
        assert len(await mem.search("harbour", user_id=uid, limit=100)) == 4, uid

    # Writes after the clear are indexed afresh; nothing old comes back.
    await mem.write([user("victim is back at the harbour")], session_id="s1", user_id="victim")
    await settle(mem, background)
    assert contents(await mem.search("harbour", user_id="victim", limit=100)) == [
        "victim is back at the harbour"
    ]


async def test_clear_all_removes_the_index_of_the_namespace_only(
    recall, background, raw, namespace
):
    here = await recall()
    there = await recall(namespace=f"{namespace}x")
    await background.start(f"{namespace}x")
    for memory in (here, there):
        for uid in ("u1", "u2"):
            await memory.write([user("lighthouse keeper")], session_id="s", user_id=uid)
    await settle(here, background)
    await settle(there, background)
    assert await recall_keys(raw, here.layout.namespace_pattern())
    there_before = await snapshot(raw, there.layout.namespace_pattern())

    await here.clear_all()
    assert await keys_matching(raw, here.layout.namespace_pattern()) == []
    after = await snapshot(raw, there.layout.namespace_pattern())

    def settled(keys: Any) -> Any:
        # A worker may still clear the other namespace's pending marks.
        return {k: v for k, v in dict(keys).items() if not k.endswith(b":pending")}

    assert settled(after) == settled(there_before)
    for uid in ("u1", "u2"):
        assert await here.search("lighthouse", user_id=uid) == []
        assert len(await there.search("lighthouse", user_id=uid)) == 1


async def test_clear_all_of_many_large_indexes_finishes(mem, background, raw):
    """Far more recall keys than one SCAN batch (every unique word has its
    own postings key), over many users: SCAN returns a user's recall keys and
    session keys in any order and batch, and the deletion must neither hang
    nor leave anything behind."""
    users = [f"big{u}" for u in range(12)]
    for uid in users:
        for s in range(8):
            await mem.write(
                [user(f"uniq{s}w{i} and uniq{s}v{i} shared") for i in range(20)],
                session_id=f"s{s}",
                user_id=uid,
                tags={"n": str(s)},
            )
    await settle(mem, background)
    assert len(await recall_keys(raw, mem.layout.namespace_pattern())) > 3000
    try:
        await asyncio.wait_for(mem.clear_all(), 30)
    except TimeoutError:
        pytest.fail("clear_all() did not finish within 30 s")
    assert await keys_matching(raw, mem.layout.namespace_pattern()) == []
    assert await mem.search("shared", user_id="big0") == []


async def test_clear_user_of_a_large_index_finishes(mem, background, raw):
    for s in range(20):
        await mem.write(
            [user(f"uniq{s}w{i} and uniq{s}v{i} shared") for i in range(40)],
            session_id=f"s{s}",
            user_id="big",
            tags={"n": str(s)},
        )
    await settle(mem, background)
    assert len(await recall_keys(raw, mem.layout.user_pattern("big"))) > 1500
    try:
        await asyncio.wait_for(mem.clear_user("big"), 30)
    except TimeoutError:
        pytest.fail("clear_user() did not finish within 30 s")
    assert await keys_matching(raw, mem.layout.user_pattern("big")) == []
    assert await mem.search("shared", user_id="big") == []


# ---------------------------------------------------------------------------
# retention
# ---------------------------------------------------------------------------


async def test_hits_vanish_after_recall_ttl_and_keys_do_not_pile_up(recall, background, raw):
    memory = await recall(recall_ttl=1)
    await background.start()
    pattern = memory.layout.user_pattern("default")

    async def round_of_writes(tag: str) -> None:
        for i in range(20):
            await memory.write([user(f"{tag}{i} ephemeral note")], session_id=f"s{i % 4}")

    await round_of_writes("first")
    await settle(memory, background)
    assert len(await memory.search("ephemeral", limit=100)) == 20
    first_size = await element_count(raw, await recall_keys(raw, pattern))
    await asyncio.sleep(1.5)
    assert await memory.search("ephemeral", limit=100) == []
    assert await memory.search("first3") == []
    assert await memory.search("", limit=100) == []
    # The session itself keeps its own (default) ttl.
    assert len(await memory.read(session_id="s0")) == 5

    await round_of_writes("second")
    await settle(memory, background)
    hits = await memory.search("ephemeral", limit=100)
    assert sorted(contents(hits)) == sorted(f"second{i} ephemeral note" for i in range(20))
    second_size = await element_count(raw, await recall_keys(raw, pattern))
    assert second_size <= first_size * 1.25 + 5, (first_size, second_size)

    # Left alone, every recall key expires: nothing outlives the recall ttl.
    await asyncio.sleep(2.5)
    assert await memory.search("", limit=100) == []
    assert await recall_keys(raw, pattern) == []


async def test_recall_keys_carry_the_recall_ttl(recall, background, raw):
    memory = await recall(recall_ttl=timedelta(seconds=60))
    await background.start()
    await memory.write([user("timed words"), assistant("more timed words")], session_id="s")
    await settle(memory, background)
    keys = await recall_keys(raw, memory.layout.user_pattern("default"))
    assert keys
    for key in keys:
        pttl = await raw.pttl(key)
        assert 0 < pttl <= 60_000 + 60_000 // 32 + 1000, (key, pttl)


async def test_recall_ttl_defaults_to_the_session_ttl(recall, background):
    memory = await recall(ttl=1)
    await background.start()
    await memory.write([user("short lived words")], session_id="s")
    await settle(memory, background)
    assert len(await memory.search("words")) == 1
    await asyncio.sleep(1.6)
    assert await memory.read(session_id="s") == []
    assert await memory.search("words") == []
    assert await memory.search("") == []


async def test_recall_ttl_none_keeps_hits_after_the_session_expired(recall, background):
    memory = await recall(ttl=1, recall_ttl=None)
    await background.start()
    entry = await memory.write([user("durable words")], session_id="s")
    await settle(memory, background)
    await asyncio.sleep(1.6)
    assert await memory.read(session_id="s") == []
    hits = await memory.search("durable")
    assert [h.message for h in hits] == entry.messages


# ---------------------------------------------------------------------------
# summarization, exactly once, flush
# ---------------------------------------------------------------------------


async def test_messages_compacted_away_are_still_found(recall, background):
    memory = await recall(keep_recent=2, summarize_batch=2, compact=True)
    await background.start()
    written: list[Message] = []
    for i in range(16):
        entry = await memory.write(
            [user(f"kompakt{i} about the garden") if i % 2 == 0 else assistant(f"kompakt{i} ok")],
            session_id="s",
        )
        written.extend(entry.messages)
    await settle(memory, background)

    summary = await memory.summary(session_id="s")
    assert summary is not None and summary.message_count >= 12
    assert len(await memory.read(session_id="s")) <= 4  # compacted away
    for i, message in enumerate(written):
        [hit] = own_hits(await memory.search(f"kompakt{i}"), f"kompakt{i}")
        assert hit.message == message
        assert (hit.session_id, hit.created_at) == ("s", message.created_at)
    assert len(await memory.search("", limit=100)) == 16


async def test_max_messages_wins_over_recall_and_counts_what_it_trimmed_unindexed(
    recall, background, raw
):
    """The documented limit: max_messages trims on write, so a message it
    trims before the workers indexed it is never recalled; meta counts them."""
    memory = await recall(max_messages=3)
    for i in range(12):  # no worker yet: nothing is indexed
        await memory.write([user(f"trimmed{i} words")], session_id="s")
    await background.start()
    await settle(memory, background)
    meta = memory.layout.session("default", "s").meta
    assert int(await raw.hget(meta, "unindexed")) == 9
    for i in range(12):
        hits = own_hits(await memory.search(f"trimmed{i}"), f"trimmed{i}")
        assert len(hits) == (1 if i >= 9 else 0), i


async def test_max_messages_trims_only_what_was_indexed_while_workers_keep_up(
    recall, background, raw
):
    memory = await recall(max_messages=3)
    await background.start()
    written: list[Message] = []
    for i in range(8):
        entry = await memory.write([user(f"kept{i} words")], session_id="s")
        written.extend(entry.messages)
        await settle(memory, background)
    assert len(await memory.read(session_id="s")) == 3
    for i, message in enumerate(written):
        [hit] = own_hits(await memory.search(f"kept{i}"), f"kept{i}")
        assert hit.message == message
    assert await raw.hget(memory.layout.session("default", "s").meta, "unindexed") is None


async def test_a_resent_write_is_indexed_once(mem, background):
    first = await mem.write([user("uniqueword once")], session_id="s", write_id="w-1")
    again = await mem.write([user("uniqueword once")], session_id="s", write_id="w-1")
    assert [m.id for m in again.messages] == [m.id for m in first.messages]
    await settle(mem, background)
    hits = await mem.search("uniqueword")
    assert [h.message.id for h in hits] == [first.messages[0].id]


async def test_every_message_written_while_workers_run_is_indexed_exactly_once(mem, background):
    ids: dict[str, str] = {}

    async def writer(task: int) -> None:
        for i in range(25):
            n = 1 + (i % 3)
            tokens = [f"tok{task}x{i}x{j}" for j in range(n)]
            entry = await mem.write([user(t) for t in tokens], session_id="shared")
            for token, message in zip(tokens, entry.messages, strict=True):
                assert message.id is not None
                ids[token] = message.id
            if i % 5 == 0:
                await asyncio.sleep(DELAY)  # let jobs run between writes

    await asyncio.gather(*(writer(t) for t in range(8)))
    await settle(mem, background)

    async def check(token: str) -> None:
        hits = await mem.search(token, limit=20)
        assert len({key_of(h) for h in hits}) == len(hits), token
        own = own_hits(hits, token)
        assert [h.message.id for h in own] == [ids[token]], token
        assert hits[0].message.id == ids[token], token

    await asyncio.gather(*(check(token) for token in ids))
    assert len(await mem.search("", limit=1000)) == len(ids)


async def test_flush_waits_for_the_background_work(recall, background):
    memory = await recall()
    started = time.monotonic()
    assert await memory.flush(timeout=0.2) is True  # nothing written: nothing due
    assert time.monotonic() - started < 2

    await memory.write([user("pending words")], session_id="s", user_id="alice")
    started = time.monotonic()
    assert await memory.flush(timeout=0.2) is False  # no worker runs
    assert time.monotonic() - started < 2
    assert await memory.flush(user_id="alice", timeout=0.2) is False
    assert await memory.flush(user_id="bob", timeout=0.2) is True  # bob has nothing due
    assert await memory.search("pending", user_id="alice") == []

    await background.start()
    await settle(memory, background, user_id="alice")
    assert contents(await memory.search("pending", user_id="alice")) == ["pending words"]
    await settle(memory, background)


async def test_build_context_recalls_other_sessions_fenced_and_without_duplicates(mem, background):
    await mem.write([user("My passport number ends in 4471")], session_id="old")
    await mem.write([user("I renewed the passport in March")], session_id="current")
    await settle(mem, background)
    built = await mem.build_context(
        session_id="current", request="where is my passport?", max_tokens=2000, recall=3
    )
    assert built.recalled_messages == 1
    memory_message = built.messages[0]
    assert memory_message.role == "system"
    assert "recalled from other conversations" in memory_message.content
    assert "| " in memory_message.content and "ends in 4471" in memory_message.content
    # The session's own message is in the history, never recalled again.
    assert memory_message.content.count("renewed the passport") == 0
    assert [m.content for m in built.messages[1:-1]] == ["I renewed the passport in March"]
    without = await mem.build_context(
        session_id="current", request="where is my passport?", max_tokens=2000
    )
    assert without.recalled_messages == 0
    tight = await mem.build_context(
        session_id="current", request="where is my passport?", max_tokens=40, recall=3
    )
    assert tight.token_count <= 40


async def test_a_write_dated_earlier_is_searched_by_that_date(mem, background):
    """History imported with ``created_at``: the hit carries that time, the
    date's words find it and ``since``/``until`` filter on it."""
    may = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    june = datetime(2023, 6, 20, 9, 0, tzinfo=UTC)
    await mem.write([user("we adopted a puppy")], session_id="old", created_at=may)
    await mem.write([user("the puppy learned to sit")], session_id="later", created_at=june)
    await mem.write([user("the puppy is grown now")], session_id="today")
    await settle(mem, background)

    hits = await mem.search("puppy", limit=10)
    assert {h.session_id: h.created_at for h in hits if h.session_id != "today"} == {
        "old": may,
        "later": june,
    }
    assert [h.session_id for h in await mem.search("puppy May 2023")][:1] == ["old"]
    in_june = await mem.search("puppy", since=datetime(2023, 6, 1, tzinfo=UTC))
    assert sorted(h.session_id for h in in_june) == ["later", "today"]
    before = await mem.search("puppy", until=datetime(2023, 6, 1, tzinfo=UTC))
    assert [h.session_id for h in before] == ["old"]
