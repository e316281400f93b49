"""Recall under faults: real worker processes (``arq workers.WorkerSettings``)
on the session's real Redis, killed, frozen and raced.

The promise checked throughout: every message written is indexed exactly
once. Each message carries a unique token (``tok<session>x<index>``); after
``flush()`` a search for the token finds exactly one message holding it, with
the id the write returned, and no message twice. (The ranking lends a message
a share of its predecessor's words, so the next message of the session may
come up too, further down: it does not hold the token and is not counted.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import msgpack
import pytest
import pytest_asyncio
from helpers import client_kill_storm, key_values, keys_matching, user
from worker_support import WorkerPool, WorkerProcess, eventually, wait_ready, worker_env

from redismem import Memory
from redismem.core import codec
from redismem.core.backend import backend_of
from redismem.recall import postings

pytestmark = pytest.mark.timeout(300)

DELAY = 0.05
FLUSH_TIMEOUT = 120.0

Expected = dict[str, tuple[str, str]]  # token -> (session id, message id)


@pytest_asyncio.fixture(loop_scope="function")
async def raw(raw_factory: Any, redis_url: str) -> Any:
    """A raw client on the real Redis (the workers' backend)."""
    return await raw_factory(redis_url)


@pytest_asyncio.fixture(loop_scope="function")
async def make(
    memory_factory: Callable[..., Awaitable[Memory]], redis_url: str, queue_name: str
) -> Callable[..., Awaitable[Memory]]:
    async def build(**options: Any) -> Memory:
        options.setdefault("queue_name", queue_name)
        options.setdefault("summarize_delay", DELAY)
        return await memory_factory(redis_url, **options)

    return build


def env_of(redis_url: str, namespace: str, queue_name: str) -> dict[str, str]:
    return worker_env(redis_url, namespace, queue_name, SUMMARIZER="truncate")


async def start(workers: WorkerPool, raw: Any, env: dict[str, str], name: str) -> WorkerProcess:
    worker = workers.start(env, name=name)
    await wait_ready(raw, worker)
    return worker


def token(session: int, i: int) -> str:
    return f"tok{session}x{i}"


async def write_backlog(
    memory: Memory, sessions: int, per_session: int, *, batch: int = 50, user_id: str = "default"
) -> Expected:
    """``per_session`` messages in each of ``sessions`` sessions, written in
    batches of ``batch`` messages, the sessions concurrently."""
    expected: Expected = {}

    async def one(s: int) -> None:
        sid = f"sess{s}"
        for lo in range(0, per_session, batch):
            tokens = [token(s, i) for i in range(lo, min(per_session, lo + batch))]
            entry = await memory.write(
                [user(f"{t} some words about item {i % 17}") for i, t in enumerate(tokens)],
                session_id=sid,
                user_id=user_id,
            )
            for t, message in zip(tokens, entry.messages, strict=True):
                assert message.id is not None
                expected[t] = (sid, message.id)

    await asyncio.gather(*(one(s) for s in range(sessions)))
    return expected


async def settle(memory: Memory, workers: WorkerPool, **kwargs: Any) -> None:
    done = await memory.flush(timeout=FLUSH_TIMEOUT, **kwargs)
    assert done is True, f"flush() did not finish within {FLUSH_TIMEOUT} s\n{workers.logs()}"


async def queue_idle(raw: Any, queue_name: str, namespace: str) -> bool:
    """No job of the namespace waiting or running."""
    queued = [j for j in await raw.zrange(queue_name, 0, -1) if j.startswith(b"sum:")]
    running = await keys_matching(raw, f"arq:in-progress:sum:{namespace}:*")
    return not queued and not running


async def assert_exactly_once(
    memory: Memory, expected: Expected, *, user_id: str = "default"
) -> None:
    """Each token: exactly one hit whose message holds it, the right one."""
    problems: list[str] = []
    tokens = sorted(expected)

    async def check(t: str) -> None:
        hits = await memory.search(t, user_id=user_id, limit=10)
        keys = [(h.session_id, h.message.id) for h in hits]
        own = [k for k, h in zip(keys, hits, strict=True) if t in h.message.content.split()]
        if len(set(keys)) != len(keys):
            problems.append(f"{t}: a message twice: {keys}")
        if own != [expected[t]]:
            problems.append(f"{t}: expected {expected[t]}, own hits {own}")

    for lo in range(0, len(tokens), 200):
        await asyncio.gather(*(check(t) for t in tokens[lo : lo + 200]))
    assert not problems, f"{len(problems)} of {len(tokens)} tokens wrong, e.g.:\n" + "\n".join(
        problems[:20]
    )
    await assert_indexed_once(memory.redis, memory, expected, user_id=user_id)


async def live_docs(raw: Any, memory: Memory, user_id: str = "default") -> list[tuple[str, str]]:
    """``(session id, message id)`` of every live doc of the user's format-2
    index (docs of cleared sessions left out), read from the keys: the doc
    table, the records not sealed yet and the sealed blocks."""
    recall = memory.layout.recall(user_id)
    last = int(await raw.hget(recall.i_meta, "next") or 0)
    dead = await raw.get(recall.i_dead) or b""
    unsealed = await raw.hgetall(recall.i_rec)
    blocks = await raw.hgetall(recall.i_docs)
    found = []
    for docid in range(1, last + 1):
        chunk, at = postings.slot_at(docid)
        table = await raw.getrange(recall.i_doc_table(chunk), at, at + postings.SLOT - 1)
        slot = postings.decode_slot(docid, table)
        if slot is None:
            continue  # purged: its session was cleared (recall.purge)
        if slot.session // 8 < len(dead) and dead[slot.session // 8] & (0x80 >> slot.session % 8):
            continue
        record = unsealed.get(str(docid).encode())
        if record is None:
            block = blocks[str(postings.block_of(docid)).encode()]
            record = postings.decode_block(block)[docid % postings.BLOCK]
        assert record is not None, f"docid {docid} has no record"
        _role, _names, payload = record.split(b"|", 2)
        _version, session_id, seq, *_rest = msgpack.unpackb(payload, raw=False)
        found.append((session_id, codec.message_id(seq)))
    return found


async def assert_indexed_once(
    raw: Any, memory: Memory, expected: Expected, *, user_id: str = "default"
) -> None:
    """Read from the format-2 keys, not through search: every message
    expected is a live doc exactly once, and no other message is."""
    docs = await live_docs(raw, memory, user_id)
    assert len(docs) == len(set(docs)), "a message indexed twice"
    assert sorted(docs) == sorted(expected.values())
    recall = memory.layout.recall(user_id)
    assert int(await raw.hget(recall.i_meta, "n")) == len(docs)


async def sessions_with_hits(memory: Memory, sessions: Iterable[str]) -> int:
    found = await asyncio.gather(*(memory.search("", session_id=s, limit=1) for s in sessions))
    return sum(1 for hits in found if hits)


# ---------------------------------------------------------------------------


async def test_worker_killed_mid_indexing_of_a_large_backlog(
    make, raw, redis_url, namespace, queue_name, workers
):
    sessions, per_session = 30, 200
    memory = await make()
    expected = await write_backlog(memory, sessions, per_session)  # no worker yet
    assert len(expected) == sessions * per_session
    env = env_of(redis_url, namespace, queue_name)

    first = await start(workers, raw, env, "first")

    async def some_indexed() -> bool:
        return bool(await memory.search("", limit=1))

    await eventually(some_indexed, step=0.01, what="the first hit", describe=workers.logs)
    in_progress = await keys_matching(raw, f"arq:in-progress:sum:{namespace}:*")
    first.kill()
    assert not first.alive
    assert in_progress, "the worker was not mid-job when killed"
    names = [f"sess{s}" for s in range(sessions)]
    done_at_kill = await sessions_with_hits(memory, names)
    assert 0 < done_at_kill < sessions, done_at_kill
    assert await memory.flush(timeout=0.3) is False  # work is left, no worker runs

    # arq re-runs a dead worker's job once its in-progress key expires (the
    # job timeout + 10 s); simulate that expiry instead of waiting for it.
    left = await keys_matching(raw, f"arq:in-progress:sum:{namespace}:*")
    if left:
        await raw.delete(*left)
    await start(workers, raw, env, "second")
    await settle(memory, workers)
    await assert_exactly_once(memory, expected)
    assert await sessions_with_hits(memory, names) == sessions
    assert len(await memory.search("", limit=1000)) == 1000


async def test_two_workers_and_duplicate_jobs_index_each_message_once(
    make, raw, redis_url, namespace, queue_name, workers
):
    memory = await make()
    enqueue = memory._enqueue_summary
    duplicates: list[Any] = []

    async def twice(*args: Any) -> None:  # (user, session, episode, settings)
        # Recorded before any await: the enqueue runs in the write's
        # background task, which under load may not finish before the writes.
        again = (args[0], args[1], f"{args[2]}-dup", *args[3:])
        duplicates.append(again)
        await enqueue(*args)
        await enqueue(*again)

    memory._enqueue_summary = twice  # type: ignore[method-assign]
    env = env_of(redis_url, namespace, queue_name)
    pair = [await start(workers, raw, env, "a"), await start(workers, raw, env, "b")]

    # Writes go on while both workers run each session's job twice.
    expected = await write_backlog(memory, 30, 200, batch=10)
    await settle(memory, workers)
    assert duplicates
    await eventually(
        lambda: queue_idle(raw, queue_name, namespace),
        within=60,
        what="the duplicate jobs to finish",
        describe=workers.logs,
    )
    await assert_exactly_once(memory, expected)
    assert all(w.alive for w in pair)
    assert all("summarize_session(" in w.log() for w in pair), workers.logs()


async def test_a_frozen_worker_resuming_a_stale_pass_adds_nothing(
    make, raw, redis_url, namespace, queue_name, workers
):
    memory = await make()
    enqueue = memory._enqueue_summary
    recorded: list[tuple[Any, ...]] = []

    async def hold(*args: Any) -> None:
        recorded.append(args)

    memory._enqueue_summary = hold  # type: ignore[method-assign]
    expected = await write_backlog(memory, 12, 400, batch=100)
    assert len(recorded) == 12  # one job per session's pending episode
    env = env_of(redis_url, namespace, queue_name)
    a = await start(workers, raw, env, "a")

    for args in recorded:  # episode "a": taken by worker a
        await enqueue(*args)

    async def a_busy() -> bool:
        return bool(await keys_matching(raw, f"arq:in-progress:sum:{namespace}:*"))

    await eventually(a_busy, step=0.005, what="worker a to take jobs", describe=workers.logs)
    a.pause()  # frozen mid-pass, holding its jobs
    b = await start(workers, raw, env, "b")
    try:
        for args in recorded:  # the same sessions again, under new episodes
            await enqueue(args[0], args[1], f"{args[2]}-again", *args[3:])
        await settle(memory, workers)
        await assert_exactly_once(memory, expected)
    finally:
        a.resume()
    # Worker a's passes now finish against a watermark that moved on.
    await eventually(
        lambda: queue_idle(raw, queue_name, namespace),
        within=60,
        what="worker a's stale jobs to end",
        describe=workers.logs,
    )
    await settle(memory, workers)
    await assert_exactly_once(memory, expected)
    assert a.alive and b.alive


async def test_aggressive_compaction_never_removes_a_message_before_it_is_indexed(
    make, raw, redis_url, namespace, queue_name, workers
):
    memory = await make(keep_recent=0, summarize_batch=1, compact=True)
    env = env_of(redis_url, namespace, queue_name)
    await start(workers, raw, env, "a")
    await start(workers, raw, env, "b")
    expected: Expected = {}

    async def one(s: int) -> None:
        sid = f"sess{s}"
        i = 0
        while i < 100:
            n = 1 + (i * 7 + s) % 5
            tokens = [token(s, j) for j in range(i, min(100, i + n))]
            entry = await memory.write([user(f"{t} notes") for t in tokens], session_id=sid)
            for t, message in zip(tokens, entry.messages, strict=True):
                assert message.id is not None
                expected[t] = (sid, message.id)
            i += len(tokens)
            if s % 3 == 0:
                await asyncio.sleep(0.01)  # some sessions get summarized mid-stream

    await asyncio.gather(*(one(s) for s in range(10)))
    await settle(memory, workers)
    compacted = 0
    for s in range(10):
        summary = await memory.summary(session_id=f"sess{s}")
        stored = len(await memory.read(session_id=f"sess{s}"))
        summarized = summary.message_count if summary is not None else 0
        assert summarized + stored == 100, (s, summarized, stored)
        compacted += summarized
    assert compacted >= 500, compacted  # most messages left their sessions
    await assert_exactly_once(memory, expected)


async def test_clear_racing_the_indexer_leaves_nothing_of_the_session(
    make, raw, redis_url, namespace, queue_name, workers
):
    memory = await make()
    expected = await write_backlog(memory, 6, 600, batch=100)
    env = env_of(redis_url, namespace, queue_name)
    await start(workers, raw, env, "a")

    async def victim_started() -> bool:
        return bool(await memory.search("", session_id="sess0", limit=1))

    await eventually(victim_started, step=0.005, what="sess0 to be partly indexed")
    await memory.clear(session_id="sess0")
    await settle(memory, workers)
    await eventually(lambda: queue_idle(raw, queue_name, namespace), within=60, what="idle queue")

    assert await memory.search("", session_id="sess0") == []
    for t in ("tok0x5", "tok0x77", "tok0x599"):
        assert [h for h in await memory.search(t, limit=50) if h.session_id == "sess0"] == []
    # No recall key names or holds anything of sess0 (its tokens are
    # "tok0x..."; sealed record blocks inflated), and no live doc is of sess0
    # (assert_exactly_once below): the docs committed before the clear were
    # purged, none was committed after.
    for key in await keys_matching(raw, memory.layout.user_pattern("default")):
        assert b"tok0x" not in key, key
        if key.endswith(b":i:docs"):
            for data in (await raw.hgetall(key)).values():
                for record in postings.decode_block(data):
                    assert record is None or b"tok0x" not in record, key
            continue
        for value in await key_values(raw, key):
            assert b"tok0x" not in value, (key, value[:200])
    recall = memory.layout.recall("default")
    assert await raw.hget(recall.i_meta, "v") == b"2"
    assert await raw.hget(recall.i_sess, "sess0") is None
    await assert_exactly_once(memory, {t: v for t, v in expected.items() if v[0] != "sess0"})


async def test_writes_keep_flowing_while_the_only_worker_is_restarted(
    make, raw, redis_url, namespace, queue_name, workers
):
    memory = await make()
    env = env_of(redis_url, namespace, queue_name)
    worker = await start(workers, raw, env, "w0")
    expected: Expected = {}
    stop = asyncio.Event()

    async def writer(s: int) -> None:
        i = 0
        while not stop.is_set():
            t = token(s, i)
            entry = await memory.write([user(f"{t} live")], session_id=f"live{s}")
            assert entry.messages[0].id is not None
            expected[t] = (f"live{s}", entry.messages[0].id)
            i += 1
            await asyncio.sleep(0.005)

    tasks = [asyncio.create_task(writer(s)) for s in range(4)]
    try:
        for round_ in range(3):
            await asyncio.sleep(0.6)
            worker.kill()
            left = await keys_matching(raw, f"arq:in-progress:sum:{namespace}:*")
            if left:
                await raw.delete(*left)
            await asyncio.sleep(0.2)
            worker = await start(workers, raw, env, f"w{round_ + 1}")
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    started = time.monotonic()
    await settle(memory, workers)
    assert time.monotonic() - started < FLUSH_TIMEOUT
    assert len(expected) > 100
    await assert_exactly_once(memory, expected)


async def test_index_commits_under_a_client_kill_storm_are_applied_once(
    redis_server_factory, raw_factory, memory_factory, namespace, queue_name, workers
):
    """redis-py re-sends a command whose connection was reset: a re-sent index
    commit must find its watermark moved and add nothing."""
    server = redis_server_factory()
    raw = await raw_factory(server.url)
    memory = await memory_factory(
        server.url, queue_name=queue_name, summarize_delay=DELAY, socket_timeout=1.0, retries=20
    )
    expected = await write_backlog(memory, 12, 120, batch=10)
    await start(workers, raw, env_of(server.url, namespace, queue_name), "storm")
    async with client_kill_storm(server.url, every=0.03) as kills:
        await asyncio.sleep(3.0)
    assert kills[0] > 10
    await settle(memory, workers)
    await assert_exactly_once(memory, expected)


async def test_a_purge_the_clearing_client_never_ran_is_finished_by_a_worker(
    make, raw, redis_url, namespace, queue_name, workers
):
    """The client dies right after the clear script (its purge never runs):
    the session is unreachable at once, and the next job of any session of
    the user purges it (recall.purge), so no key keeps a word of it."""
    memory = await make()
    expected = await write_backlog(memory, 2, 150, batch=50)
    await start(workers, raw, env_of(redis_url, namespace, queue_name), "a")
    await settle(memory, workers)
    backend = backend_of(memory)
    recall = memory.layout.recall("default")
    keys = memory.layout.session("default", "sess0")
    await backend.scripts.clear(keys, recall, session_id="sess0", grave="f:x:sess0:dead")
    assert await raw.scard(recall.i_purge) == 1
    assert [h for h in await memory.search("tok0x7", limit=50) if h.session_id == "sess0"] == []

    # A session the workers never saw: its job starts after the clear.
    entry = await memory.write([user("tokextra one more")], session_id="sess9")
    await settle(memory, workers)

    async def purged() -> bool:
        return not await raw.exists(recall.i_purge)

    await eventually(purged, within=60, what="the worker's purge")
    for key in await keys_matching(raw, memory.layout.user_pattern("default")):
        assert b"tok0x" not in key, key
        if key.endswith(b":i:docs"):
            for data in (await raw.hgetall(key)).values():
                assert all(r is None or b"tok0x" not in r for r in postings.decode_block(data))
            continue
        for value in await key_values(raw, key):
            assert b"tok0x" not in value, (key, value[:200])
    kept = {t: v for t, v in expected.items() if v[0] == "sess1"}
    kept["tokextra"] = ("sess9", entry.messages[0].id)
    await assert_exactly_once(memory, kept)
